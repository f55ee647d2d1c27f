// simulate_plan (simulate.hpp): the plan is validated first, so the engine
// only ever sees plans the cost model can price; the analytical estimate is
// computed from the same Evaluator, so the two can be set side by side.
#include "simulator/simulate.hpp"

#include "model/validate.hpp"
#include "simulator/engine.hpp"

namespace meshplan::sim {

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
  result.value = simulate_work(std::move(work.value), options);
  result.value.analytical = evaluator.evaluate(plan).time;
  return result;
}

}  // namespace meshplan::sim
