// best_plans and smallest_fitting_world_size: the search, asked for the
// fastest fitting plan and the smallest peak, at one count or at several.
#include "model/fit_search.hpp"

#include <algorithm>

namespace meshplan {

BestPlans best_plans(const Evaluator& evaluator, std::int64_t global_batch, const SearchSpace& space, int threads) {
  BestPlans best;
  SearchOptions options;
  options.threads = threads;
  options.on_candidate = [&](const Candidate& c) {
    if (c.rejection != Rejection::none && c.rejection != Rejection::out_of_memory) return;
    const double peak = c.estimate.worst_memory.total_bytes();
    if (!best.smallest_peak || peak < best.smallest_peak->estimate.worst_memory.total_bytes()) best.smallest_peak = c;
  };
  const SearchResult result = search(evaluator, global_batch, space, options);
  best.stats = result.stats;
  if (!result.ranked.empty()) best.fastest = result.ranked.front();
  return best;
}

FitCount smallest_fitting_world_size(const ModelSpec& model, const ClusterSpec& cluster, std::int64_t seq_len,
                                     std::int64_t global_batch, const SearchSpace& space, std::int64_t world_size,
                                     std::int64_t limit, int threads) {
  FitCount answer;
  const std::int64_t per_node = std::max<std::int64_t>(cluster.devices_per_node, 1);
  if (limit <= 0) limit = cluster.max_nodes ? *cluster.max_nodes * per_node : 65536;
  limit = std::min(limit, kMaxMeshDevices);  // more devices than meshplan models are never tried
  answer.limit = limit;

  SearchOptions options;
  options.threads = threads;
  options.keep_ranked = false;
  auto fits = [&](std::int64_t count) {
    ++answer.searches;
    const Evaluator evaluator(model, cluster, count, seq_len);
    return search(evaluator, global_batch, space, options).stats.feasible > 0;
  };

  // Doubling: powers of two below a node, then D, 2D, 4D, ... whole nodes.
  std::int64_t below = 0, found = 0;
  for (std::int64_t count = 1; count <= limit;) {
    if (count > world_size) {
      if (fits(count)) {
        found = count;
        break;
      }
      below = count;
    }
    if (count < per_node) {
      count = std::min(count * 2, per_node);
    } else {
      count *= 2;
    }
  }
  if (found == 0) {
    answer.below = below;
    return answer;
  }
  // Every count of whole nodes between the last that did not fit and the first that did.
  const std::int64_t from = std::max(below, world_size);
  for (std::int64_t count = (from / per_node + 1) * per_node; count < found; count += per_node) {
    if (count <= from) continue;
    if (fits(count)) {
      found = count;
      break;
    }
    below = count;
  }
  answer.world_size = found;
  answer.below = std::max(below, world_size);
  options.keep_ranked = true;
  const Evaluator evaluator(model, cluster, found, seq_len);
  const SearchResult result = search(evaluator, global_batch, space, options);
  if (!result.ranked.empty()) answer.fastest = result.ranked.front();
  return answer;
}

WhatWouldFit what_would_fit(const ModelSpec& model, const ClusterSpec& cluster, std::int64_t world_size,
                            std::int64_t seq_len, std::int64_t global_batch, const SearchSpace& space, int threads) {
  WhatWouldFit answer;
  answer.world_size = world_size;
  answer.global_batch = global_batch;
  answer.here = best_plans(Evaluator(model, cluster, world_size, seq_len), global_batch, space, threads);
  if (!answer.here.fastest) {
    answer.more = smallest_fitting_world_size(model, cluster, seq_len, global_batch, space, world_size, 0, threads);
  }
  return answer;
}

}  // namespace meshplan
