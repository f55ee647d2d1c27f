// A plan in the configuration language of a training framework, so that a
// team applies it with the tools it already has: `meshplan export --plan
// p.json --to megatron|torchtitan|deepspeed`. docs/export.md gives each
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
//   megatron    Megatron-LM's pretrain_gpt.py command-line arguments (parallel
//               sizes, virtual pipeline stages, sequence parallelism,
//               recompute, micro and global batch, distributed optimizer,
//               bf16, and the model's shape)
//   torchtitan  torchtitan's job config TOML ([parallelism], [training],
//               [activation_checkpoint])
//   deepspeed   DeepSpeed's JSON config (batch sizes, accumulation, ZeRO
//               stage, bf16, clipping)
//
// defines: ExportTarget, parse_export_target, export_plan
#pragma once

#include <optional>
#include <string>

#include "model/plan_file.hpp"
#include "model/problem.hpp"

namespace meshplan {

enum class ExportTarget { megatron, torchtitan, deepspeed };
inline constexpr const char* export_target_choices = "megatron, torchtitan, deepspeed";
std::optional<ExportTarget> parse_export_target(const std::string& name);

// The config text; problems name plan fields ("plan.zero_stage", "mesh.tp").
Loaded<std::string> export_plan(const PlanFile& file, ExportTarget target);

}  // namespace meshplan
