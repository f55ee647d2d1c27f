// What the Setup panel asks for, and how it becomes one planning job: the
// model and cluster (preset names or YAML paths), the model's key figures
// and the cluster's size as overrides, the global batch (0: the default
// rule of model/default_batch.hpp, as the CLI's) and the search constraints. Every problem names the Setup field it belongs to (the
// `where` of a Problem is one of the field keys below), so the panel shows
// the message beside that field instead of failing somewhere later.
//
// Field keys: model, cluster, layers, hidden, heads, seq, devices_per_node,
// nodes, global_batch, axes, max_tp, max_pp, max_cp, max_ep, headroom, schedules, zero,
// recompute, threads.
//
// Defines: SetupInputs, PlanningJob, resolve_setup, describe_job.
#pragma once

#include <cstdint>
#include <string>

#include "model/cluster_spec.hpp"
#include "model/model_spec.hpp"
#include "model/problem.hpp"
#include "model/search.hpp"

namespace meshplan::studio {

struct SetupInputs {
  std::string model = "gpt3-175b";  // preset name or YAML path
  std::string cluster = "dgx-a100";
  // Overrides of the model (transformers); 0 keeps the preset's value.
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t seq = 0;             // tokens per sequence
  // The cluster's size; 0 keeps the preset's devices per node / asks 1 node.
  std::int64_t devices_per_node = 0;
  std::int64_t nodes = 128;
  std::int64_t global_batch = 0;    // 0: the stated rule of model/default_batch.hpp for this model and GPU count
  // Constraints, as the CLI's search flags spell them.
  std::string axes;  // empty: dp,fsdp,tp,pp, and ep for a mixture-of-experts model (default_search_axes)
  std::int64_t max_tp = 0;          // 0: devices per node
  std::int64_t max_pp = 0;          // 0: the layers
  std::int64_t max_cp = 0;          // 0: the device count
  std::int64_t max_ep = 0;          // 0: the device count
  double headroom = 0.05;
  std::string schedules = "gpipe,1f1b,interleaved,zb-h1";
  std::string zero = "0,1,2,3";
  std::string recompute = "none,selective,full";
  std::string recompute_modules = "core_attn";  // what selective repeats (plan.hpp, Plan::recompute_modules)
  std::string attention = "fused";  // fused, unfused, or both "fused,unfused" (docs/cost-model.md, "Fused attention")
  std::string cp_comm = "ring";     // ring, all-gather, all-to-all (plan.hpp, CpComm)
  std::string loss = "fused";       // eager, fused (plan.hpp, Loss)
  bool fp32_gradients = false;      // gradients kept and reduced in fp32 (plan.hpp, Plan::fp32_gradients)
  bool bf16_moments = false;        // Adam's moments kept in bf16 (plan.hpp, Plan::bf16_moments)
  OverlapWanted overlaps;           // the overlap switches asked for (model/overlap_switches.hpp)
  std::string expert_tp = "tp,1";   // experts' tp to try: tp, 1 (plan.hpp, Plan::expert_tensor_parallel)
  std::string ep_dispatch = "all-to-all";  // all-to-all, deduplicated (plan.hpp, EpDispatch)
  int threads = 0;                  // 0: one per core
};

struct PlanningJob {
  ModelSpec model;
  ClusterSpec cluster;
  std::int64_t world_size = 0;
  std::int64_t global_batch = 0;    // given, or by the default rule (below)
  std::string global_batch_rule;    // how the default was chosen; empty when given
  std::int64_t seq_len = 0;         // resolved
  SearchSpace space;
  int threads = 0;
};

// Loads the presets, applies the overrides and checks them; problems name fields.
Loaded<PlanningJob> resolve_setup(const SetupInputs& inputs);

// "gpt3-175b on 1024 x a100-80g (dgx-a100: 128 nodes of 8); global batch 1536 x 2048 tokens",
// followed by " (default: <rule>)" when the batch came from the rule.
std::string describe_job(const PlanningJob& job);

// The choices the Setup panel offers for `attention`: one, or both searched.
inline constexpr const char* kAttentionChoices[] = {"fused", "unfused", "fused,unfused"};

}  // namespace meshplan::studio
