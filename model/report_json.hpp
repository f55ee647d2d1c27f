// JSON at the edges: the plan object (as plan files and `--json` carry it)
// and the explanation `meshplan explain --json` prints. Keys are documented in
// docs/formats.md; memory is in bytes, times in seconds.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "model/cluster_spec.hpp"
#include "model/explain.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"

namespace meshplan {

// A count the model computes in double (parameters, per device after
// sharding) as the whole number JSON should carry: 7241732096, not
// 7241732096.0. A count past the int64 range (a plan file may state one up
// to 1e30) stays a double: rounding it into an int64 wrapped it negative.
nlohmann::ordered_json whole_count(double count);

nlohmann::ordered_json plan_to_json(const Plan& plan);
nlohmann::ordered_json memory_to_json(const MemoryBreakdown& memory);
// time_s {compute, communication, communication_exposed, bubble, optimizer, step},
// communication_s_by_axis, tokens_per_s, mfu, hfu, model_flops_per_step, ...
void add_time_to_json(nlohmann::ordered_json& j, const TimeEstimate& time);
nlohmann::ordered_json explanation_to_json(const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan,
                                           const Explanation& explanation);

}  // namespace meshplan
