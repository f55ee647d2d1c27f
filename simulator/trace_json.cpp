// Streaming Trace Event JSON writer (trace_json.hpp). Names are ours (ASCII,
// no quotes), so events are formatted directly; the metadata goes through
// nlohmann::json for its escaping.
#include "model/atomic_file.hpp"
#include "simulator/trace_json.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "model/report_json.hpp"

namespace meshplan::sim {
namespace {

// Times as whole nanoseconds while they fit an int64 with room (under about 106 days), so that an
// event's ts + dur is exactly the next one's ts; past that (a step of 1e10 s overflowed into text
// that was not JSON) as microseconds in 17 significant digits.
constexpr double kWholeNanosecondsUpTo = 9.2e9;  // seconds; 2^63 ns is 9.22e9 s

std::string microseconds_of_ns(std::int64_t ns) {
  char text[48];
  std::snprintf(text, sizeof text, "%s%lld.%03lld", ns < 0 ? "-" : "", static_cast<long long>(std::llabs(ns) / 1000),
                static_cast<long long>(std::llabs(ns) % 1000));
  return text;
}

std::string microseconds(double seconds) {
  if (std::abs(seconds) < kWholeNanosecondsUpTo) return microseconds_of_ns(std::llround(seconds * 1e9));
  char text[48];
  std::snprintf(text, sizeof text, "%.17g", seconds * 1e6);
  return text;
}

// "ts" and "dur" of an event from start to end.
std::pair<std::string, std::string> ts_and_duration(double start_s, double end_s) {
  if (std::abs(start_s) < kWholeNanosecondsUpTo && std::abs(end_s) < kWholeNanosecondsUpTo) {
    const std::int64_t start = std::llround(start_s * 1e9), end = std::llround(end_s * 1e9);
    return {microseconds_of_ns(start), microseconds_of_ns(end - start)};
  }
  return {microseconds(start_s), microseconds(end_s - start_s)};
}

std::string event_name(const SimEvent& e, bool interleaved) {
  std::string name;
  if (e.kind == EventKind::layer_collective) {
    name = e.axis == Axis::tp ? "tp collectives" : e.axis == Axis::cp ? "cp ring attention (exposed)" : "ep all-to-all";
  } else {
    name = std::string(to_string(e.kind));
  }
  if (e.micro_batch >= 0) name += " mb " + std::to_string(e.micro_batch);
  if (e.chunk >= 0 && (interleaved || e.kind == EventKind::gradient_bucket)) name += " c " + std::to_string(e.chunk);
  return name;
}

class Writer {
 public:
  explicit Writer(std::ostream& out) : out_(out) {}
  void item(const std::string& json) {
    out_ << (first_ ? "\n" : ",\n") << json;
    first_ = false;
  }

 private:
  std::ostream& out_;
  bool first_ = true;
};

}  // namespace

void write_trace_json(std::ostream& out, const Simulation& sim) {
  const StepWork& work = sim.work;
  const Timeline& timeline = sim.timeline;
  const bool interleaved = work.schedule.virtual_stages > 1;
  std::vector<char> critical(timeline.events.size(), 0);
  for (std::int32_t id : sim.summary.critical_path.event_ids) critical[static_cast<std::size_t>(id)] = 1;

  nlohmann::ordered_json other;
  other["generator"] = "meshplan simulate";
  other["schedule"] = to_string(work.schedule);
  other["stages"] = work.stages;
  other["micro_batches"] = work.micro_batches;
  other["step_s"] = sim.summary.step_s;
  other["bubble_fraction"] = sim.summary.bubble_fraction;
  other["zero_communication"] = sim.options.zero_communication;
  other["contention"] = sim.options.contention;
  out << "{\"displayTimeUnit\": \"ms\",\n\"otherData\": " << other.dump() << ",\n\"traceEvents\": [";
  Writer writer(out);

  for (const StageWork& stage : work.stage_work) {
    const std::string pid = std::to_string(stage.stage);
    nlohmann::ordered_json name = {{"name", "stage " + pid + " (rank " + std::to_string(stage.representative_rank) +
                                                ", node " + std::to_string(stage.node) + ")"}};
    writer.item("{\"ph\": \"M\", \"pid\": " + pid + ", \"name\": \"process_name\", \"args\": " + name.dump() + "}");
    writer.item("{\"ph\": \"M\", \"pid\": " + pid + ", \"name\": \"process_sort_index\", \"args\": {\"sort_index\": " + pid +
                "}}");
    for (int t = 0; t < track_count; ++t) {
      const std::string tid = std::to_string(t);
      writer.item("{\"ph\": \"M\", \"pid\": " + pid + ", \"tid\": " + tid +
                  ", \"name\": \"thread_name\", \"args\": {\"name\": \"" +
                  std::string(track_name(static_cast<Track>(t))) + "\"}}");
      writer.item("{\"ph\": \"M\", \"pid\": " + pid + ", \"tid\": " + tid +
                  ", \"name\": \"thread_sort_index\", \"args\": {\"sort_index\": " + tid + "}}");
    }
  }

  char numbers[64];
  for (std::size_t i = 0; i < timeline.events.size(); ++i) {
    const SimEvent& e = timeline.events[i];
    const auto [ts, duration] = ts_and_duration(e.start_s, e.end_s);
    std::string item = "{\"ph\": \"X\", \"pid\": " + std::to_string(e.stage) +
                       ", \"tid\": " + std::to_string(static_cast<int>(e.track)) + ", \"ts\": " + ts +
                       ", \"dur\": " + duration + ", \"name\": \"" + event_name(e, interleaved) +
                       "\", \"cat\": \"" + (is_compute(e.kind) ? "compute" : "communication") + "\", \"args\": {";
    std::string args;
    if (e.micro_batch >= 0) args += "\"micro_batch\": " + std::to_string(e.micro_batch);
    if (e.chunk >= 0) args += std::string(args.empty() ? "" : ", ") + "\"chunk\": " + std::to_string(e.chunk);
    if (!is_compute(e.kind)) {
      std::snprintf(numbers, sizeof numbers, "%.10g", e.bytes);
      args += std::string(args.empty() ? "" : ", ") + "\"axis\": \"" + to_string(e.axis) + "\", \"bytes\": " + numbers;
    }
    if (critical[i]) args += std::string(args.empty() ? "" : ", ") + "\"critical\": true";
    writer.item(item + args + "}}");
  }

  auto counter = [&](std::int32_t stage, double time_s, double activation_bytes) {
    std::snprintf(numbers, sizeof numbers, "%.10g", activation_bytes);
    std::string item = "{\"ph\": \"C\", \"pid\": " + std::to_string(stage) + ", \"ts\": " +
                       microseconds(time_s) + ", \"name\": \"memory (bytes)\", \"args\": {\"activations\": " +
                       numbers;
    std::snprintf(numbers, sizeof numbers, "%.10g", work.stage_work[static_cast<std::size_t>(stage)].model_state_bytes);
    writer.item(item + ", \"model states and buffers\": " + numbers + "}}");
  };
  for (const StageWork& stage : work.stage_work) counter(static_cast<std::int32_t>(stage.stage), 0.0, 0.0);
  for (const MemorySample& sample : timeline.memory) counter(sample.stage, sample.time_s, sample.activation_bytes);
  out << "\n]}\n";
}

Problems write_trace_file(const std::string& path, const Simulation& simulation) {
  for (const SimEvent& e : simulation.timeline.events) {
    if (!std::isfinite(e.start_s) || !std::isfinite(e.end_s)) {
      return {{Severity::error, path, "the timeline holds a time that is not a finite number (a rate of the device or "
                                      "cluster preset is 0 or too small); no trace written"}};
    }
  }
  return write_file_atomically(path, [&](std::ostream& out) { write_trace_json(out, simulation); });
}

}  // namespace meshplan::sim
