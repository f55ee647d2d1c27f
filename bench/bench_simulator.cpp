// Simulator speed. The case of the issue "Simulator: replay one step": one
// training step of the 1T model (megatron-1t: 128 layers, h 25600) on 3072
// A100s (dgx-a100), tp 8, pp 64, dp 6, 1F1B, micro-batch 1, global batch 3072
// (m = 512 micro-batches per pipeline), selective recompute with sequence
// parallelism (Korthikanti et al. 2022, Table 3 setting). Target: under one
// second on the development machine. Reported: wall time per step, timeline
// events and events per second (events recorded / wall time), engine events
// (queue wake-ups) per second.
#include <benchmark/benchmark.h>

#include <ostream>
#include <streambuf>

#include "model/cluster_spec.hpp"
#include "model/model_spec.hpp"
#include "simulator/simulate.hpp"
#include "simulator/trace_json.hpp"

namespace {
using namespace meshplan;

struct Setup {
  ModelSpec model = load_model("megatron-1t").value;
  ClusterSpec cluster = load_cluster("dgx-a100").value;
  Evaluator evaluator{model, cluster, 3072, 2048};
  Plan plan = [] {
    Plan p;
    p.mesh = parse_mesh("pp=64,dp=6,tp=8", "--mesh").value;
    p.micro_batch = 1;
    p.global_batch = 3072;
    p.recompute = Recompute::selective;
    p.sequence_parallel = true;
    p.zero_stage = 1;
    p.schedule = {ScheduleKind::one_f_one_b, 1};
    return p;
  }();
};

Setup& setup() {
  static Setup s;
  return s;
}

void report(benchmark::State& state, const sim::Simulation& last, double timeline_events, double engine_events) {
  state.counters["timeline_events"] = static_cast<double>(last.summary.timeline_events);
  state.counters["events_per_s"] = benchmark::Counter(timeline_events, benchmark::Counter::kIsRate);
  state.counters["engine_events_per_s"] = benchmark::Counter(engine_events, benchmark::Counter::kIsRate);
  state.counters["simulated_step_s"] = last.summary.step_s;
  state.counters["analytical_step_s"] = last.analytical.step_s;
}

// The whole `meshplan simulate` path: validate, build the work from the cost
// model, generate the 64 instruction lists, replay, summarise.
void BM_Simulate1TStep(benchmark::State& state) {
  Setup& s = setup();
  const sim::SimulationOptions options{false, state.range(0) != 0};
  sim::Simulation last;
  double timeline_events = 0, engine_events = 0;
  for (auto _ : state) {
    auto result = sim::simulate_plan(s.evaluator, s.plan, options);
    timeline_events += static_cast<double>(result.value.summary.timeline_events);
    engine_events += static_cast<double>(result.value.summary.engine_events);
    last = std::move(result.value);
    benchmark::DoNotOptimize(last.summary.step_s);
  }
  report(state, last, timeline_events, engine_events);
}
BENCHMARK(BM_Simulate1TStep)->ArgName("contention")->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

// Writing that step's Trace Event JSON (to a sink: no disk in the measurement).
void BM_WriteTrace1T(benchmark::State& state) {
  Setup& s = setup();
  const sim::Simulation simulation = sim::simulate_plan(s.evaluator, s.plan, {}).value;
  struct Sink : std::streambuf {
    std::size_t bytes = 0;
    std::streamsize xsputn(const char*, std::streamsize n) override {
      bytes += static_cast<std::size_t>(n);
      return n;
    }
    int overflow(int c) override {
      ++bytes;
      return c;
    }
  } sink;
  std::ostream out(&sink);
  for (auto _ : state) sim::write_trace_json(out, simulation);
  state.counters["bytes_per_trace"] = static_cast<double>(sink.bytes) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_WriteTrace1T)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
