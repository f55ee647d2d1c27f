// The block-by-block replay of one stage with sharded weights
// (model/sharded_replay.hpp): small steps worked out by hand, and stepping
// over repeated blocks against replaying every block. Its agreement with the
// simulator's event engine is tests/test_simulator_exact.cpp's.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "model/sharded_replay.hpp"

namespace meshplan {
namespace {

ShardedBlock block(double forward, double backward, double gather, double scatter) {
  ShardedBlock b;
  b.forward_s = b.forward_paired_s = forward;
  b.backward_s = b.backward_paired_s = backward;
  b.backward_compute_s = backward;
  b.gather_s = gather;
  b.scatter_s = scatter;
  b.gradient_bytes = 1;
  b.gathers = true;
  return b;
}

// Two blocks, forward 1, backward 2, gather 3, reduce-scatter 1: the stream
// sets the pace. With the next gather prefetched: gathers end at 3, 6, 9, 12
// (the second backward gather waits for nothing but the stream); the blocks
// start at 3, 6 (forward) and 9, 12 (backward, last block first); the
// reduce-scatters run 12-13 (queued behind the fourth gather) and 14-15.
TEST(ShardedReplay, StreamBoundStepWorkedOutByHand) {
  const std::vector<ShardedRun> runs = {{block(1, 2, 3, 1), 2}};
  const ShardedStep step = replay_sharded_stage(runs, 1, false, true, {});
  EXPECT_DOUBLE_EQ(step.passes_end_s, 14);
  EXPECT_DOUBLE_EQ(step.reductions_end_s, 15);
  EXPECT_DOUBLE_EQ(step.end_s, 15);
  EXPECT_DOUBLE_EQ(step.forward_wait_s, 3 + 2);
  EXPECT_DOUBLE_EQ(step.backward_wait_s, 2 + 1);
  EXPECT_DOUBLE_EQ(step.gather_total_s, 12);
  EXPECT_DOUBLE_EQ(step.scatter_total_s, 2);
  EXPECT_DOUBLE_EQ(step.busy_s, 6);

  // Without prefetching each block gathers its own weights when it is
  // reached: gathers 0-3, 4-7, 8-11, 14-17 (behind the first reduce-scatter,
  // 13-14); the blocks end at 4, 8, 13, 19; the last reduce-scatter 19-20.
  const ShardedStep serial = replay_sharded_stage(runs, 1, false, false, {});
  EXPECT_DOUBLE_EQ(serial.passes_end_s, 19);
  EXPECT_DOUBLE_EQ(serial.reductions_end_s, 20);
}

// Forward 5, backward 10, gather and reduce-scatter 1: only the very first
// gather is exposed; each micro-batch's first gather was prefetched during
// the last backward block of the micro-batch before. Two micro-batches: the
// passes end at 1 + 2 x (2 x 5 + 2 x 10) = 61, the last reduce-scatter at 62.
TEST(ShardedReplay, ComputeBoundStepHidesAllButTheFirstGather) {
  const std::vector<ShardedRun> runs = {{block(5, 10, 1, 1), 2}};
  const ShardedStep step = replay_sharded_stage(runs, 2, false, true, {});
  EXPECT_DOUBLE_EQ(step.passes_end_s, 61);
  EXPECT_DOUBLE_EQ(step.reductions_end_s, 62);
  EXPECT_DOUBLE_EQ(step.forward_wait_s, 1);
  EXPECT_DOUBLE_EQ(step.backward_wait_s, 0);
}

// A block without weights between two with (forward 1, backward 2, gather
// 3, reduce-scatter 1, prefetching): it gathers nothing and takes no slot
// of the look-ahead, so the second block's gather is the one prefetched
// during the first. Gathers 0-3 (first block), 3-6 (third block, forward),
// 6-9 (third, backward: issued when the third block's forward begins at 5),
// 9-12 (first, backward); forward passes 3-4, 4-5, 6-7; backward 9-11
// (third), 11-13 (the weightless one), 13-15 (first); reduce-scatters 12-13
// (queued behind the fourth gather) and 15-16.
TEST(ShardedReplay, ABlockWithoutWeightsGathersNothingAndTakesNoPrefetchSlot) {
  ShardedBlock weightless = block(1, 2, 0, 0);
  weightless.gathers = false;
  weightless.gradient_bytes = 0;
  const std::vector<ShardedRun> runs = {{block(1, 2, 3, 1), 1}, {weightless, 1}, {block(1, 2, 3, 1), 1}};
  const ShardedStep step = replay_sharded_stage(runs, 1, false, true, {});
  EXPECT_DOUBLE_EQ(step.passes_end_s, 15);
  EXPECT_DOUBLE_EQ(step.reductions_end_s, 16);
  EXPECT_DOUBLE_EQ(step.forward_wait_s, 3 + 1);
  EXPECT_DOUBLE_EQ(step.backward_wait_s, 2);
  EXPECT_DOUBLE_EQ(step.gather_total_s, 12);
  EXPECT_DOUBLE_EQ(step.scatter_total_s, 2);
  EXPECT_DOUBLE_EQ(step.busy_s, 9);
}

// Stepping over the repeated blocks of a run (and, with m > 2, over repeated
// micro-batches) gives the step that replaying every block gives: the same
// blocks passed as runs of one block each are replayed one by one.
TEST(ShardedReplay, SteppingOverRepeatsEqualsReplayingEveryBlock) {
  std::mt19937_64 rng(20261127);
  std::uniform_real_distribution<double> time(0.05, 2.0);
  int checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const auto layers = std::uniform_int_distribution<std::int64_t>(3, 40)(rng);
    const auto m = std::uniform_int_distribution<std::int64_t>(1, 9)(rng);
    const bool split = rng() % 2 == 0, prefetch = rng() % 4 != 0;
    auto draw = [&](double weights) {
      ShardedBlock b = block(time(rng), time(rng), time(rng), time(rng));
      b.backward_s += b.forward_s;  // backward occupancy at least its compute
      b.backward_compute_s = b.backward_s * 0.8;
      b.weight_gradient_s = b.backward_compute_s * 0.5;
      b.gradient_bytes = weights;
      return b;
    };
    const ShardedBlock embedding = draw(3), layer = draw(1), head = draw(0.5);
    ShardedBuckets buckets;
    if (rng() % 2 == 0) {
      buckets.count = std::uniform_int_distribution<std::int64_t>(1, 30)(rng);
      buckets.threshold_each = (3 + 0.5 + static_cast<double>(layers)) / static_cast<double>(buckets.count) * 0.97;
      buckets.each_s = time(rng) * 0.2;
      buckets.last_s = buckets.each_s * 0.5;
      buckets.overlapped = rng() % 4 != 0;
    }
    const std::vector<ShardedRun> runs = {{embedding, 1}, {layer, layers}, {head, 1}};
    std::vector<ShardedRun> one_by_one = {{embedding, 1}};
    for (std::int64_t i = 0; i < layers; ++i) one_by_one.push_back({layer, 1});
    one_by_one.push_back({head, 1});
    const ShardedStep fast = replay_sharded_stage(runs, m, split, prefetch, buckets);
    // One micro-batch at a time cannot be forced from outside; m = 1 and 2 never step over micro-batches.
    const ShardedStep slow = replay_sharded_stage(one_by_one, m, split, prefetch, buckets);
    EXPECT_NEAR(fast.end_s, slow.end_s, 1e-12 * slow.end_s) << "trial " << trial;
    EXPECT_NEAR(fast.passes_end_s, slow.passes_end_s, 1e-12 * slow.passes_end_s) << "trial " << trial;
    EXPECT_NEAR(fast.reductions_end_s, slow.reductions_end_s, 1e-12 * slow.end_s) << "trial " << trial;
    EXPECT_NEAR(fast.forward_wait_s + fast.backward_wait_s, slow.forward_wait_s + slow.backward_wait_s,
                1e-9 * slow.end_s) << "trial " << trial;
    EXPECT_NEAR(fast.busy_s, slow.busy_s, 1e-12 * slow.busy_s);
    ++checked;
  }
  EXPECT_EQ(checked, 400);
}

}  // namespace
}  // namespace meshplan
