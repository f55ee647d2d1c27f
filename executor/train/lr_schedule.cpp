// The formula in lr_schedule.hpp, with the degenerate cases (no decay phase,
// steps past the end) pinned down instead of dividing by zero.
#include "executor/train/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>
#include <string>

#include "model/gpt3_sizes.hpp"
#include "model/text.hpp"

namespace meshplan::exec {

double learning_rate_at(const LrSchedule& schedule, std::int64_t step) {
  const double lr = schedule.max_lr;
  const double min_lr = schedule.min_lr_fraction * lr;
  const std::int64_t W = schedule.warmup_steps;
  if (step < W) return lr * static_cast<double>(step + 1) / static_cast<double>(W);
  const std::int64_t decay_steps = schedule.total_steps - 1 - W;
  if (decay_steps <= 0) return step >= schedule.total_steps ? min_lr : lr;
  const double ratio = std::min(1.0, static_cast<double>(step - W) / static_cast<double>(decay_steps));
  return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
}

namespace {

// The table's row for a model of `parameters` (model/gpt3_sizes.hpp); nullptr below the table.
const Gpt3Size* published_row(double parameters) {
  return within_gpt3_sizes(parameters) ? &nearest_gpt3_size(parameters) : nullptr;
}

}  // namespace

DefaultLearningRate default_learning_rate(double parameters, bool transformer) {
  const Gpt3Size* row = transformer ? published_row(parameters) : nullptr;
  std::ostringstream why;
  if (row == nullptr) {
    why << (transformer ? "a transformer below GPT-3's smallest size (125M)" : "not a transformer")
        << ": nanoGPT's rate for small networks";
    return {1e-3, why.str()};
  }
  why << "GPT-3's peak rate for its " << row->size << " size (Brown et al. 2020, Table 2.1); "
      << "this model has " << human_count(parameters) << " parameters";
  return {row->learning_rate, why.str()};
}

Problems learning_rate_warnings(double parameters, bool transformer, double lr, std::int64_t warmup_steps) {
  const Gpt3Size* row = transformer ? published_row(parameters) : nullptr;
  if (row == nullptr && lr > 1) {  // no published row to compare with (below 125M, or an MLP)
    std::ostringstream text;
    text << lr << " is above 1: AdamW moves each weight by about the learning rate per step, and published peak "
                  "rates are 6e-5 to 6e-4 (Brown et al. 2020, Table 2.1); expect the loss to diverge";
    return {{Severity::warning, "--lr", text.str()}};
  }
  if (row == nullptr || !(lr > 2 * row->learning_rate)) return {};
  std::ostringstream text;
  text << lr << " is ";
  text.precision(2);
  text << std::fixed << lr / row->learning_rate << "x the peak rate GPT-3's " << row->size
       << " model trained with (";
  text.precision(1);
  text << std::scientific << row->learning_rate << ", Brown et al. 2020, Table 2.1); this model has "
       << human_count(parameters) << " parameters" << (warmup_steps == 0 ? " and the run no --warmup" : "")
       << ": a run this far above the published rate can diverge";
  return {{Severity::warning, "--lr", text.str()}};
}

}  // namespace meshplan::exec
