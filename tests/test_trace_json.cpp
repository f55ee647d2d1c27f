// The Trace Event JSON a simulated step is written as: it parses, names
// every stage and stream, has one X event per timeline event, never overlaps
// two events on one (pid, tid) track, and carries memory counters.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "simulator/simulate.hpp"
#include "simulator/trace_json.hpp"
#include "test_support.hpp"

namespace meshplan::sim {
namespace {
using namespace testing_support;

Simulation simulated(const char* mesh, const char* schedule, bool zero_communication) {
  const auto model = must(load_model("llama2-13b"));
  const auto cluster = must(load_cluster("dgx-a100"));
  Plan plan = plan_with(mesh, 1, 64);
  plan.schedule = *parse_schedule(schedule);
  plan.recompute = Recompute::selective;
  plan.zero_stage = 1;
  const Evaluator evaluator(model, cluster, plan.mesh.world_size(), model.default_seq_len());
  auto sim = simulate_plan(evaluator, plan, {zero_communication, true});
  EXPECT_TRUE(sim.ok()) << messages(sim.problems);
  return std::move(sim.value);
}

nlohmann::json parsed(const Simulation& sim) {
  std::ostringstream out;
  write_trace_json(out, sim);
  return nlohmann::json::parse(out.str());
}

// Microseconds as written, back to whole nanoseconds.
std::int64_t ns(const nlohmann::json& value) { return std::llround(value.get<double>() * 1000.0); }

TEST(TraceJson, NoTwoEventsOverlapOnOneTrack) {
  for (const auto& [mesh, schedule] : {std::pair{"dp=4,pp=4,tp=2", "1f1b"}, {"dp=4,pp=4,tp=2", "interleaved:2"},
                                       {"dp=4,pp=4,tp=2", "zb-h1"}, {"dp=4,pp=4,tp=2", "gpipe"},
                                       {"fsdp=4,pp=4,tp=2", "1f1b"}, {"fsdp=4,pp=4,tp=2", "zb-h1"}}) {
    const Simulation sim = simulated(mesh, schedule, false);
    const nlohmann::json trace = parsed(sim);
    std::map<std::pair<int, int>, std::vector<std::pair<std::int64_t, std::int64_t>>> tracks;
    std::size_t complete = 0;
    for (const auto& e : trace["traceEvents"]) {
      if (e["ph"] != "X") continue;
      ++complete;
      EXPECT_GT(ns(e["dur"]), 0) << e.dump();
      tracks[{e["pid"].get<int>(), e["tid"].get<int>()}].emplace_back(ns(e["ts"]), ns(e["dur"]));
    }
    EXPECT_EQ(complete, sim.timeline.events.size());
    EXPECT_GT(tracks.size(), 4u * 4u) << "every stage uses compute, tp, a pp direction or two, dp or fsdp";
    for (auto& [track, events] : tracks) {
      std::sort(events.begin(), events.end());
      for (std::size_t i = 1; i < events.size(); ++i) {
        EXPECT_LE(events[i - 1].first + events[i - 1].second, events[i].first)
            << mesh << " " << schedule << ": overlap on pid " << track.first << " tid " << track.second;
      }
    }
  }
}

TEST(TraceJson, NamesStagesAndStreamsAndCountsMemory) {
  const Simulation sim = simulated("dp=4,pp=4,tp=2", "1f1b", false);
  const nlohmann::json trace = parsed(sim);
  ASSERT_TRUE(trace.contains("traceEvents"));
  EXPECT_EQ(trace["otherData"]["schedule"], "1f1b");
  std::map<int, std::string> processes;
  std::map<std::pair<int, int>, std::string> threads;
  std::size_t counters = 0;
  double peak_stage0 = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") processes[e["pid"]] = e["args"]["name"];
    if (e["ph"] == "M" && e["name"] == "thread_name") threads[{e["pid"], e["tid"]}] = e["args"]["name"];
    if (e["ph"] == "C") {
      ++counters;
      EXPECT_TRUE(e["args"].contains("activations"));
      if (e["pid"] == 0) peak_stage0 = std::max(peak_stage0, e["args"]["activations"].get<double>());
    }
    if (e["ph"] == "X") {
      EXPECT_TRUE(processes.count(e["pid"])) << "metadata precedes events";
      EXPECT_FALSE(e["name"].get<std::string>().empty());
    }
  }
  ASSERT_EQ(processes.size(), 4u);
  EXPECT_EQ(processes[0], "stage 0 (rank 0, node 0)");
  EXPECT_EQ(processes[1], "stage 1 (rank 2, node 0)");  // dp outermost: all four stages share node 0
  EXPECT_EQ(threads[std::pair(0, 0)], "compute");
  EXPECT_EQ(threads.size(), 4u * static_cast<std::size_t>(track_count));
  EXPECT_EQ(counters, sim.timeline.memory.size() + 4);
  EXPECT_DOUBLE_EQ(peak_stage0, sim.summary.stages[0].peak_activation_bytes);
}

TEST(TraceJson, CriticalEventsAreMarked) {
  const Simulation sim = simulated("dp=4,pp=4,tp=2", "1f1b", false);
  const nlohmann::json trace = parsed(sim);
  std::size_t critical = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["args"].value("critical", false)) ++critical;
  }
  EXPECT_EQ(critical, static_cast<std::size_t>(sim.summary.critical_path.events));
}

TEST(TraceJson, FileIsWrittenWhole) {
  const Simulation sim = simulated("dp=4,pp=4,tp=2", "1f1b", true);
  const auto path = std::filesystem::temp_directory_path() / "meshplan-trace-test.json";
  EXPECT_FALSE(has_errors(write_trace_file(path.string(), sim)));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(nlohmann::json::accept(text.str()));
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
  std::filesystem::remove(path);
  const Problems unwritable = write_trace_file("/nonexistent-directory/trace.json", sim);
  ASSERT_TRUE(has_errors(unwritable));
  EXPECT_EQ(unwritable.front().where, "/nonexistent-directory/trace.json");
}

// Times past 2^63 ns (a step of 2e10 s: Llama 2 7B at 2^31 tokens) overflowed
// into "-9223372036854775.-808", which is not JSON; they are written in 17
// significant digits of microseconds, and a non-finite time writes no file.
TEST(TraceJson, HugeTimesStayJsonAndNonFiniteOnesAreRefused) {
  Simulation sim = simulated("dp=4,pp=4,tp=2", "1f1b", true);
  for (SimEvent& e : sim.timeline.events) {
    e.start_s *= 1e12;
    e.end_s *= 1e12;
  }
  const nlohmann::json trace = parsed(sim);
  double last_end_us = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    EXPECT_GE(e["ts"].get<double>(), 0.0);
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    last_end_us = std::max(last_end_us, e["ts"].get<double>() + e["dur"].get<double>());
  }
  double step_s = 0;
  for (const SimEvent& e : sim.timeline.events) step_s = std::max(step_s, e.end_s);
  EXPECT_GT(step_s, 1e10);
  EXPECT_NEAR(last_end_us, step_s * 1e6, 1e-12 * step_s * 1e6);

  sim.timeline.events.front().end_s = std::numeric_limits<double>::infinity();
  const auto path = std::filesystem::temp_directory_path() / "meshplan-trace-inf.json";
  std::filesystem::remove(path);
  const Problems refused = write_trace_file(path.string(), sim);
  ASSERT_TRUE(has_errors(refused));
  EXPECT_NE(refused.front().message.find("not a finite number"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace meshplan::sim
