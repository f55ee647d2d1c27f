// The flags `meshplan plan` and `meshplan sweep` share: what to plan for
// (model, cluster, world size, global batch, sequence length; comma lists
// in a sweep) and which part of the plan space to search (axes, limits,
// micro-batch sizes, ZeRO stages, recompute, schedules, precision).
//
// Why one place: the two commands must accept the same words with the same
// messages, and a sweep is by definition "plan, for many jobs". Flags are
// kept as text and parsed here, so every problem names its flag and the
// allowed values (exit status 2), instead of surfacing as a CLI11 or C++
// conversion error.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "model/cluster_spec.hpp"
#include "model/model_spec.hpp"
#include "model/problem.hpp"
#include "model/search.hpp"

namespace meshplan::cli {

// What is planned: one job for `plan`; comma lists, crossed, for `sweep`.
struct JobFlags {
  std::string models = "gpt3-175b";
  std::string clusters = "dgx-a100";
  std::string gpus = "1024";
  std::string global_batches;  // empty: model/default_batch.hpp's rule for each model and GPU count
  std::int64_t seq = 0;  // tokens; 0: each model's seq_len
};

// `lists`: the help text offers comma lists (sweep) or single values (plan).
void add_job_flags(CLI::App& command, JobFlags& flags, bool lists);

struct SearchFlags {
  std::string axes;  // empty: default_search_axes (model/plan_defaults.hpp) for each job's model
  std::int64_t max_tp = 0;
  std::int64_t max_pp = 0;
  std::int64_t max_cp = 0;
  std::int64_t max_ep = 0;
  std::string micro_batches;  // empty: 1, 2, 4, ... 64 where they divide the batch
  std::string zero = "0,1,2,3";
  std::string recompute = "none,selective,full";
  std::string attention = "fused";
  std::string cp_comm = "ring";
  std::string loss = "fused";
  bool fp32_gradients = false;
  bool bf16_moments = false;
  OverlapWanted overlaps;
  std::optional<std::string> recompute_modules;
  std::string expert_tp = "tp,1";
  std::string ep_dispatch = "all-to-all";
  std::string schedules = "gpipe,1f1b,interleaved,zb-h1";
  std::string interleave = "2,3,4";
  std::string precision = "auto";
  double headroom = 0.05;
  std::int64_t threads = 0;
};

void add_search_flags(CLI::App& command, SearchFlags& flags);

// One search to run: a model on a cluster of `world_size` devices.
struct Job {
  ModelSpec model;
  ClusterSpec cluster;
  std::int64_t world_size = 0;
  std::int64_t global_batch = 0;  // sequences per optimizer step
  std::int64_t seq_len = 0;       // tokens, resolved (the --seq or the model's)
  std::int64_t seq_flag = 0;      // what a Plan's seq_len should say (0: the model's)
  SearchSpace space;              // with this cluster's precisions
  std::string batch_note;         // how the global batch was chosen when --global-batch was not given
};

// Loads the presets, parses the lists and checks that every job can be
// planned at all (a world size of whole nodes, a sequence the model's
// positions cover, precisions the device supports). With `lists` false,
// each flag must hold one value. Jobs are the cross product, model
// outermost, then cluster, GPUs, global batch.
Loaded<std::vector<Job>> resolve_jobs(const JobFlags& jobs, const SearchFlags& search, bool lists);

// "dp,fsdp,tp,pp; micro-batch 1-64; zero 0,1,2,3; ..." for report headers.
std::string describe_space(const SearchSpace& space);

// Comma lists, strictly: every item non-empty; problems name `flag`.
// parse_int_list keeps each value once (a set to search) unless `in_order`
// (a sequence, such as layers per pipeline chunk).
Loaded<std::vector<std::string>> split_list(const std::string& text, const std::string& flag);
Loaded<std::vector<std::int64_t>> parse_int_list(const std::string& text, const std::string& flag, std::int64_t min_value,
                                                  std::int64_t max_value, bool in_order = false);

}  // namespace meshplan::cli
