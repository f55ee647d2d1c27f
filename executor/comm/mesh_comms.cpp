// MeshCommunicators: split colours and keys from Mesh::coordinates, so the
// groups and the planner's device order cannot drift apart.
//
// defines: MeshCommunicators::create
#include "executor/comm/mesh_comms.hpp"

#include <algorithm>
#include <string>

namespace meshplan::exec::comm {
namespace {

// Row-major index of `coords` over the axes for which `selected` is true.
std::int64_t linear_index(const Mesh& mesh, const std::vector<std::int64_t>& coords,
                          const std::vector<bool>& selected) {
  std::int64_t index = 0;
  for (std::size_t a = 0; a < mesh.axes.size(); ++a) {
    if (selected[a]) index = index * mesh.axes[a].size + coords[a];
  }
  return index;
}

// Splits `world` into the groups of ranks that differ only on the axes in `members`.
std::unique_ptr<Communicator> split_over(Communicator& world, const Mesh& mesh, const std::vector<std::int64_t>& coords,
                                         const std::vector<bool>& members, const std::string& name) {
  std::vector<bool> others(members.size());
  std::transform(members.begin(), members.end(), others.begin(), [](bool m) { return !m; });
  const auto color = static_cast<int>(linear_index(mesh, coords, others));
  const auto key = static_cast<int>(linear_index(mesh, coords, members));
  return world.split(color, key, name);
}

}  // namespace

Loaded<MeshCommunicators> MeshCommunicators::create(Communicator& world, const Mesh& mesh, SelfGroups self_groups) {
  Loaded<MeshCommunicators> result;
  const std::int64_t needed = mesh.world_size();
  if (needed != world.size()) {
    const std::string ranks = std::to_string(needed);
    const std::string started = world.size() == 1 ? "this is a single process (not started by mpirun)"
                                                   : "mpirun started " + std::to_string(world.size());
    result.problems.push_back({Severity::error, "mesh",
                               "the plan needs " + ranks + " ranks (" + mesh.to_string() + ") but " + started +
                                   "; run `mpirun -np " + ranks + " meshplan train ...` or `meshplan launch`"});
    return result;
  }
  auto& out = result.value;
  out.mesh_ = mesh;
  out.world_ = &world;
  out.world_rank_ = world.rank();
  out.coordinates_ = mesh.coordinates(world.rank());

  // Every rank splits the same axes in the same (mesh) order: each split is matched.
  std::vector<bool> data_members(mesh.axes.size(), false);
  for (std::size_t a = 0; a < mesh.axes.size(); ++a) {
    std::vector<bool> members(mesh.axes.size(), false);
    members[a] = true;
    const Axis axis = mesh.axes[a].axis;
    out.groups_[index(axis)] = split_over(world, mesh, out.coordinates_, members, to_string(axis));
    data_members[a] = axis == Axis::dp || axis == Axis::fsdp;
  }
  out.data_parallel_ = split_over(world, mesh, out.coordinates_, data_members, "dp*fsdp");
  for (const Axis axis : all_axes) {
    auto& group = out.groups_[index(axis)];
    if (group) continue;
    // Every rank lacks the same axes, in the same order: the splits are matched.
    if (self_groups == SelfGroups::split_from_world) {
      group = world.split(world.rank(), 0, to_string(axis));
    } else {
      group = make_self_communicator(to_string(axis));
      group->set_timeout(world.timeout());
    }
  }
  return result;
}

}  // namespace meshplan::exec::comm
