// A parallel plan: the mesh plus every knob that changes memory or time.
// Field names here are the names used in plan JSON and in validation
// messages ("global_batch", "mesh.tp", ...).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/mesh.hpp"
#include "model/precision.hpp"

namespace meshplan {

// What the backward recomputes instead of keeping. `selective`: the attention
// core only (Korthikanti et al. 2022, Sec. 5); `full`: each layer's forward
// from its input; `selective_op`: torchtitan's op-level selective
// checkpointing, which keeps the outputs of the layer's matmuls and of the
// attention kernel except every second matmul, and recomputes everything else
// (torchtitan, parallelize_llama.py, _apply_ac_to_transformer_block with
// selective_ac_option = "op"; layer_graph.hpp, op_sac_saves_output).
enum class Recompute { none, selective, full, selective_op };
inline constexpr int kRecomputeModes = 4;
// Whether the backward rebuilds a whole layer's activations at once (one
// layer's worth of transient memory at the backward's peak).
inline bool recomputes_layer_forward(Recompute r) { return r == Recompute::full || r == Recompute::selective_op; }
// Whether the mode acts on transformer layers only (an attention core to
// select, a layer's matmul sequence to halve); the search tries it on nothing else.
inline bool recompute_of_transformer_layers(Recompute r) { return r == Recompute::selective || r == Recompute::selective_op; }
// The parts of a layer `selective` recomputes, by Megatron-Core's
// --recompute-modules names (arguments.py; TransformerConfig.recompute_modules):
// `core_attn` the attention core (its default, Korthikanti et al.'s selective);
// `layernorm` the two pre-norms' outputs (input_layernorm, pre_mlp_layernorm);
// `mla_up_proj` latent attention's up-projections and rotation (its queries,
// keys and values); `moe_act` the routed experts' activation function. Each
// drops what the part's output kept and repeats the part's forward in the
// backward. Two are checkpointed whole (Megatron-Core's standard
// checkpointing: the part's input kept, everything inside dropped, its
// forward and its tensor-parallel reduction run again in the backward):
// `mlp` a dense MLP (a dense model's, or the dense layers' among experts),
// `shared_experts` the shared experts' MLP. `none` tags what no module drops.
enum class RecomputeModule : std::uint8_t { none, core_attn, layernorm, mla_up_proj, moe_act, mlp, shared_experts };
inline constexpr int kRecomputeModules = 7;
using RecomputeModules = std::uint8_t;  // bit m: RecomputeModule m
constexpr RecomputeModules module_bit(RecomputeModule m) { return static_cast<RecomputeModules>(1u << static_cast<unsigned>(m)); }
inline constexpr RecomputeModules kDefaultRecomputeModules = module_bit(RecomputeModule::core_attn);
std::string to_string(RecomputeModule module);
std::optional<RecomputeModule> parse_recompute_module(std::string_view text);
inline constexpr std::string_view recompute_module_choices = "core_attn, layernorm, mla_up_proj, moe_act, mlp, shared_experts";
// "core_attn,layernorm" for a set (in the enum's order), and back: comma-separated
// module names, at least one; nullopt with `bad` the offending word (empty when none given).
std::string recompute_modules_text(RecomputeModules modules);
std::optional<RecomputeModules> parse_recompute_modules(std::string_view text, std::string& bad);
// What a refused set says, from parse_recompute_modules' `bad`: the word, and the choices.
std::string recompute_modules_problem(const std::string& bad);

struct Plan;
// Why the plan's schedule cannot pair a forward with another micro-batch's
// backward as overlap_expert_parallel asks (Megatron-Core's combined 1F1B runs
// without pipelining, or with the interleaved schedule, and not with full
// recompute), or "" when it can. The model's side (experts, ep > 1) is
// validate_plan's.
std::string expert_overlap_problem(const Plan& plan);
// Whether overlap_expert_parallel would change the plan: its experts split over
// ep ranks (so there are all-to-alls) and its schedule can pair passes.
bool expert_overlap_applies(const Plan& plan);
// Whether tp_comm_overlap changes the plan: it asks for it, with tp > 1 and
// sequence parallelism (Transformer Engine overlaps only the sequence-parallel
// all-gathers and reduce-scatters).
bool tp_comm_overlap_applies(const Plan& plan);
// Whether overlap_p2p_comm changes the plan: it asks for it, with pp > 1
// under the interleaved schedule (the one Megatron-Core overlaps).
bool p2p_overlap_applies(const Plan& plan);
// Whether overlap_zero_gather changes the plan: it asks for it, with ZeRO 1 or
// 2 over more than one data-parallel rank (dp x ep) and the gradients'
// reduction overlapped (as Megatron-LM asserts).
bool zero_gather_overlap_applies(const Plan& plan);
enum class ScheduleKind { gpipe, one_f_one_b, interleaved, zb_h1 };
// How attention runs. `fused`: one kernel (FlashAttention-2/3, cuDNN, PyTorch
// scaled_dot_product_attention) that keeps no s x s tensor, only per-row
// softmax statistics, and recomputes the scores in its backward (Dao 2023,
// FlashAttention-2, Sec. 3.1). `unfused`: Q K^T, softmax, dropout and P V as
// separate ops that store the s x s scores (Korthikanti et al. 2022, Sec.
// 4.1): Megatron-LM in 2021-22, what the published validation rows ran.
enum class Attention { fused, unfused };
// Selective recompute repeats the attention core in the backward to drop its
// s x s tensors; fused attention keeps none, so there it repeats nothing and
// the plan is the one without recompute (evaluate.cpp prices it so).
inline bool recompute_repeats_nothing(Recompute r, Attention a) { return r == Recompute::selective && a == Attention::fused; }
// The same with selective's modules: only the attention core (the default) repeats nothing under fused attention.
inline bool recompute_repeats_nothing(Recompute r, Attention a, RecomputeModules modules) {
  return recompute_repeats_nothing(r, a) && modules == kDefaultRecomputeModules;
}
// How context parallelism gives each rank the keys and values of the other
// sequence chunks (Megatron-Core's --cp-comm-type p2p / allgather / a2a):
// `ring`: ring attention passes key/value chunks around the cp ring under the
// attention of the chunk in hand (Liu et al. 2023); `all_gather`: all-gather
// every chunk's keys and values before the attention, reduce-scatter their
// gradients after its backward, both on the critical path (Llama 3, Dubey et
// al. 2024, Sec. 3.3.2); `all_to_all`: DeepSpeed-Ulysses (Jacobs et al.
// 2023): all-to-all q, k and v from sequence chunks to head groups before the
// attention and the output back after it, forward and backward.
enum class CpComm { ring, all_gather, all_to_all };
// How the routed tokens reach their experts over the expert-parallel group.
// `all_to_all`: NCCL all-to-all (Megatron-Core's alltoall dispatcher): each
// of a token's k copies travels to its expert's rank on its own, so a token
// crosses the network once for every expert it has on another node.
// `deduplicated`: DeepEP's internode kernels (DeepSeek-AI, DeepEP; Megatron-
// Core's flex dispatcher with DeepEP): a token goes once over RDMA to each
// node holding any of its experts, and is copied to those experts' ranks
// over NVLink there; the combine sums on that node before sending back.
enum class EpDispatch { all_to_all, deduplicated };
// How the loss's cross-entropy runs over the logits (memory only: the time
// model prices the fused loss for both, layer_graph.hpp, kLossLogitPasses).
// The fused loss is the default.
// `eager`: PyTorch's log_softmax + nll_loss in fp32 (autocast and Megatron-LM
// cast the logits to float): it keeps the fp32 log-probabilities for the
// backward, whose peak also holds two fp32 gradients and the logits' gradient.
// `fused`: one kernel over the logits in their own dtype that keeps only a
// per-token log-sum-exp (torch.compile of the loss, Megatron-Core's
// --cross-entropy-loss-fusion, Liger's and llm.c's fused classifiers): the
// logits are kept, and the backward writes their gradient in the same dtype
// (docs/cost-model.md, "Peak memory").
enum class Loss { eager, fused };

struct Schedule {
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  std::int64_t virtual_stages = 1;  // model chunks per device (v); > 1 only for interleaved
};

std::string to_string(Recompute recompute);
std::string to_string(const Schedule& schedule);  // "1f1b", "interleaved:3"
std::string to_string(Attention attention);
std::optional<Recompute> parse_recompute(std::string_view text);
std::optional<Attention> parse_attention(std::string_view text);
std::string to_string(CpComm cp_comm);  // "ring", "all-gather", "all-to-all"
std::optional<CpComm> parse_cp_comm(std::string_view text);
std::string to_string(EpDispatch dispatch);  // "all-to-all", "deduplicated"
std::optional<EpDispatch> parse_ep_dispatch(std::string_view text);
// The words for Plan::expert_tensor_parallel: "tp" (0) or "1".
std::optional<std::int64_t> parse_expert_tp(std::string_view text);
std::string to_string(Loss loss);  // "eager", "fused"
std::optional<Loss> parse_loss(std::string_view text);
// gpipe | 1f1b | interleaved:<v> | zb-h1; nullopt when malformed.
std::optional<Schedule> parse_schedule(std::string_view text);
// The longest training sequence a plan may state (plan files, --seq).
inline constexpr std::int64_t kMaxSeqLen = std::int64_t{1} << 40;
// The largest global batch (sequences per step) and micro-batch a plan may state (plan files, flags).
inline constexpr std::int64_t kMaxGlobalBatch = std::int64_t{1} << 40;

inline constexpr std::string_view recompute_choices = "none, selective, full, selective-op";
inline constexpr std::string_view attention_choices = "fused, unfused";
inline constexpr std::string_view cp_comm_choices = "ring, all-gather, all-to-all";
inline constexpr std::string_view loss_choices = "eager, fused";
inline constexpr std::string_view ep_dispatch_choices = "all-to-all, deduplicated";
inline constexpr std::string_view expert_tp_choices = "tp, 1";
inline constexpr std::string_view schedule_choices = "gpipe, 1f1b, interleaved:<v> (v >= 2), zb-h1";

struct Plan {
  Mesh mesh;
  std::int64_t micro_batch = 1;     // sequences (or samples) per micro-batch per data-parallel rank
  std::int64_t global_batch = 1;    // sequences (or samples) per optimizer step, all ranks
  std::int64_t seq_len = 0;         // 0: the model's seq_len
  int zero_stage = 0;               // ZeRO stage on the dp axis (0..3); fsdp is always stage 3
  Recompute recompute = Recompute::none;
  // What `selective` recomputes (RecomputeModule bits); read only under it.
  RecomputeModules recompute_modules = kDefaultRecomputeModules;
  bool sequence_parallel = false;   // Korthikanti et al. 2022 sequence parallelism within tp
  // New plans default to fused attention (what current stacks run); plan
  // files written before the field existed read as unfused, the semantics
  // they were computed with (plan_file.cpp).
  Attention attention = Attention::fused;
  CpComm cp_comm = CpComm::ring;    // only read when cp > 1
  EpDispatch ep_dispatch = EpDispatch::all_to_all;  // only read when the experts' group spans nodes
  // New plans default to the fused loss, as the time model prices it for
  // every plan (the fastest stacks'); plan files written before the field
  // existed read as eager, the memory they were computed with (plan_file.cpp).
  Loss loss = Loss::fused;
  Schedule schedule;
  Precision precision = Precision::bf16;
  // Gradients accumulated in an fp32 buffer and reduced across data-parallel
  // ranks in fp32 (4 bytes per parameter instead of the 16-bit 2): what
  // Megatron-LM does for bf16 unless --grad-reduce-in-bf16 (arguments.py,
  // "accumulate and all-reduce gradients in fp32 for bfloat16 data type") and
  // what torchtitan's FSDP2 does by default (mixed_precision_reduce =
  // "float32"). Off by default: the ZeRO paper's 2 + 2 + K bytes per parameter
  // (docs/cost-model.md, "Gradient precision"). No effect under fp32.
  bool fp32_gradients = false;
  // Adam's first and second moments kept in bf16 (2 bytes each) beside the
  // fp32 master weights: Megatron-Core's precision-aware optimizer with
  // --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, and DeepSeek-V3's training
  // ("BF16 ... for the first and second moments in the AdamW", arXiv
  // 2412.19437, Sec. 3.3.3). Off by default: fp32 moments, K = 12 bytes.
  bool bf16_moments = false;
  // The routed experts' tensor parallelism (Megatron-Core's
  // --expert-tensor-parallel-size): 0 splits them over tp like the dense
  // layers; 1 runs every expert whole, and each tp group's ranks join the
  // expert-parallel group instead (ep x tp ranks, each routing its own 1/tp of
  // the tokens: sequence parallelism splits them), with no tp collective
  // inside the experts (every Qwen3 row of the Megatron-MoE-ModelZoo runs
  // ETP 1). Values meshplan models: 0, 1, or tp (the same as 0).
  std::int64_t expert_tensor_parallel = 0;
  // Layers per pipeline chunk (pp x v entries, in chunk order) when not even.
  std::vector<std::int64_t> stage_layers;
  double gradient_bucket_bytes = 25.0 * 1024 * 1024;  // PyTorch DDP's default bucket_cap_mb = 25
  double memory_headroom = 0.05;    // fraction of device memory kept free (allocator, runtime)
  bool overlap_gradient_reduction = true;  // dp gradient buckets reduce during the last backward
  bool overlap_parameter_gather = true;    // fsdp / ZeRO-3 prefetch the next block's weights
  // Backward tensor-parallel collectives run under the weight-gradient GEMMs
  // (Megatron-Core's asynchronous TP communication). Off by default: the
  // Megatron-LM runs of Korthikanti et al. 2022 are modelled without it, as
  // Calculon (Isaev et al. 2023) models them.
  bool overlap_tensor_parallel = false;
  // Transformer Engine's userbuffers overlap (Megatron-Core --tp-comm-overlap;
  // torchtitan's async tensor parallelism does the same with torch.compile):
  // every sequence-parallel all-gather and reduce-scatter of a layer runs in
  // tp chunks beside the GEMM it feeds or follows (docs/cost-model.md,
  // "Tensor-parallel communication overlap"). Needs tp > 1 and sequence
  // parallelism, as TE does. It replaces overlap_tensor_parallel's rule: the
  // layers' collectives pair with GEMMs, the embedding's and head's stay
  // exposed. Off by default.
  bool tp_comm_overlap = false;
  // Megatron-Core's overlapped pipeline transfers (--overlap-p2p-communication,
  // Megatron Bridge's overlap_p2p_comm, on wherever it interleaves): in the
  // steady state each send and receive runs beside another chunk's compute;
  // the fill's and the drain's stay exposed (NeMo's "Communication Overlap"
  // guide). Interleaved schedule only, as NeMo supports it. Off by default.
  bool overlap_p2p_comm = false;
  // ZeRO-1/2's gather of the updated weights runs under the next step's
  // first forward, bucket by bucket, each bucket's gather started when the
  // previous one's layers start (Megatron-Core's --overlap-param-gather with
  // the distributed optimizer, which needs --overlap-grad-reduce; PyTorch
  // FSDP with weights kept after the forward gathers them the same way).
  // Off by default: the gather follows the optimizer step, as Megatron-LM's
  // default and DeepSpeed's ZeRO-1/2 run it (docs/cost-model.md, "ZeRO's
  // gather of the updated weights").
  bool overlap_zero_gather = false;
  // Each expert-parallel all-to-all runs beside another micro-batch's compute:
  // Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm) runs a
  // forward and another micro-batch's backward together, layer by layer, the
  // dispatch and combine of each hidden under the other's attention and MLP
  // compute. A stage's forwards before its first backward, and its backwards
  // after its last forward, have no partner (expert_overlap_problem says which
  // plans can run it). Off by default, as in Megatron-Core.
  bool overlap_expert_parallel = false;

  // Micro-batches per optimizer step on each data-parallel rank (gradient
  // accumulation steps); 0 when the batch does not divide. Inline: the
  // evaluator asks it many times per plan. A product past int64 (a plan file
  // may say micro_batch 2^40 on 2^30 ranks) divides nothing.
  std::int64_t micro_batches() const {
    std::int64_t per_step = 0;
    if (__builtin_mul_overflow(micro_batch, mesh.data_parallel_size(), &per_step)) return 0;
    if (per_step <= 0 || global_batch % per_step != 0) return 0;
    return global_batch / per_step;
  }
};

// How a plan splits the routed experts (Plan::expert_tensor_parallel): each
// expert's width over `tp` ranks, whole experts over `ep` ranks (the mesh's ep
// x the tp ranks that left the experts' tensor parallelism), and a tp group's
// tokens over `tokens` of those ranks (1 unless the experts leave tp).
// `dispatched`: the ways a tp group's tokens are split when the all-to-all
// moves them: tp under sequence parallelism, where each tp rank dispatches
// its own 1/tp of the tokens (Megatron-Core's alltoall dispatcher; with the
// experts in tp the tp group then all-gathers what arrives), else 1.
struct ExpertSplit {
  std::int64_t tp = 1, ep = 1, tokens = 1, dispatched = 1;
};
inline ExpertSplit expert_split(const Plan& plan) {
  const std::int64_t tp = plan.mesh.size(Axis::tp), ep = plan.mesh.size(Axis::ep);
  const std::int64_t dispatched = plan.sequence_parallel ? tp : 1;
  if (plan.expert_tensor_parallel != 1 || tp == 1) return {tp, ep, 1, dispatched};
  return {1, ep * tp, tp, tp};
}

// Whether the plan's backward repeats `module` (selective recompute of it).
inline bool recomputes(const Plan& plan, RecomputeModule module) {
  return plan.recompute == Recompute::selective && (plan.recompute_modules & module_bit(module)) != 0;
}
// Whether the plan's recompute repeats nothing: selective with only the
// attention core under fused attention, which keeps no s x s tensors to drop.
inline bool recompute_repeats_nothing(const Plan& plan) {
  return recompute_repeats_nothing(plan.recompute, plan.attention, plan.recompute_modules);
}

// Bytes per parameter and per activation element under the plan's precision
// and gradient precision: the one answer every cost reads.
inline PrecisionBytes bytes_for(const Plan& plan) {
  return bytes_for(plan.precision, plan.fp32_gradients, plan.bf16_moments);
}
// Whether the plan's gradients are fp32 (fp32_gradients, or fp32 training):
// what the exports tell each framework.
inline bool gradients_in_fp32(const Plan& plan) { return bytes_for(plan).gradient_bytes_per_parameter == 4; }

}  // namespace meshplan
