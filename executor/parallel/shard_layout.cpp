// Unit layouts list their tensors in parameter_layout()'s order, so a unit
// on one tp rank has the same offsets as on every other (equal splits, the
// vocabulary padded): FSDP shards and the tensor-parallel reduction of
// replicated gradients line up element for element across tp ranks.
#include "executor/parallel/shard_layout.hpp"

#include <algorithm>
#include <cassert>

namespace meshplan::exec::parallel {
namespace {

void add(UnitLayout& unit, std::string name, std::vector<std::int64_t> global_shape, std::int64_t rows,
         std::int64_t cols, TpSplit split) {
  LocalTensor t;
  t.name = std::move(name);
  t.global_shape = std::move(global_shape);
  t.rows = rows;
  t.cols = cols;
  t.split = split;
  t.offset = unit.elements;
  unit.elements += t.elements();
  unit.tensors.push_back(std::move(t));
}

}  // namespace

std::int64_t TpShape::vocab_real() const {
  return std::clamp<std::int64_t>(vocab - vocab_begin(), 0, vocab_local);
}

TpShape tp_shape(const TransformerDims& dims, std::int64_t tp, std::int64_t tp_rank) {
  TpShape s;
  s.vocab = dims.vocab;
  s.vocab_local = (dims.vocab + tp - 1) / tp;
  s.max_seq_len = dims.seq_len;
  s.channels = dims.hidden;
  s.ffn = dims.ffn;
  s.heads = dims.heads;
  s.tp = tp;
  s.tp_rank = tp_rank;
  return s;
}

UnitLayout wte_unit(const TpShape& s) {
  UnitLayout unit{"wte", {}, 0};
  add(unit, "wte", {s.vocab, s.channels}, s.vocab_local, s.channels, TpSplit::vocab_rows);
  return unit;
}

UnitLayout wpe_unit(const TpShape& s) {
  UnitLayout unit{"wpe", {}, 0};
  add(unit, "wpe", {s.max_seq_len, s.channels}, s.max_seq_len, s.channels, TpSplit::replicated);
  return unit;
}

UnitLayout layer_unit(const TpShape& s, std::int64_t layer) {
  const std::int64_t C = s.channels, F = s.ffn, Ct = C / s.tp, Ft = F / s.tp;
  const std::string p = "layer" + std::to_string(layer) + ".";
  UnitLayout unit{"layer" + std::to_string(layer), {}, 0};
  add(unit, p + "ln1.w", {C}, C, 1, TpSplit::replicated);
  add(unit, p + "ln1.b", {C}, C, 1, TpSplit::replicated);
  add(unit, p + "qkv.w", {3 * C, C}, 3 * Ct, C, TpSplit::qkv_rows);
  add(unit, p + "qkv.b", {3 * C}, 3 * Ct, 1, TpSplit::qkv_rows);
  add(unit, p + "attn_out.w", {C, C}, C, Ct, TpSplit::columns);
  add(unit, p + "attn_out.b", {C}, C, 1, TpSplit::replicated);
  add(unit, p + "ln2.w", {C}, C, 1, TpSplit::replicated);
  add(unit, p + "ln2.b", {C}, C, 1, TpSplit::replicated);
  add(unit, p + "fc.w", {F, C}, Ft, C, TpSplit::rows);
  add(unit, p + "fc.b", {F}, Ft, 1, TpSplit::rows);
  add(unit, p + "fc_out.w", {C, F}, C, Ft, TpSplit::columns);
  add(unit, p + "fc_out.b", {C}, C, 1, TpSplit::replicated);
  return unit;
}

UnitLayout lnf_unit(const TpShape& s) {
  UnitLayout unit{"ln_f", {}, 0};
  add(unit, "ln_f.w", {s.channels}, s.channels, 1, TpSplit::replicated);
  add(unit, "ln_f.b", {s.channels}, s.channels, 1, TpSplit::replicated);
  return unit;
}

std::int64_t global_row(const LocalTensor& t, const TpShape& s, std::int64_t i) {
  switch (t.split) {
    case TpSplit::replicated:
    case TpSplit::columns: return i;
    case TpSplit::rows: return s.tp_rank * t.rows + i;
    case TpSplit::qkv_rows: {
      // Local rows are [q_r; k_r; v_r], each C/tp rows; part k of the global tensor starts at k C.
      const std::int64_t per_part = t.rows / 3, part = i / per_part, within = i % per_part;
      return part * s.channels + s.tp_rank * per_part + within;
    }
    case TpSplit::vocab_rows: {
      const std::int64_t row = s.vocab_begin() + i;
      return row < s.vocab ? row : -1;
    }
  }
  return -1;
}

std::int64_t global_col(const LocalTensor& t, const TpShape& s, std::int64_t j) {
  return t.split == TpSplit::columns ? s.tp_rank * t.cols + j : j;
}

void extract_shard(const LocalTensor& t, const TpShape& s, const float* global, float* local) {
  const std::int64_t global_cols = t.global_shape.size() == 2 ? t.global_shape[1] : 1;
  for (std::int64_t i = 0; i < t.rows; ++i) {
    const std::int64_t gi = global_row(t, s, i);
    for (std::int64_t j = 0; j < t.cols; ++j)
      local[i * t.cols + j] = gi < 0 ? 0.0f : global[gi * global_cols + global_col(t, s, j)];
  }
}

void insert_shard(const LocalTensor& t, const TpShape& s, const float* local, float* global) {
  const std::int64_t global_cols = t.global_shape.size() == 2 ? t.global_shape[1] : 1;
  for (std::int64_t i = 0; i < t.rows; ++i) {
    const std::int64_t gi = global_row(t, s, i);
    if (gi < 0) continue;
    for (std::int64_t j = 0; j < t.cols; ++j) global[gi * global_cols + global_col(t, s, j)] = local[i * t.cols + j];
  }
}

}  // namespace meshplan::exec::parallel
