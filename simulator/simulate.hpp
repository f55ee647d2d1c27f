// One call from a plan to a simulated step: validate, build the step's work
// from the cost model, generate the schedule's instruction lists, replay
// them, summarise, and keep the analytical estimate of the same plan beside
// the result. What `meshplan simulate` and the benchmark run.
//
// Defines: Simulation, simulate_plan, simulate_work.
#pragma once

#include "model/evaluate.hpp"
#include "model/plan.hpp"
#include "model/problem.hpp"
#include "model/schedule.hpp"
#include "simulator/step_work.hpp"
#include "simulator/summary.hpp"
#include "simulator/timeline.hpp"

namespace meshplan::sim {

struct Simulation {
  SimulationOptions options;
  StepWork work;
  PipelinePrograms programs;
  Timeline timeline;
  SimulationSummary summary;
  TimeEstimate analytical;  // Evaluator::evaluate of the same plan (communication priced, no contention)
};

// Problems: validate_plan's (naming plan fields), then build_step_work's.
// Warnings are passed through with a valid result.
Loaded<Simulation> simulate_plan(const Evaluator& evaluator, const Plan& plan, const SimulationOptions& options);

// Replays prepared work (e.g. uniform_step_work) with its schedule's lists.
Simulation simulate_work(StepWork work, const SimulationOptions& options);

}  // namespace meshplan::sim
