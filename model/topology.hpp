// The cluster as a graph, and where each mesh axis lands on it.
//
// Why a graph and not three numbers: an axis's bandwidth depends on which
// links its groups actually use and on who else uses them. A tp group inside
// one node rides the devices' NVLink/PCIe links to the node switch; a dp group
// spread over nodes rides the node's NICs, which every group with members on
// that node shares. Building the links once as a Boost.Graph (devices, one
// switch per node, the node's NICs, one fabric) and reading bandwidths and
// latencies off its edges keeps that sharing explicit, and gives the simulator
// the same picture to replay transfers on.
//
// Conventions (docs/cost-model.md (Communication) derives every rule below):
//   * bandwidths are per direction, already scaled by the link's
//     achievable_fraction (what NCCL collectives reach of the line rate);
//   * a device--switch edge carries half the intra_node latency, so the path
//     device -> switch -> device costs exactly the preset's intra latency;
//     a NIC--fabric edge carries half the inter_node latency, so the path
//     NIC -> fabric -> NIC costs exactly the preset's inter latency;
//     switch--NIC edges (a PCIe hop inside the node) cost nothing extra.
//   * rank r sits on node r / D (D = devices per node in use), device
//     r mod D: consecutive ranks fill a node first, as launchers assign them.
//
// Defines: Topology, build_topology, path_between, node_nic_bandwidth,
// AxisPlacement, place_axes, nic_share, bandwidth_with_nic_share.
#pragma once

#include <boost/graph/adjacency_list.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/cluster_spec.hpp"
#include "model/mesh.hpp"

namespace meshplan {

enum class TopologyVertexKind { device, node_switch, nic, fabric };

std::string to_string(TopologyVertexKind kind);

struct TopologyVertex {
  TopologyVertexKind kind = TopologyVertexKind::device;
  std::int64_t node = 0;   // the node it belongs to (0 for the fabric)
  std::int64_t index = 0;  // device: global rank; nic: NIC number within the node; switch/fabric: 0
};

struct TopologyLink {
  double bandwidth_bytes_per_s = 0;  // per direction, x achievable_fraction
  double latency_s = 0;              // this edge's share of the path latency (see the conventions above)
};

using TopologyGraph =
    boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS, TopologyVertex, TopologyLink>;

// Vertex layout (vecS, so descriptors are indices): devices 0 .. W-1 (device
// `rank` is vertex `rank`), then one switch per node, then each node's NICs,
// then the fabric. Only the nodes and devices the world size uses are built.
// The lowest-latency path between two devices (Dijkstra on edge latency):
// its summed latency, its narrowest edge and its edge count. A device to
// itself is a path of 0 hops, infinite bandwidth and no latency.
struct TopologyPath {
  double bandwidth_bytes_per_s = 0;  // narrowest edge: what one flow alone could get
  double latency_s = 0;              // sum over the edges
  std::int64_t hops = 0;
};
struct Topology {
  TopologyGraph graph;
  std::int64_t world_size = 0;        // W
  std::int64_t nodes = 0;             // ceil(W / D)
  std::int64_t devices_per_node = 0;  // D = min(cluster's devices_per_node, W)
  // Nodes are alike, so two paths describe every pair of devices: inside a
  // node (ranks 0 and 1) and across nodes (ranks 0 and D), found once by
  // path_between when the graph is built; and B_node, the NIC bandwidth of
  // a node. place_axes() reads these instead of searching the graph per axis.
  TopologyPath intra_node_path{};
  TopologyPath inter_node_path{};
  double node_nic_bandwidth_bytes_per_s = 0;
  // LinkSpec::overlaps_compute of the intra- and inter-node links.
  bool intra_node_overlaps_compute = true;
  bool inter_node_overlaps_compute = true;
  // What place_axes found walking the groups of an axis that does not tile
  // nodes (O(W) each), by (size, stride): a search places hundreds of meshes
  // whose axes repeat those pairs. Made by build_topology, shared by copies,
  // safe for the search's threads; null: nothing is kept.
  std::shared_ptr<struct AxisScanCache> scan_cache;

  // Vertex of device `rank`, 0 <= rank < world_size.
  TopologyGraph::vertex_descriptor device(std::int64_t rank) const;
  // Vertex of node `node`'s switch (NVSwitch, PCIe switch or ICI), 0 <= node < nodes.
  TopologyGraph::vertex_descriptor node_switch(std::int64_t node) const;
  std::int64_t node_of(std::int64_t rank) const { return rank / devices_per_node; }
};

// The devices, switches, NICs and fabric of the first ceil(W / D) nodes of
// `cluster`. world_size < 1 gives an empty topology.
Topology build_topology(const ClusterSpec& cluster, std::int64_t world_size);

TopologyPath path_between(const Topology& topology, std::int64_t from_rank, std::int64_t to_rank);

// B_node: the node's NIC bandwidth, read from the graph as the sum over the
// NICs attached to the node's switch of each NIC's narrowest edge.
double node_nic_bandwidth_bytes_per_s(const Topology& topology, std::int64_t node);

// How the groups of an axis (`size` ranks, `stride` apart) lie on nodes of
// `devices_per_node` devices when they tile the nodes evenly: `members_per_node`
// members of each group on each of `nodes` nodes (nodes = 1: inside one node).
// Nothing when they do not tile evenly (a size or stride that does not divide
// the node, or straddles it). On a world of whole nodes, two axes with the same
// layout are placed alike whatever their strides: place_axes's closed forms.
struct EvenGroupLayout {
  std::int64_t members_per_node = 1;
  std::int64_t nodes = 1;
  bool operator==(const EvenGroupLayout&) const = default;
};
std::optional<EvenGroupLayout> even_group_layout(std::int64_t size, std::int64_t stride, std::int64_t devices_per_node);

// How one mesh axis lands on the topology. Axis i has stride = product of the
// sizes of the axes after it (the last axis varies fastest); a group of axis
// i is the `size` ranks that differ only in coordinate i.
struct AxisPlacement {
  Axis axis = Axis::dp;
  std::int64_t size = 1;
  std::int64_t stride = 1;
  std::int64_t members_per_node = 1;  // m: members of one group on one node (the fewest, if groups are uneven)
  std::int64_t nodes_spanned = 1;     // nodes one group touches (the most, if groups are uneven)
  bool crosses_nodes = false;
  // Achievable per-rank bus bandwidth of a collective over one group while all
  // groups of the axis communicate at once: min(B_intra if m > 1, B_node m / D
  // if it crosses nodes). For uneven groups, B_intra counts if any group has two
  // members on a node, and B_node m / D becomes B_node / G, G = crossing groups
  // sharing the node (the smallest share). +inf for a size-1 axis.
  double bandwidth_bytes_per_s = 0;
  double latency_s = 0;  // one step: the crossing path's latency if it crosses nodes, else the intra path's
  // The two terms of that minimum, +inf where the group does not use the hop
  // kind; bandwidth_with_nic_share() recombines them when axes share NICs.
  double intra_bandwidth_bytes_per_s = 0;  // B_intra
  double inter_bandwidth_bytes_per_s = 0;  // B_node m / D
  // An all-to-all's bus bandwidth: bandwidth_bytes_per_s inside a node or with
  // one member per node; lower when m > 1 members per node share the group's
  // NICs, which an all-to-all cannot aggregate (all_to_all_bus_bandwidth).
  double all_to_all_bandwidth_bytes_per_s = 0;
  // False when a hop the groups use cannot move data while the devices
  // compute (LinkSpec::overlaps_compute): then none of the axis's
  // communication is hidden.
  bool overlaps_compute = true;
};

// One entry per mesh axis, in mesh order. Size-1 axes cost nothing
// (bandwidth +inf, latency 0). The mesh's world size must equal the
// topology's (the planner validates that first); a mismatch throws
// std::logic_error naming this file and line.
// `closed_forms` false walks every group even where a closed form applies
// (tests compare the two).
std::vector<AxisPlacement> place_axes(const Topology& topology, const Mesh& mesh, bool closed_forms = true);

// The factor (<= 1) a crossing axis's NIC bandwidth is multiplied by when the
// axes in `concurrent` communicate at the same time: the node's NICs are split
// equally between the k_x of them that cross nodes, 1 / k_x; 1 when k_x <= 1.
// Axes in `concurrent` that are not in `placements`, have size 1, or stay in
// a node do not count; an axis listed twice counts once.
double nic_share(const std::vector<AxisPlacement>& placements, const std::vector<Axis>& concurrent);

// An axis's bandwidth when its NIC share is `share`: min(B_intra, share x
// B_node m / D). Only the NIC term is divided: intra-node links are not shared.
double bandwidth_with_nic_share(const AxisPlacement& placement, double share);

}  // namespace meshplan
