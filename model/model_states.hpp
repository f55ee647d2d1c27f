// When ZeRO shards each model state, written once. The memory model, the
// evaluator, the sharding spec (model/sharding_spec.hpp) and the executor's
// choice of how data-parallel ranks hold a unit (executor/parallel/) all ask
// these functions instead of restating the thresholds.
//
// ZeRO (Rajbhandari et al. 2020, Sec. 5.1-5.3): stage 1 shards the optimizer
// state over the dp group, stage 2 also the gradients, stage 3 also the
// parameters. fsdp is stage 3 over its own axis, always. Dense weights are
// replicated over dp x ep, so ZeRO shards them over both; expert weights are
// already split over ep and are replicated (and sharded) over dp only.
// docs/cost-model.md, "Sharding groups", writes the group with the same symbols:
//
//   G_dense(j)  = F x (N_d e  if z >= j, else 1)
//   G_expert(j) = F x (N_d    if z >= j, else 1)
//
// defines: ModelState, zero_stage_sharding, zero_shards, data_sharding_axes,
//          sharding_group
#pragma once

#include <vector>

#include "model/mesh.hpp"

namespace meshplan {

// The three states training keeps per parameter.
enum class ModelState { parameters, gradients, optimizer };

// The lowest ZeRO stage that shards `state` over dp: 3, 2 and 1.
constexpr int zero_stage_sharding(ModelState state) {
  switch (state) {
    case ModelState::parameters: return 3;
    case ModelState::gradients: return 2;
    case ModelState::optimizer: return 1;
  }
  return 3;
}

// Whether ZeRO stage `zero_stage` shards `state` over the dp group (and, for
// dense weights, over ep).
constexpr bool zero_shards(int zero_stage, ModelState state) { return zero_stage >= zero_stage_sharding(state); }

// The data-parallel axes that shard `state` of a weight: fsdp always; dp, and
// ep for a dense (non-expert) weight, when ZeRO shards the state. Axes of any
// size, in the order fsdp, dp, ep.
inline std::vector<Axis> data_sharding_axes(int zero_stage, ModelState state, bool expert) {
  std::vector<Axis> axes = {Axis::fsdp};
  if (zero_shards(zero_stage, state)) {
    axes.push_back(Axis::dp);
    if (!expert) axes.push_back(Axis::ep);
  }
  return axes;
}

// G(j) above: how many devices share one copy of `state`, from the axis sizes
// (doubles, as the evaluator holds them).
constexpr double sharding_group(double fsdp, double dp, double ep, int zero_stage, ModelState state, bool expert) {
  return fsdp * (zero_shards(zero_stage, state) ? dp * (expert ? 1.0 : ep) : 1.0);
}

}  // namespace meshplan
