// Which link each mesh axis rides, and whether reordering the mesh would keep
// a latency-sensitive axis (tp, cp, ep) inside a node, or trade which of them
// crosses nodes.
//
// Why: axis order decides placement (the last axis varies fastest and lands
// inside a node, mesh.hpp), and an order that pushes tp across nodes prices
// every tensor-parallel collective at the NIC's share instead of NVLink's,
// with nothing in the plan looking wrong. The numbers here are the ones the
// evaluator already uses (place_axes, topology.hpp): nothing is re-derived.
// The reordering is found by trying every order of the same axes and
// evaluating the plan under each, so its step time is the evaluator's, not a
// rule of thumb.
//
// Defines: AxisLink, axis_links, runs_all_to_all, all_to_all_slower_than_ring, link_display_name, MeshReordering,
// find_reordering, reordering_warning.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/cluster_spec.hpp"
#include "model/evaluate.hpp"
#include "model/plan.hpp"
#include "model/problem.hpp"
#include "model/topology.hpp"

namespace meshplan {

// One mesh axis of size > 1 on the topology.
struct AxisLink {
  Axis axis = Axis::dp;
  std::int64_t size = 1;
  std::int64_t stride = 1;            // ranks between neighbours of one group
  std::int64_t members_per_node = 1;  // devices of one group inside one node (the fewest)
  std::int64_t nodes_spanned = 1;     // nodes one group touches (the most)
  bool crosses_nodes = false;
  std::string link_kind;              // the slowest hop's kind: the cluster's inter_node.kind if it crosses, else intra_node.kind
  double bandwidth_bytes_per_s = 0;   // per device, per direction, all groups at once (AxisPlacement::bandwidth_bytes_per_s)
  double all_to_all_bandwidth_bytes_per_s = 0;  // an all-to-all's (AxisPlacement::all_to_all_bandwidth_bytes_per_s)
  double latency_s = 0;               // one step (AxisPlacement::latency_s)
};

// The axes of size > 1, in mesh order.
std::vector<AxisLink> axis_links(const ClusterSpec& cluster, const std::vector<AxisPlacement>& placements);

// Whether the plan runs all-to-alls over `axis` (their rate is AxisLink::all_to_all_bandwidth_bytes_per_s):
// ep's dispatch and combine; cp's exchange when cp_comm is all-to-all (DeepSpeed-Ulysses).
inline bool runs_all_to_all(Axis axis, const Plan& plan) {
  return axis == Axis::ep || (axis == Axis::cp && plan.cp_comm == CpComm::all_to_all);
}

// Whether `link`'s axis runs all-to-alls in `plan` at a rate below its ring's: across nodes, where each
// device's bytes for other nodes leave through its own NIC share (AxisPlacement::all_to_all_bandwidth_bytes_per_s).
// What explain and the studio show as the axis's all-to-all rate.
inline bool all_to_all_slower_than_ring(const AxisLink& link, const Plan& plan) {
  return runs_all_to_all(link.axis, plan) && link.all_to_all_bandwidth_bytes_per_s < link.bandwidth_bytes_per_s;
}

// "nvlink" -> "NVLink", "infiniband" -> "InfiniBand"; unknown kinds as written.
std::string link_display_name(const std::string& kind);

// A reordering of the same axes that brings a tp, cp or ep axis that crosses
// nodes inside a node, and is predicted faster. It may send another of them
// across instead (ep inside on NVLink, cp across: an MoE's all-to-alls
// weigh more than ring attention's hidden transfers).
struct MeshReordering {
  Mesh mesh;                            // the reordered mesh
  std::vector<Axis> brought_inside;     // tp / cp / ep axes that cross nodes now and not after
  std::vector<Axis> moved_across;       // tp / cp / ep axes inside a node now that cross after
  double step_s = 0;                    // the current plan's predicted step time
  double reordered_step_s = 0;          // the reordered plan's
};

// Tries every order of `plan.mesh`'s axes; among the orders that bring at
// least one tp / cp / ep axis that crosses nodes now inside a node (whether
// or not they send another across), the one the evaluator predicts fastest. Nothing when no order brings one inside or
// none is faster than now.
// `plan` must be valid (the evaluator's precondition); `step_s` is its step time.
std::optional<MeshReordering> find_reordering(const Evaluator& evaluator, const Plan& plan, double step_s);

// The warning for --mesh: which axis crosses, on what link, the mesh to use
// instead and both predicted step times.
Problem reordering_warning(const ClusterSpec& cluster, const std::vector<AxisLink>& links,
                           const MeshReordering& reordering);

}  // namespace meshplan
