// The executor's one view of the other ranks: a group of processes that run
// collectives and point-to-point transfers on host buffers. CPU ranks use the
// MPI implementation (mpi_communicator.hpp); a GPU backend implements the same
// interface over NCCL later, so parallel layers and the trainer never name MPI.
//
// Conventions (those of MPI and NCCL):
//   * every collective is called by every rank of the group, in the same
//     order, with the same count and type; buffers are contiguous;
//   * counts are elements; all_gather / reduce_scatter / all_to_all counts are
//     per rank (the full buffer holds size() x count elements, rank r's block at r x count);
//   * all_reduce, broadcast run in place; all_gather's send block may alias
//     recv + rank() x count (MPI_IN_PLACE semantics are the implementation's job);
//   * a rank's position in a group is rank(); groups made by split() order
//     their members by key, then by parent rank.
//
// Every blocking call waits at most timeout() (the watchdog, --comm-timeout):
// past it the implementation reports which operation, on which group (its
// name(), e.g. "tp"), at which step (set_step), and ends the whole job with a
// non-zero status instead of hanging.
//
// defines: DataType, ReduceOp, Request, Communicator, data_type_of, make_self_communicator
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>

namespace meshplan::exec::comm {

enum class DataType : std::uint8_t { f32, f64, i32, i64, u8 };
enum class ReduceOp : std::uint8_t { sum, max };

std::size_t size_of(DataType type);
std::string to_string(DataType type);  // "f32", "f64", "i32", "i64", "u8"
std::string to_string(ReduceOp op);    // "sum", "max"

// The watchdog's default wait before a stuck operation ends the job (--comm-timeout).
inline constexpr std::chrono::duration<double> default_timeout{300.0};
// The longest wait a user may set (--comm-timeout): 1e7 s, 116 days. Waits are kept as int64
// nanoseconds, which 9.2e9 s (and inf) overflowed into an immediate timeout.
inline constexpr double kMaxTimeoutSeconds = 1e7;
// "" when `seconds` is a usable timeout, else why not.
inline std::string timeout_problem(double seconds) {
  if (!(seconds > 0)) return "must be positive (seconds)";
  if (seconds > kMaxTimeoutSeconds) return "must be at most 1e7 s (116 days); a collective that waits longer has hung";
  return "";
}

template <typename T>
constexpr DataType data_type_of() {
  if constexpr (std::is_same_v<T, float>) return DataType::f32;
  else if constexpr (std::is_same_v<T, double>) return DataType::f64;
  else if constexpr (std::is_same_v<T, std::int32_t>) return DataType::i32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return DataType::i64;
  else {
    static_assert(std::is_same_v<T, std::uint8_t>, "unsupported element type");
    return DataType::u8;
  }
}

// A non-blocking operation in flight. wait() blocks (under the watchdog);
// test() polls. Destroying an unfinished request waits for it.
class Request {
 public:
  virtual ~Request() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The group's name in messages: "world", or the mesh axis ("dp", "tp", "pp", ...).
  virtual const std::string& name() const = 0;

  virtual void all_reduce(void* buffer, std::int64_t count, DataType type, ReduceOp op) = 0;
  virtual void all_gather(const void* send, void* recv, std::int64_t count, DataType type) = 0;
  virtual void reduce_scatter(const void* send, void* recv, std::int64_t count, DataType type, ReduceOp op) = 0;
  virtual void broadcast(void* buffer, std::int64_t count, DataType type, int root) = 0;
  virtual void all_to_all(const void* send, void* recv, std::int64_t count, DataType type) = 0;
  virtual void send(const void* buffer, std::int64_t count, DataType type, int peer, int tag) = 0;
  virtual void recv(void* buffer, std::int64_t count, DataType type, int peer, int tag) = 0;
  virtual std::unique_ptr<Request> isend(const void* buffer, std::int64_t count, DataType type, int peer,
                                         int tag) = 0;
  virtual std::unique_ptr<Request> irecv(void* buffer, std::int64_t count, DataType type, int peer, int tag) = 0;
  // Started now, completed by wait(): data-parallel gradient buckets overlap the backward pass with it.
  virtual std::unique_ptr<Request> iall_reduce(void* buffer, std::int64_t count, DataType type, ReduceOp op) = 0;
  // The same for FSDP: gather the next layer's weights while this one computes,
  // reduce-scatter a layer's gradients while the backward pass goes on.
  // In-place forms as for all_gather / reduce_scatter; buffers stay untouched until wait().
  virtual std::unique_ptr<Request> iall_gather(const void* send, void* recv, std::int64_t count, DataType type) = 0;
  virtual std::unique_ptr<Request> ireduce_scatter(const void* send, void* recv, std::int64_t count, DataType type,
                                                   ReduceOp op) = 0;
  virtual void barrier() = 0;

  // The members of this group with the same `color`, ordered by `key`, named `name`.
  // Collective over this group.
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& name) = 0;

  // Watchdog settings, shared by the groups split from this one.
  virtual void set_timeout(std::chrono::duration<double> timeout) = 0;
  virtual std::chrono::duration<double> timeout() const = 0;
  // The training step reported if an operation times out (-1: none yet).
  virtual void set_step(std::int64_t step) = 0;

  // Typed conveniences.
  template <typename T>
  void all_reduce(std::span<T> buffer, ReduceOp op = ReduceOp::sum) {
    all_reduce(buffer.data(), std::ssize(buffer), data_type_of<std::remove_const_t<T>>(), op);
  }
  template <typename T>
  void broadcast(std::span<T> buffer, int root) {
    broadcast(buffer.data(), std::ssize(buffer), data_type_of<T>(), root);
  }
};

// A group of one rank: collectives copy or do nothing; send/recv to itself
// are errors. Used when the executor runs without MPI (one rank).
std::unique_ptr<Communicator> make_self_communicator(const std::string& name = "world");

}  // namespace meshplan::exec::comm
