// simulate_plan (simulate.hpp): the plan is validated first, so the engine
// only ever sees plans the cost model can price; the analytical estimate is
// computed from the same Evaluator, so the two can be set side by side.
#include "simulator/simulate.hpp"

#include "model/validate.hpp"
#include "simulator/engine.hpp"

namespace meshplan::sim {
namespace {

// The most segment passes (forward, backward, and ZB-H1's weight pass, per
// segment and micro-batch, summed over stages) one simulation replays. The
// timeline keeps every event, about 3 per pass and 120 bytes each: 2^21
// passes are about 0.75 GB. The largest published pipelines replay far
// fewer (1T parameters, 64 stages x 512 micro-batches x 2 passes: 65,536
// per segment of a stage); 57 M events took 7 GB and 25 s.
constexpr std::int64_t kMaxReplayedPasses = std::int64_t{1} << 21;

std::int64_t replayed_passes(const StepWork& work) {
  const std::int64_t passes = work.schedule.kind == ScheduleKind::zb_h1 ? 3 : 2;
  std::int64_t segments = 0;
  for (const StageWork& stage : work.stage_work) {
    for (const ChunkWork& chunk : stage.chunks) segments += static_cast<std::int64_t>(chunk.segments.size());
  }
  std::int64_t total = 0;
  if (__builtin_mul_overflow(segments * passes, work.micro_batches, &total)) return kMaxReplayedPasses + 1;
  return total;
}

}  // namespace

Simulation simulate_work(StepWork work, const SimulationOptions& options) {
  Simulation sim;
  sim.options = options;
  sim.programs = pipeline_schedule(work.schedule, work.stages, work.micro_batches);
  sim.timeline = replay(work, sim.programs, options.contention);
  sim.summary = summarize(sim.timeline, work.stages);
  sim.work = std::move(work);
  return sim;
}

Loaded<Simulation> simulate_plan(const Evaluator& evaluator, const Plan& plan, const SimulationOptions& options) {
  Loaded<Simulation> result;
  const Deployment deployment{evaluator.topology().world_size, 0};
  result.problems = validate_plan(evaluator.model(), evaluator.graph(), evaluator.cluster(), deployment, plan);
  if (!result.ok()) return result;
  auto work = build_step_work(evaluator, plan, options);
  result.problems.insert(result.problems.end(), work.problems.begin(), work.problems.end());
  if (!result.ok()) return result;
  if (const std::int64_t passes = replayed_passes(work.value); passes > kMaxReplayedPasses) {
    result.problems.push_back(
        {Severity::error, "global_batch",
         std::to_string(work.value.micro_batches) + " micro-batches on " + std::to_string(work.value.stages) +
             (work.value.stages == 1 ? " pipeline stage are " : " pipeline stages are ") + std::to_string(passes) + " segment passes to replay; the simulator replays at most " +
             std::to_string(kMaxReplayedPasses) + " (its timeline keeps every event): fewer micro-batches simulate "
             "the same per-micro-batch behaviour, and `explain` prices any number"});
    return result;
  }
  result.value = simulate_work(std::move(work.value), options);
  result.value.analytical = evaluator.evaluate(plan).time;
  return result;
}

}  // namespace meshplan::sim
