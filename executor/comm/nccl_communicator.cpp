// NcclCommunicator: every operation is enqueued through enqueue() (which
// finishes a non-blocking enqueue that returned ncclInProgress) and waited
// for by poll_under_watchdog(), the one place that waits
// (nccl_communicator.hpp says why).
//
// defines: NcclCommunicator, NcclCommunicator::Channel
#include "executor/comm/nccl_communicator.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

#include "kernels/cuda/cuda_check.hpp"
#include "model/mesh.hpp"

#ifdef MESHPLAN_HAVE_MPI
#include "executor/comm/mpi_communicator.hpp"
static_assert(meshplan::exec::comm::nccl_watchdog_exit_status == meshplan::exec::comm::watchdog_exit_status);
#endif

// ncclCommSplit arrived in NCCL 2.18. MESHPLAN_NCCL_SPLIT_BY_BOOTSTRAP forces
// the older path (to compile it with a newer header).
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0) && !defined(MESHPLAN_NCCL_SPLIT_BY_BOOTSTRAP)
#define MESHPLAN_NCCL_COMM_SPLIT 1
#endif

namespace meshplan::exec::comm {

// One NCCL communicator with its stream. Requests hold it too, so it lives
// until the last of them; once the watchdog has aborted it, every call is refused.
struct NcclCommunicator::Channel {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t producer_ready = nullptr;  // wait_for's event
  int* barrier_word = nullptr;           // one device int for barrier()
  int device = 0;
  bool aborted = false;
  std::thread aborter;  // runs ncclCommAbort: joined by the destructor
  std::string name;
  std::shared_ptr<NcclWatchdogState> state;

  Channel(int device_, std::string name_, std::shared_ptr<NcclWatchdogState> state_);
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
};

namespace {

using Clock = std::chrono::steady_clock;
using Channel = NcclCommunicator::Channel;

// Makes `device` current for its lifetime (events, streams and NCCL init belong to the current device).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    MESHPLAN_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) MESHPLAN_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

ncclDataType_t nccl_type(DataType type) {
  switch (type) {
    case DataType::f32: return ncclFloat32;
    case DataType::f64: return ncclFloat64;
    case DataType::i32: return ncclInt32;
    case DataType::i64: return ncclInt64;
    case DataType::u8: return ncclUint8;
  }
  throw std::logic_error("nccl_type: unknown DataType");
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::max ? ncclMax : ncclSum; }

// What a rank was waiting for, for the watchdog's message.
struct Operation {
  std::string what;  // "all_reduce", "send to rank 1 (tag 3)"
  std::int64_t count = 0;
  DataType type = DataType::u8;
};

std::size_t element_count(std::int64_t count, const std::string& what) {
  if (count < 0) throw std::logic_error(what + " with a negative count " + std::to_string(count));
  return static_cast<std::size_t>(count);
}

std::string nccl_error_text(ncclResult_t status, ncclComm_t comm) {
  std::string text = std::string(ncclGetErrorString(status));
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += " (" + std::string(last) + ")";
  return text;
}

void nccl_check(ncclResult_t status, const char* call, ncclComm_t comm) {
  if (status != ncclSuccess && status != ncclInProgress) {
    throw CommError(std::string(call) + " failed: " + nccl_error_text(status, comm));
  }
}

std::string describe_group(const std::string& name) {
  return parse_axis(name) ? "axis \"" + name + "\"" : "group \"" + name + "\"";
}

std::string describe(const Operation& operation, const Channel& channel) {
  const std::int64_t step = channel.state->step.load();
  const std::string when = step >= 0 ? "at step " + std::to_string(step) : "before the first step";
  return "rank " + std::to_string(channel.state->bootstrap_rank) + ": " + operation.what + " on " +
         describe_group(channel.name) + " (" + std::to_string(operation.count) + " x " + to_string(operation.type) +
         ") " + when;
}

// ncclCommAbort frees device memory, and cudaFree waits for all the device's
// work: work queued behind a stream that never ends would hold the caller
// there. So it runs on its own thread, and the caller throws or ends the job
// at once; the channel's destructor joins it.
void abort_channel(Channel& channel) {
  if (channel.aborted || channel.comm == nullptr) return;
  channel.aborted = true;
  // Its result changes nothing: the communicator is gone either way.
  channel.aborter = std::thread([comm = channel.comm] { ncclCommAbort(comm); });
}

// For the call that makes channel.comm (init, split): a failure frees what it made.
void check_new_comm(Channel& channel, ncclResult_t status, const char* call) {
  if (status == ncclSuccess || status == ncclInProgress) return;
  const std::string text = nccl_error_text(status, channel.comm);
  abort_channel(channel);
  throw CommError(std::string(call) + " failed: " + text);
}

// Past the deadline: abort, then end the job or throw, as the state says.
[[noreturn]] void watchdog_fires(Channel& channel, const Operation& operation) {
  abort_channel(channel);
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g", channel.state->timeout_s.load());
  const std::string message = describe(operation, channel) + " waited more than " + seconds +
                              " s on the GPU (NCCL communicator aborted)";
  if (channel.state->action.load() == TimeoutAction::throw_error) throw CommError(message);
  std::fprintf(stderr, "meshplan: %s; stopping the job\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(nccl_watchdog_exit_status);  // mpirun ends the other ranks when one exits non-zero
}

// True when `comm` has finished its init, split or enqueue (ncclSuccess),
// false while that is in progress; an asynchronous error aborts and throws.
bool comm_idle(Channel& channel, ncclComm_t comm, const Operation& operation) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t status = ncclCommGetAsyncError(comm, &state);
  if (status != ncclSuccess) state = status;
  if (state == ncclSuccess) return true;
  if (state == ncclInProgress) return false;
  const std::string text = nccl_error_text(state, comm);
  abort_channel(channel);
  throw CommError(describe(operation, channel) + " failed: NCCL: " + text + " (NCCL communicator aborted)");
}

// Polls `done()` until true or the deadline passes; spins for 200 us, yields
// until 10 ms, then sleeps 50 us doubling to 200 us (the MPI communicator's pacing).
template <typename Done>
void poll_under_watchdog(Channel& channel, const Operation& operation, Done done) {
  if (done()) return;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(channel.state->timeout_s.load()));
  auto pause = std::chrono::microseconds(50);
  for (;;) {
    if (done()) return;
    const auto now = Clock::now();
    if (now > deadline) watchdog_fires(channel, operation);
    const auto waited = now - start;
    if (waited < std::chrono::microseconds(200)) continue;
    if (waited < std::chrono::milliseconds(10)) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(200));
  }
}

// Waits until the work enqueued on the channel's stream up to `event` (or
// all of it, when `event` is null) has run, watching for NCCL errors too.
void wait_for_work(Channel& channel, cudaEvent_t event, const Operation& operation) {
  poll_under_watchdog(channel, operation, [&] {
    if (!comm_idle(channel, channel.comm, operation)) return false;
    const cudaError_t status = event != nullptr ? cudaEventQuery(event) : cudaStreamQuery(channel.stream);
    if (status == cudaErrorNotReady) return false;
    MESHPLAN_CUDA_CHECK(status);
    return true;
  });
}

void refuse_if_aborted(const Channel& channel, const std::string& what) {
  if (channel.aborted) {
    throw CommError(what + " on " + describe_group(channel.name) +
                    ": the NCCL communicator was aborted by an earlier timeout or error");
  }
}

// Enqueues the NCCL call(s) `call` makes on the channel's stream and returns
// once they are on the stream (a non-blocking communicator may finish the
// enqueue in the background: ncclInProgress, then ncclCommGetAsyncError).
template <typename Call>
void enqueue(Channel& channel, const Operation& operation, const char* call_name, Call call) {
  refuse_if_aborted(channel, operation.what);
  nccl_check(call(), call_name, channel.comm);
  poll_under_watchdog(channel, operation, [&] { return comm_idle(channel, channel.comm, operation); });
}

// ncclGroupStart, the sends and receives `calls` makes, ncclGroupEnd (always
// called, so a failed ncclSend leaves no group open); the first failure is reported.
template <typename Calls>
ncclResult_t grouped(Calls calls) {
  const ncclResult_t start = ncclGroupStart();
  if (start != ncclSuccess) return start;
  const ncclResult_t inside = calls();
  const ncclResult_t end = ncclGroupEnd();
  return inside != ncclSuccess ? inside : end;
}

class NcclRequest final : public Request {
 public:
  NcclRequest(std::shared_ptr<Channel> channel, Operation operation)
      : channel_(std::move(channel)), operation_(std::move(operation)) {
    DeviceGuard guard(channel_->device);
    MESHPLAN_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    MESHPLAN_CUDA_CHECK(cudaEventRecord(done_, channel_->stream));
  }
  // An unfinished request is waited for, unless its communicator was aborted; a failure
  // there is printed (a destructor cannot throw) and the aborted communicator refuses later calls.
  ~NcclRequest() override {
    if (!finished_ && !channel_->aborted) {
      try {
        wait();
      } catch (const std::exception& error) {
        std::fprintf(stderr, "meshplan: %s\n", error.what());
      }
    }
    cudaEventDestroy(done_);
  }
  NcclRequest(const NcclRequest&) = delete;
  NcclRequest& operator=(const NcclRequest&) = delete;

  void wait() override {
    if (finished_) return;
    finished_ = true;  // a timeout throws once; the communicator is aborted after it
    refuse_if_aborted(*channel_, operation_.what);
    wait_for_work(*channel_, done_, operation_);
  }
  bool test() override {
    if (finished_) return true;
    refuse_if_aborted(*channel_, operation_.what);
    if (!comm_idle(*channel_, channel_->comm, operation_)) return false;
    const cudaError_t status = cudaEventQuery(done_);
    if (status == cudaErrorNotReady) return false;
    MESHPLAN_CUDA_CHECK(status);
    finished_ = true;
    return true;
  }

 private:
  std::shared_ptr<Channel> channel_;
  Operation operation_;
  cudaEvent_t done_ = nullptr;
  bool finished_ = false;
};

std::string peer_text(const char* direction, int peer, int tag) {
  return std::string(direction) + " rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
}

ncclConfig_t non_blocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

}  // namespace

NcclCommunicator::Channel::Channel(int device_, std::string name_, std::shared_ptr<NcclWatchdogState> state_)
    : device(device_), name(std::move(name_)), state(std::move(state_)) {
  DeviceGuard guard(device);
  MESHPLAN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  MESHPLAN_CUDA_CHECK(cudaEventCreateWithFlags(&producer_ready, cudaEventDisableTiming));
  MESHPLAN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&barrier_word), sizeof(int)));
}

// ncclCommFinalize flushes and waits for the other ranks; a peer that never
// finalizes would hang ncclCommDestroy, so past the timeout the communicator is aborted.
NcclCommunicator::Channel::~Channel() {
  if (aborter.joinable()) aborter.join();
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device);
  if (comm != nullptr && !aborted) {
    const Operation finalize{"ncclCommFinalize", 0, DataType::u8};
    bool finalized = false;
    try {
      nccl_check(ncclCommFinalize(comm), "ncclCommFinalize", comm);
      const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(state->timeout_s.load()));
      while (!(finalized = comm_idle(*this, comm, finalize)) && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    } catch (const std::exception& error) {
      std::fprintf(stderr, "meshplan: %s\n", error.what());
    }
    if (finalized) {
      ncclCommDestroy(comm);
    } else if (!aborted) {  // (an error above has aborted it already)
      std::fprintf(stderr, "meshplan: rank %d: %s on %s did not finish within %g s; aborting it\n",
                   state->bootstrap_rank, finalize.what.c_str(), describe_group(name).c_str(),
                   state->timeout_s.load());
      abort_channel(*this);
      aborter.join();
    }
  }
  cudaFree(barrier_word);
  cudaEventDestroy(producer_ready);
  cudaStreamDestroy(stream);
  cudaSetDevice(previous);
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<Channel> channel, Communicator* bootstrap,
                                   std::unique_ptr<Communicator> owned_bootstrap)
    : channel_(std::move(channel)), bootstrap_(bootstrap), owned_bootstrap_(std::move(owned_bootstrap)) {
  nccl_check(ncclCommUserRank(channel_->comm, &rank_), "ncclCommUserRank", channel_->comm);
  nccl_check(ncclCommCount(channel_->comm, &size_), "ncclCommCount", channel_->comm);
}

NcclCommunicator::~NcclCommunicator() = default;

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(Communicator& bootstrap, int device,
                                                           const std::string& name) {
  auto state = std::make_shared<NcclWatchdogState>();
  state->timeout_s = bootstrap.timeout().count();
  state->bootstrap_rank = bootstrap.rank();
  return bootstrap_new(bootstrap, device, name.empty() ? bootstrap.name() : name, std::move(state), nullptr);
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::bootstrap_new(Communicator& bootstrap, int device,
                                                                  const std::string& name,
                                                                  std::shared_ptr<NcclWatchdogState> state,
                                                                  std::unique_ptr<Communicator> owned_bootstrap) {
  // Rank 0's id and whether it could make one: the others learn of its failure instead of waiting.
  struct {
    std::int32_t ok = 0;
    ncclUniqueId id{};
  } message;
  std::string failure;
  if (bootstrap.rank() == 0) {
    const ncclResult_t status = ncclGetUniqueId(&message.id);
    message.ok = status == ncclSuccess ? 1 : 0;
    if (!message.ok) failure = std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(status);
  }
  bootstrap.broadcast(&message, static_cast<std::int64_t>(sizeof message), DataType::u8, 0);
  if (!message.ok) {
    throw CommError("NCCL communicator \"" + name + "\": " +
                    (failure.empty() ? "rank 0 of \"" + bootstrap.name() + "\" could not make an NCCL unique id"
                                     : failure));
  }

  auto channel = std::make_shared<Channel>(device, name, std::move(state));
  DeviceGuard guard(device);
  ncclConfig_t config = non_blocking_config();
  check_new_comm(*channel,
                 ncclCommInitRankConfig(&channel->comm, bootstrap.size(), message.id, bootstrap.rank(), &config),
                 "ncclCommInitRankConfig");
  const Operation init{"NCCL init (ncclCommInitRankConfig) of " + std::to_string(bootstrap.size()) + " ranks", 0,
                       DataType::u8};
  poll_under_watchdog(*channel, init, [&] { return comm_idle(*channel, channel->comm, init); });
  Communicator* borrowed = owned_bootstrap ? owned_bootstrap.get() : &bootstrap;
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(std::move(channel), borrowed,
                                                                std::move(owned_bootstrap)));
}

const std::string& NcclCommunicator::name() const { return channel_->name; }
int NcclCommunicator::device() const { return channel_->device; }
cudaStream_t NcclCommunicator::stream() const { return channel_->stream; }

void NcclCommunicator::wait_for(cudaStream_t producer) {
  DeviceGuard guard(channel_->device);
  MESHPLAN_CUDA_CHECK(cudaEventRecord(channel_->producer_ready, producer));
  MESHPLAN_CUDA_CHECK(cudaStreamWaitEvent(channel_->stream, channel_->producer_ready, 0));
}

std::unique_ptr<Request> NcclCommunicator::iall_reduce(void* buffer, std::int64_t count, DataType type, ReduceOp op) {
  const Operation operation{"all_reduce", count, type};
  const std::size_t n = element_count(count, operation.what);
  auto& c = *channel_;
  enqueue(c, operation, "ncclAllReduce",
          [&] { return ncclAllReduce(buffer, buffer, n, nccl_type(type), nccl_op(op), c.comm, c.stream); });
  return std::make_unique<NcclRequest>(channel_, operation);
}

void NcclCommunicator::all_reduce(void* buffer, std::int64_t count, DataType type, ReduceOp op) {
  iall_reduce(buffer, count, type, op)->wait();
}

// all_gather's in-place form (send == recv + rank x count) is NCCL's own.
std::unique_ptr<Request> NcclCommunicator::iall_gather(const void* send, void* recv, std::int64_t count,
                                                       DataType type) {
  const Operation operation{"all_gather", count, type};
  const std::size_t n = element_count(count, operation.what);
  auto& c = *channel_;
  enqueue(c, operation, "ncclAllGather",
          [&] { return ncclAllGather(send, recv, n, nccl_type(type), c.comm, c.stream); });
  return std::make_unique<NcclRequest>(channel_, operation);
}

void NcclCommunicator::all_gather(const void* send, void* recv, std::int64_t count, DataType type) {
  iall_gather(send, recv, count, type)->wait();
}

// In place (send == recv) NCCL leaves the result at recv + rank x count; one
// device copy on the stream moves it to the front, where communicator.hpp puts it.
std::unique_ptr<Request> NcclCommunicator::ireduce_scatter(const void* send, void* recv, std::int64_t count,
                                                           DataType type, ReduceOp op) {
  const Operation operation{"reduce_scatter", count, type};
  const std::size_t n = element_count(count, operation.what);
  auto& c = *channel_;
  const std::size_t block_bytes = n * size_of(type);
  auto* own_block = static_cast<char*>(recv) + static_cast<std::size_t>(rank_) * block_bytes;
  const bool in_place = send == recv;
  void* result = in_place ? own_block : recv;
  enqueue(c, operation, "ncclReduceScatter",
          [&] { return ncclReduceScatter(send, result, n, nccl_type(type), nccl_op(op), c.comm, c.stream); });
  if (in_place && rank_ != 0 && block_bytes > 0) {
    MESHPLAN_CUDA_CHECK(cudaMemcpyAsync(recv, own_block, block_bytes, cudaMemcpyDeviceToDevice, c.stream));
  }
  return std::make_unique<NcclRequest>(channel_, operation);
}

void NcclCommunicator::reduce_scatter(const void* send, void* recv, std::int64_t count, DataType type, ReduceOp op) {
  ireduce_scatter(send, recv, count, type, op)->wait();
}

void NcclCommunicator::broadcast(void* buffer, std::int64_t count, DataType type, int root) {
  if (root < 0 || root >= size_) {
    throw std::logic_error("broadcast on \"" + name() + "\" from root " + std::to_string(root) + " of " +
                           std::to_string(size_) + " ranks");
  }
  const Operation operation{"broadcast from rank " + std::to_string(root), count, type};
  const std::size_t n = element_count(count, operation.what);
  auto& c = *channel_;
  enqueue(c, operation, "ncclBroadcast",
          [&] { return ncclBroadcast(buffer, buffer, n, nccl_type(type), root, c.comm, c.stream); });
  wait_for_work(c, nullptr, operation);
}

// Grouped ncclSend/ncclRecv, one pair per rank (itself included: NCCL allows
// that inside a group). In place through a stream-ordered copy of the input.
void NcclCommunicator::all_to_all(const void* send, void* recv, std::int64_t count, DataType type) {
  const Operation operation{"all_to_all", count, type};
  const std::size_t n = element_count(count, operation.what);
  auto& c = *channel_;
  refuse_if_aborted(c, operation.what);
  const std::size_t block_bytes = n * size_of(type);
  const std::size_t total_bytes = block_bytes * static_cast<std::size_t>(size_);
  void* copy = nullptr;
  if (send == recv && total_bytes > 0) {
    DeviceGuard guard(c.device);
    MESHPLAN_CUDA_CHECK(cudaMallocAsync(&copy, total_bytes, c.stream));
    MESHPLAN_CUDA_CHECK(cudaMemcpyAsync(copy, send, total_bytes, cudaMemcpyDeviceToDevice, c.stream));
    send = copy;
  }
  enqueue(c, operation, "ncclGroupEnd (ncclSend/ncclRecv)", [&] {
    return grouped([&] {
      for (int peer = 0; peer < size_; ++peer) {
        const auto offset = static_cast<std::size_t>(peer) * block_bytes;
        const ncclResult_t sent =
            ncclSend(static_cast<const char*>(send) + offset, n, nccl_type(type), peer, c.comm, c.stream);
        if (sent != ncclSuccess) return sent;
        const ncclResult_t received =
            ncclRecv(static_cast<char*>(recv) + offset, n, nccl_type(type), peer, c.comm, c.stream);
        if (received != ncclSuccess) return received;
      }
      return ncclSuccess;
    });
  });
  if (copy != nullptr) MESHPLAN_CUDA_CHECK(cudaFreeAsync(copy, c.stream));
  wait_for_work(c, nullptr, operation);
}

std::unique_ptr<Request> NcclCommunicator::isend(const void* buffer, std::int64_t count, DataType type, int peer,
                                                 int tag) {
  if (peer == rank_) {
    throw std::logic_error("send to itself (rank " + std::to_string(peer) + ") on \"" + name() +
                           "\": on one stream it would wait forever for the receive behind it");
  }
  const Operation operation{peer_text("send to", peer, tag), count, type};
  const std::size_t n = element_count(count, operation.what);
  auto& c = *channel_;
  enqueue(c, operation, "ncclSend", [&] { return ncclSend(buffer, n, nccl_type(type), peer, c.comm, c.stream); });
  return std::make_unique<NcclRequest>(channel_, operation);
}

std::unique_ptr<Request> NcclCommunicator::irecv(void* buffer, std::int64_t count, DataType type, int peer, int tag) {
  if (peer == rank_) {
    throw std::logic_error("recv from itself (rank " + std::to_string(peer) + ") on \"" + name() +
                           "\": on one stream it would wait forever for a send behind it");
  }
  const Operation operation{peer_text("recv from", peer, tag), count, type};
  const std::size_t n = element_count(count, operation.what);
  auto& c = *channel_;
  enqueue(c, operation, "ncclRecv", [&] { return ncclRecv(buffer, n, nccl_type(type), peer, c.comm, c.stream); });
  return std::make_unique<NcclRequest>(channel_, operation);
}

void NcclCommunicator::send(const void* buffer, std::int64_t count, DataType type, int peer, int tag) {
  isend(buffer, count, type, peer, tag)->wait();
}

void NcclCommunicator::recv(void* buffer, std::int64_t count, DataType type, int peer, int tag) {
  irecv(buffer, count, type, peer, tag)->wait();
}

void NcclCommunicator::barrier() {
  const Operation operation{"barrier", 0, DataType::u8};
  auto& c = *channel_;
  enqueue(c, operation, "ncclAllReduce",
          [&] { return ncclAllReduce(c.barrier_word, c.barrier_word, 1, ncclInt32, ncclSum, c.comm, c.stream); });
  wait_for_work(c, nullptr, operation);
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key, const std::string& group_name) {
  if (color < 0) throw std::logic_error("split of \"" + name() + "\" with negative color " + std::to_string(color));
  auto& parent = *channel_;
  refuse_if_aborted(parent, "split into \"" + group_name + "\"");
#ifdef MESHPLAN_NCCL_COMM_SPLIT
  // The new communicator's order is key, then parent rank (ncclCommSplit's, as MPI_Comm_split's).
  auto child = std::make_shared<Channel>(parent.device, group_name, parent.state);
  const Operation operation{"split into \"" + group_name + "\" (ncclCommSplit)", 0, DataType::u8};
  DeviceGuard guard(parent.device);
  ncclConfig_t config = non_blocking_config();
  check_new_comm(*child, ncclCommSplit(parent.comm, color, key, &child->comm, &config), "ncclCommSplit");
  poll_under_watchdog(*child, operation, [&] {
    // Both settle: the child when its init is done, the parent once the split has left it.
    return comm_idle(parent, parent.comm, operation) && child->comm != nullptr &&
           comm_idle(*child, child->comm, operation);
  });
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(std::move(child), nullptr, nullptr));
#else
  // NCCL < 2.18: split the host group the unique id came over, and bootstrap a new id there.
  if (bootstrap_ == nullptr) throw std::logic_error("split of \"" + name() + "\": no bootstrap group to split");
  auto group_bootstrap = bootstrap_->split(color, key, group_name);
  Communicator& bootstrap = *group_bootstrap;
  return bootstrap_new(bootstrap, parent.device, group_name, parent.state, std::move(group_bootstrap));
#endif
}

void NcclCommunicator::set_timeout(std::chrono::duration<double> timeout) {
  channel_->state->timeout_s = timeout.count();
}

std::chrono::duration<double> NcclCommunicator::timeout() const {
  return std::chrono::duration<double>(channel_->state->timeout_s.load());
}

void NcclCommunicator::set_step(std::int64_t step) { channel_->state->step = step; }

void NcclCommunicator::set_timeout_action(TimeoutAction action) { channel_->state->action = action; }

}  // namespace meshplan::exec::comm
