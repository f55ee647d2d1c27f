// `meshplan launch --plan plan.json [train flags...]`: starts as many local
// ranks as the plan's mesh needs, by running
//
//   mpirun -np N [--oversubscribe] [--allow-run-as-root] [-x OMP_NUM_THREADS=T -x OPENBLAS_NUM_THREADS=T]
//          <this meshplan> train --plan plan.json [train flags...]
//
// so the user never counts ranks. Every flag launch does not know is passed to
// `train` unchanged, in order. --oversubscribe when N exceeds this machine's
// hardware threads (Open MPI refuses otherwise); --allow-run-as-root when run
// as root (containers); when the user has not set them, each rank's kernel
// threads are limited to hardware threads / N, so N ranks do not fight over
// the cores. The argument vector goes to execvp directly, never through a
// shell. --dry-run prints the command instead (shell-quoted) and exits 0.
//
// Before mpirun starts, launch asks what `train` would refuse on every rank
// (executor/train/trainable.hpp): a plan the executor cannot train (a Llama
// model, an MLP on more than one device, cp > 1, ...), a --data spec that
// cannot be read, a --checkpoint-dir that cannot be written. It prints the
// reasons once and exits 2 without starting mpirun; --dry-run checks the same.
//
// Every rank is a process here, so a world larger than 4 x the hardware
// threads is refused (with or without --shrink: shrinking keeps the mesh):
// past that the ranks would mostly wait for a core, and a cluster plan
// belongs on its cluster. --shrink is passed to `train`, which reduces the
// model to fit this machine (model/shrink.hpp) and prints what it changed.
//
// Ctrl-C: Open MPI 4's mpirun cannot forward SIGINT or SIGTERM; on either it
// sends the ranks SIGCONT, waits odls_base_sigkill_timeout (1 s), SIGTERM,
// waits again, then SIGKILL, too little time to finish a step and save. So
// launch runs mpirun as a child in its own process group (the terminal's
// Ctrl-C reaches launch alone) and turns the first SIGINT or SIGTERM into
// SIGUSR1, which mpirun forwards to every rank at once; `train` stops after
// the step, saves and exits 130 (cli/train_interrupt.hpp). A second one
// becomes SIGTERM: mpirun ends the ranks within ~2 s. launch exits with
// mpirun's status, 130 once interrupted. MESHPLAN_LAUNCHED=1 in the ranks'
// environment makes train print `meshplan launch` as the resume command.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.hpp"
#include "executor/train/session.hpp"
#include "executor/train/trainable.hpp"
#include "model/plan_file.hpp"

namespace meshplan::cli {
namespace {

struct LaunchFlags {
  std::string plan_path;
  std::string mpirun = "mpirun";
  bool dry_run = false;
  bool shrink = false;
};

// The most ranks launch starts on this machine, per hardware thread.
constexpr std::int64_t ranks_per_hardware_thread = 4;

// The absolute path of the running meshplan binary (for the ranks to exec).
std::string this_binary() {
  std::error_code error;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::string("meshplan") : path.string();
}

// `program` found in PATH (or as given, when it holds a '/'); empty when absent.
std::string find_program(const std::string& program) {
  if (program.find('/') != std::string::npos) return access(program.c_str(), X_OK) == 0 ? program : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = dirs.substr(start, end - start);
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

// The running mpirun, and how many interrupts launch has relayed to it.
volatile sig_atomic_t mpirun_pid = 0;
volatile sig_atomic_t interrupts = 0;

extern "C" void relay_interrupt(int) {
  interrupts = interrupts + 1;
  if (mpirun_pid > 0) ::kill(static_cast<pid_t>(mpirun_pid), interrupts == 1 ? SIGUSR1 : SIGTERM);
}

// Runs `argv` (mpirun) in its own process group, relaying interrupts as the
// file comment says; returns its exit status (130 once interrupted).
int run_relaying_interrupts(const std::string& program, std::vector<char*>& argv) {
  struct sigaction action {};
  action.sa_handler = relay_interrupt;
  sigemptyset(&action.sa_mask);
  for (const int signal_number : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(signal_number, &action, nullptr);
  std::cout.flush();
  const pid_t child = ::fork();
  if (child < 0) {
    std::cerr << "meshplan launch: could not start " << program << ": " << std::strerror(errno) << "\n";
    return exit_bad_input;
  }
  if (child == 0) {
    ::setpgid(0, 0);
    ::execv(program.c_str(), argv.data());
    std::cerr << "meshplan launch: could not start " << program << ": " << std::strerror(errno) << "\n";
    ::_exit(exit_bad_input);
  }
  ::setpgid(child, child);  // both sides, so neither order of fork and exec races
  mpirun_pid = child;
  if (interrupts > 0) ::kill(child, SIGUSR1);  // one that came before mpirun had a pid
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return 1;
  }
  if (interrupts > 0) return exit_interrupted;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void report(const Problems& problems) {
  for (const auto& p : problems) std::cerr << "meshplan launch: " << describe(p) << "\n";
}

// The value of `--name VALUE` or `--name=VALUE` among the train flags (the
// last one given), or `fallback`.
std::string train_flag(const std::vector<std::string>& train_args, const std::string& name, std::string fallback) {
  for (std::size_t i = 0; i < train_args.size(); ++i) {
    if (train_args[i] == name && i + 1 < train_args.size()) fallback = train_args[++i];
    else if (train_args[i].rfind(name + "=", 0) == 0) fallback = train_args[i].substr(name.size() + 1);
  }
  return fallback;
}

// What `train` would refuse on every rank (executor/train/trainable.hpp): the
// plan, --data and --checkpoint-dir. With --shrink the data is checked only
// for being readable: train shortens the sequence first and checks the
// windows then.
Problems refused_by_train(const LaunchFlags& flags, const PlanFile& plan_file, const std::vector<std::string>& train_args) {
  const std::int64_t seq_len = exec::training_seq_len(plan_file.model, plan_file.plan);
  Problems problems = exec::trainable(plan_file.model, plan_file.plan, seq_len);
  const Problems inputs = exec::run_input_problems(train_flag(train_args, "--data", exec::SessionConfig{}.data),
                                                   flags.shrink ? 1 : seq_len,
                                                   train_flag(train_args, "--checkpoint-dir", ""));
  problems.insert(problems.end(), inputs.begin(), inputs.end());
  return problems;
}

std::string quoted(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") ==
                          std::string::npos) {
    return arg;
  }
  std::string q = "'";
  for (const char c : arg) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

int run_launch(const LaunchFlags& flags, const std::vector<std::string>& train_args) {
  const auto plan = read_plan_file(flags.plan_path);
  if (!plan.ok()) {
    report(plan.problems);
    return exit_bad_input;
  }
  const std::int64_t ranks = plan.value.plan.mesh.world_size();
  if (ranks < 1 || ranks > INT_MAX) {
    std::cerr << "meshplan launch: " << flags.plan_path << ": the mesh " << plan.value.plan.mesh.to_string()
              << " has no usable rank count\n";
    return exit_bad_input;
  }
  const auto hardware_threads = static_cast<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  if (ranks > ranks_per_hardware_thread * hardware_threads) {
    std::cerr << "meshplan launch: " << flags.plan_path << ": the mesh " << plan.value.plan.mesh.to_string() << " needs "
              << ranks << " ranks, and this machine starts at most " << ranks_per_hardware_thread * hardware_threads
              << " (" << ranks_per_hardware_thread << " x " << hardware_threads
              << " hardware threads); --shrink reduces the model, not the mesh. Run it on its cluster "
                 "(mpirun -np "
              << ranks << " meshplan train --plan " << flags.plan_path
              << "), or plan a mesh of at most that many ranks to rehearse here\n";
    return exit_bad_input;
  }
  if (const Problems refused = refused_by_train(flags, plan.value, train_args); has_errors(refused)) {
    report(refused);
    std::cerr << "meshplan launch: mpirun not started: meshplan train would refuse this run\n";
    return exit_bad_input;
  }

  std::vector<std::string> command{flags.mpirun, "-np", std::to_string(ranks)};
  if (ranks > hardware_threads) command.push_back("--oversubscribe");
  if (geteuid() == 0) command.push_back("--allow-run-as-root");
  for (const char* variable : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
    if (std::getenv(variable) == nullptr) {
      command.insert(command.end(),
                     {"-x", std::string(variable) + "=" + std::to_string(std::max<std::int64_t>(1, hardware_threads / ranks))});
    }
  }
  command.insert(command.end(), {this_binary(), "train", "--plan", flags.plan_path});
  if (flags.shrink) command.push_back("--shrink");
  command.insert(command.end(), train_args.begin(), train_args.end());

  if (flags.dry_run) {
    std::string line;
    for (const auto& arg : command) line += (line.empty() ? "" : " ") + quoted(arg);
    std::cout << line << "\n";
    return exit_ok;
  }
  const std::string mpirun = find_program(flags.mpirun);
  if (mpirun.empty()) {
    std::cerr << "meshplan launch: '" << flags.mpirun
              << "' was not found (PATH); install Open MPI (Debian: openmpi-bin, see scripts/install-deps.sh), "
                 "or name it with --mpirun, or start the "
              << ranks << " ranks yourself: mpirun -np " << ranks << " meshplan train --plan " << flags.plan_path
              << "\n";
    return exit_bad_input;
  }
  command.front() = mpirun;
  std::vector<char*> argv;
  for (auto& arg : command) argv.push_back(arg.data());
  argv.push_back(nullptr);
  ::setenv("MESHPLAN_LAUNCHED", "1", 1);  // local ranks inherit mpirun's environment
  return run_relaying_interrupts(mpirun, argv);
}

}  // namespace

Command add_launch_command(CLI::App& app) {
  auto flags = std::make_shared<LaunchFlags>();
  auto* command = app.add_subcommand(
      "launch", "Start the plan's ranks on this machine under mpirun and train (other flags go to train)");
  command->add_option("--plan", flags->plan_path, "Plan file (JSON) from `meshplan plan --emit-plan` or explain")
      ->required();
  command->add_option("--mpirun", flags->mpirun, "The MPI launcher to run")->capture_default_str();
  command->add_flag("--dry-run", flags->dry_run, "Print the command instead of running it");
  command->add_flag("--shrink", flags->shrink,
                    "Rehearse a cluster plan here: train --shrink, the same mesh with the model reduced to fit");
  command->allow_extras();
  return [flags, command]() { return run_launch(*flags, command->remaining()); };
}

}  // namespace meshplan::cli
