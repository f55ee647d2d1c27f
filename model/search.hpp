// The planner's search: every factorisation of the world size over the
// enabled mesh axes, crossed with micro-batch sizes, ZeRO stages, recompute
// modes, sequence parallelism, pipeline schedules and precisions; cheap
// structural checks first, then the fast evaluator, in parallel threads.
// Pipelined candidates get the balanced stage split (stage_partition.hpp)
// when it is uneven; where pp x v divides the layers the even split is
// evaluated too and the better kept (a faster bottleneck stage can still
// lose on memory, optimizer or gradient-reduction time).
// Output is deterministic: candidates are ranked by step time, then memory,
// then the plan's text, whatever the thread count.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "model/evaluate.hpp"
#include "model/overlap_switches.hpp"
#include "model/plan.hpp"

namespace meshplan {

// Why a candidate was turned down (the first rule it broke).
enum class Rejection : std::uint8_t {
  none,
  tp_heads,            // tp does not divide the attention (or key/value) heads
  tp_width,            // tp does not divide the feed-forward or MLP widths
  axis_unsupported,    // the model kind has no use for this axis
  pp_layers,           // more pp x v chunks than layers (other counts get an uneven split)
  interleave_micro_batches,  // interleaving needs micro-batches divisible by pp
  interleave_without_pipeline,  // interleaving needs pp > 1
  cp_sequence,         // cp (with sequence parallelism, cp x tp) does not divide the sequence
  ep_experts,          // ep does not divide the experts
  cp_heads,            // all-to-all context parallelism: cp does not divide the heads per tp rank
  batch,               // the global batch does not split into micro-batches
  out_of_memory,
};
inline constexpr int rejection_kinds = 12;
std::string to_string(Rejection rejection);  // "tp_heads"
// "exceed 76.0 GiB usable per device", "need tp dividing 96 attention heads", ...
std::string explain_rejection(Rejection rejection, const ModelSpec& model, double usable_bytes);

struct SearchSpace {
  std::vector<Axis> axes{Axis::dp, Axis::fsdp, Axis::tp, Axis::pp};  // cp and ep join when asked for
  std::int64_t max_tp = 0;      // 0: the cluster's devices per node
  std::int64_t max_pp = 0;      // 0: no limit beyond the layer count
  std::int64_t max_cp = 0;
  std::int64_t max_ep = 0;
  std::vector<std::int64_t> micro_batches;  // empty: 1, 2, 4, ... up to 64 (those not dividing the batch are rejected as "batch")
  std::vector<int> zero_stages{0, 1, 2, 3};  // ZeRO-3 on dp is skipped when fsdp is an axis (the same plans)
  std::vector<Recompute> recomputes{Recompute::none, Recompute::selective, Recompute::full};
  std::vector<bool> sequence_parallel{false, true};
  std::vector<Attention> attentions{Attention::fused};  // transformers only; others run no attention
  std::vector<ScheduleKind> schedules{ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved,
                                      ScheduleKind::zb_h1};
  std::vector<std::int64_t> interleave{2, 3, 4};
  std::vector<Precision> precisions{Precision::bf16};
  // Plan::expert_tensor_parallel values: 0 (experts over tp) and 1 (experts
  // whole, their tp ranks in ep), the latter only for a mixture of experts
  // with tp > 1, sequence parallelism and ep directly outside tp.
  std::vector<std::int64_t> expert_tensor_parallel{0, 1};
  CpComm cp_comm = CpComm::ring;  // every candidate's (not searched)
  bool fp32_gradients = false;    // every candidate's (not searched)
  bool bf16_moments = false;      // every candidate's (not searched)
  // The overlap switches every candidate gets where it applies
  // (model/overlap_switches.hpp); not searched.
  OverlapWanted overlaps;
  RecomputeModules recompute_modules = kDefaultRecomputeModules;  // what every `selective` candidate recomputes
  Loss loss = Loss::fused;        // every candidate's (not searched)
  EpDispatch ep_dispatch = EpDispatch::all_to_all;  // every candidate's (not searched)
  double memory_headroom = 0.05;
};

// Whether the search leaves out (recompute, attention) as the same plan as one
// it tries: recompute that repeats nothing (recompute_repeats_nothing, plan.hpp)
// when no recompute is searched too.
bool search_leaves_out(const SearchSpace& space, Recompute recompute, Attention attention);

struct Candidate {
  Plan plan;
  PlanEstimate estimate;          // time only when rejection is none or out_of_memory
  Rejection rejection = Rejection::none;
};

struct SearchStats {
  std::int64_t meshes = 0;
  std::int64_t plans = 0;          // candidates enumerated
  std::int64_t evaluated = 0;      // evaluator calls (two for a candidate whose even and balanced splits are both tried)
  std::int64_t feasible = 0;
  std::array<std::int64_t, rejection_kinds> rejected{};
  double wall_s = 0;
};

struct SearchResult {
  std::vector<Candidate> ranked;   // feasible, fastest first
  std::vector<std::size_t> pareto; // indices into ranked: no other plan is both faster and smaller
  SearchStats stats;
};

struct SearchOptions {
  int threads = 0;                 // 0: hardware concurrency
  // Called for every enumerated candidate (feasible or not), one mesh at a
  // time in a deterministic order, from the calling thread. For sweeps.
  std::function<void(const Candidate&)> on_candidate;
  // Called now and then from the calling thread: (plans enumerated so far, meshes done, meshes in all).
  std::function<void(std::int64_t, std::int64_t, std::int64_t)> on_progress;
  const std::atomic<bool>* cancel = nullptr;  // set to stop early; the result holds what was done
  bool keep_ranked = true;         // false: only stats (benchmarks, sweeps)
};

// The meshes the search enumerates: ordered factorisations of the world size
// over `space.axes`, outermost first in the order pp, dp, fsdp, ep, cp, tp
// (tp innermost, inside a node), within the space's size limits. Where the
// ep, cp and tp axes of a factorisation (two or more of them) do not lie
// inside one node (their product does not divide it), each order of those
// axes that places them differently follows the canonical one, so that the
// search, not a fixed order, picks which one crosses nodes.
std::vector<Mesh> enumerate_meshes(std::int64_t world_size, const SearchSpace& space, std::int64_t devices_per_node);

// Structural rules of validate_plan, as a fast first-failure check (pp x v
// must divide the layers unless the plan states stage_layers).
Rejection quick_check(const Evaluator& evaluator, const Plan& plan);

SearchResult search(const Evaluator& evaluator, std::int64_t global_batch, const SearchSpace& space,
                    const SearchOptions& options = {});

}  // namespace meshplan
