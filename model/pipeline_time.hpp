// Step time of a pipeline schedule from per-stage micro-batch times: the one
// closed form the evaluator uses and the simulator checks against.
//
// With stage r taking t_r per micro-batch (forward + backward) and the
// slowest t_max, m micro-batches take m t_max plus the fill and drain of the
// other stages: (sum_r t_r - t_max) / v for GPipe, 1F1B and interleaved 1F1B
// with v chunks per device (Narayanan et al. 2021, Sec. 2.2: bubble
// (p - 1) / (v m) of the ideal time for uniform stages), scaled for ZB-H1 by
// (T_F + T_B - T_W) / (T_F + T_B + T_W) (Qi et al. 2023, Sec. 3). For uniform
// stages the efficiency is m / (m + (p - 1) / v).
#pragma once

#include <cstdint>
#include <span>

#include "model/plan.hpp"

namespace meshplan {

struct PipelineTiming {
  double step_s = 0;    // m micro-batches through every stage
  double bubble_s = 0;  // step_s - m t_max
  std::size_t slowest_stage = 0;
};

// `stage_s`: forward + backward seconds of one micro-batch on each stage;
// `weight_gradient_s`: the weight-gradient part of the slowest stage's backward (ZB-H1 only).
PipelineTiming pipeline_timing(std::span<const double> stage_s, std::int64_t micro_batches, const Schedule& schedule,
                               double slowest_weight_gradient_s = 0);

// m / (m + p - 1): the fraction of a uniform pipeline's time spent working.
inline double uniform_pipeline_efficiency(std::int64_t micro_batches, std::int64_t stages) {
  return static_cast<double>(micro_batches) / static_cast<double>(micro_batches + stages - 1);
}

}  // namespace meshplan
