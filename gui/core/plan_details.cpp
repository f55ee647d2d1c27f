// Plan details: explain_plan (model/explain.hpp) for memory and time, and
// simulate_plan (simulator/simulate.hpp) for the step's timeline.
#include "gui/core/plan_details.hpp"

#include <algorithm>
#include <cstdio>

namespace meshplan::studio {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

Figure number(std::string name, std::string unit, double value, int decimals) {
  return {std::move(name), std::move(unit), value, fixed(value, decimals), true};
}
Figure word(std::string name, std::string text) { return {std::move(name), "", 0, std::move(text), false}; }

}  // namespace

std::vector<MemoryRow> memory_rows(const MemoryBreakdown& m) {
  const bool loss_peak = m.loss_transient_at_peak();
  return {{"parameters", m.parameters_bytes},
          {"gradients", m.gradients_bytes},
          {"optimizer", m.optimizer_bytes},
          {"activations", m.activations_bytes},
          {"buffers", m.buffers_bytes},
          {"loss transient", m.loss_transient_bytes, loss_peak},
          {"activation gradients", m.activation_gradient_bytes, !loss_peak},
          {"workspaces", m.workspace_bytes},
          {"runtime context", m.runtime_context_bytes},
          {"allocator reserve", m.allocator_reserve_bytes}};
}

std::vector<Figure> plan_figures(const ModelSpec& model, const Plan& plan, const Explanation& ex) {
  std::vector<Figure> out;
  out.push_back(word("mesh", plan.mesh.to_string()));
  for (Axis axis : all_axes) out.push_back(number("mesh." + to_string(axis), "", static_cast<double>(plan.mesh.size(axis)), 0));
  out.push_back(number("micro-batch size", "", static_cast<double>(plan.micro_batch), 0));
  out.push_back(number("micro-batches per step", "", static_cast<double>(plan.micro_batches()), 0));
  out.push_back(number("ZeRO stage", "", plan.zero_stage, 0));
  out.push_back(word("recompute", to_string(plan.recompute)));
  out.push_back(word("sequence parallel", plan.sequence_parallel ? "on" : "off"));
  if (model.has_experts()) {
    // What splits each routed expert's width: tp, or 1 when the experts leave tp (Plan::expert_tensor_parallel).
    out.push_back(number("expert tensor parallel", "", static_cast<double>(expert_split(plan).tp), 0));
  }
  out.push_back(word("schedule", to_string(plan.schedule)));
  out.push_back(word("precision", to_string(plan.precision)));
  out.push_back(word("feasible", ex.feasible() ? "yes" : "no"));
  if (ex.memory) {
    const MemoryEstimate& m = *ex.memory;
    const MemoryBreakdown& w = m.worst().memory;
    out.push_back(number("worst pipeline stage", "", static_cast<double>(m.worst().stage), 0));
    out.push_back(number("parameters per device", "M", m.worst().parameters_on_device / 1e6, 1));
    out.push_back(number("memory: parameters", "GiB", w.parameters_bytes / kGiB, 2));
    out.push_back(number("memory: gradients", "GiB", w.gradients_bytes / kGiB, 2));
    out.push_back(number("memory: optimizer", "GiB", w.optimizer_bytes / kGiB, 2));
    out.push_back(number("memory: activations", "GiB", w.activations_bytes / kGiB, 2));
    out.push_back(number("memory: buffers", "GiB", w.buffers_bytes / kGiB, 2));
    // The peak rows, as `meshplan explain` prints them (docs/cost-model.md, "Peak memory").
    // Of the loss transient and the activation gradients only the larger is in the total.
    const auto rows = memory_rows(w);
    for (std::size_t i = 5; i < rows.size(); ++i) out.push_back(number("memory: " + rows[i].name, "GiB", rows[i].bytes / kGiB, 2));
    out.push_back(number("memory: allocated peak", "GiB", w.allocated_peak_bytes() / kGiB, 2));
    out.push_back(number("memory: total", "GiB", w.total_bytes() / kGiB, 2));
    out.push_back(number("memory: usable", "GiB", m.usable_bytes / kGiB, 2));
  }
  // Which link each axis rides, as `meshplan explain` prints it (model/axis_links.hpp).
  for (const AxisLink& l : ex.axis_links) {
    const std::string axis = to_string(l.axis);
    out.push_back(word("link " + axis, link_display_name(l.link_kind) +
                                           (l.crosses_nodes ? " across " + std::to_string(l.nodes_spanned) + " nodes, "
                                                            : std::string(" inside a node, ")) +
                                           std::to_string(l.members_per_node) + " per node"));
    out.push_back(number("link " + axis + " bandwidth", "GB/s", l.bandwidth_bytes_per_s / 1e9, 1));
    if (all_to_all_slower_than_ring(l, plan))
      out.push_back(number("link " + axis + " all-to-all bandwidth", "GB/s", l.all_to_all_bandwidth_bytes_per_s / 1e9, 1));
    out.push_back(number("link " + axis + " latency", "us", l.latency_s * 1e6, 1));
  }
  if (ex.reordering) out.push_back(word("faster mesh order", ex.reordering->mesh.to_string()));
  if (ex.time) {
    const TimeEstimate& t = *ex.time;
    out.push_back(number("step time", "s", t.step_s, 3));
    out.push_back(number("compute", "s", t.compute_s, 3));
    // By kind, as `meshplan explain` prints it (model/stage_cost.hpp, ComputePart).
    for (std::size_t i = 0; i < kComputeParts; ++i) {
      const auto part = static_cast<ComputePart>(i);
      const bool fp8_cast = part == ComputePart::fp8_cast_forward || part == ComputePart::fp8_cast_backward;
      if (fp8_cast && ex.compute_parts_s[i] == 0) continue;  // fp8 plans only, as explain shows them
      std::string kind = to_string(part);
      std::replace(kind.begin(), kind.end(), '_', ' ');
      out.push_back(number("compute: " + kind, "s", ex.compute_parts_s[i], 3));
    }
    out.push_back(number("communication", "s", t.communication_s, 3));
    out.push_back(number("communication exposed", "s", t.communication_exposed_s, 3));
    for (Axis axis : all_axes) {
      const auto a = static_cast<std::size_t>(axis);
      out.push_back(number("communication " + to_string(axis), "s", t.axis_communication_s[a], 3));
      out.push_back(number("exposed " + to_string(axis), "s", t.axis_exposed_s[a], 3));
    }
    out.push_back(number("bubble", "s", t.bubble_s, 3));
    out.push_back(number("optimizer", "s", t.optimizer_s, 3));
    out.push_back(number(model.kind == ModelKind::transformer ? "tokens/s" : "samples/s", "/s", t.tokens_per_s, 0));
    out.push_back(number("MFU", "%", 100 * t.mfu, 1));
    out.push_back(number("HFU", "%", 100 * t.hfu, 1));
  }
  return out;
}

PlanDetails analyse_plan(const SearchOutcome& outcome, const Plan& plan, bool simulate) {
  PlanDetails details;
  details.plan = plan;
  const PlanningJob& job = outcome.job;
  details.explanation = explain_plan(job.model, job.cluster, Deployment{job.world_size, 0}, plan);
  details.explanation.deployment.rank = -1;  // the worst device, as `meshplan explain` reports without --rank
  details.figures = plan_figures(job.model, plan, details.explanation);
  if (simulate && outcome.evaluator) {
    auto simulation = sim::simulate_plan(*outcome.evaluator, plan, sim::SimulationOptions{});
    if (simulation.ok()) {
      details.simulation = std::move(simulation.value);
    } else {
      for (const auto& p : simulation.problems) details.simulation_problem += describe(p) + "\n";
    }
  }
  return details;
}

}  // namespace meshplan::studio
