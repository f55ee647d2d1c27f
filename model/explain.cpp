#include "model/explain.hpp"

#include <cstdio>

#include "model/layer_graph.hpp"
#include "model/plan_defaults.hpp"
#include "model/stage_partition.hpp"

namespace meshplan {
namespace {

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  return text;
}

// An overlap the plan could run and does not, when it would save more than
// kExpertOverlapNoteShare of the step: "<change> would take 11.08 s a step to
// 9.54 s (-13.9%), at best (docs/cost-model.md, "<section>")".
std::optional<Problem> overlap_note(const char* field, const char* change, const char* section, double step_s,
                                    double overlapped_s) {
  if (!(overlapped_s < step_s * (1 - kExpertOverlapNoteShare))) return std::nullopt;
  char text[160];
  std::snprintf(text, sizeof text, "%.4g s a step to %.4g s (-%.1f%%)", step_s, overlapped_s,
                100 * (1 - overlapped_s / step_s));
  return Problem{Severity::warning, field,
                 std::string(change) + " would take " + text + ", at best (docs/cost-model.md, \"" + section + "\")"};
}

// Combined 1F1B (the same record, priced again with the passes paired).
std::optional<Problem> expert_overlap_note(const Evaluator& evaluator, const Plan& plan,
                                           const std::vector<AxisPlacement>& placements,
                                           const std::vector<BlockCost>& costs, double step_s) {
  if (plan.overlap_expert_parallel || plan.micro_batches() <= 1 || !expert_overlap_applies(plan)) {
    return std::nullopt;
  }
  Plan paired = plan;
  paired.overlap_expert_parallel = true;
  return overlap_note("overlap_expert_parallel",
                      "hiding the expert all-to-alls under paired passes (Megatron-Core's combined 1F1B, "
                      "--overlap-moe-expert-parallel-comm)",
                      "Expert-parallel overlap", step_s, evaluator.evaluate(paired, placements, costs).time.step_s);
}

// Transformer Engine's chunked tp overlap, where the plan has tp > 1 and
// sequence parallelism (block costs priced again with it: the record changes).
std::optional<Problem> tp_overlap_note(const Evaluator& evaluator, const Plan& plan,
                                       const std::vector<AxisPlacement>& placements, double step_s) {
  Plan chunked = plan;
  chunked.tp_comm_overlap = true;
  if (plan.tp_comm_overlap || !tp_comm_overlap_applies(chunked)) return std::nullopt;
  return overlap_note("tp_comm_overlap",
                      "running the tp collectives in chunks beside their GEMMs (Transformer Engine's userbuffers, "
                      "--tp-comm-overlap)",
                      "Tensor-parallel communication overlap", step_s, evaluator.evaluate(chunked, placements).time.step_s);
}

// ZeRO-1/2's gather of the updated weights under the next forward, where the
// plan could run it (the same record: only the step's tail is priced again).
std::optional<Problem> zero_gather_note(const Evaluator& evaluator, const Plan& plan,
                                        const std::vector<AxisPlacement>& placements,
                                        const std::vector<BlockCost>& costs, double step_s) {
  Plan overlapped = plan;
  overlapped.overlap_zero_gather = true;
  if (plan.overlap_zero_gather || !zero_gather_overlap_applies(overlapped)) return std::nullopt;
  return overlap_note("overlap_zero_gather",
                      "gathering ZeRO's updated weights under the next step's first forward (Megatron-Core's "
                      "--overlap-param-gather)",
                      "ZeRO's gather of the updated weights", step_s,
                      evaluator.evaluate(overlapped, placements, costs).time.step_s);
}

// An fp8 plan predicted no faster than the same plan in bf16: its casts and
// their launches cost more than its fp8 GEMMs save (small GEMMs, or a step
// the host's launches bound; docs/cost-model.md, "FP8 GEMMs").
std::optional<Problem> fp8_note(const Evaluator& evaluator, const Plan& plan, const std::vector<AxisPlacement>& placements,
                                double step_s) {
  if (plan.precision != Precision::fp8) return std::nullopt;  // valid: the device has bf16 too (check_precision)
  Plan bf16 = plan;
  bf16.precision = unquantized(plan.precision);
  const double bf16_s = evaluator.evaluate(bf16, placements).time.step_s;
  if (!(bf16_s <= step_s)) return std::nullopt;
  char text[160];
  std::snprintf(text, sizeof text, "%.4g s a step against bf16's %.4g s (%+.1f%%)", step_s, bf16_s, 100 * (step_s / bf16_s - 1));
  return Problem{Severity::warning, "precision",
                 std::string("fp8 is predicted no faster than bf16 for this plan: ") + text +
                     "; its casts and their launches cost more than its fp8 GEMMs save (docs/cost-model.md, \"FP8 GEMMs\")"};
}

}  // namespace

std::optional<Problem> dropout_mask_note(const StageMemory& stage) {
  const MemoryBreakdown& m = stage.memory;
  if (m.activations_bytes <= 0 || m.dropout_mask_bytes <= kDropoutMaskNoteShare * m.activations_bytes) return std::nullopt;
  char share[16];
  std::snprintf(share, sizeof share, "%.0f%%", 100 * m.dropout_mask_bytes / m.activations_bytes);
  return Problem{Severity::warning, "dropout",
                 std::string("dropout masks are ") + share + " of the activations (" + gib(m.dropout_mask_bytes) +
                     " per device on pipeline stage " + std::to_string(stage.stage) +
                     "); `dropout: 0` in the model, as most recent recipes use, removes them"};
}

Explanation explain_plan(const ModelSpec& model, const ClusterSpec& cluster, const Deployment& deployment,
                         const Plan& plan) {
  Explanation ex;
  ex.deployment = deployment;
  ex.seq_len = plan_seq_len(model, plan);
  ex.micro_batches = plan.micro_batches();
  const LayerGraph graph = build_layer_graph(model, ex.seq_len);
  ex.parameter_count = graph.parameter_count();
  ex.problems = validate_plan(model, graph, cluster, deployment, plan);
  ex.valid = !has_errors(ex.problems);

  // Memory is computed whenever the layers can be laid out, even for an
  // otherwise invalid plan, so a user sees both what is wrong and what it costs.
  const std::int64_t pp = model.kind == ModelKind::cnn ? 1 : plan.mesh.size(Axis::pp);
  auto partition = partition_stages(graph, pp, plan.schedule.virtual_stages, plan.stage_layers);
  if (partition.ok() && plan.micro_batch >= 1) {
    ex.memory = estimate_memory(model, graph, partition.value, plan, cluster);
    ex.rank_stage = deployment.rank >= 0 && deployment.rank < plan.mesh.world_size()
                        ? plan.mesh.coordinate(deployment.rank, Axis::pp)
                        : 0;
    if (ex.valid) {
      const Evaluator evaluator(model, cluster, plan.mesh.world_size(), ex.seq_len);
      const auto placements = place_axes(evaluator.topology(), plan.mesh);
      const std::vector<BlockCost> costs = evaluator.block_costs(plan, placements);
      ex.time = evaluator.evaluate(plan, placements, costs).time;
      ex.compute_parts_s = evaluator.compute_parts(plan, costs, ex.time->slowest_stage);
      ex.scaling = scaling_diagnostics(model, cluster, plan, ex.seq_len, placements);
      ex.axis_links = axis_links(cluster, placements);
      if (expert_split(plan).tokens > 1) {
        for (const AxisLink& l : axis_links(cluster, expert_placements(evaluator.topology(), plan, placements))) {
          if (l.axis == Axis::ep) ex.expert_link = l;
        }
      }
      ex.reordering = find_reordering(evaluator, plan, ex.time->step_s);
      if (ex.reordering) ex.problems.push_back(reordering_warning(cluster, ex.axis_links, *ex.reordering));
      if (const auto note = expert_overlap_note(evaluator, plan, placements, costs, ex.time->step_s)) {
        ex.problems.push_back(*note);
      }
      if (const auto note = tp_overlap_note(evaluator, plan, placements, ex.time->step_s)) ex.problems.push_back(*note);
      if (const auto note = zero_gather_note(evaluator, plan, placements, costs, ex.time->step_s)) {
        ex.problems.push_back(*note);
      }
      if (const auto note = fp8_note(evaluator, plan, placements, ex.time->step_s)) ex.problems.push_back(*note);
    }
    const StageMemory& worst = ex.memory->worst();
    if (const auto note = dropout_mask_note(worst)) ex.problems.push_back(*note);
    if (!ex.memory->fits()) {
      ex.problems.push_back({Severity::error, "memory",
                             "pipeline stage " + std::to_string(worst.stage) + " needs " +
                                 gib(worst.memory.total_bytes()) + " per device; " + cluster.device.name + " has " +
                                 gib(ex.memory->usable_bytes) + " usable (" + gib(ex.memory->capacity_bytes) +
                                 " less " + std::to_string(static_cast<int>(plan.memory_headroom * 100 + 0.5)) +
                                 "% headroom)"});
    }
  }
  return ex;
}

}  // namespace meshplan
