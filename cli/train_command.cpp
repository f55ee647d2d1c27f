// `meshplan train --plan plan.json`: trains a plan written by `explain` or
// `plan --emit-plan`, on one rank or on every rank of `mpirun -np <world
// size>` alike: the training session (executor/train/session.hpp) does the
// work around the steps (resume, checkpoints, metrics, evaluation, one
// agreed stop decision per step), this command parses the flags and prints:
// the step lines (cli/train_progress.hpp), Ctrl-C / SIGTERM
// (cli/train_interrupt.hpp: stop after the step, save, print the resume
// command, exit 130), and the run report, measured against predicted step
// time and memory per rank (cli/run_report.hpp). A plan the executor cannot
// train, unreadable --data, an unwritable --checkpoint-dir or run report
// and optimiser settings no run can use (a nan or negative --lr) are
// refused before MPI starts (executor/train/trainable.hpp,
// session_config_problems); a job whose rank count
// differs from the plan's world size is refused once it has.
//
// --backend cuda trains a transformer on a GPU (executor/parallel/
// cuda_gpt_ops.hpp); --backend auto, the default, picks it for a plan made
// for an NVIDIA GPU when one here can run it (cli/train_backend.hpp). This
// file is built twice: into `meshplan`, which for a GPU run execs
// meshplan-train-cuda beside it with the same arguments (read back from
// /proc/self/cmdline), so that `meshplan` does not load the CUDA runtime for
// every command; and into meshplan-train-cuda (MESHPLAN_TRAIN_CUDA_BUILD,
// cli/train_cuda.hpp), which opens the GPU: the launcher's local rank modulo
// the GPUs it sees, so ranks share GPUs when there are fewer than ranks.
// Without that program --backend cuda exits 2 and says why; --backend auto
// trains on the CPU and says why.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <thread>

#include <unistd.h>

#include "cli/commands.hpp"
#include "cli/run_report.hpp"
#include "cli/sibling_program.hpp"
#include "cli/train_backend.hpp"
#include "cli/train_flags.hpp"
#include "cli/train_interrupt.hpp"
#include "cli/train_progress.hpp"
#include "cli/unknown_flag.hpp"
#include "executor/backend/backend.hpp"
#include "executor/checkpoint/checkpoint.hpp"
#include "executor/comm/world.hpp"
#include "executor/metrics/metrics.hpp"
#include "executor/train/session.hpp"
#include "executor/train/trainable.hpp"
#include "model/explain.hpp"
#include "model/plan_file.hpp"
#include "model/shrink.hpp"

#if defined(MESHPLAN_TRAIN_CUDA_BUILD)
#include "cli/train_cuda.hpp"
#endif

namespace meshplan::cli {
namespace {

void report(const Problems& problems) {
  for (const auto& p : problems) std::cerr << "meshplan train: " << describe(p) << "\n";
}

// Where a stop (Ctrl-C, SIGTERM, --stop-after) saves when --checkpoint-dir
// was not given: "<plan file stem>-checkpoints" in the working directory,
// beside the run's other outputs. Saving somewhere is better than losing the
// run; the message names the folder and the resume command uses it.
std::string default_checkpoint_dir(const std::string& plan_path) {
  return std::filesystem::path(plan_path).stem().string() + "-checkpoints";
}

std::string checkpoint_dir_of(const TrainFlags& f) {
  return f.checkpoint_dir.empty() ? default_checkpoint_dir(f.plan_path) : f.checkpoint_dir;
}

// After a run that stopped before its last step (interrupted, or
// --stop-after): where the checkpoint is and the command that resumes.
// Returns the exit status: 130 when interrupted, else 0 (or 1 if the save
// failed). Prints on `leader` only.
int finish_stopped_run(const TrainFlags& f, std::int64_t steps_done, std::int64_t total_steps, bool interrupted,
                       const Problems& save_problems, std::int64_t ranks, bool leader) {
  if (leader) {
    std::cout.flush();
    const std::string dir = checkpoint_dir_of(f);
    const std::string why = interrupted ? "interrupted" : "stopped (--stop-after)";
    std::cerr << "meshplan train: " << why << " after step " << steps_done << " of " << total_steps;
    if (has_errors(save_problems)) {
      std::cerr << "; no checkpoint was saved:\n";
      report(save_problems);
    } else {
      std::cerr << "; checkpoint " << (std::filesystem::path(dir) / exec::checkpoint_directory_name(steps_done)).string()
                << (f.checkpoint_dir.empty() ? " (no --checkpoint-dir: the default folder)" : "") << "\n"
                << "resume with: "
                << resume_command(this_command_line(), dir, ranks, std::getenv("MESHPLAN_LAUNCHED") != nullptr) << "\n";
    }
  }
  quiet_further_interrupts();  // said all there is to say; mpirun's teardown may still signal
  if (interrupted) return exit_interrupted;
  return has_errors(save_problems) ? 1 : exit_ok;
}

// The first signal's note (stderr, written by the handler), from the leader only.
std::string interrupt_notice(bool leader) {
  return leader ? "\nmeshplan train: stopping after this step to save a checkpoint (interrupt again to stop at "
                  "once, without saving)\n"
                : "";
}

// Full lines and the live progress line (train_progress.hpp); a terminal only
// when stdout is one and no MPI launcher started us (a rank's stdout is
// mpirun's pseudo-terminal, whatever mpirun's own is).
TrainLog make_train_log(const TrainFlags& f, std::int64_t first_step, std::int64_t total_steps, const std::string& unit) {
  const bool terminal = ::isatty(STDOUT_FILENO) == 1 && !exec::comm::started_by_mpi_launcher();
  return TrainLog(std::cout, terminal, first_step, total_steps, f.log_every, unit);
}

// This process's rank as its launcher set it (0 when started alone): before
// MPI is initialised, so that --shrink reports once.
bool leader_by_environment() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "RANK"})
    if (const char* value = std::getenv(name)) return std::string(value) == "0";
  return true;
}

// --shrink (model/shrink.hpp): replaces the plan file's model and plan by the
// largest reduction that fits this machine, on the local-cpu preset. Budget:
// 3/4 of the machine's memory shared by the plan's ranks; an estimated step
// of at most 2 s at local-cpu's compute rate, shortened in proportion when
// the ranks outnumber the hardware threads (they then share cores).
bool shrink_for_this_machine(PlanFile& pf) {
  const bool leader = leader_by_environment();
  auto local = load_cluster("local-cpu");
  if (!local.ok()) {
    if (leader) report(local.problems);
    return false;
  }
  const std::int64_t ranks = pf.plan.mesh.world_size();
  const auto threads = static_cast<double>(std::max(1u, std::thread::hardware_concurrency()));
  ShrinkBudget budget;
  budget.cluster = local.value;
  const double memory = exec::host_memory_bytes();  // MemTotal: every rank computes the same shrunk model
  budget.memory_bytes_per_rank = 0.75 * memory / static_cast<double>(ranks);
  budget.step_seconds = 2.0 * std::min(1.0, threads / static_cast<double>(ranks));
  auto shrunk = shrink_plan(pf.model, pf.plan, budget);
  if (!shrunk.ok()) {
    if (leader) report(shrunk.problems);
    return false;
  }
  const ShrinkResult& r = shrunk.value;
  const Explanation explanation = explain_plan(r.model, r.cluster, Deployment{ranks, 0}, r.plan);
  if (!explanation.memory) {
    if (leader) report(explanation.problems);
    return false;
  }
  if (leader) {
    std::printf("--shrink: %s on %s (%lld ranks) rehearsed on this machine (%.0f hardware threads, %.1f GiB):\n",
                pf.model.name.c_str(), pf.plan.mesh.to_string().c_str(), static_cast<long long>(ranks), threads,
                memory / (1024.0 * 1024 * 1024));
    for (const ShrinkChange& c : r.changes)
      std::printf("  %-12s %s -> %s\n", c.field.c_str(), c.before.c_str(), c.after.c_str());
    std::printf("  parameters   %.4g -> %.4g\n", pf.prediction.parameters, r.parameters);
    std::printf("  why: %s\n", r.why.c_str());
    std::fflush(stdout);
  }
  pf = make_plan_file(r.model, r.cluster, ranks, r.plan, explanation);
  return true;
}

// The world this run trains in: MPI's when a launcher started it or the plan
// needs more ranks (a plan of N ranks run without mpirun is refused by the
// session, naming the command); a group of one otherwise, with no MPI.
Loaded<std::unique_ptr<exec::comm::Communicator>> world_for(const Plan& plan) {
  if (plan.mesh.world_size() > 1 || exec::comm::started_by_mpi_launcher()) return exec::comm::open_world();
  return {exec::comm::make_self_communicator("world"), {}};
}

// The planner priced the plan in its precision; say what the matmuls compute in (docs/formats.md, "Metrics").
void say_precision(const PlanFile& pf, Precision compute) {
  if (pf.plan.precision != compute)
    std::cout << "note: the plan assumes " << to_string(pf.plan.precision) << "; training computes the matmuls in "
              << to_string(compute) << (compute == Precision::fp32 ? " (the default; --precision bf16 to match)" : "")
              << "\n";
  if (pf.plan.bf16_moments)
    std::cout << "note: the plan keeps Adam's moments in bf16; training keeps them in fp32 (4 bytes per parameter of "
                 "optimizer state more than predicted)\n";
  // Say when bf16 had no figure to price (one truth: the preset).
  if (compute == Precision::bf16 && !pf.cluster.device.peak_for(Dtype::bf16))
    std::cout << "note: " << missing_peak_message(pf.cluster.device, Dtype::bf16)
              << "; plan and explain cannot price bf16 for it until it has one\n";
}

#if !defined(MESHPLAN_TRAIN_CUDA_BUILD)
// This process's arguments after the program name, as it was started.
std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(in, arg, '\0')) args.push_back(arg);
  if (!args.empty()) args.erase(args.begin());
  return args;
}

constexpr const char* kNoTrainCudaProgram = "this meshplan was built without the CUDA toolkit (no meshplan-train-cuda)";

// The same command in meshplan-train-cuda; returns only when that cannot start, saying why.
std::string exec_train_cuda() {
#if defined(MESHPLAN_TRAIN_CUDA_PROGRAM)
  return exec_beside_meshplan(MESHPLAN_TRAIN_CUDA_PROGRAM, own_arguments());
#else
  return kNoTrainCudaProgram;
#endif
}

// For --backend auto: why this meshplan cannot hand the plan to a GPU, or nullopt.
std::optional<std::string> gpu_cannot_run() {
#if !defined(MESHPLAN_TRAIN_CUDA_PROGRAM)
  return std::string(kNoTrainCudaProgram);
#else
  return nvidia_gpu_visible();
#endif
}
#endif

// --backend as this process trains: cpu or cuda (auto resolved, its note
// printed by the leader). In `meshplan`, cuda means: exec meshplan-train-cuda;
// returns an exit status when that could not start for --backend cuda.
std::optional<int> resolve_backend(TrainFlags& f, const PlanFile& pf) {
#if defined(MESHPLAN_TRAIN_CUDA_BUILD)
  BackendChoice choice = choose_backend(f.backend, pf, cuda_cannot_train);
#else
  BackendChoice choice = choose_backend(f.backend, pf, gpu_cannot_run);
  if (choice.backend == "cuda") {
    const std::string why = exec_train_cuda();  // returns only when it could not start
    if (f.backend == "cuda") {
      if (leader_by_environment())
        report({{Severity::error, "--backend", "cuda: " + why + "; --backend cpu trains on this machine's cores"}});
      return exit_bad_input;
    }
    choice = cpu_instead(pf, why);
  }
#endif
  if (!choice.note.empty() && leader_by_environment()) std::cout << "note: " << choice.note << "\n";
  f.backend = choice.backend;
  return std::nullopt;
}

int run_train(const TrainFlags& flags) {
  TrainFlags f = flags;
  install_interrupt_handlers(interrupt_notice(leader_by_environment()));
  auto plan_file = read_plan_file(f.plan_path);
  if (!plan_file.ok()) {
    report(plan_file.problems);
    return exit_bad_input;
  }
  if (f.shrink && !shrink_for_this_machine(plan_file.value)) return exit_bad_input;
  const PlanFile& pf = plan_file.value;
  // After resolve_backend: a GPU run execs meshplan-train-cuda with these arguments, which says it once.
  if (const std::optional<int> status = resolve_backend(f, pf)) return *status;
  if (f.session.data.empty()) {
    f.session.data = exec::default_data_spec(pf.model);
    if (leader_by_environment()) {
      const std::string reason = exec::default_data_reason(pf.model);
      std::cerr << "meshplan train: note: no --data: training on " << f.session.data
                << (reason.empty() ? "" : " (" + reason + ")") << "\n";
    }
  }
  // What would stop the run later, found before MPI starts: every rank
  // checks and exits 2, so mpirun ends the job cleanly; rank 0 says why.
  const std::int64_t seq_len = exec::training_seq_len(pf.model, pf.plan);
  Problems refused = exec::trainable(pf.model, pf.plan, seq_len);
  const Problems inputs = exec::run_input_problems(f.session.data, seq_len, f.checkpoint_dir);
  refused.insert(refused.end(), inputs.begin(), inputs.end());
  if (!f.session.resume && !f.checkpoint_dir.empty()) {
    // A fresh run beside another run's checkpoints: its saves collided with theirs after the training
    // ("already exists"), and a later --resume picked whichever step was newest.
    const auto earlier = exec::latest_checkpoint(f.checkpoint_dir);
    if (earlier.value) {
      refused.push_back({Severity::error, "--checkpoint-dir " + f.checkpoint_dir,
                         "holds checkpoints of an earlier run (the newest " + *earlier.value +
                             "): add --resume to continue it, or give an empty folder for a new run"});
    }
  }
  const Problems data_fit = exec::data_model_problems(f.session.data, pf.model);
  refused.insert(refused.end(), data_fit.begin(), data_fit.end());
  const Problems settings = train_settings_problems(f);
  refused.insert(refused.end(), settings.begin(), settings.end());
  if (f.backend == "cpu") {
    // From the model and plan, not the file's prediction block, which is informative and may be
    // stale or edited (a lowered figure let a 26 GiB plan fill this machine's memory).
    const PlanPrediction predicted =
        prediction_from(explain_plan(pf.model, pf.cluster, Deployment{pf.plan.mesh.world_size(), 0}, pf.plan));
    const Problems memory = exec::host_memory_problems(predicted.memory.allocated_peak_bytes(),
                                                       local_ranks_from_environment(1), exec::host_memory_bytes());
    refused.insert(refused.end(), memory.begin(), memory.end());
  }
  if (has_errors(refused)) {
    if (leader_by_environment()) report(refused);
    return exit_bad_input;
  }
  // BLAS and OpenMP threads per rank, before any work (run_report.hpp, "Threads").
  const ComputeThreads threads = set_compute_threads(local_ranks_from_environment(1));
  auto world = world_for(pf.plan);
  if (!world.ok()) {
    report(world.problems);
    return exit_bad_input;
  }
  exec::comm::Communicator& comm = *world.value;
  const bool leader = comm.rank() == 0;
  // Take SIGTERM back from the communicator's note (a stop request here).
  install_interrupt_handlers(interrupt_notice(leader));
  if (const std::string why = exec::comm::timeout_problem(f.comm_timeout_s); !why.empty()) {
    if (leader) report({{Severity::error, "--comm-timeout", why}});
    return exit_bad_input;
  }
  comm.set_timeout(std::chrono::duration<double>(f.comm_timeout_s));

  exec::SessionConfig config = f.session;
  config.checkpoint_dir = checkpoint_dir_of(f);
  config.checkpoints_on = !f.checkpoint_dir.empty();
  config.compute = f.precision == "bf16" ? Precision::bf16 : Precision::fp32;
  config.threads = threads.threads;
#if defined(MESHPLAN_TRAIN_CUDA_BUILD)
  if (f.backend == "cuda") config.device = [] { return open_cuda_training_device(); };
#endif
  std::optional<TrainLog> log;
  StepRecorder step_seconds;  // this rank's, for the run report
  exec::SessionHooks hooks;
  hooks.report = [](const Problems& problems) { report(problems); };
  hooks.say = [&](const std::string& line) {
    if (log) log->line(line);
    else std::cout << line << "\n";
  };
  hooks.step = [&](const exec::StepReport& s, const std::string& line) { log->step(s.step, s.loss, s.items_per_s, line); };
  hooks.interrupt_requested = [] { return interrupt_requested(); };
  hooks.step_time = [&](double step_s) { step_seconds.record(step_s); };
  auto session = exec::TrainingSession::open(config, pf, comm, hooks);
  if (!session.ok()) return exit_bad_input;
  exec::TrainingSession& run = *session.value;
  if (run.already_finished()) return exit_ok;
  if (leader) say_precision(pf, config.compute);
  log.emplace(make_train_log(f, run.first_step(), run.total_steps(), run.unit()));

  const exec::SessionEnd end = run.train();
  if (leader) {
    log->finish();
    report(end.problems);
  }
  if (end.kind == exec::SessionEnd::failed) return 1;
  if (end.kind == exec::SessionEnd::stopped)
    return finish_stopped_run(f, end.steps_done, run.total_steps(), end.interrupted, end.save_problems, comm.size(),
                              leader);
  const exec::MemorySnapshot memory = run.memory();
  if (leader) std::cout << exec::format_peak_memory(memory) << "\n";
  Problems run_problems = end.save_problems;
  const Problems report_problems =  // collective: every rank's measurement goes to rank 0
      write_run_report(&comm, pf, f.session.data, predict_on_this_machine(pf, threads.threads, config.compute, f.backend == "cuda", run.attention()),
                       measure_rank(comm.rank(), threads.threads, step_seconds,
                                    static_cast<double>(memory.total.peak_bytes)),
                       threads, report_path_of(f));
  run_problems.insert(run_problems.end(), report_problems.begin(), report_problems.end());
  run.final_evaluation();
  if (leader) report(run_problems);
  return has_errors(run_problems) ? 1 : exit_ok;
}

}  // namespace

void add_train_flags(CLI::App& command, TrainFlags& f) {
  command.add_option("--plan", f.plan_path, "Plan file from `explain --emit-plan` or `plan --emit-plan`")->required();
  command.add_flag("--shrink", f.shrink,
                   "Rehearse the plan here: the same mesh with the model's layers and width reduced to fit this "
                   "machine (keeps every divisibility the plan relies on)");
  f.session.data.clear();  // the plan's model picks the default (exec::default_data_spec)
  command.add_option("--data", f.session.data,
                     "Transformers: text:PATH (the bytes of a file or folder) or synthetic-text (generated byte "
                     "text, loss floor ln 4); MLPs: fashion-mnist[:DIR] or synthetic (default: synthetic-text for "
                     "transformers, fashion-mnist for 784-input 10-class MLPs, else synthetic)");
  auto* steps = command.add_option("--steps", f.session.steps, "Optimizer steps")->check(at_least(1));
  command.add_option("--epochs", f.session.epochs, "Epochs over the training split (instead of --steps)")->excludes(steps);
  command.add_option_function<double>(
      "--lr", [&f](double lr) { f.session.lr = lr; },
      "Peak learning rate (AdamW) (default: GPT-3's published peak rate for the transformer's size, Brown et "
      "al. 2020, Table 2.1, e.g. 6e-4 for 125M, 2e-4 for 1.3B; 1e-3 below 125M and for MLPs; named on the "
      "run's first lines)");
  command.add_option("--warmup", f.session.warmup, "Linear warm-up steps before the cosine decay")->capture_default_str();
  command.add_option("--clip", f.session.clip, "Global gradient-norm clipping (<= 0: off)")->capture_default_str();
  command.add_option("--weight-decay", f.session.weight_decay, "AdamW weight decay on matrices")->capture_default_str();
  command.add_option("--seed", f.session.seed, "Seed of initialisation and data order")->capture_default_str();
  command.add_option("--checkpoint-dir", f.checkpoint_dir,
                     "Where checkpoints are written (a stop by Ctrl-C or --stop-after without it: "
                     "<plan stem>-checkpoints)");
  command.add_option("--checkpoint-every", f.session.checkpoint_every, "Steps between checkpoints (0: only at the end)");
  command.add_flag("--resume", f.session.resume, "Continue from the newest intact checkpoint in --checkpoint-dir");
  command.add_option("--metrics", f.session.metrics_path, "JSON Lines file of per-step and evaluation metrics");
  command.add_option("--report", f.report_path,
                     "Run report JSON, measured against predicted step time and memory per rank (default: the "
                     "--metrics file's stem + .report.json; the table is printed either way)");
  command.add_option("--eval-every", f.session.eval_every, "Steps between evaluations (language models; 0: none)");
  command.add_option("--eval-samples", f.session.eval_samples,
                     "Samples (windows) per evaluation; default: 64 micro-batches for language models, "
                     "the whole test split for classifiers")
      ->check(at_least(1));
  command.add_flag("--skip-non-finite", f.session.skip_non_finite, "Skip a step whose loss or gradient is not finite");
  command.add_option("--stop-after", f.session.stop_after,
                     "Stop after this many steps with a checkpoint, as Ctrl-C would (exit 0; 0: off)");
  command.add_option("--log-every", f.log_every,
                     "Print the full metrics line every N steps (and the first and last; on a terminal a live "
                     "progress line in between; the --metrics file gets every step)")
      ->check(at_least(1))
      ->capture_default_str();
  command.add_option("--precision", f.precision, "Matmul arithmetic: fp32, or bf16 (inputs rounded, fp32 accumulate)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  command.add_option("--backend", f.backend,
                     "Where a transformer trains: cpu (this machine's cores), cuda (a GPU per rank, ranks "
                     "sharing GPUs when there are fewer; meshplan-train-cuda), or auto: cuda "
                     "when the plan was made for an NVIDIA GPU and one here can train it, else cpu")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  command.add_option("--comm-timeout", f.comm_timeout_s,
                     "Seconds a rank waits in a collective before the job is stopped (multi-rank plans)")
      ->capture_default_str();
}

std::string report_path_of(const TrainFlags& f) {
  return f.report_path.empty() ? default_report_path(f.session.metrics_path) : f.report_path;
}

Problems train_flag_problems(const std::vector<std::string>& args, TrainFlags& f) {
  CLI::App app{"train"};
  add_train_flags(app, f);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes a vector last argument first
  try {
    app.parse(reversed);
  } catch (const CLI::ExtrasError& e) {
    // CLI11 lists the extras last first ("3 --bogus"): name the first unknown flag instead.
    const std::vector<std::string_view> views(args.begin(), args.end());
    if (const auto flag = first_unknown_flag(app, views)) return {{Severity::error, "train", unknown_flag_message(app, *flag)}};
    return {{Severity::error, "train", e.what()}};
  } catch (const CLI::ParseError& e) {
    return {{Severity::error, "train", e.what()}};
  }
  return train_settings_problems(f);
}

Problems train_settings_problems(const TrainFlags& f) {
  Problems problems = exec::session_config_problems(f.session);
  const Problems report_file = exec::output_file_problems(report_path_of(f), "--report");
  problems.insert(problems.end(), report_file.begin(), report_file.end());
  return problems;
}

Command add_train_command(CLI::App& app) {
  auto* command = app.add_subcommand("train", "Train a plan file's model for real, on the CPU or a GPU (multi-rank plans under mpirun)");
  auto f = std::make_shared<TrainFlags>();
  add_train_flags(*command, *f);
  return [f]() { return run_train(*f); };
}

}  // namespace meshplan::cli
