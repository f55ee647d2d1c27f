// A model's layer graph boiled down, once per (model, sequence length), to
// the per-block sums the planner needs, so that evaluating one plan costs
// microseconds instead of a walk over every op. Identical blocks (all the
// layers of a transformer) share one BlockProfile. memory_model.cpp walks the
// graph itself and is the reference the fast evaluator is tested against.
#pragma once

#include <cstdint>
#include <vector>

#include "model/collectives.hpp"
#include "model/device_spec.hpp"
#include "model/layer_graph.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"

namespace meshplan {

struct GemmWork {
  double rows_per_sample = 0;  // m before micro-batching and context splitting
  double n = 0, k = 0, batch = 1;
  double kv_n = 0;  // of n, the key/value-head columns (GemmShape::kv_n)
  TpSplit tp_split = TpSplit::none;
  bool core_attention = false;
  bool has_weights = true;  // false for QK^T and PV: their backward has no weight-gradient half
  bool keeps_precision = false;  // Op::keeps_precision: not in fp8 under an fp8 plan (gemm_in_fp8)
  // false when the GEMM reads the model's input data (an MLP's or CNN's first
  // layer): nothing needs the gradient of the data, so no framework computes it.
  bool needs_input_gradient = true;
  double op_sac_recomputed = 1;  // Op::op_sac_recomputed: the share of the forward op-level checkpointing repeats
  bool expert = false;  // a routed expert's (Op::expert): split as expert_split(plan) says (stage_cost.hpp)
  RecomputeModule module = RecomputeModule::none;  // Op::module: what selective recompute of it repeats
  // Per sample, the elements of its tensor-parallel all-reduce (add_gemm): a
  // row-parallel GEMM's partial sums (forward), a column-parallel GEMM's input
  // gradient (backward); 0 for a GEMM with none.
  double tp_reduce_elements = 0;
};

struct BlockProfile {
  // Parameters (dense and mixture-of-experts), as the ops split them over tp.
  double tp_split_parameters = 0;
  double kv_parameters = 0;  // split over kv_tp_split(ModelProfile::kv_heads, tp)
  double replicated_parameters = 0;
  double tied_parameters = 0;
  double expert_tp_split_parameters = 0;
  double expert_replicated_parameters = 0;
  // Saved activations per sample, [Attention][tensor-parallel region][the RecomputeModule whose
  // selective recompute drops them; none: kept].
  double saved_elements[2][2][kRecomputeModules] = {};      // at the activation dtype
  double saved_fixed_bytes[2][2][kRecomputeModules] = {};   // masks and fp32 tensors
  // Of saved_elements' tensor-parallel entries, the keys and values (split over cp x kv_tp_split, not cp x tp), [Attention][module].
  double saved_key_value_elements[2][kRecomputeModules] = {};
  double input_elements_per_sample = 0;  // the block's input tensor (what full recompute keeps)
  // What op-level checkpointing keeps beside the input (Op::op_sac_kept),
  // per sample, [Attention][tensor-parallel region]; keys and values as saved_key_value_elements.
  double op_sac_elements[2][2] = {};
  double op_sac_fixed_bytes[2][2] = {};
  double op_sac_key_value_elements[2] = {};
  // Of those, the ones kept only with tp > 1 and sequence parallelism
  // (SavedTensor::reduce_scatter), [Attention][0: a reduce-scatter's output,
  // split like the residual stream; 1: partial sums, split over cp only].
  double op_sac_reduce_scatter_elements[2][2] = {};
  // Work in the forward pass.
  std::vector<GemmWork> gemms;
  // Traffic of the memory-bound ops, [tensor-parallel region][core attention][StreamOp].
  double memory_elements[2][2][kStreamOps] = {};
  double memory_fixed_bytes[2][2][kStreamOps] = {};
  // Of that traffic, the ops a recompute module repeats (Op::module; core_attn's are core attention's
  // above), [module][tensor-parallel region][StreamOp].
  double module_memory_elements[kRecomputeModules][2][kStreamOps] = {};
  double module_memory_fixed_bytes[kRecomputeModules][2][kStreamOps] = {};
  double matmul_forward_flops_per_sample = 0;  // GEMM-like ops: what "model FLOPs" count
  // Forward FLOPs the experts run on the rows that pad each expert to its
  // capacity (capacity_factor): executed, but not model FLOPs (0 without a
  // capacity factor, and for dense blocks).
  double padding_forward_flops_per_sample = 0;
  double core_attention_flops_per_sample = 0;
  // Q K^T's forward FLOPs (fused attention's backward recomputes them).
  double attention_scores_flops_per_sample = 0;
  // A fused attention call's forward FLOPs: the causal half of Q K^T and P V.
  double fused_attention_flops_per_sample = 0;
  bool attention_dropout = false;  // the model's dropout > 0 reaches core attention (fused: the kernel's in-kernel RNG)
  // Kernels the forward pass launches, [Attention]: one per op, the core
  // attention ops (Q K^T, softmax, dropout, P V) one together when fused.
  double forward_kernels[2] = {};
  // The largest tensor an op of the block outputs, per sample, [Attention]
  // [split by tp]: its gradient is the largest in flight in the backward.
  double largest_output_elements[2][2] = {};
  // Logits the loss reads per sample (tokens x vocab), [split by tp].
  double loss_logit_elements[2] = {};
  // Bytes per logit the eager loss keeps (SavedTensor::loss_logits' fixed
  // bytes, fp32): in saved_fixed_bytes, which the fused loss trades for the
  // activation dtype (evaluate.cpp).
  double loss_logit_eager_bytes = 0;
  // Tensor-parallel all-reduces (Megatron's g in the forward, f in the
  // backward): a row-parallel GEMM sums its output, a column-parallel GEMM
  // sums its input gradient, a vocabulary-parallel embedding its output, a
  // vocabulary-parallel cross-entropy three scalars per token.
  double tp_forward_reduce_elements = 0;   // per sample
  double tp_backward_reduce_elements = 0;
  int tp_forward_collectives = 0;
  int tp_backward_collectives = 0;
  // Of those, the routed experts' (counted in the four above too): with the
  // experts out of tp (Plan::expert_tensor_parallel) they do not run.
  double expert_tp_forward_reduce_elements = 0;
  double expert_tp_backward_reduce_elements = 0;
  int expert_tp_forward_collectives = 0;
  int expert_tp_backward_collectives = 0;
  // Of the forward ones, each recompute module's (a whole-module checkpoint, `mlp` and
  // `shared_experts`, runs its reduction again in the backward).
  double module_tp_forward_reduce_elements[kRecomputeModules] = {};
  int module_tp_forward_collectives[kRecomputeModules] = {};

  bool same_as(const BlockProfile& other) const;
};

struct ModelProfile {
  ModelKind kind = ModelKind::transformer;
  std::int64_t seq_len = 1;
  std::vector<BlockProfile> kinds;   // unique block profiles
  std::vector<int> block_kind;       // graph block -> index into kinds
  std::vector<BlockKind> block_role; // graph block -> embedding / layer / head
  std::vector<BlockKind> kind_role;  // kind -> the role of its blocks
  std::vector<int> layer_blocks;     // graph block ids of the pipeline-partitioned layers
  int uniform_layer_kind = -1;       // the kind every layer block shares, or -1
  int embedding_block = -1;
  int head_block = -1;
  double parameter_count = 0;
  double model_flops_per_sample = 0;  // forward + backward matmul FLOPs (3x forward)
  // Forward + backward FLOPs on the experts' capacity padding (3x
  // BlockProfile::padding_forward_flops_per_sample): hardware FLOPs, not model FLOPs.
  double padding_flops_per_sample = 0;
  // FLOPs a step executes beyond the model FLOPs (negative where causal fused
  // attention skips more than recompute adds), per sample, by
  // [Recompute][attention_index]: recompute_flops_per_sample's sum, taken
  // once per profile instead of once per plan.
  double recompute_flops[kRecomputeModes][2] = {};
  // The GEMM FLOPs each recompute module repeats per sample over the layers (core_attn: the
  // attention core's, unfused), which selective_recompute_flops_per_sample adds up for a plan's set.
  double module_recompute_flops[kRecomputeModules] = {};
  double residual_elements_per_sample = 0;  // what crosses a pipeline stage boundary
  // For communication volumes.
  std::int64_t hidden = 0, q_width = 0, kv_heads = 0, experts = 0, top_k = 0;
  std::int64_t expert_groups = 0, group_top_k = 0;  // group-limited routing (TransformerDims); 0: none
  ExpertRouting routing() const { return {experts, top_k, expert_groups, group_top_k}; }
  double kv_width = 0;  // TransformerDims::key_value_mean_width
  double expert_slots = 1;  // TransformerDims::expert_slots_per_token: what the dispatch moves per token
};

inline std::size_t attention_index(Attention attention) { return attention == Attention::fused ? 0 : 1; }

// The class whose measured rate prices a memory-bound op (GEMM-like kinds: elementwise, unused).
StreamOp stream_op_of(OpKind kind);

ModelProfile build_profile(const ModelSpec& model, const LayerGraph& graph);

// Of the profile's layers, the FLOPs per sample that a step executes beyond
// the model FLOPs: the forward FLOPs it runs again (selective recompute's
// core attention, unfused; fused attention's Q K^T, which its backward
// recomputes; full recompute's whole forward, with the experts' capacity
// padding; op-level checkpointing's repeated matmuls, Op::op_sac_recomputed,
// at their executed shapes), less what a causal fused kernel skips: it runs
// the causal half of the score matrix, forward, backward and recompute, where
// model FLOPs count it whole. Negative where the skip outweighs the recompute.
double recompute_flops_per_sample(const ModelProfile& profile, Recompute recompute, Attention attention);
// The same for a plan: selective recompute repeats its modules' GEMMs
// (Plan::recompute_modules) instead of the attention core alone.
double recompute_flops_per_sample(const ModelProfile& profile, const Plan& plan);

}  // namespace meshplan
