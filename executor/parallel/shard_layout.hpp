// What one tensor-parallel rank holds of each transformer tensor, grouped
// into the units the runtime gathers, reduces and updates together (one unit
// per transformer layer, plus wte, wpe with learned positions, ln_f, and
// lm_head when the output layer is not tied). A unit is a flat buffer: the
// same idea as parameters.hpp's one flat buffer, cut where FSDP gathers and
// where pipeline stages split the model.
//
// Built from the ShardingSpec (model/sharding_spec.hpp), the one answer to
// "which device holds which block of which tensor": each tensor names the
// spec tensor it is (a part of), and its local extent along the dimension tp
// splits is the spec's block extent for this tp rank. What the spec does not
// say is how this runtime lays a block out, so a LocalTensor carries the
// model's TpSplit (model/layer_graph.hpp: columns = the GEMM's output n,
// rows = its input k) plus a TpPacking. Weights are stored [out, in]
// (parameters.hpp), so columns split stored dimension 0 and rows dimension 1.
//
// Megatron-LM's tensor parallelism (Shoeybi et al. 2019, Sec. 3):
//   qkv.w [Q+2K, C], .b         columns, by heads in parts: rank r holds the
//                              rows of its NH/tp query heads and of its
//                              KVH/tp key and value heads, packed
//                              [q_r; k_r; v_r] as attention expects; when
//                              tp does not divide the kv heads, every rank
//                              holds all of them ([q_r; k; v]: the spec's
//                              attn.kv is whole), and their gradients are
//                              summed over tp
//   attn_out.w [C, Q]          rows: the input columns of rank r's heads
//   fc.w [F, C], fc.b [F]      columns: rows [r F/tp, (r+1) F/tp); gated
//                              ([2F, C]: gate rows, then up rows) in two
//                              parts, packed [gate_r; up_r]
//   fc_out.w [C, F]            rows: columns [r F/tp, (r+1) F/tp)
//   wte [V, C], lm_head.w      columns (vocabulary-parallel embedding and
//                              output layer), padded: rows [r Vp, (r+1) Vp)
//                              with Vp = ceil(V / tp), the spec's largest
//                              block; rows past V are padding (zero, never
//                              looked up, masked out of the softmax)
//   wpe, ln*.w/b, attn_out.b, fc_out.b, ln_f  none: whole on every tp rank
//
// The data-parallel axes shard a unit as one flat buffer (FSDP's flat
// parameter) over the group data_sharding names, which reads the spec's rule
// (model/model_states.hpp); the spec's per-dimension data blocks are the
// same elements in total over that group, cut differently.
//
// defines: TpPacking, TpPart, LocalTensor, UnitLayout, TpShape, tp_shape, wte_unit,
//          wpe_unit, layer_unit, lnf_unit, head_unit, global_row, global_col,
//          extract_shard, insert_shard, DataSharding, data_sharding, data_sharding_problems
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/layer_graph.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"
#include "model/problem.hpp"

namespace meshplan::exec::parallel {

// How a tp rank's block of the split dimension lies in the global tensor.
enum class TpPacking : std::uint8_t {
  contiguous,    // block r of the split dimension, in order
  parts,         // the dimension is parts laid end to end (q, k, v; gate, up), each split over
                 // tp; the local blocks packed part after part ([q_r; k_r; v_r])
  vocab_padded,  // Vp = ceil(V / tp) rows on every rank; rows past V are zero padding
};

// One part of a TpPacking::parts dimension (q, k, v; gate, up).
struct TpPart {
  std::int64_t extent = 0;  // global rows
  std::int64_t local = 0;   // this rank's rows: extent / tp, or extent when whole
  bool whole = false;       // tp > 1 and every tp rank holds it all (key/value heads tp does not divide)
  std::string spec_tensor;  // the ShardingSpec tensor it is (part of): "layer0.attn.kv"
};

struct LocalTensor {
  std::string name;                        // the global tensor's name ("layer0.qkv.w")
  std::vector<std::int64_t> global_shape;  // as parameter_layout() has it, [out, in] for weights
  std::int64_t rows = 0;                   // local extents of the stored matrix; vectors are [rows, 1]
  std::int64_t cols = 1;
  TpSplit split = TpSplit::none;           // columns: stored dim 0 split; rows: stored dim 1 split
  TpPacking packing = TpPacking::contiguous;
  std::vector<TpPart> parts;               // TpPacking::parts, in order
  std::int64_t offset = 0;                 // first element in its unit's buffer
  std::string spec_tensor;                 // the ShardingSpec tensor ("layer0.mlp.w_in"; of qkv, the first part's)
  std::vector<int> spec_dims;              // per stored dimension, the spec dimension it runs along

  std::int64_t elements() const { return rows * cols; }
  // AdamW decays matrices and embeddings only (rank >= 2), as the single-rank trainer does.
  bool decays() const { return global_shape.size() >= 2; }
  // Element ranges [begin, end) in the unit's buffer of the whole parts: held
  // alike by every tp rank, each computing a partial gradient of them.
  std::vector<std::pair<std::int64_t, std::int64_t>> whole_part_ranges() const;
};

struct UnitLayout {
  std::string name;  // "wte", "wpe", "layer3", "ln_f", "lm_head"
  std::vector<LocalTensor> tensors;
  std::int64_t elements = 0;
};

// The model's dimensions and this rank's place on the tp axis. The local
// widths are the ShardingSpec's blocks as layer_unit lays them out (tp_shape
// reads them from a layer unit), so no tp split is restated here.
struct TpShape {
  TransformerDims dims;            // what the ShardingSpec is asked about
  std::int64_t vocab = 0;          // V
  std::int64_t vocab_local = 0;    // Vp = ceil(V / tp): rows of the local wte, padding included
  std::int64_t max_seq_len = 0;    // rows of wpe
  std::int64_t channels = 0;       // C
  std::int64_t ffn = 0;            // F
  std::int64_t heads = 0;          // NH
  std::int64_t kv_heads = 0;       // KVH (= NH without grouped-query attention)
  std::int64_t head_dim = 0;       // D
  std::int64_t tp = 1;
  std::int64_t tp_rank = 0;
  // This rank's widths (tp_shape sets them from layer_unit): attn_out.w's
  // columns, qkv.w's rows, fc_out.w's columns, fc.w's rows.
  std::int64_t q_width = 0, qkv_width = 0, ffn_width = 0, fc_width = 0;

  std::int64_t heads_local() const { return q_width / head_dim; }
  // Key/value heads on this rank: KVH / tp, or all KVH when tp does not divide them (replicated).
  std::int64_t kv_heads_local() const { return (qkv_width - q_width) / (2 * head_dim); }
  bool kv_replicated() const { return tp > 1 && kv_heads_local() == kv_heads; }
  std::int64_t q_head_begin() const { return tp_rank * heads_local(); }  // global index of the first query head
  // How this rank's query heads find their key/value head (kernels/cpu/attention.hpp's gqa_attention_*):
  // local query head h reads local kv head (kv_head_offset() + h) / kv_group(). The offset is the first
  // query head's global index when tp replicates the kv heads, else 0 (each rank holds its group's kv heads).
  std::int64_t kv_group() const { return heads / kv_heads; }
  std::int64_t kv_head_offset() const { return kv_replicated() ? q_head_begin() : 0; }
  std::int64_t q_local() const { return q_width; }  // attention output width on this rank
  std::int64_t qkv_local() const { return qkv_width; }
  std::int64_t ffn_local() const { return ffn_width; }
  std::int64_t fc_local() const { return fc_width; }  // fc's output width
  bool gated() const { return dims.feed_forward != FeedForward::gelu; }
  bool rms() const { return dims.norm == Norm::rmsnorm; }
  bool bias() const { return dims.bias; }
  bool learned_positions() const { return dims.positions == Positions::learned; }
  bool rotary() const { return dims.positions == Positions::rotary; }
  bool tied() const { return dims.tied_embeddings; }
  std::int64_t vocab_begin() const { return tp_rank * vocab_local; }
  // Real (non-padding) rows of this rank's wte shard.
  std::int64_t vocab_real() const;
};

TpShape tp_shape(const TransformerDims& dims, std::int64_t tp, std::int64_t tp_rank);

UnitLayout wte_unit(const TpShape& s);
UnitLayout wpe_unit(const TpShape& s);
UnitLayout layer_unit(const TpShape& s, std::int64_t layer);
UnitLayout lnf_unit(const TpShape& s);
UnitLayout head_unit(const TpShape& s);  // lm_head.w: the untied output layer

// The global row of local row i (-1 for vocabulary padding), and the global column of local column j.
std::int64_t global_row(const LocalTensor& tensor, const TpShape& s, std::int64_t i);
std::int64_t global_col(const LocalTensor& tensor, const TpShape& s, std::int64_t j);

// local = this rank's block of the full tensor `global` (row-major, global_shape); padding rows get 0.
void extract_shard(const LocalTensor& tensor, const TpShape& s, const float* global, float* local);
// Writes this rank's block into the full tensor (padding rows are dropped);
// whole parts only when `whole_parts` (false: leave them to tp rank 0's copy).
void insert_shard(const LocalTensor& tensor, const TpShape& s, const float* local, float* global, bool whole_parts = true);

// Which model states the data-parallel ranks shard, and over which axis's
// group: fsdp when fsdp > 1 (every state), else dp for the states ZeRO
// shards (zero_shards). Axis sizes may be 1. The executor runs one sharding
// group, so ZeRO on dp together with fsdp > 1 is refused before this is asked.
struct DataSharding {
  Axis axis = Axis::dp;
  bool parameters = false, gradients = false, optimizer = false;
};
DataSharding data_sharding(const Plan& plan);
// The data-parallel meshes data_sharding cannot describe (ZeRO on dp with
// fsdp > 1), as errors naming "zero"; asked by every trainer before data_sharding.
Problems data_sharding_problems(const Plan& plan);

}  // namespace meshplan::exec::parallel
