// Everything the plan views show about one chosen plan: the explanation
// (validation, per-stage memory from the graph-walking reference, time), the
// simulated step (the Timeline view), and the plan's figures as a flat list
// of named values, which the figures table and the Compare view both use.
//
// Defines: Figure, PlanDetails, MemoryRow, memory_rows, plan_figures, analyse_plan.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gui/core/planner_worker.hpp"
#include "model/explain.hpp"
#include "simulator/simulate.hpp"

namespace meshplan::studio {

struct Figure {
  std::string name;        // "step time"
  std::string unit;        // "s", "GiB", "%", "" (text)
  double value = 0;        // numeric figures
  std::string text;        // as shown: "12.345" or "1f1b"
  bool numeric = true;
};

struct PlanDetails {
  Plan plan;
  Explanation explanation;
  std::optional<sim::Simulation> simulation;
  std::string simulation_problem;  // why there is no simulation
  std::vector<Figure> figures;
};

// One row of a device's memory as `meshplan explain` prints it: the steady
// parts, the step's peak transients and the stack's reserves. Of the loss's
// transient and the activation gradients only the larger is at the peak
// (memory_model.hpp); the other has at_peak false and is not in the total.
struct MemoryRow {
  std::string name;   // "loss transient"
  double bytes = 0;
  bool at_peak = true;
};
inline constexpr std::size_t kMemoryRowCount = 10;
// Always kMemoryRowCount rows, in the order parameters, gradients, optimizer,
// activations, buffers, loss transient, activation gradients, workspaces,
// runtime context, allocator reserve: the bytes at the peak sum to total_bytes().
std::vector<MemoryRow> memory_rows(const MemoryBreakdown& memory);

// Plan knobs, then memory of the worst device (GiB), then the link each axis
// rides (and a faster mesh order, when one keeps tp / cp / ep inside a node),
// then time (s), then throughput; every number the Compare view sets side by side.
std::vector<Figure> plan_figures(const ModelSpec& model, const Plan& plan, const Explanation& explanation);

// Explains (and, with `simulate`, replays) `plan` for the outcome's job.
PlanDetails analyse_plan(const SearchOutcome& outcome, const Plan& plan, bool simulate = true);

}  // namespace meshplan::studio
