// A device mesh: ordered named axes with sizes, like a JAX Mesh. Axis order
// decides placement: the last axis varies fastest, so with dp=16,pp=8,tp=8 the
// eight tp ranks of a group are consecutive devices, inside one node.
//
// Canonical axes: dp (replicated data, optionally ZeRO-sharded), fsdp (fully
// sharded data, ZeRO-3), tp (tensor), pp (pipeline), cp (context/sequence),
// ep (expert). Aliases: data, model, tensor, pipeline, context, expert.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/problem.hpp"

namespace meshplan {

enum class Axis { dp, fsdp, tp, pp, cp, ep };
inline constexpr std::array<Axis, 6> all_axes = {Axis::dp, Axis::fsdp, Axis::tp, Axis::pp, Axis::cp, Axis::ep};

std::string to_string(Axis axis);
std::optional<Axis> parse_axis(std::string_view name);
// tp, cp and ep: the axes whose collectives run on every layer, on the critical
// path, so a mesh order that keeps them inside a node matters (axis_links.hpp
// warns when it does not; the search tries their orders).
inline bool latency_sensitive(Axis axis) { return axis == Axis::tp || axis == Axis::cp || axis == Axis::ep; }  // canonical names and aliases

// The most devices a job may have: a mesh's product of axis sizes, a plan
// file's world_size, --gpus. meshplan holds every device of the job in its
// topology graph (model/topology.hpp) and walks an axis's groups device by
// device, so memory and time grow with the world: about 0.5 GB for `explain`
// and 1 GB for a search at 2^20 devices (measured: docs/cost-model.md, "The
// topology graph", Limit). 2^20 is above every training cluster announced by 2026 (10^5
// GPUs), and products of axes stay far from int64 overflow.
inline constexpr std::int64_t kMaxMeshDevices = std::int64_t{1} << 20;

struct MeshAxis {
  Axis axis;
  std::int64_t size;
};

struct Mesh {
  std::vector<MeshAxis> axes;  // outermost first; the last varies fastest

  // Inline: the evaluator asks these dozens of times per plan.
  std::int64_t size(Axis axis) const {  // 1 when the axis is absent
    for (const auto& a : axes) {
      if (a.axis == axis) return a.size;
    }
    return 1;
  }
  std::int64_t world_size() const {
    std::int64_t product = 1;
    for (const auto& a : axes) product *= a.size;
    return product;
  }
  // Devices that split one batch between them: dp x fsdp x ep (ep carves its
  // expert groups out of the data-parallel ranks, as in Megatron-LM and GShard).
  std::int64_t data_parallel_size() const { return size(Axis::dp) * size(Axis::fsdp) * size(Axis::ep); }
  // The ranks the dp axis's ZeRO shards over and its gradients are reduced
  // over: dp x ep (the experts' ranks hold the dense weights alike; fsdp
  // shards and reduces on its own).
  std::int64_t zero_group_size() const { return size(Axis::dp) * size(Axis::ep); }
  // Whether sequence parallelism can split a sequence of `seq_len` tokens:
  // each cp rank's share over tp, so cp x tp must divide it (Megatron-LM
  // asserts it). Validation, the search and the default read it here.
  bool sequence_parallel_divides(std::int64_t seq_len) const { return seq_len % (size(Axis::cp) * size(Axis::tp)) == 0; }
  // Coordinate of `rank` on each axis, in `axes` order (row-major, last fastest).
  std::vector<std::int64_t> coordinates(std::int64_t rank) const;
  std::int64_t coordinate(std::int64_t rank, Axis axis) const;  // 0 when absent
  std::string to_string() const;  // "dp=16,pp=8,tp=8"
};

// "dp=16,tp=8" (also "dp:16 tp:8"); every problem names `flag`.
Loaded<Mesh> parse_mesh(std::string_view text, const std::string& flag);
// A JAX-style mesh shape, sizes then axis names: '[[4, 1], ["fsdp", "tp"]]' (JSON or YAML flow style).
Loaded<Mesh> parse_mesh_shape(std::string_view text, const std::string& flag);

}  // namespace meshplan
