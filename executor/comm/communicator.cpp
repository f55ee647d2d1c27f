// The element types' names and sizes, and the group of one rank. The self
// group is what the executor uses without MPI, and what a mesh axis of size 1
// resolves to: collectives over one rank are copies or nothing, so layers call
// them unconditionally instead of testing the group size.
//
// defines: size_of, to_string (DataType), make_self_communicator
#include "executor/comm/communicator.hpp"

#include <cstring>
#include <stdexcept>

namespace meshplan::exec::comm {

std::size_t size_of(DataType type) {
  switch (type) {
    case DataType::f32: return 4;
    case DataType::f64: return 8;
    case DataType::i32: return 4;
    case DataType::i64: return 8;
    case DataType::u8: return 1;
  }
  throw std::logic_error("size_of: unknown DataType");
}

std::string to_string(DataType type) {
  switch (type) {
    case DataType::f32: return "f32";
    case DataType::f64: return "f64";
    case DataType::i32: return "i32";
    case DataType::i64: return "i64";
    case DataType::u8: return "u8";
  }
  throw std::logic_error("to_string: unknown DataType");
}

std::string to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
  }
  throw std::logic_error("to_string: unknown ReduceOp");
}

namespace {

// A request that was complete when it was made.
class DoneRequest final : public Request {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(std::string name) : name_(std::move(name)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }

  void all_reduce(void*, std::int64_t count, DataType, ReduceOp) override { check_count(count); }
  void all_gather(const void* send, void* recv, std::int64_t count, DataType type) override {
    copy(send, recv, count, type);
  }
  void reduce_scatter(const void* send, void* recv, std::int64_t count, DataType type, ReduceOp) override {
    copy(send, recv, count, type);
  }
  void broadcast(void*, std::int64_t count, DataType, int root) override {
    check_count(count);
    if (root != 0) throw std::logic_error("broadcast on \"" + name_ + "\" (one rank) from root " + std::to_string(root));
  }
  void all_to_all(const void* send, void* recv, std::int64_t count, DataType type) override {
    copy(send, recv, count, type);
  }
  void send(const void*, std::int64_t, DataType, int peer, int) override { to_self("send", peer); }
  void recv(void*, std::int64_t, DataType, int peer, int) override { to_self("recv", peer); }
  std::unique_ptr<Request> isend(const void*, std::int64_t, DataType, int peer, int) override {
    to_self("isend", peer);
    return nullptr;
  }
  std::unique_ptr<Request> irecv(void*, std::int64_t, DataType, int peer, int) override {
    to_self("irecv", peer);
    return nullptr;
  }
  std::unique_ptr<Request> iall_reduce(void*, std::int64_t count, DataType, ReduceOp) override {
    check_count(count);
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<Request> iall_gather(const void* send, void* recv, std::int64_t count, DataType type) override {
    copy(send, recv, count, type);
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<Request> ireduce_scatter(const void* send, void* recv, std::int64_t count, DataType type,
                                           ReduceOp) override {
    copy(send, recv, count, type);
    return std::make_unique<DoneRequest>();
  }
  void barrier() override {}

  std::unique_ptr<Communicator> split(int, int, const std::string& name) override {
    auto group = std::make_unique<SelfCommunicator>(name);
    group->timeout_ = timeout_;
    return group;
  }

  void set_timeout(std::chrono::duration<double> timeout) override { timeout_ = timeout; }
  std::chrono::duration<double> timeout() const override { return timeout_; }
  void set_step(std::int64_t) override {}

 private:
  static void check_count(std::int64_t count) {
    if (count < 0) throw std::logic_error("collective with a negative count " + std::to_string(count));
  }
  static void copy(const void* send, void* recv, std::int64_t count, DataType type) {
    check_count(count);
    if (send != recv && count > 0) std::memmove(recv, send, static_cast<std::size_t>(count) * size_of(type));
  }
  // A point-to-point transfer in a group of one can only name this rank,
  // and a blocking send to oneself would deadlock: a programming error.
  void to_self(const char* operation, int peer) const {
    throw std::logic_error(std::string(operation) + " to peer " + std::to_string(peer) + " in \"" + name_ +
                           "\", a group of one rank: there is no other rank to talk to");
  }

  std::string name_;
  std::chrono::duration<double> timeout_{default_timeout};
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator(const std::string& name) {
  return std::make_unique<SelfCommunicator>(name);
}

}  // namespace meshplan::exec::comm
