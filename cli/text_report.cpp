#include "cli/text_report.hpp"

#include <cmath>
#include <cstdio>
#include <string>

#include "cli/plan_options.hpp"
#include "model/stage_partition.hpp"
#include "model/text.hpp"

namespace meshplan::cli {
namespace {

std::string pad(const std::string& text, std::size_t width) {
  return text.size() >= width ? text : text + std::string(width - text.size(), ' ');
}

std::string lpad(const std::string& text, std::size_t width) {
  return text.size() >= width ? text : std::string(width - text.size(), ' ') + text;
}

// The unit of a table of byte counts whose largest entry is `largest`: GiB,
// MiB below half a GiB, KiB below half a MiB, so that the rows show digits.
struct ByteUnit {
  const char* name;
  double bytes;
};

ByteUnit unit_for(double largest) {
  constexpr double kib = 1024.0, mib = kib * 1024, gib_bytes = mib * 1024;
  if (largest >= 0.5 * gib_bytes) return {"GiB", gib_bytes};
  if (largest >= 0.5 * mib) return {"MiB", mib};
  return {"KiB", kib};
}

std::string describe_model(const ModelSpec& model, std::int64_t seq_len) {
  switch (model.kind) {
    case ModelKind::transformer: {
      const auto& t = model.transformer;
      std::string text = std::to_string(t.layers) + " layers, hidden " + std::to_string(t.hidden) + ", " +
                         std::to_string(t.heads) + " heads";
      if (t.kv_heads != t.heads) text += " (" + std::to_string(t.kv_heads) + " kv)";
      if (t.latent_attention()) {
        text += " latent attention (";
        if (t.q_lora_rank > 0) text += "q " + std::to_string(t.q_lora_rank) + ", ";
        text += "kv " + std::to_string(t.kv_lora_rank) + "; head q/k " + std::to_string(t.head_size()) + " with rotary " +
                std::to_string(t.qk_rope_head_dim) + ", v " + std::to_string(t.v_head_dim) + ")";
      }
      text += ", ffn " + std::to_string(t.ffn) + ", vocab " + std::to_string(t.vocab) + ", seq " + std::to_string(seq_len);
      if (t.experts > 0) text += ", " + std::to_string(t.experts) + " experts top-" + std::to_string(t.top_k);
      if (t.capacity_factor > 0) text += " capacity " + format("%g", t.capacity_factor) + " (padded)";
      if (t.shared_expert_ffn > 0) text += ", shared experts ffn " + std::to_string(t.shared_expert_ffn);
      if (t.expert_groups > 0) {
        text += ", routed within " + std::to_string(t.group_top_k) + " of " + std::to_string(t.expert_groups) + " groups";
      }
      if (!t.dense_layers.empty()) {
        text += ", " + std::to_string(t.dense_layers.size()) + " dense layer" + (t.dense_layers.size() == 1 ? "" : "s") +
                " (ffn " + std::to_string(t.dense_width()) + ")";
      }
      return text;
    }
    case ModelKind::mlp: {
      std::string text = "layers";
      for (auto n : model.mlp.layer_sizes) text += " " + std::to_string(n);
      return text;
    }
    case ModelKind::cnn:
      return "ResNet bottleneck, " + std::to_string(model.cnn.image_size) + "x" + std::to_string(model.cnn.image_size) +
             " images, " + std::to_string(model.cnn.classes) + " classes";
  }
  return "";
}

// Which link each axis rides (model/axis_links.hpp): the numbers place_axes()
// gave the evaluator, so the table and the step time agree.
void print_axis_links(std::ostream& out, const std::vector<AxisLink>& links, const std::optional<AxisLink>& experts,
                      const Plan& plan) {
  out << "\n  links per axis (bandwidth per device and direction, with every group of the axis communicating):\n";
  out << "    " << pad("axis", 6) << lpad("size", 5) << lpad("stride", 8) << lpad("per node", 10) << lpad("nodes", 7)
      << "  " << pad("link", 26) << lpad("GB/s", 8) << lpad("latency us", 12) << "\n";
  for (const auto& l : links) {
    const std::string link = link_display_name(l.link_kind) + (l.crosses_nodes ? " (across nodes)" : " (inside a node)");
    out << "    " << pad(to_string(l.axis), 6) << lpad(std::to_string(l.size), 5) << lpad(std::to_string(l.stride), 8)
        << lpad(std::to_string(l.members_per_node), 10) << lpad(std::to_string(l.nodes_spanned), 7) << "  " << pad(link, 26)
        << lpad(format("%.1f", l.bandwidth_bytes_per_s / 1e9), 8) << lpad(format("%.1f", l.latency_s * 1e6), 12) << "\n";
  }
  if (experts) {
    out << "    experts out of tp: their all-to-all group is ep x tp = " << experts->size << " ranks (stride "
        << experts->stride << ", " << experts->members_per_node << " per node, " << experts->nodes_spanned
        << (experts->nodes_spanned == 1 ? " node" : " nodes") << "): "
        << format("%.1f", experts->all_to_all_bandwidth_bytes_per_s / 1e9) << " GB/s\n";
  }
  for (const auto& l : links) {  // the axes whose all-to-alls run slower than a ring would
    if (!all_to_all_slower_than_ring(l, plan) || (l.axis == Axis::ep && experts)) continue;
    out << "    " << to_string(l.axis) << ": an all-to-all runs at " << format("%.1f", l.all_to_all_bandwidth_bytes_per_s / 1e9)
        << " GB/s: each device's bytes for other nodes leave through its own share of the NICs (an all-to-all "
           "cannot aggregate them, nccl-tests issue 267)\n";
  }
}

}  // namespace

std::string gib(double bytes) { return format("%.2f", bytes / (1024.0 * 1024 * 1024)); }

std::string human_bytes(double bytes) {
  constexpr double kib = 1024.0, mib = kib * 1024, gib_bytes = mib * 1024;
  if (bytes >= gib_bytes) return format("%.2f GiB", bytes / gib_bytes);
  if (bytes >= mib) return format("%.2f MiB", bytes / mib);
  if (bytes >= kib) return format("%.2f KiB", bytes / kib);
  return format("%.0f B", bytes);
}

std::string count_of(double count, const std::string& singular, const std::string& plural) {
  const bool whole = count == std::floor(count) && std::fabs(count) < 1e15;  // 90291, not 9.029e+04
  return format(whole ? "%.0f" : "%.4g", count) + " " + (count == 1 ? singular : plural);
}

namespace {

// Every pipeline stage's memory, one row each, in the worst stage's unit.
void print_stage_table(std::ostream& out, const MemoryEstimate& mem) {
  const ByteUnit stage_unit = unit_for(mem.worst().memory.total_bytes());
  auto in_stage_unit = [&](double bytes) { return format("%.2f", bytes / stage_unit.bytes); };
  out << "\n  stage  layers  in-flight   params    grads    optim     acts  buffers    total  (" << stage_unit.name << ")\n";
  for (const auto& s : mem.stages) {
    out << "  " << lpad(std::to_string(s.stage), 5) << lpad(std::to_string(s.layers), 8)
        << lpad(format("%.4g", s.in_flight_micro_batches), 11) << lpad(in_stage_unit(s.memory.parameters_bytes), 9)
        << lpad(in_stage_unit(s.memory.gradients_bytes), 9) << lpad(in_stage_unit(s.memory.optimizer_bytes), 9)
        << lpad(in_stage_unit(s.memory.activations_bytes), 9) << lpad(in_stage_unit(s.memory.buffers_bytes), 9)
        << lpad(in_stage_unit(s.memory.total_bytes()), 9) << (s.stage == mem.worst().stage ? "  <- worst" : "") << "\n";
  }
}

// The compute row split by kind (ComputePart, model/stage_cost.hpp): forward,
// backward and their sum, each kind's share of the compute.
void print_compute_parts(std::ostream& out, const TimeEstimate& t, const std::array<double, kComputeParts>& parts) {
  if (t.compute_s <= 0) return;
  const auto at = [&](ComputePart p) { return parts[static_cast<std::size_t>(p)]; };
  const auto seconds = [](double s) { return lpad(format("%.4g", s), 12); };
  out << "\n  " << pad("compute by kind", 24) << lpad("forward s", 12) << lpad("backward s", 12) << lpad("s", 12)
      << lpad("%", 8) << "\n";
  const auto row = [&](const char* name, double forward, double backward) {
    out << "  " << pad(name, 24) << seconds(forward) << seconds(backward) << seconds(forward + backward)
        << lpad(format("%.1f", 100 * (forward + backward) / t.compute_s), 8) << "\n";
  };
  row("matmuls", at(ComputePart::matmul_forward), at(ComputePart::matmul_backward));
  row("attention", at(ComputePart::attention_forward), at(ComputePart::attention_backward));
  row("memory-bound ops", at(ComputePart::memory_bound_forward), at(ComputePart::memory_bound_backward));
  if (at(ComputePart::fp8_cast_forward) + at(ComputePart::fp8_cast_backward) > 0) {  // fp8 plans only
    row("fp8 casts", at(ComputePart::fp8_cast_forward), at(ComputePart::fp8_cast_backward));
  }
  row("recomputation", 0, at(ComputePart::recompute));
  row("launch overhead", 0, at(ComputePart::launch_overhead));
}

// The step time's parts, communication by axis, throughput and what priced it.
void print_time(std::ostream& out, const ModelSpec& model, const ClusterSpec& cluster, const TimeEstimate& t,
                const std::array<double, kComputeParts>& parts) {
  auto trow = [&](const char* name, double seconds) {
    out << "  " << pad(name, 24) << lpad(format("%.4g", seconds), 10) << lpad(format("%.1f", 100 * seconds / t.step_s), 8)
        << "\n";
  };
  out << "\n  " << pad("time per step", 24) << lpad("s", 10) << lpad("%", 8) << "\n";
  trow("compute", t.compute_s);
  trow("communication exposed", t.communication_exposed_s);
  trow("pipeline bubble", t.bubble_s);
  trow("optimizer step", t.optimizer_s);
  out << "  " << pad("step", 24) << lpad(format("%.4g", t.step_s), 10) << "\n";
  out << "  communication by axis (total / exposed, s):";
  for (Axis axis : all_axes) {
    const auto i = static_cast<std::size_t>(axis);
    if (t.axis_communication_s[i] > 0) {
      out << "  " << to_string(axis) << " " << format("%.3g", t.axis_communication_s[i]) << " / "
          << format("%.3g", t.axis_exposed_s[i]);
    }
  }
  out << "\n  throughput " << format("%.4g", t.tokens_per_s) << (model.kind == ModelKind::transformer ? " tokens/s" : " samples/s")
      << ", MFU " << format("%.1f", 100 * t.mfu) << "%, HFU " << format("%.1f", 100 * t.hfu) << "%, "
      << format("%.3g", t.model_flops_per_step) << " model FLOPs per step\n";
  print_compute_parts(out, t, parts);
  // The measured refinements that priced this (docs/cost-model.md, "Compute").
  const DeviceSpec& dev = cluster.device;
  std::string measured;
  if (!dev.gemm_curve.empty()) measured += "GEMM efficiency curve (" + std::to_string(dev.gemm_curve.size()) + " points)";
  int classes = 0;
  for (double rate : dev.op_bandwidth_bytes_per_s) classes += rate > 0 ? 1 : 0;
  if (classes > 0) measured += (measured.empty() ? "" : ", ") + std::to_string(classes) + " op-class rates";
  if (!measured.empty()) out << "  priced with " << dev.name << "'s measured " << measured << "\n";
  if (parts[static_cast<std::size_t>(ComputePart::fp8_cast_forward)] > 0) {  // an fp8 plan (docs/cost-model.md, "FP8 GEMMs")
    if (dev.fp8_gemm_efficiency > 0) {
      out << "  fp8 GEMMs at " << dev.name << "'s measured fp8 fraction of peak (" << format("%.3g", dev.fp8_gemm_efficiency) << ")\n";
    } else {
      out << "  fp8 GEMMs at " << dev.name << "'s bf16 fraction of peak (" << format("%.3g", dev.gemm_efficiency)
          << ") x the fp8 peak: no fp8 GEMM measured (achievable.fp8_gemm_fraction), likely optimistic\n";
    }
  }
  if (!cluster.intra_node.overlaps_compute || !cluster.inter_node.overlaps_compute) {
    out << "  " << (cluster.intra_node.overlaps_compute ? "inter-node" : "intra-node")
        << " communication cannot overlap compute on " << cluster.name << " (overlaps_compute: false): none of it is hidden\n";
  }
}

// How to Scale Your Model's checks per axis, and the FSDP x TP optimum.
void print_scaling(std::ostream& out, const ScalingDiagnostics& d) {
  out << "\n  How to Scale Your Model checks (C = device peak, W = the axis's bandwidth per device):\n";
  for (const auto& a : d.axes) {
    out << "    " << pad(to_string(a.axis) + "=" + std::to_string(a.size), 9) << a.rule << ": "
        << format("%.0f", a.value) << (a.compute_bound ? " > " : " <= ") << format("%.0f", a.threshold) << "  -> "
        << (a.compute_bound ? "compute-bound" : "communication-bound") << "\n";
  }
  if (d.optimal_fsdp && d.optimal_tp) {
    out << "    FSDP x TP optimum over these devices: X_opt = " << format("%.1f", *d.optimal_fsdp) << ", Y = "
        << format("%.1f", *d.optimal_tp) << "; B/N = " << format("%.0f", *d.tokens_per_device)
        << " tokens per device vs " << format("%.0f", *d.compute_bound_tokens_per_device)
        << " needed to stay compute-bound\n";
  }
}

}  // namespace

void print_explanation(std::ostream& out, const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan,
                       const Explanation& ex) {
  const std::int64_t world = ex.deployment.world_size;
  const std::int64_t per_node = cluster.devices_per_node;
  const std::int64_t nodes = (world + per_node - 1) / per_node;
  out << "meshplan explain: " << model.name << " on " << world << " x " << cluster.device.name << " (" << cluster.name
      << ": " << nodes << (nodes == 1 ? " node" : " nodes") << " of " << per_node << ")\n\n";
  out << "model   " << model.name << " (" << to_string(model.kind) << "): " << human_count(ex.parameter_count)
      << " parameters; " << describe_model(model, ex.seq_len) << "\n";
  out << "plan    mesh " << plan.mesh.to_string() << "; micro-batch " << plan.micro_batch << " x "
      << count_of(static_cast<double>(ex.micro_batches), "micro-batch", "micro-batches") << " x " << plan.mesh.data_parallel_size()
      << " data-parallel = global batch " << plan.global_batch << "\n";
  const bool nothing_repeated =
      model.kind == ModelKind::transformer && recompute_repeats_nothing(plan);
  out << "        zero " << plan.zero_stage << ", recompute " << to_string(plan.recompute)
      << (plan.recompute == Recompute::selective && plan.recompute_modules != kDefaultRecomputeModules
              ? " (" + recompute_modules_text(plan.recompute_modules) + ")"
              : "")
      << (nothing_repeated ? " (nothing to repeat under fused attention)" : "") << ", sequence parallel "
      << (plan.sequence_parallel ? "on" : "off") << ", schedule " << to_string(plan.schedule) << ", precision "
      << to_string(plan.precision) << ", attention " << to_string(plan.attention) << ", loss " << to_string(plan.loss);
  if (plan.mesh.size(Axis::cp) > 1) out << ", cp keys and values by " << to_string(plan.cp_comm);
  if (plan.fp32_gradients) out << ", fp32 gradients";
  if (plan.bf16_moments) out << ", bf16 moments";
  if (expert_split(plan).tokens > 1) out << ", experts out of tp (ep x tp = " << expert_split(plan).ep << ")";
  if (plan.ep_dispatch != EpDispatch::all_to_all) out << ", ep dispatch " << to_string(plan.ep_dispatch);
  for (const OverlapSwitch& s : kOverlapSwitches) {
    if (plan.*s.field) out << ", " << s.described;
  }
  if (!plan.stage_layers.empty()) out << ", layers per chunk " << stage_layers_text(plan.stage_layers);
  out << "\n";

  if (ex.memory) {
    const MemoryEstimate& mem = *ex.memory;
    const bool chosen = ex.deployment.rank >= 0 && ex.valid && ex.rank_stage != static_cast<std::int64_t>(mem.worst_stage);
    const StageMemory& shown = chosen ? mem.stages.at(static_cast<std::size_t>(ex.rank_stage)) : mem.worst();
    out << "device  " << (chosen ? "rank " + std::to_string(ex.deployment.rank) + ": " : std::string("worst: "))
        << "pipeline stage " << shown.stage << " of " << mem.stages.size() << " ("
        << count_of(static_cast<double>(shown.layers), "layer", "layers") << ", "
        << count_of(shown.in_flight_micro_batches, "micro-batch", "micro-batches") << " in flight), "
        << human_count(shown.parameters_on_device) << " parameters held\n\n";

    const double total = shown.memory.total_bytes();
    // Small models read better in MiB, tiny ones in KiB.
    const ByteUnit unit = unit_for(total);
    auto in_unit = [&](double bytes) { return format("%.2f", bytes / unit.bytes); };
    auto row = [&](const char* name, double bytes) {
      out << "  " << pad(name, 24) << lpad(in_unit(bytes), 10)
          << lpad(format("%.1f", total > 0 ? 100 * bytes / total : 0), 8) << "\n";
    };
    out << "  " << pad("memory per device", 24) << lpad(unit.name, 10) << lpad("%", 8) << "\n";
    row("parameters", shown.memory.parameters_bytes);
    row("gradients", shown.memory.gradients_bytes);
    row("optimizer state", shown.memory.optimizer_bytes);
    row("activations", shown.memory.activations_bytes);
    // The model's `dropout` field: its masks are worth a line once they are a visible share.
    if (shown.memory.dropout_mask_bytes >= 0.05 * total) row("  of which dropout masks", shown.memory.dropout_mask_bytes);
    row("communication buffers", shown.memory.buffers_bytes);
    // Peak transients: the loss backward's and a layer backward's do not
    // coexist, so the total counts the larger (memory_model.hpp).
    const MemoryBreakdown& m = shown.memory;
    const bool loss_peak = m.loss_transient_at_peak();
    auto transient = [&](const char* name, double bytes, bool counted) {
      if (counted) return row(name, bytes);
      out << "  " << pad(name, 24) << lpad(in_unit(bytes), 10) << lpad("-", 8) << "   (not at the peak; not in the total)\n";
    };
    if (m.loss_transient_bytes > 0) transient("loss logits + gradients", m.loss_transient_bytes, loss_peak);
    if (m.activation_gradient_bytes > 0) transient("activation gradients", m.activation_gradient_bytes, !loss_peak);
    if (m.workspace_bytes > 0) row("library workspaces", m.workspace_bytes);
    if (m.runtime_context_bytes > 0) row("CUDA context", m.runtime_context_bytes);
    if (m.allocator_reserve_bytes > 0) row("allocator reserve", m.allocator_reserve_bytes);
    out << "  " << pad("total", 24) << lpad(in_unit(total), 10) << "\n";
    out << "  " << pad("usable", 24) << lpad(in_unit(mem.usable_bytes), 10) << "   (" << gib(mem.capacity_bytes)
        << " GiB " << cluster.device.name << " less " << format("%g", plan.memory_headroom * 100)
        << "% headroom)\n";

    if (mem.stages.size() > 1) print_stage_table(out, mem);
    if (ex.time) print_time(out, model, cluster, *ex.time, ex.compute_parts_s);
    if (!ex.axis_links.empty()) print_axis_links(out, ex.axis_links, ex.expert_link, plan);
    if (ex.scaling && !ex.scaling->axes.empty()) print_scaling(out, *ex.scaling);
    out << "\n";
    const double worst_total = mem.worst().memory.total_bytes();
    if (!ex.valid) {
      out << "verdict: INVALID plan (see problems below)\n";
    } else if (ex.fits_memory()) {
      const double percent = 100 * worst_total / mem.usable_bytes;
      out << "verdict: fits: " << human_bytes(worst_total) << " of " << human_bytes(mem.usable_bytes) << " usable ("
          << format(percent < 1 ? "%.2g" : "%.0f", percent) << "%)\n";
    } else {
      out << "verdict: DOES NOT FIT: " << human_bytes(worst_total) << " needed, " << human_bytes(mem.usable_bytes)
          << " usable\n";
    }
  } else {
    out << "\nverdict: INVALID plan: the layers cannot be laid out (see problems below)\n";
  }

  // Errors, then warnings, each under its own heading (advice on speed is not a problem of a plan
  // that does not fit). Through describe(), which quotes control bytes.
  for (const Severity severity : {Severity::error, Severity::warning}) {
    bool header = false;
    for (const auto& p : ex.problems) {
      if (p.severity != severity) continue;
      if (!header) out << (severity == Severity::error ? "\nproblems:\n" : "\nwarnings:\n");
      header = true;
      out << "  - " << describe({Severity::error, flag_for_field(p.where), p.message}) << "\n";
    }
  }
}

std::string describe_plan_briefly(const Plan& plan) {
  return plan.mesh.to_string() + ", micro-batch " + std::to_string(plan.micro_batch) + " x " +
         std::to_string(plan.micro_batches()) + ", ZeRO-" + std::to_string(plan.zero_stage) + ", " +
         "recompute " + to_string(plan.recompute) + ", sp " + (plan.sequence_parallel ? "on" : "off") + ", " +
         to_string(plan.schedule) + (expert_split(plan).tokens > 1 ? ", experts out of tp" : "");
}

void print_what_would_fit(std::ostream& out, const ClusterSpec& cluster, const SearchSpace& space,
                          const WhatWouldFit& fit) {
  std::string axes;
  for (Axis a : space.axes) axes += (axes.empty() ? "" : ",") + to_string(a);
  const double usable = cluster.device.memory_bytes * (1 - space.memory_headroom);
  out << "\nwhat would fit (the search over axes " << axes << " with the plan flags given; global batch "
      << fit.global_batch << "):\n";
  auto plan_line = [&](const Candidate& c) {
    return describe_plan_briefly(c.plan) + "; " + gib(c.estimate.worst_memory.total_bytes()) + " GiB per device, step " +
           format("%.4g", c.estimate.time.step_s) + " s";
  };
  const BestPlans& here = fit.here;
  if (here.fastest) {
    out << "  at " << fit.world_size << " devices " << here.stats.feasible << " of " << here.stats.plans
        << " plans fit; the fastest: " << plan_line(*here.fastest) << "\n";
    return;
  }
  if (here.smallest_peak) {
    out << "  at " << fit.world_size << " devices no plan fits: the least memory any of the " << here.stats.evaluated
        << " evaluated needs is " << gib(here.smallest_peak->estimate.worst_memory.total_bytes()) << " GiB per device ("
        << describe_plan_briefly(here.smallest_peak->plan) << "); " << gib(usable) << " GiB usable\n";
  } else {
    out << "  at " << fit.world_size << " devices no plan the search tries is valid for this global batch\n";
  }
  if (!fit.more) return;
  const FitCount& more = *fit.more;
  if (more.world_size) {
    out << "  the fewest devices that fit: " << *more.world_size << " (" << more.below << " do not)";
    if (more.fastest) out << "; fastest there: " << plan_line(*more.fastest);
    out << "\n";
  } else {
    out << "  no device count up to " << more.limit << " fits (whole nodes, doubling; " << more.searches
        << " searches)\n";
  }
}

}  // namespace meshplan::cli
