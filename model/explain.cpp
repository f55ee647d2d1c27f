#include "model/explain.hpp"

#include <cmath>
#include <cstdio>

#include "model/layer_graph.hpp"
#include "model/text.hpp"
#include "model/overlap_switches.hpp"
#include "model/plan_defaults.hpp"
#include "model/stage_partition.hpp"

namespace meshplan {
namespace {

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  return text;
}

// Each overlap switch the plan could run and does not (the table's rows with
// a note), priced again with it on, noted when it would save more than
// kExpertOverlapNoteShare of the step: "<note> would take 11.08 s a step to
// 9.54 s (-13.9%), at best (docs/cost-model.md, "<section>")". The plan's own
// record serves where the switch does not change it.
void add_overlap_notes(const Evaluator& evaluator, const Plan& plan, const std::vector<AxisPlacement>& placements,
                       const std::vector<BlockCost>& costs, double step_s, Problems& problems) {
  const ModelSpec& model = evaluator.model();
  const std::int64_t experts = model.kind == ModelKind::transformer ? model.transformer.experts : 0;
  for (const OverlapSwitch& s : kOverlapSwitches) {
    if (s.note.empty() || plan.*s.field) continue;
    Plan on = plan;
    on.*s.field = true;
    if (!s.applies(on, experts)) continue;
    const double on_s = s.changes_record ? evaluator.evaluate(on, placements).time.step_s
                                         : evaluator.evaluate(on, placements, costs).time.step_s;
    if (!(on_s < step_s * (1 - kExpertOverlapNoteShare))) continue;
    char text[160];
    std::snprintf(text, sizeof text, "%.4g s a step to %.4g s (-%.1f%%)", step_s, on_s, 100 * (1 - on_s / step_s));
    problems.push_back({Severity::warning, std::string(s.key),
                        std::string(s.note) + " would take " + text + ", at best (docs/cost-model.md, \"" +
                            std::string(s.note_section) + "\")"});
  }
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

// MFU above 100%: model FLOPs count attention's whole s x s, the causal
// fused kernel runs half (docs/cost-model.md, "Compute", its end).
std::optional<Problem> mfu_note(const TimeEstimate& time) {
  if (!(time.mfu > 1) && !(time.hfu > 1)) return std::nullopt;
  char text[200];
  std::snprintf(text, sizeof text, "MFU is %.1f%% (HFU %.1f%%): ", 100 * time.mfu, 100 * time.hfu);
  if (time.hfu > 1.001) {  // what runs, above the peak: the device preset's rates are, not the FLOP convention
    return Problem{Severity::warning, "mfu",
                   std::string(text) +
                       "the hardware FLOPs run faster than the device's dense peak, so the device preset's rates "
                       "(gemm_fraction x gemm_curve, attention curves) are above its peak_tflops; check the preset"};
  }
  return Problem{Severity::warning, "mfu",
                 std::string(text) +
                     "model FLOPs count attention's whole s x s score matrix, as published MFU figures do, while the "
                     "causal fused kernel computes half of it; at this sequence length that half is most of the step. "
                     "HFU counts what runs (docs/cost-model.md, \"Compute\")"};
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
      if (!std::isfinite(ex.time->step_s)) {  // the presets' bounds keep rates positive; this is the last guard
        ex.problems.push_back({Severity::error, "time",
                               "the step time is not a finite number: a rate in the device or cluster preset is 0 "
                               "or too small to divide by"});
        ex.valid = false;
      }
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
      add_overlap_notes(evaluator, plan, placements, costs, ex.time->step_s, ex.problems);
      if (const auto note = fp8_note(evaluator, plan, placements, ex.time->step_s)) ex.problems.push_back(*note);
      if (const auto note = mfu_note(*ex.time)) ex.problems.push_back(*note);
    }
    const StageMemory& worst = ex.memory->worst();
    if (const auto note = dropout_mask_note(worst)) ex.problems.push_back(*note);
    if (!ex.memory->fits()) {
      ex.problems.push_back({Severity::error, "memory",
                             "pipeline stage " + std::to_string(worst.stage) + " needs " +
                                 gib(worst.memory.total_bytes()) + " per device; " + cluster.device.name + " has " +
                                 gib(ex.memory->usable_bytes) + " usable (" + gib(ex.memory->capacity_bytes) +
                                 " less " + format("%g", plan.memory_headroom * 100) +
                                 "% headroom)"});
    }
  }
  return ex;
}

}  // namespace meshplan
