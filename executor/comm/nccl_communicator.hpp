// The Communicator over NCCL, for ranks that each drive one GPU: every buffer
// pointer passed to it is a DEVICE pointer on the communicator's device()
// (cudaMalloc'd or from CudaBackend), never host memory. Counts, in-place
// forms and group order are communicator.hpp's.
//
// Why it looks as it does:
//   * NCCL has no launcher of its own: a communicator is created from a
//     bootstrap Communicator on host memory (the MPI world, or a group of one
//     for a single rank). Rank 0 makes an ncclUniqueId and broadcasts it over
//     the bootstrap; every rank then joins with ncclCommInitRankConfig.
//   * Every communicator is non-blocking (ncclConfig_t::blocking = 0): init,
//     split and each enqueue may return ncclInProgress, and then the host
//     polls ncclCommGetAsyncError. Nothing here ever blocks inside NCCL or
//     CUDA, so the watchdog (timeout(), shared with the groups split from a
//     world) sees every wait: past the deadline it calls ncclCommAbort and,
//     by default, ends the job with the MPI communicator's wording and status
//     (3); set_timeout_action(throw_error) throws CommError instead (tests).
//   * Operations are enqueued on the communicator's own stream, in call
//     order. Blocking calls wait for that stream (cudaStreamQuery); requests
//     record a cudaEvent and wait for it (cudaEventQuery). The stream does
//     not wait for other streams by itself: a caller whose data comes from
//     a compute stream calls wait_for(compute_stream) first.
//   * split() is ncclCommSplit (NCCL >= 2.18), whose order (key, then parent
//     rank) is MPI_Comm_split's; with an older NCCL it splits the bootstrap
//     group and bootstraps a new unique id over it.
//   * NCCL has no tags: send/recv between two ranks match in call order; the
//     tag only appears in messages. A send or receive to oneself is refused
//     (std::logic_error): apart, on one stream, the send would wait forever
//     for the receive behind it (all_to_all pairs them in one group call).
//   * Several ranks on one GPU cannot share an NCCL communicator (NCCL
//     refuses duplicate devices); such jobs use the MPI communicator staged
//     through host memory instead (staged_communicator.hpp).
//
// A GPU mesh from the MPI world (docs/executor-parallel.md, "NCCL communicator"):
//   auto world = open_world(&argc, &argv);                          // MPI, host memory
//   auto gpu_world = NcclCommunicator::create(*world.value, local_rank, "world");
//   auto groups = MeshCommunicators::create(*gpu_world, mesh);      // ncclCommSplit per axis
// `world` must outlive `gpu_world` (the bootstrap of the older-NCCL split).
//
// defines: TimeoutAction, CommError, NcclWatchdogState, NcclCommunicator, nccl_watchdog_exit_status
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>

#include "executor/comm/communicator.hpp"

namespace meshplan::exec::comm {

// The exit status of a job the watchdog stopped: the MPI communicator's watchdog_exit_status.
inline constexpr int nccl_watchdog_exit_status = 3;

// What the watchdog does once ncclCommAbort has returned: print one line and
// end the process (mpirun then ends the job), or throw CommError.
enum class TimeoutAction : std::uint8_t { end_job, throw_error };

// A timed-out or failed NCCL operation; the communicator is aborted and refuses later calls.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Shared by a communicator and every group split from it.
struct NcclWatchdogState {
  std::atomic<double> timeout_s{default_timeout.count()};
  std::atomic<std::int64_t> step{-1};
  std::atomic<TimeoutAction> action{TimeoutAction::end_job};
  int bootstrap_rank = 0;  // this process's rank in the bootstrap group, for messages
};

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap` (host memory; every member calls it): one
  // NCCL rank per bootstrap rank, in its order, on CUDA device `device`
  // (made current). The name defaults to the bootstrap's; the watchdog
  // starts with the bootstrap's timeout. `bootstrap` must outlive the result.
  static std::unique_ptr<NcclCommunicator> create(Communicator& bootstrap, int device, const std::string& name = "");
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override;

  void all_reduce(void* buffer, std::int64_t count, DataType type, ReduceOp op) override;
  void all_gather(const void* send, void* recv, std::int64_t count, DataType type) override;
  void reduce_scatter(const void* send, void* recv, std::int64_t count, DataType type, ReduceOp op) override;
  void broadcast(void* buffer, std::int64_t count, DataType type, int root) override;
  void all_to_all(const void* send, void* recv, std::int64_t count, DataType type) override;
  void send(const void* buffer, std::int64_t count, DataType type, int peer, int tag) override;
  void recv(void* buffer, std::int64_t count, DataType type, int peer, int tag) override;
  std::unique_ptr<Request> isend(const void* buffer, std::int64_t count, DataType type, int peer, int tag) override;
  std::unique_ptr<Request> irecv(void* buffer, std::int64_t count, DataType type, int peer, int tag) override;
  std::unique_ptr<Request> iall_reduce(void* buffer, std::int64_t count, DataType type, ReduceOp op) override;
  std::unique_ptr<Request> iall_gather(const void* send, void* recv, std::int64_t count, DataType type) override;
  std::unique_ptr<Request> ireduce_scatter(const void* send, void* recv, std::int64_t count, DataType type,
                                           ReduceOp op) override;
  // An all-reduce of one int on the stream, waited for (NCCL has no barrier).
  void barrier() override;

  // ncclCommSplit (or the bootstrap's split with NCCL < 2.18); collective over this group.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

  void set_timeout(std::chrono::duration<double> timeout) override;
  std::chrono::duration<double> timeout() const override;
  void set_step(std::int64_t step) override;
  // Shared, like the timeout, with every group split from this one.
  void set_timeout_action(TimeoutAction action);

  int device() const;
  cudaStream_t stream() const;
  // Work enqueued here from now on starts after everything enqueued on
  // `producer` so far (an event recorded there, waited for here); the host does not wait.
  void wait_for(cudaStream_t producer);

  struct Channel;  // the ncclComm_t, its stream and device, shared with requests (nccl_communicator.cpp)

 private:
  NcclCommunicator(std::shared_ptr<Channel> channel, Communicator* bootstrap,
                   std::unique_ptr<Communicator> owned_bootstrap);
  static std::unique_ptr<NcclCommunicator> bootstrap_new(Communicator& bootstrap, int device, const std::string& name,
                                                         std::shared_ptr<NcclWatchdogState> state,
                                                         std::unique_ptr<Communicator> owned_bootstrap);

  std::shared_ptr<Channel> channel_;
  // The host group the unique id travelled over: borrowed for a world, owned
  // by groups split with NCCL < 2.18, null for groups made by ncclCommSplit.
  Communicator* bootstrap_ = nullptr;
  std::unique_ptr<Communicator> owned_bootstrap_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace meshplan::exec::comm
