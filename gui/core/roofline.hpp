// The roofline of one plan's step (Williams et al. 2009; "How to Scale Your
// Model", Part 1): every op of one transformer layer (and of the embedding
// and head blocks) on one device of the plan, as a point (arithmetic
// intensity, achieved FLOP/s) under the device's ceilings. GEMMs are the
// evaluator's record (Evaluator::block_costs: each GEMM's local shape,
// operand width and forward seconds); a memory-bound op is its own pass,
// with model/stage_cost.hpp's memory_pass_bytes and compute_model.hpp's
// stream_time_s, so a point sits where the cost model puts that op.
//
// Defines: RooflinePoint, Roofline, plan_roofline.
#pragma once

#include <string>
#include <vector>

#include "model/evaluate.hpp"

namespace meshplan::studio {

struct RooflinePoint {
  std::string name;                  // "layer0.mlp.w_in"
  bool gemm = false;                 // matmul-like (compute ceiling applies)
  double flops = 0;                  // forward, one micro-batch, one device
  double bytes = 0;                  // operands + results (GEMM) or streamed traffic
  double time_s = 0;
  double intensity() const { return bytes > 0 ? flops / bytes : 0; }
  double achieved_flops_per_s() const { return time_s > 0 ? flops / time_s : 0; }
};

struct Roofline {
  double peak_flops_per_s = 0;        // dense peak at the plan's GEMM dtype
  double achievable_flops_per_s = 0;  // x the device's large-GEMM efficiency
  double memory_bytes_per_s = 0;      // achievable memory bandwidth
  std::vector<RooflinePoint> points;
};

Roofline plan_roofline(const Evaluator& evaluator, const Plan& plan);

}  // namespace meshplan::studio
