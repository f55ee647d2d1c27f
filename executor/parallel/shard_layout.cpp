// Unit layouts list their tensors in parameter_layout()'s order, so a unit
// on one tp rank has the same offsets as on every other (equal splits, the
// vocabulary padded): FSDP shards and the tensor-parallel reduction of
// replicated gradients line up element for element across tp ranks. Local
// extents come from the ShardingSpec of a mesh of tp alone, asked at this
// rank's tp coordinate; the data axes never split a tensor here (they shard
// the flat unit instead), so they play no part.
#include "executor/parallel/shard_layout.hpp"

#include <cassert>

#include "executor/model/parameters.hpp"
#include "model/model_states.hpp"
#include "model/sharding_spec.hpp"

namespace meshplan::exec::parallel {
namespace {

// The transformer this runtime trains (parameters.hpp) with the given
// dimensions: the model the ShardingSpec is asked about.
ModelSpec layout_model(const TransformerDims& dims) {
  ModelSpec model;
  model.kind = ModelKind::transformer;
  model.transformer = dims;
  model.transformer.experts = 0;
  return model;
}

// A tensor of a unit: its parameter_layout name and shape, how tp splits it,
// and which spec tensor and dimensions it is.
struct TensorSource {
  std::string name;
  std::vector<std::int64_t> global_shape;
  TpSplit split = TpSplit::none;
  TpPacking packing = TpPacking::contiguous;
  std::string spec_tensor;
  std::vector<int> spec_dims;
  std::vector<std::pair<std::int64_t, std::string>> parts = {};  // TpPacking::parts: global rows, spec tensor
};

// The spec of `spec_tensor`'s parameters on a mesh of tp alone.
ShardingSpec tp_spec(const TpShape& s, const std::string& spec_tensor, Plan& plan) {
  plan.mesh.axes = {{Axis::tp, s.tp}};
  const Loaded<ShardingSpec> spec = sharding_spec(layout_model(s.dims), plan, spec_tensor, TensorRole::parameters);
  assert(spec.ok() && "the executor asks only for tensors its models have");
  return spec.value;
}

// The extents of tp rank `tp_rank`'s block of `spec_tensor`, one per spec dimension.
std::vector<std::int64_t> tp_block(const TpShape& s, const std::string& spec_tensor, std::int64_t tp_rank) {
  Plan plan;
  const ShardingSpec spec = tp_spec(s, spec_tensor, plan);
  const auto shape = block_shape(spec, plan.mesh, tp_rank);
  assert(shape.has_value());
  return *shape;
}

// A part of `extent` rows of spec dimension `dim` of `spec_tensor`: its share
// of the spec's block (the parts of one spec tensor split alike).
TpPart tp_part(const TpShape& s, std::int64_t extent, const std::string& spec_tensor, int dim) {
  Plan plan;
  const ShardingSpec spec = tp_spec(s, spec_tensor, plan);
  const auto d = static_cast<std::size_t>(dim);
  TpPart part;
  part.extent = extent;
  part.local = extent * (*block_shape(spec, plan.mesh, s.tp_rank))[d] / spec.dims[d].size;
  part.whole = s.tp > 1 && spec.splits(plan.mesh, d) == 1;
  part.spec_tensor = spec_tensor;
  return part;
}

void add(UnitLayout& unit, const TpShape& s, TensorSource source) {
  LocalTensor t;
  t.name = std::move(source.name);
  t.global_shape = std::move(source.global_shape);
  t.split = source.split;
  t.packing = source.packing;
  t.spec_tensor = std::move(source.spec_tensor);
  t.spec_dims = std::move(source.spec_dims);
  // Stored dimension d holds the spec's block extent when tp splits it, the whole extent otherwise.
  const int split_dim = t.split == TpSplit::columns ? 0 : t.split == TpSplit::rows ? 1 : -1;
  std::vector<std::int64_t> local = t.global_shape;
  if (t.packing == TpPacking::parts) {
    // Part by part: the q, k, v (gate, up) blocks of their spec tensors, packed one after another.
    const int dim = t.spec_dims[static_cast<std::size_t>(split_dim)];
    local[static_cast<std::size_t>(split_dim)] = 0;
    for (const auto& [extent, spec_tensor] : source.parts) {
      t.parts.push_back(tp_part(s, extent, spec_tensor, dim));
      local[static_cast<std::size_t>(split_dim)] += t.parts.back().local;
    }
  } else if (split_dim >= 0) {
    // Padding gives every rank the largest block (rank 0's), so units line up across tp.
    const std::int64_t rank = t.packing == TpPacking::vocab_padded ? 0 : s.tp_rank;
    local[static_cast<std::size_t>(split_dim)] =
        tp_block(s, t.spec_tensor, rank)[static_cast<std::size_t>(t.spec_dims[static_cast<std::size_t>(split_dim)])];
  }
  t.rows = local[0];
  t.cols = local.size() == 2 ? local[1] : 1;
  t.offset = unit.elements;
  unit.elements += t.elements();
  unit.tensors.push_back(std::move(t));
}

}  // namespace

std::int64_t TpShape::vocab_real() const { return split_extents(vocab, tp)[static_cast<std::size_t>(tp_rank)]; }

TpShape tp_shape(const TransformerDims& dims, std::int64_t tp, std::int64_t tp_rank) {
  TpShape s;
  s.dims = dims;
  s.vocab = dims.vocab;
  s.vocab_local = split_extents(dims.vocab, tp).front();
  s.max_seq_len = dims.seq_len;
  s.channels = dims.hidden;
  s.ffn = dims.ffn;
  s.heads = dims.heads;
  s.kv_heads = dims.key_value_heads();
  s.head_dim = dims.head_size();
  s.tp = tp;
  s.tp_rank = tp_rank;
  // The local widths, as the spec's blocks lay them out in a layer's unit.
  for (const LocalTensor& t : layer_unit(s, 0).tensors) {
    if (t.name.ends_with("qkv.w")) s.qkv_width = t.rows;
    if (t.name.ends_with("attn_out.w")) s.q_width = t.cols;
    if (t.name.ends_with("fc.w")) s.fc_width = t.rows;
    if (t.name.ends_with("fc_out.w")) s.ffn_width = t.cols;
  }
  return s;
}

UnitLayout wte_unit(const TpShape& s) {
  UnitLayout unit{"wte", {}, 0};
  add(unit, s, {"wte", {s.vocab, s.channels}, TpSplit::columns, TpPacking::vocab_padded, "embedding.tokens", {0, 1}});
  return unit;
}

UnitLayout wpe_unit(const TpShape& s) {
  UnitLayout unit{"wpe", {}, 0};
  add(unit, s, {"wpe", {s.max_seq_len, s.channels}, TpSplit::none, TpPacking::contiguous, "embedding.positions", {0, 1}});
  return unit;
}

// The tensors in parameter_layout()'s order, optional ones (norm and linear
// biases) only where the model has them.
UnitLayout layer_unit(const TpShape& s, std::int64_t layer) {
  const std::int64_t C = s.channels, F = s.ffn, Q = s.heads * s.head_dim, K = s.kv_heads * s.head_dim;
  const std::string p = "layer" + std::to_string(layer) + ".";
  const std::vector<std::pair<std::int64_t, std::string>> qkv_parts = {{Q, p + "attn.q"}, {K, p + "attn.kv"}, {K, p + "attn.kv"}};
  const std::vector<std::pair<std::int64_t, std::string>> fc_parts = {{F, p + "mlp.w_in"}, {F, p + "mlp.w_in"}};
  const std::int64_t QKV = Q + 2 * K, F_in = s.gated() ? 2 * F : F;
  UnitLayout unit{"layer" + std::to_string(layer), {}, 0};
  const TpPacking contiguous = TpPacking::contiguous, parts = TpPacking::parts;
  const TpPacking fc_packing = s.gated() ? parts : contiguous;
  const std::vector<std::pair<std::int64_t, std::string>> none;
  const bool norm_bias = !s.rms(), bias = s.bias();
  // Spec dimensions: ln [norm]; attn.q [hidden, q]; attn.kv [hidden, 2kv]; attn.out [q, hidden]; mlp.w_in [hidden,
  // ffn]; mlp.w_out [ffn, hidden]. qkv's parts name their spec tensors; the tensor names the first.
  add(unit, s, {p + "ln1.w", {C}, TpSplit::none, contiguous, p + "ln1", {0}});
  if (norm_bias) add(unit, s, {p + "ln1.b", {C}, TpSplit::none, contiguous, p + "ln1", {0}});
  add(unit, s, {p + "qkv.w", {QKV, C}, TpSplit::columns, parts, p + "attn.q", {1, 0}, qkv_parts});
  if (bias) add(unit, s, {p + "qkv.b", {QKV}, TpSplit::columns, parts, p + "attn.q", {1}, qkv_parts});
  add(unit, s, {p + "attn_out.w", {C, Q}, TpSplit::rows, contiguous, p + "attn.out", {1, 0}});
  if (bias) add(unit, s, {p + "attn_out.b", {C}, TpSplit::none, contiguous, p + "attn.out", {1}});
  add(unit, s, {p + "ln2.w", {C}, TpSplit::none, contiguous, p + "ln2", {0}});
  if (norm_bias) add(unit, s, {p + "ln2.b", {C}, TpSplit::none, contiguous, p + "ln2", {0}});
  add(unit, s, {p + "fc.w", {F_in, C}, TpSplit::columns, fc_packing, p + "mlp.w_in", {1, 0}, s.gated() ? fc_parts : none});
  if (bias) add(unit, s, {p + "fc.b", {F_in}, TpSplit::columns, fc_packing, p + "mlp.w_in", {1}, s.gated() ? fc_parts : none});
  add(unit, s, {p + "fc_out.w", {C, F}, TpSplit::rows, contiguous, p + "mlp.w_out", {1, 0}});
  if (bias) add(unit, s, {p + "fc_out.b", {C}, TpSplit::none, contiguous, p + "mlp.w_out", {1}});
  return unit;
}

UnitLayout lnf_unit(const TpShape& s) {
  UnitLayout unit{"ln_f", {}, 0};
  add(unit, s, {"ln_f.w", {s.channels}, TpSplit::none, TpPacking::contiguous, "head.norm", {0}});
  if (!s.rms()) add(unit, s, {"ln_f.b", {s.channels}, TpSplit::none, TpPacking::contiguous, "head.norm", {0}});
  return unit;
}

UnitLayout head_unit(const TpShape& s) {
  UnitLayout unit{"lm_head", {}, 0};
  add(unit, s, {"lm_head.w", {s.vocab, s.channels}, TpSplit::columns, TpPacking::vocab_padded, "head.output", {0, 1}});
  return unit;
}

std::int64_t global_row(const LocalTensor& t, const TpShape& s, std::int64_t i) {
  if (t.split != TpSplit::columns) return i;  // stored dimension 0 is whole
  switch (t.packing) {
    case TpPacking::contiguous: return s.tp_rank * t.rows + i;
    case TpPacking::parts: {
      // Local rows are the parts' blocks one after another ([q_r; k_r; v_r]); part p's block is
      // rows [r n_p / tp, (r + 1) n_p / tp) of the p-th part (all its rows when whole), which
      // starts at the sum of the earlier parts.
      std::int64_t local_begin = 0, global_begin = 0;
      for (const TpPart& part : t.parts) {
        if (i < local_begin + part.local) return global_begin + (part.whole ? 0 : s.tp_rank * part.local) + (i - local_begin);
        local_begin += part.local;
        global_begin += part.extent;
      }
      return -1;
    }
    case TpPacking::vocab_padded: {
      const std::int64_t row = s.vocab_begin() + i;
      return row < s.vocab ? row : -1;
    }
  }
  return -1;
}

std::int64_t global_col(const LocalTensor& t, const TpShape& s, std::int64_t j) {
  return t.split == TpSplit::rows ? s.tp_rank * t.cols + j : j;
}

void extract_shard(const LocalTensor& t, const TpShape& s, const float* global, float* local) {
  const std::int64_t global_cols = t.global_shape.size() == 2 ? t.global_shape[1] : 1;
  for (std::int64_t i = 0; i < t.rows; ++i) {
    const std::int64_t gi = global_row(t, s, i);
    for (std::int64_t j = 0; j < t.cols; ++j)
      local[i * t.cols + j] = gi < 0 ? 0.0f : global[gi * global_cols + global_col(t, s, j)];
  }
}

std::vector<std::pair<std::int64_t, std::int64_t>> LocalTensor::whole_part_ranges() const {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  std::int64_t row = 0;
  for (const TpPart& part : parts) {
    if (part.whole) out.emplace_back(offset + row * cols, offset + (row + part.local) * cols);
    row += part.local;
  }
  return out;
}

void insert_shard(const LocalTensor& t, const TpShape& s, const float* local, float* global, bool whole_parts) {
  const std::int64_t global_cols = t.global_shape.size() == 2 ? t.global_shape[1] : 1;
  std::vector<bool> skip(static_cast<std::size_t>(t.rows), false);
  if (!whole_parts) {
    for (const auto& [begin, end] : t.whole_part_ranges())
      for (std::int64_t i = (begin - t.offset) / t.cols; i < (end - t.offset) / t.cols; ++i) skip[static_cast<std::size_t>(i)] = true;
  }
  for (std::int64_t i = 0; i < t.rows; ++i) {
    const std::int64_t gi = global_row(t, s, i);
    if (gi < 0 || skip[static_cast<std::size_t>(i)]) continue;
    for (std::int64_t j = 0; j < t.cols; ++j) global[gi * global_cols + global_col(t, s, j)] = local[i * t.cols + j];
  }
}

DataSharding data_sharding(const Plan& plan) {
  DataSharding out;
  const bool fsdp = plan.mesh.size(Axis::fsdp) > 1;
  out.axis = fsdp ? Axis::fsdp : Axis::dp;
  out.parameters = fsdp || zero_shards(plan.zero_stage, ModelState::parameters);
  out.gradients = fsdp || zero_shards(plan.zero_stage, ModelState::gradients);
  out.optimizer = fsdp || zero_shards(plan.zero_stage, ModelState::optimizer);
  return out;
}

Problems data_sharding_problems(const Plan& plan) {
  if (plan.zero_stage > 0 && plan.mesh.size(Axis::fsdp) > 1 && plan.mesh.size(Axis::dp) > 1)
    return {{Severity::error, "zero",
             "ZeRO on dp together with fsdp > 1 is not run by the executor; shard over fsdp and keep zero 0 on dp"}};
  return {};
}

}  // namespace meshplan::exec::parallel
