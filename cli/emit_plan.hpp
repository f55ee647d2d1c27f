// --emit-plan, as `explain` and `plan` write a plan file: a file that
// `meshplan train` will refuse is still written (simulate --plan and the
// exports read it, and a later executor may train it), with a warning per
// reason on stderr, so nobody learns it only when the ranks start. A CNN is
// the exception: the executor trains none, so nothing is written (exit 2),
// while explain and plan still cost the model.
//
// defines: emit_plan_file
#pragma once

#include <cstdint>
#include <string>

#include "model/cluster_spec.hpp"
#include "model/explain.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"
#include "model/problem.hpp"

namespace meshplan::cli {

// Writes the plan file unless the model is a CNN. Problems all name
// --emit-plan: errors (a CNN, a file that could not be written) mean nothing
// was written; warnings say what `meshplan train` will refuse (exec::trainable).
Problems emit_plan_file(const std::string& path, const ModelSpec& model, const ClusterSpec& cluster,
                        std::int64_t world_size, const Plan& plan, const Explanation& explanation);

}  // namespace meshplan::cli
