// The layer graph: a model as ops (vertices) and the tensors between them
// (edges), in a Boost.Graph adjacency list. Each op knows, per sample (one
// sequence of seq_len tokens, or one image), its forward FLOPs, its parameters
// and how tensor parallelism splits them, and the tensors it saves for the
// backward pass. The memory model, the time model and pipeline partitioning
// all read this one description instead of re-deriving model shapes.
//
// Saved tensors follow Korthikanti et al. 2022, Sec. 4.1 and Table 2 (Sec. 5): every
// tensor is either inside a tensor-parallel region (split over tp) or in the
// region that only sequence parallelism splits; those recomputed by
// "selective" recompute (attention softmax/dropout) are flagged. The s x s
// tensors exist only under unfused attention; fused attention keeps per-row
// softmax statistics instead (plan.hpp, Attention).
#pragma once

#include <boost/graph/adjacency_list.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_spec.hpp"
#include "model/plan.hpp"

namespace meshplan {

// The loss's time is the fused cross-entropy today's fastest stacks run
// (torch.compile, Megatron's and llm.c's fused kernels): it reads the logits
// this many times forward (the max pass, then the exp-sum pass) and never
// writes fp32 logits; its backward is the generic 2x forward. The memory
// model keeps the eager loss's fp32 logits instead (docs/cost-model.md).
inline constexpr double kLossLogitPasses = 2;

enum class OpKind {
  gemm,              // dense matmul with weights (m x k) . (k x n)
  attention_scores,  // Q K^T, batched over heads
  attention_values,  // P V, batched over heads
  softmax,
  norm,
  elementwise,       // residual adds, dropout, ReLU, bias
  activation,        // transcendental activations: GELU, SiLU / SwiGLU
  embedding,         // table lookup
  cross_entropy,     // the loss; its traffic: kLossLogitPasses below
  conv,
  pool,
};

std::string to_string(OpKind kind);

// Which attention implementation keeps a saved tensor.
enum class KeptBy { both, unfused_attention, fused_attention };

struct SavedTensor {
  std::string what;                 // "softmax output"
  double elements_per_sample = 0;   // at the full sequence length, before any sharding
  double fixed_bytes_per_element = 0;  // 0: the activation dtype; 1: dropout mask; 4: fp32 logits
  bool tensor_parallel = false;     // split over tp; otherwise split only by sequence parallelism
  bool selective = false;           // not stored under selective recompute (recomputed)
  KeptBy kept_by = KeptBy::both;
  bool key_value = false;           // keys or values: split over kv_tp_split(LayerGraph::kv_heads, tp), not tp
  // Kept only where tp > 1 with sequence parallelism, around a row-parallel
  // matmul's reduce-scatter: its output (split like the residual stream) or,
  // with `partial_sums`, the matmul's output before it, whole on every tp
  // rank (split over cp only). Op-level checkpointing keeps both
  // (Op::op_sac_kept).
  bool reduce_scatter = false;
  bool partial_sums = false;
  // The logits the loss keeps: fixed_bytes_per_element (fp32 log-
  // probabilities) under the eager loss, the activation dtype under the fused
  // one (plan.hpp, Loss).
  bool loss_logits = false;
  // The module whose selective recompute drops it (Plan::recompute_modules;
  // `selective` above is core_attn's).
  RecomputeModule module = RecomputeModule::none;
};

struct GemmShape {  // per sample: rows scale with the sample's tokens
  double rows_per_sample = 0;   // m
  std::int64_t n = 0;           // output columns
  std::int64_t k = 0;           // reduction dimension
  std::int64_t batch = 1;       // independent matmuls (attention heads; routed experts, rows then per expert)
  std::int64_t kv_n = 0;        // of n, the key/value-head columns: split over kv_tp_split(kv_heads, tp), not tp
};

// Which GEMM dimension tensor parallelism divides (Megatron-LM): column-
// parallel layers split n, row-parallel split k, attention splits heads.
// `sequence`: the weights are whole on every tp rank (Megatron-Core's
// "duplicated" linears: latent attention's down-projections, the MoE router)
// and the rows are the sequence-parallel region's: each tp rank runs its own
// 1/tp of them under sequence parallelism, all of them without it.
enum class TpSplit { none, columns, rows, heads, sequence };

struct Op {
  std::string name;                 // "layer3.mlp.w_in"
  OpKind kind = OpKind::elementwise;
  int block = 0;                    // index into LayerGraph::blocks
  double forward_flops_per_sample = 0;
  double tp_split_parameters = 0;   // split over tp (column/row/vocab-parallel weights)
  double kv_parameters = 0;         // key/value-head weights: split over kv_tp_split(LayerGraph::kv_heads, tp)
  double replicated_parameters = 0; // copied on every tp rank (norms, row-parallel biases)
  double tied_parameters = 0;       // output layer tied to the embedding: held only where the embedding is not
  bool expert = false;              // parameters split over ep (mixture-of-experts weights)
  double output_elements_per_sample = 0;
  std::vector<SavedTensor> saved;
  GemmShape gemm;                   // for gemm, attention_scores, attention_values, conv
  TpSplit tp_split = TpSplit::none; // GEMMs: the dimension tp divides
  // Non-GEMM ops: true when the op works on a tp shard (inside Megatron's
  // f/g region); false when it runs on the whole tensor on every tp rank
  // unless sequence parallelism splits it.
  bool tensor_parallel_region = false;
  bool core_attention = false;      // recomputed by "selective" recompute (QK^T, softmax, dropout, PV)
  // The module whose selective recompute repeats this op's forward in the
  // backward (layernorm, mla_up_proj, moe_act, and the whole-module mlp and
  // shared_experts; core_attn is core_attention's).
  RecomputeModule module = RecomputeModule::none;
  // Elements per sample of an input from the sequence-parallel region that
  // this op, inside the tensor-parallel region, reads whole on every tp rank
  // without a column-parallel GEMM to gather it: all-gathered over tp in the
  // forward under sequence parallelism, its gradient reduce-scattered (all-
  // reduced without it). Latent attention's shared rotary key.
  double tp_gathered_input_elements_per_sample = 0;
  // Memory traffic of a memory-bound op in the forward pass, per sample:
  // elements read + written at the activation dtype, and bytes of fixed-width
  // data (1-byte dropout masks, fp32 logits).
  double memory_elements_per_sample = 0;
  double memory_fixed_bytes_per_sample = 0;
  // Attention geometry for core-attention ops (the fused kernel's shape).
  std::int64_t attention_heads = 0;
  std::int64_t head_dim = 0;
  // A GEMM that fp8 recipes keep in bf16 or fp32 though it has weights: the
  // MoE router (DeepSeek-V3 report, Sec. 3.3.1, "MoE gating modules";
  // Megatron-Core's TopKRouter is not a Transformer Engine module).
  bool keeps_precision = false;
  // A GEMM with weights (a linear or a convolution), not attention's QK^T or PV.
  bool has_weights() const { return kind == OpKind::gemm || kind == OpKind::conv; }
  // Priced as a GEMM (`gemm` holds its shape): the weighted ones and attention's QK^T and PV.
  bool gemm_like() const { return has_weights() || kind == OpKind::attention_scores || kind == OpKind::attention_values; }
  // torchtitan's op-level selective checkpointing (Recompute::selective_op),
  // in a layer block: the parts of this op's output it keeps, and the share
  // of this op's forward the backward repeats. Every op outside torchtitan's
  // save list (norms, activations, residual adds, unfused attention's bmm and
  // softmax, grouped expert matmuls) is repeated whole and keeps nothing. Of
  // the layer's matmuls, counted as torchtitan's Llama runs them (q, k, v, o,
  // then gate, up, down or in, out), every second one is repeated: k, o and
  // up (gated) or out (not gated); fused attention keeps its output and
  // softmax statistics. The block's input is kept too (the checkpoint's).
  // Under sequence parallelism the outputs of the tp reduce-scatters are on
  // the list too (o's and down's), and so are down's partial sums before it
  // (SavedTensor::reduce_scatter).
  std::vector<SavedTensor> op_sac_kept;
  double op_sac_recomputed = 1;
};

inline Op make_op(std::string name, OpKind kind, int block, bool expert = false) {
  Op op;
  op.name = std::move(name);
  op.kind = kind;
  op.block = block;
  op.expert = expert;
  return op;
}

struct TensorEdge {
  double elements_per_sample = 0;
};

using LayerGraphStorage = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, Op, TensorEdge>;
using OpId = LayerGraphStorage::vertex_descriptor;

enum class BlockKind { embedding, layer, head };

struct Block {
  std::string name;     // "embedding", "layer3", "head"
  BlockKind kind = BlockKind::layer;
  std::vector<OpId> ops;
};

struct LayerGraph {
  LayerGraphStorage graph;  // vertices are in execution (topological) order
  std::vector<Block> blocks;
  std::int64_t seq_len = 1;  // tokens per sample the per-sample figures assume
  std::int64_t kv_heads = 0; // key/value heads of the attention (0: none, or as many as the query heads)

  const Op& op(OpId id) const { return graph[id]; }
  std::size_t op_count() const { return boost::num_vertices(graph); }
  // Blocks that pipeline stages divide between them (transformer layers, MLP
  // linears, CNN residual blocks); the embedding goes with the first stage,
  // the head with the last.
  std::vector<int> layer_blocks() const;
  double parameter_count() const;  // tied weights counted once
  // Elements per sample of the tensors produced in blocks <= `block` and
  // consumed after it: what a pipeline stage boundary after `block` sends.
  double boundary_elements_per_sample(int block) const;
  // The largest tensor any cut between two layer blocks sends: the
  // pipeline's send/receive buffer size (the residual stream s x h for a
  // transformer, the widest hidden layer for an MLP).
  double largest_stage_boundary_elements_per_sample() const;

  OpId add_op(Op op);
  void connect(OpId from, OpId to);  // the producer's output feeds the consumer
  // Works out every block's boundary in one pass over the graph, so that the
  // two queries above cost O(1) (a search asks them per plan and per block:
  // unindexed, they walk the whole graph per block, quadratic in the layers).
  // The builders call it last; add_op and connect drop the index again.
  void index_boundaries();

  std::vector<double> boundary_index;  // per block, when indexed (else empty)
  double largest_boundary_index = 0;
};

// Whether attention `attention` keeps saved tensor `t` (plan.hpp, Attention).
inline bool kept_by(const SavedTensor& t, Attention attention) {
  if (t.kept_by == KeptBy::both) return true;
  return (t.kept_by == KeptBy::fused_attention) == (attention == Attention::fused);
}

// Whether tensor parallelism splits `op`'s output: column-parallel and
// head-parallel GEMMs, ops inside Megatron's tensor-parallel region.
inline bool output_split_by_tp(const Op& op) {
  if (op.tp_split == TpSplit::columns || op.tp_split == TpSplit::heads) return true;
  return op.tp_split == TpSplit::none && op.tensor_parallel_region;
}

// Builds the graph for a sequence length (ignored by MLPs and CNNs).
LayerGraph build_layer_graph(const ModelSpec& model, std::int64_t seq_len);

LayerGraph build_transformer_graph(const TransformerDims& dims, std::int64_t seq_len);
LayerGraph build_mlp_graph(const MlpDims& dims);
LayerGraph build_cnn_graph(const CnnDims& dims);

}  // namespace meshplan
