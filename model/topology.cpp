// Builds the topology graph and places mesh axes on it. The placement walks
// every group of an axis once (O(world size) per axis): enough to find how
// many members each group has on each node and how many crossing groups share
// each node's NICs, including meshes whose groups do not tile nodes evenly.
#include "model/topology.hpp"

#include <boost/graph/dijkstra_shortest_paths.hpp>

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <mutex>
#include <stdexcept>
#include <tuple>

#include "model/collectives.hpp"

namespace meshplan {

// What one pass over an axis's groups finds.
struct GroupScan {
  std::int64_t fewest_on_a_node = std::numeric_limits<std::int64_t>::max();
  std::int64_t most_on_a_node = 0;
  std::int64_t most_nodes = 0;
  std::int64_t intra_from = -1, intra_to = -1;  // two members of one group on one node
  std::int64_t cross_from = -1, cross_to = -1;  // two members of one group on different nodes
  double inter_bandwidth_bytes_per_s = std::numeric_limits<double>::infinity();
};

struct AxisScanCache {
  std::mutex mutex;
  std::map<std::tuple<std::int64_t, std::int64_t, bool>, GroupScan> scans;
};

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Calls visit(base) for the first rank of every group of an axis with this
// size and stride; the group is base, base + stride, ..., base + (size-1) stride.
template <typename Visit>
void for_each_group(std::int64_t world_size, std::int64_t size, std::int64_t stride, Visit visit) {
  const std::int64_t block = size * stride;
  for (std::int64_t outer = 0; outer < world_size; outer += block) {
    for (std::int64_t inner = 0; inner < stride; ++inner) visit(outer + inner);
  }
}

// The walk: every group of the axis among the first `ranks` ranks (a whole
// number of groups and of nodes), device by device.
GroupScan walk_groups(const Topology& topology, std::int64_t ranks, std::int64_t size, std::int64_t stride,
                      std::vector<double>& node_bandwidth_cache) {
  GroupScan scan;
  const std::int64_t d = topology.devices_per_node;
  std::vector<std::int64_t> crossing_groups_on_node(static_cast<std::size_t>((ranks + d - 1) / d), 0);

  for_each_group(ranks, size, stride, [&](std::int64_t base) {
    std::int64_t previous_rank = -1, previous_node = -1, run = 0, nodes_touched = 0;
    for (std::int64_t j = 0; j < size; ++j) {
      const std::int64_t rank = base + j * stride;
      const std::int64_t node = rank / d;
      if (node != previous_node) {
        if (run > 0) {
          scan.fewest_on_a_node = std::min(scan.fewest_on_a_node, run);
          scan.most_on_a_node = std::max(scan.most_on_a_node, run);
        }
        if (previous_node >= 0 && scan.cross_from < 0) {
          scan.cross_from = previous_rank;
          scan.cross_to = rank;
        }
        ++nodes_touched;
        previous_node = node;
        run = 1;
      } else {
        ++run;
        if (scan.intra_from < 0) {
          scan.intra_from = previous_rank;
          scan.intra_to = rank;
        }
      }
      previous_rank = rank;
    }
    scan.fewest_on_a_node = std::min(scan.fewest_on_a_node, run);
    scan.most_on_a_node = std::max(scan.most_on_a_node, run);
    scan.most_nodes = std::max(scan.most_nodes, nodes_touched);
    if (nodes_touched > 1) {
      std::int64_t last_node = -1;
      for (std::int64_t j = 0; j < size; ++j) {
        const std::int64_t node = (base + j * stride) / d;
        if (node != last_node) ++crossing_groups_on_node[static_cast<std::size_t>(node)];
        last_node = node;
      }
    }
  });
  if (scan.most_nodes <= 1) return scan;

  const std::size_t nodes_walked = crossing_groups_on_node.size();
  for (std::size_t node = node_bandwidth_cache.size(); node < nodes_walked; ++node) {
    node_bandwidth_cache.push_back(node_nic_bandwidth_bytes_per_s(topology, static_cast<std::int64_t>(node)));
  }
  for_each_group(ranks, size, stride, [&](std::int64_t base) {
    const std::int64_t first_node = base / d;
    const std::int64_t last_node = (base + (size - 1) * stride) / d;
    if (first_node == last_node) return;
    for (std::int64_t j = 0; j < size; ++j) {
      const auto node = static_cast<std::size_t>((base + j * stride) / d);
      const double share = node_bandwidth_cache[node] / static_cast<double>(crossing_groups_on_node[node]);
      scan.inter_bandwidth_bytes_per_s = std::min(scan.inter_bandwidth_bytes_per_s, share);
    }
  });
  return scan;
}

// Counts members per node (a group's ranks rise, so its nodes come in runs),
// then gives each crossing group the share B_node / G of every node it
// touches, G = crossing groups with members on that node; the axis gets the
// smallest share. When groups tile nodes evenly G = D / m, so the share is
// B_node m / D (docs/cost-model.md (Communication), "Axis bandwidth").
GroupScan scan_groups(const Topology& topology, std::int64_t size, std::int64_t stride,
                      std::vector<double>& node_bandwidth_cache, bool closed_forms) {
  GroupScan scan;
  const std::int64_t d = topology.devices_per_node;
  // Groups that tile nodes evenly (every mesh of whole nodes the search makes
  // with power-of-two-like sizes) have closed forms; the walk below is for the rest.
  const std::int64_t block = size * stride;
  if (closed_forms && topology.world_size % d == 0) {
    const std::optional<EvenGroupLayout> even = even_group_layout(size, stride, d);
    if (even && even->nodes == 1) {  // every group inside one node
      scan.fewest_on_a_node = scan.most_on_a_node = size;
      scan.most_nodes = 1;
      scan.intra_from = 0;
      scan.intra_to = stride;
      return scan;
    }
    if (even) {  // m members on each of block / d nodes
      const std::int64_t m = even->members_per_node;
      scan.fewest_on_a_node = scan.most_on_a_node = m;
      scan.most_nodes = even->nodes;
      if (m > 1) {
        scan.intra_from = 0;
        scan.intra_to = stride;
      }
      scan.cross_from = (m - 1) * stride;
      scan.cross_to = m * stride;
      // D / m crossing groups share each node's NICs: B_node m / D.
      scan.inter_bandwidth_bytes_per_s =
          topology.node_nic_bandwidth_bytes_per_s * static_cast<double>(m) / static_cast<double>(d);
      return scan;
    }
  }
  // Groups lie inside blocks of size x stride ranks; with whole nodes, the
  // ranks repeat their pattern of groups over nodes every lcm(block, D) ranks,
  // and nodes are alike, so one period tells what the whole world does.
  std::int64_t ranks = topology.world_size;
  if (closed_forms && topology.world_size % d == 0) {
    const std::int64_t period = std::lcm(block, d);
    if (topology.world_size % period == 0) ranks = period;
  }
  if (!topology.scan_cache) return walk_groups(topology, ranks, size, stride, node_bandwidth_cache);
  const auto key = std::make_tuple(size, stride, closed_forms);
  {
    const std::lock_guard<std::mutex> lock(topology.scan_cache->mutex);
    const auto found = topology.scan_cache->scans.find(key);
    if (found != topology.scan_cache->scans.end()) return found->second;
  }
  const GroupScan walked = walk_groups(topology, ranks, size, stride, node_bandwidth_cache);
  const std::lock_guard<std::mutex> lock(topology.scan_cache->mutex);
  topology.scan_cache->scans.emplace(key, walked);
  return walked;
}

}  // namespace

std::optional<EvenGroupLayout> even_group_layout(std::int64_t size, std::int64_t stride, std::int64_t devices_per_node) {
  const std::int64_t d = devices_per_node, block = size * stride;
  if (block <= d && d % block == 0) return EvenGroupLayout{size, 1};  // every group inside one node
  if (stride % d == 0) return EvenGroupLayout{1, size};               // one member on each of `size` nodes
  if (d % stride == 0 && block % d == 0) return EvenGroupLayout{d / stride, size / (d / stride)};
  return std::nullopt;
}

std::string to_string(TopologyVertexKind kind) {
  switch (kind) {
    case TopologyVertexKind::device: return "device";
    case TopologyVertexKind::node_switch: return "node_switch";
    case TopologyVertexKind::nic: return "nic";
    case TopologyVertexKind::fabric: return "fabric";
  }
  return "?";
}

TopologyGraph::vertex_descriptor Topology::device(std::int64_t rank) const {
  return static_cast<TopologyGraph::vertex_descriptor>(rank);
}

TopologyGraph::vertex_descriptor Topology::node_switch(std::int64_t node) const {
  return static_cast<TopologyGraph::vertex_descriptor>(world_size + node);
}

Topology build_topology(const ClusterSpec& cluster, std::int64_t world_size) {
  Topology topology;
  if (world_size < 1) return topology;
  topology.scan_cache = std::make_shared<AxisScanCache>();
  const std::int64_t d = std::clamp<std::int64_t>(cluster.devices_per_node, 1, world_size);
  const std::int64_t nodes = (world_size + d - 1) / d;
  const std::int64_t nics_per_node = std::max<std::int64_t>(cluster.inter_node.nics_per_node, 0);
  topology.world_size = world_size;
  topology.devices_per_node = d;
  topology.nodes = nodes;

  // Achievable bandwidth = line rate x the fraction NCCL reaches (presets cite it).
  const TopologyLink device_link{
      cluster.intra_node.bandwidth_bytes_per_s * cluster.intra_node.achievable_fraction,
      cluster.intra_node.latency_s / 2};
  const double nic_bandwidth = cluster.inter_node.bandwidth_bytes_per_s * cluster.inter_node.achievable_fraction;
  const TopologyLink nic_to_switch{nic_bandwidth, 0.0};
  const TopologyLink nic_to_fabric{nic_bandwidth, cluster.inter_node.latency_s / 2};

  TopologyGraph& graph = topology.graph;
  for (std::int64_t rank = 0; rank < world_size; ++rank) {
    boost::add_vertex(TopologyVertex{TopologyVertexKind::device, rank / d, rank}, graph);
  }
  for (std::int64_t node = 0; node < nodes; ++node) {
    boost::add_vertex(TopologyVertex{TopologyVertexKind::node_switch, node, 0}, graph);
  }
  for (std::int64_t node = 0; node < nodes; ++node) {
    for (std::int64_t nic = 0; nic < nics_per_node; ++nic) {
      boost::add_vertex(TopologyVertex{TopologyVertexKind::nic, node, nic}, graph);
    }
  }
  const auto fabric = boost::add_vertex(TopologyVertex{TopologyVertexKind::fabric, 0, 0}, graph);

  for (std::int64_t rank = 0; rank < world_size; ++rank) {
    boost::add_edge(topology.device(rank), topology.node_switch(rank / d), device_link, graph);
  }
  for (std::int64_t node = 0; node < nodes; ++node) {
    for (std::int64_t nic = 0; nic < nics_per_node; ++nic) {
      const auto vertex = static_cast<TopologyGraph::vertex_descriptor>(world_size + nodes + node * nics_per_node + nic);
      boost::add_edge(vertex, topology.node_switch(node), nic_to_switch, graph);
      boost::add_edge(vertex, fabric, nic_to_fabric, graph);
    }
  }
  topology.intra_node_overlaps_compute = cluster.intra_node.overlaps_compute;
  topology.inter_node_overlaps_compute = cluster.inter_node.overlaps_compute;
  if (d > 1) topology.intra_node_path = path_between(topology, 0, 1);
  if (nodes > 1) topology.inter_node_path = path_between(topology, 0, d);
  topology.node_nic_bandwidth_bytes_per_s = node_nic_bandwidth_bytes_per_s(topology, 0);
  return topology;
}

TopologyPath path_between(const Topology& topology, std::int64_t from_rank, std::int64_t to_rank) {
  const TopologyGraph& graph = topology.graph;
  const auto source = topology.device(from_rank);
  const auto target = topology.device(to_rank);
  if (source == target) return {kInfinity, 0.0, 0};

  const std::size_t count = boost::num_vertices(graph);
  std::vector<TopologyGraph::vertex_descriptor> predecessor(count);
  std::vector<double> distance(count);
  const auto index = boost::get(boost::vertex_index, graph);
  boost::dijkstra_shortest_paths(
      graph, source,
      boost::weight_map(boost::get(&TopologyLink::latency_s, graph))
          .predecessor_map(boost::make_iterator_property_map(predecessor.begin(), index))
          .distance_map(boost::make_iterator_property_map(distance.begin(), index)));

  TopologyPath path{kInfinity, 0.0, 0};
  for (auto vertex = target; vertex != source;) {
    const auto previous = predecessor[vertex];
    if (previous == vertex) return {0.0, kInfinity, 0};  // unreachable: no NICs between the nodes
    const auto [edge, found] = boost::edge(previous, vertex, graph);
    (void)found;  // a predecessor is always joined to its successor
    path.bandwidth_bytes_per_s = std::min(path.bandwidth_bytes_per_s, graph[edge].bandwidth_bytes_per_s);
    path.latency_s += graph[edge].latency_s;
    ++path.hops;
    vertex = previous;
  }
  return path;
}

double node_nic_bandwidth_bytes_per_s(const Topology& topology, std::int64_t node) {
  const TopologyGraph& graph = topology.graph;
  double total = 0;
  for (auto to_nic : boost::make_iterator_range(boost::out_edges(topology.node_switch(node), graph))) {
    const auto nic = boost::target(to_nic, graph);
    if (graph[nic].kind != TopologyVertexKind::nic) continue;
    double narrowest = kInfinity;
    for (auto edge : boost::make_iterator_range(boost::out_edges(nic, graph))) {
      narrowest = std::min(narrowest, graph[edge].bandwidth_bytes_per_s);
    }
    total += narrowest;
  }
  return total;
}

std::vector<AxisPlacement> place_axes(const Topology& topology, const Mesh& mesh, bool closed_forms) {
  if (mesh.world_size() != topology.world_size) {
    throw std::logic_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": mesh " + mesh.to_string() +
                           " has " + std::to_string(mesh.world_size()) + " ranks but the topology was built for " +
                           std::to_string(topology.world_size));
  }
  std::vector<AxisPlacement> placements(mesh.axes.size());
  std::vector<double> node_bandwidth_cache;  // B_node per node, read from the graph once
  std::int64_t stride = 1;
  for (std::size_t i = mesh.axes.size(); i-- > 0;) {
    AxisPlacement& placement = placements[i];
    placement.axis = mesh.axes[i].axis;
    placement.size = mesh.axes[i].size;
    placement.stride = stride;
    stride *= placement.size;
    placement.bandwidth_bytes_per_s = kInfinity;
    placement.intra_bandwidth_bytes_per_s = kInfinity;
    placement.inter_bandwidth_bytes_per_s = kInfinity;
    placement.all_to_all_bandwidth_bytes_per_s = kInfinity;
    if (placement.size <= 1) continue;

    const GroupScan scan = scan_groups(topology, placement.size, placement.stride, node_bandwidth_cache, closed_forms);
    placement.members_per_node = scan.fewest_on_a_node;
    placement.nodes_spanned = scan.most_nodes;
    placement.crosses_nodes = scan.most_nodes > 1;
    // B_intra: the devices' links to their switch, read along an intra-node path.
    TopologyPath intra_path{kInfinity, 0.0, 0};
    if (scan.most_on_a_node > 1) {
      intra_path = topology.intra_node_path;  // nodes are alike: any intra-node pair
      placement.intra_bandwidth_bytes_per_s = intra_path.bandwidth_bytes_per_s;
    }
    placement.overlaps_compute = (scan.most_on_a_node <= 1 || topology.intra_node_overlaps_compute) &&
                                 (!placement.crosses_nodes || topology.inter_node_overlaps_compute);
    if (placement.crosses_nodes) {
      placement.inter_bandwidth_bytes_per_s = scan.inter_bandwidth_bytes_per_s;
      placement.latency_s = topology.inter_node_path.latency_s;
    } else {
      placement.latency_s = intra_path.latency_s;
    }
    placement.bandwidth_bytes_per_s =
        std::min(placement.intra_bandwidth_bytes_per_s, placement.inter_bandwidth_bytes_per_s);
    placement.all_to_all_bandwidth_bytes_per_s =
        placement.crosses_nodes ? all_to_all_bus_bandwidth(placement.size, placement.members_per_node,
                                                           placement.intra_bandwidth_bytes_per_s,
                                                           placement.inter_bandwidth_bytes_per_s)
                                : placement.bandwidth_bytes_per_s;
  }
  return placements;
}

double nic_share(const std::vector<AxisPlacement>& placements, const std::vector<Axis>& concurrent) {
  int crossing = 0;
  for (std::size_t i = 0; i < concurrent.size(); ++i) {
    if (std::find(concurrent.begin(), concurrent.begin() + static_cast<std::ptrdiff_t>(i), concurrent[i]) !=
        concurrent.begin() + static_cast<std::ptrdiff_t>(i)) {
      continue;  // listed twice
    }
    for (const auto& placement : placements) {
      if (placement.axis == concurrent[i] && placement.size > 1 && placement.crosses_nodes) ++crossing;
    }
  }
  return crossing <= 1 ? 1.0 : 1.0 / crossing;
}

double bandwidth_with_nic_share(const AxisPlacement& placement, double share) {
  if (!placement.crosses_nodes) return placement.bandwidth_bytes_per_s;
  return std::min(placement.intra_bandwidth_bytes_per_s, placement.inter_bandwidth_bytes_per_s * share);
}

}  // namespace meshplan
