#include "model/published_cases.hpp"

#include <stdexcept>

#include "model/cluster_spec.hpp"

namespace meshplan {

ModelSpec korthikanti_model(std::int64_t layers, std::int64_t hidden, std::int64_t heads) {
  const std::string yaml = "name: gpt-" + std::to_string(layers) + "x" + std::to_string(hidden) +
                           "\nkind: transformer\nsource: Korthikanti et al. 2022, Table 3\nlayers: " +
                           std::to_string(layers) + "\nhidden: " + std::to_string(hidden) + "\nheads: " +
                           std::to_string(heads) + "\nffn: " + std::to_string(4 * hidden) +
                           "\nvocab: 51200\nseq_len: 2048\nmlp: gelu\npositions: learned\n"
                           "tied_embeddings: true\ndropout: 0.1\n";
  auto loaded = load_model_text(yaml, "korthikanti-model");
  if (!loaded.ok()) throw std::logic_error(__FILE__ ": built-in Korthikanti model failed to load");
  return loaded.value;
}

std::vector<PublishedCase> korthikanti_iteration_time_cases() {
  struct Row {
    const char* model;
    std::int64_t layers, hidden, heads, tp, pp, micro_batch, global_batch, interleave;
    double full_s, selective_s;  // Table 5
  };
  static const Row rows[] = {
      {"22B", 48, 6144, 64, 8, 1, 4, 4, 1, 1.42, 1.10},
      {"175B", 96, 12288, 96, 8, 8, 1, 64, 3, 18.13, 13.75},
      {"530B", 105, 20480, 128, 8, 35, 1, 280, 3, 49.05, 37.83},
      {"1T", 128, 25600, 160, 8, 64, 1, 512, 1, 94.42, 71.49},
  };
  std::vector<PublishedCase> cases;
  for (const Row& row : rows) {
    for (bool selective : {false, true}) {
      PublishedCase c;
      c.name = std::string(row.model) + (selective ? " selective+SP" : " full recompute");
      c.source = "Korthikanti et al. 2022, Table 5";
      c.quantity = "iteration time (s)";
      c.published = selective ? row.selective_s : row.full_s;
      c.model = korthikanti_model(row.layers, row.hidden, row.heads);
      c.cluster = "dgx-a100";
      Plan& plan = c.plan;
      plan.mesh.axes = {{Axis::pp, row.pp}, {Axis::tp, row.tp}};
      plan.micro_batch = row.micro_batch;
      plan.global_batch = row.global_batch;
      plan.recompute = selective ? Recompute::selective : Recompute::full;
      plan.sequence_parallel = selective;
      plan.schedule = row.interleave > 1 ? Schedule{ScheduleKind::interleaved, row.interleave} : Schedule{};
      plan.precision = Precision::bf16;
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

std::vector<PublishedResult> predict(const std::vector<PublishedCase>& cases) {
  std::vector<PublishedResult> results;
  for (const auto& c : cases) {
    auto cluster = load_cluster(c.cluster);
    if (!cluster.ok()) throw std::logic_error(__FILE__ ": cluster preset " + c.cluster + " failed to load");
    const Explanation ex = explain_plan(c.model, cluster.value, {c.plan.mesh.world_size(), 0}, c.plan);
    PublishedResult r{c, 0};
    if (ex.time) r.predicted = ex.time->step_s;
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace meshplan
