// The defaults of a plan whose mesh is given and whose other fields the user
// left open: one rule for `explain` and `simulate` (cli/plan_options.cpp),
// the decision guide's questions (model/decision_guide.cpp) and anyone else
// who builds a Plan from a mesh. The two used to restate it and disagreed on
// ZeRO under expert parallelism (dp > 1 against dp x ep > 1).
//
// Why these defaults (Korthikanti et al. 2022, Megatron-LM's recommended
// settings): micro-batch 1; ZeRO-1 (the distributed optimizer) wherever the
// optimizer state has data-parallel replicas to shard over; selective
// recomputation for transformers (for MLPs and CNNs there is no attention
// core to be selective about, and the search does not try it either);
// sequence parallelism wherever a transformer has tp > 1; 1F1B.
//
// Defines: default_zero_stage, default_recompute, default_sequence_parallel, default_plan,
// plan_seq_len, default_search_axes.
#pragma once

#include <vector>

#include "model/mesh.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"

namespace meshplan {

// 1 when the optimizer state has data-parallel replicas to shard, else 0.
// A parameter outside the experts is replicated over dp x ep (expert
// parallelism splits the experts, not the dense layers, so its ranks are
// data-parallel replicas of everything else: Megatron-Core's expert data
// parallelism); ZeRO on dp shards over that group, as the search prices it
// (model/search.cpp skips ZeRO > 0 exactly when dp x ep = 1). fsdp is always
// ZeRO-3 and needs no stage.
int default_zero_stage(const Mesh& mesh);

// selective for transformers, none for MLPs and CNNs.
Recompute default_recompute(ModelKind kind);

// On for a transformer with tp > 1 where tp divides each cp rank's share of
// the `seq_len` tokens (sequence parallelism splits it; validate.cpp refuses
// it otherwise).
bool default_sequence_parallel(ModelKind kind, const Mesh& mesh, std::int64_t seq_len);

// A plan on `mesh` for sequences of `seq_len` tokens with every default
// above, micro-batch 1 and 1F1B; the batch, the plan's seq_len field,
// precision and headroom are the caller's to set.
Plan default_plan(ModelKind kind, const Mesh& mesh, std::int64_t seq_len);

// The sequence length a plan trains: plan.seq_len, or the model's own when
// the plan leaves it 0.
std::int64_t plan_seq_len(const ModelSpec& model, const Plan& plan);

// The mesh axes a search tries when none are named (`plan`, `sweep`, `explain`
// without --mesh, the studio): dp, fsdp, tp and pp, and ep for a
// mixture-of-experts model, whose experts only ep splits (without it every
// device holds every expert). cp only when asked for: it pays off for long
// sequences, and which exchange it uses is the plan's choice (cp_comm).
std::vector<Axis> default_search_axes(const ModelSpec& model);

}  // namespace meshplan
