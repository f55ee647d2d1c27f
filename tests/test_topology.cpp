// The topology graph (vertex and edge counts, scaled link bandwidths, paths)
// and mesh-axis placement on the cluster presets: which axes stay in a node,
// which cross, and the per-rank bandwidth each gets when NICs are shared.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "model/cluster_spec.hpp"
#include "model/mesh.hpp"
#include "model/search.hpp"
#include "model/topology.hpp"
#include "test_support.hpp"

namespace meshplan {
namespace {
using namespace testing_support;

struct Counts {
  std::int64_t devices = 0, switches = 0, nics = 0, fabrics = 0;
};

Counts count_kinds(const TopologyGraph& graph) {
  Counts counts;
  for (auto v : boost::make_iterator_range(boost::vertices(graph))) {
    switch (graph[v].kind) {
      case TopologyVertexKind::device: ++counts.devices; break;
      case TopologyVertexKind::node_switch: ++counts.switches; break;
      case TopologyVertexKind::nic: ++counts.nics; break;
      case TopologyVertexKind::fabric: ++counts.fabrics; break;
    }
  }
  return counts;
}

ClusterSpec cluster(const std::string& name) { return must(load_cluster(name)); }

std::vector<AxisPlacement> place(const ClusterSpec& spec, const std::string& mesh_text) {
  const Mesh mesh = parse_mesh(mesh_text, "--mesh").value;
  return place_axes(build_topology(spec, mesh.world_size()), mesh);
}

TEST(Topology, DgxA100With1024GpusHas128Nodes) {
  const ClusterSpec dgx = cluster("dgx-a100");
  const Topology topology = build_topology(dgx, 1024);
  EXPECT_EQ(topology.world_size, 1024);
  EXPECT_EQ(topology.devices_per_node, 8);
  EXPECT_EQ(topology.nodes, 128);
  // W devices + N switches + N x 8 NICs + 1 fabric; W device links + 2 per NIC.
  EXPECT_EQ(boost::num_vertices(topology.graph), 1024u + 128 + 128 * 8 + 1);
  EXPECT_EQ(boost::num_edges(topology.graph), 1024u + 2 * 128 * 8);
  const Counts counts = count_kinds(topology.graph);
  EXPECT_EQ(counts.devices, 1024);
  EXPECT_EQ(counts.switches, 128);
  EXPECT_EQ(counts.nics, 1024);
  EXPECT_EQ(counts.fabrics, 1);
  EXPECT_EQ(topology.graph[topology.device(77)].node, 9);
  EXPECT_EQ(topology.graph[topology.device(77)].index, 77);
  EXPECT_EQ(topology.graph[topology.node_switch(9)].kind, TopologyVertexKind::node_switch);
  EXPECT_EQ(boost::out_degree(topology.node_switch(9), topology.graph), 8u + 8u);  // 8 devices, 8 NICs
}

TEST(Topology, BuildsOnlyWhatTheWorldSizeUses) {
  const ClusterSpec dgx = cluster("dgx-a100");
  const Topology small = build_topology(dgx, 4);  // half a node: D = min(8, 4)
  EXPECT_EQ(small.devices_per_node, 4);
  EXPECT_EQ(small.nodes, 1);
  EXPECT_EQ(boost::num_vertices(small.graph), 4u + 1 + 8 + 1);
  EXPECT_EQ(boost::num_edges(small.graph), 4u + 2 * 8);
  const Topology partial = build_topology(dgx, 12);  // one full node and 4 devices of a second
  EXPECT_EQ(partial.nodes, 2);
  EXPECT_EQ(boost::num_vertices(partial.graph), 12u + 2 + 16 + 1);
  EXPECT_EQ(boost::num_edges(partial.graph), 12u + 32);
  EXPECT_EQ(boost::num_vertices(build_topology(dgx, 0).graph), 0u);
  const Topology ethernet = build_topology(cluster("ethernet-10g"), 32);
  EXPECT_EQ(ethernet.nodes, 4);
  EXPECT_EQ(boost::num_vertices(ethernet.graph), 32u + 4 + 4 + 1);
  EXPECT_EQ(boost::num_edges(ethernet.graph), 32u + 2 * 4);
}

TEST(Topology, EdgesCarryAchievableBandwidthAndLatencyHalves) {
  const ClusterSpec dgx = cluster("dgx-a100");
  const Topology topology = build_topology(dgx, 16);
  const double intra = 300e9 * dgx.intra_node.achievable_fraction;
  const double nic = 25e9 * dgx.inter_node.achievable_fraction;
  const auto [device_edge, found] = boost::edge(topology.device(3), topology.node_switch(0), topology.graph);
  ASSERT_TRUE(found);
  EXPECT_DOUBLE_EQ(topology.graph[device_edge].bandwidth_bytes_per_s, intra);
  EXPECT_DOUBLE_EQ(topology.graph[device_edge].latency_s, 1e-6);
  EXPECT_DOUBLE_EQ(node_nic_bandwidth_bytes_per_s(topology, 1), 8 * nic);

  const TopologyPath inside = path_between(topology, 0, 5);
  EXPECT_EQ(inside.hops, 2);  // device -> switch -> device
  EXPECT_DOUBLE_EQ(inside.bandwidth_bytes_per_s, intra);
  EXPECT_DOUBLE_EQ(inside.latency_s, 2e-6);  // the preset's intra latency
  const TopologyPath across = path_between(topology, 0, 13);
  EXPECT_EQ(across.hops, 6);  // device -> switch -> NIC -> fabric -> NIC -> switch -> device
  EXPECT_DOUBLE_EQ(across.bandwidth_bytes_per_s, nic);
  EXPECT_DOUBLE_EQ(across.latency_s, 5e-6 + 2e-6);  // inter latency + the intra hops at each end
  const TopologyPath self = path_between(topology, 4, 4);
  EXPECT_EQ(self.hops, 0);
  EXPECT_EQ(self.latency_s, 0.0);
}

TEST(Topology, PresetsCarryTheirAchievableFractions) {
  const ClusterSpec dgx = cluster("dgx-a100");
  EXPECT_DOUBLE_EQ(dgx.intra_node.achievable_fraction, 0.77);
  EXPECT_DOUBLE_EQ(dgx.inter_node.achievable_fraction, 0.96);
  for (const char* name : {"dgx-a100", "dgx-h100", "pcie-a100", "ethernet-10g"}) {
    const ClusterSpec spec = cluster(name);
    for (double fraction : {spec.intra_node.achievable_fraction, spec.inter_node.achievable_fraction}) {
      EXPECT_GT(fraction, 0.0) << name;
      EXPECT_LT(fraction, 1.0) << name << ": every preset cites a measured or derived fraction";
    }
  }
}

TEST(Placement, DgxA100ThreeDMesh) {
  const ClusterSpec dgx = cluster("dgx-a100");
  const auto axes = place(dgx, "dp=16,pp=8,tp=8");
  ASSERT_EQ(axes.size(), 3u);
  const double nvlink = 300e9 * dgx.intra_node.achievable_fraction;
  const double node_nics = 200e9 * dgx.inter_node.achievable_fraction;  // 8 x 200 Gb/s

  const AxisPlacement& dp = axes[0];
  const AxisPlacement& pp = axes[1];
  const AxisPlacement& tp = axes[2];
  EXPECT_EQ(tp.axis, Axis::tp);
  EXPECT_EQ(tp.stride, 1);
  EXPECT_EQ(tp.members_per_node, 8);
  EXPECT_EQ(tp.nodes_spanned, 1);
  EXPECT_FALSE(tp.crosses_nodes);
  EXPECT_DOUBLE_EQ(tp.bandwidth_bytes_per_s, nvlink);
  EXPECT_DOUBLE_EQ(tp.latency_s, 2e-6);

  EXPECT_EQ(pp.axis, Axis::pp);
  EXPECT_EQ(pp.stride, 8);
  EXPECT_EQ(pp.members_per_node, 1);
  EXPECT_EQ(pp.nodes_spanned, 8);
  EXPECT_TRUE(pp.crosses_nodes);
  EXPECT_DOUBLE_EQ(pp.bandwidth_bytes_per_s, node_nics / 8);  // B_node m / D, m = 1: one NIC per GPU
  EXPECT_DOUBLE_EQ(pp.latency_s, 7e-6);

  EXPECT_EQ(dp.axis, Axis::dp);
  EXPECT_EQ(dp.stride, 64);
  EXPECT_EQ(dp.members_per_node, 1);
  EXPECT_EQ(dp.nodes_spanned, 16);
  EXPECT_TRUE(dp.crosses_nodes);
  EXPECT_DOUBLE_EQ(dp.bandwidth_bytes_per_s, node_nics / 8);
  EXPECT_TRUE(std::isinf(dp.intra_bandwidth_bytes_per_s));  // m = 1: no intra-node hop
}

TEST(Placement, TensorParallelOverTwoNodesIsPricedByItsSlowestHop) {
  const ClusterSpec dgx = cluster("dgx-a100");
  const auto axes = place(dgx, "tp=16");
  ASSERT_EQ(axes.size(), 1u);
  const AxisPlacement& tp = axes[0];
  EXPECT_TRUE(tp.crosses_nodes);
  EXPECT_EQ(tp.members_per_node, 8);
  EXPECT_EQ(tp.nodes_spanned, 2);
  const double nvlink = 300e9 * dgx.intra_node.achievable_fraction;
  const double node_nics = 200e9 * dgx.inter_node.achievable_fraction;
  // One group fills both nodes: it gets the whole node's NICs, B_node x 8 / 8.
  EXPECT_DOUBLE_EQ(tp.inter_bandwidth_bytes_per_s, node_nics);
  EXPECT_DOUBLE_EQ(tp.intra_bandwidth_bytes_per_s, nvlink);
  EXPECT_DOUBLE_EQ(tp.bandwidth_bytes_per_s, std::min(nvlink, node_nics));
  EXPECT_DOUBLE_EQ(tp.latency_s, 7e-6);
}

// An all-to-all over ep=16 on two DGX A100 nodes cannot spread over the
// nodes' NICs as a ring does: each GPU's 8/16 of its bytes for the other node
// leave through its own NIC (B_node / 8), the 7/16 for node-mates over
// NVLink at once. Inside a node, and with one member per node, it is the
// ring's figure.
TEST(Placement, AllToAllAcrossNodesGetsEachRanksOwnNic) {
  const ClusterSpec dgx = cluster("dgx-a100");
  const double nvlink = 300e9 * dgx.intra_node.achievable_fraction;
  const double node_nics = 200e9 * dgx.inter_node.achievable_fraction;
  const AxisPlacement ep = place(dgx, "ep=16")[0];
  ASSERT_TRUE(ep.crosses_nodes);
  const double intra_s = (7.0 / 16) / nvlink, inter_s = (8.0 / 16) / (node_nics / 8);  // per byte of S
  EXPECT_DOUBLE_EQ(ep.all_to_all_bandwidth_bytes_per_s, (15.0 / 16) / std::max(intra_s, inter_s));
  EXPECT_LT(ep.all_to_all_bandwidth_bytes_per_s, ep.bandwidth_bytes_per_s / 4);  // 45 against 192 GB/s
  EXPECT_DOUBLE_EQ(place(dgx, "ep=8")[0].all_to_all_bandwidth_bytes_per_s, nvlink);
  const auto one_per_node = place(dgx, "ep=4,tp=8");  // ep's members are 8 ranks apart: one per node
  EXPECT_EQ(one_per_node[0].members_per_node, 1);
  EXPECT_DOUBLE_EQ(one_per_node[0].all_to_all_bandwidth_bytes_per_s, one_per_node[0].bandwidth_bytes_per_s);
}

TEST(Placement, EthernetCluster) {
  const ClusterSpec eth = cluster("ethernet-10g");
  const auto inside = place(eth, "tp=8");  // 8 GPUs of one node: PCIe
  EXPECT_FALSE(inside[0].crosses_nodes);
  EXPECT_DOUBLE_EQ(inside[0].bandwidth_bytes_per_s, 32e9 * eth.intra_node.achievable_fraction);
  EXPECT_DOUBLE_EQ(inside[0].latency_s, 5e-6);

  const auto axes = place(eth, "dp=4,tp=8");  // dp across 4 nodes, one NIC per node shared by 8 GPUs
  EXPECT_TRUE(axes[0].crosses_nodes);
  EXPECT_EQ(axes[0].members_per_node, 1);
  EXPECT_DOUBLE_EQ(axes[0].bandwidth_bytes_per_s, 1.25e9 * eth.inter_node.achievable_fraction / 8);
  EXPECT_DOUBLE_EQ(axes[0].latency_s, 30e-6 + 5e-6);
  EXPECT_FALSE(axes[1].crosses_nodes);
}

TEST(Placement, SizeOneAxesAreFree) {
  const auto axes = place(cluster("dgx-a100"), "dp=8,pp=1,tp=1");
  ASSERT_EQ(axes.size(), 3u);
  for (std::size_t i : {1u, 2u}) {
    EXPECT_EQ(axes[i].size, 1);
    EXPECT_FALSE(axes[i].crosses_nodes);
    EXPECT_TRUE(std::isinf(axes[i].bandwidth_bytes_per_s));
    EXPECT_EQ(axes[i].latency_s, 0.0);
  }
  EXPECT_EQ(axes[0].stride, 1);
  EXPECT_EQ(axes[0].members_per_node, 8);
}

TEST(Placement, UnevenGroupsShareEachNodesNicsByCount) {
  // 12 ranks on 8-GPU nodes, tp=3: the group {6, 7, 8} straddles nodes 0 and 1
  // and is the only crossing tp group, so it has both nodes' NICs to itself;
  // all three dp groups ({0,3,6,9}, {1,4,7,10}, {2,5,8,11}) cross and share them.
  const ClusterSpec dgx = cluster("dgx-a100");
  const auto axes = place(dgx, "dp=4,tp=3");
  const double node_nics = 200e9 * dgx.inter_node.achievable_fraction;
  const double nvlink = 300e9 * dgx.intra_node.achievable_fraction;
  const AxisPlacement& dp = axes[0];
  const AxisPlacement& tp = axes[1];
  EXPECT_TRUE(tp.crosses_nodes);
  EXPECT_EQ(tp.members_per_node, 1);  // the straddling group has 1 member on node 1
  EXPECT_EQ(tp.nodes_spanned, 2);
  EXPECT_DOUBLE_EQ(tp.bandwidth_bytes_per_s, std::min(nvlink, node_nics));
  EXPECT_TRUE(dp.crosses_nodes);
  EXPECT_DOUBLE_EQ(dp.bandwidth_bytes_per_s, node_nics / 3);
}

TEST(Placement, MeshMustMatchTheTopology) {
  const Topology topology = build_topology(cluster("dgx-a100"), 16);
  EXPECT_THROW(place_axes(topology, parse_mesh("dp=4,tp=8", "--mesh").value), std::logic_error);
}

TEST(Placement, NicShareSplitsBetweenConcurrentCrossingAxes) {
  const ClusterSpec dgx = cluster("dgx-a100");
  const auto axes = place(dgx, "dp=16,pp=8,tp=8");
  EXPECT_DOUBLE_EQ(nic_share(axes, {Axis::dp, Axis::pp}), 0.5);
  EXPECT_DOUBLE_EQ(nic_share(axes, {Axis::dp, Axis::tp}), 1.0);  // tp stays in the node
  EXPECT_DOUBLE_EQ(nic_share(axes, {Axis::dp}), 1.0);
  EXPECT_DOUBLE_EQ(nic_share(axes, {Axis::dp, Axis::dp}), 1.0);  // listed twice, counted once
  EXPECT_DOUBLE_EQ(nic_share(axes, {Axis::dp, Axis::pp, Axis::ep}), 0.5);  // ep is not in the mesh
  EXPECT_DOUBLE_EQ(nic_share(axes, {}), 1.0);
  const double one_nic = 25e9 * dgx.inter_node.achievable_fraction;
  EXPECT_DOUBLE_EQ(bandwidth_with_nic_share(axes[1], 0.5), one_nic / 2);
  EXPECT_DOUBLE_EQ(bandwidth_with_nic_share(axes[2], 0.5), axes[2].bandwidth_bytes_per_s);  // NVLink not shared
  // tp=16 is NVLink-or-NIC bound: halving its NIC share makes the NIC the bottleneck.
  const auto wide = place(dgx, "dp=2,tp=16");
  EXPECT_DOUBLE_EQ(nic_share(wide, {Axis::dp, Axis::tp}), 0.5);
  EXPECT_DOUBLE_EQ(bandwidth_with_nic_share(wide[1], 0.5), 200e9 * dgx.inter_node.achievable_fraction / 2);
}

// Loads a cluster file with the given `achievable_fraction` line (or none) in
// both links, written to a temporary file that is removed afterwards.
Loaded<ClusterSpec> load_with_fraction(const std::string& fraction_line) {
  const auto path = std::filesystem::temp_directory_path() / "meshplan-test-achievable-fraction.yaml";
  {
    std::ofstream out(path);
    const std::string line = fraction_line.empty() ? "" : "  " + fraction_line + "\n";
    out << "name: fraction-test\nsource: test\ndevice: a100-80g\ndevices_per_node: 8\n"
        << "intra_node:\n  kind: nvlink\n  per_direction_gb_per_s: 300\n  latency_us: 2\n" << line
        << "inter_node:\n  kind: infiniband\n  nics_per_node: 8\n  per_nic_gbit_per_s: 200\n  latency_us: 5\n"
        << line;
  }
  auto loaded = load_cluster(path.string());
  std::filesystem::remove(path);
  return loaded;
}

TEST(ClusterSpecFraction, DefaultsToLineRateAndIsRangeChecked) {
  const ClusterSpec plain = must(load_with_fraction(""));
  EXPECT_DOUBLE_EQ(plain.intra_node.achievable_fraction, 1.0);
  EXPECT_DOUBLE_EQ(plain.inter_node.achievable_fraction, 1.0);
  const ClusterSpec half = must(load_with_fraction("achievable_fraction: 0.5"));
  EXPECT_DOUBLE_EQ(half.intra_node.achievable_fraction, 0.5);
  EXPECT_DOUBLE_EQ(half.inter_node.achievable_fraction, 0.5);
  // 1e-300 of the line rate priced a step at 1.6e297 s and "fits"; 1e-320, at inf.
  for (const char* bad : {"achievable_fraction: 0", "achievable_fraction: 1.5", "achievable_fraction: -0.2",
                          "achievable_fraction: most", "achievable_fraction: 1e-300", "achievable_fraction: 0.0009"}) {
    const auto loaded = load_with_fraction(bad);
    ASSERT_FALSE(loaded.ok()) << bad;
    const std::string text = messages(loaded.problems);
    EXPECT_NE(text.find("intra_node.achievable_fraction"), std::string::npos) << text;
    EXPECT_NE(text.find("inter_node.achievable_fraction"), std::string::npos) << text;
  }
}

}  // namespace
}  // namespace meshplan

namespace meshplan {
namespace {

void expect_same_placements(const std::vector<AxisPlacement>& a, const std::vector<AxisPlacement>& b, const Mesh& mesh) {
  ASSERT_EQ(a.size(), b.size()) << mesh.to_string();
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].members_per_node, b[i].members_per_node) << mesh.to_string();
    EXPECT_EQ(a[i].nodes_spanned, b[i].nodes_spanned) << mesh.to_string();
    EXPECT_EQ(a[i].crosses_nodes, b[i].crosses_nodes) << mesh.to_string();
    EXPECT_DOUBLE_EQ(a[i].bandwidth_bytes_per_s, b[i].bandwidth_bytes_per_s) << mesh.to_string();
    EXPECT_DOUBLE_EQ(a[i].latency_s, b[i].latency_s) << mesh.to_string();
  }
}

// The closed forms place_axes uses for groups that tile nodes evenly must
// give what walking every group gives, on every mesh the search enumerates.
TEST(Placement, ClosedFormsAgreeWithWalkingEveryGroup) {
  for (const char* cluster_name : {"dgx-a100", "ethernet-10g"}) {
    const ClusterSpec cluster = load_cluster(cluster_name).value;
    for (std::int64_t world : {8, 64, 96, 512, 1000, 1200}) {  // 1000, 1200: groups that straddle nodes, walked one period of lcm(block, D) ranks
      const Topology topology = build_topology(cluster, world);
      SearchSpace space;
      space.axes = {Axis::dp, Axis::fsdp, Axis::tp, Axis::pp, Axis::cp};
      for (const Mesh& mesh : enumerate_meshes(world, space, world)) {
        expect_same_placements(place_axes(topology, mesh), place_axes(topology, mesh, false), mesh);
      }
    }
  }
}

// A search places many meshes on one topology, and an axis whose groups do
// not tile nodes is walked device by device once per (size, stride): the
// kept walk must equal a fresh one, axis by axis, asked for in any order.
TEST(Placement, KeptWalksEqualFreshOnes) {
  const ClusterSpec cluster = load_cluster("dgx-a100").value;
  for (std::int64_t world : {96, 1000}) {
    const Topology kept = build_topology(cluster, world);
    ASSERT_NE(kept.scan_cache, nullptr);
    Topology fresh = build_topology(cluster, world);
    fresh.scan_cache.reset();
    SearchSpace space;
    space.axes = {Axis::dp, Axis::tp, Axis::pp};
    std::vector<Mesh> meshes = enumerate_meshes(world, space, world);
    ASSERT_GT(meshes.size(), 10u);
    for (int pass = 0; pass < 2; ++pass) {  // the second pass reads every walk from the cache
      for (bool closed_forms : {true, false}) {
        for (const Mesh& mesh : meshes) {
          expect_same_placements(place_axes(kept, mesh, closed_forms), place_axes(fresh, mesh, closed_forms), mesh);
        }
      }
      std::reverse(meshes.begin(), meshes.end());
    }
  }
}

}  // namespace
}  // namespace meshplan
