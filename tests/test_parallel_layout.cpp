// What each tensor-parallel rank holds of each GPT tensor (shard_layout.hpp),
// checked without MPI: the slices of all tp ranks put back together give
// every full tensor exactly; q, k and v rows of one head stay on one rank;
// the vocabulary pads the last shard with zero rows; every rank's unit has
// the same layout. The numerical equivalence of whole plans is the MPI
// matrix's job (tests/parallel/parallel_matrix.cpp).
#include <gtest/gtest.h>

#include <vector>

#include "executor/model/parameters.hpp"
#include "executor/parallel/shard_layout.hpp"

namespace {

using namespace meshplan;
using namespace meshplan::exec::parallel;

TransformerDims dims() {
  TransformerDims t;
  t.layers = 1;
  t.hidden = 8;
  t.heads = 4;
  t.ffn = 12;
  t.vocab = 11;  // odd: tp 2 holds 6 + 5 rows and one padding row
  t.seq_len = 3;
  return t;
}

std::vector<UnitLayout> units(const TpShape& s) { return {wte_unit(s), wpe_unit(s), layer_unit(s, 0), lnf_unit(s)}; }

TEST(ParallelLayout, SlicesOfAllTpRanksRebuildEveryTensor) {
  ModelSpec spec;
  spec.kind = ModelKind::transformer;
  spec.transformer = dims();
  spec.transformer.positions = Positions::learned;
  spec.transformer.tied_embeddings = true;
  const auto layout = exec::parameter_layout(spec);
  ASSERT_TRUE(layout.ok());
  std::vector<float> full(static_cast<std::size_t>(layout.value.total_elements));
  for (std::size_t i = 0; i < full.size(); ++i) full[i] = static_cast<float>(i + 1);  // every element distinct, non-zero

  for (const std::int64_t tp : {1, 2, 4}) {
    std::vector<float> rebuilt(full.size(), 0.0f);
    std::int64_t covered = 0;
    for (std::int64_t r = 0; r < tp; ++r) {
      const TpShape s = tp_shape(spec.transformer, tp, r);
      for (const UnitLayout& unit : units(s)) {
        std::vector<float> local(static_cast<std::size_t>(unit.elements), -1.0f);
        for (const LocalTensor& t : unit.tensors) {
          const std::int64_t at = layout.value.at(t.name).offset;
          extract_shard(t, s, full.data() + at, local.data() + t.offset);
          insert_shard(t, s, local.data() + t.offset, rebuilt.data() + at);
          if (t.split != TpSplit::replicated || r == 0) covered += t.elements();
        }
        for (const float v : local) EXPECT_NE(v, -1.0f) << unit.name << " has an unwritten element";
      }
    }
    EXPECT_EQ(rebuilt, full) << "tp " << tp;
    // Each element once, plus the vocabulary padding rows.
    const std::int64_t padding = (tp_shape(spec.transformer, tp, 0).vocab_local * tp - spec.transformer.vocab) * 8;
    EXPECT_EQ(covered, layout.value.total_elements + padding) << "tp " << tp;
  }
}

TEST(ParallelLayout, HeadsStayTogetherAndTheVocabularyIsPadded) {
  const TransformerDims t = dims();
  const TpShape s1 = tp_shape(t, 2, 1);
  const UnitLayout layer = layer_unit(s1, 0);
  const LocalTensor& qkv = layer.tensors[2];
  ASSERT_EQ(qkv.name, "layer0.qkv.w");
  ASSERT_EQ(qkv.rows, 12);  // 3 x C / tp
  // Rank 1 holds heads 2 and 3 (channels 4..7) of q, then of k, then of v.
  EXPECT_EQ(global_row(qkv, s1, 0), 4);
  EXPECT_EQ(global_row(qkv, s1, 3), 7);
  EXPECT_EQ(global_row(qkv, s1, 4), 12);
  EXPECT_EQ(global_row(qkv, s1, 8), 20);
  EXPECT_EQ(global_row(qkv, s1, 11), 23);
  const LocalTensor& attn_out = layer.tensors[4];
  EXPECT_EQ(attn_out.cols, 4);
  EXPECT_EQ(global_col(attn_out, s1, 0), 4);  // the same heads' input columns

  EXPECT_EQ(s1.vocab_local, 6);
  EXPECT_EQ(s1.vocab_real(), 5);
  const LocalTensor wte = wte_unit(s1).tensors[0];
  EXPECT_EQ(global_row(wte, s1, 4), 10);
  EXPECT_EQ(global_row(wte, s1, 5), -1);  // padding
  std::vector<float> full(static_cast<std::size_t>(11 * 8), 1.0f), local(static_cast<std::size_t>(6 * 8), -1.0f);
  extract_shard(wte, s1, full.data(), local.data());
  for (std::int64_t c = 0; c < 8; ++c) EXPECT_EQ(local[static_cast<std::size_t>(5 * 8 + c)], 0.0f);

  // Same layout on every tp rank: what FSDP shards and tp reductions rely on.
  const UnitLayout layer0 = layer_unit(tp_shape(t, 2, 0), 0);
  ASSERT_EQ(layer0.elements, layer.elements);
  for (std::size_t i = 0; i < layer.tensors.size(); ++i) EXPECT_EQ(layer0.tensors[i].offset, layer.tensors[i].offset);
}

}  // namespace
