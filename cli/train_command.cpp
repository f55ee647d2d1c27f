// `meshplan train --plan plan.json`: trains a plan written by `explain` or
// `plan --emit-plan`. Single-rank plans (every mesh axis 1) run the
// single-rank trainer; multi-rank plans run under `mpirun -np <world size>`
// on the parallel executor (executor/parallel/, docs/executor-parallel.md),
// and a job whose rank count differs from the plan's world size is refused.
// Metrics go to JSON Lines, checkpoints are atomic and resumable with
// bit-identical losses (single rank). Every run ends with the run report,
// measured against predicted step time and memory per rank (cli/run_report.hpp).
//
// Both paths share what happens around the steps, so they cannot drift
// apart: resuming from the newest intact checkpoint (a damaged one is skipped
// with a warning), a resumed run that is already finished (said, exit 0), one
// decision per step to save and to stop (executor/train/run_control.hpp),
// Ctrl-C / SIGTERM (cli/train_interrupt.hpp: stop after the step, save, print
// the resume command, exit 130) and the screen output (cli/train_progress.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <thread>

#include <unistd.h>

#include "cli/commands.hpp"
#include "cli/run_report.hpp"
#include "cli/train_interrupt.hpp"
#include "cli/train_progress.hpp"
#include "executor/backend/backend.hpp"
#include "executor/checkpoint/checkpoint.hpp"
#include "executor/comm/mesh_comms.hpp"
#include "executor/comm/world.hpp"
#include "executor/data/loader.hpp"
#include "executor/metrics/metrics.hpp"
#include "executor/model/model.hpp"
#include "executor/parallel/parallel_checkpoint.hpp"
#include "executor/parallel/parallel_trainer.hpp"
#include "executor/train/run_control.hpp"
#include "executor/train/trainer.hpp"
#include "model/evaluate.hpp"
#include "model/explain.hpp"
#include "model/plan_file.hpp"
#include "model/shrink.hpp"

namespace meshplan::cli {
namespace {

// The metrics line of one optimizer step, as both training paths write it
// (mfu and memory are filled in by the path that knows them).
exec::StepMetrics step_metrics(const exec::StepReport& s, exec::ThroughputUnit unit) {
  exec::StepMetrics line;
  line.step = s.step;
  line.loss = s.loss;
  line.learning_rate = s.lr;
  line.grad_norm = s.grad_norm;
  line.step_s = s.step_s;
  line.throughput_per_s = s.items_per_s;
  line.throughput_unit = unit;
  return line;
}

struct TrainFlags {
  std::string plan_path;
  std::string data = "synthetic";
  std::int64_t steps = 0;
  double epochs = 0;
  double lr = 1e-3;
  std::int64_t warmup = 0;
  double clip = 1.0;
  double weight_decay = 0;
  std::uint64_t seed = 1;
  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 0;
  bool resume = false;
  std::string metrics_path;
  std::int64_t eval_every = 0;
  std::int64_t eval_samples = 0;  // 0: language models 64 micro-batches, classifiers the whole test split
  bool skip_non_finite = false;
  std::int64_t stop_after = 0;
  double comm_timeout_s = exec::comm::default_timeout.count();
  std::string precision = "fp32";  // matmul arithmetic: fp32 or bf16
  bool shrink = false;             // rehearse the plan with a model reduced to fit this machine
  std::string report_path;         // run report JSON (default: <metrics stem>.report.json)
  std::int64_t log_every = default_log_every;  // full stdout lines every N steps (train_progress.hpp)
};

void report(const Problems& problems) {
  for (const auto& p : problems) std::cerr << "meshplan train: " << describe(p) << "\n";
}

std::vector<exec::TensorBlob> blobs_of(const exec::Parameters<float>& params) {
  std::vector<exec::TensorBlob> blobs;
  for (const auto& t : params.layout.tensors) {
    const auto begin = static_cast<std::ptrdiff_t>(t.offset), end = begin + static_cast<std::ptrdiff_t>(t.elements);
    blobs.push_back({t.name, t.shape, std::vector<float>(params.values.begin() + begin, params.values.begin() + end)});
    blobs.push_back({t.name + ".adam_m", t.shape, std::vector<float>(params.adam_m.begin() + begin, params.adam_m.begin() + end)});
    blobs.push_back({t.name + ".adam_v", t.shape, std::vector<float>(params.adam_v.begin() + begin, params.adam_v.begin() + end)});
  }
  return blobs;
}

Problems restore_blobs(exec::Parameters<float>& params, const std::vector<exec::TensorBlob>& blobs, const std::string& where) {
  std::map<std::string, const exec::TensorBlob*> by_name;
  for (const auto& b : blobs) by_name[b.name] = &b;
  Problems problems;
  for (const auto& t : params.layout.tensors) {
    const std::pair<const char*, exec::TrackedVector<float>*> parts[] = {
        {"", &params.values}, {".adam_m", &params.adam_m}, {".adam_v", &params.adam_v}};
    for (const auto& [suffix, buffer] : parts) {
      auto it = by_name.find(t.name + suffix);
      if (it == by_name.end() || it->second->shape != t.shape) {
        problems.push_back({Severity::error, where, "tensor '" + t.name + suffix + "' is missing or has another shape"});
        continue;
      }
      std::copy(it->second->data.begin(), it->second->data.end(), buffer->begin() + static_cast<std::ptrdiff_t>(t.offset));
    }
  }
  return problems;
}

// Where a stop (Ctrl-C, SIGTERM, --stop-after) saves when --checkpoint-dir
// was not given: "<plan file stem>-checkpoints" in the working directory,
// beside the run's other outputs. Saving somewhere is better than losing the
// run; the message names the folder and the resume command uses it.
std::string default_checkpoint_dir(const std::string& plan_path) {
  return std::filesystem::path(plan_path).stem().string() + "-checkpoints";
}

// The run's step bookkeeping, the same on every rank.
exec::RunControl run_control(const TrainFlags& f, std::int64_t total_steps) {
  exec::RunControl control;
  control.total_steps = total_steps;
  control.checkpoint_every = f.checkpoint_every;
  control.checkpoints_on = !f.checkpoint_dir.empty();
  control.stop_after = f.stop_after;
  return control;
}

std::string checkpoint_dir_of(const TrainFlags& f) {
  return f.checkpoint_dir.empty() ? default_checkpoint_dir(f.plan_path) : f.checkpoint_dir;
}

// --resume found a checkpoint at or past the run's last step: nothing to
// train, which is success (a finished run resumed again, as a job script
// re-run after the end would). Printed by `leader`.
bool say_if_finished(const exec::ResumePoint& resumed, const exec::RunControl& control, bool leader) {
  if (!exec::run_finished(control, resumed.contents.step)) return false;
  if (leader)
    std::cout << "training already finished: " << resumed.path << " holds step " << resumed.contents.step << " of "
              << control.total_steps << "; nothing to do (give a larger --steps to train on)\n";
  return true;
}

// The damaged checkpoints newer than the one resumed from, moved aside so
// that their steps can be saved again (one process does it: rank 0).
Problems set_damaged_aside(const exec::ResumePoint& point) {
  Problems problems;
  for (const std::string& path : point.damaged) {
    const Problems p = exec::set_checkpoint_aside(path);
    problems.insert(problems.end(), p.begin(), p.end());
  }
  return problems;
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

// A multi-rank plan, or any job an MPI launcher started: every rank runs
// this; world rank 0 alone prints and writes metrics. Returns -1 when the
// job is one rank with a one-device plan (the single-rank trainer runs it).
int run_train_parallel(const TrainFlags& f, const PlanFile& pf, const ComputeThreads& threads) {
  auto world = exec::comm::open_world();
  if (!world.ok()) {
    report(world.problems);
    return exit_bad_input;
  }
  exec::comm::Communicator& comm = *world.value;
  const bool leader = comm.rank() == 0;
  // Take SIGTERM back from the communicator's note (a stop request here, as on one rank).
  install_interrupt_handlers(interrupt_notice(leader));
  if (comm.size() == 1 && pf.plan.mesh.world_size() == 1) return -1;
  const auto refuse = [&](const Problems& problems) {
    if (leader) report(problems);
    return exit_bad_input;
  };
  if (!(f.comm_timeout_s > 0)) return refuse({{Severity::error, "--comm-timeout", "must be positive (seconds)"}});
  comm.set_timeout(std::chrono::duration<double>(f.comm_timeout_s));
  auto groups = exec::comm::MeshCommunicators::create(comm, pf.plan.mesh);
  if (!groups.ok()) return refuse(groups.problems);
  Problems flags;
  for (const auto& [given, flag] : {std::pair{f.eval_every > 0, "--eval-every"}, {f.eval_samples > 0, "--eval-samples"},
                                   {f.precision != "fp32", "--precision"}})
    if (given) flags.push_back({Severity::error, flag, "is not supported for multi-rank plans yet (single-rank plans only)"});
  if (f.resume && f.checkpoint_dir.empty())
    flags.push_back({Severity::error, "--resume", "needs --checkpoint-dir"});
  if (has_errors(flags)) return refuse(flags);
  const std::int64_t seq_len = pf.plan.seq_len > 0 ? pf.plan.seq_len : pf.model.default_seq_len();
  auto loader = data::make_loader(f.data, data::Split::train, f.seed, seq_len);
  if (!loader.ok()) return refuse(loader.problems);
  auto model = exec::parallel::ParallelGpt::create(pf.model, pf.plan, groups.value, f.seed, seq_len);
  if (!model.ok()) return refuse(model.problems);

  exec::TrainOptions o;
  o.micro_batch = pf.plan.micro_batch;
  o.micro_batches = pf.plan.micro_batches();
  o.steps = f.steps;
  if (o.steps <= 0 && f.epochs > 0)
    o.steps = static_cast<std::int64_t>(std::ceil(f.epochs * static_cast<double>(loader.value->samples_per_epoch()) /
                                                  static_cast<double>(pf.plan.global_batch)));
  if (o.steps <= 0)
    return refuse({{Severity::error, "--steps", "--steps or --epochs: give a positive number of steps or epochs"}});
  o.adamw.learning_rate = f.lr;
  o.adamw.weight_decay = f.weight_decay;
  o.warmup_steps = f.warmup;
  o.max_grad_norm = f.clip;
  o.on_non_finite = f.skip_non_finite ? exec::NonFiniteAction::skip : exec::NonFiniteAction::stop;

  // Checkpoints hold full tensors by name (parallel_checkpoint.hpp): saved by
  // rank 0 under this plan, loadable under any plan of the model or on one rank.
  const exec::RunControl control = run_control(f, o.steps);
  std::int64_t updates = 0;
  if (f.resume) {
    auto resumed = exec::load_latest_checkpoint(f.checkpoint_dir);
    if (leader) report(resumed.problems);
    if (!resumed.ok()) return exit_bad_input;
    if (resumed.value) {
      const exec::ResumePoint& point = *resumed.value;
      if (say_if_finished(point, control, leader)) return exit_ok;
      if (leader) report(set_damaged_aside(point));
      Problems problems = exec::parallel::restore_checkpoint_tensors(*model.value, point.contents.tensors, point.path);
      const Problems data_problems = loader.value->restore(point.contents.data_state);
      problems.insert(problems.end(), data_problems.begin(), data_problems.end());
      if (has_errors(problems)) return refuse(problems);
      o.first_step = point.contents.step;
      updates = point.contents.extra.value("updates", point.contents.step);
      o.completed_updates = updates;
      if (leader) std::cout << "resumed from " << point.path << " at step " << o.first_step << "\n";
    }
  }
  const nlohmann::json plan_json = nlohmann::json::parse(plan_file_to_json(pf).dump());
  const std::string checkpoint_dir = checkpoint_dir_of(f);
  Problems run_problems;
  auto save = [&](std::int64_t steps_done) {  // collective: every rank gathers, rank 0 writes
    exec::CheckpointContents contents;
    contents.step = steps_done;
    contents.plan = plan_json;
    contents.seed = f.seed;
    contents.data_state = loader.value->state();
    contents.tensors = exec::parallel::gather_checkpoint_tensors(*model.value);
    contents.extra = {{"updates", updates}, {"total_steps", o.steps}};
    std::int32_t failed = 0;
    if (leader) {
      const Problems p = exec::save_checkpoint(checkpoint_dir, contents);
      run_problems.insert(run_problems.end(), p.begin(), p.end());
      failed = has_errors(p) ? 1 : 0;
    }
    // Every rank waits for rank 0's files: a rank that exited first would have
    // mpirun end the job, rank 0's save with it; and all learn the outcome.
    comm.all_reduce(&failed, 1, exec::comm::DataType::i32, exec::comm::ReduceOp::max);
    if (failed != 0 && !leader)
      run_problems.push_back({Severity::error, checkpoint_dir, "rank 0 could not save the checkpoint"});
  };

  std::unique_ptr<exec::MetricsWriter> metrics;
  std::int32_t failed = 0;  // every rank learns whether rank 0 could open the metrics file
  if (leader && !f.metrics_path.empty()) {
    auto opened = exec::MetricsWriter::open(f.metrics_path, f.resume);
    report(opened.problems);
    if (opened.ok()) metrics = std::move(opened.value);
    else failed = 1;
  }
  comm.all_reduce(&failed, 1, exec::comm::DataType::i32, exec::comm::ReduceOp::max);
  if (failed != 0) return exit_bad_input;
  if (leader)
    std::cout << "training " << pf.plan.mesh.to_string() << " on " << comm.size() << " ranks ("
              << to_string(pf.plan.schedule) << ", zero " << pf.plan.zero_stage
              << (pf.plan.sequence_parallel ? ", sequence parallel" : "") << ")\n";
  TrainLog log = make_train_log(f, o.first_step, o.steps, "tokens");
  StepRecorder step_seconds;  // this rank's, for the run report
  bool stopping = false, interrupted = false;
  std::int64_t steps_done = o.first_step;
  o.on_step = [&](const exec::StepReport& s) {
    if (!s.skipped) ++updates;
    step_seconds.record(s.step_s);
    steps_done = s.step + 1;
    if (leader) {
      const exec::StepMetrics line = step_metrics(s, exec::ThroughputUnit::tokens);
      log.step(s.step, s.loss, s.items_per_s, exec::format_line(line));
      if (metrics) metrics->write(line);
    }
    // The ranks agree on a signal that reached any of them: one small all-reduce per step.
    std::int32_t signalled = interrupt_requested() ? 1 : 0;
    comm.all_reduce(&signalled, 1, exec::comm::DataType::i32, exec::comm::ReduceOp::max);
    interrupted = signalled != 0;
    const exec::AfterStep after = exec::decide_after_step(control, steps_done, interrupted);
    if (after.save) save(steps_done);
    stopping = after.stop;
  };
  o.stop_requested = [&] { return stopping; };
  const exec::TrainResult result = exec::parallel::train_parallel(*model.value, pf.plan, *loader.value, o);
  if (leader) log.finish();
  if (leader) report(result.problems);
  if (!result.ok()) return 1;
  if (result.stopped_early)
    return finish_stopped_run(f, steps_done, o.steps, interrupted, run_problems, comm.size(), leader);
  const Problems report_problems =  // collective: every rank's measurement goes to rank 0
      write_run_report(&comm, pf, predict_on_this_machine(pf, threads.threads, Precision::fp32),
                       measure_rank(comm.rank(), threads.threads, step_seconds, std::nullopt), threads,
                       f.report_path.empty() ? default_report_path(f.metrics_path) : f.report_path);
  run_problems.insert(run_problems.end(), report_problems.begin(), report_problems.end());
  if (leader) report(run_problems);
  return has_errors(run_problems) ? 1 : exit_ok;
}

// This process's rank as its launcher set it (0 when started alone): before
// MPI is initialised, so that --shrink reports once.
bool leader_by_environment() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "RANK"})
    if (const char* value = std::getenv(name)) return std::string(value) == "0";
  return true;
}

// Bytes of this machine's memory (MemTotal: every rank must compute the same
// shrunk model, so nothing that changes from moment to moment).
double machine_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemTotal:") return kib * 1024.0;
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return 8.0 * 1024 * 1024 * 1024;  // no /proc: assume 8 GiB
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
  const double memory = machine_memory_bytes();
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

int run_train(const TrainFlags& f) {
  install_interrupt_handlers(interrupt_notice(leader_by_environment()));
  auto plan_file = read_plan_file(f.plan_path);
  if (!plan_file.ok()) {
    report(plan_file.problems);
    return exit_bad_input;
  }
  if (f.shrink && !shrink_for_this_machine(plan_file.value)) return exit_bad_input;
  const PlanFile& pf = plan_file.value;
  // BLAS and OpenMP threads per rank, before any work (run_report.hpp, "Threads").
  const ComputeThreads threads = set_compute_threads(local_ranks_from_environment(1));
  if (pf.plan.mesh.world_size() > 1 || exec::comm::started_by_mpi_launcher()) {
    const int status = run_train_parallel(f, pf, threads);
    if (status >= 0) return status;
  }
  auto options = exec::train_options_for_plan(pf.plan);
  if (!options.ok()) {
    report(options.problems);
    std::cerr << "meshplan train: this build trains single-rank plans (every mesh axis 1); multi-rank meshes "
                 "come with the executor's parallelism\n";
    return exit_bad_input;
  }
  const std::int64_t seq_len = pf.plan.seq_len > 0 ? pf.plan.seq_len : pf.model.default_seq_len();
  auto train_loader = data::make_loader(f.data, data::Split::train, f.seed, seq_len);
  auto eval_loader = data::make_loader(f.data, data::Split::validation, f.seed + 1, seq_len);
  if (!train_loader.ok() || !eval_loader.ok()) {
    report(train_loader.problems);
    if (train_loader.ok()) report(eval_loader.problems);
    return exit_bad_input;
  }
  auto model = exec::make_model<float>(pf.model, f.seed, pf.plan.micro_batch, seq_len);
  if (!model.ok()) {
    report(model.problems);
    return exit_bad_input;
  }
  exec::Model<float>& net = *model.value;
  // The plan's precision is the planner's assumption; the matmuls run in --precision (docs/formats.md, "Metrics").
  const Precision compute = f.precision == "bf16" ? Precision::bf16 : Precision::fp32;
  if (const Problems p = net.set_matmul_precision(compute); has_errors(p)) {
    report(p);
    return exit_bad_input;
  }
  if (pf.plan.precision != compute)
    std::cout << "note: the plan assumes " << to_string(pf.plan.precision) << "; training computes the matmuls in "
              << to_string(compute) << (compute == Precision::fp32 ? " (the default; --precision bf16 to match)" : "")
              << "\n";
  // The planner priced this plan from its device's figures; say when bf16 had none to price (one truth: the preset).
  if (compute == Precision::bf16 && !pf.cluster.device.peak_for(Dtype::bf16))
    std::cout << "note: " << missing_peak_message(pf.cluster.device, Dtype::bf16)
              << "; plan and explain cannot price bf16 for it until it has one\n";
  data::DataLoader& loader = *train_loader.value;
  const Problems fit = net.check_data(loader.shape());
  if (has_errors(fit)) {
    report(fit);
    return exit_bad_input;
  }

  exec::TrainOptions& o = options.value;
  o.steps = f.steps;
  o.epochs = f.epochs;
  if (o.steps <= 0 && o.epochs > 0) {
    o.steps = static_cast<std::int64_t>(std::ceil(o.epochs * static_cast<double>(loader.samples_per_epoch()) /
                                                  static_cast<double>(o.global_batch())));
  }
  if (o.steps <= 0) {
    std::cerr << "meshplan train: --steps or --epochs: give a positive number of steps or epochs\n";
    return exit_bad_input;
  }
  o.adamw.learning_rate = f.lr;
  o.adamw.weight_decay = f.weight_decay;
  o.warmup_steps = f.warmup;
  o.max_grad_norm = f.clip;
  o.on_non_finite = f.skip_non_finite ? exec::NonFiniteAction::skip : exec::NonFiniteAction::stop;

  const nlohmann::json plan_json = nlohmann::json::parse(plan_file_to_json(pf).dump());
  const exec::RunControl control = run_control(f, o.steps);
  std::int64_t updates = 0;
  if (f.resume) {
    if (f.checkpoint_dir.empty()) {
      std::cerr << "meshplan train: --resume needs --checkpoint-dir\n";
      return exit_bad_input;
    }
    auto resumed = exec::load_latest_checkpoint(f.checkpoint_dir);
    report(resumed.problems);
    if (!resumed.ok()) return exit_bad_input;
    if (resumed.value) {
      const exec::ResumePoint& point = *resumed.value;
      if (say_if_finished(point, control, true)) return exit_ok;
      report(set_damaged_aside(point));
      Problems problems = restore_blobs(net.parameters(), point.contents.tensors, point.path);
      const Problems data_problems = loader.restore(point.contents.data_state);
      problems.insert(problems.end(), data_problems.begin(), data_problems.end());
      if (has_errors(problems)) {
        report(problems);
        return exit_bad_input;
      }
      o.first_step = point.contents.step;
      updates = point.contents.extra.value("updates", point.contents.step);
      o.completed_updates = updates;
      std::cout << "resumed from " << point.path << " at step " << o.first_step << "\n";
    }
  }

  std::unique_ptr<exec::MetricsWriter> metrics;
  if (!f.metrics_path.empty()) {
    auto opened = exec::MetricsWriter::open(f.metrics_path, f.resume);
    if (!opened.ok()) {
      report(opened.problems);
      return exit_bad_input;
    }
    metrics = std::move(opened.value);
  }
  // MFU against the device preset's peak, from the cost model's FLOPs per sample.
  const Evaluator cost(pf.model, pf.cluster, 1, seq_len);
  const double flops_per_step = cost.profile().model_flops_per_sample * static_cast<double>(o.global_batch());
  // A local-cpu device is one core: the rank's threads are that many devices' worth of compute.
  const double peak = pf.cluster.device.peak_for(gemm_dtype(compute)).value_or(0) *
                      (pf.cluster.name == "local-cpu" ? threads.threads : 1);
  const bool language_model = pf.model.kind == ModelKind::transformer;
  const bool classifier = net.check_data(loader.shape()).empty() && loader.shape().classes > 0;

  const std::string checkpoint_dir = checkpoint_dir_of(f);
  Problems run_problems;
  std::int64_t last_epoch = loader.epoch();
  auto save = [&](std::int64_t steps_done) {
    exec::CheckpointContents contents;
    contents.step = steps_done;
    contents.plan = plan_json;
    contents.seed = f.seed;
    contents.data_state = loader.state();
    contents.tensors = blobs_of(net.parameters());
    contents.extra = {{"updates", updates}, {"total_steps", o.steps}};
    const Problems p = exec::save_checkpoint(checkpoint_dir, contents);
    run_problems.insert(run_problems.end(), p.begin(), p.end());
  };
  TrainLog log = make_train_log(f, o.first_step, o.steps, language_model ? "tokens" : "samples");
  auto run_eval = [&](std::int64_t step) {
    eval_loader.value->restore(data::LoaderState{f.seed + 1, 0, 0});
    const auto result = exec::evaluate(net, *eval_loader.value, f.eval_samples > 0 ? f.eval_samples : (language_model ? 64 * o.micro_batch : 0));
    exec::EvalMetrics e{step, loader.epoch(), result.loss, std::nullopt, result.samples};
    if (std::isfinite(result.accuracy)) e.eval_accuracy = result.accuracy;
    log.line(exec::format_line(e));
    if (metrics) metrics->write(e);
  };
  StepRecorder step_seconds;  // for the run report
  bool stopping = false, interrupted = false;
  std::int64_t steps_done = o.first_step;
  o.on_step = [&](const exec::StepReport& s) {
    if (!s.skipped) ++updates;
    step_seconds.record(s.step_s);
    steps_done = s.step + 1;
    exec::StepMetrics line =
        step_metrics(s, language_model ? exec::ThroughputUnit::tokens : exec::ThroughputUnit::samples);
    if (peak > 0 && s.step_s > 0) line.mfu = flops_per_step / s.step_s / peak;
    exec::set_memory(line, exec::default_backend().ledger().snapshot());
    log.step(s.step, s.loss, s.items_per_s, exec::format_line(line));
    if (metrics) metrics->write(line);
    if (classifier && loader.epoch() != last_epoch) {
      last_epoch = loader.epoch();
      run_eval(steps_done);
    } else if (f.eval_every > 0 && steps_done % f.eval_every == 0) {
      run_eval(steps_done);
    }
    interrupted = interrupt_requested();
    const exec::AfterStep after = exec::decide_after_step(control, steps_done, interrupted);
    if (after.save) save(steps_done);
    stopping = after.stop;
  };
  o.stop_requested = [&] { return stopping; };

  const exec::TrainResult result = exec::train(net, loader, o);
  log.finish();
  report(result.problems);
  if (!result.ok()) return 1;
  if (result.stopped_early) return finish_stopped_run(f, steps_done, o.steps, interrupted, run_problems, 1, true);
  std::cout << exec::format_peak_memory(exec::default_backend().ledger().snapshot()) << "\n";
  const Problems report_problems = write_run_report(
      nullptr, pf, predict_on_this_machine(pf, threads.threads, compute),
      measure_rank(0, threads.threads, step_seconds,
                   static_cast<double>(exec::default_backend().ledger().snapshot().total.peak_bytes)),
      threads, f.report_path.empty() ? default_report_path(f.metrics_path) : f.report_path);
  run_problems.insert(run_problems.end(), report_problems.begin(), report_problems.end());
  if (!classifier) run_eval(o.steps);
  report(run_problems);
  return has_errors(run_problems) ? 1 : exit_ok;
}

}  // namespace

Command add_train_command(CLI::App& app) {
  auto* command = app.add_subcommand("train", "Train a plan file's model for real on the CPU (multi-rank plans under mpirun)");
  auto f = std::make_shared<TrainFlags>();
  command->add_option("--plan", f->plan_path, "Plan file from `explain --emit-plan` or `plan --emit-plan`")->required();
  command->add_flag("--shrink", f->shrink,
                    "Rehearse the plan here: the same mesh with the model's layers and width reduced to fit this "
                    "machine (keeps every divisibility the plan relies on)");
  command->add_option("--data", f->data, "fashion-mnist[:DIR], text:PATH or synthetic")->capture_default_str();
  auto* steps = command->add_option("--steps", f->steps, "Optimizer steps");
  command->add_option("--epochs", f->epochs, "Epochs over the training split (instead of --steps)")->excludes(steps);
  command->add_option("--lr", f->lr, "Peak learning rate (AdamW)")->capture_default_str();
  command->add_option("--warmup", f->warmup, "Linear warm-up steps before the cosine decay")->capture_default_str();
  command->add_option("--clip", f->clip, "Global gradient-norm clipping (<= 0: off)")->capture_default_str();
  command->add_option("--weight-decay", f->weight_decay, "AdamW weight decay on matrices")->capture_default_str();
  command->add_option("--seed", f->seed, "Seed of initialisation and data order")->capture_default_str();
  command->add_option("--checkpoint-dir", f->checkpoint_dir,
                      "Where checkpoints are written (a stop by Ctrl-C or --stop-after without it: "
                      "<plan stem>-checkpoints)");
  command->add_option("--checkpoint-every", f->checkpoint_every, "Steps between checkpoints (0: only at the end)");
  command->add_flag("--resume", f->resume, "Continue from the newest intact checkpoint in --checkpoint-dir");
  command->add_option("--metrics", f->metrics_path, "JSON Lines file of per-step and evaluation metrics");
  command->add_option("--report", f->report_path,
                      "Run report JSON, measured against predicted step time and memory per rank (default: the "
                      "--metrics file's stem + .report.json; the table is printed either way)");
  command->add_option("--eval-every", f->eval_every, "Steps between evaluations (language models)");
  command->add_option("--eval-samples", f->eval_samples,
                      "Samples (windows) per evaluation; default: 64 micro-batches for language models, "
                      "the whole test split for classifiers")
      ->check(CLI::PositiveNumber);
  command->add_flag("--skip-non-finite", f->skip_non_finite, "Skip a step whose loss or gradient is not finite");
  command->add_option("--stop-after", f->stop_after,
                      "Stop after this many steps with a checkpoint, as Ctrl-C would (exit 0)");
  command->add_option("--log-every", f->log_every,
                      "Print the full metrics line every N steps (and the first and last; on a terminal a live "
                      "progress line in between; the --metrics file gets every step)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_option("--precision", f->precision, "Matmul arithmetic: fp32, or bf16 (inputs rounded, fp32 accumulate)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  command->add_option("--comm-timeout", f->comm_timeout_s,
                      "Seconds a rank waits in a collective before the job is stopped (multi-rank plans)")
      ->capture_default_str();
  return [f]() { return run_train(*f); };
}

}  // namespace meshplan::cli
