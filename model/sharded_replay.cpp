// The sharded-weights replay of sharded_replay.hpp. Times are absolute
// seconds from the start of the step; the stream is a FIFO, so a job starts
// when it is issued or when the job before it ends, whichever is later.
//
// Stepping over repeats: the state a block (or a micro-batch) starts from is
// the stream's lag behind the stage, the lag of the gathers already issued
// and of the last reduce-scatter, and how many gathers are in flight (a lag
// below zero is no lag: the stream was idle). When two consecutive blocks
// of a run, or two consecutive micro-batches, start from the same state,
// every later block of the run (micro-batch before the last) repeats the
// last one, shifted by its length.
#include "model/sharded_replay.hpp"

#include <algorithm>
#include <array>
#include <cmath>

namespace meshplan {
namespace {

using State = std::array<double, 5>;

class Replay {
 public:
  Replay(std::span<const ShardedRun> runs, std::int64_t micro_batches, bool split_backward, bool prefetch,
         const ShardedBuckets& buckets)
      : runs_(runs), m_(std::max<std::int64_t>(micro_batches, 1)), split_(split_backward), wanted_(prefetch ? 2 : 1),
        buckets_(buckets) {
    for (const ShardedRun& run : runs) produced_total_ += static_cast<double>(run.count) * run.block.gradient_bytes;
    cursor_.run = first_gathering(0);
  }

  ShardedStep run() {
    State previous{};
    double previous_t = 0;
    bool have_previous = false;
    for (std::int64_t j = 0; j < m_; ++j) {
      if (j > 0 && j + 1 < m_) {
        const State now = state();
        if (have_previous && same(now, previous)) {
          const std::int64_t skipped = m_ - 1 - j;
          shift(static_cast<double>(skipped) * (t_ - previous_t));
          cursor_.micro_batch += skipped;
          wait_[0] += static_cast<double>(skipped) * micro_batch_wait_[0];
          wait_[1] += static_cast<double>(skipped) * micro_batch_wait_[1];
          j += skipped;
        } else {
          previous = now;
          previous_t = t_;
          have_previous = true;
        }
      }
      micro_batch(j == 0, j + 1 == m_);
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
    for (const ShardedRun& run : runs_) {
      const double n = static_cast<double>(run.count);
      const ShardedBlock& b = run.block;
      step.gather_total_s += b.gathers ? n * 2 * b.gather_s : 0;
      step.scatter_total_s += b.gathers ? n * b.scatter_s : 0;
      step.busy_s += n * (b.forward_s + b.backward_s);
    }
    return step;
  }

 private:
  // ---- the state blocks and micro-batches start from, and stepping over repeats
  State state() const {
    auto lag = [&](double end) { return std::max(end - t_, 0.0); };
    return {lag(stream_free_), lag(reductions_end_), static_cast<double>(pending_count_),
            pending_count_ > 0 ? lag(pending_[0]) : 0, pending_count_ > 1 ? lag(pending_[1]) : 0};
  }
  // Equal but for the rounding of absolute times (ulps of t).
  bool same(const State& a, const State& b) const {
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (std::abs(a[i] - b[i]) > 1e-13 * t_) return false;
    }
    return true;
  }
  // Moves everything still ahead of the stage `by` later (what already
  // ended stays in the past, where only its being over matters).
  void shift(double by) {
    auto move = [&](double& end) {
      if (end > t_) end += by;
    };
    move(stream_free_);
    move(reductions_end_);
    for (int i = 0; i < pending_count_; ++i) move(pending_[i]);
    t_ += by;
  }

  // ---- the gather stream: gathers in the order blocks need their weights
  // (forward blocks first to last, then backward blocks last to first,
  // micro-batch after micro-batch), issued up to `wanted_` ahead.
  struct Cursor {
    std::int64_t micro_batch = 0;
    int pass = 0;            // 0 forward, 1 backward
    std::size_t run = 0;     // index into runs_ (runs_.size(): none left in this pass)
    std::int64_t issued = 0; // blocks of that run issued in this pass
  };
  std::size_t first_gathering(int pass) const {
    if (pass == 0) {
      for (std::size_t r = 0; r < runs_.size(); ++r) {
        if (runs_[r].block.gathers) return r;
      }
    } else {
      for (std::size_t r = runs_.size(); r-- > 0;) {
        if (runs_[r].block.gathers) return r;
      }
    }
    return runs_.size();
  }
  std::size_t next_gathering(std::size_t r, int pass) const {
    if (pass == 0) {
      while (++r < runs_.size()) {
        if (runs_[r].block.gathers) return r;
      }
    } else {
      while (r-- > 0) {
        if (runs_[r].block.gathers) return r;
      }
    }
    return runs_.size();
  }
  // After `issued` moved: on to the next run, pass or micro-batch when this run is done.
  void normalize() {
    while (cursor_.micro_batch < m_ &&
           (cursor_.run == runs_.size() || cursor_.issued == runs_[cursor_.run].count)) {
      cursor_.issued = 0;
      if (cursor_.run != runs_.size()) cursor_.run = next_gathering(cursor_.run, cursor_.pass);
      if (cursor_.run != runs_.size()) continue;
      if (cursor_.pass == 0) {
        cursor_.pass = 1;
      } else {
        cursor_.pass = 0;
        ++cursor_.micro_batch;
      }
      cursor_.run = first_gathering(cursor_.pass);
      if (cursor_.run == runs_.size()) return;  // no block gathers
    }
  }
  void issue(double now) {
    while (pending_count_ < wanted_ && cursor_.micro_batch < m_ && cursor_.run < runs_.size()) {
      const double start = std::max(now, stream_free_);
      stream_free_ = start + runs_[cursor_.run].block.gather_s;
      pending_[pending_count_++] = stream_free_;
      ++cursor_.issued;
      normalize();
    }
  }

  // When block b may start a pass that needs its weights (`pass`: 0 forward, 1 backward).
  double begin(const ShardedBlock& b, int pass) {
    if (!b.gathers) return t_;
    issue(t_);
    const double start = std::max(t_, pending_[0]);
    pending_[0] = pending_[1];
    --pending_count_;
    block_wait_ = start - t_;
    micro_batch_wait_[pass] += block_wait_;
    return start;
  }

  void reduce_scatter(const ShardedBlock& b) {
    if (!b.gathers) return;
    const double start = std::max(t_, stream_free_);
    stream_free_ = start + b.scatter_s;
    reductions_end_ = stream_free_;
  }

  // ---- data-parallel buckets (HSDP): in the last gradient pass, the buckets
  // whose bytes block b completes become ready in proportion to its compute
  // (`compute_s` from `start`).
  // The stage's last block completes them all, whatever the rounding of the running sum.
  void fill_buckets(double start, double compute_s, double gradient_bytes, bool last_block) {
    if (buckets_.count == 0 || !buckets_.overlapped) return;
    const double from = produced_, to = from + gradient_bytes;
    while (next_bucket_ < buckets_.count && (last_block || threshold(next_bucket_) <= to)) {
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

  // ---- passes
  enum class Pass { forward, backward, input_gradient, weight_gradient };

  // One block's pass; `last`: the step's last gradient pass (buckets fill),
  // `last_block`: the pass's last block.
  void block_pass(const ShardedBlock& b, Pass pass, bool last, bool last_block) {
    const double backward_s = backward_paired_ ? b.backward_paired_s : b.backward_s;
    switch (pass) {
      case Pass::forward: t_ = begin(b, 0) + (forward_paired_ ? b.forward_paired_s : b.forward_s); break;
      case Pass::backward: {
        const double start = begin(b, 1);
        last_start_ = start;
        if (last) fill_buckets(start, b.backward_compute_s, b.gradient_bytes, last_block);
        t_ = start + backward_s;
        reduce_scatter(b);
        break;
      }
      case Pass::input_gradient: t_ = begin(b, 1) + std::max(backward_s - b.weight_gradient_s, 0.0); break;
      case Pass::weight_gradient:
        last_start_ = t_;
        if (last) fill_buckets(t_, b.weight_gradient_s, b.gradient_bytes, last_block);
        t_ += b.weight_gradient_s;
        reduce_scatter(b);
        break;
    }
  }

  // A run's blocks one after another, stepping over the repeats; `final_run`:
  // the pass ends with this run. In the last gradient pass the buckets the
  // stepped-over blocks fill are still filled, block by block, at the starts
  // the repeats give them.
  void run_pass(const ShardedRun& run, Pass pass, bool last, bool final_run) {
    const bool fills = last && buckets_.count > 0 && buckets_.overlapped;
    const double compute_s = pass == Pass::weight_gradient ? run.block.weight_gradient_s : run.block.backward_compute_s;
    State previous{};
    double previous_t = 0;
    for (std::int64_t i = 0; i < run.count; ++i) {
      const ShardedBlock& b = run.block;
      if (pass == Pass::weight_gradient && i + 1 < run.count && b.gathers && b.scatter_s >= b.weight_gradient_s &&
          stream_free_ >= t_ + b.weight_gradient_s) {
        // W passes wait for nothing; with the stream this far behind and each
        // reduce-scatter no shorter than its W, every one of them starts when
        // the one before it ends: the stream sets the pace, its lag only grows.
        const std::int64_t left = run.count - i;
        if (fills) {
          for (std::int64_t q = 0; q < left; ++q) {
            fill_buckets(t_ + static_cast<double>(q) * b.weight_gradient_s, compute_s, b.gradient_bytes,
                         final_run && q + 1 == left);
          }
        }
        t_ += static_cast<double>(left) * b.weight_gradient_s;
        stream_free_ += static_cast<double>(left) * b.scatter_s;
        reductions_end_ = stream_free_;
        return;
      }
      if (i > 0 && i + 1 < run.count) {
        const State now = state();
        if (i > 1 && same(now, previous)) {
          const std::int64_t skipped = run.count - 1 - i;
          const double period = t_ - previous_t;
          if (fills) {
            for (std::int64_t q = 1; q <= skipped; ++q) {
              fill_buckets(last_start_ + static_cast<double>(q) * period, compute_s, b.gradient_bytes, false);
            }
            last_start_ += static_cast<double>(skipped) * period;
          }
          shift(static_cast<double>(skipped) * period);
          const bool needs_weights = pass != Pass::weight_gradient && run.block.gathers;
          if (needs_weights) {
            micro_batch_wait_[pass == Pass::forward ? 0 : 1] += static_cast<double>(skipped) * block_wait_;
            if (cursor_.micro_batch < m_ && cursor_.run < runs_.size()) {
              cursor_.issued += skipped;
              normalize();
            }
          }
          i += skipped;
        } else {
          previous = now;
          previous_t = t_;
        }
      }
      block_pass(run.block, pass, last, final_run && i + 1 == run.count);
    }
  }

  // The first micro-batch's forward and the last one's backward have no
  // partner (schedule.hpp, PassPairing); the others run beside one.
  void micro_batch(bool first, bool last) {
    forward_paired_ = !first;
    backward_paired_ = !last;
    micro_batch_wait_[0] = micro_batch_wait_[1] = 0;
    for (const ShardedRun& run : runs_) run_pass(run, Pass::forward, false, false);
    const Pass backward = split_ ? Pass::input_gradient : Pass::backward;
    for (std::size_t r = runs_.size(); r-- > 0;) run_pass(runs_[r], backward, last && !split_, r == 0);
    if (split_) {
      for (std::size_t r = runs_.size(); r-- > 0;) run_pass(runs_[r], Pass::weight_gradient, last, r == 0);
    }
    if (last && buckets_.overlapped) {
      while (next_bucket_ < buckets_.count) ready_bucket(t_);  // rounding leftovers
    }
    wait_[0] += micro_batch_wait_[0];
    wait_[1] += micro_batch_wait_[1];
  }

  std::span<const ShardedRun> runs_;
  std::int64_t m_;
  bool split_;
  int wanted_;
  const ShardedBuckets& buckets_;
  double produced_total_ = 0;
  double t_ = 0, stream_free_ = 0, reductions_end_ = 0;
  double pending_[2] = {};
  int pending_count_ = 0;
  Cursor cursor_;
  double produced_ = 0, bucket_free_ = 0;
  std::int64_t next_bucket_ = 0;
  double last_start_ = 0;  // when the last backward or W block started computing
  bool forward_paired_ = false, backward_paired_ = false;  // this micro-batch's passes (ShardedBlock)
  double block_wait_ = 0;                                 // the last block's wait for its gather
  double wait_[2] = {}, micro_batch_wait_[2] = {};        // forward / backward: over the step, this micro-batch
};

}  // namespace

ShardedStep replay_sharded_stage(std::span<const ShardedRun> runs, std::int64_t micro_batches, bool split_backward,
                                 bool prefetch, const ShardedBuckets& buckets) {
  return Replay(runs, micro_batches, split_backward, prefetch, buckets).run();
}

}  // namespace meshplan
