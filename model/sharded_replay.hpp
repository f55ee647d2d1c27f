// One pipeline stage whose weights are sharded (fsdp, ZeRO-3), replayed block
// by block as FSDP runs it: each block's weights are all-gathered before the
// block computes (the next block's gather prefetched while this one runs),
// each block's gradients reduce-scattered after its gradient pass, gathers and
// reduce-scatters sharing one stream in the order they were issued. The
// closed form "one gather of the whole stage, the first block's share
// exposed" (what the evaluator used before) is optimistic whenever the
// stream, not the compute, sets the pace: a block's gather waits behind the
// previous block's reduce-scatter, a small block (the embedding) cannot hide
// the next block's gather, and every block pays the collective's latency.
//
// This is the simulator's event model (simulator/engine.cpp: begin_segment,
// issue_gathers, end_segment, schedule_buckets) for a one-stage program,
// written as the max-plus recurrence it reduces to there, so the evaluator
// and the simulator with contention off give the same step
// (tests/test_simulator_exact.cpp). Blocks of a run, and micro-batches,
// repeat one another once the stream's lag behind the compute stops
// changing: the replay detects that and steps over the repeats, so its cost
// is a few blocks per run and a few micro-batches, not m passes of every
// block.
//
// Defines: ShardedBlock, ShardedRun, ShardedBuckets, ShardedStep, replay_sharded_stage.
#pragma once

#include <cstdint>
#include <span>

namespace meshplan {

// One block of the stage, from the cost record.
struct ShardedBlock {
  double forward_s = 0;           // forward: compute and its in-layer collectives
  double backward_s = 0;          // backward (input and weight gradients): compute and its exposed collectives
  double backward_compute_s = 0;  // the backward's compute alone (gradient buckets fill over it)
  double weight_gradient_s = 0;   // the weight-gradient GEMMs alone (ZB-H1's W pass)
  // The passes beside another micro-batch's (overlap_expert_parallel; else
  // equal to forward_s and backward_s): every forward but the first
  // micro-batch's, every backward but the last's.
  double forward_paired_s = 0;
  double backward_paired_s = 0;
  double gather_s = 0;            // all-gather of its weight shards
  double scatter_s = 0;           // reduce-scatter of its gradients
  double gradient_bytes = 0;      // gradients its gradient pass produces (before the reduce-scatter)
  bool gathers = false;           // has weights to gather and gradients to reduce-scatter
};

// `count` blocks alike, back to back (a model's layers are one run or a few).
struct ShardedRun {
  ShardedBlock block;
  std::int64_t count = 1;
};

// Data-parallel gradient buckets over the replicas of the sharded group (HSDP):
// bucket k may start once the last gradient pass has produced `produced_bytes(k)`.
struct ShardedBuckets {
  std::int64_t count = 0;
  double threshold_each = 0;  // produced bytes per bucket (thresholds k + 1 times it, the last all of them)
  double each_s = 0, last_s = 0;
  bool overlapped = false;  // reduced as the last pass produces them; else after it
};

struct ShardedStep {
  double passes_end_s = 0;      // the last gradient pass ends
  double reductions_end_s = 0;  // the last reduce-scatter ends (0: none)
  double buckets_end_s = 0;     // the last data-parallel bucket ends (0: none)
  double end_s = 0;             // the optimizer may start: the latest of the three
  double gather_total_s = 0;    // per micro-batch: every gather, forward and backward
  double scatter_total_s = 0;   // per micro-batch: every reduce-scatter
  double busy_s = 0;            // per micro-batch: forward and backward of every block, no waiting
  double forward_wait_s = 0;    // over the step: blocks waiting for their gather in forward passes
  double backward_wait_s = 0;   // ... in backward passes
};

// `split_backward`: ZB-H1's order, each micro-batch's backward as B (input
// gradients, weights needed) then W (weight gradients, reduce-scatters after
// it). `prefetch`: the next block's gather is issued when a block starts
// (else each block gathers its own when it is reached).
// `runs`: the stage's blocks in forward order.
ShardedStep replay_sharded_stage(std::span<const ShardedRun> runs, std::int64_t micro_batches,
                                 bool split_backward, bool prefetch, const ShardedBuckets& buckets);

}  // namespace meshplan
