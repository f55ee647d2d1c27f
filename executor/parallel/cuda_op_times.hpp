// Where a GPU training step spends its time, op by op, when
// MESHPLAN_CUDA_OP_TIMES=1 is set (a diagnostic; off, it costs one branch a
// call). Each timed call records a CUDA event before and after it on the
// ops' stream; the pairs are read back in batches (one stream
// synchronisation a batch, so the timeline between batches is not counted)
// and, when the ops go, a table goes to stderr: each op's calls, total
// milliseconds, share and mean microseconds, and the GPU timeline the
// batches covered against the sum of the ops in it (the rest is the GPU
// idle between ops: launch latency, host work, synchronisations).
//
// defines: OpTimes
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_check.hpp"

namespace meshplan::exec::parallel {

class OpTimes {
 public:
  explicit OpTimes(cudaStream_t stream) : stream_(stream) {
    const char* flag = std::getenv("MESHPLAN_CUDA_OP_TIMES");
    enabled_ = flag != nullptr && std::strcmp(flag, "0") != 0 && flag[0] != '\0';
  }
  OpTimes(const OpTimes&) = delete;
  OpTimes& operator=(const OpTimes&) = delete;
  ~OpTimes() {
    if (!enabled_) return;
    try {
      harvest();
      print();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "GPU op times: not read back (%s)\n", e.what());
    }
    for (cudaEvent_t e : pool_) cudaEventDestroy(e);
  }

  // `work` (which enqueues on the stream), timed under `name` when enabled.
  template <class Work>
  void time(const char* name, Work&& work) {
    if (!enabled_) {
      work();
      return;
    }
    const cudaEvent_t before = take(), after = take();
    MESHPLAN_CUDA_CHECK(cudaEventRecord(before, stream_));
    work();
    MESHPLAN_CUDA_CHECK(cudaEventRecord(after, stream_));
    pending_.push_back({name, before, after});
    if (pending_.size() >= kBatch) harvest();
  }

 private:
  static constexpr std::size_t kBatch = 2048;
  struct Pending {
    const char* name;
    cudaEvent_t before, after;
  };
  struct Total {
    double ms = 0;
    long calls = 0;
  };

  cudaEvent_t take() {
    if (!pool_free_.empty()) {
      const cudaEvent_t e = pool_free_.back();
      pool_free_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    MESHPLAN_CUDA_CHECK(cudaEventCreate(&e));
    pool_.push_back(e);
    return e;
  }
  void harvest() {
    if (pending_.empty()) return;
    MESHPLAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    float span = 0;
    MESHPLAN_CUDA_CHECK(cudaEventElapsedTime(&span, pending_.front().before, pending_.back().after));
    timeline_ms_ += span;
    for (const Pending& p : pending_) {
      float ms = 0;
      MESHPLAN_CUDA_CHECK(cudaEventElapsedTime(&ms, p.before, p.after));
      Total& t = totals_[p.name];
      t.ms += ms;
      ++t.calls;
      busy_ms_ += ms;
      pool_free_.push_back(p.before);
      pool_free_.push_back(p.after);
    }
    pending_.clear();
  }
  void print() const {
    std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    std::fprintf(stderr,
                 "GPU op times (MESHPLAN_CUDA_OP_TIMES): %.1f ms of GPU timeline in timed batches, ops %.1f ms, "
                 "idle between ops %.1f ms (%.1f%%)\n",
                 timeline_ms_, busy_ms_, timeline_ms_ - busy_ms_,
                 timeline_ms_ > 0 ? 100 * (timeline_ms_ - busy_ms_) / timeline_ms_ : 0.0);
    std::fprintf(stderr, "  %-34s %8s %11s %7s %10s\n", "op", "calls", "total ms", "share", "mean us");
    for (const auto& [name, t] : rows)
      std::fprintf(stderr, "  %-34s %8ld %11.2f %6.1f%% %10.1f\n", name.c_str(), t.calls, t.ms,
                   busy_ms_ > 0 ? 100 * t.ms / busy_ms_ : 0.0, 1000 * t.ms / static_cast<double>(t.calls));
  }

  cudaStream_t stream_;
  bool enabled_ = false;
  std::vector<cudaEvent_t> pool_, pool_free_;
  std::vector<Pending> pending_;
  std::map<std::string, Total> totals_;
  double timeline_ms_ = 0, busy_ms_ = 0;
};

}  // namespace meshplan::exec::parallel
