// The balanced uneven stage split (stage_partition.hpp): hand-computed
// answers, the exact split checked against every contiguous split of small
// cases, and the folded text the tables print.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "model/stage_partition.hpp"

namespace meshplan {
namespace {

using Counts = std::vector<std::int64_t>;

// Slowest stage of a split (chunks in order, chunk c on stage c mod pp).
double slowest_s(const std::vector<double>& layer_s, double embedding_s, double head_s, std::int64_t pp,
                 const Counts& per_chunk) {
  std::vector<double> stage_s(static_cast<std::size_t>(pp), 0.0);
  stage_s.front() += embedding_s;
  stage_s.back() += head_s;
  std::size_t next = 0;
  for (std::size_t c = 0; c < per_chunk.size(); ++c) {
    for (std::int64_t i = 0; i < per_chunk[c]; ++i) stage_s[c % static_cast<std::size_t>(pp)] += layer_s[next++];
  }
  return *std::max_element(stage_s.begin(), stage_s.end());
}

TEST(BalancedStageLayers, LlamaLikeLayersGiveTheEmbeddingAndHeadStagesOneLayerLess) {
  // 126 identical layers of 1 s; embedding 0.01 s, head 0.66 s (llama3-405b's
  // output layer is about two thirds of a layer). Middle stages can take at
  // most 16 layers below a 16 s bottleneck, and no bottleneck under 16 s
  // places 126 layers (8 x 15 = 120 < 126); at 16 s the first stage takes at
  // most 15 (15.01 s) and the last 15 (15.66 s): 15 + 6 x 16 + 15 = 126.
  const std::vector<double> layer_s(126, 1.0);
  EXPECT_EQ(balanced_stage_layers(layer_s, 0.01, 0.66, 8, 1), (Counts{15, 16, 16, 16, 16, 16, 16, 15}));
  // Interleaved, v = 2: the same stage counts, each cut into two chunks; the
  // odd layer stays off chunk 0 (embedding) and chunk 15 (head).
  EXPECT_EQ(balanced_stage_layers(layer_s, 0.01, 0.66, 8, 2),
            (Counts{7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7}));
}

// Identical layers: each stage's count is what adding the layers one at a
// time to the stage they slow least (the lowest on a tie) gives, scanned here
// stage by stage; the split uses a heap for it (O(layers log pp)).
TEST(BalancedStageLayers, IdenticalLayersGoWhereTheyAddLeastOneAtATime) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const std::int64_t pp = 1 + static_cast<std::int64_t>(rng() % 16), v = 1 + static_cast<std::int64_t>(rng() % 3);
    const std::int64_t layers = pp * v + static_cast<std::int64_t>(rng() % 200);
    const double layer_s = 0.5 + static_cast<double>(rng() % 100) / 50;
    const double embedding_s = static_cast<double>(rng() % 400) / 100, head_s = static_cast<double>(rng() % 400) / 100;
    Counts expected(static_cast<std::size_t>(pp), v);
    for (std::int64_t left = layers - pp * v; left > 0; --left) {
      std::size_t pick = 0;
      double pick_s = std::numeric_limits<double>::infinity();
      for (std::int64_t r = 0; r < pp; ++r) {
        const double extra = (r == 0 ? embedding_s : 0.0) + (r == pp - 1 ? head_s : 0.0);
        const double after = extra + layer_s * static_cast<double>(expected[static_cast<std::size_t>(r)] + 1);
        if (after < pick_s) {
          pick_s = after;
          pick = static_cast<std::size_t>(r);
        }
      }
      ++expected[pick];
    }
    const Counts per_chunk = balanced_stage_layers(std::vector<double>(static_cast<std::size_t>(layers), layer_s),
                                                   embedding_s, head_s, pp, v);
    ASSERT_EQ(per_chunk.size(), static_cast<std::size_t>(pp * v));
    Counts per_stage(static_cast<std::size_t>(pp), 0);
    for (std::size_t c = 0; c < per_chunk.size(); ++c) per_stage[c % static_cast<std::size_t>(pp)] += per_chunk[c];
    EXPECT_EQ(per_stage, expected) << "pp " << pp << " v " << v << " layers " << layers;
  }
}

TEST(BalancedStageLayers, EvenWhenTheHeadIsLighterThanTheSlack) {
  // GPT-3's 96 layers on 8 stages, head about a third of a layer: moving a
  // layer off the last stage would put 13 on another, slower than 12.35.
  const std::vector<double> layer_s(96, 1.0);
  EXPECT_EQ(balanced_stage_layers(layer_s, 0.01, 0.35, 8, 1), Counts(8, 12));
}

TEST(BalancedStageLayers, UnequalLayersSplitExactly) {
  // Layers of 1..6 s, embedding 1 s, head 3 s. Two stages: stage 0 = 1 + the
  // first a layers, stage 1 = 3 + the rest: a = 3 gives 7 | 18, a = 4 gives
  // 11 | 14, a = 5 gives 16 | 9; a = 4 is best.
  const std::vector<double> layer_s = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(balanced_stage_layers(layer_s, 1, 3, 2, 1), (Counts{4, 2}));
  // Three stages: one layer on the last (3 + 6 = 9; two would be 14), then
  // 1 + (1 + 2 + 3) = 7 | 4 + 5 = 9 beats 4 | 12 and 11 | 5.
  EXPECT_EQ(balanced_stage_layers(layer_s, 1, 3, 3, 1), (Counts{3, 2, 1}));
}

TEST(BalancedStageLayers, MatchesEveryContiguousSplitOfSmallCases) {
  // Reference: try every composition of the layers into pp parts.
  std::uint32_t seed = 12345;
  auto next_s = [&] {
    seed = seed * 1664525u + 1013904223u;
    return 0.25 + static_cast<double>(seed >> 8) / static_cast<double>(1u << 24);
  };
  for (int trial = 0; trial < 200; ++trial) {
    const auto layers = static_cast<std::int64_t>(1 + trial % 9);
    const auto pp = static_cast<std::int64_t>(1 + trial % 4);
    if (pp > layers) continue;
    std::vector<double> layer_s;
    for (std::int64_t i = 0; i < layers; ++i) layer_s.push_back(next_s());
    const double embedding_s = next_s() / 2, head_s = next_s() * 2;
    double best_s = std::numeric_limits<double>::infinity();
    Counts parts(static_cast<std::size_t>(pp), 1);
    auto recurse = [&](auto&& self, std::size_t stage, std::int64_t left) -> void {
      if (stage + 1 == parts.size()) {
        parts[stage] = left;
        best_s = std::min(best_s, slowest_s(layer_s, embedding_s, head_s, pp, parts));
        return;
      }
      for (std::int64_t n = 1; left - n >= static_cast<std::int64_t>(parts.size() - stage - 1); ++n) {
        parts[stage] = n;
        self(self, stage + 1, left - n);
      }
    };
    recurse(recurse, 0, layers);
    const Counts split = balanced_stage_layers(layer_s, embedding_s, head_s, pp, 1);
    ASSERT_EQ(static_cast<std::int64_t>(split.size()), pp) << trial;
    EXPECT_EQ(std::accumulate(split.begin(), split.end(), std::int64_t{0}), layers) << trial;
    EXPECT_TRUE(std::all_of(split.begin(), split.end(), [](std::int64_t n) { return n >= 1; })) << trial;
    EXPECT_DOUBLE_EQ(slowest_s(layer_s, embedding_s, head_s, pp, split), best_s) << trial;
  }
}

TEST(BalancedStageLayers, NoSplitWithMoreChunksThanLayers) {
  EXPECT_TRUE(balanced_stage_layers(std::vector<double>(6, 1.0), 0, 0, 4, 2).empty());
  EXPECT_EQ(balanced_stage_layers(std::vector<double>(8, 1.0), 0, 0, 4, 2), Counts(8, 1));
}

TEST(StageLayersText, FoldsRunsOfThreeOrMore) {
  EXPECT_EQ(stage_layers_text({15, 16, 16, 16, 16, 16, 16, 15}), "15,16x6,15");
  EXPECT_EQ(stage_layers_text({8, 8, 7}), "8,8,7");
  EXPECT_EQ(stage_layers_text({3}), "3");
}

}  // namespace
}  // namespace meshplan
