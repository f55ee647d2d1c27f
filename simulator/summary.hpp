// What a simulated step amounts to: its length, the pipeline bubble, how busy
// each device was, and the critical path (the chain of events, each released
// by the previous one, that ends last), with the communication on it per
// mesh axis: communication that lengthened the step. Definitions in
// docs/simulator.md, "Outputs".
//
// Defines: StageSummary, CriticalPath, SimulationSummary, summarize,
// summary_to_json.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <vector>

#include "simulator/timeline.hpp"

namespace meshplan::sim {

struct StageSummary {
  std::int64_t stage = 0;
  double finish_s = 0;                 // its last event ends
  double compute_s = 0;                // busy on the compute stream (passes and optimizer)
  double pipeline_work_s = 0;          // passes, the collectives they wait for, fsdp comm (union of intervals)
  double busy_fraction = 0;            // compute_s / step_s
  double peak_activation_bytes = 0;
  std::array<double, 6> communication_s{};  // its streams' busy time per axis (indexed by Axis), hidden or not
};

struct CriticalPath {
  std::int64_t events = 0;
  double compute_s = 0;
  std::array<double, 6> communication_s{};  // per axis
  double waiting_s = 0;                     // gaps not covered by a recorded event (e.g. the latency-free start)
  std::int64_t stage_changes = 0;           // how often the path moves to another stage
  std::vector<std::int32_t> event_ids;      // last event first
};

struct SimulationSummary {
  double step_s = 0;            // the last event's end
  double pipeline_s = 0;        // the last forward/backward pass's end
  // Idle fraction of the busiest stage during the pipeline: 1 - max_r work_r / pipeline_s.
  // Uniform stages, no communication: (p - 1) / (m + p - 1) for 1F1B.
  double bubble_fraction = 0;
  std::array<double, 6> exposed_communication_s{};  // on the critical path, per axis
  std::array<double, 6> communication_s{};          // the largest of any device's, per axis
  std::vector<StageSummary> stages;
  CriticalPath critical_path;
  std::int64_t timeline_events = 0;
  std::int64_t engine_events = 0;
};

SimulationSummary summarize(const Timeline& timeline, std::int64_t stages);

// {"step_s", "pipeline_s", "bubble_fraction", "exposed_communication_s": {axis: s},
//  "communication_s": {axis: s}, "critical_path": {...}, "stages": [...], ...}
nlohmann::ordered_json summary_to_json(const SimulationSummary& summary);

}  // namespace meshplan::sim
