// The grouping behind the CUDA embedding's deterministic backward
// (kernels/cuda/embedding_groups.hpp): every position once, grouped by token
// in ascending order and by position inside a group; and a host twin of
// token_backward_kernel over it equals the CPU embedding backward in double.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/embedding.hpp"
#include "kernels/cuda/embedding_groups.hpp"

namespace meshplan::kernels::cuda {
namespace {

TEST(EmbeddingGroups, PositionsByTokenThenPosition) {
  const std::vector<std::int32_t> ids = {5, 2, 5, 9, 2, 2, 0};
  const EmbeddingGroups g = embedding_groups(ids.data(), static_cast<std::int64_t>(ids.size()));
  EXPECT_EQ(g.tokens, (std::vector<std::int32_t>{0, 2, 5, 9}));
  EXPECT_EQ(g.starts, (std::vector<std::int32_t>{0, 1, 4, 6, 7}));
  EXPECT_EQ(g.positions, (std::vector<std::int32_t>{6, 1, 4, 5, 0, 2, 3}));
  const EmbeddingGroups none = embedding_groups(nullptr, 0);
  EXPECT_TRUE(none.tokens.empty());
  EXPECT_EQ(none.starts, (std::vector<std::int32_t>{0}));
}

TEST(EmbeddingGroups, TwinOfTheTokenBackwardEqualsTheCpuBackward) {
  std::mt19937_64 rng(11);
  const std::int64_t B = 3, T = 50, C = 16, V = 40;  // 150 tokens over 40 ids: many repeats
  std::vector<std::int32_t> ids(static_cast<std::size_t>(B * T));
  for (auto& id : ids) id = static_cast<std::int32_t>(rng() % V);
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<double> dout(static_cast<std::size_t>(B * T * C)), start(static_cast<std::size_t>(V * C));
  for (double& x : dout) x = dist(rng);
  for (double& x : start) x = dist(rng);
  std::vector<double> want = start, twin = start;
  embedding_backward<double>(want.data(), nullptr, dout.data(), ids.data(), B, T, C);
  const EmbeddingGroups g = embedding_groups(ids.data(), B * T);
  for (std::size_t group = 0; group < g.tokens.size(); ++group) {
    for (std::int64_t c = 0; c < C; ++c) {
      double sum = 0;
      for (std::int32_t i = g.starts[group]; i < g.starts[group + 1]; ++i) sum += dout[static_cast<std::size_t>(g.positions[i] * C + c)];
      twin[static_cast<std::size_t>(g.tokens[group] * C + c)] += sum;
    }
  }
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(twin[i], want[i], 1e-12) << i;
}

}  // namespace
}  // namespace meshplan::kernels::cuda
