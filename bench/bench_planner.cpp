// Planner speed: plan evaluations per second (one thread, block costs cached
// as the search caches them), and the wall time of the full search for
// GPT-3 175B on 1024 A100s (dgx-a100), global batch 1536, sequence 2048.
// Targets (issue "Planner: time model..."): >= 1e6 evaluations per second
// per core; the full search under one second on a 2-core machine.
#include <benchmark/benchmark.h>

#include <cstdio>

#include "model/cluster_spec.hpp"
#include "model/model_spec.hpp"
#include "model/search.hpp"

namespace {
using namespace meshplan;

struct Setup {
  ModelSpec model = load_model("gpt3-175b").value;
  ClusterSpec cluster = load_cluster("dgx-a100").value;
  Evaluator evaluator{model, cluster, 1024, 2048};
};

Setup& setup() {
  static Setup s;
  return s;
}

// Evaluate a fixed, varied set of valid plans (all meshes' first candidates).
void BM_EvaluatePlan(benchmark::State& state) {
  Setup& s = setup();
  struct Item {
    Plan plan;
    std::vector<AxisPlacement> placements;
    std::vector<BlockCost> costs;
  };
  std::vector<Item> items;
  for (const Mesh& mesh : enumerate_meshes(1024, SearchSpace{}, 8)) {
    for (ScheduleKind kind : {ScheduleKind::one_f_one_b, ScheduleKind::gpipe, ScheduleKind::zb_h1}) {
      Plan plan;
      plan.mesh = mesh;
      plan.global_batch = 1536;
      plan.micro_batch = 1;
      plan.recompute = Recompute::selective;
      plan.sequence_parallel = mesh.size(Axis::tp) > 1;
      plan.zero_stage = mesh.size(Axis::dp) > 1 ? 1 : 0;
      plan.schedule = {kind, 1};
      if (quick_check(s.evaluator, plan) != Rejection::none) continue;
      auto placements = place_axes(s.evaluator.topology(), mesh);
      auto costs = s.evaluator.block_costs(plan, placements);
      items.push_back({plan, std::move(placements), std::move(costs)});
    }
  }
  std::size_t i = 0;
  double sink = 0;
  for (auto _ : state) {
    const Item& item = items[i++ % items.size()];
    sink += s.evaluator.evaluate(item.plan, item.placements, item.costs).time.step_s;
  }
  benchmark::DoNotOptimize(sink);
  state.counters["evaluations_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["plans_in_set"] = static_cast<double>(items.size());
}
BENCHMARK(BM_EvaluatePlan);
// The same, 20 passes over the set exactly: a fixed amount of work, so that
// instructions counted under callgrind (--toggle-collect='meshplan::Evaluator::evaluate*')
// divide by a known number of evaluations. Google Benchmark 1.7 has no
// --benchmark_min_time=Nx, and its adaptive runs would count its trial runs too.
BENCHMARK(BM_EvaluatePlan)->Iterations(471 * 20);

// Uncached: block costs computed for every plan too.
void BM_EvaluatePlanWithBlockCosts(benchmark::State& state) {
  Setup& s = setup();
  Plan plan;
  plan.mesh = parse_mesh("dp=16,pp=8,tp=8", "--mesh").value;
  plan.global_batch = 1536;
  plan.recompute = Recompute::selective;
  plan.sequence_parallel = true;
  plan.zero_stage = 1;
  const auto placements = place_axes(s.evaluator.topology(), plan.mesh);
  double sink = 0;
  for (auto _ : state) sink += s.evaluator.evaluate(plan, placements).time.step_s;
  benchmark::DoNotOptimize(sink);
  state.counters["evaluations_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EvaluatePlanWithBlockCosts);

// The whole search, as `meshplan plan` runs it, on 1 and 2 threads.
void BM_FullSearch(benchmark::State& state) {
  Setup& s = setup();
  SearchOptions options;
  options.threads = static_cast<int>(state.range(0));
  SearchResult result;
  for (auto _ : state) {
    result = search(s.evaluator, 1536, SearchSpace{}, options);
    benchmark::DoNotOptimize(result.ranked.data());
  }
  state.counters["candidates"] = static_cast<double>(result.stats.plans);
  state.counters["evaluated"] = static_cast<double>(result.stats.evaluated);
  state.counters["feasible"] = static_cast<double>(result.stats.feasible);
  state.counters["evaluated_per_s"] =
      benchmark::Counter(static_cast<double>(result.stats.evaluated) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FullSearch)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
