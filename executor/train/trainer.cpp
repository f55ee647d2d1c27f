// The loop of trainer.hpp. Timing uses steady_clock around the whole step
// (data included), since that is what a user waits for.
#include "executor/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <span>
#include <string>

#include "executor/train/lr_schedule.hpp"

namespace meshplan::exec {

namespace {

Problem option_problem(const std::string& where, const std::string& message) {
  return {Severity::error, where, message};
}

// Four significant digits in whichever notation is shorter: a learning rate of 1e-30 or 1e30 reads as such
// (std::to_string printed 0.000000 and thirty digits).
std::string format_value(double value) {
  std::ostringstream text;
  text << std::setprecision(4) << value;
  return text.str();
}

}  // namespace

StepVerdict judge_step(std::int64_t step, double loss, double grad_norm, double lr, NonFiniteAction action,
                       TrainResult& result) {
  if (std::isfinite(loss) && std::isfinite(grad_norm)) {
    result.skipped_in_a_row = 0;
    return StepVerdict::update;
  }
  const std::string where = "step " + std::to_string(step);
  const std::string what = "loss " + format_value(loss) + ", gradient norm " + format_value(grad_norm);
  if (action == NonFiniteAction::stop) {
    result.problems.push_back(
        option_problem(where, "training stopped: " + what + " is not finite (lr " + format_value(lr) + ")"));
    return StepVerdict::stop;
  }
  if (result.skipped_in_a_row + 1 >= kMaxSkippedInARow) {
    result.problems.push_back(option_problem(
        where, "training stopped: " + what + " is not finite for the " + std::to_string(kMaxSkippedInARow) +
                   "th step in a row (--skip-non-finite skips the odd step; the weights or lr " + format_value(lr) +
                   " do not recover)"));
    return StepVerdict::stop;
  }
  ++result.skipped_in_a_row;
  ++result.skipped_steps;
  result.problems.push_back({Severity::warning, where, "update skipped: " + what});
  return StepVerdict::skip;
}

bool finish_step(std::int64_t step, double loss, double grad_norm, double lr, double items,
                 std::chrono::steady_clock::time_point start, std::int64_t steps, const TrainOptions& options,
                 std::int64_t& updates, TrainResult& result, const StepUpdate& update) {
  StepReport report{step, loss, lr, grad_norm, 0, 0, false};
  ++result.steps;
  result.last_loss = loss;
  const StepVerdict verdict = judge_step(step, loss, grad_norm, lr, options.on_non_finite, result);
  if (verdict == StepVerdict::stop) return false;
  if (verdict == StepVerdict::skip) {
    report.skipped = true;
  } else {
    ++updates;
    kernels::AdamWHyperparameters hp = options.adamw;
    hp.learning_rate = lr;
    update(kernels::clip_scale(grad_norm, options.max_grad_norm), updates, hp);
  }
  report.step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.items_per_s = report.step_s > 0 ? items / report.step_s : 0;
  if (options.on_step) options.on_step(report);
  if (options.stop_requested && options.stop_requested()) {
    result.stopped_early = step + 1 < steps;
    return false;
  }
  return true;
}

template <typename T>
double accumulate_gradients(Model<T>& model, data::DataLoader& loader, std::int64_t micro_batch,
                            std::int64_t micro_batches) {
  model.parameters().zero_grads();
  const T dloss = T(1) / static_cast<T>(micro_batches);
  double loss = 0;
  for (std::int64_t k = 0; k < micro_batches; ++k) {
    const data::Batch batch = loader.next_batch(micro_batch);
    loss += static_cast<double>(model.forward(batch));
    model.backward(dloss);
  }
  return loss / static_cast<double>(micro_batches);
}

template <typename T>
void adamw_update_range(const ParameterLayout& layout, std::int64_t begin, std::int64_t end, FlatView<T> values,
                        FlatView<const T> grads, FlatView<T> adam_m, FlatView<T> adam_v, std::int64_t updates,
                        const kernels::AdamWHyperparameters& hp) {
  for (const ParameterTensor& tensor : layout.tensors) {
    const std::int64_t lo = std::max(tensor.offset, begin), hi = std::min(tensor.offset + tensor.elements, end);
    if (hi <= lo) continue;
    kernels::AdamWHyperparameters tensor_hp = hp;
    if (tensor.shape.size() < 2) tensor_hp.weight_decay = 0;
    kernels::adamw_update(values.at(lo), grads.at(lo), adam_m.at(lo), adam_v.at(lo), hi - lo, updates, tensor_hp);
  }
}

template <typename T>
TrainResult train(Model<T>& model, data::DataLoader& loader, const TrainOptions& options) {
  TrainResult result;
  Problems& problems = result.problems;
  if (options.micro_batch <= 0 || options.micro_batch > model.max_batch())
    problems.push_back(option_problem("plan.micro_batch", std::to_string(options.micro_batch) +
                                                              " must be between 1 and the model's batch capacity (" +
                                                              std::to_string(model.max_batch()) + ")"));
  if (options.micro_batches <= 0)
    problems.push_back(option_problem("plan.micro_batches", "must be at least 1"));
  std::int64_t steps = options.steps;
  if (steps <= 0 && options.epochs > 0 && options.global_batch() > 0)
    steps = static_cast<std::int64_t>(std::ceil(options.epochs * static_cast<double>(loader.samples_per_epoch()) /
                                                static_cast<double>(options.global_batch())));
  if (steps <= 0) problems.push_back(option_problem("--steps", "give a positive number of steps or epochs"));
  const Problems data_problems = model.check_data(loader.shape());
  problems.insert(problems.end(), data_problems.begin(), data_problems.end());
  if (!result.ok()) return result;

  const LrSchedule schedule{options.adamw.learning_rate, options.warmup_steps, steps, options.min_lr_fraction};
  Parameters<T>& params = model.parameters();
  const std::span<const T> all_grads(params.grads);
  std::int64_t updates = options.completed_updates;
  for (std::int64_t step = std::max<std::int64_t>(options.first_step, 0); step < steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const double loss = accumulate_gradients(model, loader, options.micro_batch, options.micro_batches);
    const double norm = kernels::global_l2_norm<T>(std::span<const std::span<const T>>(&all_grads, 1));
    const auto update = [&](double clip, std::int64_t n, const kernels::AdamWHyperparameters& hp) {
      const T scale = static_cast<T>(clip);
      if (scale != T(1))
        for (T& g : params.grads) g *= scale;
      adamw_update_range<T>(params.layout, 0, params.layout.total_elements, {params.values.data()},
                            {params.grads.data()}, {params.adam_m.data()}, {params.adam_v.data()}, n, hp);
    };
    if (!finish_step(step, loss, norm, learning_rate_at(schedule, step),
                     static_cast<double>(options.global_batch() * model.items_per_sample()), start, steps, options,
                     updates, result, update))
      break;
  }
  return result;
}

template <typename T>
EvalResult evaluate(Model<T>& model, data::DataLoader& loader, std::int64_t max_samples) {
  EvalResult result;
  std::int64_t remaining = loader.samples_per_epoch();
  if (max_samples > 0) remaining = std::min(remaining, max_samples);
  double loss_sum = 0;
  std::int64_t correct = 0;
  bool regression = false;
  while (remaining > 0) {
    const std::int64_t n = std::min(remaining, model.max_batch());
    const data::Batch batch = loader.next_batch(n);
    regression = batch.targets.empty();
    loss_sum += static_cast<double>(model.forward(batch)) * static_cast<double>(n);
    correct += model.correct_predictions();
    result.samples += n;
    remaining -= n;
  }
  if (result.samples == 0) return result;
  result.loss = loss_sum / static_cast<double>(result.samples);
  if (!regression)
    result.accuracy =
        static_cast<double>(correct) / static_cast<double>(result.samples * model.items_per_sample());
  return result;
}

template double accumulate_gradients<float>(Model<float>&, data::DataLoader&, std::int64_t, std::int64_t);
template double accumulate_gradients<double>(Model<double>&, data::DataLoader&, std::int64_t, std::int64_t);
template void adamw_update_range<float>(const ParameterLayout&, std::int64_t, std::int64_t, FlatView<float>,
                                        FlatView<const float>, FlatView<float>, FlatView<float>, std::int64_t,
                                        const kernels::AdamWHyperparameters&);
template void adamw_update_range<double>(const ParameterLayout&, std::int64_t, std::int64_t, FlatView<double>,
                                         FlatView<const double>, FlatView<double>, FlatView<double>, std::int64_t,
                                         const kernels::AdamWHyperparameters&);
template TrainResult train<float>(Model<float>&, data::DataLoader&, const TrainOptions&);
template TrainResult train<double>(Model<double>&, data::DataLoader&, const TrainOptions&);
template EvalResult evaluate<float>(Model<float>&, data::DataLoader&, std::int64_t);
template EvalResult evaluate<double>(Model<double>&, data::DataLoader&, std::int64_t);

}  // namespace meshplan::exec
