// The session of session.hpp. The model-specific part is an Engine: the
// GPT over the mesh (ParallelGpt), or the Model<float> under
// DataParallelTrainer (an MLP on a dp/fsdp/tp mesh); a one-device plan is
// the mesh of one for both. Everything else — options, resume, saving,
// metrics, evaluation, stopping — is written once.
#include "executor/train/session.hpp"

#include <cmath>
#include <sstream>

#include "executor/backend/backend.hpp"
#include "executor/checkpoint/checkpoint.hpp"
#include "executor/comm/mesh_comms.hpp"
#include "executor/comm/staged_communicator.hpp"
#include "executor/data/loader.hpp"
#include "executor/metrics/metrics.hpp"
#include "executor/model/model.hpp"
#include "executor/parallel/gpt_ops.hpp"
#include "executor/parallel/parallel_checkpoint.hpp"
#include "executor/parallel/parallel_trainer.hpp"
#include "executor/train/data_parallel.hpp"
#include "executor/train/lr_schedule.hpp"
#include "executor/train/run_control.hpp"
#include "executor/train/trainable.hpp"
#include "model/evaluate.hpp"

namespace meshplan::exec {
namespace {

Problem error(const std::string& where, const std::string& message) { return {Severity::error, where, message}; }

// What the session needs of a model: train, save and restore its tensors, evaluate.
class Engine {
 public:
  virtual ~Engine() = default;
  virtual TrainResult train(data::DataLoader& loader, const TrainOptions& options) = 0;
  virtual std::vector<TensorBlob> checkpoint_tensors() = 0;  // collective; full tensors on rank 0
  virtual Problems restore(const std::vector<TensorBlob>& blobs, const std::string& where) = 0;
  virtual EvalResult evaluate(data::DataLoader& loader, std::int64_t max_samples) = 0;  // collective
  virtual bool classifier(const data::BatchShape& shape) const = 0;  // evaluated once per epoch
  virtual Backend& backend() { return default_backend(); }           // where the model's memory is
  virtual Attention attention() const { return Attention::unfused; }  // a transformer's, as its ops compute it
};

class ParallelEngine final : public Engine {
 public:
  // `device` (may be empty: the CPU) and `staged_world` (the world on its memory, or null) must
  // outlive the groups, which are split from one of them.
  ParallelEngine(TrainingDevice device, std::unique_ptr<comm::Communicator> staged_world,
                 comm::MeshCommunicators groups, const Plan& plan)
      : device_(std::move(device)), staged_world_(std::move(staged_world)), groups_(std::move(groups)), plan_(plan) {}
  comm::MeshCommunicators& groups() { return groups_; }
  // The device's ops, handed to the model (which keeps them).
  std::unique_ptr<parallel::GptOps> take_ops() { return std::move(device_.ops); }
  void set_model(std::unique_ptr<parallel::ParallelGpt> model) { model_ = std::move(model); }

  TrainResult train(data::DataLoader& loader, const TrainOptions& options) override {
    return parallel::train_parallel(*model_, plan_, loader, options);
  }
  std::vector<TensorBlob> checkpoint_tensors() override { return parallel::gather_checkpoint_tensors(*model_); }
  Problems restore(const std::vector<TensorBlob>& blobs, const std::string& where) override {
    return parallel::restore_checkpoint_tensors(*model_, blobs, where);
  }
  EvalResult evaluate(data::DataLoader& loader, std::int64_t max_samples) override {
    return parallel::evaluate_parallel(*model_, loader, max_samples);
  }
  // Next-token prediction over a vocabulary is classification: evaluated once per epoch.
  bool classifier(const data::BatchShape& shape) const override { return shape.classes > 0; }
  Backend& backend() override { return device_.backend ? *device_.backend : default_backend(); }
  Attention attention() const override { return model_->attention(); }

 private:
  TrainingDevice device_;                             // first: everything below lives on it
  std::unique_ptr<comm::Communicator> staged_world_;  // before groups_: they are split from it
  comm::MeshCommunicators groups_;                    // before model_: the model refers to them
  Plan plan_;
  std::unique_ptr<parallel::ParallelGpt> model_;
};

// An MLP on a dp/fsdp/tp mesh (data_parallel.hpp), one device included.
class DataParallelEngine final : public Engine {
 public:
  DataParallelEngine(comm::MeshCommunicators groups, std::unique_ptr<Model<float>> model, const Plan& plan)
      : groups_(std::move(groups)), trainer_(std::move(model), plan, groups_) {}

  TrainResult train(data::DataLoader& loader, const TrainOptions& options) override {
    return trainer_.train(loader, options);
  }
  std::vector<TensorBlob> checkpoint_tensors() override { return trainer_.checkpoint_tensors(); }
  Problems restore(const std::vector<TensorBlob>& blobs, const std::string& where) override {
    return trainer_.restore(blobs, where);
  }
  EvalResult evaluate(data::DataLoader& loader, std::int64_t max_samples) override {
    return trainer_.evaluate(loader, max_samples);
  }
  bool classifier(const data::BatchShape& shape) const override { return shape.classes > 0; }

 private:
  comm::MeshCommunicators groups_;  // before trainer_: it refers to them
  DataParallelTrainer trainer_;
};

// A checkpoint of another model (its plan file's "model" block) is refused by name: one whose
// tensors were a superset of this plan's (6 layers for 4, 2 heads for 6) loaded silently. The name,
// the source and dropout (a training choice) may differ; every other key is the architecture.
Problems model_differences(const ResumePoint& point, const nlohmann::json& plan_json) {
  const auto saved_plan = point.contents.plan.find("model");
  if (saved_plan == point.contents.plan.end() || !saved_plan->is_object() || !plan_json.contains("model")) return {};
  const nlohmann::json& saved = *saved_plan;
  const nlohmann::json& current = plan_json["model"];
  std::string differences;
  int shown = 0;
  for (const auto& [key, value] : current.items()) {
    if (key == "name" || key == "source" || key == "dropout") continue;
    const auto other = saved.find(key);
    const std::string was = other == saved.end() ? "absent" : other->dump();
    if (other != saved.end() && *other == value) continue;
    if (shown++ < 4) differences += (differences.empty() ? "" : ", ") + key + " " + was + " there, " + value.dump() + " here";
  }
  if (differences.empty()) return {};
  if (shown > 4) differences += " and " + std::to_string(shown - 4) + " more";
  return {error("--resume", point.path + " holds another model (" + saved.value("name", std::string("?")) + ": " +
                                differences + "); resume it with its own plan, or give another --checkpoint-dir")};
}

std::int32_t agree_max(comm::Communicator& world, bool mine) {
  std::int32_t value = mine ? 1 : 0;
  world.all_reduce(&value, 1, comm::DataType::i32, comm::ReduceOp::max);
  return value;
}

}  // namespace

struct TrainingSession::State {
  SessionConfig config;
  PlanFile plan_file;
  comm::Communicator* world = nullptr;
  SessionHooks hooks;
  bool leader = true;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<data::DataLoader> loader, eval_loader;
  TrainOptions options;
  RunControl control;
  nlohmann::json plan_json;
  std::unique_ptr<MetricsWriter> metrics;
  bool metrics_failed = false;  // said once; the lines after a failed write are lost too
  std::int64_t updates = 0;
  std::int64_t last_epoch = 0;  // classifiers: evaluated when the training loader's epoch changes
  bool language_model = false, classifier = false;
  double flops_per_step = 0, peak_flops = 0;

  void report(const Problems& problems) const {
    if (leader && hooks.report && !problems.empty()) hooks.report(problems);
  }
  // One line to the metrics file; the first failure is said as it happens (a full disk lost every
  // line without a word, exit 0).
  template <class Line>
  void write_metrics(const Line& line) {
    if (!metrics || metrics_failed) return;
    Problems failed = metrics->write(line);
    if (failed.empty()) return;
    metrics_failed = true;
    for (Problem& p : failed) {
      p.severity = Severity::warning;
      p.message += "; training goes on, without metrics from here";
    }
    report(failed);
  }
  void say(const std::string& line) const {
    if (leader && hooks.say) hooks.say(line);
  }
  Problems build_engine();
  Problems build_options();
  Problems resume(bool& finished);
  Problems open_metrics();
  Problems save(std::int64_t steps_done);
  void evaluate(std::int64_t step);
  void after_step(const StepReport& s, SessionEnd& end, bool& stopping);
};

TrainingSession::TrainingSession(std::unique_ptr<State> state) : state_(std::move(state)) {}
TrainingSession::~TrainingSession() = default;
std::int64_t TrainingSession::total_steps() const { return state_->options.steps; }
std::int64_t TrainingSession::first_step() const { return state_->options.first_step; }

Problems TrainingSession::State::build_engine() {
  const Plan& plan = plan_file.plan;
  const std::int64_t seq_len = training_seq_len(plan_file.model, plan);
  auto train_loader = data::make_loader(config.data, data::Split::train, config.seed, seq_len);
  if (!train_loader.ok()) return train_loader.problems;
  loader = std::move(train_loader.value);
  auto validation = data::make_loader(config.data, data::Split::validation, config.seed + 1, seq_len);
  if (!validation.ok()) return validation.problems;
  eval_loader = std::move(validation.value);
  if (plan_file.model.kind == ModelKind::transformer) {
    TrainingDevice device;
    std::unique_ptr<comm::Communicator> staged_world;
    if (config.device) {
      Loaded<TrainingDevice> made = config.device();
      if (!made.ok()) return made.problems;
      device = std::move(made.value);
      staged_world = std::make_unique<comm::StagedCommunicator>(world->split(0, world->rank(), "world"),
                                                                *device.backend);
      say("training on " + std::string(device.backend->name()) +
          (world->size() > 1 ? " (rank 0's; collectives staged through host memory)" : ""));
    }
    auto groups = comm::MeshCommunicators::create(staged_world ? *staged_world : *world, plan.mesh);
    if (!groups.ok()) return groups.problems;
    auto parallel_engine =
        std::make_unique<ParallelEngine>(std::move(device), std::move(staged_world), std::move(groups.value), plan);
    Backend& backend = parallel_engine->backend();
    auto model = parallel::ParallelGpt::create(plan_file.model, plan, parallel_engine->groups(), config.seed, seq_len,
                                               backend, config.device ? parallel_engine->take_ops() : nullptr);
    if (!model.ok()) return model.problems;
    if (Problems p = model.value->set_matmul_precision(config.compute); has_errors(p)) return p;
    parallel_engine->set_model(std::move(model.value));
    engine = std::move(parallel_engine);
    if (world->size() > 1)
      say("training " + plan.mesh.to_string() + " on " + std::to_string(world->size()) + " ranks (" +
          to_string(plan.schedule) + ", zero " + std::to_string(plan.zero_stage) +
          (plan.sequence_parallel ? ", sequence parallel" : "") + ")");
  } else {
    if (config.device)
      return {error("--backend", "an MLP trains on the CPU only (--backend cpu); GPUs train transformers")};
    // A launch that does not match the mesh is named first (it says which mpirun fits).
    auto groups = comm::MeshCommunicators::create(*world, plan.mesh);
    if (!groups.ok()) return groups.problems;
    if (Problems p = trainable(plan_file.model, plan, seq_len); has_errors(p)) return p;
    // Every rank builds the model from the same seed: the replicas start identical.
    auto model = make_model<float>(plan_file.model, config.seed, plan.micro_batch, seq_len);
    if (!model.ok()) return model.problems;
    if (Problems p = model.value->set_matmul_precision(config.compute); has_errors(p)) return p;
    if (Problems fit = model.value->check_data(loader->shape()); has_errors(fit)) return fit;
    engine = std::make_unique<DataParallelEngine>(std::move(groups.value), std::move(model.value), plan);
    if (world->size() > 1)
      say("training " + plan.mesh.to_string() + " on " + std::to_string(world->size()) + " ranks (data parallel, zero " +
          std::to_string(plan.zero_stage) +
          (plan.mesh.size(Axis::tp) > 1 ? "; tensor parallel, column/row-parallel linear pairs" : "") + ")");
  }
  // Peaks from here on are training's, not the initialisation's (every rank builds the full model once).
  engine->backend().ledger().reset_peaks();
  language_model = plan_file.model.kind == ModelKind::transformer;
  classifier = engine->classifier(loader->shape());
  return {};
}

Problems TrainingSession::State::build_options() {
  const Plan& plan = plan_file.plan;
  TrainOptions& o = options;
  o.micro_batch = plan.micro_batch;
  o.micro_batches = plan.micro_batches();
  if (o.micro_batch <= 0 || o.micro_batches <= 0)
    return {error("plan.global_batch", std::to_string(plan.global_batch) +
                                           " is not a positive multiple of micro_batch x dp x fsdp (" +
                                           std::to_string(plan.micro_batch * plan.mesh.data_parallel_size()) + ")")};
  o.steps = config.steps;
  if (o.steps <= 0 && config.epochs > 0) {
    const double steps = std::ceil(config.epochs * static_cast<double>(loader->samples_per_epoch()) /
                                   static_cast<double>(plan.global_batch));
    constexpr double kMostSteps = 1e15;  // past int64 the cast wrapped, and --steps was blamed
    if (!(steps <= kMostSteps)) {
      std::ostringstream text;
      text << config.epochs << " epochs of " << loader->samples_per_epoch() << " samples are " << steps
           << " steps of " << plan.global_batch << "; at most 1e15 steps";
      return {error("--epochs", text.str())};
    }
    o.steps = static_cast<std::int64_t>(steps);
  }
  if (o.steps <= 0) return {error("--steps", "--steps or --epochs: give a positive number of steps or epochs")};
  o.adamw.weight_decay = config.weight_decay;
  o.warmup_steps = config.warmup;
  o.max_grad_norm = config.clip;
  o.on_non_finite = config.skip_non_finite ? NonFiniteAction::skip : NonFiniteAction::stop;
  control = RunControl{o.steps, config.checkpoint_every, config.checkpoints_on, config.stop_after};
  // MFU's terms (session.hpp).
  const std::int64_t seq_len = training_seq_len(plan_file.model, plan);
  const Evaluator cost(plan_file.model, plan_file.cluster, 1, seq_len);
  flops_per_step = cost.profile().model_flops_per_sample * static_cast<double>(plan.global_batch);
  const double parameters = cost.profile().parameter_count;
  const bool transformer = plan_file.model.kind == ModelKind::transformer;
  if (config.lr) {
    o.adamw.learning_rate = *config.lr;
  } else {
    const DefaultLearningRate rate = default_learning_rate(parameters, transformer);
    o.adamw.learning_rate = rate.learning_rate;
    std::ostringstream line;
    line << "learning rate " << rate.learning_rate << " (--lr not given: " << rate.why << ")";
    say(line.str());
  }
  report(learning_rate_warnings(parameters, transformer, o.adamw.learning_rate, config.warmup));
  peak_flops = plan_file.cluster.device.peak_for(gemm_dtype(config.compute)).value_or(0) *
               (plan_file.cluster.name == "local-cpu" ? config.threads : 1) * static_cast<double>(world->size());
  return {};
}

// Rank 0's warnings (damaged checkpoints) are reported here; errors are returned.
Problems TrainingSession::State::resume(bool& finished) {
  if (!config.resume) return {};
  if (!config.checkpoints_on) return {error("--resume", "needs --checkpoint-dir")};
  auto resumed = load_latest_checkpoint(config.checkpoint_dir);
  if (!resumed.ok()) return resumed.problems;
  report(resumed.problems);
  if (!resumed.value) {  // a first run under --resume (a job script that always passes it) starts afresh, and says so
    say("--resume: no checkpoint in " + config.checkpoint_dir + " yet; starting at step 0");
    return {};
  }
  const ResumePoint& point = *resumed.value;
  if (run_finished(control, point.contents.step)) {
    say("training already finished: " + point.path + " holds step " + std::to_string(point.contents.step) + " of " +
        std::to_string(control.total_steps) + "; nothing to do (give a larger --steps to train on)");
    finished = true;
    return {};
  }
  if (Problems other = model_differences(point, plan_json); !other.empty()) return other;
  if (const auto saved = point.contents.extra.find("data");
      saved != point.contents.extra.end() && saved->is_string() && saved->get<std::string>() != config.data) {
    report({{Severity::warning, "--data",
             "the checkpoint " + point.path + " was trained on " + saved->get<std::string>() + "; this run reads " +
                 config.data + " (a change of data, not a resume of the same run)"}});
  }
  // The damaged checkpoints newer than this one, moved aside so that their steps can be saved again (by rank 0).
  if (leader)
    for (const std::string& path : point.damaged) report(set_checkpoint_aside(path));
  Problems problems = engine->restore(point.contents.tensors, point.path);
  const Problems data_problems = loader->restore(point.contents.data_state);
  problems.insert(problems.end(), data_problems.begin(), data_problems.end());
  if (has_errors(problems)) return problems;
  options.first_step = point.contents.step;
  updates = point.contents.extra.value("updates", point.contents.step);
  options.completed_updates = updates;
  say("resumed from " + point.path + " at step " + std::to_string(options.first_step));
  return {};
}

// Every rank learns whether rank 0 could open the metrics file.
Problems TrainingSession::State::open_metrics() {
  Problems problems;
  if (leader && !config.metrics_path.empty()) {
    auto opened = MetricsWriter::open(config.metrics_path, config.resume);
    problems = opened.problems;
    if (opened.ok()) metrics = std::move(opened.value);
  }
  if (agree_max(*world, has_errors(problems)) != 0 && !has_errors(problems))
    problems.push_back(error(config.metrics_path, "rank 0 could not open the metrics file"));
  return problems;
}

Problems session_config_problems(const SessionConfig& config) {
  Problems problems;
  auto refuse = [&](const char* flag, const std::string& what, double value) {
    std::ostringstream text;
    text << what << ", got " << value;
    problems.push_back({Severity::error, flag, text.str()});
  };
  if (config.lr && !(std::isfinite(*config.lr) && *config.lr > 0)) refuse("--lr", "must be a positive number", *config.lr);
  if (config.warmup < 0) refuse("--warmup", "must be 0 or more steps", static_cast<double>(config.warmup));
  if (std::isnan(config.epochs) || config.epochs < 0) refuse("--epochs", "must be 0 (off) or a positive number", config.epochs);
  if (config.steps > 0 && config.warmup >= config.steps) {
    problems.push_back({Severity::warning, "--warmup",
                        std::to_string(config.warmup) + " steps cover all " + std::to_string(config.steps) +
                            ": the learning rate never reaches its peak"});
  }
  if (config.checkpoint_every > 0 && !config.checkpoints_on) {
    problems.push_back({Severity::warning, "--checkpoint-every",
                        "without --checkpoint-dir nothing is saved on a schedule (a stop still saves, into " +
                            config.checkpoint_dir + ")"});
  }
  if (!(std::isfinite(config.weight_decay) && config.weight_decay >= 0)) {
    refuse("--weight-decay", "must be 0 or a positive number", config.weight_decay);
  }
  if (std::isnan(config.clip)) refuse("--clip", "must be a number (<= 0: off)", config.clip);
  if (config.eval_samples < 0) refuse("--eval-samples", "must be positive", static_cast<double>(config.eval_samples));
  const std::pair<const char*, std::int64_t> counts[] = {
      {"--checkpoint-every", config.checkpoint_every}, {"--eval-every", config.eval_every}, {"--stop-after", config.stop_after}};
  for (const auto& [flag, value] : counts) {
    if (value < 0) refuse(flag, "must be 0 (off) or a number of steps", static_cast<double>(value));
  }
  return problems;
}

Loaded<std::unique_ptr<TrainingSession>> TrainingSession::open(const SessionConfig& config, const PlanFile& plan_file,
                                                               comm::Communicator& world, SessionHooks hooks) {
  if (Problems checked = session_config_problems(config); !checked.empty()) {
    if (world.rank() == 0 && hooks.report) hooks.report(checked);
    if (has_errors(checked)) return {{}, std::move(checked)};
  }
  auto state = std::make_unique<State>();
  state->config = config;
  state->plan_file = plan_file;
  state->world = &world;
  state->hooks = std::move(hooks);
  state->leader = world.rank() == 0;
  state->plan_json = nlohmann::json::parse(plan_file_to_json(plan_file).dump());
  Loaded<std::unique_ptr<TrainingSession>> result;
  bool finished = false;
  for (auto phase : {&State::build_engine, &State::build_options}) {
    result.problems = ((*state).*phase)();
    if (has_errors(result.problems)) break;
  }
  if (!has_errors(result.problems)) result.problems = state->resume(finished);
  if (!has_errors(result.problems) && !finished) result.problems = state->open_metrics();
  state->report(result.problems);
  if (has_errors(result.problems)) return result;
  const std::string unit = state->language_model ? "tokens" : "samples";
  result.value.reset(new TrainingSession(std::move(state)));
  result.value->already_finished_ = finished;
  result.value->unit_ = unit;
  return result;
}

// Collective: every rank gathers, rank 0 writes, all learn the outcome.
Problems TrainingSession::State::save(std::int64_t steps_done) {
  CheckpointContents contents;
  contents.step = steps_done;
  contents.plan = plan_json;
  contents.seed = config.seed;
  contents.data_state = loader->state();
  contents.tensors = engine->checkpoint_tensors();
  contents.extra = {{"updates", updates}, {"total_steps", options.steps}, {"data", config.data}};
  Problems problems;
  if (leader) problems = save_checkpoint(config.checkpoint_dir, contents);
  if (agree_max(*world, has_errors(problems)) != 0 && !leader)
    problems.push_back(error(config.checkpoint_dir, "rank 0 could not save the checkpoint"));
  return problems;
}

void TrainingSession::State::evaluate(std::int64_t step) {
  eval_loader->restore(data::LoaderState{config.seed + 1, 0, 0});
  const std::int64_t samples =
      config.eval_samples > 0 ? config.eval_samples : (language_model ? 64 * options.micro_batch : 0);
  const EvalResult result = engine->evaluate(*eval_loader, samples);
  EvalMetrics e{step, loader->epoch(), result.loss, std::nullopt, result.samples};
  if (std::isfinite(result.accuracy)) e.eval_accuracy = result.accuracy;
  say(format_line(e));
  write_metrics(e);
}

void TrainingSession::State::after_step(const StepReport& s, SessionEnd& end, bool& stopping) {
  if (!s.skipped) ++updates;
  if (hooks.step_time) hooks.step_time(s.step_s);
  end.steps_done = s.step + 1;
  if (leader) {
    StepMetrics line;
    line.step = s.step;
    line.loss = s.loss;
    line.learning_rate = s.lr;
    line.grad_norm = s.grad_norm;
    line.step_s = s.step_s;
    line.throughput_per_s = s.items_per_s;
    line.throughput_unit = language_model ? ThroughputUnit::tokens : ThroughputUnit::samples;
    if (peak_flops > 0 && s.step_s > 0) line.mfu = flops_per_step / s.step_s / peak_flops;
    set_memory(line, engine->backend().ledger().snapshot());
    if (hooks.step) hooks.step(s, format_line(line));
    write_metrics(line);
  }
  if (classifier && loader->epoch() != last_epoch) {
    last_epoch = loader->epoch();
    evaluate(end.steps_done);
  } else if (config.eval_every > 0 && end.steps_done % config.eval_every == 0) {
    evaluate(end.steps_done);
  }
  // The ranks agree on a signal that reached any of them: one small all-reduce per step.
  end.interrupted = agree_max(*world, hooks.interrupt_requested && hooks.interrupt_requested()) != 0;
  const AfterStep after = decide_after_step(control, end.steps_done, end.interrupted);
  if (after.save) {
    const Problems p = save(end.steps_done);
    end.save_problems.insert(end.save_problems.end(), p.begin(), p.end());
    if (has_errors(p) && !after.stop) {  // said now: a run could train for hours with no usable checkpoint
      Problems now = p;
      for (Problem& problem : now) {
        problem.severity = Severity::warning;
        problem.message = "checkpoint of step " + std::to_string(end.steps_done) + " not saved: " + problem.message +
                          "; training goes on";
      }
      report(now);
    }
  }
  stopping = after.stop;
}

SessionEnd TrainingSession::train() {
  State& s = *state_;
  SessionEnd end;
  end.steps_done = s.options.first_step;
  bool stopping = false;
  s.last_epoch = s.loader->epoch();
  TrainOptions o = s.options;
  o.on_step = [&](const StepReport& report) { s.after_step(report, end, stopping); };
  o.stop_requested = [&] { return stopping; };
  const TrainResult result = s.engine->train(*s.loader, o);
  end.problems = result.problems;
  end.kind = !result.ok() ? SessionEnd::failed : result.stopped_early ? SessionEnd::stopped : SessionEnd::finished;
  return end;
}

TrainingDevice::TrainingDevice() = default;
TrainingDevice::TrainingDevice(std::unique_ptr<Backend> b, std::unique_ptr<parallel::GptOps> o)
    : backend(std::move(b)), ops(std::move(o)) {}
TrainingDevice::TrainingDevice(TrainingDevice&&) noexcept = default;
TrainingDevice& TrainingDevice::operator=(TrainingDevice&&) noexcept = default;
TrainingDevice::~TrainingDevice() = default;

MemorySnapshot TrainingSession::memory() const { return state_->engine->backend().ledger().snapshot(); }
Attention TrainingSession::attention() const { return state_->engine->attention(); }

void TrainingSession::final_evaluation() {
  if (!state_->classifier) state_->evaluate(state_->options.steps);
}

}  // namespace meshplan::exec
