#include "model/report_json.hpp"

#include <cmath>

#include "model/overlap_switches.hpp"

namespace meshplan {

nlohmann::ordered_json whole_count(double count) {
  constexpr double kInt64End = 9223372036854775808.0;  // 2^63
  if (std::abs(count) < kInt64End) return std::llround(count);
  return count;
}

nlohmann::ordered_json plan_to_json(const Plan& plan) {
  nlohmann::ordered_json mesh = nlohmann::ordered_json::object();
  for (const auto& axis : plan.mesh.axes) mesh[to_string(axis.axis)] = axis.size;
  nlohmann::ordered_json j;
  j["mesh"] = mesh;  // insertion order = axis order (outermost first)
  j["micro_batch"] = plan.micro_batch;
  j["micro_batches"] = plan.micro_batches();
  j["global_batch"] = plan.global_batch;
  j["seq_len"] = plan.seq_len;
  j["zero"] = plan.zero_stage;
  j["recompute"] = to_string(plan.recompute);
  if (plan.recompute_modules != kDefaultRecomputeModules) j["recompute_modules"] = recompute_modules_text(plan.recompute_modules);
  j["sequence_parallel"] = plan.sequence_parallel;
  j["attention"] = to_string(plan.attention);
  j["cp_comm"] = to_string(plan.cp_comm);
  if (plan.ep_dispatch != EpDispatch::all_to_all) j["ep_dispatch"] = to_string(plan.ep_dispatch);
  j["loss"] = to_string(plan.loss);
  j["schedule"] = to_string(plan.schedule);
  j["precision"] = to_string(plan.precision);
  j["fp32_gradients"] = plan.fp32_gradients;
  if (plan.bf16_moments) j["bf16_moments"] = true;
  if (plan.expert_tensor_parallel != 0) j["expert_tensor_parallel"] = plan.expert_tensor_parallel;
  if (!plan.stage_layers.empty()) j["stage_layers"] = plan.stage_layers;
  j["gradient_bucket_bytes"] = plan.gradient_bucket_bytes;
  j["memory_headroom"] = plan.memory_headroom;
  j["overlap_gradient_reduction"] = plan.overlap_gradient_reduction;
  j["overlap_parameter_gather"] = plan.overlap_parameter_gather;
  j["overlap_tensor_parallel"] = plan.overlap_tensor_parallel;
  for (const OverlapSwitch& s : kOverlapSwitches) {
    if (plan.*s.field) j[std::string(s.key)] = true;  // written only when set
  }
  return j;
}

nlohmann::ordered_json memory_to_json(const MemoryBreakdown& memory) {
  nlohmann::ordered_json j;
  j["parameters"] = memory.parameters_bytes;
  j["gradients"] = memory.gradients_bytes;
  j["optimizer"] = memory.optimizer_bytes;
  j["activations"] = memory.activations_bytes;
  j["buffers"] = memory.buffers_bytes;
  j["loss_transient"] = memory.loss_transient_bytes;
  j["activation_gradients"] = memory.activation_gradient_bytes;
  j["workspaces"] = memory.workspace_bytes;
  j["runtime_context"] = memory.runtime_context_bytes;
  j["allocator_reserve"] = memory.allocator_reserve_bytes;
  j["allocated_peak"] = memory.allocated_peak_bytes();  // what torch.cuda.max_memory_allocated() reports
  j["total"] = memory.total_bytes();
  return j;
}

void add_time_to_json(nlohmann::ordered_json& j, const TimeEstimate& time) {
  nlohmann::ordered_json t;
  t["compute"] = time.compute_s;
  t["communication"] = time.communication_s;
  t["communication_exposed"] = time.communication_exposed_s;
  t["communication_hidden"] = time.communication_s - time.communication_exposed_s;
  t["bubble"] = time.bubble_s;
  t["optimizer"] = time.optimizer_s;
  t["step"] = time.step_s;
  j["time_s"] = t;
  nlohmann::ordered_json axes = nlohmann::ordered_json::object();
  for (Axis axis : all_axes) {
    const auto i = static_cast<std::size_t>(axis);
    if (time.axis_communication_s[i] <= 0) continue;
    axes[to_string(axis)] = {{"total", time.axis_communication_s[i]}, {"exposed", time.axis_exposed_s[i]}};
  }
  j["communication_s_by_axis"] = axes;
  j["tokens_per_s"] = time.tokens_per_s;
  j["mfu"] = time.mfu;
  j["hfu"] = time.hfu;
  j["model_flops_per_step"] = time.model_flops_per_step;
  j["hardware_flops_per_step"] = time.hardware_flops_per_step;
}

namespace {

// explain's memory object: memory_to_json plus the dropout masks, which the
// memory model counts inside `activations` (informative; plan files leave
// them out, as they are not read back).
nlohmann::ordered_json explained_memory_to_json(const MemoryBreakdown& memory) {
  nlohmann::ordered_json j = memory_to_json(memory);
  j["dropout_masks"] = memory.dropout_mask_bytes;  // of activations: the 1-byte masks of the model's `dropout`
  return j;
}

}  // namespace

nlohmann::ordered_json explanation_to_json(const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan,
                                           const Explanation& ex) {
  nlohmann::ordered_json j;
  j["model"] = model.name;
  j["cluster"] = cluster.name;
  j["device_type"] = cluster.device.name;
  j["world_size"] = ex.deployment.world_size;
  j["parameters"] = whole_count(ex.parameter_count);
  j["feasible"] = ex.feasible();
  j["valid"] = ex.valid;
  j["fits_memory"] = ex.fits_memory();
  nlohmann::ordered_json problems = nlohmann::ordered_json::array();
  nlohmann::ordered_json warnings = nlohmann::ordered_json::array();
  for (const auto& p : ex.problems) {
    const std::string text = p.where.empty() ? p.message : p.where + ": " + p.message;
    (p.severity == Severity::error ? problems : warnings).push_back(text);
  }
  j["problems"] = problems;
  j["warnings"] = warnings;
  nlohmann::ordered_json plan_json = plan_to_json(plan);
  plan_json["seq_len"] = ex.seq_len;
  j["plan"] = plan_json;
  if (ex.memory) {
    const MemoryEstimate& mem = *ex.memory;
    const bool chosen_rank = ex.deployment.rank >= 0 && ex.valid;
    const StageMemory& shown = chosen_rank ? mem.stages.at(static_cast<std::size_t>(ex.rank_stage)) : mem.worst();
    nlohmann::ordered_json device;
    device["rank"] = chosen_rank ? ex.deployment.rank : -1;
    device["stage"] = shown.stage;
    device["worst"] = shown.stage == mem.worst().stage;
    j["device"] = device;
    j["memory_bytes"] = explained_memory_to_json(shown.memory);
    j["capacity_bytes"] = mem.capacity_bytes;
    j["usable_bytes"] = mem.usable_bytes;
    j["parameters_per_device"] = whole_count(shown.parameters_on_device);
    nlohmann::ordered_json stages = nlohmann::ordered_json::array();
    for (const auto& stage : mem.stages) {
      nlohmann::ordered_json s;
      s["stage"] = stage.stage;
      s["layers"] = stage.layers;
      s["in_flight_micro_batches"] = stage.in_flight_micro_batches;
      s["parameters_per_device"] = whole_count(stage.parameters_on_device);
      s["memory_bytes"] = explained_memory_to_json(stage.memory);
      stages.push_back(s);
    }
    j["stages"] = stages;
  } else {
    j["memory_bytes"] = nullptr;
  }
  if (ex.time) {
    add_time_to_json(j, *ex.time);
    nlohmann::ordered_json parts;  // compute split by kind (stage_cost.hpp, ComputePart); sums to time_s.compute
    for (std::size_t i = 0; i < kComputeParts; ++i) parts[to_string(static_cast<ComputePart>(i))] = ex.compute_parts_s[i];
    j["compute_s_by_kind"] = parts;
  }
  if (ex.valid) {  // which link each axis rides (axis_links.hpp)
    auto link_json = [](const AxisLink& l, const std::string& axis) {
      return nlohmann::ordered_json{{"axis", axis}, {"size", l.size}, {"stride", l.stride},
                                    {"members_per_node", l.members_per_node}, {"nodes_spanned", l.nodes_spanned},
                                    {"crosses_nodes", l.crosses_nodes}, {"link", l.link_kind},
                                    {"bandwidth_bytes_per_s", l.bandwidth_bytes_per_s},
                                    {"all_to_all_bandwidth_bytes_per_s", l.all_to_all_bandwidth_bytes_per_s},
                                    {"latency_s", l.latency_s}};
    };
    nlohmann::ordered_json links = nlohmann::ordered_json::array();
    for (const auto& l : ex.axis_links) links.push_back(link_json(l, to_string(l.axis)));
    j["axis_links"] = links;
    if (ex.expert_link) j["expert_link"] = link_json(*ex.expert_link, "ep x tp");
    if (ex.reordering) {
      nlohmann::ordered_json brought = nlohmann::ordered_json::array();
      nlohmann::ordered_json across = nlohmann::ordered_json::array();
      for (Axis axis : ex.reordering->brought_inside) brought.push_back(to_string(axis));
      for (Axis axis : ex.reordering->moved_across) across.push_back(to_string(axis));
      j["mesh_reordering"] = {{"mesh", ex.reordering->mesh.to_string()}, {"brings_inside", brought}, {"moves_across", across},
                              {"step_s", ex.reordering->step_s}, {"reordered_step_s", ex.reordering->reordered_step_s}};
    } else {
      j["mesh_reordering"] = nullptr;
    }
  }
  if (ex.scaling) {
    nlohmann::ordered_json scaling;
    nlohmann::ordered_json axes = nlohmann::ordered_json::array();
    for (const auto& d : ex.scaling->axes) {
      axes.push_back({{"axis", to_string(d.axis)}, {"size", d.size}, {"rule", d.rule}, {"value", d.value},
                      {"threshold", d.threshold}, {"bound", d.compute_bound ? "compute" : "communication"}});
    }
    scaling["axes"] = axes;
    if (ex.scaling->optimal_fsdp) scaling["optimal_fsdp"] = *ex.scaling->optimal_fsdp;
    if (ex.scaling->optimal_tp) scaling["optimal_tp"] = *ex.scaling->optimal_tp;
    if (ex.scaling->tokens_per_device) scaling["tokens_per_device"] = *ex.scaling->tokens_per_device;
    if (ex.scaling->compute_bound_tokens_per_device) {
      scaling["compute_bound_tokens_per_device"] = *ex.scaling->compute_bound_tokens_per_device;
    }
    j["scaling"] = scaling;
  }
  return j;
}

}  // namespace meshplan
