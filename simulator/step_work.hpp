// What one training step asks of each pipeline stage, in the simulator's
// terms: compute seconds per chunk and pass, the collectives and transfers
// that go with them as bytes over links, activation bytes, and the links
// themselves. Built from the cost model (Evaluator::block_costs, the stage
// partition, place_axes and collectives.hpp), never re-estimated here, so
// that with no contention the simulator replays exactly the durations the
// analytical model sums (docs/simulator.md, "Where the durations come from").
//
// Symmetry: every data-parallel, tensor-parallel, context- and expert-parallel
// replica of a pipeline stage runs the same instruction list with the same
// durations, so one representative device per stage is simulated: the rank
// whose mesh coordinates are all 0 except pp. Its links carry its own
// traffic; a node's NICs carry the traffic of all the replicas on that node,
// which the representative's flows stand for with a weight (their count).
//
// Defines: SimulationOptions, SimLink, LinkShare, CommWork, SegmentWork,
// GradientBucket, ChunkWork, StageWork, StepWork, build_step_work,
// uniform_step_work.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "model/collectives.hpp"
#include "model/evaluate.hpp"
#include "model/mesh.hpp"
#include "model/plan.hpp"
#include "model/problem.hpp"

namespace meshplan::sim {

struct SimulationOptions {
  bool zero_communication = false;  // every collective and transfer takes no time
  bool contention = true;           // transfers that share a link share its bandwidth
};

// A link of the topology as the representatives see it: a device's link to
// its node switch (one per direction), or a node's NICs taken together (one
// pool per direction). Bandwidths per direction, already x achievable_fraction.
struct SimLink {
  std::string name;
  double bandwidth_bytes_per_s = 0;
};

// A flow's use of a link: `weight` replicas move the same bytes at the same
// time (e.g. the 8 tp ranks of a stage each sending their shard through the
// node's NICs), so the flow takes `weight` shares of the link.
struct LinkShare {
  std::int32_t link = -1;
  double weight = 1;
};

// One collective (or a sum of same-group collectives run back to back) or one
// point-to-point transfer, in the alpha-beta form of collectives.hpp:
// uncontended time = latency_s + bus_bytes / bandwidth_bytes_per_s.
struct CommWork {
  Axis axis = Axis::tp;
  double bytes = 0;       // nccl-tests' S, summed: for the trace
  double bus_bytes = 0;   // bytes each replica moves over each link of its path: S x F_bus(n) / efficiency
  double latency_s = 0;   // steps x alpha; not slowed by sharing
  double bandwidth_bytes_per_s = std::numeric_limits<double>::infinity();  // the axis bandwidth of place_axes: the most it gets
  std::array<LinkShare, 4> links{};
  std::int32_t link_count = 0;

  bool empty() const { return !(bus_bytes > 0) && !(latency_s > 0); }
  double uncontended_s() const { return latency_s + (bus_bytes > 0 ? bus_bytes / bandwidth_bytes_per_s : 0.0); }
};

// Blocks that run back to back on one device: a whole chunk, or (when weights
// are sharded, fsdp / ZeRO-3) one block, so each block's weights can be
// gathered just before it runs.
struct SegmentWork {
  double forward_s = 0;            // compute only
  double backward_s = 0;           // input + weight gradients, incl. recomputation
  double weight_gradient_s = 0;    // the W part of backward_s (zero-bubble schedules)
  // overlap_tensor_parallel: the seconds of backward tp collectives that the
  // cost record hides under its blocks' W GEMMs, block by block
  // (BlockCost::tp_backward_total_s - tp_backward_s); the collectives start
  // this long before the backward's compute ends.
  double tp_hidden_s = 0;
  std::vector<CommWork> forward_comm;   // collectives inside the blocks that the next block waits for (tp, cp, ep)
  std::vector<CommWork> backward_comm;
  // overlap_expert_parallel: what replaces the ep entry of forward_comm /
  // backward_comm in a pass that runs beside another micro-batch's
  // (model/schedule.hpp, PassPairing): the part of its all-to-alls that the
  // partner's compute leaves exposed (the hidden part is not replayed, as
  // ring attention's is not). Empty: fully hidden, or no overlap.
  CommWork forward_paired_ep;
  CommWork backward_paired_ep;
  CommWork parameter_gather;            // fsdp / ZeRO-3: before the forward and again before the backward
  CommWork gradient_reduce_scatter;     // fsdp / ZeRO-3: after each gradient pass
  double gradient_bytes = 0;            // weight gradients produced per pass, per device (before dp reduction)
};

// Ready when the chunk's last gradient pass has produced `produced_bytes` of
// the chunk's gradients (counted before any fsdp reduce-scatter, as
// SegmentWork::gradient_bytes); then 1/fsdp of a bucket is reduced over dp x ep.
struct GradientBucket {
  double produced_bytes = 0;
  CommWork reduce;
};

struct ChunkWork {
  std::int64_t chunk = 0;                 // global chunk index
  std::vector<SegmentWork> segments;      // in forward order
  double activation_bytes = 0;            // held from its forward to its backward, per micro-batch
  double recompute_bytes = 0;             // full recompute: one layer rebuilt during each backward
  std::vector<GradientBucket> buckets;    // data-parallel reduction of this chunk's gradients
};

struct StageWork {
  std::int64_t stage = 0;
  std::int64_t representative_rank = 0;
  std::int64_t node = 0;
  std::vector<ChunkWork> chunks;          // local chunk j is global chunk j p + stage
  CommWork send_activation;               // to stage (r + 1) mod p, per micro-batch and chunk
  CommWork send_gradient;                 // to stage (r - 1) mod p
  CommWork receive_gather;                // Megatron's scatter/gather: all-gather over tp after each receive
  double optimizer_s = 0;
  CommWork parameter_gather_after_step;   // ZeRO-1/2: updated weights all-gathered over dp
  double model_state_bytes = 0;           // parameters, gradients, optimizer state, buffers (memory model)
};

struct StepWork {
  Schedule schedule;
  std::int64_t stages = 1;
  std::int64_t micro_batches = 1;
  bool overlap_tensor_parallel = false;     // backward tp collectives run under the W part of a backward
  bool overlap_expert_parallel = false;     // paired passes run SegmentWork's *_paired_ep instead of their ep collectives
  bool overlap_gradient_reduction = true;   // dp buckets start during the last gradient pass
  bool overlap_parameter_gather = true;     // fsdp gathers run one segment ahead (prefetch)
  std::vector<SimLink> links;
  std::vector<StageWork> stage_work;        // one per pipeline stage
};

// The plan must pass validate_plan for the evaluator's model and cluster, and
// the evaluator's world size must be the mesh's. Problems name plan fields.
Loaded<StepWork> build_step_work(const Evaluator& evaluator, const Plan& plan, const SimulationOptions& options);

// A synthetic pipeline for tests and examples: p identical stages of one
// chunk (v for interleaved, each 1/v of the stage), no communication, no
// optimizer. Seconds are per micro-batch per stage; weight_gradient_s is the
// W part of backward_s.
StepWork uniform_step_work(const Schedule& schedule, std::int64_t stages, std::int64_t micro_batches, double forward_s,
                           double backward_s, double weight_gradient_s);

}  // namespace meshplan::sim
