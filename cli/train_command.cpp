// `meshplan train --plan plan.json`: trains a plan written by `explain` or
// `plan --emit-plan`. This first version runs single-rank plans (every mesh
// axis 1) on the CPU executor; multi-rank meshes come with the executor's
// parallelism. Metrics go to JSON Lines, checkpoints are atomic and resumable
// with bit-identical losses.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>

#include "cli/commands.hpp"
#include "executor/checkpoint/checkpoint.hpp"
#include "executor/data/loader.hpp"
#include "executor/metrics/metrics.hpp"
#include "executor/model/model.hpp"
#include "executor/train/trainer.hpp"
#include "model/evaluate.hpp"
#include "model/plan_file.hpp"

namespace meshplan::cli {
namespace {

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
  bool skip_non_finite = false;
  std::int64_t stop_after = 0;
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
    const std::pair<const char*, std::vector<float>*> parts[] = {
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

int run_train(const TrainFlags& f) {
  auto plan_file = read_plan_file(f.plan_path);
  if (!plan_file.ok()) {
    report(plan_file.problems);
    return exit_bad_input;
  }
  const PlanFile& pf = plan_file.value;
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
  std::int64_t updates = 0;
  if (f.resume) {
    if (f.checkpoint_dir.empty()) {
      std::cerr << "meshplan train: --resume needs --checkpoint-dir\n";
      return exit_bad_input;
    }
    auto latest = exec::latest_checkpoint(f.checkpoint_dir);
    report(latest.problems);
    if (!latest.ok()) return exit_bad_input;
    if (latest.value) {
      auto contents = exec::load_checkpoint(*latest.value);
      if (!contents.ok()) {
        report(contents.problems);
        return exit_bad_input;
      }
      Problems problems = restore_blobs(net.parameters(), contents.value.tensors, *latest.value);
      const Problems data_problems = loader.restore(contents.value.data_state);
      problems.insert(problems.end(), data_problems.begin(), data_problems.end());
      if (has_errors(problems)) {
        report(problems);
        return exit_bad_input;
      }
      o.first_step = contents.value.step;
      updates = contents.value.extra.value("updates", contents.value.step);
      o.completed_updates = updates;
      std::cout << "resumed from " << *latest.value << " at step " << o.first_step << "\n";
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
  const double peak = pf.cluster.device.peak_for(gemm_dtype(Precision::fp32)).value_or(0);
  const bool language_model = pf.model.kind == ModelKind::transformer;
  const bool classifier = net.check_data(loader.shape()).empty() && loader.shape().classes > 0;

  Problems run_problems;
  std::int64_t last_epoch = loader.epoch();
  bool stopped_early = false;
  auto save = [&](std::int64_t steps_done) {
    exec::CheckpointContents contents;
    contents.step = steps_done;
    contents.plan = plan_json;
    contents.seed = f.seed;
    contents.data_state = loader.state();
    contents.tensors = blobs_of(net.parameters());
    contents.extra = {{"updates", updates}, {"total_steps", o.steps}};
    const Problems p = exec::save_checkpoint(f.checkpoint_dir, contents);
    run_problems.insert(run_problems.end(), p.begin(), p.end());
  };
  auto run_eval = [&](std::int64_t step) {
    eval_loader.value->restore(data::LoaderState{f.seed + 1, 0, 0});
    const auto result = exec::evaluate(net, *eval_loader.value, language_model ? 64 * o.micro_batch : 0);
    exec::EvalMetrics e{step, loader.epoch(), result.loss, std::nullopt};
    if (std::isfinite(result.accuracy)) e.eval_accuracy = result.accuracy;
    std::cout << exec::format_line(e) << "\n";
    if (metrics) metrics->write(e);
  };
  o.on_step = [&](const exec::StepReport& s) {
    if (!s.skipped) ++updates;
    exec::StepMetrics line;
    line.step = s.step;
    line.loss = s.loss;
    line.learning_rate = s.lr;
    line.grad_norm = s.grad_norm;
    line.step_s = s.step_s;
    line.throughput_per_s = s.items_per_s;
    line.throughput_unit = language_model ? exec::ThroughputUnit::tokens : exec::ThroughputUnit::samples;
    if (peak > 0 && s.step_s > 0) line.mfu = flops_per_step / s.step_s / peak;
    std::cout << exec::format_line(line) << "\n";
    if (metrics) metrics->write(line);
    const std::int64_t done = s.step + 1;
    if (classifier && loader.epoch() != last_epoch) {
      last_epoch = loader.epoch();
      run_eval(done);
    } else if (f.eval_every > 0 && done % f.eval_every == 0) {
      run_eval(done);
    }
    if (!f.checkpoint_dir.empty() && f.checkpoint_every > 0 && done % f.checkpoint_every == 0) save(done);
    if (f.stop_after > 0 && done >= f.stop_after && done < o.steps) {
      if (!f.checkpoint_dir.empty() && (f.checkpoint_every <= 0 || done % f.checkpoint_every != 0)) save(done);
      stopped_early = true;
      std::cout.flush();
      std::exit(exit_ok);  // a deliberate stop, as a kill would: the checkpoint on disk is what resumes
    }
  };

  const exec::TrainResult result = exec::train(net, loader, o);
  report(result.problems);
  if (!result.ok()) return 1;
  if (!f.checkpoint_dir.empty()) save(o.steps);
  if (!classifier) run_eval(o.steps);
  report(run_problems);
  (void)stopped_early;
  return has_errors(run_problems) ? 1 : exit_ok;
}

}  // namespace

Command add_train_command(CLI::App& app) {
  auto* command = app.add_subcommand("train", "Train a plan file's model for real (single-rank plans on the CPU)");
  auto f = std::make_shared<TrainFlags>();
  command->add_option("--plan", f->plan_path, "Plan file from `explain --emit-plan` or `plan --emit-plan`")->required();
  command->add_option("--data", f->data, "fashion-mnist[:DIR], text:PATH or synthetic")->capture_default_str();
  auto* steps = command->add_option("--steps", f->steps, "Optimizer steps");
  command->add_option("--epochs", f->epochs, "Epochs over the training split (instead of --steps)")->excludes(steps);
  command->add_option("--lr", f->lr, "Peak learning rate (AdamW)")->capture_default_str();
  command->add_option("--warmup", f->warmup, "Linear warm-up steps before the cosine decay")->capture_default_str();
  command->add_option("--clip", f->clip, "Global gradient-norm clipping (<= 0: off)")->capture_default_str();
  command->add_option("--weight-decay", f->weight_decay, "AdamW weight decay on matrices")->capture_default_str();
  command->add_option("--seed", f->seed, "Seed of initialisation and data order")->capture_default_str();
  command->add_option("--checkpoint-dir", f->checkpoint_dir, "Where checkpoints are written");
  command->add_option("--checkpoint-every", f->checkpoint_every, "Steps between checkpoints (0: only at the end)");
  command->add_flag("--resume", f->resume, "Continue from the newest complete checkpoint in --checkpoint-dir");
  command->add_option("--metrics", f->metrics_path, "JSON Lines file of per-step and evaluation metrics");
  command->add_option("--eval-every", f->eval_every, "Steps between evaluations (language models)");
  command->add_flag("--skip-non-finite", f->skip_non_finite, "Skip a step whose loss or gradient is not finite");
  command->add_option("--stop-after", f->stop_after, "Stop (with a checkpoint) after this many steps, as a kill would");
  return [f]() { return run_train(*f); };
}

}  // namespace meshplan::cli
