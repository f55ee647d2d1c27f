// The model / cluster / plan flags shared by `explain` (and later `plan`,
// `simulate`): registered on a CLI11 subcommand, then turned into loaded
// specs and a Plan, with every problem naming its flag.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "model/cluster_spec.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"
#include "model/problem.hpp"
#include "model/validate.hpp"

namespace meshplan::cli {

struct PlanFlags {
  std::string model = "gpt3-175b";
  std::string cluster = "dgx-a100";
  std::int64_t gpus = 1024;
  std::string mesh = "dp=16,pp=8,tp=8";
  std::string mesh_shape;
  std::int64_t micro_batch = 1;
  std::int64_t global_batch = 1536;
  std::int64_t seq = 0;
  std::string zero = "auto";
  std::string recompute = "selective";
  std::string attention = "fused";
  bool sequence_parallel = false;
  bool no_sequence_parallel = false;
  std::string schedule = "1f1b";
  std::string precision = "auto";
  std::string stage_layers;
  double headroom = 0.05;
  std::int64_t rank = -1;
};

void add_plan_flags(CLI::App& command, PlanFlags& flags);

struct PlanInputs {
  ModelSpec model;
  ClusterSpec cluster;
  Deployment deployment;
  Plan plan;
};

// Loads presets and parses flags; problems name the flag (e.g. "--mesh").
Loaded<PlanInputs> resolve_plan_flags(const PlanFlags& flags);

// "mesh.tp" -> "--mesh", "global_batch" -> "--global-batch": validation
// problems speak of plan fields; on the command line they should name flags.
std::string flag_for_field(const std::string& field);

}  // namespace meshplan::cli
