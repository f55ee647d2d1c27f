// Plan validation: every rule a plan must satisfy for this model on this
// cluster, all checked, every failure reported (never the first only). Each
// problem names the plan field ("mesh.tp", "global_batch", ...) and the rule
// with the numbers involved. Rules and their sources: docs/cost-model.md,
// "Validation".
#pragma once

#include <cstdint>
#include <vector>

#include "model/cluster_spec.hpp"
#include "model/layer_graph.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"
#include "model/problem.hpp"

namespace meshplan {

struct Deployment {
  std::int64_t world_size = 1;  // devices (= processes) in the job
  std::int64_t rank = 0;        // the device a report is about; must be < world_size
};

// Structural rules (divisibility, world size, support); the memory check is
// the memory model's. Pipeline partition problems are included.
// "must be at most 2^40 = ... sequences, got N" for a global batch or micro-batch past kMaxGlobalBatch;
// "" otherwise. Validation says it at the field, the CLI at its flag before it searches on the batch.
std::string batch_size_problem(std::int64_t sequences);

Problems validate_plan(const ModelSpec& model, const LayerGraph& graph, const ClusterSpec& cluster,
                       const Deployment& deployment, const Plan& plan);

// Whether a job (model, cluster, `world_size` devices, `seq_len` as the plan
// gives it, 0 for the model's, at `precision`) can be planned at all: the
// errors of validate_plan on a one-axis probe (dp = world_size) whose field
// is "world_size", "seq_len" or "precision", the rules no mesh can change.
// `graph` is built for that sequence length. What `plan`, `sweep` and
// `explain` check before they search. With `recompute_modules` other than the
// default, also whether the model has them ("recompute_modules").
Problems job_problems(const ModelSpec& model, const LayerGraph& graph, const ClusterSpec& cluster,
                      std::int64_t world_size, std::int64_t seq_len, Precision precision,
                      RecomputeModules recompute_modules = kDefaultRecomputeModules);

// The width tp splits in each linear of an MLP, in order (Megatron's pairs,
// as the layer graph splits them: an even, column-parallel linear's outputs,
// an odd, row-parallel one's inputs). tp must divide every one of them.
std::vector<std::int64_t> mlp_tp_split_widths(const MlpDims& mlp);

}  // namespace meshplan
