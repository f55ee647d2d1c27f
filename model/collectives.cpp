// Names of collectives and algorithms for reports, sweeps and the studio, and
// the deduplicated dispatch's share (once per block record, not per plan). The
// cost functions themselves are inline in collectives.hpp: they sit on the
// planner's hot path.
#include "model/collectives.hpp"

#include <cmath>

namespace meshplan {
namespace {

// C(pool - held, k) / C(pool, k): none of k distinct picks of `pool` lands in `held` of them.
double none_held(double pool, double held, std::int64_t k) {
  double none = 1.0;
  for (std::int64_t i = 0; i < k && none > 0; ++i) {
    const double left = pool - held - static_cast<double>(i);
    none = left > 0 ? none * left / (pool - static_cast<double>(i)) : 0.0;
  }
  return none;
}

// ln C(n, r).
double log_choose(double n, double r) { return std::lgamma(n + 1) - std::lgamma(r + 1) - std::lgamma(n - r + 1); }

}  // namespace

double deduplicated_remote_share(const ExpertRouting& routing, std::int64_t nodes) {
  if (nodes <= 1 || routing.experts <= 0 || routing.top_k <= 0) return 1.0;
  const double e = static_cast<double>(routing.experts), n = static_cast<double>(nodes), k = static_cast<double>(routing.top_k);
  const std::int64_t g = routing.groups, m = routing.group_top_k;
  double hit = 1 - none_held(e, e / n, routing.top_k);  // an other node holds one of the token's experts
  if (g > 0 && m > 0 && m < g && routing.experts % g == 0) {
    const double per_group = e / static_cast<double>(g), pool = static_cast<double>(m) * per_group;
    if (g % nodes == 0) {  // each node holds c whole groups, x of them chosen
      const std::int64_t c = g / nodes;
      hit = 0;
      for (std::int64_t x = std::max<std::int64_t>(0, m - (g - c)); x <= std::min(c, m); ++x) {
        const double p = std::exp(log_choose(static_cast<double>(c), static_cast<double>(x)) +
                                  log_choose(static_cast<double>(g - c), static_cast<double>(m - x)) -
                                  log_choose(static_cast<double>(g), static_cast<double>(m)));
        hit += p * (1 - none_held(pool, static_cast<double>(x) * per_group, routing.top_k));
      }
    } else if (nodes % g == 0) {  // each group spans nodes / g nodes
      hit = static_cast<double>(m) / static_cast<double>(g) * (1 - none_held(pool, e / n, routing.top_k));
    }
  }
  return (n - 1) * hit / (k * (n - 1) / n);
}

std::string to_string(Collective collective) {
  switch (collective) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::all_gather: return "all_gather";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_to_all: return "all_to_all";
    case Collective::broadcast: return "broadcast";
    case Collective::send_recv: return "send_recv";
  }
  return "?";
}

std::string to_string(CollectiveAlgorithm algorithm) {
  switch (algorithm) {
    case CollectiveAlgorithm::ring: return "ring";
    case CollectiveAlgorithm::tree: return "tree";
  }
  return "?";
}

}  // namespace meshplan
