// The fast plan evaluator: per-device memory and step time of one plan from
// a ModelProfile, in microseconds, for the planner's search. Memory agrees
// with the graph-walking reference (memory_model.hpp) to rounding; time is
// the analytical model of docs/cost-model.md, "Time".
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "model/cluster_spec.hpp"
#include "model/compute_model.hpp"
#include "model/layer_graph.hpp"
#include "model/memory_model.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"
#include "model/profile.hpp"
#include "model/stage_cost.hpp"
#include "model/topology.hpp"

namespace meshplan {

struct TimeEstimate {
  double compute_s = 0;                 // compute of the slowest stage over the step (incl. recompute)
  std::int64_t slowest_stage = 0;       // the stage compute_s and the stage_* figures are of
  double communication_s = 0;           // all communication of that stage's device, hidden or not
  double communication_exposed_s = 0;   // the part on the critical path
  double bubble_s = 0;                  // pipeline fill and drain
  double optimizer_s = 0;
  double step_s = 0;
  std::array<double, 6> axis_communication_s{};  // indexed by Axis
  std::array<double, 6> axis_exposed_s{};
  double model_flops_per_step = 0;      // 6 N D-style model FLOPs (matmuls, forward + backward)
  double hardware_flops_per_step = 0;   // plus recomputation and the experts' capacity padding
  double tokens_per_s = 0;
  double mfu = 0;
  double hfu = 0;
  // Per micro-batch on the slowest stage, for the simulator and reports.
  double stage_forward_s = 0;
  double stage_backward_s = 0;
  double stage_weight_gradient_s = 0;   // the W part of the backward (zero-bubble schedules)
};

struct PlanEstimate {
  std::int64_t worst_stage = 0;
  MemoryBreakdown worst_memory;
  double parameters_on_device = 0;      // of the worst stage
  double capacity_bytes = 0;
  double usable_bytes = 0;
  bool fits = false;
  TimeEstimate time;
};

class Evaluator {
 public:
  Evaluator(const ModelSpec& model, const ClusterSpec& cluster, std::int64_t world_size, std::int64_t seq_len);

  // `placements` from place_axes(topology(), plan.mesh); `stages` (optional)
  // receives every pipeline stage's memory. The plan must be valid
  // (validate_plan) with an even stage partition or stated stage_layers.
  PlanEstimate evaluate(const Plan& plan, const std::vector<AxisPlacement>& placements,
                        std::vector<StageMemory>* stages = nullptr) const;
  PlanEstimate evaluate(const Plan& plan, std::vector<StageMemory>* stages = nullptr) const;
  // The two halves, for the search to reuse block costs across plans that
  // share micro-batch, tp, cp, ep, sequence parallelism, recompute, precision
  // and attention. block_costs is the cost record (stage_cost.hpp), one per
  // block kind (ModelProfile::kinds): what the simulator and the studio read.
  std::vector<BlockCost> block_costs(const Plan& plan, const std::vector<AxisPlacement>& placements) const;
  // One stage's compute over the step by ComputePart (the record's parts of its
  // blocks, times the micro-batches); for TimeEstimate::slowest_stage they sum to compute_s.
  std::array<double, kComputeParts> compute_parts(const Plan& plan, const std::vector<BlockCost>& costs,
                                                  std::int64_t stage) const;
  PlanEstimate evaluate(const Plan& plan, const std::vector<AxisPlacement>& placements,
                        const std::vector<BlockCost>& costs, std::vector<StageMemory>* stages = nullptr) const;

  const ModelProfile& profile() const { return profile_; }
  const LayerGraph& graph() const { return graph_; }
  const Topology& topology() const { return topology_; }
  const ClusterSpec& cluster() const { return cluster_; }
  const ModelSpec& model() const { return model_; }

 private:
  ModelSpec model_;
  ClusterSpec cluster_;
  LayerGraph graph_;
  ModelProfile profile_;
  Topology topology_;
  std::array<ComputeRates, 4> rates_{};  // by Precision
};

}  // namespace meshplan
