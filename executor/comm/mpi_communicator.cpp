// MpiCommunicator: each operation is started non-blocking and completed by
// wait_under_watchdog(), the one place that waits (mpi_communicator.hpp says why).
//
// defines: MpiCommunicator, mpi_world
#include "executor/comm/mpi_communicator.hpp"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "model/mesh.hpp"

namespace meshplan::exec::comm {
namespace {

using Clock = std::chrono::steady_clock;

MPI_Datatype mpi_type(DataType type) {
  switch (type) {
    case DataType::f32: return MPI_FLOAT;
    case DataType::f64: return MPI_DOUBLE;
    case DataType::i32: return MPI_INT32_T;
    case DataType::i64: return MPI_INT64_T;
    case DataType::u8: return MPI_UINT8_T;
  }
  throw std::logic_error("mpi_type: unknown DataType");
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }

// MPI counts are int; larger buffers would need chunking, which no caller needs yet.
int mpi_count(std::int64_t count, const char* operation) {
  if (count < 0 || count > INT_MAX) {
    throw std::logic_error(std::string(operation) + ": count " + std::to_string(count) +
                           " is outside MPI's int range [0, " + std::to_string(INT_MAX) + "]");
  }
  return static_cast<int>(count);
}

void check(int status, const char* call) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, text, &length);
  throw std::runtime_error(std::string(call) + " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

// What a waiting rank was waiting for, for the watchdog's message.
struct Operation {
  std::string what;  // "all_reduce", "send to rank 1 (tag 3)"
  std::int64_t count = 0;
  DataType type = DataType::u8;
};

std::string describe_group(const std::string& name) {
  return parse_axis(name) ? "axis \"" + name + "\"" : "group \"" + name + "\"";
}

// The SIGTERM note's line (see on_sigterm below) and whether this rank is waiting.
char waiting_line[512];
std::size_t waiting_line_length = 0;
volatile sig_atomic_t waiting = 0;
volatile sig_atomic_t stopping = 0;

[[noreturn]] void stop_job(const Operation& operation, const std::string& group, const WatchdogState& state) {
  const std::int64_t step = state.step.load();
  const std::string when = step >= 0 ? "at step " + std::to_string(step) : "before the first step";
  std::fprintf(stderr, "meshplan: rank %d: %s on %s (%lld x %s) %s waited more than %g s; stopping the job\n",
               state.world_rank, operation.what.c_str(), describe_group(group).c_str(),
               static_cast<long long>(operation.count), to_string(operation.type).c_str(), when.c_str(),
               state.timeout_s.load());
  std::fflush(stderr);
  stopping = 1;  // said already; a SIGTERM from mpirun during MPI_Abort need not add a note
  MPI_Abort(MPI_COMM_WORLD, watchdog_exit_status);
  std::_Exit(watchdog_exit_status);  // MPI_Abort does not return; this is for the compiler's sake
}

// When mpirun ends the job because another rank died (it sends SIGTERM, then
// SIGKILL), the watchdog never gets to speak: the SIGTERM handler prints the
// operation this rank was waiting in instead. The line is formatted before
// waiting (snprintf is not async-signal-safe; write() is), only for waits
// that outlast the first 200 us of spinning.
char idle_line[160];
std::size_t idle_line_length = 0;
struct sigaction previous_sigterm;

extern "C" void on_sigterm(int signal_number) {
  if (!stopping) {
    const ssize_t ignored = waiting ? write(STDERR_FILENO, waiting_line, waiting_line_length)
                                    : write(STDERR_FILENO, idle_line, idle_line_length);
    (void)ignored;
    // Give mpirun's output forwarding time to read the line before the process
    // ends: without the pause, 1 in ~25 test jobs lost a rank's line.
    const timespec pause{0, 100'000'000};
    nanosleep(&pause, nullptr);
  }
  sigaction(SIGTERM, &previous_sigterm, nullptr);
  raise(signal_number);
}

void install_sigterm_note(int world_rank) {
  static bool installed = false;
  if (installed) return;
  installed = true;
  const int length = std::snprintf(idle_line, sizeof idle_line,
                                   "meshplan: rank %d: stopped by SIGTERM, not waiting for another rank\n", world_rank);
  idle_line_length = static_cast<std::size_t>(std::max(0, std::min(length, static_cast<int>(sizeof idle_line) - 1)));
  struct sigaction action {};
  action.sa_handler = on_sigterm;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, &previous_sigterm);
}

// Marks this rank as waiting in `operation` for as long as it lives.
class WaitingNote {
 public:
  WaitingNote(const Operation& operation, const std::string& group, const WatchdogState& state) {
    const std::int64_t step = state.step.load();
    const std::string when = step >= 0 ? "at step " + std::to_string(step) : "before the first step";
    const int length = std::snprintf(
        waiting_line, sizeof waiting_line,
        "meshplan: rank %d: stopped by SIGTERM while waiting in %s on %s (%lld x %s) %s "
        "(mpirun ends the whole job when a rank fails)\n",
        state.world_rank, operation.what.c_str(), describe_group(group).c_str(),
        static_cast<long long>(operation.count), to_string(operation.type).c_str(), when.c_str());
    waiting_line_length = static_cast<std::size_t>(std::max(0, std::min(length, static_cast<int>(sizeof waiting_line) - 1)));
    waiting = 1;
  }
  ~WaitingNote() { waiting = 0; }
  WaitingNote(const WaitingNote&) = delete;
  WaitingNote& operator=(const WaitingNote&) = delete;
};

// Polls `request` until it completes or the deadline passes. Spins for the
// first 200 us, yields the core until 10 ms, then sleeps 50 us doubling to 200 us.
void wait_under_watchdog(MPI_Request& request, const Operation& operation, const std::string& group,
                         const WatchdogState& state) {
  int done = 0;
  check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
  if (done) return;
  // Formatted only once the wait outlasts the spin: small operations pay nothing for it.
  std::optional<WaitingNote> note;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(state.timeout_s.load()));
  auto pause = std::chrono::microseconds(50);
  for (;;) {
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    const auto now = Clock::now();
    if (now > deadline) stop_job(operation, group, state);
    const auto waited = now - start;
    if (waited < std::chrono::microseconds(200)) continue;
    if (!note) note.emplace(operation, group, state);
    if (waited < std::chrono::milliseconds(10)) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(200));
  }
}

class MpiRequest final : public Request {
 public:
  MpiRequest(MPI_Request request, Operation operation, std::string group, std::shared_ptr<WatchdogState> state)
      : request_(request), operation_(std::move(operation)), group_(std::move(group)), state_(std::move(state)) {}
  ~MpiRequest() override {
    if (request_ != MPI_REQUEST_NULL) wait_under_watchdog(request_, operation_, group_, *state_);
  }
  MpiRequest(const MpiRequest&) = delete;
  MpiRequest& operator=(const MpiRequest&) = delete;

  void wait() override {
    if (request_ != MPI_REQUEST_NULL) wait_under_watchdog(request_, operation_, group_, *state_);
  }
  bool test() override {
    if (request_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    check(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "MPI_Test");
    return done != 0;
  }

 private:
  MPI_Request request_;  // MPI_REQUEST_NULL once complete (MPI_Test sets it)
  Operation operation_;
  std::string group_;
  std::shared_ptr<WatchdogState> state_;
};

std::string peer_text(const char* direction, int peer, int tag) {
  return std::string(direction) + " rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, std::shared_ptr<WatchdogState> state, bool owned)
    : comm_(comm), name_(std::move(name)), state_(std::move(state)), owned_(owned) {
  check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && !finalized) MPI_Comm_free(&comm_);
}

void MpiCommunicator::all_reduce(void* buffer, std::int64_t count, DataType type, ReduceOp op) {
  MPI_Request request;
  check(MPI_Iallreduce(MPI_IN_PLACE, buffer, mpi_count(count, "all_reduce"), mpi_type(type), mpi_op(op), comm_,
                       &request),
        "MPI_Iallreduce");
  wait_under_watchdog(request, {"all_reduce", count, type}, name_, *state_);
}

void MpiCommunicator::all_gather(const void* send, void* recv, std::int64_t count, DataType type) {
  iall_gather(send, recv, count, type)->wait();
}

void MpiCommunicator::reduce_scatter(const void* send, void* recv, std::int64_t count, DataType type, ReduceOp op) {
  ireduce_scatter(send, recv, count, type, op)->wait();
}

std::unique_ptr<Request> MpiCommunicator::iall_gather(const void* send, void* recv, std::int64_t count,
                                                      DataType type) {
  const int n = mpi_count(count, "all_gather");
  const auto* own_block = static_cast<const char*>(recv) + static_cast<std::size_t>(rank_) *
                                                               static_cast<std::size_t>(count) * size_of(type);
  const void* source = send == own_block ? MPI_IN_PLACE : send;
  MPI_Request request;
  check(MPI_Iallgather(source, n, mpi_type(type), recv, n, mpi_type(type), comm_, &request), "MPI_Iallgather");
  return std::make_unique<MpiRequest>(request, Operation{"all_gather", count, type}, name_, state_);
}

std::unique_ptr<Request> MpiCommunicator::ireduce_scatter(const void* send, void* recv, std::int64_t count,
                                                          DataType type, ReduceOp op) {
  const void* source = send == recv ? MPI_IN_PLACE : send;
  MPI_Request request;
  check(MPI_Ireduce_scatter_block(source, recv, mpi_count(count, "reduce_scatter"), mpi_type(type), mpi_op(op),
                                  comm_, &request),
        "MPI_Ireduce_scatter_block");
  return std::make_unique<MpiRequest>(request, Operation{"reduce_scatter", count, type}, name_, state_);
}

void MpiCommunicator::broadcast(void* buffer, std::int64_t count, DataType type, int root) {
  if (root < 0 || root >= size_) {
    throw std::logic_error("broadcast on \"" + name_ + "\" from root " + std::to_string(root) + " of " +
                           std::to_string(size_) + " ranks");
  }
  MPI_Request request;
  check(MPI_Ibcast(buffer, mpi_count(count, "broadcast"), mpi_type(type), root, comm_, &request), "MPI_Ibcast");
  wait_under_watchdog(request, {"broadcast from rank " + std::to_string(root), count, type}, name_, *state_);
}

void MpiCommunicator::all_to_all(const void* send, void* recv, std::int64_t count, DataType type) {
  const int n = mpi_count(count, "all_to_all");
  // In place through a copy of the input: simpler than trusting every MPI's
  // MPI_IN_PLACE for all-to-all, and all_to_all is not on a hot path yet.
  std::vector<char> copy;
  if (send == recv) {
    const auto bytes = static_cast<std::size_t>(size_) * static_cast<std::size_t>(count) * size_of(type);
    copy.assign(static_cast<const char*>(send), static_cast<const char*>(send) + bytes);
    send = copy.data();
  }
  MPI_Request request;
  check(MPI_Ialltoall(send, n, mpi_type(type), recv, n, mpi_type(type), comm_, &request), "MPI_Ialltoall");
  wait_under_watchdog(request, {"all_to_all", count, type}, name_, *state_);
}

void MpiCommunicator::send(const void* buffer, std::int64_t count, DataType type, int peer, int tag) {
  isend(buffer, count, type, peer, tag)->wait();
}

void MpiCommunicator::recv(void* buffer, std::int64_t count, DataType type, int peer, int tag) {
  irecv(buffer, count, type, peer, tag)->wait();
}

std::unique_ptr<Request> MpiCommunicator::isend(const void* buffer, std::int64_t count, DataType type, int peer,
                                                int tag) {
  if (peer == rank_) throw std::logic_error("send to itself (rank " + std::to_string(peer) + ") on \"" + name_ + "\"");
  MPI_Request request;
  check(MPI_Isend(buffer, mpi_count(count, "send"), mpi_type(type), peer, tag, comm_, &request), "MPI_Isend");
  return std::make_unique<MpiRequest>(request, Operation{peer_text("send to", peer, tag), count, type}, name_, state_);
}

std::unique_ptr<Request> MpiCommunicator::irecv(void* buffer, std::int64_t count, DataType type, int peer, int tag) {
  if (peer == rank_) {
    throw std::logic_error("recv from itself (rank " + std::to_string(peer) + ") on \"" + name_ + "\"");
  }
  MPI_Request request;
  check(MPI_Irecv(buffer, mpi_count(count, "recv"), mpi_type(type), peer, tag, comm_, &request), "MPI_Irecv");
  return std::make_unique<MpiRequest>(request, Operation{peer_text("recv from", peer, tag), count, type}, name_,
                                      state_);
}

std::unique_ptr<Request> MpiCommunicator::iall_reduce(void* buffer, std::int64_t count, DataType type, ReduceOp op) {
  MPI_Request request;
  check(MPI_Iallreduce(MPI_IN_PLACE, buffer, mpi_count(count, "all_reduce"), mpi_type(type), mpi_op(op), comm_,
                       &request),
        "MPI_Iallreduce");
  return std::make_unique<MpiRequest>(request, Operation{"all_reduce", count, type}, name_, state_);
}

void MpiCommunicator::barrier() {
  MPI_Request request;
  check(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
  wait_under_watchdog(request, {"barrier", 0, DataType::u8}, name_, *state_);
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, const std::string& name) {
  if (color < 0) throw std::logic_error("split of \"" + name_ + "\" with negative color " + std::to_string(color));
  // MPI_Comm_split blocks with no timeout: a barrier under the watchdog first
  // makes a missing rank a reported failure instead of a hang.
  barrier();
  MPI_Comm group;
  check(MPI_Comm_split(comm_, color, key, &group), "MPI_Comm_split");
  return std::make_unique<MpiCommunicator>(group, name, state_, true);
}

void MpiCommunicator::set_timeout(std::chrono::duration<double> timeout) { state_->timeout_s = timeout.count(); }

std::chrono::duration<double> MpiCommunicator::timeout() const {
  return std::chrono::duration<double>(state_->timeout_s.load());
}

void MpiCommunicator::set_step(std::int64_t step) { state_->step = step; }

namespace {

std::optional<long long> env_integer(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (*end != '\0') return std::nullopt;
  return value;
}

void check_env(Problems& problems, const char* name, long long mpi_value, const std::string& mpi_meaning) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return;
  const auto value = env_integer(name);
  if (!value) {
    problems.push_back({Severity::error, std::string("environment ") + name,
                        std::string("'") + text + "' is not an integer"});
  } else if (*value != mpi_value) {
    problems.push_back({Severity::error, std::string("environment ") + name,
                        std::string(name) + "=" + text + " but MPI says " + mpi_meaning + " is " +
                            std::to_string(mpi_value) +
                            " (meshplan ranks are MPI processes: start them with mpirun -np N or `meshplan launch`, "
                            "not torchrun; or unset " + name + ")"});
  }
}

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

Loaded<std::unique_ptr<Communicator>> mpi_world(int* argc, char*** argv) {
  Loaded<std::unique_ptr<Communicator>> result;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // Open MPI 4.1's default MPI_Iallreduce algorithm for 2 ranks and 2 MiB
    // takes 0.70-0.96 ms at best here, against 0.30-0.35 ms for blocking
    // MPI_Allreduce and for libnbc's Rabenseifner algorithm (3), which is as
    // good at 4 ranks and at small sizes (docs/executor-parallel.md). The
    // user's own setting wins; other MPIs ignore the variable.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
    int provided = 0;
    check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    std::atexit(finalize_mpi);
    if (provided < MPI_THREAD_FUNNELED) {
      result.problems.push_back({Severity::error, "MPI", "the MPI library provides no thread support "
                                                         "(MPI_THREAD_FUNNELED is needed: kernels run threads)"});
    }
  }
  auto state = std::make_shared<WatchdogState>();
  int world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &state->world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);

  // The rank among the processes sharing this node's memory: what LOCAL_RANK means.
  MPI_Comm node;
  int local_rank = 0;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, state->world_rank, MPI_INFO_NULL, &node),
        "MPI_Comm_split_type");
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_free(&node);

  install_sigterm_note(state->world_rank);
  check_env(result.problems, "RANK", state->world_rank, "this process's rank");
  check_env(result.problems, "WORLD_SIZE", world_size, "the number of ranks");
  check_env(result.problems, "LOCAL_RANK", local_rank, "this process's rank on its node");
  check_env(result.problems, "OMPI_COMM_WORLD_LOCAL_RANK", local_rank, "this process's rank on its node");
  result.value = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world", std::move(state), false);
  return result;
}

}  // namespace meshplan::exec::comm
