#include "model/memory_model.hpp"

#include <algorithm>

#include "model/model_states.hpp"
#include "model/stage_cost.hpp"

namespace meshplan {
namespace {

struct ParameterTotals {
  double dense = 0;   // on this device after tp/pp split, before data-parallel sharding
  double expert = 0;  // mixture-of-experts weights, after ep split
  double largest_block = 0;
  int blocks_with_parameters = 0;
};

ParameterTotals stage_parameters(const LayerGraph& graph, const std::vector<int>& blocks, const Plan& plan,
                                 bool holds_embedding) {
  ParameterTotals totals;
  const Mesh& mesh = plan.mesh;
  const double tp = static_cast<double>(mesh.size(Axis::tp));
  const ExpertSplit experts = expert_split(plan);
  const double kv_tp = static_cast<double>(kv_tp_split(graph.kv_heads, mesh.size(Axis::tp)));
  for (int b : blocks) {
    double block_total = 0;
    for (OpId id : graph.blocks[static_cast<std::size_t>(b)].ops) {
      const Op& op = graph.op(id);
      double local = op.tp_split_parameters / tp + op.kv_parameters / kv_tp + op.replicated_parameters;
      if (!holds_embedding) local += op.tied_parameters / tp;  // Megatron keeps a copy on the last stage
      if (op.expert) {  // routed experts have no key/value or tied weights
        local = (op.tp_split_parameters / static_cast<double>(experts.tp) + op.replicated_parameters) /
                static_cast<double>(experts.ep);
        totals.expert += local;
        block_total += local;
      } else {
        totals.dense += local;
        block_total += local;
      }
    }
    totals.largest_block = std::max(totals.largest_block, block_total);
    if (block_total > 0) ++totals.blocks_with_parameters;
  }
  return totals;
}

double block_input_bytes(const LayerGraph& graph, int block, const ActivationSharding& sharding);

double block_saved_bytes(const LayerGraph& graph, int block, const ActivationSharding& sharding) {
  double bytes = 0;
  for (OpId id : graph.blocks[static_cast<std::size_t>(block)].ops) bytes += saved_bytes_per_sample(graph.op(id), sharding);
  return bytes;
}

// Bytes per sample of a layer block under op-level checkpointing
// (Recompute::selective_op): its input and what its ops keep of their outputs.
double block_op_sac_bytes(const LayerGraph& graph, int block, const ActivationSharding& sharding) {
  double bytes = block_input_bytes(graph, block, sharding);
  for (OpId id : graph.blocks[static_cast<std::size_t>(block)].ops) bytes += op_sac_kept_bytes_per_sample(graph.op(id), sharding);
  return bytes;
}

// The part of block_saved_bytes that is 1-byte dropout masks.
double block_mask_bytes(const LayerGraph& graph, int block, const ActivationSharding& sharding) {
  double bytes = 0;
  for (OpId id : graph.blocks[static_cast<std::size_t>(block)].ops) {
    Op masks = graph.op(id);
    std::erase_if(masks.saved, [](const SavedTensor& t) { return t.fixed_bytes_per_element != 1; });
    bytes += saved_bytes_per_sample(masks, sharding);
  }
  return bytes;
}

// Bytes of a block's input tensor per sample (what full recompute keeps).
double block_input_bytes(const LayerGraph& graph, int block, const ActivationSharding& sharding) {
  return graph.boundary_elements_per_sample(block - 1) * sharding.activation_bytes_per_element /
         activation_split(sharding.tp, sharding.cp, sharding.sequence_parallel).sequence;
}

// Communication buffers of one stage (docs/cost-model.md, "Communication buffers").
double communication_buffers(const ModelSpec& model, const LayerGraph& graph, const Plan& plan, const ParameterTotals& params,
                             bool weights_sharded) {
  const Mesh& mesh = plan.mesh;
  const PrecisionBytes bytes = bytes_for(plan);
  const double micro_batch = static_cast<double>(plan.micro_batch);
  const double dp = static_cast<double>(mesh.size(Axis::dp)), ep = static_cast<double>(mesh.size(Axis::ep));
  const double tp = static_cast<double>(mesh.size(Axis::tp)), cp = static_cast<double>(mesh.size(Axis::cp));
  const double kv_tp = static_cast<double>(kv_tp_split(graph.kv_heads, mesh.size(Axis::tp)));
  const ActivationSplit split = activation_split(plan);
  double buffers = 0;
  if (weights_sharded) {
    // FSDP / ZeRO-3: gathered weights of the running and the prefetched block, and one block's unsharded gradients.
    const double gathered = params.blocks_with_parameters > 1 ? 2 : 1;  // the running block and the prefetched next one
    buffers += params.largest_block * (gathered * bytes.weight_bytes_per_parameter + bytes.gradient_bytes_per_parameter);
  }
  if (dp * ep > 1 && !zero_shards(plan.zero_stage, ModelState::parameters)) {
    // Gradient buckets in flight for all-reduce / reduce-scatter (two: one filling, one reducing).
    const double all_gradients = (params.dense + params.expert) * bytes.gradient_bytes_per_parameter;
    buffers += std::min(2 * plan.gradient_bucket_bytes, all_gradients);
  }
  const double boundary = graph.largest_stage_boundary_elements_per_sample();
  if (mesh.size(Axis::pp) > 1) {
    // Send and receive, activations forward and gradients backward.
    buffers += 4 * boundary * micro_batch * bytes.activation_bytes_per_element / split.sequence;
  }
  if (model.kind == ModelKind::transformer) {
    const auto& t = model.transformer;
    const double tokens = static_cast<double>(graph.seq_len) * micro_batch / cp;
    if (tp_reduce_scatters(plan.mesh.size(Axis::tp), plan.sequence_parallel)) {
      buffers += tokens * static_cast<double>(t.hidden) * bytes.activation_bytes_per_element;  // all-gathered layer input
    }
    if (cp > 1) {
      buffers += context_parallel_buffer_elements(plan.cp_comm, tokens, cp, static_cast<double>(t.query_width()) / tp,
                                                  t.key_value_mean_width() / kv_tp) *
                 bytes.activation_bytes_per_element;
    }
    const ExpertSplit experts = expert_split(plan);
    if (experts.ep > 1) {
      // All-to-all dispatch and combine of the routed tokens (this rank's share of them).
      buffers += expert_dispatch_buffer_elements(tokens / static_cast<double>(experts.dispatched), t.expert_slots_per_token(),
                                                 static_cast<double>(t.hidden)) *
                 bytes.activation_bytes_per_element;
    }
  }
  return buffers;
}

}  // namespace

namespace {

// Bytes per sample of `tensors` on one device; `drop_selective`: leave out those selective recompute
// of sharding.recompute_modules drops.
double tensor_bytes_per_sample(const std::vector<SavedTensor>& tensors, const ActivationSharding& sharding, bool drop_selective) {
  double bytes = 0;
  const ActivationSplit split = activation_split(sharding.tp, sharding.cp, sharding.sequence_parallel);
  const bool reduce_scatters = tp_reduce_scatters(sharding.tp, sharding.sequence_parallel);
  for (const SavedTensor& t : tensors) {
    if (!kept_by(t, sharding.attention)) continue;
    const RecomputeModule module = t.selective ? RecomputeModule::core_attn : t.module;
    if (drop_selective && (sharding.recompute_modules & module_bit(module)) != 0) continue;
    if (t.reduce_scatter && !reduce_scatters) continue;
    const bool fixed = t.fixed_bytes_per_element > 0 && !(t.loss_logits && sharding.loss == Loss::fused);
    const double per_element = fixed ? t.fixed_bytes_per_element : sharding.activation_bytes_per_element;
    const double divisor = t.key_value      ? static_cast<double>(sharding.cp * kv_tp_split(sharding.kv_heads, sharding.tp))
                           : t.partial_sums ? static_cast<double>(sharding.cp)
                                            : split.of(t.tensor_parallel);
    bytes += t.elements_per_sample * per_element / divisor;
  }
  return bytes;
}

}  // namespace

double saved_bytes_per_sample(const Op& op, const ActivationSharding& sharding) {
  return tensor_bytes_per_sample(op.saved, sharding, sharding.recompute == Recompute::selective);
}

double op_sac_kept_bytes_per_sample(const Op& op, const ActivationSharding& sharding) {
  return tensor_bytes_per_sample(op.op_sac_kept, sharding, false);
}

void add_peak_memory(MemoryBreakdown& memory, double loss_logits, double gradient_elements,
                     double activation_bytes_per_element, const DeviceSpec& device, Loss loss) {
  // The eager loss backward holds the output logits (activation dtype), the
  // fp32 gradient of the log-probabilities and the fp32 gradient of the
  // logits (PyTorch's log_softmax / nll_loss backward; the saved fp32 log-
  // probabilities are already an activation); the forward's fp32 upcast
  // (logits + upcast, 4 bytes) is smaller and freed by then. The fused loss
  // writes the logits' gradient in their own dtype beside the logits it kept
  // (an activation already); kernels that write it over the logits (Liger,
  // llm.c) hold less.
  constexpr double kFp32 = 4;
  memory.loss_transient_bytes =
      loss_logits * (loss == Loss::fused ? activation_bytes_per_element : activation_bytes_per_element + 2 * kFp32);
  memory.activation_gradient_bytes = gradient_elements * activation_bytes_per_element;
  memory.workspace_bytes = device.workspace_bytes;
  memory.runtime_context_bytes = device.context_bytes;
  memory.allocator_reserve_bytes = device.allocator_reserve_fraction * memory.allocated_peak_bytes();
}

double embedding_in_flight_micro_batches(const Schedule& schedule, std::int64_t pp, std::int64_t micro_batches) {
  const auto m = static_cast<double>(std::max<std::int64_t>(micro_batches, 1));
  if (pp <= 1) return 1;
  const auto p = static_cast<double>(pp);
  switch (schedule.kind) {
    case ScheduleKind::gpipe: return m;
    case ScheduleKind::interleaved: return std::min(2 * p, m);
    case ScheduleKind::one_f_one_b:
    case ScheduleKind::zb_h1: return std::min(p, m);
  }
  return m;
}

double head_in_flight_micro_batches(const Schedule& schedule, std::int64_t pp, std::int64_t micro_batches) {
  return pp > 1 && schedule.kind == ScheduleKind::gpipe ? static_cast<double>(std::max<std::int64_t>(micro_batches, 1)) : 1;
}

double in_flight_chunk_micro_batches(const Schedule& schedule, std::int64_t pp, std::int64_t stage,
                                     std::int64_t micro_batches) {
  const auto m = static_cast<double>(std::max<std::int64_t>(micro_batches, 1));
  if (pp <= 1) return 1;
  const auto p = static_cast<double>(pp);
  const auto r = static_cast<double>(stage);
  switch (schedule.kind) {
    case ScheduleKind::gpipe: return m;
    case ScheduleKind::one_f_one_b: return std::min(p - r, m);
    // ZB-H1 defers weight gradients, so every stage keeps p micro-batches'
    // inputs until their W pass: 1F1B's first-stage peak on every stage
    // (Qi et al. 2023, Sec. 3; checked against model/schedule.cpp).
    case ScheduleKind::zb_h1: return std::min(p, m);
    case ScheduleKind::interleaved: {
      const auto v = static_cast<double>(schedule.virtual_stages);
      return std::min(2 * (p - r - 1) + (v - 1) * p + 1, m * v);
    }
  }
  return m;
}

MemoryEstimate estimate_memory(const ModelSpec& model, const LayerGraph& graph, const StagePartition& partition,
                               const Plan& plan, const ClusterSpec& cluster) {
  MemoryEstimate estimate;
  const Mesh& mesh = plan.mesh;
  const PrecisionBytes bytes = bytes_for(plan);
  const std::int64_t pp = partition.stages;
  const std::int64_t m = plan.micro_batches();
  const double micro_batch = static_cast<double>(plan.micro_batch);
  const double dp = static_cast<double>(mesh.size(Axis::dp));
  const double fsdp = static_cast<double>(mesh.size(Axis::fsdp));
  const double ep = static_cast<double>(mesh.size(Axis::ep));
  const ActivationSharding sharding{mesh.size(Axis::tp), mesh.size(Axis::cp), plan.sequence_parallel,
                                    plan.recompute, bytes.activation_bytes_per_element, plan.attention, graph.kv_heads,
                                    plan.loss, plan.recompute_modules};
  const ActivationSplit split = activation_split(plan);

  // ZeRO (Rajbhandari et al. 2020, Sec. 5): stage 1 shards optimizer state,
  // 2 also gradients, 3 also parameters, over the dp group; fsdp is stage 3
  // over its own axis. Dense weights are replicated over dp x ep, experts over dp.
  auto dense_group = [&](ModelState state) { return sharding_group(fsdp, dp, ep, plan.zero_stage, state, false); };
  auto expert_group = [&](ModelState state) { return sharding_group(fsdp, dp, ep, plan.zero_stage, state, true); };

  for (std::int64_t stage = 0; stage < pp; ++stage) {
    StageMemory sm;
    sm.stage = stage;
    sm.layers = partition.layers_on_stage(stage);
    const std::vector<int> blocks = partition.blocks_on_stage(graph, stage);
    const ParameterTotals params = stage_parameters(graph, blocks, plan, stage == 0);

    MemoryBreakdown& mem = sm.memory;
    sm.parameters_on_device = params.dense / dense_group(ModelState::parameters) + params.expert / expert_group(ModelState::parameters);
    mem.parameters_bytes = sm.parameters_on_device * bytes.weight_bytes_per_parameter;
    mem.gradients_bytes =
        (params.dense / dense_group(ModelState::gradients) + params.expert / expert_group(ModelState::gradients)) * bytes.gradient_bytes_per_parameter;
    mem.optimizer_bytes =
        (params.dense / dense_group(ModelState::optimizer) + params.expert / expert_group(ModelState::optimizer)) * bytes.optimizer_bytes_per_parameter;

    // Activations of the layer chunks: per chunk-micro-batch bytes x how many are in flight.
    const double in_flight = in_flight_chunk_micro_batches(plan.schedule, pp, stage, m);
    double chunk_bytes_sum = 0, chunk_mask_sum = 0;
    double largest_layer_bytes = 0, largest_layer_masks = 0;
    std::int64_t chunks_here = 0;
    for (std::int64_t c = stage; c < partition.chunk_count(); c += pp, ++chunks_here) {
      for (int b : partition.chunk_blocks[static_cast<std::size_t>(c)]) {
        const double full = block_saved_bytes(graph, b, sharding);
        const double masks = block_mask_bytes(graph, b, sharding);
        if (full > largest_layer_bytes) largest_layer_masks = masks;
        largest_layer_bytes = std::max(largest_layer_bytes, full);
        chunk_bytes_sum += plan.recompute == Recompute::full           ? block_input_bytes(graph, b, sharding)
                           : plan.recompute == Recompute::selective_op ? block_op_sac_bytes(graph, b, sharding)
                                                                       : full;
        if (!recomputes_layer_forward(plan.recompute)) chunk_mask_sum += masks;
      }
    }
    const double mean_chunk_bytes = chunks_here > 0 ? chunk_bytes_sum / static_cast<double>(chunks_here) : 0;
    double activations_per_sample = mean_chunk_bytes * in_flight;
    double masks_per_sample = (chunks_here > 0 ? chunk_mask_sum / static_cast<double>(chunks_here) : 0) * in_flight;
    // Full and op-level recompute rebuild one layer's activations at a time during the backward pass.
    if (recomputes_layer_forward(plan.recompute)) masks_per_sample += largest_layer_masks;
    if (recomputes_layer_forward(plan.recompute)) activations_per_sample += largest_layer_bytes;
    sm.in_flight_micro_batches = in_flight / static_cast<double>(partition.chunks_per_stage);

    // Embedding (stage 0) and head (last stage) are never recomputed.
    const double embedding_in_flight = embedding_in_flight_micro_batches(plan.schedule, pp, m);
    const double head_in_flight = head_in_flight_micro_batches(plan.schedule, pp, m);
    for (int b : blocks) {
      const auto kind = graph.blocks[static_cast<std::size_t>(b)].kind;
      if (kind == BlockKind::embedding) {
        activations_per_sample += embedding_in_flight * block_saved_bytes(graph, b, sharding);
        masks_per_sample += embedding_in_flight * block_mask_bytes(graph, b, sharding);
      }
      if (kind == BlockKind::head) {
        activations_per_sample += head_in_flight * block_saved_bytes(graph, b, sharding);
        masks_per_sample += head_in_flight * block_mask_bytes(graph, b, sharding);
      }
    }
    mem.activations_bytes = activations_per_sample * micro_batch;
    mem.dropout_mask_bytes = masks_per_sample * micro_batch;

    // Communication buffers (docs/cost-model.md, "Communication buffers").
    const bool weights_sharded = dense_group(ModelState::parameters) > 1 || expert_group(ModelState::parameters) > 1;
    mem.buffers_bytes = communication_buffers(model, graph, plan, params, weights_sharded);

    // Peak transients (docs/cost-model.md, "Peak memory").
    const double boundary = graph.largest_stage_boundary_elements_per_sample();
    double loss_logits = 0, widest_output = 0;
    bool has_layers = false;
    for (int b : blocks) {
      const Block& block = graph.blocks[static_cast<std::size_t>(b)];
      has_layers = has_layers || block.kind == BlockKind::layer;
      for (OpId id : block.ops) {
        const Op& op = graph.op(id);
        if (op.kind == OpKind::cross_entropy) {  // the logits it saves are the logits it reads
          for (const SavedTensor& t : op.saved) loss_logits += t.elements_per_sample / split.of(t.tensor_parallel);
        }
        if (block.kind != BlockKind::layer || (plan.attention == Attention::fused && op.core_attention)) continue;
        widest_output = std::max(widest_output, op.output_elements_per_sample / split.of(output_split_by_tp(op)));
      }
    }
    const double gradient_elements = has_layers ? boundary / split.sequence + widest_output : 0.0;
    add_peak_memory(mem, loss_logits * micro_batch, gradient_elements * micro_batch, bytes.activation_bytes_per_element,
                    cluster.device, plan.loss);
    estimate.stages.push_back(sm);
  }

  for (std::size_t i = 1; i < estimate.stages.size(); ++i) {
    if (estimate.stages[i].memory.total_bytes() > estimate.stages[estimate.worst_stage].memory.total_bytes()) {
      estimate.worst_stage = i;
    }
  }
  estimate.capacity_bytes = cluster.device.memory_bytes;
  estimate.usable_bytes = cluster.device.memory_bytes * (1.0 - plan.memory_headroom);
  return estimate;
}

}  // namespace meshplan
