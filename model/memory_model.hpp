// Per-device memory of a plan: parameters, gradients, optimizer state,
// activations and communication buffers, for every pipeline stage (devices
// of one stage hold the same amounts). Formulas and sources: docs/cost-model.md.
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
  double total_bytes() const {
    return parameters_bytes + gradients_bytes + optimizer_bytes + activations_bytes + buffers_bytes;
  }
};

struct StageMemory {
  std::int64_t stage = 0;
  std::int64_t layers = 0;
  double parameters_on_device = 0;         // count, after tp/pp/ep and ZeRO-3/fsdp sharding
  double in_flight_micro_batches = 0;      // whole-stage equivalents held at the peak
  MemoryBreakdown memory;
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
};

// Bytes `op` keeps for the backward pass, per sample, on one device
// (Korthikanti et al. 2022, Table 2, generalised to any op list).
// Full recompute is applied per layer, not here: this honours only "selective".
double saved_bytes_per_sample(const Op& op, const ActivationSharding& sharding);

// Peak number of (chunk, micro-batch) activation sets a pipeline stage holds:
// GPipe m; 1F1B min(p - r, m); ZB-H1 min(p, m) on every stage; interleaved
// min(2 (p - r - 1) + (v - 1) p + 1, m v) chunk-micro-batches (Megatron-LM's
// warm-up count + 1). 1 when pp = 1 (gradient accumulation runs each
// micro-batch's backward before the next forward).
double in_flight_chunk_micro_batches(const Schedule& schedule, std::int64_t pp, std::int64_t stage,
                                     std::int64_t micro_batches);

MemoryEstimate estimate_memory(const ModelSpec& model, const LayerGraph& graph, const StagePartition& partition,
                               const Plan& plan, const ClusterSpec& cluster);

}  // namespace meshplan
