// The sharded-weights replay of sharded_replay.hpp. Times are absolute
// seconds from the start of the step; the stream is a FIFO, so a job starts
// when it is issued or when the job before it ends, whichever is later.
#include "model/sharded_replay.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace meshplan {
namespace {

class Replay {
 public:
  Replay(std::span<const ShardedBlock> blocks, std::int64_t micro_batches, bool split_backward, bool prefetch,
         const ShardedBuckets& buckets)
      : blocks_(blocks), m_(std::max<std::int64_t>(micro_batches, 1)), split_(split_backward),
        wanted_(prefetch ? 2 : 1), buckets_(buckets) {
    gathering_.clear();
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      if (blocks[b].gathers) gathering_.push_back(b);
    }
    for (const ShardedBlock& b : blocks) produced_total_ += b.gradient_bytes;
  }

  ShardedStep run() {
    double previous[5] = {};
    double previous_t = 0;
    bool have_previous = false;
    for (std::int64_t j = 0; j < m_; ++j) {
      if (j > 0 && j + 1 < m_) {
        // The state the next micro-batch starts from, relative to the stage:
        // when it equals the last one, every micro-batch up to the last repeats it.
        const double state[5] = {stream_free_ - t_, std::max(reductions_end_ - t_, -1.0),
                                 static_cast<double>(pending_count_), pending_count_ > 0 ? pending_[0] - t_ : 0,
                                 pending_count_ > 1 ? pending_[1] - t_ : 0};
        if (have_previous && same(state, previous)) {
          const std::int64_t skipped = m_ - 1 - j;
          shift(static_cast<double>(skipped) * (t_ - previous_t));
          wait_[0] += static_cast<double>(skipped) * last_wait_[0];
          wait_[1] += static_cast<double>(skipped) * last_wait_[1];
          cursor_micro_batch_ += skipped;
          j += skipped;
        } else {
          std::copy(state, state + 5, previous);
          previous_t = t_;
          have_previous = true;
        }
      }
      micro_batch(j + 1 == m_);
    }
    ShardedStep step;
    step.passes_end_s = t_;
    step.reductions_end_s = reductions_end_;
    if (buckets_.count > 0 && !buckets_.overlapped) {
      bucket_free_ = t_ + static_cast<double>(buckets_.count - 1) * buckets_.each_s + buckets_.last_s;
    }
    step.buckets_end_s = buckets_.count > 0 ? bucket_free_ : 0;
    step.end_s = std::max({step.passes_end_s, step.reductions_end_s, step.buckets_end_s});
    step.forward_wait_s = wait_[0];
    step.backward_wait_s = wait_[1];
    for (const ShardedBlock& b : blocks_) {
      step.gather_total_s += b.gathers ? 2 * b.gather_s : 0;
      step.scatter_total_s += b.gathers ? b.scatter_s : 0;
      step.busy_s += b.forward_s + b.backward_s;
    }
    return step;
  }

 private:
  static bool same(const double* a, const double* b) {
    for (int i = 0; i < 5; ++i) {
      if (std::abs(a[i] - b[i]) > 1e-14 * std::max(std::abs(a[i]), std::abs(b[i])) + 1e-300) return false;
    }
    return true;
  }

  void shift(double by) {
    t_ += by;
    stream_free_ += by;
    if (reductions_end_ > 0) reductions_end_ += by;
    for (int i = 0; i < pending_count_; ++i) pending_[i] += by;
  }

  // The gather sequence, micro-batch after micro-batch: the forward's blocks
  // in order, then the backward's (B's under ZB-H1) last to first.
  double gather_at(std::int64_t position) const {
    const std::size_t k = gathering_.size();
    const std::size_t p = static_cast<std::size_t>(position);
    return blocks_[p < k ? gathering_[p] : gathering_[2 * k - 1 - p]].gather_s;
  }

  void issue(double now) {
    const auto per_micro_batch = static_cast<std::int64_t>(2 * gathering_.size());
    while (pending_count_ < wanted_ && cursor_micro_batch_ < m_) {
      const double start = std::max(now, stream_free_);
      stream_free_ = start + gather_at(cursor_position_);
      pending_[pending_count_++] = stream_free_;
      if (++cursor_position_ == per_micro_batch) {
        cursor_position_ = 0;
        ++cursor_micro_batch_;
      }
    }
  }

  // When block b may start a pass that needs its weights (`pass`: 0 forward, 1 backward).
  double begin(const ShardedBlock& b, int pass) {
    if (!b.gathers) return t_;
    issue(t_);
    const double start = std::max(t_, pending_[0]);
    pending_[0] = pending_[1];
    --pending_count_;
    last_wait_[pass] += start - t_;
    return start;
  }

  void reduce_scatter(const ShardedBlock& b) {
    if (!b.gathers) return;
    const double start = std::max(t_, stream_free_);
    stream_free_ = start + b.scatter_s;
    reductions_end_ = stream_free_;
  }

  // The last gradient pass: buckets whose bytes block b completes become
  // ready in proportion to its compute (`compute_s` from `start`).
  void fill_buckets(double start, double compute_s, double gradient_bytes) {
    if (buckets_.count == 0 || !buckets_.overlapped) return;
    const double from = produced_, to = from + gradient_bytes;
    while (next_bucket_ < buckets_.count && threshold(next_bucket_) <= to) {
      const double fraction = gradient_bytes > 0 ? (threshold(next_bucket_) - from) / gradient_bytes : 1.0;
      ready_bucket(start + compute_s * std::clamp(fraction, 0.0, 1.0));
    }
    produced_ = to;
  }
  double threshold(std::int64_t k) const {
    return k + 1 < buckets_.count ? static_cast<double>(k + 1) * buckets_.threshold_each : produced_total_;
  }
  void ready_bucket(double ready) {
    const double start = std::max(ready, bucket_free_);
    bucket_free_ = start + (next_bucket_ + 1 < buckets_.count ? buckets_.each_s : buckets_.last_s);
    ++next_bucket_;
  }

  void micro_batch(bool last) {
    last_wait_[0] = last_wait_[1] = 0;
    for (const ShardedBlock& b : blocks_) t_ = begin(b, 0) + b.forward_s;
    for (std::size_t i = blocks_.size(); i-- > 0;) {
      const ShardedBlock& b = blocks_[i];
      const double start = begin(b, 1);
      if (split_) {
        t_ = start + std::max(b.backward_s - b.weight_gradient_s, 0.0);
        continue;
      }
      if (last) fill_buckets(start, b.backward_compute_s, b.gradient_bytes);
      t_ = start + b.backward_s;
      reduce_scatter(b);
    }
    if (split_) {
      for (std::size_t i = blocks_.size(); i-- > 0;) {
        const ShardedBlock& b = blocks_[i];
        if (last) fill_buckets(t_, b.weight_gradient_s, b.gradient_bytes);
        t_ += b.weight_gradient_s;
        reduce_scatter(b);
      }
    }
    if (last && buckets_.overlapped) {
      while (next_bucket_ < buckets_.count) ready_bucket(t_);  // rounding leftovers
    }
    wait_[0] += last_wait_[0];
    wait_[1] += last_wait_[1];
  }

  std::span<const ShardedBlock> blocks_;
  std::int64_t m_;
  bool split_;
  int wanted_;
  const ShardedBuckets& buckets_;
  static thread_local std::vector<std::size_t> gathering_;
  double produced_total_ = 0;
  double t_ = 0, stream_free_ = 0, reductions_end_ = 0;
  double pending_[2] = {};
  int pending_count_ = 0;
  std::int64_t cursor_micro_batch_ = 0, cursor_position_ = 0;
  double produced_ = 0, bucket_free_ = 0;
  std::int64_t next_bucket_ = 0;
  double wait_[2] = {}, last_wait_[2] = {};  // gather waits over the step, and in the last micro-batch
};

thread_local std::vector<std::size_t> Replay::gathering_;

}  // namespace

ShardedStep replay_sharded_stage(std::span<const ShardedBlock> blocks, std::int64_t micro_batches,
                                 bool split_backward, bool prefetch, const ShardedBuckets& buckets) {
  return Replay(blocks, micro_batches, split_backward, prefetch, buckets).run();
}

}  // namespace meshplan
