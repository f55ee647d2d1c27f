// What a collective over one mesh-axis group costs, in the alpha-beta
// (Hockney) model: time = steps x latency + bytes x F_bus / bus bandwidth,
// where F_bus is nccl-tests' bus-bandwidth factor. Pairing F_bus with a *bus*
// bandwidth (the per-rank link rate: what the topology gives each axis and
// what nccl-tests' busbw column measures) makes one bandwidth number valid
// for every collective and every group size; only the latency term differs
// by algorithm. Derivations and sources: docs/cost-model.md (Communication).
//
// Everything here is inline and allocation-free: the planner calls it about
// ten times per plan and evaluates around a million plans per second.
//
// Defines: Collective, CollectiveAlgorithm, bus_bandwidth_factor,
// latency_steps, moved_time, collective_time, hierarchical_all_reduce_time,
// all_to_all_bus_bandwidth, all_to_all_nic_weight, ExpertRouting,
// deduplicated_remote_share.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <string>

namespace meshplan {

enum class Collective { all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send_recv };
// ring: NCCL's ring (pipelined chain for broadcast). tree: recursive
// halving/doubling style, Rabenseifner's algorithm for all-reduce (Thakur,
// Rabenseifner & Gropp 2005), NCCL's pipelined tree for broadcast.
enum class CollectiveAlgorithm { ring, tree };

std::string to_string(Collective collective);
std::string to_string(CollectiveAlgorithm algorithm);

// nccl-tests' bus-bandwidth factor F_bus (doc/PERFORMANCE.md, "Summary"):
// all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n;
// broadcast and send_recv 1. 0 for n < 1.
inline double bus_bandwidth_factor(Collective collective, std::int64_t n) {
  if (n < 1) return 0.0;
  const double ranks = static_cast<double>(n);
  switch (collective) {
    case Collective::all_reduce: return 2.0 * (ranks - 1.0) / ranks;
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::all_to_all: return (ranks - 1.0) / ranks;
    case Collective::broadcast:
    case Collective::send_recv: return 1.0;
  }
  return 1.0;
}

// ceil(log2 n) for n >= 1, by bit width (no floating point).
inline std::int64_t ceil_log2(std::int64_t n) {
  return n <= 1 ? 0 : static_cast<std::int64_t>(std::bit_width(static_cast<std::uint64_t>(n - 1)));
}

// Tree variants exist for all_reduce, all_gather, reduce_scatter and
// broadcast; all_to_all and send_recv have only the direct (ring) form.
inline bool has_tree_variant(Collective collective) {
  return collective != Collective::all_to_all && collective != Collective::send_recv;
}

// Latency terms (alpha multiples) per algorithm, n ranks.
//   ring: all_reduce 2(n-1) (reduce-scatter then all-gather round the ring);
//         all_gather, reduce_scatter, all_to_all n-1; broadcast n-1 (the
//         pipelined chain's depth); send_recv 1.
//   tree: all_reduce 2 ceil(log2 n) (Rabenseifner's algorithm: recursive-
//         halving reduce-scatter, then recursive-doubling all-gather);
//         all_gather ceil(log2 n) (recursive doubling); reduce_scatter
//         ceil(log2 n) (recursive halving) -- all three from Thakur,
//         Rabenseifner & Gropp 2005 (IJHPCA 19(1)), sections on allgather,
//         reduce-scatter and allreduce; broadcast ceil(log2 n) (depth of
//         NCCL's pipelined tree). Others fall back to ring.
inline std::int64_t latency_steps(Collective collective, std::int64_t n, CollectiveAlgorithm algorithm) {
  if (n <= 1) return 0;
  if (algorithm == CollectiveAlgorithm::tree && has_tree_variant(collective)) {
    const std::int64_t depth = ceil_log2(n);
    return collective == Collective::all_reduce ? 2 * depth : depth;
  }
  switch (collective) {
    case Collective::all_reduce: return 2 * (n - 1);
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::all_to_all:
    case Collective::broadcast: return n - 1;
    case Collective::send_recv: return 1;
  }
  return n - 1;
}

// Fraction of the ring's bus bandwidth a tree reaches. Alpha-beta gives
// Rabenseifner the same bandwidth term as the ring; NCCL's tuner does not:
// it models tree bus bandwidth as min(0.9 x ring's, a per-platform cap)
// (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel: "busBw*.9"). Using
// the 0.9 is what lets the ring win for large messages, as it does in NCCL.
inline constexpr double kTreeBandwidthEfficiency = 0.9;

struct CollectiveCost {
  double time_s = 0;
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring;  // the one actually priced
};

// One algorithm's price once bytes x F_bus (`moved`) is known, for n > 1
// ranks and a positive bandwidth: the one formula both overloads below use.
inline double moved_time(Collective collective, double moved, std::int64_t n, double bus_bandwidth_bytes_per_s,
                         double latency_s, CollectiveAlgorithm algorithm) {
  const double efficiency = algorithm == CollectiveAlgorithm::tree ? kTreeBandwidthEfficiency : 1.0;
  const double steps = static_cast<double>(latency_steps(collective, n, algorithm));
  return steps * latency_s + moved / (bus_bandwidth_bytes_per_s * efficiency);
}

// One algorithm. `bytes` follows nccl-tests (all_reduce: the buffer;
// all_gather: the gathered output; reduce_scatter: the full input;
// all_to_all: all bytes one rank sends; broadcast/send_recv: the message).
// time = latency_steps x latency_s + bytes x F_bus / (bus bandwidth x efficiency),
// efficiency 1 for ring, kTreeBandwidthEfficiency for tree. Zero cost when
// n <= 1 or bytes <= 0; +inf when the bandwidth is not positive. A tree asked
// of all_to_all or send_recv is priced (and reported) as ring.
inline CollectiveCost collective_time(Collective collective, double bytes, std::int64_t n,
                                      double bus_bandwidth_bytes_per_s, double latency_s,
                                      CollectiveAlgorithm algorithm) {
  if (algorithm == CollectiveAlgorithm::tree && !has_tree_variant(collective)) algorithm = CollectiveAlgorithm::ring;
  if (n <= 1 || !(bytes > 0)) return {0.0, algorithm};
  if (!(bus_bandwidth_bytes_per_s > 0)) return {std::numeric_limits<double>::infinity(), algorithm};
  const double moved = bytes * bus_bandwidth_factor(collective, n);
  return {moved_time(collective, moved, n, bus_bandwidth_bytes_per_s, latency_s, algorithm), algorithm};
}

// The cheaper of ring and tree, as NCCL's tuner picks per call (ties go to
// ring): the overload above for each, with bytes x F_bus taken once, since
// the planner prices every plan's collectives through here.
inline CollectiveCost collective_time(Collective collective, double bytes, std::int64_t n,
                                      double bus_bandwidth_bytes_per_s, double latency_s) {
  if (n <= 1 || !(bytes > 0)) return {0.0, CollectiveAlgorithm::ring};
  if (!(bus_bandwidth_bytes_per_s > 0)) return {std::numeric_limits<double>::infinity(), CollectiveAlgorithm::ring};
  const double moved = bytes * bus_bandwidth_factor(collective, n);
  const CollectiveCost ring{
      moved_time(collective, moved, n, bus_bandwidth_bytes_per_s, latency_s, CollectiveAlgorithm::ring),
      CollectiveAlgorithm::ring};
  if (!has_tree_variant(collective)) return ring;
  const CollectiveCost tree{
      moved_time(collective, moved, n, bus_bandwidth_bytes_per_s, latency_s, CollectiveAlgorithm::tree),
      CollectiveAlgorithm::tree};
  return tree.time_s < ring.time_s ? tree : ring;
}

// All-reduce of `bytes` over a group with m = members_per_node members on each
// of `nodes` nodes, done hierarchically (Horovod's NCCLHierarchicalAllreduce;
// Jia et al. 2018, "hierarchical all-reduce"): reduce-scatter inside the node
// over m ranks, then m concurrent all-reduces across the nodes, each over the
// 1/m shard its rank holds, then all-gather inside the node. Each phase takes
// the cheaper of ring and tree.
//   inter_bandwidth_per_rank_bytes_per_s: what each of those m cross-node all-reduces gets
//   (they run at once, one per local rank), e.g. B_node / D when the node's D
//   devices all take part.
inline double hierarchical_all_reduce_time(double bytes, std::int64_t members_per_node, std::int64_t nodes,
                                           double intra_bandwidth_bytes_per_s, double intra_latency_s,
                                           double inter_bandwidth_per_rank_bytes_per_s, double inter_latency_s) {
  if (!(bytes > 0)) return 0.0;
  const std::int64_t m = members_per_node < 1 ? 1 : members_per_node;
  const double shard_bytes = bytes / static_cast<double>(m);
  return collective_time(Collective::reduce_scatter, bytes, m, intra_bandwidth_bytes_per_s, intra_latency_s).time_s +
         collective_time(Collective::all_reduce, shard_bytes, nodes, inter_bandwidth_per_rank_bytes_per_s,
                         inter_latency_s).time_s +
         collective_time(Collective::all_gather, bytes, m, intra_bandwidth_bytes_per_s, intra_latency_s).time_s;
}

// The bus bandwidth at which an all-to-all over a group of n ranks runs when
// the group has m members on each node it touches. A ring's node-boundary
// traffic spreads over all of the group's NICs (B_inter = B_node m / D per
// rank); an all-to-all's cannot: each rank's bytes for other nodes leave
// through its own share of the NICs, B_inter / m ("Alltoall cannot aggregate
// the bandwidth of multiple NICs", S. Jeaugey, NVIDIA/nccl-tests issue 267).
// Of the S x (n - 1)/n bytes a rank sends, (m - 1)/n of S go to node-mates
// over B_intra and (n - m)/n over B_inter / m, at the same time (NCCL posts
// every pair's send and receive in one group), so the time's bandwidth term
// is the larger of the two and the equivalent bus bandwidth is
//   (n - 1) / max((m - 1) / B_intra, (n - m) m / B_inter).
// A group inside one node (m = n), or one member per node (m = 1), gives
// B_intra or B_inter, the ring figure. n <= 1: +inf.
inline double all_to_all_bus_bandwidth(std::int64_t n, std::int64_t members_per_node, double intra_bandwidth_bytes_per_s,
                                       double inter_bandwidth_bytes_per_s) {
  if (n <= 1) return std::numeric_limits<double>::infinity();
  const double ranks = static_cast<double>(n);
  const double m = static_cast<double>(members_per_node < 1 ? 1 : (members_per_node > n ? n : members_per_node));
  const double intra = m > 1 ? (m - 1) / intra_bandwidth_bytes_per_s : 0.0;
  const double inter = ranks > m ? (ranks - m) * m / inter_bandwidth_bytes_per_s : 0.0;
  const double slowest = intra > inter ? intra : inter;
  return slowest > 0 ? (ranks - 1) / slowest : std::numeric_limits<double>::infinity();
}

// How many times an all-to-all flow's bus-byte rate loads the NICs of a node
// on which `groups` groups of the axis each have m members: per group, m
// ranks send (n - m)/n of S across for every (n - 1)/n of S of bus bytes. A
// ring's boundary crossing loads them once per group (`groups`). The
// simulator weighs NIC links with it, so that the all-to-all alone fills the
// NICs exactly at all_to_all_bus_bandwidth's rate.
inline double all_to_all_nic_weight(std::int64_t n, std::int64_t members_per_node, double groups) {
  if (n <= 1) return 0.0;
  const double m = static_cast<double>(members_per_node < 1 ? 1 : members_per_node);
  return groups * m * (static_cast<double>(n) - m) / (static_cast<double>(n) - 1.0);
}

// How a mixture of experts routes a token (TransformerDims): to `top_k` of
// `experts`, and with group-limited routing (`groups` > 0) only among the
// experts of its `group_top_k` best of `groups` equal groups.
struct ExpertRouting {
  std::int64_t experts = 0, top_k = 0, groups = 0, group_top_k = 0;
};

// Of the copies of a token that an all-to-all dispatch sends to other nodes
// (k (N - 1) / N of its k, with the experts spread evenly over the N nodes of
// the group), the share a deduplicating dispatch sends (EpDispatch::
// deduplicated, DeepEP): one copy to each other node holding any of its
// experts. Its k experts are k distinct of the E, alike for every expert (a
// balanced router), so a node holding E / N of them gets none with
// probability C(E - E/N, k) / C(E, k), and the expected number of other nodes
// it reaches is (N - 1)(1 - that). 1 when the group is on one node.
//
// With group-limited routing (G groups of E / G experts laid out in order, as
// the ranks hold them; the token's M groups alike for every group, then its k
// experts alike among their M E / G): where each node holds G / N whole groups,
// the number of a node's groups chosen is hypergeometric (G, G / N, M), and
// given x of them the node holds x E / G of the M E / G candidates; where each
// group spans N / G nodes, a node's group is chosen with probability M / G and
// then holds E / N of them. A node is missed with C(pool - held, k) / C(pool, k).
// Groups that do not align with nodes (neither divides the other) are costed
// as no groups.
double deduplicated_remote_share(const ExpertRouting& routing, std::int64_t nodes);
inline double deduplicated_remote_share(std::int64_t experts, std::int64_t top_k, std::int64_t nodes) {
  return deduplicated_remote_share(ExpertRouting{experts, top_k, 0, 0}, nodes);
}

}  // namespace meshplan
