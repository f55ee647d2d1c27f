// The grouping that makes the embedding backward deterministic without
// float atomics (embedding.cu): the batch's token positions sorted by token
// id, stably, so that one GPU thread per (distinct token, channel) sums its
// token's gradient rows in position order. Built on the host, where the data
// loader's tokens already are, in O(N log N); host code only.
//
// defines: EmbeddingGroups, embedding_groups
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace meshplan::kernels::cuda {

struct EmbeddingGroups {
  std::vector<std::int32_t> tokens;     // distinct token ids, ascending
  std::vector<std::int32_t> starts;     // group g is positions[starts[g] .. starts[g + 1])
  std::vector<std::int32_t> positions;  // indices into the batch's N positions, by token, then position
};

inline EmbeddingGroups embedding_groups(const std::int32_t* ids, std::int64_t n) {
  EmbeddingGroups g;
  g.positions.resize(static_cast<std::size_t>(n));
  std::iota(g.positions.begin(), g.positions.end(), 0);
  std::stable_sort(g.positions.begin(), g.positions.end(), [&](std::int32_t a, std::int32_t b) { return ids[a] < ids[b]; });
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t id = ids[g.positions[static_cast<std::size_t>(i)]];
    if (g.tokens.empty() || g.tokens.back() != id) {
      g.tokens.push_back(id);
      g.starts.push_back(static_cast<std::int32_t>(i));
    }
  }
  g.starts.push_back(static_cast<std::int32_t>(n));
  return g;
}

}  // namespace meshplan::kernels::cuda
