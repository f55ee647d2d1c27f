// "What would fit": the planner's search (search.hpp) asked the questions a
// user has when a plan does not fit, or when no mesh was given.
//   * best_plans: at this device count, the plan the search ranks first and
//     the candidate that needs the least memory per device (fitting or not);
//     the latter is the memory a device would need at this count.
//   * smallest_fitting_world_size: the fewest devices at which some searched
//     plan fits, trying counts above the current one: powers of two below a
//     node, then whole nodes doubling (D, 2D, 4D, ...), then every count of
//     whole nodes between the last doubling that did not fit and the first
//     that did. The global batch stays what it is.
//
// Why the doubling and then the linear pass: one search of GPT-3 175B on
// 1024 devices takes tens of milliseconds, so a handful of doublings and at
// most a few dozen node counts answer in about a second, while every count
// of whole nodes up to tens of thousands would not. Memory per device falls
// with more devices for the shapes the search tries, though not strictly (a
// count whose factors do not divide the layers or the batch may not fit when
// a smaller one does): the answer is the smallest count tried, and the count
// tried just below it does not fit.
//
// Defines: BestPlans, best_plans, FitCount, smallest_fitting_world_size,
// WhatWouldFit, what_would_fit.
#pragma once

#include <cstdint>
#include <optional>

#include "model/cluster_spec.hpp"
#include "model/model_spec.hpp"
#include "model/search.hpp"

namespace meshplan {

struct BestPlans {
  std::optional<Candidate> fastest;        // ranked first among the plans that fit
  std::optional<Candidate> smallest_peak;  // least memory per device among those evaluated (fitting or not)
  SearchStats stats;
};

BestPlans best_plans(const Evaluator& evaluator, std::int64_t global_batch, const SearchSpace& space, int threads = 0);

struct FitCount {
  std::optional<std::int64_t> world_size;  // the smallest count tried at which a plan fits
  std::optional<Candidate> fastest;        // the fastest plan there
  std::int64_t below = 0;                  // the largest count below it known not to fit (one tried, or world_size); with no answer, the last tried
  std::int64_t limit = 0;                  // counts above this were not tried
  std::int64_t searches = 0;
};

// Counts above `world_size`, up to `limit` devices (0: the cluster's
// max_nodes x devices per node, else 65536).
FitCount smallest_fitting_world_size(const ModelSpec& model, const ClusterSpec& cluster, std::int64_t seq_len,
                                     std::int64_t global_batch, const SearchSpace& space, std::int64_t world_size,
                                     std::int64_t limit = 0, int threads = 0);

// Both questions for one job: the best plans at `world_size`, and, when none
// fits there, the fewest devices that fit.
struct WhatWouldFit {
  std::int64_t world_size = 0;
  std::int64_t global_batch = 0;
  BestPlans here;
  std::optional<FitCount> more;  // only when nothing fits at world_size
};

WhatWouldFit what_would_fit(const ModelSpec& model, const ClusterSpec& cluster, std::int64_t world_size,
                            std::int64_t seq_len, std::int64_t global_batch, const SearchSpace& space, int threads = 0);

}  // namespace meshplan
