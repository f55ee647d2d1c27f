// One plan, fully explained: validation problems, parameter count, the
// per-device memory of every pipeline stage (from the graph-walking
// reference, memory_model.hpp) and, for a valid plan, the step time of the
// fast evaluator, the link each mesh axis rides, and a warning when another
// order of the axes keeps tp / cp / ep inside a node and is faster
// (axis_links.hpp), and a warning when dropout masks are a large share of
// the activations. What `meshplan explain` prints.
#pragma once

#include <array>
#include <optional>
#include <vector>

#include "model/axis_links.hpp"
#include "model/cluster_spec.hpp"
#include "model/evaluate.hpp"
#include "model/memory_model.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"
#include "model/scaling_diagnostics.hpp"
#include "model/validate.hpp"

namespace meshplan {

struct Explanation {
  Deployment deployment;
  double parameter_count = 0;
  std::int64_t seq_len = 0;
  std::int64_t micro_batches = 0;
  Problems problems;                    // validation, then memory
  bool valid = false;                   // no structural errors (memory aside)
  std::optional<MemoryEstimate> memory; // absent when the plan cannot be laid out at all
  std::int64_t rank_stage = 0;          // pipeline stage of deployment.rank
  std::optional<TimeEstimate> time;     // present for valid plans
  // time->compute_s by ComputePart (stage_cost.hpp), summing to it (valid plans).
  std::array<double, kComputeParts> compute_parts_s{};
  std::optional<ScalingDiagnostics> scaling;  // present for valid plans
  std::vector<AxisLink> axis_links;     // valid plans: every axis of size > 1, in mesh order
  // Valid plans whose routed experts leave tp (expert_split): their all-to-all
  // group, ep x tp ranks (expert_mesh's ep axis).
  std::optional<AxisLink> expert_link;
  std::optional<MeshReordering> reordering;  // a faster order keeping tp / cp / ep inside (also a warning in problems)

  bool fits_memory() const { return memory && memory->fits(); }
  bool feasible() const { return valid && fits_memory(); }
};

Explanation explain_plan(const ModelSpec& model, const ClusterSpec& cluster, const Deployment& deployment,
                         const Plan& plan);

// Dropout masks (1 byte per element, the model's `dropout` > 0) above this
// share of a stage's activations earn a warning: most recent recipes train
// with dropout 0, and a preset that keeps a published 0.1 (GPT-2) pays for it.
inline constexpr double kDropoutMaskNoteShare = 0.10;
// explain's notes that combined 1F1B (Plan::overlap_expert_parallel), the
// chunked tp overlap (Plan::tp_comm_overlap) or ZeRO's overlapped gather
// (Plan::overlap_zero_gather) would shorten a plan that could run it by more
// than this share of its step.
inline constexpr double kExpertOverlapNoteShare = 0.02;
// That warning for `stage` (where "dropout"), or none below the share.
std::optional<Problem> dropout_mask_note(const StageMemory& stage);

}  // namespace meshplan
