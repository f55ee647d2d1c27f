#include "model/pipeline_time.hpp"

#include <algorithm>

namespace meshplan {

PipelineTiming pipeline_timing(std::span<const double> stage_s, std::int64_t micro_batches, const Schedule& schedule,
                               double slowest_weight_gradient_s) {
  PipelineTiming timing;
  if (stage_s.empty()) return timing;
  double t_max = 0, t_sum = 0;
  for (std::size_t r = 0; r < stage_s.size(); ++r) {
    t_sum += stage_s[r];
    if (stage_s[r] > t_max) {
      t_max = stage_s[r];
      timing.slowest_stage = r;
    }
  }
  const double m = static_cast<double>(std::max<std::int64_t>(micro_batches, 1));
  double fill = 0;
  if (stage_s.size() > 1) {
    fill = (t_sum - t_max) / static_cast<double>(std::max<std::int64_t>(schedule.virtual_stages, 1));
    if (schedule.kind == ScheduleKind::zb_h1 && t_max > 0) {
      // Qi et al.'s (p - 1)(T_F + T_B - T_W) defers p - 1 W passes into the warm-up, which takes
      // p micro-batches (their Sec. 3 assumes m >= p). With m < p there are m - 1 to defer: the
      // bubble is (p - 1)(T_F + T_B) - (m - 1) T_W, the same schedule's (the simulator's, exactly,
      // for uniform stages); at m = 1 the chain of F and B passes through every stage, the first
      // stage's W after it (docs/cost-model.md, "Pipeline").
      const double p = static_cast<double>(stage_s.size());
      const double deferred = (std::min(m, p) - 1) / (p - 1);
      fill *= std::max(0.0, t_max - slowest_weight_gradient_s * (1 + deferred)) / t_max;
    }
  }
  timing.step_s = m * t_max + fill;
  timing.bubble_s = fill;
  return timing;
}

}  // namespace meshplan
