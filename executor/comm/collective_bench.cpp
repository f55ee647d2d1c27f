// measure_collective(): fill, barrier, time, check, per iteration; the
// definitions are in collective_bench.hpp. Fill values are small integers
// (sums stay below 2^24, exact in f32, up to about 1000 ranks), so a check is equality.
// With BenchBuffers the host vectors are the staging copies of the device
// buffers: filled here, uploaded, run on the device, downloaded, checked here.
//
// defines: collective_size_bytes, measure_collective
#include "executor/comm/collective_bench.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <vector>

namespace meshplan::exec::comm {
namespace {

using Clock = std::chrono::steady_clock;

// One buffer from BenchBuffers for the scope; null (and nothing allocated) without them.
class StagedBuffer {
 public:
  StagedBuffer(BenchBuffers* buffers, std::size_t bytes)
      : buffers_(buffers), bytes_(bytes), data_(buffers != nullptr && bytes > 0 ? buffers->allocate(bytes) : nullptr) {}
  ~StagedBuffer() {
    if (data_ != nullptr) buffers_->release(data_, bytes_);
  }
  StagedBuffer(const StagedBuffer&) = delete;
  StagedBuffer& operator=(const StagedBuffer&) = delete;
  void* data() const { return data_; }

 private:
  BenchBuffers* buffers_;
  std::size_t bytes_;
  void* data_;
};

// all_reduce of one summary value over the group, through `buffers` when the group works on them.
template <typename V>
void reduce_summary(Communicator& group, BenchBuffers* buffers, V& value, DataType type, ReduceOp op) {
  if (buffers == nullptr) {
    group.all_reduce(&value, 1, type, op);
    return;
  }
  const StagedBuffer staged(buffers, sizeof value);
  buffers->upload(staged.data(), &value, sizeof value);
  group.all_reduce(staged.data(), 1, type, op);
  buffers->download(&value, staged.data(), sizeof value);
}

// Elements each rank sends (all_gather), receives (reduce_scatter) or
// exchanges with each peer (all_to_all); the whole buffer otherwise.
std::int64_t block_count(Collective collective, std::int64_t count, std::int64_t ranks) {
  switch (collective) {
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::all_to_all: return count / ranks;
    default: return count;
  }
}

template <typename T>
class Run {
 public:
  Run(Communicator& group, Collective collective, std::int64_t count, BenchBuffers* buffers)
      : group_(group), collective_(collective), n_(group.size()), r_(group.rank()), count_(count),
        block_(block_count(collective, count, n_)), buffers_(buffers),
        send_(at(uses_send() ? (collective == Collective::all_gather ? block_ : count_) : 0)),
        recv_(at(collective == Collective::reduce_scatter ? block_ : count_)),
        send_staged_(buffers, send_.size() * sizeof(T)), recv_staged_(buffers, recv_.size() * sizeof(T)) {}

  // After fill(): the inputs where the communicator reads them (complete on return).
  void upload() {
    if (buffers_ == nullptr) return;
    if (!send_.empty()) buffers_->upload(send_staged_.data(), send_.data(), send_.size() * sizeof(T));
    buffers_->upload(recv_staged_.data(), recv_.data(), recv_.size() * sizeof(T));
  }

  // After run(): the result back in the host vector that wrong() checks.
  void download() {
    if (buffers_ != nullptr) buffers_->download(recv_.data(), recv_staged_.data(), recv_.size() * sizeof(T));
  }

  void fill() {
    const auto rank = static_cast<std::int64_t>(r_);
    switch (collective_) {
      case Collective::all_reduce:
        for (std::int64_t i = 0; i < count_; ++i) recv_[at(i)] = value((rank + 1) * (i % 13 + 1));
        break;
      case Collective::all_gather:
        for (std::int64_t i = 0; i < block_; ++i) send_[at(i)] = value(rank + 1 + i % 7);
        std::fill(recv_.begin(), recv_.end(), T{0});
        break;
      case Collective::reduce_scatter:
        for (std::int64_t j = 0; j < count_; ++j) send_[at(j)] = value((rank + 1) * (j % 11 + 1));
        std::fill(recv_.begin(), recv_.end(), T{0});
        break;
      case Collective::all_to_all:
        for (std::int64_t d = 0; d < n_; ++d) {
          for (std::int64_t i = 0; i < block_; ++i) send_[at(d * block_ + i)] = value(rank * n_ + d + i % 5);
        }
        std::fill(recv_.begin(), recv_.end(), T{0});
        break;
      case Collective::broadcast:
      case Collective::send_recv:
        for (std::int64_t i = 0; i < count_; ++i) recv_[at(i)] = value(r_ == 0 ? i % 17 + 1 : 0);
        break;
    }
  }

  void run() {
    const DataType type = data_type_of<T>();
    void* send_data = buffers_ != nullptr ? send_staged_.data() : send_.data();
    void* recv_data = buffers_ != nullptr ? recv_staged_.data() : recv_.data();
    switch (collective_) {
      case Collective::all_reduce: group_.all_reduce(recv_data, count_, type, ReduceOp::sum); break;
      case Collective::all_gather: group_.all_gather(send_data, recv_data, block_, type); break;
      case Collective::reduce_scatter:
        group_.reduce_scatter(send_data, recv_data, block_, type, ReduceOp::sum);
        break;
      case Collective::all_to_all: group_.all_to_all(send_data, recv_data, block_, type); break;
      case Collective::broadcast: group_.broadcast(recv_data, count_, type, 0); break;
      case Collective::send_recv:
        // Ping-pong: rank 0 sends, rank 1 receives and returns what it got.
        if (r_ == 0) {
          group_.send(recv_data, count_, type, 1, 0);
          group_.recv(recv_data, count_, type, 1, 1);
        } else if (r_ == 1) {
          group_.recv(recv_data, count_, type, 0, 0);
          group_.send(recv_data, count_, type, 0, 1);
        }
        break;
    }
  }

  // Elements of this rank's result that differ from the expected values.
  std::int64_t wrong() const {
    const auto rank = static_cast<std::int64_t>(r_);
    const std::int64_t triangle = n_ * (n_ + 1) / 2;
    std::int64_t wrong = 0;
    auto expect = [&](std::int64_t index, std::int64_t expected) { wrong += recv_[at(index)] != value(expected); };
    switch (collective_) {
      case Collective::all_reduce:
        for (std::int64_t i = 0; i < count_; ++i) expect(i, triangle * (i % 13 + 1));
        break;
      case Collective::all_gather:
        for (std::int64_t s = 0; s < n_; ++s) {
          for (std::int64_t i = 0; i < block_; ++i) expect(s * block_ + i, s + 1 + i % 7);
        }
        break;
      case Collective::reduce_scatter:
        for (std::int64_t i = 0; i < block_; ++i) expect(i, triangle * ((rank * block_ + i) % 11 + 1));
        break;
      case Collective::all_to_all:
        for (std::int64_t s = 0; s < n_; ++s) {
          for (std::int64_t i = 0; i < block_; ++i) expect(s * block_ + i, s * n_ + rank + i % 5);
        }
        break;
      case Collective::broadcast:
        for (std::int64_t i = 0; i < count_; ++i) expect(i, i % 17 + 1);
        break;
      case Collective::send_recv:
        if (r_ <= 1) {
          for (std::int64_t i = 0; i < count_; ++i) expect(i, i % 17 + 1);
        }
        break;
    }
    return wrong;
  }

 private:
  // all_gather, reduce_scatter and all_to_all read a separate input; the others work in place.
  bool uses_send() const {
    return collective_ == Collective::all_gather || collective_ == Collective::reduce_scatter ||
           collective_ == Collective::all_to_all;
  }
  static std::size_t at(std::int64_t index) { return static_cast<std::size_t>(index); }
  static T value(std::int64_t v) { return static_cast<T>(v); }

  Communicator& group_;
  Collective collective_;
  std::int64_t n_;
  int r_;
  std::int64_t count_;
  std::int64_t block_;
  BenchBuffers* buffers_;
  std::vector<T> send_, recv_;  // the buffers themselves, or their host staging copies
  StagedBuffer send_staged_, recv_staged_;
};

template <typename T>
CollectiveTiming measure(Communicator& group, Collective collective, std::int64_t bytes, int iterations, int warmup,
                         DataType type, BenchBuffers* buffers) {
  CollectiveTiming timing;
  timing.collective = collective;
  timing.type = type;
  timing.ranks = group.size();
  timing.bytes = collective_size_bytes(collective, bytes, group.size(), type);
  timing.count = timing.bytes / static_cast<std::int64_t>(size_of(type));
  timing.iterations = iterations;

  Run<T> run(group, collective, timing.count, buffers);
  std::vector<double> times_s;
  std::int64_t wrong = 0;
  for (int i = 0; i < warmup + iterations; ++i) {
    run.fill();
    run.upload();
    group.barrier();
    const auto start = Clock::now();
    run.run();
    const double elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
    if (i >= warmup) times_s.push_back(elapsed_s);
    run.download();
    wrong += run.wrong();
  }
  double median_s = 0;
  if (!times_s.empty()) {
    std::sort(times_s.begin(), times_s.end());
    const std::size_t middle = times_s.size() / 2;
    median_s = times_s.size() % 2 == 1 ? times_s[middle] : (times_s[middle - 1] + times_s[middle]) / 2;
  }
  double min_s = times_s.empty() ? 0 : times_s.front();
  if (collective == Collective::send_recv) {  // one way of the round trip
    median_s /= 2;
    min_s /= 2;
  }
  reduce_summary(group, buffers, median_s, DataType::f64, ReduceOp::max);
  reduce_summary(group, buffers, min_s, DataType::f64, ReduceOp::max);
  timing.min_time_s = min_s;
  reduce_summary(group, buffers, wrong, DataType::i64, ReduceOp::sum);
  timing.time_s = median_s;
  timing.wrong_elements = wrong;
  timing.correct = wrong == 0;
  if (median_s > 0) {
    timing.algbw_bytes_per_s = static_cast<double>(timing.bytes) / median_s;
    timing.busbw_bytes_per_s = timing.algbw_bytes_per_s * bus_bandwidth_factor(collective, group.size());
  }
  return timing;
}

}  // namespace

std::int64_t collective_size_bytes(Collective collective, std::int64_t bytes, int ranks, DataType type) {
  const auto element = static_cast<std::int64_t>(size_of(type));
  std::int64_t count = std::max<std::int64_t>(bytes / element, 1);
  if (collective == Collective::all_gather || collective == Collective::reduce_scatter ||
      collective == Collective::all_to_all) {
    count = std::max<std::int64_t>(count / ranks, 1) * ranks;
  }
  return count * element;
}

CollectiveTiming measure_collective(Communicator& group, Collective collective, std::int64_t bytes, int iterations,
                                    int warmup, DataType type, BenchBuffers* buffers) {
  if (collective == Collective::send_recv && group.size() < 2) {
    throw std::logic_error("measure_collective: send_recv needs 2 ranks, \"" + group.name() + "\" has " +
                           std::to_string(group.size()));
  }
  switch (type) {
    case DataType::f32: return measure<float>(group, collective, bytes, iterations, warmup, type, buffers);
    case DataType::f64: return measure<double>(group, collective, bytes, iterations, warmup, type, buffers);
    case DataType::i32: return measure<std::int32_t>(group, collective, bytes, iterations, warmup, type, buffers);
    case DataType::i64: return measure<std::int64_t>(group, collective, bytes, iterations, warmup, type, buffers);
    case DataType::u8: break;
  }
  throw std::logic_error("measure_collective: " + to_string(type) + " is not supported (sums overflow bytes)");
}

}  // namespace meshplan::exec::comm
