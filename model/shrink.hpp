// Shrinking a cluster plan to rehearse it on this machine (`meshplan train
// --shrink`, `meshplan launch --shrink`): the same mesh, schedule, ZeRO
// stage, recompute, sequence parallelism, micro-batch and global batch, with
// the transformer's layers, heads, head width, ffn, vocabulary and sequence
// length reduced just enough for every rank to fit this machine's memory
// and run a step in a few seconds.
//
// The shrunk sizes are one ladder indexed by a scale s = 2^(-i/4), i = 0, 1, ...
// Every dimension is a non-decreasing function of s, rounded to what the plan
// relies on:
//   layers    = max(pp x v, floor(L s) rounded down to a multiple of pp x v)
//               (an even stage partition: stage_layers, if given, is dropped)
//   heads     = max(tp, floor(H s) rounded down to a multiple of tp)
//   head_dim  = max(min_head_dim, floor(D s)), one less when odd under rotary
//               positions (they rotate pairs), hidden = heads x head_dim
//   ffn       = hidden x (F / hidden of the original), rounded down to a multiple of tp (>= tp)
//   seq_len   = max(min_seq_len, floor(S s)), rounded down so that micro_batch x seq_len
//               is a multiple of tp under sequence parallelism
//   vocab     = min(V, vocab_floor) (the byte-level text loader needs 256)
// The first (largest) s whose plan is valid, fits budget.memory_bytes_per_rank
// (the planner's memory model, explain_plan, for the worst pipeline stage) and
// whose estimated step on budget.cluster is at most budget.step_seconds is
// chosen. Memory and step time grow with s, so a larger budget never gives a
// smaller model (monotone). When even the smallest rung is over budget it is
// returned with fits_memory / fits_time false and a note saying which limit.
// Precision becomes fp32: the CPU executor's multi-rank path computes fp32.
//
// defines: ShrinkBudget, ShrinkChange, ShrinkResult, shrink_plan
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/cluster_spec.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"
#include "model/problem.hpp"

namespace meshplan {

struct ShrinkBudget {
  ClusterSpec cluster;                 // this machine (the local-cpu preset); its node is widened to hold every rank
  double memory_bytes_per_rank = 0;    // this machine's memory / ranks, less headroom
  double step_seconds = 3.0;           // the longest estimated step accepted
  std::int64_t vocab_floor = 256;      // the data's vocabulary (bytes)
  std::int64_t min_head_dim = 8;
  std::int64_t min_seq_len = 32;
};

struct ShrinkChange {
  std::string field;    // "layers", "hidden", "heads", "ffn", "vocab", "seq_len", "precision", "stage_layers"
  std::string before;
  std::string after;
};

struct ShrinkResult {
  ModelSpec model;
  Plan plan;
  ClusterSpec cluster;                 // budget.cluster with every rank on one node
  double scale = 1;                    // the s chosen
  double parameters = 0;               // of the shrunk model
  double memory_bytes_per_rank = 0;    // estimated, worst pipeline stage
  double step_seconds = 0;             // estimated on budget.cluster
  bool fits_memory = false;
  bool fits_time = false;
  std::vector<ShrinkChange> changes;   // what differs from the input, in a fixed order
  std::string why;                     // one line: the limit that set the size
};

// Problems (field "--shrink") when the model is not a transformer or the
// budget is not positive; the plan must be valid for `model` (as read from a
// plan file).
Loaded<ShrinkResult> shrink_plan(const ModelSpec& model, const Plan& plan, const ShrinkBudget& budget);

}  // namespace meshplan
