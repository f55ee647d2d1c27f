// Per-device memory of a plan: parameters, gradients, optimizer state,
// activations and communication buffers, for every pipeline stage (devices
// of one stage hold the same amounts), and what makes the step's peak higher
// than their sum: the loss's and the backward's transients, the stack's
// workspaces, its context and its allocator's reserve. Formulas and sources:
// docs/cost-model.md, "Memory" and "Peak memory".
#pragma once

#include <cstdint>
#include <vector>

#include "model/cluster_spec.hpp"
#include "model/layer_graph.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"
#include "model/stage_partition.hpp"

namespace meshplan {

struct MemoryBreakdown {
  double parameters_bytes = 0;
  double gradients_bytes = 0;
  double optimizer_bytes = 0;
  double activations_bytes = 0;
  double buffers_bytes = 0;
  // Of activations_bytes, the 1-byte dropout masks (the model's `dropout` > 0).
  // Informative: set by estimate_memory (explain), 0 from the fast evaluator.
  double dropout_mask_bytes = 0;
  // Transients of the step's peak. The loss's (on the last pipeline stage)
  // and a layer backward's do not coexist: the peak takes the larger.
  double loss_transient_bytes = 0;        // output logits + the loss's fp32 gradients, at the loss backward
  double activation_gradient_bytes = 0;   // residual-stream gradient + the widest op's output gradient
  double workspace_bytes = 0;             // cuBLAS(Lt) / cuDNN workspaces
  // Outside what the framework allocates: nvidia-smi sees it, max_memory_allocated() does not.
  double runtime_context_bytes = 0;       // CUDA context and loaded modules
  double allocator_reserve_bytes = 0;     // caching allocator: reserved beyond the allocated peak

  // The sum of the steady states (what the model kept before peaks were modelled).
  double steady_bytes() const {
    return parameters_bytes + gradients_bytes + optimizer_bytes + activations_bytes + buffers_bytes;
  }
  // Which of the two transients the peak takes (the loss's on a tie: the same bytes either way).
  bool loss_transient_at_peak() const { return loss_transient_bytes >= activation_gradient_bytes; }
  double transient_bytes() const {
    return (loss_transient_at_peak() ? loss_transient_bytes : activation_gradient_bytes) + workspace_bytes;
  }
  // What the framework's allocator hands out at the peak (torch.cuda.max_memory_allocated()).
  double allocated_peak_bytes() const { return steady_bytes() + transient_bytes(); }
  // The device memory the process holds at the peak: what must fit.
  double total_bytes() const { return allocated_peak_bytes() + runtime_context_bytes + allocator_reserve_bytes; }
};

// Fills the peak rows of `memory` (its steady rows already set) from
// `loss_logits` (logits the loss of this device's micro-batch reads: 0 off
// the last stage) and `gradient_elements` (activation-gradient elements in
// flight), with the device's stack figures (DeviceSpec `runtime:`), the
// loss's transient by how the plan runs it (plan.hpp, Loss).
void add_peak_memory(MemoryBreakdown& memory, double loss_logits, double gradient_elements,
                     double activation_bytes_per_element, const DeviceSpec& device, Loss loss);

struct StageMemory {
  std::int64_t stage = 0;
  std::int64_t layers = 0;
  double parameters_on_device = 0;         // count, after tp/pp/ep and ZeRO-3/fsdp sharding
  double in_flight_micro_batches = 0;      // whole-stage equivalents held at the peak
  MemoryBreakdown memory;
  // Not memory: the stage's ZeRO-1/2 gather of the updated weights on the
  // step's critical path (all of it, or with overlap_zero_gather what the
  // next step's first forward leaves exposed), which the evaluator adds to the
  // step and the simulator replays (evaluate.cpp, after_pipeline).
  double gather_after_step_exposed_s = 0;
};

struct MemoryEstimate {
  std::vector<StageMemory> stages;  // one per pipeline stage
  std::size_t worst_stage = 0;      // largest total
  double capacity_bytes = 0;
  double usable_bytes = 0;          // capacity less the plan's headroom
  bool fits() const { return stages.at(worst_stage).memory.total_bytes() <= usable_bytes; }
  const StageMemory& worst() const { return stages.at(worst_stage); }
};

// How activations are split on one device.
struct ActivationSharding {
  std::int64_t tp = 1;
  std::int64_t cp = 1;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::none;
  double activation_bytes_per_element = 2;
  Attention attention = Attention::unfused;
  std::int64_t kv_heads = 0;  // keys and values split over cp x kv_tp_split(kv_heads, tp)
  Loss loss = Loss::eager;    // the bytes of the loss's logits (SavedTensor::loss_logits)
  RecomputeModules recompute_modules = kDefaultRecomputeModules;  // what `selective` drops (Plan::recompute_modules)
};

// Bytes `op` keeps for the backward pass, per sample, on one device
// (Korthikanti et al. 2022, Table 2, generalised to any op list; under fused
// attention without the s x s tensors, with the softmax statistics).
// Full recompute is applied per layer, not here: this honours only "selective".
double saved_bytes_per_sample(const Op& op, const ActivationSharding& sharding);
// Elements one device buffers for context parallelism's exchange of keys and
// values (plan.hpp, CpComm), `tokens` being its chunk of the sequence and the
// widths its share after tp: ring, the next key/value chunk arriving while
// this one is used; all-gather, every chunk's keys and values and, in the
// backward, their gradients; all-to-all, q, k, v and the output in head groups.
inline double context_parallel_buffer_elements(CpComm comm, double tokens, double cp, double q_width, double kv_width) {
  switch (comm) {
    case CpComm::ring: return 2 * 2 * tokens * kv_width;
    case CpComm::all_gather: return 2 * 2 * cp * tokens * kv_width;
    case CpComm::all_to_all: return tokens * (2 * q_width + 2 * kv_width);
  }
  return 0;
}

// Elements one device buffers for expert parallelism's all-to-all dispatch and
// combine: each of its `tokens` in `copies` copies (TransformerDims::expert_slots_per_token)
// of `hidden` elements, sent and received.
inline double expert_dispatch_buffer_elements(double tokens, double copies, double hidden) {
  return 2 * tokens * copies * hidden;
}

// Bytes per sample on one device of what `op` keeps under op-level
// checkpointing (Recompute::selective_op; Op::op_sac_kept), in a layer block.
double op_sac_kept_bytes_per_sample(const Op& op, const ActivationSharding& sharding);

// Peak number of (chunk, micro-batch) activation sets a pipeline stage holds:
// GPipe m; 1F1B min(p - r, m); ZB-H1 min(p, m) on every stage; interleaved
// min(2 (p - r - 1) + (v - 1) p + 1, m v) chunk-micro-batches (Megatron-LM's
// warm-up count + 1). 1 when pp = 1 (gradient accumulation runs each
// micro-batch's backward before the next forward).
double in_flight_chunk_micro_batches(const Schedule& schedule, std::int64_t pp, std::int64_t stage,
                                     std::int64_t micro_batches);
// Micro-batches of the embedding's activations stage 0 holds at once (its
// chunk 0 only): GPipe m, 1F1B and ZB-H1 min(p, m), interleaved min(2p, m)
// (the warm-up runs chunk 0 of two rounds of p micro-batches before chunk
// 0's first backward); 1 when pp = 1. And of the head's on the last stage:
// GPipe m, else 1 (its backward follows its forward). Equal to counting
// chunk 0 and chunk p v - 1 in pipeline_schedule's lists (tests/test_schedule.cpp).
double embedding_in_flight_micro_batches(const Schedule& schedule, std::int64_t pp, std::int64_t micro_batches);
double head_in_flight_micro_batches(const Schedule& schedule, std::int64_t pp, std::int64_t micro_batches);

MemoryEstimate estimate_memory(const ModelSpec& model, const LayerGraph& graph, const StagePartition& partition,
                               const Plan& plan, const ClusterSpec& cluster);

}  // namespace meshplan
