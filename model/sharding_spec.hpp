// ShardingSpec: for one tensor of a model under a plan, which mesh axes split
// which of its dimensions (like a JAX PartitionSpec), which pipeline stages
// hold it, and so which block of it each device holds. It is the one answer
// to "which device holds which block of which tensor": the studio draws it
// (gui/core/geometry.hpp) and the executor's parameter layout is built from
// it (executor/parallel/shard_layout.hpp). A pure function of (ModelSpec,
// Plan, tensor, role).
//
// Conventions (docs/cost-model.md, "Parameters" and "Model states and ZeRO";
// docs/studio.md, "Sharding" states them with examples):
//   * tp: Megatron-LM (Shoeybi et al. 2019, Sec. 3). Column-parallel weights
//     (attn.q, attn.kv, mlp.w_in, even MLP linears) split their output dimension,
//     row-parallel ones (attn.out, mlp.w_out, odd MLP linears) their input
//     dimension, the embedding and output layer their vocabulary rows.
//     Norm weights are whole on every tp rank, and so are attn.kv's key and
//     value heads when tp does not divide them (TransformerDims::kv_tp_split).
//     Weights are written [in, out], as a JAX kernel is.
//   * data sharding (fsdp always; dp and, for dense weights, ep when the ZeRO
//     stage covers the state: model/model_states.hpp; Rajbhandari et al. 2020)
//     splits the first dimension tp does not split, as JAX's P('fsdp', 'tp')
//     does for a column-parallel kernel. `data_axes` names them, and
//     `gathered` takes them off: what a device holds while a pass uses the
//     tensor.
//   * ep splits a mixture-of-experts weight's expert dimension.
//   * pp: a layer's tensors live on the stage whose chunk holds the layer
//     (stage_of_layer, model/stage_partition.hpp); the embedding on stage 0,
//     the head on the last; a tied output layer also on the last stage when
//     pp > 1.
//   * activations of one micro-batch step: the batch dimension (micro-batch x
//     dp x fsdp x ep sequences) split over the data-parallel axes, the
//     sequence over cp (and tp under sequence parallelism, for the residual
//     stream), heads / ffn / vocabulary over tp inside Megatron's regions.
//   * several axes on one dimension nest in mesh order (outer axis major), so
//     block numbers grow with the rank, as device order does in JAX.
//   * blocks are cut as JAX cuts them: ceil(size / n) each, the last ones
//     smaller (or empty) when n does not divide the size (split_extents).
//
// Defines: TensorRole, model_state, ShardedDim, ShardingSpec, TensorChoice,
// sharding_layer_count, partition_entry, sharding_tensors, sharding_spec,
// gathered, block_of_device, split_extents,
// block_shape.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/model_spec.hpp"
#include "model/model_states.hpp"
#include "model/plan.hpp"
#include "model/problem.hpp"

namespace meshplan {

enum class TensorRole { parameters, gradients, optimizer_moment, activation };
std::string to_string(TensorRole role);
// The model state a weight's role is (nullopt for activations).
std::optional<ModelState> model_state(TensorRole role);

struct ShardedDim {
  std::string name;          // "vocab", "hidden", "ffn", "batch", "seq"
  std::int64_t size = 0;     // elements along it
  std::vector<Axis> axes;    // mesh axes (size > 1) splitting it, outer first
};

struct ShardingSpec {
  std::string tensor;                // "layer3.mlp.w_in"
  TensorRole role = TensorRole::parameters;
  std::vector<ShardedDim> dims;
  std::vector<std::int64_t> stages;  // pipeline stages holding it (all when pp = 1)
  std::vector<Axis> replicated_over; // axes of size > 1 (other than pp) along which copies repeat
  std::vector<Axis> data_axes;       // weights: the axes (size > 1) FSDP / ZeRO shard this state over, mesh order
  std::string rule;                  // one line: why it is split this way

  // "P('tp', 'fsdp')"-style text: one entry per dimension, None when whole.
  std::string partition_text() const;
  // Blocks along dimension d (the product of its axes' sizes).
  std::int64_t splits(const Mesh& mesh, std::size_t d) const;
};

// The layers sharding_tensors takes (0 .. count - 1): a transformer's
// layers, an MLP's linears, a CNN's blocks.
std::int64_t sharding_layer_count(const ModelSpec& model);

// One dimension's entry of a PartitionSpec: None, 'tp', or ('fsdp', 'tp').
std::string partition_entry(const std::vector<Axis>& axes);

// Tensors offered for a model, with `layer` standing for the chosen layer
// ("layer3.mlp.w_in"). Parameters first, then activations.
struct TensorChoice {
  std::string name;
  bool activation = false;
};
std::vector<TensorChoice> sharding_tensors(const ModelSpec& model, std::int64_t layer);

// The spec of `tensor` (a name from sharding_tensors) under `plan`. Problems
// name "tensor" (unknown name, layer out of range, role not applicable).
Loaded<ShardingSpec> sharding_spec(const ModelSpec& model, const Plan& plan, const std::string& tensor, TensorRole role);

// The spec with its data axes gathered: what a device holds of the weight
// while a pass uses it (after FSDP / ZeRO-3 all-gathers it); the data axes
// join replicated_over. Unchanged for activations.
ShardingSpec gathered(const ShardingSpec& spec, const Mesh& mesh);

// The block of the tensor device `rank` holds (one index per dimension), or
// nullopt when its pipeline stage does not hold the tensor.
std::optional<std::vector<std::int64_t>> block_of_device(const ShardingSpec& spec, const Mesh& mesh, std::int64_t rank);

// `size` elements in `parts` blocks as JAX splits them: ceil(size / parts)
// each, the last ones smaller (or empty) when it does not divide.
std::vector<std::int64_t> split_extents(std::int64_t size, std::int64_t parts);

// The extents of the block device `rank` holds (one per dimension), or
// nullopt when its pipeline stage does not hold the tensor.
std::optional<std::vector<std::int64_t>> block_shape(const ShardingSpec& spec, const Mesh& mesh, std::int64_t rank);

}  // namespace meshplan
