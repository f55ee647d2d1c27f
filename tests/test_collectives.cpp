// Collective costs: nccl-tests' bus-bandwidth factors exactly, alpha-beta
// times against hand-computed values, the ring/tree choice, and the edges
// (one rank, no bytes, no bandwidth).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "model/collectives.hpp"

namespace meshplan {
namespace {

constexpr Collective kAll[] = {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                               Collective::all_to_all, Collective::broadcast,  Collective::send_recv};

TEST(Collectives, BusBandwidthFactorsAreNcclTests) {
  // doc/PERFORMANCE.md of nccl-tests, "Summary".
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::all_reduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::all_reduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::all_reduce, 1024), 2.0 * 1023 / 1024);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::all_gather, 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::reduce_scatter, 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::all_to_all, 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::all_gather, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::broadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::send_recv, 2), 1.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::all_reduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::all_gather, 1), 0.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::all_reduce, 0), 0.0);
}

TEST(Collectives, CeilLog2) {
  EXPECT_EQ(ceil_log2(1), 0);
  EXPECT_EQ(ceil_log2(2), 1);
  EXPECT_EQ(ceil_log2(3), 2);
  EXPECT_EQ(ceil_log2(4), 2);
  EXPECT_EQ(ceil_log2(5), 3);
  EXPECT_EQ(ceil_log2(1024), 10);
  EXPECT_EQ(ceil_log2(1025), 11);
}

TEST(Collectives, LatencyStepsPerAlgorithm) {
  EXPECT_EQ(latency_steps(Collective::all_reduce, 8, CollectiveAlgorithm::ring), 14);
  EXPECT_EQ(latency_steps(Collective::all_reduce, 8, CollectiveAlgorithm::tree), 6);
  EXPECT_EQ(latency_steps(Collective::all_reduce, 6, CollectiveAlgorithm::tree), 6);  // 2 ceil(log2 6)
  EXPECT_EQ(latency_steps(Collective::all_gather, 8, CollectiveAlgorithm::ring), 7);
  EXPECT_EQ(latency_steps(Collective::reduce_scatter, 8, CollectiveAlgorithm::tree), 3);
  EXPECT_EQ(latency_steps(Collective::broadcast, 16, CollectiveAlgorithm::ring), 15);
  EXPECT_EQ(latency_steps(Collective::broadcast, 16, CollectiveAlgorithm::tree), 4);
  EXPECT_EQ(latency_steps(Collective::all_to_all, 16, CollectiveAlgorithm::ring), 15);
  EXPECT_EQ(latency_steps(Collective::all_to_all, 16, CollectiveAlgorithm::tree), 15);  // no tree form
  EXPECT_EQ(latency_steps(Collective::send_recv, 2, CollectiveAlgorithm::ring), 1);
  EXPECT_EQ(latency_steps(Collective::all_reduce, 1, CollectiveAlgorithm::ring), 0);
}

TEST(Collectives, TimesMatchHandComputedAlphaBeta) {
  struct Case {
    Collective collective;
    double bytes;
    std::int64_t n;
    double bandwidth;
    double latency;
    CollectiveAlgorithm algorithm;
    double expected_s;
    CollectiveAlgorithm expected_algorithm;
  };
  using A = CollectiveAlgorithm;
  const Case cases[] = {
      // ring all-reduce: 2(n-1) alpha + S 2(n-1)/n / B = 14 x 5 us + 1e9 x 1.75 / 100e9
      {Collective::all_reduce, 1e9, 8, 100e9, 5e-6, A::ring, 14 * 5e-6 + 0.0175, A::ring},
      // Rabenseifner: 2 log2(8) alpha + same bytes at 0.9 B
      {Collective::all_reduce, 1e9, 8, 100e9, 5e-6, A::tree, 6 * 5e-6 + 0.0175 / 0.9, A::tree},
      // all-gather: (n-1) alpha + S (n-1)/n / B
      {Collective::all_gather, 8e8, 4, 50e9, 2e-6, A::ring, 3 * 2e-6 + 8e8 * 0.75 / 50e9, A::ring},
      {Collective::all_gather, 8e8, 4, 50e9, 2e-6, A::tree, 2 * 2e-6 + 8e8 * 0.75 / 45e9, A::tree},
      {Collective::reduce_scatter, 1.6e9, 16, 200e9, 1e-6, A::ring, 15e-6 + 1.6e9 * 15 / 16 / 200e9, A::ring},
      {Collective::all_to_all, 6.4e8, 16, 25e9, 5e-6, A::ring, 15 * 5e-6 + 6.4e8 * 15 / 16 / 25e9, A::ring},
      // all-to-all has no tree form: priced and labelled as ring
      {Collective::all_to_all, 6.4e8, 16, 25e9, 5e-6, A::tree, 15 * 5e-6 + 6.4e8 * 15 / 16 / 25e9, A::ring},
      {Collective::broadcast, 1e8, 16, 20e9, 3e-6, A::ring, 15 * 3e-6 + 1e8 / 20e9, A::ring},
      {Collective::broadcast, 1e8, 16, 20e9, 3e-6, A::tree, 4 * 3e-6 + 1e8 / 18e9, A::tree},
      {Collective::send_recv, 3e7, 2, 24e9, 7e-6, A::ring, 7e-6 + 3e7 / 24e9, A::ring},
  };
  for (const Case& c : cases) {
    const CollectiveCost cost = collective_time(c.collective, c.bytes, c.n, c.bandwidth, c.latency, c.algorithm);
    EXPECT_NEAR(cost.time_s, c.expected_s, 1e-12 * c.expected_s + 1e-15)
        << to_string(c.collective) << " " << to_string(c.algorithm) << " n=" << c.n;
    EXPECT_EQ(cost.algorithm, c.expected_algorithm) << to_string(c.collective);
  }
}

TEST(Collectives, AutoTakesTheCheaperAlgorithm) {
  // 1 KiB over 1024 ranks at 25 GB/s, 5 us per step: ring pays 2046 latencies, tree 20.
  const CollectiveCost small = collective_time(Collective::all_reduce, 1024, 1024, 25e9, 5e-6);
  EXPECT_EQ(small.algorithm, CollectiveAlgorithm::tree);
  EXPECT_NEAR(small.time_s, 20 * 5e-6 + 1024 * (2.0 * 1023 / 1024) / (0.9 * 25e9), 1e-15);
  // 1 GiB inside an 8-GPU node: the bandwidth term dominates and the ring's full rate wins.
  const CollectiveCost large = collective_time(Collective::all_reduce, 1 << 30, 8, 230e9, 2e-6);
  EXPECT_EQ(large.algorithm, CollectiveAlgorithm::ring);
  EXPECT_DOUBLE_EQ(large.time_s,
                   collective_time(Collective::all_reduce, 1 << 30, 8, 230e9, 2e-6, CollectiveAlgorithm::ring).time_s);
  // Even at 1024 ranks, 10 GB is bandwidth-bound: ring.
  EXPECT_EQ(collective_time(Collective::all_reduce, 1e10, 1024, 25e9, 5e-6).algorithm, CollectiveAlgorithm::ring);
  // Tiny all-gather at large n: tree.
  EXPECT_EQ(collective_time(Collective::all_gather, 4096, 512, 25e9, 5e-6).algorithm, CollectiveAlgorithm::tree);
  // Two ranks: equal latency steps, so ring (ties and the better rate both favour it).
  EXPECT_EQ(collective_time(Collective::all_reduce, 8, 2, 25e9, 5e-6).algorithm, CollectiveAlgorithm::ring);
}

TEST(Collectives, AutoIsNeverWorseThanEitherAlgorithm) {
  for (Collective c : kAll) {
    for (std::int64_t n : {2, 3, 8, 64, 1000}) {
      for (double bytes : {1.0, 1e4, 1e6, 1e8, 1e10}) {
        const double best = collective_time(c, bytes, n, 50e9, 4e-6).time_s;
        EXPECT_LE(best, collective_time(c, bytes, n, 50e9, 4e-6, CollectiveAlgorithm::ring).time_s);
        EXPECT_LE(best, collective_time(c, bytes, n, 50e9, 4e-6, CollectiveAlgorithm::tree).time_s);
      }
    }
  }
}

TEST(Collectives, MonotoneInBytes) {
  for (Collective c : kAll) {
    for (std::int64_t n : {2, 8, 100, 4096}) {
      double previous = 0;
      for (double bytes = 1; bytes < 1e12; bytes *= 3) {
        const double time_s = collective_time(c, bytes, n, 25e9, 5e-6).time_s;
        EXPECT_GE(time_s, previous) << to_string(c) << " n=" << n << " bytes=" << bytes;
        previous = time_s;
      }
    }
  }
}

TEST(Collectives, NothingToDoCostsNothing) {
  for (Collective c : kAll) {
    EXPECT_EQ(collective_time(c, 1e9, 1, 25e9, 5e-6).time_s, 0.0) << to_string(c);
    EXPECT_EQ(collective_time(c, 1e9, 0, 25e9, 5e-6).time_s, 0.0) << to_string(c);
    EXPECT_EQ(collective_time(c, 0, 64, 25e9, 5e-6).time_s, 0.0) << to_string(c);
    EXPECT_EQ(collective_time(c, -5, 64, 25e9, 5e-6).time_s, 0.0) << to_string(c);
    // A size-1 mesh axis has infinite bandwidth: only latency would remain, and n = 1 has none.
    EXPECT_EQ(collective_time(c, 1e9, 1, std::numeric_limits<double>::infinity(), 0).time_s, 0.0);
  }
  EXPECT_TRUE(std::isinf(collective_time(Collective::all_reduce, 1e9, 8, 0, 5e-6).time_s));
  EXPECT_EQ(hierarchical_all_reduce_time(0, 8, 4, 230e9, 2e-6, 24e9, 7e-6), 0.0);
}

TEST(Collectives, HierarchicalAllReduceHandComputed) {
  // 1 GB over 4 nodes x 8 GPUs: reduce-scatter over 8 at 230 GB/s, all-reduce of
  // 1/8 over 4 nodes at 24 GB/s, all-gather over 8. Every phase is bandwidth
  // bound here, so each is the ring's.
  const double reduce_scatter_s = 7 * 2e-6 + 1e9 * 0.875 / 230e9;
  const double inter_all_reduce_s = 6 * 7e-6 + 1.25e8 * 1.5 / 24e9;
  const double all_gather_s = reduce_scatter_s;
  EXPECT_NEAR(hierarchical_all_reduce_time(1e9, 8, 4, 230e9, 2e-6, 24e9, 7e-6),
              reduce_scatter_s + inter_all_reduce_s + all_gather_s, 1e-15);
}

TEST(Collectives, HierarchicalAllReduceDegeneratesToFlat) {
  // One node: reduce-scatter + all-gather over the ring is exactly a ring all-reduce.
  EXPECT_NEAR(hierarchical_all_reduce_time(1e9, 8, 1, 230e9, 2e-6, 24e9, 7e-6),
              collective_time(Collective::all_reduce, 1e9, 8, 230e9, 2e-6, CollectiveAlgorithm::ring).time_s, 1e-15);
  // One member per node: just the cross-node all-reduce.
  EXPECT_DOUBLE_EQ(hierarchical_all_reduce_time(1e8, 1, 16, 230e9, 2e-6, 24e9, 7e-6),
                   collective_time(Collective::all_reduce, 1e8, 16, 24e9, 7e-6).time_s);
}

// An all-to-all's intra- and inter-node parts run at once; the slower sets
// the time. Checked by hand for 16 ranks, 8 per node; the degenerate groups
// give the ring's figure; and the NIC weight makes the all-to-all alone fill
// the node's NICs (G groups x weight x rate = B_node) whenever they are what
// limits it.
TEST(Collectives, AllToAllBandwidthHandComputed) {
  const double intra = 231e9, inter = 192e9;  // B_intra; B_node x m / D with m = D = 8
  EXPECT_DOUBLE_EQ(all_to_all_bus_bandwidth(16, 8, intra, inter), 15.0 / std::max(7.0 / intra, 8.0 * 8.0 / inter));
  EXPECT_DOUBLE_EQ(all_to_all_bus_bandwidth(8, 8, intra, inter), intra);   // one node
  EXPECT_DOUBLE_EQ(all_to_all_bus_bandwidth(16, 1, intra, 24e9), 24e9);    // one member per node
  EXPECT_TRUE(std::isinf(all_to_all_bus_bandwidth(1, 1, intra, inter)));
  for (const auto& [n, m] : {std::pair{16, 8}, std::pair{32, 4}, std::pair{64, 2}}) {
    const double groups = 8.0 / m, node_nics = 192e9;
    const double rate = all_to_all_bus_bandwidth(n, m, 1e30, node_nics * m / 8);  // NVLink not the limit
    EXPECT_NEAR(groups * all_to_all_nic_weight(n, m, 1.0) * rate, node_nics, node_nics * 1e-12) << n << " " << m;
  }
  EXPECT_DOUBLE_EQ(all_to_all_nic_weight(16, 1, 8.0), 8.0);  // one member per node: the ring's G
}

// The deduplicating dispatch's share of an all-to-all's cross-node copies,
// by hand: 128 experts, top 8, over 4 nodes (32 a node): a node gets none of
// a token's 8 experts with probability (96 x 95 x ... x 89) / (128 x ... x
// 121); a token then reaches 3 (1 - that) other nodes instead of 8 x 3/4 = 6
// copies. One expert a token dedups nothing; a token routed to every expert
// reaches every other node once: N / k.
TEST(Collectives, DeduplicatedDispatchShareHandComputed) {
  double none = 1;
  for (int i = 0; i < 8; ++i) none *= (96.0 - i) / (128.0 - i);
  EXPECT_NEAR(none, 0.09275, 1e-5);
  EXPECT_DOUBLE_EQ(deduplicated_remote_share(128, 8, 4), 3 * (1 - none) / 6.0);
  EXPECT_NEAR(deduplicated_remote_share(128, 8, 4), 0.4536, 1e-4);
  EXPECT_DOUBLE_EQ(deduplicated_remote_share(128, 8, 1), 1.0);  // one node: nothing crosses anyway
  EXPECT_NEAR(deduplicated_remote_share(64, 1, 8), 1.0, 1e-15);
  EXPECT_NEAR(deduplicated_remote_share(16, 16, 4), 4.0 / 16, 1e-15);
  // More experts a token, more of its copies share a node.
  EXPECT_LT(deduplicated_remote_share(256, 8, 8), deduplicated_remote_share(256, 2, 8));
}

// Group-limited routing against a brute force: every choice of the token's M
// groups (alike), and given it the exact chance that k distinct experts alike
// among the chosen groups' miss a node, over the nodes' layout of the groups.
double brute_force_share(std::int64_t experts, std::int64_t k, std::int64_t nodes, std::int64_t groups, std::int64_t chosen) {
  const std::int64_t per_group = experts / groups, per_node = experts / nodes;
  double hit_sum = 0;
  int subsets = 0;
  for (std::uint32_t mask = 0; mask < (1u << groups); ++mask) {
    if (std::popcount(mask) != chosen) continue;
    ++subsets;
    // node 1 (an other node than the token's, by symmetry any): its experts among the candidates
    std::int64_t held = 0, pool = 0;
    for (std::int64_t e = 0; e < experts; ++e) {
      if (!(mask >> (e / per_group) & 1u)) continue;
      ++pool;
      if (e / per_node == 1) ++held;
    }
    double none = 1;
    for (std::int64_t i = 0; i < k; ++i) none *= std::max(0.0, double(pool - held - i)) / double(pool - i);
    hit_sum += 1 - none;
  }
  const double hit = hit_sum / subsets, n = double(nodes);
  return (n - 1) * hit / (double(k) * (n - 1) / n);
}

// DeepSeek-V3's node-limited routing (256 experts in 8 groups, a token within
// 4 of them, top 8, 64 ranks over 8 nodes): a node's group is chosen with
// probability 1/2, then 32 of the 128 candidates are its; a token reaches 3.2
// other nodes instead of 4.6 without the limit. Groups as many as nodes, more
// (c a node: the hypergeometric sum), fewer (a group over several nodes), all
// against the brute force; all the groups chosen is no limit; groups that do
// not align with the nodes are costed as none.
TEST(Collectives, DeduplicatedDispatchShareUnderGroupLimitedRouting) {
  double none = 1;
  for (int i = 0; i < 8; ++i) none *= (96.0 - i) / (128.0 - i);
  const double v3 = deduplicated_remote_share(ExpertRouting{256, 8, 8, 4}, 8);
  EXPECT_NEAR(v3, 0.5 * (1 - none), 1e-12);
  EXPECT_NEAR(v3 * 8 * 7 / 8, 3.175, 0.0005);  // other nodes a token reaches: the share of its k (N - 1) / N copies
  EXPECT_NEAR(deduplicated_remote_share(256, 8, 8) * 8 * 7 / 8, 4.633, 0.0005);
  EXPECT_LT(v3, deduplicated_remote_share(256, 8, 8));
  for (const auto& [experts, k, nodes, groups, chosen] : std::vector<std::array<std::int64_t, 5>>{
           {256, 8, 8, 8, 4}, {64, 6, 4, 16, 4}, {64, 4, 4, 8, 3}, {64, 4, 8, 4, 2}, {32, 2, 8, 2, 1}, {48, 6, 4, 12, 5}}) {
    EXPECT_NEAR(deduplicated_remote_share(ExpertRouting{experts, k, groups, chosen}, nodes),
                brute_force_share(experts, k, nodes, groups, chosen), 1e-12)
        << experts << " experts, top " << k << ", " << nodes << " nodes, " << chosen << " of " << groups << " groups";
  }
  EXPECT_DOUBLE_EQ(deduplicated_remote_share(ExpertRouting{256, 8, 8, 8}, 8), deduplicated_remote_share(256, 8, 8));
  EXPECT_DOUBLE_EQ(deduplicated_remote_share(ExpertRouting{24, 2, 3, 1}, 2), deduplicated_remote_share(24, 2, 2));
}

TEST(Collectives, Names) {
  EXPECT_EQ(to_string(Collective::all_reduce), "all_reduce");
  EXPECT_EQ(to_string(Collective::reduce_scatter), "reduce_scatter");
  EXPECT_EQ(to_string(Collective::send_recv), "send_recv");
  EXPECT_EQ(to_string(CollectiveAlgorithm::tree), "tree");
}

}  // namespace
}  // namespace meshplan
