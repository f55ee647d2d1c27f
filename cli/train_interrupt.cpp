// The handlers of train_interrupt.hpp. Only async-signal-safe calls in the
// handler: a lock-free flag, write(2), _exit(2).
#include "cli/train_interrupt.hpp"

#include "executor/train/cluster_launch.hpp"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iterator>

namespace meshplan::cli {
namespace {

std::atomic<int> signals_received{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free counter");

constexpr std::size_t notice_capacity = 512;
char notice_text[notice_capacity];
std::size_t notice_length = 0;

constexpr int exit_interrupted_status = 130;  // commands.hpp's exit_interrupted, 128 + SIGINT
std::atomic<bool> quiet{false};

extern "C" void on_interrupt(int) {
  if (quiet.load()) ::_exit(exit_interrupted_status);
  if (signals_received.fetch_add(1) == 0) {
    if (notice_length > 0) {
      const ssize_t ignored = ::write(STDERR_FILENO, notice_text, notice_length);
      (void)ignored;
    }
    return;
  }
  static const char stopped[] = "\nmeshplan train: stopped at once; nothing saved since the last checkpoint\n";
  const ssize_t ignored = ::write(STDERR_FILENO, stopped, sizeof stopped - 1);
  (void)ignored;
  ::_exit(exit_interrupted_status);
}

}  // namespace

void install_interrupt_handlers(const std::string& notice) {
  notice_length = std::min(notice.size(), notice_capacity);
  std::memcpy(notice_text, notice.data(), notice_length);
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // the step goes on: reads, writes and MPI calls are not cut short
  for (const int signal_number : {SIGINT, SIGTERM, SIGUSR1}) sigaction(signal_number, &action, nullptr);
}

bool interrupt_requested() { return signals_received.load() > 0; }

void quiet_further_interrupts() { quiet.store(true); }

std::vector<std::string> this_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::vector<std::string> args;
  std::size_t start = 0;
  while (start < bytes.size()) {
    const std::size_t end = bytes.find('\0', start);
    args.push_back(bytes.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return args;
}

std::string resume_command(const std::vector<std::string>& args, const std::string& checkpoint_dir,
                           std::int64_t ranks, bool launched) {
  std::vector<std::string> kept;
  bool has_dir = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--resume" || a.rfind("--stop-after=", 0) == 0) continue;
    if (a == "--stop-after") {
      ++i;  // and its value
      continue;
    }
    if (a == "--checkpoint-dir" || a.rfind("--checkpoint-dir=", 0) == 0) has_dir = true;
    if (launched && i == 1 && a == "train") {
      kept.push_back("launch");
      continue;
    }
    kept.push_back(a);
  }
  if (!has_dir) kept.insert(kept.end(), {"--checkpoint-dir", checkpoint_dir});
  kept.push_back("--resume");
  std::string line = ranks > 1 && !launched ? "mpirun -np " + std::to_string(ranks) : "";
  for (const std::string& a : kept) line += (line.empty() ? "" : " ") + exec::shell_quoted(a);
  return line;
}

}  // namespace meshplan::cli
