// The groups a rank of a mesh talks in: one per mesh axis, split from the
// world communicator by mesh coordinates in exactly the device order the
// planner assumes (Mesh::coordinates: row-major, last axis fastest, so with
// dp=2,tp=2 the tp groups are ranks {0,1},{2,3} and the dp groups {0,2},{1,3}).
//
// An axis's group holds the ranks whose coordinates differ only on that axis
// (split colour: the rank's coordinates on every other axis; key: its
// coordinate on this one), so a group's rank() is the rank's coordinate on the
// axis. Axes the mesh does not have are groups of one, so layers call
// collectives on them unconditionally: by default host groups of one
// (make_self_communicator: copies with memmove), or, for communicators on
// device buffers (NCCL, StagedCommunicator), groups of one split from the
// world itself, whose copies are the device's.
//
// defines: SelfGroups, MeshCommunicators
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "executor/comm/communicator.hpp"
#include "model/mesh.hpp"
#include "model/problem.hpp"

namespace meshplan::exec::comm {

// Where the groups of the axes a mesh lacks come from (see above).
enum class SelfGroups : std::uint8_t { host, split_from_world };

class MeshCommunicators {
 public:
  // Collective over `world`. Problems (naming the mesh and the mpirun command
  // that would fit) when world.size() differs from the mesh's world size.
  // `world` must outlive the result.
  static Loaded<MeshCommunicators> create(Communicator& world, const Mesh& mesh,
                                          SelfGroups self_groups = SelfGroups::host);

  const Mesh& mesh() const { return mesh_; }
  Communicator& world() { return *world_; }
  // The group of `axis` (a group of one when the mesh has no such axis).
  Communicator& group(Axis axis) { return *groups_[index(axis)]; }
  // dp x fsdp: the ranks that split one batch and average its gradients (named "dp*fsdp").
  Communicator& data_parallel() { return *data_parallel_; }
  // This rank's coordinate on `axis` (0 when absent), and on every axis in mesh order.
  std::int64_t coordinate(Axis axis) const { return mesh_.coordinate(world_rank_, axis); }
  const std::vector<std::int64_t>& coordinates() const { return coordinates_; }

 private:
  static std::size_t index(Axis axis) { return static_cast<std::size_t>(axis); }

  Mesh mesh_;
  Communicator* world_ = nullptr;
  std::int64_t world_rank_ = 0;
  std::vector<std::int64_t> coordinates_;
  std::array<std::unique_ptr<Communicator>, all_axes.size()> groups_;
  std::unique_ptr<Communicator> data_parallel_;
};

}  // namespace meshplan::exec::comm
