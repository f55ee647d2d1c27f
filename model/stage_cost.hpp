// The one place that says how a plan splits a model's work over one device,
// and the record of what one block costs there. Every reader of the cost
// model (the evaluator's stage sums, the simulator's step work, the studio's
// roofline, the graph-walking memory reference) takes its local shapes,
// splits and communication volumes from here instead of restating them
// (docs/architecture.md, "One cost record"; docs/cost-model.md).
//
// - activation_split: a tensor outside Megatron's tp regions is split by cp,
//   and by tp too under sequence parallelism; inside a tp region by cp x tp
//   (Korthikanti et al. 2022, Sec. 4.2.2).
// - local_gemm: a GEMM's shape on one device: rows = rows per sample x
//   micro-batch / cp; tp divides n (column-parallel), k (row-parallel) or the
//   heads (Shoeybi et al. 2019, Sec. 3).
// - BlockCost: per block kind, per micro-batch, on one device: parameters,
//   activation bytes by category, every GEMM's local shape and seconds, the
//   memory-bound passes by op class, and every collective with its axis,
//   kind, bytes and what it may hide under. Cached by the search per
//   (micro-batch, tp, cp, ep, sp, recompute, precision, attention); the
//   evaluator's per-stage fold reads only its scalar totals.
// - gemm_in_fp8, fp8_cast_bytes: which GEMMs an fp8 plan runs in fp8 and
//   what their casts move (docs/cost-model.md, "FP8 GEMMs").
// - pipeline_transfer: what crosses a stage boundary per micro-batch.
// - expert_mesh: the mesh the routed experts' collectives run over (ep and tp
//   folded into one ep axis when the experts leave tp, expert_split).
//
// Defines: ActivationSplit, activation_split, LocalGemm, local_gemm,
// memory_pass_bytes, gemm_in_fp8, Fp8CastBytes, fp8_cast_bytes, Pass,
// HiddenUnder, BlockCollective, GemmCost, BlockCost, PipelineTransfer,
// pipeline_transfer, gradient_reduction, GradientBuckets, gradient_buckets,
// bucket_reduction_end_s, optimizer_traffic_bytes.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "model/collectives.hpp"
#include "model/device_spec.hpp"
#include "model/layer_graph.hpp"
#include "model/mesh.hpp"
#include "model/model_states.hpp"
#include "model/plan.hpp"
#include "model/precision.hpp"
#include "model/profile.hpp"

namespace meshplan {

// Divisors of an activation tensor's size on one device.
struct ActivationSplit {
  double sequence = 1;         // outside tp regions: cp, x tp under sequence parallelism
  double tensor_parallel = 1;  // inside a tp region (and any tensor tp splits): cp x tp
  double of(bool in_tensor_parallel_region) const { return in_tensor_parallel_region ? tensor_parallel : sequence; }
};
ActivationSplit activation_split(std::int64_t tp, std::int64_t cp, bool sequence_parallel);
// Whether the tp reductions are reduce-scatters (and the layer inputs
// all-gathered): sequence parallelism over more than one tp rank.
inline bool tp_reduce_scatters(std::int64_t tp, bool sequence_parallel) { return sequence_parallel && tp > 1; }
inline ActivationSplit activation_split(const Plan& plan) {
  return activation_split(plan.mesh.size(Axis::tp), plan.mesh.size(Axis::cp), plan.sequence_parallel);
}

// A GEMM's shape on one device for one micro-batch: batch x (rows x k) . (k x n).
struct LocalGemm {
  double rows = 0, n = 0, k = 0, batch = 1;
  double forward_flops() const { return 2 * rows * n * k * batch; }
  double operand_elements() const { return (rows * k + k * n + rows * n) * batch; }
};
// kv_n of the n columns are key/value heads (a column-parallel QKV GEMM):
// they split over kv_tp_split(kv_heads, tp) instead of tp. A routed expert's
// GEMM (`expert`: batch E, one GEMM an expert) splits over
// expert_split(plan).tp, its experts over expert_split(plan).ep, and each
// expert's rows come from all ep ranks' expert_split(plan).tokens shares.
LocalGemm local_gemm(double rows_per_sample, double n, double k, double batch, TpSplit split, const Plan& plan,
                     double kv_n = 0, std::int64_t kv_heads = 0, bool expert = false);
inline LocalGemm local_gemm(const GemmWork& g, const Plan& plan, std::int64_t kv_heads) {
  return local_gemm(g.rows_per_sample, g.n, g.k, g.batch, g.tp_split, plan, g.kv_n, kv_heads, g.expert);
}
inline LocalGemm local_gemm(const Op& op, const Plan& plan, std::int64_t kv_heads) {
  return local_gemm(op.gemm.rows_per_sample, static_cast<double>(op.gemm.n), static_cast<double>(op.gemm.k),
                    static_cast<double>(op.gemm.batch), op.tp_split, plan, static_cast<double>(op.gemm.kv_n), kv_heads,
                    op.expert);
}

// A memory-bound pass's bytes on one device for a micro-batch of `b`: its
// `elements` per sample at `act` bytes and its fixed-width bytes, over the
// split of its region (`tensor_parallel`: inside Megatron's f/g region).
inline double memory_pass_bytes(double elements, double fixed_bytes, double act, double b, const ActivationSplit& split,
                                bool tensor_parallel) {
  return (elements * act + fixed_bytes) * b / split.of(tensor_parallel);
}

// FP8 training as Transformer Engine (Megatron-Core's --fp8-format) and
// torchao's Float8Linear (torchtitan's float8 converter) run it: the layers'
// weight GEMMs in fp8; the LM head (Megatron-Core's output layer is not a TE
// module; torchtitan's recipes filter "output"), the embedding, the
// attention core and the GEMMs that keep their precision (Op::keeps_precision:
// the MoE router) stay bf16 (docs/cost-model.md, "FP8 GEMMs").
inline bool gemm_in_fp8(const Plan& plan, BlockKind role, const GemmWork& g) {
  return plan.precision == Precision::fp8 && role == BlockKind::layer && g.has_weights && !g.keeps_precision;
}
// Traffic of the casts one fp8 GEMM runs per micro-batch: the forward casts
// its input and its weight, the backward its output gradient; each reads the
// tensor at `act` bytes an element and writes it twice in fp8 (row- and
// column-major: the two GEMMs that read it want both; TE's fused
// cast-transpose, with the scaling factor's amax taken in the same pass).
struct Fp8CastBytes {
  double forward = 0, backward = 0;
};
inline Fp8CastBytes fp8_cast_bytes(const LocalGemm& g, double act) {
  const double per_element = act + 2;
  return {(g.rows * g.k + g.k * g.n) * g.batch * per_element, g.rows * g.n * g.batch * per_element};
}

struct AxisPlacement;
// The routed tokens' dispatch and combine over `group` (the experts' ep
// placement, from expert_mesh): their bus bandwidth, the all-to-all's
// (AxisPlacement::all_to_all_bandwidth_bytes_per_s), or with the
// deduplicating dispatch the same with the bytes that cross nodes scaled by
// `nic_share` = deduplicated_remote_share (1 otherwise).
struct ExpertDispatchRate {
  double bandwidth_bytes_per_s = 0;
  double nic_share = 1;
};
ExpertDispatchRate expert_dispatch_rate(const AxisPlacement& group, const Plan& plan, const ExpertRouting& routing);

// Whether ep sits directly outside tp in the mesh order (only size-1 axes
// between them), or either is 1: then ep x tp ranks form one strided group,
// which experts that leave tp (Plan::expert_tensor_parallel) need.
bool ep_encloses_tp(const Mesh& mesh);
// What stops a plan's expert_tensor_parallel (validate.cpp words each; the
// search's quick check and its loop read the same): a dense model, a value
// other than 0, 1 and tp, and, for 1 with tp > 1, sequence parallelism off
// (Megatron-Core requires it for MoE with tp) or ep not directly outside tp.
struct ExpertTpFaults {
  bool dense_model = false, value = false, no_sequence_parallel = false, ep_not_outside_tp = false;
  bool any() const { return dense_model || value || no_sequence_parallel || ep_not_outside_tp; }
};
ExpertTpFaults expert_tp_faults(const Plan& plan, std::int64_t experts);

// The MLP widths of a transformer the tp that splits them does not divide:
// the routed experts' (over expert_split(plan).tp), the shared experts' and
// the dense layers' (over tp); a dense model's MLP over tp.
struct WidthFault {
  const char* what;  // "the feed-forward size", ...
  std::int64_t width, tp;
};
std::vector<WidthFault> mlp_width_faults(const TransformerDims& t, const Plan& plan);

// The mesh the routed experts' collectives run over: the plan's, or, when
// expert_split(plan).tokens > 1, the same ranks with ep and tp folded into one
// ep axis of expert_split(plan).ep ranks where tp sat (needs ep_encloses_tp).
Mesh expert_mesh(const Plan& plan);
// place_axes of expert_mesh(plan) on `topology`: `placements` (the plan's
// own) when the experts stay in tp. Its ep entry is the experts' group.
struct Topology;
std::vector<AxisPlacement> expert_placements(const Topology& topology, const Plan& plan,
                                             const std::vector<AxisPlacement>& placements);

enum class Pass : std::uint8_t { forward, backward };
// What the analytical model lets a collective run under (its exposed_s is the rest).
enum class HiddenUnder : std::uint8_t {
  nothing,          // on the critical path (forward tp all-reduces, expert all-to-alls)
  weight_gradient,  // backward tp collectives under the W GEMMs (overlap_tensor_parallel)
  attention,        // ring-attention key/value passes under the chunk in hand (Liu et al. 2023)
  paired_pass,      // expert all-to-alls under another micro-batch's pass, where the plan pairs them (overlap_expert_parallel)
  gemm,             // a layer's tp collectives in chunks beside the GEMMs they feed or follow (tp_comm_overlap)
};

// One collective of a block, or `count` alike run back to back, per micro-batch.
struct BlockCollective {
  Axis axis = Axis::tp;
  Collective kind = Collective::all_reduce;
  Pass pass = Pass::forward;
  HiddenUnder hidden_under = HiddenUnder::nothing;
  double bytes = 0;      // each (nccl-tests' S)
  double count = 1;
  double seconds = 0;    // count x collective_time on the axis's link, alone
  double exposed_s = 0;  // the part the analytical model leaves exposed (ring attention; a paired pass's
                         // all-to-alls; tp_comm_overlap's chunks; the weight-gradient overlap is decided per
                         // block, BlockCost::tp_backward_s)
};

struct GemmCost {
  LocalGemm shape;
  double element_bytes = 2;  // of its operands and result: 1 in fp8 (gemm_in_fp8), else the activation width
  bool core_attention = false;
  bool has_weights = true;
  bool fused_away = false;  // core attention under fused attention: priced by the fused kernel
  double forward_s = 0, input_gradient_s = 0, weight_gradient_s = 0;
};

// Where a block's compute seconds go (explain's "compute by kind"): every
// term block_compute and the recompute rules add to forward_compute_s and
// backward_compute_s is added to one part too, so the parts sum to them.
enum class ComputePart {
  matmul_forward,        // GEMMs with weights (and the output layer)
  matmul_backward,       // their input and weight gradients
  attention_forward,     // the fused kernel, or the unfused scores / values GEMMs and softmax / dropout passes
  attention_backward,
  memory_bound_forward,  // norms, activations, residual adds, rotary, embedding, the loss's passes
  memory_bound_backward,
  fp8_cast_forward,      // the fp8 GEMMs' casts of their inputs and weights (gemm_in_fp8)
  fp8_cast_backward,     // and of their output gradients
  recompute,             // what the backward repeats of the forward (selective, op-level, full)
  launch_overhead,       // the launch floor's excess over the kernels' own time
};
inline constexpr std::size_t kComputeParts = 10;
std::string to_string(ComputePart part);  // "matmul_forward"

// One block of one kind, per micro-batch, on one device.
struct BlockCost {  // depends only on micro-batch, tp, cp, ep, sequence parallel, recompute, precision, attention
  double dense_parameters = 0;   // after tp split
  double expert_parameters = 0;  // after tp and ep split
  double tied_parameters = 0;    // after tp split
  double activation_bytes = 0;   // saved for backward under the plan's recompute (none/selective/selective-op)
  double full_activation_bytes = 0;  // with no recompute (full recompute's transient)
  double input_bytes = 0;        // what full recompute keeps
  double gradient_elements = 0;  // activation-gradient elements in flight in this block's backward (layers)
  double loss_logits = 0;        // logits its loss reads (head)
  double forward_compute_s = 0;
  double backward_compute_s = 0;     // including recomputation
  double op_sac_recompute_s = 0;     // what op-level checkpointing repeats of the forward compute (in backward_compute_s for its layers)
  double weight_gradient_s = 0;
  double tp_forward_s = 0;           // exposed part (all of it but under tp_comm_overlap)
  double tp_forward_total_s = 0;
  double tp_backward_s = 0;          // exposed part
  double tp_backward_total_s = 0;
  double cp_s = 0;                   // ring-attention transfers, forward + backward
  double cp_forward_exposed_s = 0;
  double cp_backward_exposed_s = 0;
  double ep_s = 0;                   // all-to-all dispatch and combine, forward + backward
  // The routed experts' share of forward_compute_s and backward_compute_s
  // (their grouped GEMMs and activation): Megatron-Core's "mlp" node, which
  // combined 1F1B runs between the dispatch and the combine.
  double experts_forward_s = 0;
  double experts_backward_s = 0;
  // What of ep_s stays exposed when the forward and the backward each run
  // beside another micro-batch's pass (read under overlap_expert_parallel;
  // docs/cost-model.md, "Expert-parallel overlap"): each of the pair's four
  // all-to-alls beside the compute Megatron-Core's combined 1F1B runs with
  // it, the part longer than that compute; ep_s where the ep link cannot
  // overlap compute. A pass without a partner exposes its half of ep_s.
  double ep_paired_s = 0;
  // What pairing a forward and a backward hides of ep_s (half of it in each pass).
  double ep_hidden_by_pairing_s() const { return ep_s - ep_paired_s; }
  std::array<double, kComputeParts> compute_parts_s{};  // sum: forward_compute_s + backward_compute_s
  // The record behind the totals above.
  std::vector<GemmCost> gemms;                        // in the block's op order
  std::array<double, kStreamOps> stream_bytes{};      // forward traffic of the memory-bound ops, by StreamOp
  std::array<double, kStreamOps> stream_s{};          // their forward seconds
  Fp8CastBytes fp8_cast_bytes;                         // the fp8 GEMMs' casts (gemm_in_fp8), in the compute above
  double fp8_cast_forward_s = 0, fp8_cast_backward_s = 0;
  std::vector<BlockCollective> collectives;            // tp, cp and ep, in the order they run within a pass
};

// Per micro-batch across a pipeline stage boundary (Megatron-LM's
// scatter/gather, Narayanan et al. 2021, Sec. 4.1: without sequence
// parallelism each tp rank sends 1/t and the receiver all-gathers over tp).
struct PipelineTransfer {
  double boundary_bytes = 0;  // the activation as one device holds it
  double send_bytes = 0;      // what each device sends
  bool gather_after_receive = false;  // all-gather boundary_bytes over tp on arrival
};
PipelineTransfer pipeline_transfer(const ModelProfile& profile, const Plan& plan);

// The data-parallel gradient collective: all-reduce without ZeRO, reduce-scatter with ZeRO-1/2.
inline Collective gradient_reduction(int zero_stage) {
  return zero_shards(zero_stage, ModelState::optimizer) ? Collective::reduce_scatter : Collective::all_reduce;
}

// Data-parallel gradient buckets, as PyTorch DDP forms them (Li et al. 2020,
// "PyTorch Distributed", Sec. 3.2): one device's `reduced_bytes` of
// gradients to reduce, in buckets of `bucket_bytes` (raised so that there
// are at most kMostGradientBuckets; a 1-byte bucket size would otherwise
// ask for billions), the last holding the rest. Each bucket is its own
// collective, so each pays the collective's latency.
inline constexpr double kMostGradientBuckets = 4096;
struct GradientBuckets {
  std::int64_t count = 0;
  double size = 0;  // every bucket but the last
  double last = 0;
  // Bytes in buckets 0..k: what the gradient pass must have produced before bucket k can start.
  double through(std::int64_t k) const { return k + 1 >= count ? static_cast<double>(count - 1) * size + last : static_cast<double>(k + 1) * size; }
};
GradientBuckets gradient_buckets(double reduced_bytes, double bucket_bytes);

// When the last bucket is reduced, in seconds from the start of the last
// gradient pass's compute (`compute_s` long): bucket k becomes ready once
// the pass has produced its bytes, in proportion to its progress (DDP's
// hooks fire as gradients are written), and the buckets are reduced one
// after another, each `each_s` and the last `last_s`. The simulator replays
// exactly this (simulator/engine.cpp, schedule_buckets); with the buckets
// ready in proportion to k, the latest finish is set by the first, the
// second-to-last or the last bucket.
double bucket_reduction_end_s(const GradientBuckets& buckets, double each_s, double last_s, double compute_s);

// Adam per locally owned parameter: master weights and both moments read and
// written, gradients read, the working weights' 16-bit copy written.
inline double optimizer_traffic_bytes(double parameters, const PrecisionBytes& bytes) {
  return parameters * (2 * bytes.optimizer_bytes_per_parameter + bytes.gradient_bytes_per_parameter +
                       bytes.gathered_bytes_per_parameter);
}

}  // namespace meshplan
