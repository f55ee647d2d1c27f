#include "model/published_cases.hpp"

#include <stdexcept>

#include "model/cluster_spec.hpp"

namespace meshplan {
namespace {

ModelSpec must_load(const std::string& yaml, const char* what) {
  auto loaded = load_model_text(yaml, what);
  if (!loaded.ok()) throw std::logic_error(std::string(__FILE__) + ": built-in " + what + " failed to load");
  return loaded.value;
}

// Korthikanti et al. 2022, Table 3 configurations (Selene, DGX A100, tp 8).
struct KorthikantiRow {
  const char* model;
  std::int64_t layers, hidden, heads, tp, pp, micro_batch, global_batch, interleave;
  double full_recompute_s, selective_s;         // Table 5
  double activations_none_gib, activations_selective_gib;  // Figure 1 (read off the figure)
};
constexpr KorthikantiRow kKorthikanti[] = {
    {"22B", 48, 6144, 64, 8, 1, 4, 4, 1, 1.42, 1.10, 59.25, 9.56},
    {"175B", 96, 12288, 96, 8, 8, 1, 64, 3, 18.13, 13.75, 66.84, 12.35},
    {"530B", 105, 20480, 128, 8, 35, 1, 280, 3, 49.05, 37.83, 114.02, 23.08},
    {"1T", 128, 25600, 160, 8, 64, 1, 512, 1, 94.42, 71.49, 131.25, 26.56},
};

PublishedCase korthikanti_case(const KorthikantiRow& row, Recompute recompute, bool sequence_parallel) {
  PublishedCase c;
  c.model = korthikanti_model(row.layers, row.hidden, row.heads);
  c.cluster = "dgx-a100";
  Plan& plan = c.plan;
  plan.mesh.axes = {{Axis::pp, row.pp}, {Axis::tp, row.tp}};
  plan.micro_batch = row.micro_batch;
  plan.global_batch = row.global_batch;
  plan.recompute = recompute;
  plan.sequence_parallel = sequence_parallel;
  plan.attention = Attention::unfused;  // Megatron-LM in 2022 had no fused attention: s x s scores stored
  plan.schedule = row.interleave > 1 ? Schedule{ScheduleKind::interleaved, row.interleave} : Schedule{};
  plan.precision = Precision::bf16;
  return c;
}

}  // namespace

std::string unit_of(PublishedQuantity quantity) {
  switch (quantity) {
    case PublishedQuantity::iteration_time_s: return "s";
    case PublishedQuantity::first_stage_activations_gib: return "GiB";
    case PublishedQuantity::model_states_gb: return "GB";
  }
  return "";
}

ModelSpec korthikanti_model(std::int64_t layers, std::int64_t hidden, std::int64_t heads) {
  return must_load("name: gpt-" + std::to_string(layers) + "x" + std::to_string(hidden) +
                       "\nkind: transformer\nsource: Korthikanti et al. 2022, Table 3\nlayers: " + std::to_string(layers) +
                       "\nhidden: " + std::to_string(hidden) + "\nheads: " + std::to_string(heads) +
                       "\nffn: " + std::to_string(4 * hidden) +
                       "\nvocab: 51200\nseq_len: 2048\nmlp: gelu\npositions: learned\n"
                       "tied_embeddings: true\ndropout: 0.1\n",
                   "Korthikanti model");
}

ModelSpec zero_paper_model() {
  return must_load("name: zero-7.5b\nkind: mlp\nsource: Rajbhandari et al. 2020, Figure 1 (Psi = 7.5B)\n"
                   "layer_sizes: [50000, 150000]\n",
                   "ZeRO model");
}

std::vector<PublishedCase> korthikanti_iteration_time_cases() {
  std::vector<PublishedCase> cases;
  for (const auto& row : kKorthikanti) {
    for (bool selective : {false, true}) {
      PublishedCase c = korthikanti_case(row, selective ? Recompute::selective : Recompute::full, selective);
      c.name = std::string(row.model) + (selective ? " selective+SP" : " full recompute");
      c.source = "Korthikanti et al. 2022, Table 5";
      c.quantity = PublishedQuantity::iteration_time_s;
      c.published = selective ? row.selective_s : row.full_recompute_s;
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

std::vector<PublishedCase> korthikanti_activation_cases() {
  std::vector<PublishedCase> cases;
  for (const auto& row : kKorthikanti) {
    for (bool selective : {false, true}) {
      PublishedCase c = korthikanti_case(row, selective ? Recompute::selective : Recompute::none, selective);
      c.name = std::string(row.model) + (selective ? " selective+SP" : " tp only, no recompute");
      c.source = "Korthikanti et al. 2022, Figure 1 (read off the figure)";
      c.quantity = PublishedQuantity::first_stage_activations_gib;
      c.published = selective ? row.activations_selective_gib : row.activations_none_gib;
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

std::vector<PublishedCase> zero_model_state_cases() {
  const double published[] = {120, 31.4, 16.6, 1.88};
  std::vector<PublishedCase> cases;
  for (int stage = 0; stage <= 3; ++stage) {
    PublishedCase c;
    c.name = "ZeRO stage " + std::to_string(stage) + ", 7.5B, N_d = 64";
    c.source = "Rajbhandari et al. 2020, Figure 1";
    c.quantity = PublishedQuantity::model_states_gb;
    c.published = published[stage];
    c.model = zero_paper_model();
    c.cluster = "dgx-a100";
    c.plan.mesh.axes = {{Axis::dp, 64}};
    c.plan.micro_batch = 1;
    c.plan.global_batch = 64;
    c.plan.zero_stage = stage;
    c.plan.precision = Precision::bf16;
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<PublishedResult> predict(const std::vector<PublishedCase>& cases) {
  std::vector<PublishedResult> results;
  for (const auto& c : cases) {
    auto cluster = load_cluster(c.cluster);
    if (!cluster.ok()) throw std::logic_error(std::string(__FILE__) + ": cluster preset " + c.cluster + " failed to load");
    const Explanation ex = explain_plan(c.model, cluster.value, {c.plan.mesh.world_size(), 0}, c.plan);
    PublishedResult r{c, 0};
    if (ex.memory) {
      const auto& stage0 = ex.memory->stages.front().memory;
      switch (c.quantity) {
        case PublishedQuantity::iteration_time_s: r.predicted = ex.time ? ex.time->step_s : 0; break;
        case PublishedQuantity::first_stage_activations_gib:
          r.predicted = stage0.activations_bytes / (1024.0 * 1024 * 1024);
          break;
        case PublishedQuantity::model_states_gb:
          r.predicted = (stage0.parameters_bytes + stage0.gradients_bytes + stage0.optimizer_bytes) / 1e9;
          break;
      }
    }
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace meshplan
