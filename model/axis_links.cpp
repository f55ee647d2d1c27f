// Axis links read off place_axes(), and the search over axis orders that
// backs the "use --mesh ..." warning. A mesh has at most six axes, so the
// search tries at most 6! = 720 orders, each one evaluator call.
#include "model/axis_links.hpp"

#include "model/stage_cost.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace meshplan {
namespace {


std::vector<Axis> crossing_sensitive_axes(const std::vector<AxisPlacement>& placements) {
  std::vector<Axis> out;
  for (const auto& p : placements) {
    if (p.size > 1 && p.crosses_nodes && latency_sensitive(p.axis)) out.push_back(p.axis);
  }
  return out;
}

std::string printf_text(const char* fmt, double value) {
  char text[64];
  std::snprintf(text, sizeof text, fmt, value);
  return text;
}

}  // namespace

std::string link_display_name(const std::string& kind) {
  static const std::pair<const char*, const char*> names[] = {
      {"nvlink", "NVLink"}, {"pcie", "PCIe"}, {"ici", "ICI"}, {"infiniband", "InfiniBand"}, {"ethernet", "Ethernet"},
      {"shared-memory", "shared memory"}};
  for (const auto& [word, name] : names) {
    if (kind == word) return name;
  }
  return kind;
}

std::vector<AxisLink> axis_links(const ClusterSpec& cluster, const std::vector<AxisPlacement>& placements) {
  std::vector<AxisLink> out;
  for (const auto& p : placements) {
    if (p.size <= 1) continue;
    AxisLink link;
    link.axis = p.axis;
    link.size = p.size;
    link.stride = p.stride;
    link.members_per_node = p.members_per_node;
    link.nodes_spanned = p.nodes_spanned;
    link.crosses_nodes = p.crosses_nodes;
    link.link_kind = p.crosses_nodes ? cluster.inter_node.kind : cluster.intra_node.kind;
    link.bandwidth_bytes_per_s = p.bandwidth_bytes_per_s;
    link.all_to_all_bandwidth_bytes_per_s = p.all_to_all_bandwidth_bytes_per_s;
    link.latency_s = p.latency_s;
    out.push_back(std::move(link));
  }
  return out;
}

std::optional<MeshReordering> find_reordering(const Evaluator& evaluator, const Plan& plan, double step_s) {
  const Topology& topology = evaluator.topology();
  const std::vector<Axis> crossing_now = crossing_sensitive_axes(place_axes(topology, plan.mesh));
  if (crossing_now.empty()) return std::nullopt;

  std::vector<std::size_t> order(plan.mesh.axes.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::optional<MeshReordering> best;
  Plan reordered = plan;
  while (std::next_permutation(order.begin(), order.end())) {
    for (std::size_t i = 0; i < order.size(); ++i) reordered.mesh.axes[i] = plan.mesh.axes[order[i]];
    if (expert_split(plan).tokens > 1 && !ep_encloses_tp(reordered.mesh)) continue;  // experts out of tp need ep x tp
    const auto placements = place_axes(topology, reordered.mesh);
    const std::vector<Axis> crossing = crossing_sensitive_axes(placements);
    const auto inside_after = [&](Axis axis) { return std::find(crossing.begin(), crossing.end(), axis) == crossing.end(); };
    if (std::none_of(crossing_now.begin(), crossing_now.end(), inside_after)) continue;  // brings none inside
    const double reordered_step_s = evaluator.evaluate(reordered, placements).time.step_s;
    if (!(reordered_step_s < step_s)) continue;
    if (best && !(reordered_step_s < best->reordered_step_s)) continue;  // ties: the first order tried
    MeshReordering found;
    found.mesh = reordered.mesh;
    for (Axis axis : crossing_now) {
      if (inside_after(axis)) found.brought_inside.push_back(axis);
    }
    for (Axis axis : crossing) {
      if (std::find(crossing_now.begin(), crossing_now.end(), axis) == crossing_now.end()) found.moved_across.push_back(axis);
    }
    found.step_s = step_s;
    found.reordered_step_s = reordered_step_s;
    best = std::move(found);
  }
  return best;
}

Problem reordering_warning(const ClusterSpec& cluster, const std::vector<AxisLink>& links,
                           const MeshReordering& reordering) {
  std::string crossing;
  for (Axis axis : reordering.brought_inside) {
    for (const auto& link : links) {
      if (link.axis != axis) continue;
      crossing += (crossing.empty() ? "" : "; ") + to_string(axis) + "=" + std::to_string(link.size) +
                  " crosses nodes (" + std::to_string(link.members_per_node) + " of its devices per node over " +
                  std::to_string(link.nodes_spanned) + " nodes), so it rides " +
                  link_display_name(cluster.inter_node.kind) + " at " +
                  printf_text("%.3g", link.bandwidth_bytes_per_s / 1e9) + " GB/s per device instead of " +
                  link_display_name(cluster.intra_node.kind) + " inside a node";
    }
  }
  std::string instead;  // the axes the reordered mesh sends across nodes in their place
  for (Axis axis : reordering.moved_across) {
    instead += (instead.empty() ? "" : ", ") + to_string(axis) + "=" + std::to_string(reordering.mesh.size(axis));
  }
  if (!instead.empty()) instead = " (" + instead + " crosses nodes instead)";
  const double ratio = reordering.reordered_step_s > 0 ? reordering.step_s / reordering.reordered_step_s : 0;
  return {Severity::warning, "mesh",
          crossing + ". Use --mesh " + reordering.mesh.to_string() + " to keep it inside a node" + instead + ": predicted step " +
              printf_text("%.4g", reordering.reordered_step_s) + " s instead of " +
              printf_text("%.4g", reordering.step_s) + " s (" + printf_text("%.2f", ratio) + "x faster)"};
}

}  // namespace meshplan
