// Single-rank training: the loop every plan's loss curve is compared against
// (docs/architecture.md, correctness ladder step 3), so it is deliberately plain:
//
//   for each step:
//     zero grads; for each of M micro-batches: loss += forward / M; backward(1 / M)
//     norm = global L2 norm of the grads
//     loss or norm not finite -> stop with a Problem naming the step (or skip the update)
//     grads *= min(1, max_grad_norm / norm)                 (global-norm clipping)
//     AdamW at lr = learning_rate_at(schedule, step)        (lr_schedule.hpp)
//
// Micro-batch x micro-batches = the global batch on one rank, so the summed
// gradient equals that of one batch of M x micro_batch samples (tested).
// Parameters are the optimizer's master weights: train in float for fp32
// master weights (double is for tests). Weight decay applies to matrices and
// embeddings only (tensors of rank >= 2), as GPT-2/nanoGPT/llm.c do; biases
// and layer-norm parameters are not decayed.
// Steps count from 0 in callbacks, problems and the schedule.
//
// defines: StepReport, NonFiniteAction, TrainOptions, TrainResult, StepVerdict, judge_step,
//          finish_step, accumulate_gradients, FlatView, adamw_update_range, train, EvalResult, evaluate
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>

#include "executor/data/loader.hpp"
#include "executor/model/model.hpp"
#include "kernels/cpu/adamw.hpp"
#include "model/plan.hpp"
#include "model/problem.hpp"

namespace meshplan::exec {

struct StepReport {
  std::int64_t step = 0;     // 0-based optimizer step
  double loss = 0;           // mean over the step's micro-batches (nats, or MSE)
  double lr = 0;             // learning rate used by this step
  double grad_norm = 0;      // global L2 norm before clipping
  double step_s = 0;         // wall time of the step, forward to optimizer
  double items_per_s = 0;    // samples/s (MLP) or tokens/s (GPT)
  bool skipped = false;      // update skipped because loss or norm was not finite
};

enum class NonFiniteAction { stop, skip };

struct TrainOptions {
  std::int64_t micro_batch = 1;    // samples per forward/backward
  std::int64_t micro_batches = 1;  // gradient accumulation steps per optimizer step
  std::int64_t steps = 0;          // optimizer steps; 0: derive from epochs
  double epochs = 0;               // used when steps == 0: ceil(epochs x samples_per_epoch / global batch)
  kernels::AdamWHyperparameters adamw;  // adamw.learning_rate is the peak lr of the schedule
  std::int64_t warmup_steps = 0;
  double min_lr_fraction = 0.1;
  double max_grad_norm = 1.0;      // <= 0: no clipping
  NonFiniteAction on_non_finite = NonFiniteAction::stop;
  // Resuming: the run's first step (the schedule still spans 0 .. steps - 1)
  // and the AdamW updates already applied (bias correction continues from it).
  std::int64_t first_step = 0;
  std::int64_t completed_updates = 0;
  std::function<void(const StepReport&)> on_step;  // called after every step (also skipped ones)
  // Asked after on_step; true ends the run after this step (TrainResult::stopped_early).
  // On N ranks it must answer alike on every rank (run_control.hpp).
  std::function<bool()> stop_requested;

  std::int64_t global_batch() const { return micro_batch * micro_batches; }
};

struct TrainResult {
  std::int64_t steps = 0;          // steps run (including skipped ones)
  std::int64_t skipped_steps = 0;
  std::int64_t skipped_in_a_row = 0;  // since the last step that updated
  bool stopped_early = false;      // stop_requested said so before the last step
  double last_loss = std::numeric_limits<double>::quiet_NaN();
  Problems problems;               // bad options/data, or the step whose loss or norm was not finite
  bool ok() const { return !has_errors(problems); }
};

// Whether a step whose loss and gradient norm are known may update: `update`
// when both are finite; otherwise, by `action`, `stop` (an error naming the
// step, the values and the learning rate, added to `result.problems`) or
// `skip` (a warning; result.skipped_steps counted), until kMaxSkippedInARow
// steps in a row were skipped: then `stop`. Both trainers call it, so one rank
// and many stop or skip alike.
enum class StepVerdict { update, skip, stop };
// Skipped steps leave the weights as they were, so a run of them means the weights (or the
// learning rate) cannot give a finite step again: --skip-non-finite ran --lr 1e30 to the end,
// exit 0, and saved the broken weights. Loss scalers skip the odd step, not this many in a row.
inline constexpr std::int64_t kMaxSkippedInARow = 20;
StepVerdict judge_step(std::int64_t step, double loss, double grad_norm, double lr, NonFiniteAction action,
                       TrainResult& result);

// The end of a step, alike in every trainer (train, train_parallel,
// DataParallelTrainer), once `loss` and `grad_norm` are known on this rank:
// counts the step in `result`; judge_step; when it allows, `update(clip,
// updates, hp)` with clip = clip_scale(grad_norm, max_grad_norm), `updates`
// already incremented and hp = options.adamw at this step's lr; then the
// report's time (from `start`) and throughput (`items` per step), on_step and
// stop_requested. Returns false when the run ends after this step (stopped
// on a non-finite step, or asked to stop: result.stopped_early when steps remain).
using StepUpdate = std::function<void(double clip, std::int64_t updates, const kernels::AdamWHyperparameters& hp)>;
bool finish_step(std::int64_t step, double loss, double grad_norm, double lr, double items,
                 std::chrono::steady_clock::time_point start, std::int64_t steps, const TrainOptions& options,
                 std::int64_t& updates, TrainResult& result, const StepUpdate& update);

// Zeroes the gradients, then runs `micro_batches` forward/backward passes of
// `micro_batch` samples from `loader`, each backward scaled by 1 / micro_batches;
// returns the mean loss. The gradient half of one training step.
template <typename T>
double accumulate_gradients(Model<T>& model, data::DataLoader& loader, std::int64_t micro_batch,
                            std::int64_t micro_batches);

// Part of a flat parameter buffer (parameters.hpp): `data` holds elements
// [begin, ...) of it, so a shard and the whole buffer are addressed alike.
template <typename T>
struct FlatView {
  T* data = nullptr;
  std::int64_t begin = 0;
  T* at(std::int64_t element) const { return data + (element - begin); }
};

// AdamW (step `updates`, 1-based) on elements [begin, end) of the flat
// buffer, tensor by tensor so that weight decay applies to the elements of
// rank >= 2 tensors only, also where [begin, end) cuts a tensor (a ZeRO shard).
// The views must hold [begin, end); `grads` is used as it is (clip it first).
template <typename T>
void adamw_update_range(const ParameterLayout& layout, std::int64_t begin, std::int64_t end, FlatView<T> values,
                        FlatView<const T> grads, FlatView<T> adam_m, FlatView<T> adam_v, std::int64_t updates,
                        const kernels::AdamWHyperparameters& hp);

template <typename T>
TrainResult train(Model<T>& model, data::DataLoader& loader, const TrainOptions& options);

struct EvalResult {
  double loss = 0;  // mean over samples
  double accuracy = std::numeric_limits<double>::quiet_NaN();  // classifiers and LMs (per token); NaN for regression
  std::int64_t samples = 0;
};

// Mean loss (and accuracy) over the next min(samples_per_epoch, max_samples)
// samples of `loader` (max_samples 0: one epoch), in batches of model.max_batch().
// From a fresh validation loader that is exactly the whole split.
template <typename T>
EvalResult evaluate(Model<T>& model, data::DataLoader& loader, std::int64_t max_samples = 0);

}  // namespace meshplan::exec
