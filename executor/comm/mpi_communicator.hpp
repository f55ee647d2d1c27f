// The Communicator over MPI: CPU ranks are processes started by mpirun (or
// srun, or `meshplan launch`), and every group is an MPI communicator.
//
// Why every blocking call is a non-blocking MPI call plus a polling loop: a
// blocking MPI_Allreduce that waits for a dead or stuck rank waits forever,
// and a training job that hangs silently for hours is worse than one that
// stops. Polling with MPI_Test against a deadline (the watchdog, timeout())
// lets a rank notice, print which operation on which group at which step it
// was waiting for, and end the whole job with MPI_Abort. The loop spins
// 200 us (small messages complete within microseconds; Open MPI progresses
// non-blocking operations only inside MPI calls), then yields the core until
// 10 ms, then sleeps 50-200 us between polls, so ranks waiting for a pipeline
// stage leave the cores to working ones when ranks outnumber cores.
//
// Open MPI is initialised at MPI_THREAD_FUNNELED: only the thread that called
// mpi_world() makes MPI calls (the kernels' OpenBLAS/OpenMP threads never do).
//
// defines: WatchdogState, MpiCommunicator, mpi_world, watchdog_exit_status
#pragma once

#include <mpi.h>

#include <atomic>
#include <memory>
#include <string>

#include "executor/comm/communicator.hpp"
#include "model/problem.hpp"

namespace meshplan::exec::comm {

// The exit status of a job the watchdog stopped (passed to MPI_Abort; mpirun
// exits with it). Distinct from the CLI's 0/1/2/70/130.
inline constexpr int watchdog_exit_status = 3;

// Shared by a world communicator and every group split from it: one timeout,
// one current step, and this process's rank in MPI_COMM_WORLD for messages.
struct WatchdogState {
  std::atomic<double> timeout_s{default_timeout.count()};
  std::atomic<std::int64_t> step{-1};
  int world_rank = 0;
};

class MpiCommunicator final : public Communicator {
 public:
  // Wraps `comm`; frees it on destruction when `owned` (groups made by split).
  MpiCommunicator(MPI_Comm comm, std::string name, std::shared_ptr<WatchdogState> state, bool owned);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  MPI_Comm handle() const { return comm_; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }

  void all_reduce(void* buffer, std::int64_t count, DataType type, ReduceOp op) override;
  void all_gather(const void* send, void* recv, std::int64_t count, DataType type) override;
  // send == recv is in place (MPI_IN_PLACE): the full input in recv, the result in its first `count` elements.
  void reduce_scatter(const void* send, void* recv, std::int64_t count, DataType type, ReduceOp op) override;
  void broadcast(void* buffer, std::int64_t count, DataType type, int root) override;
  // send == recv is in place.
  void all_to_all(const void* send, void* recv, std::int64_t count, DataType type) override;
  void send(const void* buffer, std::int64_t count, DataType type, int peer, int tag) override;
  void recv(void* buffer, std::int64_t count, DataType type, int peer, int tag) override;
  std::unique_ptr<Request> isend(const void* buffer, std::int64_t count, DataType type, int peer, int tag) override;
  std::unique_ptr<Request> irecv(void* buffer, std::int64_t count, DataType type, int peer, int tag) override;
  std::unique_ptr<Request> iall_reduce(void* buffer, std::int64_t count, DataType type, ReduceOp op) override;
  std::unique_ptr<Request> iall_gather(const void* send, void* recv, std::int64_t count, DataType type) override;
  std::unique_ptr<Request> ireduce_scatter(const void* send, void* recv, std::int64_t count, DataType type,
                                           ReduceOp op) override;
  void barrier() override;

  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

  void set_timeout(std::chrono::duration<double> timeout) override;
  std::chrono::duration<double> timeout() const override;
  void set_step(std::int64_t step) override;

 private:
  MPI_Comm comm_;
  std::string name_;
  std::shared_ptr<WatchdogState> state_;
  bool owned_;
  int rank_ = 0;
  int size_ = 1;
};

// Initialises MPI once (MPI_Init_thread, FUNNELED; MPI_Finalize runs at exit)
// and returns MPI_COMM_WORLD as the group "world". Problems when torchrun-style
// RANK, WORLD_SIZE or LOCAL_RANK are set and disagree with MPI's view (the
// rank, the size, and the rank among the processes on this node).
Loaded<std::unique_ptr<Communicator>> mpi_world(int* argc, char*** argv);

}  // namespace meshplan::exec::comm
