// The model / cluster / plan flags shared by `explain` and `simulate`:
// registered on a CLI11 subcommand, then turned into loaded specs and a Plan,
// with every problem naming its flag.
//
// Without --mesh the plan is the one the planner's search ranks first for
// this model, cluster and device count (model/fit_search.hpp), searched with
// the plan flags the user did give held fixed; without --global-batch the
// batch follows a stated rule (model/default_batch.hpp). Both are said in
// PlanInputs::notes, because a default a user did not see is a trap: GPT-3's
// mesh and batch used to stand in for every model.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/cluster_spec.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"
#include "model/problem.hpp"
#include "model/search.hpp"
#include "model/validate.hpp"

namespace meshplan::cli {

struct PlanFlags {
  std::string model = "gpt3-175b";
  std::string cluster = "dgx-a100";
  std::int64_t gpus = 1024;
  // Unset: searched without --mesh; with --mesh the values in the comments.
  std::optional<std::string> mesh;
  std::string mesh_shape;
  std::optional<std::int64_t> micro_batch;   // 1
  std::optional<std::int64_t> global_batch;  // default_global_batch()
  std::int64_t seq = 0;
  std::string zero = "auto";
  std::optional<std::string> recompute;      // default_recompute (model/plan_defaults.hpp)
  std::string attention = "fused";
  std::string cp_comm = "ring";
  std::string loss = "fused";
  bool fp32_gradients = false;
  bool bf16_moments = false;
  OverlapWanted overlaps;
  std::optional<std::string> recompute_modules;
  std::string ep_dispatch = "all-to-all";
  std::optional<std::string> expert_tp;      // "tp" (experts split over tp), or "1"
  bool sequence_parallel = false;
  bool no_sequence_parallel = false;
  std::optional<std::string> schedule;       // 1f1b
  std::string precision = "auto";
  std::string stage_layers;
  double headroom = 0.05;
  std::optional<std::int64_t> rank;          // none: report the worst device
};

void add_plan_flags(CLI::App& command, PlanFlags& flags);

// --seq's check: a whole number of tokens from 1 to kMaxSeqLen (2^40), said in those words.
CLI::Validator sequence_length_check();

struct PlanInputs {
  ModelSpec model;
  ClusterSpec cluster;
  Deployment deployment;
  Plan plan;
  // The search space the flags leave open: the default axes, with every plan
  // flag the user gave held fixed. What the default plan and "what would fit"
  // search.
  SearchSpace space;
  bool mesh_searched = false;  // no --mesh: `plan` came from the search
  // Defaults chosen for the user, one sentence each ("no --mesh: ...").
  std::vector<std::string> notes;
};

// Loads presets and parses flags; problems name the flag (e.g. "--mesh").
Loaded<PlanInputs> resolve_plan_flags(const PlanFlags& flags);

// "mesh.tp" -> "--mesh", "global_batch" -> "--global-batch": validation
// problems speak of plan fields; on the command line they should name flags.
std::string flag_for_field(const std::string& field);

// --cp-comm's and --loss's values (plan and search flags alike), or an error naming the choices.
std::optional<CpComm> parse_cp_comm_flag(const std::string& text, Problems& problems);
std::optional<Loss> parse_loss_flag(const std::string& text, Problems& problems);
// --cp-comm, --loss, --fp32-gradients, --bf16-moments, --overlap-ep and --ep-dispatch: plan
// switches the search never varies, the same flags on explain/simulate and on plan/sweep.
void add_fixed_plan_flags(CLI::App& command, std::string& cp_comm, std::string& loss, bool& fp32_gradients,
                          bool& bf16_moments, OverlapWanted& overlaps, std::string& ep_dispatch);
// --recompute-modules (plan and search flags alike): what selective recompute repeats.
void add_recompute_modules_flag(CLI::App& command, std::optional<std::string>& modules);
// Its value, or an error naming the choices; nullopt also when not given.
std::optional<RecomputeModules> parse_recompute_modules_flag(const std::optional<std::string>& text, Problems& problems);
std::optional<EpDispatch> parse_ep_dispatch_flag(const std::string& text, Problems& problems);

}  // namespace meshplan::cli
