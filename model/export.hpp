// A plan in the configuration language of a training framework, so that a
// team applies it with the tools it already has: `meshplan export --plan
// p.json --to jax|megatron|torchtitan|deepspeed`. docs/export.md gives each
// field's source (the framework's own argument parser or config class) and
// how meshplan's plan maps onto it.
//
// What a framework cannot express is refused with an error naming the plan
// field and the framework's reason (ZeRO-1 in torchtitan, a GPipe schedule in
// Megatron-LM, tensor parallelism in a DeepSpeed JSON ...), rather than
// written as a config that would train a different plan. What it expresses
// only approximately is written, with a warning (and a comment in the
// output) saying what differs.
//
//   jax         a Python module: the JAX Mesh, every weight's, the batch's and
//               the activations' PartitionSpec (the ShardingSpec's own), Flax
//               logical-axis rules (model/export_jax.cpp)
//   megatron    Megatron-LM's pretrain_gpt.py command-line arguments (parallel
//               sizes, virtual pipeline stages, sequence parallelism,
//               recompute, micro and global batch, distributed optimizer,
//               bf16, and the model's shape)
//   torchtitan  torchtitan's job config TOML ([parallelism], [training],
//               [activation_checkpoint])
//   deepspeed   DeepSpeed's JSON config (batch sizes, accumulation, ZeRO
//               stage, bf16, clipping)
//
// defines: ExportTarget, parse_export_target, export_plan, ExportedArray,
// exported_weights, exported_activations
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/plan_file.hpp"
#include "model/problem.hpp"
#include "model/sharding_spec.hpp"

namespace meshplan {

enum class ExportTarget { jax, megatron, torchtitan, deepspeed };
inline constexpr const char* export_target_choices = "jax, megatron, torchtitan, deepspeed";
std::optional<ExportTarget> parse_export_target(const std::string& name);

// The config text; problems name plan fields ("plan.zero_stage", "mesh.tp").
Loaded<std::string> export_plan(const PlanFile& file, ExportTarget target);

// One array of the JAX export: its name, shape and ShardingSpec. Fused
// tensors are two arrays ("layer0.attn.k" and ".v"; a gated MLP's
// ".mlp.w_gate" and ".mlp.w_up"), each with the fused one's split.
struct ExportedArray {
  std::string name;
  std::vector<std::int64_t> shape;
  ShardingSpec spec;
};
// Every weight of the model in `role`, layer by layer.
Loaded<std::vector<ExportedArray>> exported_weights(const PlanFile& file, TensorRole role);
// A transformer's activations ("residual", "mlp_hidden", "logits") and the
// token batch of one accumulation step ("batch"); empty for other models.
Loaded<std::vector<ExportedArray>> exported_activations(const PlanFile& file);
// The JAX module (export_plan with ExportTarget::jax).
Loaded<std::string> export_jax(const PlanFile& file);

}  // namespace meshplan
