// The formula in lr_schedule.hpp, with the degenerate cases (no decay phase,
// steps past the end) pinned down instead of dividing by zero.
#include "executor/train/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

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

}  // namespace meshplan::exec
