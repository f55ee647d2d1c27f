// The formula in lr_schedule.hpp, with the degenerate cases (no decay phase,
// steps past the end) pinned down instead of dividing by zero.
#include "executor/train/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>
#include <string>

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

// GPT-3's eight sizes and their peak learning rates (Table 2.1 of the paper lr_schedule.hpp names).
struct PublishedRate {
  const char* name;  // the paper's name of the size
  double parameters;
  double learning_rate;
};
constexpr PublishedRate kGpt3PeakRates[] = {{"125M", 125e6, 6.0e-4}, {"350M", 350e6, 3.0e-4}, {"760M", 760e6, 2.5e-4},
                                            {"1.3B", 1.3e9, 2.0e-4}, {"2.7B", 2.7e9, 1.6e-4}, {"6.7B", 6.7e9, 1.2e-4},
                                            {"13B", 13e9, 1.0e-4},   {"175B", 175e9, 0.6e-4}};

// A model is of a size of the table from 0.9 x that size's parameters (lr_schedule.hpp).
constexpr double kSizeTolerance = 0.9;

// The table's row for a model of `parameters`: the largest size it is of; nullptr below the smallest.
const PublishedRate* published_row(double parameters) {
  const PublishedRate* row = nullptr;
  for (const PublishedRate& r : kGpt3PeakRates)
    if (kSizeTolerance * r.parameters <= parameters) row = &r;
  return row;
}

}  // namespace

DefaultLearningRate default_learning_rate(double parameters, bool transformer) {
  const PublishedRate* row = transformer ? published_row(parameters) : nullptr;
  std::ostringstream why;
  if (row == nullptr) {
    why << (transformer ? "a transformer below GPT-3's smallest size (125M)" : "not a transformer")
        << ": nanoGPT's rate for small networks";
    return {1e-3, why.str()};
  }
  why << "GPT-3's peak rate for its " << row->name << " size (Brown et al. 2020, Table 2.1); "
      << "this model has " << human_count(parameters) << " parameters";
  return {row->learning_rate, why.str()};
}

Problems learning_rate_warnings(double parameters, bool transformer, double lr, std::int64_t warmup_steps) {
  const PublishedRate* row = transformer ? published_row(parameters) : nullptr;
  if (row == nullptr || !(lr > 2 * row->learning_rate)) return {};
  std::ostringstream text;
  text << lr << " is ";
  text.precision(2);
  text << std::fixed << lr / row->learning_rate << "x the peak rate GPT-3's " << row->name
       << " model trained with (";
  text.precision(1);
  text << std::scientific << row->learning_rate << ", Brown et al. 2020, Table 2.1); this model has "
       << human_count(parameters) << " parameters" << (warmup_steps == 0 ? " and the run no --warmup" : "")
       << ": a run this far above the published rate can diverge";
  return {{Severity::warning, "--lr", text.str()}};
}

}  // namespace meshplan::exec
