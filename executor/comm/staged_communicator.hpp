// A Communicator on device buffers over one on host buffers: every
// operation copies its device input into host staging memory (page-locked on
// a GPU: Backend::allocate_host_staging), runs the host group's operation on
// it (MPI), and copies the result back to the device. This is how several
// ranks share one GPU, which NCCL refuses (it asks for one GPU per rank), and
// how the whole plan matrix runs on one card (issue 16). Slower than NCCL by
// the two copies and by MPI's own speed; for correctness, not for speed.
//
// Semantics are the host group's (communicator.hpp), with every buffer a
// device pointer of `backend`: in-place forms stay allowed, since the host
// operation always works on staging memory. Copies run on the backend's
// default context and are waited for before the host operation starts, so
// device work enqueued on that context before the call is seen, and the
// results are on the device when a blocking call returns or a request's
// wait()/test() first reports completion.
//
// Staging memory comes from a pool shared with this group's split groups and
// its requests: a buffer is reused by later operations once the operation
// holding it has finished (several non-blocking operations in flight hold
// distinct buffers); the pool frees everything when the last holder goes.
//
// defines: StagedCommunicator
#pragma once

#include <memory>
#include <string>

#include "executor/backend/backend.hpp"
#include "executor/comm/communicator.hpp"

namespace meshplan::exec::comm {

class StagingPool;

class StagedCommunicator final : public Communicator {
 public:
  // `host`: the same group on host buffers; `backend` must outlive this group, its splits and requests.
  StagedCommunicator(std::unique_ptr<Communicator> host, Backend& backend);
  ~StagedCommunicator() override;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::string& name() const override { return host_->name(); }

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
  void barrier() override { host_->barrier(); }
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

  void set_timeout(std::chrono::duration<double> timeout) override { host_->set_timeout(timeout); }
  std::chrono::duration<double> timeout() const override { return host_->timeout(); }
  void set_step(std::int64_t step) override { host_->set_step(step); }

  Communicator& host() { return *host_; }

 private:
  StagedCommunicator(std::unique_ptr<Communicator> host, Backend& backend, std::shared_ptr<StagingPool> pool);

  std::unique_ptr<Communicator> host_;
  Backend& backend_;
  std::shared_ptr<StagingPool> pool_;
};

}  // namespace meshplan::exec::comm
