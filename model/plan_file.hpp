// Plan files: one chosen plan as JSON, self-contained, for `meshplan train`
// and the simulator to read back without the presets it was made from.
//
// Why embed the model and the cluster: a plan is only meaningful for the
// model and cluster it was costed on, and presets change (a corrected
// bandwidth, a calibrated GEMM efficiency). A plan file therefore carries
// the full ModelSpec (as the keys of a model preset, read back through the
// preset loader so the same rules apply) and the full ClusterSpec with its
// DeviceSpec (in SI units: bytes, bytes/s, seconds, FLOP/s, so that writing
// and reading give back the same doubles). The prediction is what the cost
// model said when the file was written, to set beside a measured run.
//
// Layout (docs/formats.md, "Plan files"):
//   {"version": 1, "model": {...}, "cluster": {...}, "world_size": N,
//    "plan": plan_to_json(plan), "prediction": {...}}
//
// Defines: PlanFile, PlanPrediction, plan_file_to_json, write_plan_file,
// parse_plan_file, read_plan_file, model_to_json, cluster_to_json.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "model/cluster_spec.hpp"
#include "model/evaluate.hpp"
#include "model/explain.hpp"
#include "model/memory_model.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"
#include "model/problem.hpp"

namespace meshplan {

inline constexpr int plan_file_version = 1;

// What the cost model predicted for the plan, per device of its worst stage.
struct PlanPrediction {
  bool fits_memory = false;
  double parameters = 0;             // count, whole model
  std::int64_t worst_stage = 0;
  double parameters_per_device = 0;  // count, on a device of the worst stage
  MemoryBreakdown memory;            // bytes per device of the worst stage
  double capacity_bytes = 0;
  double usable_bytes = 0;
  std::optional<TimeEstimate> time;  // seconds; absent when the plan could not be timed
};

struct PlanFile {
  int version = plan_file_version;
  ModelSpec model;
  ClusterSpec cluster;
  std::int64_t world_size = 0;
  Plan plan;
  PlanPrediction prediction;
};

// The model as the keys of its preset file (docs/presets.md), the cluster and
// its device in SI units.
nlohmann::ordered_json model_to_json(const ModelSpec& model);
nlohmann::ordered_json cluster_to_json(const ClusterSpec& cluster);

// The prediction part of an explanation (its worst stage and time).
PlanPrediction prediction_from(const Explanation& explanation);

nlohmann::ordered_json plan_file_to_json(const PlanFile& file);

// A plan file for an explained plan. The explanation must have a memory
// estimate (explain_plan gives one whenever the layers can be laid out).
PlanFile make_plan_file(const ModelSpec& model, const ClusterSpec& cluster, std::int64_t world_size, const Plan& plan,
                        const Explanation& explanation);

// Writes the file (to a temporary name, then renamed into place, so a reader
// never sees half a file); problems name the path.
Problems write_plan_file(const std::string& path, const ModelSpec& model, const ClusterSpec& cluster,
                         std::int64_t world_size, const Plan& plan, const Explanation& explanation);

// Reads a plan file. Every problem names the file and the JSON key
// ("plan.json key 'plan.mesh.tp'"), with what was expected.
Loaded<PlanFile> parse_plan_file(const std::string& json_text, const std::string& display_name);
Loaded<PlanFile> read_plan_file(const std::string& path);

}  // namespace meshplan
