// `meshplan launch --plan plan.json [train flags...]`: starts as many ranks as
// the plan's mesh needs, here, on the hosts of an Open MPI hostfile, or as a
// Slurm job (docs/clusters.md). Here, it runs
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
// shell. --print (or --dry-run) prints the command instead (shell-quoted)
// and exits 0.
//
// --hostfile FILE: mpirun --hostfile FILE over the hosts listed there
// (executor/train/cluster_launch.hpp reads it: a plan needing more ranks than
// the listed slots is refused). The ranks' threads are left to the hosts'
// environment (OMP_NUM_THREADS and OPENBLAS_NUM_THREADS are forwarded with -x
// when set here), the plan path is made absolute, and the meshplan binary must
// be at the same path on every host.
//
// --slurm: writes an sbatch script (nodes, tasks and GPUs per node from the
// plan's cluster unless given, srun --mpi=pmix of the train command) to
// --script (default <job name>.sbatch); --submit runs sbatch on it
// (--parsable, so launch prints the job id), --wait waits for the job to end
// and exits with its status.
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
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.hpp"
#include "cli/train_flags.hpp"
#include "executor/train/session.hpp"
#include "executor/train/trainable.hpp"
#include "executor/train/cluster_launch.hpp"
#include "model/atomic_file.hpp"
#include "model/plan_file.hpp"

namespace meshplan::cli {
namespace {

struct LaunchFlags {
  std::string plan_path;
  std::string mpirun = "mpirun";
  bool print = false;
  bool shrink = false;
  std::string hostfile;
  bool slurm = false, submit = false, wait = false;
  std::string script;                // --slurm: where the sbatch script goes
  exec::SlurmOptions slurm_options;
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

void report(const Problems& problems) {
  for (const auto& p : problems) std::cerr << "meshplan launch: " << describe(p) << "\n";
}

// What `train` would refuse on every rank (executor/train/trainable.hpp):
// its flags (parsed with train's own definitions: an unknown flag, a value
// that does not convert, optimiser settings no run can use, a run report
// that cannot be written), the plan, --data and --checkpoint-dir. With
// --shrink the data is checked only for being readable: train shortens the
// sequence first and checks the windows then.
Problems refused_by_train(const LaunchFlags& flags, const PlanFile& plan_file, const std::vector<std::string>& train_args) {
  TrainFlags train;
  std::vector<std::string> args = {"--plan", flags.plan_path};
  if (flags.shrink) args.push_back("--shrink");
  args.insert(args.end(), train_args.begin(), train_args.end());
  Problems problems = train_flag_problems(args, train);
  if (has_errors(problems)) return problems;
  const std::int64_t seq_len = exec::training_seq_len(plan_file.model, plan_file.plan);
  const Problems plan = exec::trainable(plan_file.model, plan_file.plan, seq_len);
  problems.insert(problems.end(), plan.begin(), plan.end());
  const std::string data = train.session.data.empty() ? exec::default_data_spec(plan_file.model) : train.session.data;
  const Problems inputs = exec::run_input_problems(data, flags.shrink ? 1 : seq_len, train.checkpoint_dir);
  problems.insert(problems.end(), inputs.begin(), inputs.end());
  const Problems data_fit = exec::data_model_problems(data, plan_file.model);
  problems.insert(problems.end(), data_fit.begin(), data_fit.end());
  return problems;
}

std::string command_line(const std::vector<std::string>& command) {
  std::string line;
  for (const auto& arg : command) line += (line.empty() ? "" : " ") + exec::shell_quoted(arg);
  return line;
}

std::string absolute(const std::string& path) {
  std::error_code error;
  const auto p = std::filesystem::absolute(path, error);
  return error ? path : p.lexically_normal().string();
}

// Runs `command` (its first word a path: find_program's) and waits for it.
// With `relay`, in its own process group, interrupts relayed as the file
// comment says (mpirun), and 130 returned once interrupted; otherwise in
// launch's group, so the terminal's Ctrl-C reaches it directly (sbatch). Its
// standard output goes line by line to `on_line` when given, else through.
int run_child(const std::vector<std::string>& command, bool relay,
              const std::function<void(const std::string&)>& on_line = {}) {
  int pipe_fds[2] = {-1, -1};
  if (on_line && ::pipe(pipe_fds) != 0) return exit_bad_input;
  if (relay) {
    struct sigaction action {};
    action.sa_handler = relay_interrupt;
    sigemptyset(&action.sa_mask);
    for (const int signal_number : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(signal_number, &action, nullptr);
  }
  std::cout.flush();
  const pid_t child = ::fork();
  if (child < 0) {
    std::cerr << "meshplan launch: could not start " << command[0] << ": " << std::strerror(errno) << "\n";
    return exit_bad_input;
  }
  if (child == 0) {
    if (relay) ::setpgid(0, 0);
    if (on_line) {
      ::dup2(pipe_fds[1], STDOUT_FILENO);
      ::close(pipe_fds[0]);
      ::close(pipe_fds[1]);
    }
    std::vector<char*> argv;
    for (const auto& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    std::cerr << "meshplan launch: could not start " << command[0] << ": " << std::strerror(errno) << "\n";
    ::_exit(exit_bad_input);
  }
  if (relay) {
    ::setpgid(child, child);  // both sides, so neither order of fork and exec races
    mpirun_pid = child;
    if (interrupts > 0) ::kill(child, SIGUSR1);  // one that came before the child had a pid
  }
  if (on_line) {
    ::close(pipe_fds[1]);
    if (FILE* out = ::fdopen(pipe_fds[0], "r")) {
      char buffer[4096];
      while (std::fgets(buffer, sizeof buffer, out)) {
        std::string line(buffer);
        while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
        on_line(line);
      }
      std::fclose(out);
    }
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return 1;
  }
  if (relay && interrupts > 0) return exit_interrupted;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// --slurm: the sbatch script, written (or printed), then submitted when asked.
int launch_slurm(const LaunchFlags& flags, const PlanFile& plan, const std::vector<std::string>& train_command) {
  exec::SlurmOptions options = flags.slurm_options;
  options.working_directory = std::filesystem::current_path().string();
  const auto job = exec::slurm_job(plan, flags.plan_path, options, train_command);
  if (!job.ok()) {
    report(job.problems);
    return exit_bad_input;
  }
  const std::string script = exec::sbatch_script(job.value);
  const std::string path = flags.script.empty() ? job.value.options.job_name + ".sbatch" : flags.script;
  std::vector<std::string> sbatch{"sbatch", "--parsable"};
  if (flags.wait) sbatch.push_back("--wait");
  sbatch.push_back(path);
  if (flags.print) {
    std::cout << script << "# " << (flags.submit ? "" : "to submit: ") << command_line(sbatch) << "\n";
    return exit_ok;
  }
  if (const Problems written = write_file_atomically(path, [&](std::ostream& out) { out << script; }); !written.empty()) {
    report(written);
    return exit_bad_input;
  }
  const exec::SlurmOptions& o = job.value.options;
  std::cerr << "meshplan launch: wrote " << path << ": " << o.nodes << " node" << (o.nodes == 1 ? "" : "s") << " x "
            << o.tasks_per_node << " tasks" << (o.gpus_per_node > 0 ? " and " + std::to_string(o.gpus_per_node) + " GPUs" : "")
            << " per node, srun --mpi=" << o.srun_mpi << "\n";
  if (!flags.submit) {
    std::cerr << "meshplan launch: submit it with: sbatch " << exec::shell_quoted(path) << " (or launch --slurm --submit)\n";
    return exit_ok;
  }
  sbatch.front() = find_program("sbatch");
  if (sbatch.front().empty()) {
    std::cerr << "meshplan launch: sbatch was not found (PATH): this is not a Slurm submit host; copy " << path
              << " to one and run: sbatch " << exec::shell_quoted(path) << "\n";
    return exit_bad_input;
  }
  std::string job_id;
  const int status = run_child(sbatch, false, [&](const std::string& line) {
    if (job_id.empty() && !line.empty()) {
      job_id = line.substr(0, line.find(';'));
      std::string output = o.output;
      if (const auto at = output.find("%j"); at != std::string::npos) output.replace(at, 2, job_id);
      std::cerr << "meshplan launch: submitted Slurm job " << job_id << " (output: " << output << ")"
                << (flags.wait ? "; waiting for it to end" : "") << "\n";
    } else {
      std::cout << line << "\n";
    }
  });
  if (status != 0) {
    std::cerr << "meshplan launch: sbatch exited with status " << status
              << (flags.wait && !job_id.empty() ? " (the job's own status, with --wait)" : "") << "\n";
  } else if (flags.wait) {
    std::cerr << "meshplan launch: Slurm job " << job_id << " ended with status 0\n";
  }
  return status;
}

// --hostfile: the mpirun arguments for the hosts it lists, after checking
// that their slots hold the plan's ranks.
bool hostfile_arguments(const LaunchFlags& flags, std::int64_t ranks, std::vector<std::string>& command) {
  const auto hosts = exec::read_hostfile(flags.hostfile);
  report(hosts.problems);
  if (!hosts.ok()) return false;
  const auto slots = exec::hostfile_slots(hosts.value);
  if (slots && *slots < ranks) {
    std::cerr << "meshplan launch: " << flags.hostfile << " lists " << *slots << " slots on " << hosts.value.size()
              << " host" << (hosts.value.size() == 1 ? "" : "s") << ", and the plan's mesh needs " << ranks
              << " ranks: add hosts or slots (one slot per device)\n";
    return false;
  }
  if (!slots) {
    std::cerr << "meshplan launch: warning: " << flags.hostfile
              << " gives some host no slots= count; Open MPI counts that host's processor cores\n";
  }
  command.insert(command.end(), {"--hostfile", absolute(flags.hostfile), "-x", "MESHPLAN_LAUNCHED=1"});
  for (const char* variable : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
    if (std::getenv(variable) != nullptr) command.insert(command.end(), {"-x", variable});
  }
  return true;
}

int run_launch(const LaunchFlags& flags, const std::vector<std::string>& train_args) {
  if ((flags.submit || flags.wait) && !flags.slurm) {
    std::cerr << "meshplan launch: --submit and --wait go with --slurm\n";
    return exit_bad_input;
  }
  if (flags.slurm && !flags.hostfile.empty()) {
    std::cerr << "meshplan launch: --slurm and --hostfile: Slurm chooses the hosts; give one of them\n";
    return exit_bad_input;
  }
  if (flags.wait && !flags.submit) {
    std::cerr << "meshplan launch: --wait waits for a submitted job: add --submit\n";
    return exit_bad_input;
  }
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
  const bool here = !flags.slurm && flags.hostfile.empty();
  const auto hardware_threads = static_cast<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  if (here && ranks > ranks_per_hardware_thread * hardware_threads) {
    std::cerr << "meshplan launch: " << flags.plan_path << ": the mesh " << plan.value.plan.mesh.to_string() << " needs "
              << ranks << " ranks, and this machine starts at most " << ranks_per_hardware_thread * hardware_threads
              << " (" << ranks_per_hardware_thread << " x " << hardware_threads
              << " hardware threads); --shrink reduces the model, not the mesh. Run it on its cluster "
                 "(launch --hostfile FILE, or launch --slurm), or plan a mesh of at most that many ranks to rehearse here\n";
    return exit_bad_input;
  }
  if (const Problems refused = refused_by_train(flags, plan.value, train_args); has_errors(refused)) {
    report(refused);
    std::cerr << "meshplan launch: " << (flags.slurm ? "no job written" : "mpirun not started")
              << ": meshplan train would refuse this run\n";
    return exit_bad_input;
  }
  std::vector<std::string> train{this_binary(), "train", "--plan", here ? flags.plan_path : absolute(flags.plan_path)};
  if (flags.shrink) train.push_back("--shrink");
  train.insert(train.end(), train_args.begin(), train_args.end());
  if (flags.slurm) return launch_slurm(flags, plan.value, train);

  std::vector<std::string> command{flags.mpirun, "-np", std::to_string(ranks)};
  if (here && ranks > hardware_threads) command.push_back("--oversubscribe");
  if (geteuid() == 0) command.push_back("--allow-run-as-root");
  if (!here) {
    if (!hostfile_arguments(flags, ranks, command)) return exit_bad_input;
  } else {
    for (const char* variable : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
      if (std::getenv(variable) == nullptr) {
        command.insert(command.end(), {"-x", std::string(variable) + "=" +
                                                 std::to_string(std::max<std::int64_t>(1, hardware_threads / ranks))});
      }
    }
  }
  command.insert(command.end(), train.begin(), train.end());

  if (flags.print) {
    std::cout << command_line(command) << "\n";
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
  ::setenv("MESHPLAN_LAUNCHED", "1", 1);  // local ranks inherit mpirun's environment
  const int status = run_child(command, true);
  // The ranks say why they stopped; a launcher that failed by itself may say nothing (--mpirun /bin/false).
  if (status != exit_ok && status != exit_interrupted) {  // run_child gives 128 + N for a death by signal N
    std::cerr << "meshplan launch: " << mpirun
              << (status > 128 ? " was killed by signal " + std::to_string(status - 128) : " exited with status " + std::to_string(status))
              << "\n";
  }
  return status;
}

}  // namespace

Command add_launch_command(CLI::App& app) {
  auto flags = std::make_shared<LaunchFlags>();
  auto* command = app.add_subcommand(
      "launch", "Start the plan's ranks under mpirun, here or on a hostfile's hosts, or as a Slurm job, and train "
                "(other flags go to train; docs/clusters.md)");
  command->add_option("--plan", flags->plan_path, "Plan file (JSON) from `meshplan plan --emit-plan` or explain")
      ->required();
  command->add_option("--mpirun", flags->mpirun, "The MPI launcher to run")->capture_default_str();
  command->add_flag("--print,--dry-run", flags->print,
                    "Print the exact command (with --slurm: the sbatch script and the sbatch command) instead of running it");
  command->add_flag("--shrink", flags->shrink,
                    "Rehearse a cluster plan here: train --shrink, the same mesh with the model reduced to fit");
  command->add_option("--hostfile", flags->hostfile,
                      "Open MPI hostfile ('host slots=N' lines): start the ranks on those hosts");
  command->add_flag("--slurm", flags->slurm, "Write an sbatch script that runs the plan's ranks with srun (see --submit)");
  command->add_flag("--submit", flags->submit, "With --slurm: submit the script with sbatch and print the job id");
  command->add_flag("--wait", flags->wait, "With --submit: wait for the job to end and exit with its status");
  command->add_option("--script", flags->script, "With --slurm: where to write the script (default: <job name>.sbatch)");
  exec::SlurmOptions& o = flags->slurm_options;
  command->add_option("--nodes", o.nodes, "With --slurm: nodes (default: ranks / tasks per node)")->check(at_least(1));
  command->add_option("--tasks-per-node", o.tasks_per_node,
                      "With --slurm: ranks per node (default: the plan's cluster's devices per node)")
      ->check(at_least(1));
  command->add_option("--gpus-per-node", o.gpus_per_node,
                      "With --slurm: GPUs per node (default: tasks per node on a GPU cluster, none on CPUs)")
      ->check(at_least(0));
  command->add_option("--cpus-per-task", o.cpus_per_task,
                      "With --slurm: CPUs per rank, also each rank's OMP/OpenBLAS threads")
      ->check(at_least(1));
  command->add_option("--partition", o.partition, "With --slurm: the partition");
  command->add_option("--account", o.account, "With --slurm: the account to charge");
  command->add_option("--time", o.time, "With --slurm: the time limit (Slurm's format, e.g. 02:00:00)");
  command->add_option("--job-name", o.job_name, "With --slurm: the job name (default: meshplan-<plan file stem>)");
  command->add_option("--output", o.output, "With --slurm: the job's output file (default: <job name>-%j.out)");
  command->add_option("--srun-mpi", o.srun_mpi, "With --slurm: srun's --mpi plugin")->capture_default_str();
  command->allow_extras();
  return [flags, command]() { return run_launch(*flags, command->remaining()); };
}

}  // namespace meshplan::cli
