#include "model/profile.hpp"

#include <algorithm>

namespace meshplan {
namespace {

bool same_gemms(const std::vector<GemmWork>& a, const std::vector<GemmWork>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].rows_per_sample != b[i].rows_per_sample || a[i].n != b[i].n || a[i].kv_n != b[i].kv_n || a[i].k != b[i].k ||
        a[i].batch != b[i].batch || a[i].tp_split != b[i].tp_split || a[i].core_attention != b[i].core_attention ||
        a[i].has_weights != b[i].has_weights || a[i].keeps_precision != b[i].keeps_precision || a[i].needs_input_gradient != b[i].needs_input_gradient ||
        a[i].op_sac_recomputed != b[i].op_sac_recomputed || a[i].expert != b[i].expert || a[i].module != b[i].module ||
        a[i].tp_reduce_elements != b[i].tp_reduce_elements) {
      return false;
    }
  }
  return true;
}

bool same_2x2(const double (&a)[2][2], const double (&b)[2][2]) {
  return a[0][0] == b[0][0] && a[0][1] == b[0][1] && a[1][0] == b[1][0] && a[1][1] == b[1][1];
}

template <typename T, std::size_t N>
bool same_array(const T (&a)[N], const T (&b)[N]) {
  for (std::size_t i = 0; i < N; ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

template <std::size_t N, std::size_t M>
bool same_array(const double (&a)[N][M], const double (&b)[N][M]) {
  for (std::size_t i = 0; i < N; ++i) {
    if (!same_array(a[i], b[i])) return false;
  }
  return true;
}

template <std::size_t N, std::size_t M, std::size_t K>
bool same_array(const double (&a)[N][M][K], const double (&b)[N][M][K]) {
  for (std::size_t i = 0; i < N; ++i) {
    if (!same_array(a[i], b[i])) return false;
  }
  return true;
}

bool same_2x2xk(const double (&a)[2][2][kStreamOps], const double (&b)[2][2][kStreamOps]) {
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 2; ++c) {
      for (std::size_t k = 0; k < kStreamOps; ++k) {
        if (a[r][c][k] != b[r][c][k]) return false;
      }
    }
  }
  return true;
}

}  // namespace

StreamOp stream_op_of(OpKind kind) {
  switch (kind) {
    case OpKind::softmax: return StreamOp::softmax;
    case OpKind::norm: return StreamOp::norm;
    case OpKind::activation: return StreamOp::activation;
    case OpKind::embedding: return StreamOp::embedding;
    case OpKind::cross_entropy: return StreamOp::cross_entropy;
    default: return StreamOp::elementwise;
  }
}

bool BlockProfile::same_as(const BlockProfile& o) const {
  return tp_split_parameters == o.tp_split_parameters && kv_parameters == o.kv_parameters &&
         replicated_parameters == o.replicated_parameters &&
         same_array(saved_key_value_elements, o.saved_key_value_elements) &&
         tied_parameters == o.tied_parameters && expert_tp_split_parameters == o.expert_tp_split_parameters &&
         expert_replicated_parameters == o.expert_replicated_parameters && same_array(saved_elements, o.saved_elements) &&
         same_array(saved_fixed_bytes, o.saved_fixed_bytes) && input_elements_per_sample == o.input_elements_per_sample &&
         same_2x2(op_sac_elements, o.op_sac_elements) && same_2x2(op_sac_fixed_bytes, o.op_sac_fixed_bytes) &&
         op_sac_key_value_elements[0] == o.op_sac_key_value_elements[0] &&
         op_sac_key_value_elements[1] == o.op_sac_key_value_elements[1] &&
         same_2x2xk(memory_elements, o.memory_elements) && same_2x2xk(memory_fixed_bytes, o.memory_fixed_bytes) &&
         same_array(module_memory_elements, o.module_memory_elements) &&
         same_array(module_tp_forward_reduce_elements, o.module_tp_forward_reduce_elements) &&
         same_array(module_tp_forward_collectives, o.module_tp_forward_collectives) &&
         same_array(module_memory_fixed_bytes, o.module_memory_fixed_bytes) &&
         matmul_forward_flops_per_sample == o.matmul_forward_flops_per_sample &&
         padding_forward_flops_per_sample == o.padding_forward_flops_per_sample &&
         core_attention_flops_per_sample == o.core_attention_flops_per_sample &&
         attention_scores_flops_per_sample == o.attention_scores_flops_per_sample &&
         fused_attention_flops_per_sample == o.fused_attention_flops_per_sample &&
         attention_dropout == o.attention_dropout &&
         forward_kernels[0] == o.forward_kernels[0] && forward_kernels[1] == o.forward_kernels[1] &&
         same_2x2(largest_output_elements, o.largest_output_elements) &&
         loss_logit_elements[0] == o.loss_logit_elements[0] && loss_logit_elements[1] == o.loss_logit_elements[1] &&
         loss_logit_eager_bytes == o.loss_logit_eager_bytes &&
         tp_forward_reduce_elements == o.tp_forward_reduce_elements &&
         tp_backward_reduce_elements == o.tp_backward_reduce_elements &&
         tp_forward_collectives == o.tp_forward_collectives && tp_backward_collectives == o.tp_backward_collectives &&
         expert_tp_forward_reduce_elements == o.expert_tp_forward_reduce_elements &&
         expert_tp_backward_reduce_elements == o.expert_tp_backward_reduce_elements &&
         expert_tp_forward_collectives == o.expert_tp_forward_collectives &&
         expert_tp_backward_collectives == o.expert_tp_backward_collectives && same_gemms(gemms, o.gemms);
}

namespace {

// An op's parameters and what it keeps for the backward, under each attention implementation.
void add_memory(BlockProfile& bp, const Op& op) {
  if (op.expert) {
    bp.expert_tp_split_parameters += op.tp_split_parameters;
    bp.expert_replicated_parameters += op.replicated_parameters;
  } else {
    bp.tp_split_parameters += op.tp_split_parameters;
    bp.kv_parameters += op.kv_parameters;
    bp.replicated_parameters += op.replicated_parameters;
  }
  bp.tied_parameters += op.tied_parameters;
  for (Attention attention : {Attention::fused, Attention::unfused}) {
    const std::size_t a = attention_index(attention);
    for (const SavedTensor& t : op.saved) {
      if (!kept_by(t, attention)) continue;
      const int region = t.tensor_parallel ? 1 : 0;
      const auto module = static_cast<std::size_t>(t.selective ? RecomputeModule::core_attn : t.module);
      if (t.fixed_bytes_per_element > 0) {
        bp.saved_fixed_bytes[a][region][module] += t.elements_per_sample * t.fixed_bytes_per_element;
      } else {
        bp.saved_elements[a][region][module] += t.elements_per_sample;
        if (t.key_value) bp.saved_key_value_elements[a][module] += t.elements_per_sample;
      }
    }
    for (const SavedTensor& t : op.op_sac_kept) {
      if (!kept_by(t, attention)) continue;
      if (t.reduce_scatter) {  // activation dtype, outside tp regions (build_transformer.cpp)
        bp.op_sac_reduce_scatter_elements[a][t.partial_sums ? 1 : 0] += t.elements_per_sample;
        continue;
      }
      const int region = t.tensor_parallel ? 1 : 0;
      if (t.fixed_bytes_per_element > 0) {
        bp.op_sac_fixed_bytes[a][region] += t.elements_per_sample * t.fixed_bytes_per_element;
      } else {
        bp.op_sac_elements[a][region] += t.elements_per_sample;
        if (t.key_value) bp.op_sac_key_value_elements[a] += t.elements_per_sample;
      }
    }
    // Fused attention runs Q K^T, softmax, dropout and P V as one kernel, after P V.
    const bool fused_away = attention == Attention::fused && op.core_attention;
    if (!fused_away || op.kind == OpKind::attention_values) bp.forward_kernels[a] += 1;
    if (!fused_away && op.kind != OpKind::cross_entropy) {
      double& largest = bp.largest_output_elements[a][output_split_by_tp(op) ? 1 : 0];
      largest = std::max(largest, op.output_elements_per_sample);
    }
  }
  if (op.kind == OpKind::cross_entropy) {
    for (const SavedTensor& t : op.saved) {
      bp.loss_logit_elements[t.tensor_parallel ? 1 : 0] += t.elements_per_sample;
      if (t.loss_logits) bp.loss_logit_eager_bytes = t.fixed_bytes_per_element;
    }
  }
}

// A GEMM-like op's work and its tensor-parallel all-reduce (Megatron's g after a
// row-parallel GEMM, f before a column-parallel one's input gradient).
void add_gemm(BlockProfile& bp, const Op& op, bool needs_input_gradient, double dropout) {
  GemmWork work;
  work.rows_per_sample = op.gemm.rows_per_sample;
  work.n = static_cast<double>(op.gemm.n);
  work.kv_n = static_cast<double>(op.gemm.kv_n);
  work.k = static_cast<double>(op.gemm.k);
  work.batch = static_cast<double>(op.gemm.batch);
  work.tp_split = op.tp_split;
  work.core_attention = op.core_attention;
  work.has_weights = op.has_weights();
  work.keeps_precision = op.keeps_precision;
  work.needs_input_gradient = needs_input_gradient;
  work.op_sac_recomputed = op.op_sac_recomputed;
  work.expert = op.expert;
  work.module = op.module;
  if (op.tp_split == TpSplit::rows) {
    // The partial sums the GEMM writes: its output, or for routed experts every routed copy (k' s h, before
    // the combine adds them up).
    const double partial_sums = op.expert ? op.gemm.rows_per_sample * static_cast<double>(op.gemm.n * op.gemm.batch)
                                          : op.output_elements_per_sample;
    work.tp_reduce_elements = partial_sums;
    bp.tp_forward_reduce_elements += partial_sums;
    ++bp.tp_forward_collectives;
    bp.module_tp_forward_reduce_elements[static_cast<std::size_t>(op.module)] += partial_sums;
    ++bp.module_tp_forward_collectives[static_cast<std::size_t>(op.module)];
    if (op.expert) {
      bp.expert_tp_forward_reduce_elements += partial_sums;
      ++bp.expert_tp_forward_collectives;
    }
  } else if (op.tp_split == TpSplit::columns && needs_input_gradient) {  // the data needs no gradient
    const double input_elements = op.gemm.rows_per_sample * static_cast<double>(op.gemm.k * op.gemm.batch);
    work.tp_reduce_elements = input_elements;
    bp.tp_backward_reduce_elements += input_elements;
    ++bp.tp_backward_collectives;
    if (op.expert) {
      bp.expert_tp_backward_reduce_elements += input_elements;
      ++bp.expert_tp_backward_collectives;
    }
  }
  bp.gemms.push_back(work);
  bp.matmul_forward_flops_per_sample += op.forward_flops_per_sample;
  if (op.expert) {  // the GEMM runs every slot of its capacity; the model FLOPs count routed tokens
    const double executed = 2 * op.gemm.rows_per_sample * work.n * work.k * work.batch;
    bp.padding_forward_flops_per_sample += std::max(0.0, executed - op.forward_flops_per_sample);
  }
  if (op.core_attention) {
    bp.core_attention_flops_per_sample += op.forward_flops_per_sample;
    bp.fused_attention_flops_per_sample += op.forward_flops_per_sample / 2;  // causal: half the score matrix
    bp.attention_dropout = dropout > 0;
  }
  if (op.kind == OpKind::attention_scores) bp.attention_scores_flops_per_sample += op.forward_flops_per_sample;
}

// A memory-bound op's traffic, and the all-reduces of a vocabulary-parallel embedding and loss.
void add_stream(BlockProfile& bp, const Op& op, std::int64_t seq_len) {
  const int region = op.tensor_parallel_region ? 1 : 0, core = op.core_attention ? 1 : 0;
  const auto cls = static_cast<std::size_t>(stream_op_of(op.kind));
  bp.memory_elements[region][core][cls] += op.memory_elements_per_sample;
  bp.memory_fixed_bytes[region][core][cls] += op.memory_fixed_bytes_per_sample;
  const auto module = static_cast<std::size_t>(op.module);
  if (op.module != RecomputeModule::none) {
    bp.module_memory_elements[module][region][cls] += op.memory_elements_per_sample;
    bp.module_memory_fixed_bytes[module][region][cls] += op.memory_fixed_bytes_per_sample;
  }
  if (op.kind == OpKind::embedding && op.tp_split_parameters > 0) {
    bp.tp_forward_reduce_elements += op.output_elements_per_sample;
    ++bp.tp_forward_collectives;
  }
  if (op.tp_gathered_input_elements_per_sample > 0) {  // gathered as a column-parallel GEMM's input is
    bp.tp_backward_reduce_elements += op.tp_gathered_input_elements_per_sample;
    ++bp.tp_backward_collectives;
  }
  if (op.kind == OpKind::cross_entropy && op.tensor_parallel_region) {
    bp.tp_forward_reduce_elements += 3 * static_cast<double>(seq_len);  // max, sum of exp, target logit
    bp.tp_forward_collectives += 3;
  }
}

// The index of the kind equal to `bp`, added when new.
int kind_of(ModelProfile& profile, BlockProfile bp, BlockKind role) {
  for (std::size_t k = 0; k < profile.kinds.size(); ++k) {
    if (profile.kinds[k].same_as(bp)) return static_cast<int>(k);
  }
  profile.kinds.push_back(std::move(bp));
  profile.kind_role.push_back(role);
  return static_cast<int>(profile.kinds.size()) - 1;
}

}  // namespace

ModelProfile build_profile(const ModelSpec& model, const LayerGraph& graph) {
  ModelProfile profile;
  profile.kind = model.kind;
  profile.seq_len = graph.seq_len;
  profile.parameter_count = graph.parameter_count();
  profile.layer_blocks = graph.layer_blocks();
  if (model.kind == ModelKind::transformer) {
    const auto& t = model.transformer;
    profile.hidden = t.hidden;
    profile.kv_width = t.key_value_mean_width();
    profile.q_width = t.query_width();
    profile.kv_heads = t.key_value_heads();
    profile.expert_slots = t.expert_slots_per_token();
    profile.experts = t.experts;
    profile.top_k = t.experts > 0 ? t.top_k : 0;
    profile.expert_groups = t.experts > 0 ? t.expert_groups : 0;
    profile.group_top_k = t.experts > 0 ? t.group_top_k : 0;
  }
  profile.residual_elements_per_sample = graph.largest_stage_boundary_elements_per_sample();

  for (std::size_t b = 0; b < graph.blocks.size(); ++b) {
    const Block& block = graph.blocks[b];
    BlockProfile bp;
    bp.input_elements_per_sample = b == 0 ? 0 : graph.boundary_elements_per_sample(static_cast<int>(b) - 1);
    for (OpId id : block.ops) {
      const Op& op = graph.op(id);
      add_memory(bp, op);
      if (op.gemm_like()) {
        add_gemm(bp, op, boost::in_degree(id, graph.graph) > 0, model.transformer.dropout);
      } else {
        add_stream(bp, op, graph.seq_len);
      }
    }
    profile.model_flops_per_sample += 3 * bp.matmul_forward_flops_per_sample;
    profile.padding_flops_per_sample += 3 * bp.padding_forward_flops_per_sample;
    profile.block_role.push_back(block.kind);
    if (block.kind == BlockKind::embedding) profile.embedding_block = static_cast<int>(b);
    if (block.kind == BlockKind::head) profile.head_block = static_cast<int>(b);
    profile.block_kind.push_back(kind_of(profile, std::move(bp), block.kind));
  }
  for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full, Recompute::selective_op})
    for (Attention attention : {Attention::fused, Attention::unfused})
      profile.recompute_flops[static_cast<int>(recompute)][attention_index(attention)] =
          recompute_flops_per_sample(profile, recompute, attention);
  for (std::size_t block = 0; block < profile.block_kind.size(); ++block) {
    if (profile.block_role[block] != BlockKind::layer) continue;
    const BlockProfile& bp = profile.kinds[static_cast<std::size_t>(profile.block_kind[block])];
    profile.module_recompute_flops[static_cast<std::size_t>(RecomputeModule::core_attn)] += bp.core_attention_flops_per_sample;
    for (const GemmWork& g : bp.gemms) {
      if (g.module != RecomputeModule::none) {
        profile.module_recompute_flops[static_cast<std::size_t>(g.module)] += 2 * g.rows_per_sample * g.n * g.k * g.batch;
      }
    }
  }
  for (std::size_t i = 0; i < profile.layer_blocks.size(); ++i) {
    const int kind = profile.block_kind[static_cast<std::size_t>(profile.layer_blocks[i])];
    if (i == 0) {
      profile.uniform_layer_kind = kind;
    } else if (kind != profile.uniform_layer_kind) {
      profile.uniform_layer_kind = -1;
      break;
    }
  }
  return profile;
}

double recompute_flops_per_sample(const ModelProfile& profile, Recompute recompute, Attention attention) {
  double flops = 0;
  const bool fused = attention == Attention::fused;
  for (std::size_t block = 0; block < profile.block_kind.size(); ++block) {
    if (profile.block_role[block] != BlockKind::layer) continue;
    const BlockProfile& bp = profile.kinds[static_cast<std::size_t>(profile.block_kind[block])];
    if (recompute == Recompute::selective && !fused) flops += bp.core_attention_flops_per_sample;
    // A causal fused kernel runs half of the score matrix: its forward and backward (3x the forward's
    // core FLOPs, which model FLOPs count whole) do half, and the Q K^T its backward recomputes too.
    const double causal_skip = fused ? bp.fused_attention_flops_per_sample : 0;  // the half the kernel runs
    if (fused) flops += bp.attention_scores_flops_per_sample / 2 - 3 * causal_skip;
    if (recompute == Recompute::full)
      flops += bp.matmul_forward_flops_per_sample + bp.padding_forward_flops_per_sample - causal_skip;
    if (recompute == Recompute::selective_op) {
      for (const GemmWork& g : bp.gemms) {
        if (!(fused && g.core_attention)) flops += 2 * g.rows_per_sample * g.n * g.k * g.batch * g.op_sac_recomputed;
      }
    }
  }
  return flops;
}

double recompute_flops_per_sample(const ModelProfile& profile, const Plan& plan) {
  double flops = profile.recompute_flops[static_cast<int>(plan.recompute)][attention_index(plan.attention)];
  if (plan.recompute != Recompute::selective) return flops;
  if (plan.attention == Attention::unfused && !recomputes(plan, RecomputeModule::core_attn)) {
    flops -= profile.module_recompute_flops[static_cast<std::size_t>(RecomputeModule::core_attn)];
  }
  for (int m = static_cast<int>(RecomputeModule::layernorm); m < kRecomputeModules; ++m) {
    if (recomputes(plan, static_cast<RecomputeModule>(m))) flops += profile.module_recompute_flops[m];
  }
  return flops;
}

}  // namespace meshplan
