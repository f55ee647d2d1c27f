// Summary of a Timeline (summary.hpp). The critical path walks predecessors
// from the event that ends last; an event that ends after its successor
// started (a gradient bucket starts inside the backward that fills it) is
// counted only up to that start, so the path's parts add up to the step.
#include "simulator/summary.hpp"

#include <algorithm>

namespace meshplan::sim {
namespace {

// Total length of the union of intervals.
double union_length(std::vector<std::pair<double, double>>& intervals) {
  std::sort(intervals.begin(), intervals.end());
  double total = 0, open = 0, close = -1;
  bool any = false;
  for (const auto& [start, end] : intervals) {
    if (!any || start > close) {
      if (any) total += close - open;
      open = start;
      close = end;
      any = true;
    } else {
      close = std::max(close, end);
    }
  }
  if (any) total += close - open;
  return total;
}

nlohmann::ordered_json by_axis(const std::array<double, 6>& seconds) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (Axis axis : all_axes) {
    const double s = seconds[static_cast<std::size_t>(axis)];
    if (s > 0) j[to_string(axis)] = s;
  }
  return j;
}

CriticalPath walk_critical_path(const Timeline& timeline) {
  CriticalPath path;
  const auto& events = timeline.events;
  if (events.empty()) return path;
  std::int32_t current = 0;
  for (std::size_t i = 1; i < events.size(); ++i) {
    if (events[i].end_s >= events[static_cast<std::size_t>(current)].end_s) current = static_cast<std::int32_t>(i);
  }
  double frontier = events[static_cast<std::size_t>(current)].end_s;
  std::int32_t previous_stage = events[static_cast<std::size_t>(current)].stage;
  while (current >= 0) {
    const SimEvent& e = events[static_cast<std::size_t>(current)];
    const double counted_end = std::min(e.end_s, frontier);
    path.waiting_s += frontier - counted_end;
    const double counted = std::max(0.0, counted_end - e.start_s);
    if (is_compute(e.kind)) {
      path.compute_s += counted;
    } else {
      path.communication_s[static_cast<std::size_t>(e.axis)] += counted;
    }
    frontier = std::min(frontier, std::max(e.start_s, 0.0));
    if (e.stage != previous_stage) ++path.stage_changes;
    previous_stage = e.stage;
    path.event_ids.push_back(current);
    ++path.events;
    // Predecessors are always recorded earlier; the guard keeps a bad record from looping.
    current = e.predecessor < current ? e.predecessor : -1;
  }
  path.waiting_s += frontier;
  return path;
}

}  // namespace

SimulationSummary summarize(const Timeline& timeline, std::int64_t stages) {
  SimulationSummary summary;
  summary.stages.resize(static_cast<std::size_t>(stages));
  for (std::int64_t r = 0; r < stages; ++r) summary.stages[static_cast<std::size_t>(r)].stage = r;
  std::vector<double> pipeline_end(static_cast<std::size_t>(stages), 0.0);
  std::vector<std::vector<std::pair<double, double>>> work(static_cast<std::size_t>(stages));
  for (const SimEvent& e : timeline.events) {
    StageSummary& s = summary.stages[static_cast<std::size_t>(e.stage)];
    s.finish_s = std::max(s.finish_s, e.end_s);
    if (is_compute(e.kind)) {
      s.compute_s += e.duration_s();
      if (e.kind != EventKind::optimizer) {
        pipeline_end[static_cast<std::size_t>(e.stage)] = std::max(pipeline_end[static_cast<std::size_t>(e.stage)], e.end_s);
        work[static_cast<std::size_t>(e.stage)].emplace_back(e.start_s, e.end_s);
      }
    } else {
      s.communication_s[static_cast<std::size_t>(e.axis)] += e.duration_s();
      // A stage's own work includes the collectives its blocks wait for and
      // its fsdp gathers and reduce-scatters, as the analytical t_r does (evaluate.cpp).
      if (e.track == Track::layer_comm || e.track == Track::fsdp_comm) {
        work[static_cast<std::size_t>(e.stage)].emplace_back(e.start_s, e.end_s);
      }
    }
  }
  for (const MemorySample& sample : timeline.memory) {
    StageSummary& s = summary.stages[static_cast<std::size_t>(sample.stage)];
    s.peak_activation_bytes = std::max(s.peak_activation_bytes, sample.activation_bytes);
  }
  double most_work = 0;
  for (std::size_t r = 0; r < summary.stages.size(); ++r) {
    StageSummary& s = summary.stages[r];
    summary.step_s = std::max(summary.step_s, s.finish_s);
    summary.pipeline_s = std::max(summary.pipeline_s, pipeline_end[r]);
    s.pipeline_work_s = union_length(work[r]);
    most_work = std::max(most_work, s.pipeline_work_s);
    for (std::size_t a = 0; a < 6; ++a) summary.communication_s[a] = std::max(summary.communication_s[a], s.communication_s[a]);
  }
  for (StageSummary& s : summary.stages) s.busy_fraction = summary.step_s > 0 ? s.compute_s / summary.step_s : 0;
  summary.bubble_fraction = summary.pipeline_s > 0 ? std::max(0.0, 1.0 - most_work / summary.pipeline_s) : 0;
  summary.critical_path = walk_critical_path(timeline);
  summary.exposed_communication_s = summary.critical_path.communication_s;
  summary.timeline_events = static_cast<std::int64_t>(timeline.events.size());
  summary.engine_events = timeline.engine_events;
  return summary;
}

nlohmann::ordered_json summary_to_json(const SimulationSummary& summary) {
  nlohmann::ordered_json j;
  j["step_s"] = summary.step_s;
  j["pipeline_s"] = summary.pipeline_s;
  j["bubble_fraction"] = summary.bubble_fraction;
  j["exposed_communication_s"] = by_axis(summary.exposed_communication_s);
  j["communication_s"] = by_axis(summary.communication_s);
  const CriticalPath& path = summary.critical_path;
  j["critical_path"] = {{"events", path.events},
                        {"compute_s", path.compute_s},
                        {"communication_s", by_axis(path.communication_s)},
                        {"waiting_s", path.waiting_s},
                        {"stage_changes", path.stage_changes}};
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const StageSummary& s : summary.stages) {
    stages.push_back({{"stage", s.stage},
                      {"finish_s", s.finish_s},
                      {"compute_s", s.compute_s},
                      {"busy_fraction", s.busy_fraction},
                      {"peak_activation_bytes", s.peak_activation_bytes},
                      {"communication_s", by_axis(s.communication_s)}});
  }
  j["stages"] = stages;
  j["timeline_events"] = summary.timeline_events;
  j["engine_events"] = summary.engine_events;
  return j;
}

}  // namespace meshplan::sim
