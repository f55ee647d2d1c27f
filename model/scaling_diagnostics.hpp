// "How to Scale Your Model" diagnostics for one plan (Austin et al. 2025,
// Part 5 "Training"): is each parallel axis compute-bound or
// communication-bound, and what FSDP x TP split would the roofline choose?
// With C the device's peak FLOP/s and W the axis's one-way bandwidth per
// device (from the topology placement):
//   - data parallel / FSDP over X devices is compute-bound when the tokens
//     each device processes per step, B / X, exceed C / W;
//   - tensor parallel over Y devices is compute-bound while F / Y > C / W
//     (F the feed-forward width), i.e. Y < F W / C;
//   - mixed FSDP x TP on N devices is best at X_opt = sqrt(B / F x M_X / M_Y x N)
//     and stays compute-bound while B / N > 4 (C / W)^2 / (M_X M_Y F).
// Here every axis uses one link (M_X = M_Y = 1). These are the TPU-derived
// rules of thumb; GPU clusters have two bandwidth levels, which the axis's W
// (slowest hop) stands in for.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/cluster_spec.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"
#include "model/topology.hpp"

namespace meshplan {

struct AxisDiagnostic {
  Axis axis = Axis::dp;
  std::int64_t size = 1;
  double value = 0;      // B / X in tokens, or F / Y
  double threshold = 0;  // C / W
  bool compute_bound = false;
  std::string rule;      // "B/X > C/W", "F/Y > C/W"
};

struct ScalingDiagnostics {
  std::vector<AxisDiagnostic> axes;  // dp, fsdp and tp axes of the plan with size > 1
  // Mixed FSDP x TP optimum over the data-parallel x tensor-parallel devices (transformers).
  std::optional<double> optimal_fsdp;   // X_opt
  std::optional<double> optimal_tp;     // N / X_opt
  std::optional<double> tokens_per_device;          // B / N
  std::optional<double> compute_bound_tokens_per_device;  // 4 (C/W)^2 / F
};

// `links_fsdp` and `links_tp` are M_X and M_Y: the mesh links each axis uses
// (1 on a GPU cluster; 2 for an axis riding two torus dimensions).
ScalingDiagnostics scaling_diagnostics(const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan,
                                       std::int64_t seq_len, const std::vector<AxisPlacement>& placements,
                                       double links_fsdp = 1, double links_tp = 1);

}  // namespace meshplan
