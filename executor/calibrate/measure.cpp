#include "executor/calibrate/measure.hpp"

#include <cblas.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <omp.h>

#include <algorithm>
#include <array>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/adamw.hpp"
#include "kernels/cpu/layernorm.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/residual.hpp"
#include "model/precision.hpp"
#include "model/stage_cost.hpp"
#include "model/text.hpp"

namespace meshplan::exec {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// CPU time of the calling thread: what a one-thread GEMM (which OpenBLAS runs
// in the caller) costs, without the time slices other processes got meanwhile.
double thread_cpu_s() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// "491520K", "32M", "1024" -> bytes; 0 when unreadable.
double parse_cache_size(const std::string& text) {
  std::istringstream in(text);
  double value = 0;
  std::string unit;
  if (!(in >> value)) return 0;
  in >> unit;
  if (unit == "K") return value * 1024;
  if (unit == "M") return value * 1024 * 1024;
  if (unit == "G") return value * 1024 * 1024 * 1024;
  return value;
}

// Runs `once` as time_gemm_* promise: a warm-up, then the best of the repeats.
template <typename F>
GemmResult best_of(const GemmShape& shape, int threads, double min_seconds, int min_repeats, F&& once) {
  const int previous_threads = openblas_get_num_threads();
  openblas_set_num_threads(threads);
  once();
  GemmResult result{shape, threads, std::numeric_limits<double>::infinity(), 0, threads == 1};
  const auto started = Clock::now();
  while (result.repeats < min_repeats || (seconds_since(started) < min_seconds && result.repeats < 10000)) {
    const auto t0 = Clock::now();
    const double cpu0 = result.thread_cpu_clock ? thread_cpu_s() : 0;
    once();
    result.best_s = std::min(result.best_s, result.thread_cpu_clock ? thread_cpu_s() - cpu0 : seconds_since(t0));
    ++result.repeats;
  }
  openblas_set_num_threads(previous_threads);
  return result;
}

// Deterministic operand values in [-1, 1): the rate does not depend on them,
// but denormals or NaNs could slow some BLAS kernels down.
std::vector<float> operand(std::int64_t count, std::uint32_t seed) {
  std::vector<float> values(static_cast<std::size_t>(count));
  std::uint32_t state = seed;
  for (auto& v : values) {
    state = state * 1664525u + 1013904223u;  // Numerical Recipes LCG
    v = static_cast<float>(state >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f;
  }
  return values;
}

}  // namespace

MachineInfo probe_machine() {
  MachineInfo info;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  const bool have_affinity = ::sched_getaffinity(0, sizeof allowed, &allowed) == 0;

  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  long processor = -1;
  std::string physical_id, core_id;
  std::set<std::pair<std::string, std::string>> cores;
  std::int64_t logical = 0;
  bool core_ids_complete = true;
  auto finish_block = [&]() {
    if (processor < 0) return;
    const bool usable = !have_affinity || CPU_ISSET(static_cast<int>(processor), &allowed);
    if (usable) {
      ++logical;
      if (physical_id.empty() || core_id.empty()) core_ids_complete = false;
      cores.insert({physical_id, core_id});
    }
    processor = -1;
    physical_id.clear();
    core_id.clear();
  };
  while (std::getline(cpuinfo, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) {
      if (trim(line).empty()) finish_block();
      continue;
    }
    const std::string key = trim(line.substr(0, colon));
    const std::string value = trim(line.substr(colon + 1));
    if (key == "processor") {
      finish_block();
      processor = std::strtol(value.c_str(), nullptr, 10);
    } else if (key == "physical id") {
      physical_id = value;
    } else if (key == "core id") {
      core_id = value;
    } else if (key == "model name" && info.cpu_model.empty()) {
      info.cpu_model = value;
    } else if (key == "cpu MHz" && info.cpu_mhz == 0) {
      info.cpu_mhz = std::strtod(value.c_str(), nullptr);
    } else if (key == "flags" && info.cpu_flags.empty()) {
      std::istringstream words(value);
      for (std::string flag; words >> flag;) info.cpu_flags.insert(flag);
    }
  }
  finish_block();
  if (logical == 0) {
    logical = have_affinity ? CPU_COUNT(&allowed) : static_cast<std::int64_t>(std::thread::hardware_concurrency());
  }
  info.logical_cpus = std::max<std::int64_t>(1, logical);
  info.physical_cores = core_ids_complete && !cores.empty() ? static_cast<std::int64_t>(cores.size()) : info.logical_cpus;

  std::ifstream meminfo("/proc/meminfo");
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    double kib = 0;
    if (!(fields >> key >> kib)) continue;
    if (key == "MemTotal:") info.memory_total_bytes = kib * 1024;
    if (key == "MemAvailable:") info.memory_available_bytes = kib * 1024;
  }
  if (info.memory_total_bytes <= 0) {
    info.memory_total_bytes = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  }
  if (info.memory_available_bytes <= 0) info.memory_available_bytes = info.memory_total_bytes / 2;

  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/sys/devices/system/cpu/cpu0/cache", ec)) {
    std::ifstream size_file(entry.path() / "size");
    std::string size;
    if (std::getline(size_file, size)) info.last_level_cache_bytes = std::max(info.last_level_cache_bytes, parse_cache_size(size));
  }
  std::ifstream loadavg("/proc/loadavg");
  loadavg >> info.load_average_1min;
  return info;
}

int theoretical_fp32_flops_per_cycle(const std::set<std::string>& cpu_flags) {
  if (cpu_flags.count("avx512f")) return 64;
  if (cpu_flags.count("avx2") && cpu_flags.count("fma")) return 32;
  if (cpu_flags.count("avx")) return 16;
  return 8;
}

GemmResult time_gemm_fp32(const GemmShape& shape, int threads, double min_seconds, int min_repeats) {
  const auto in = operand(shape.rows * shape.in_features, 1);
  const auto weight = operand(shape.out_features * shape.in_features, 2);
  std::vector<float> out(static_cast<std::size_t>(shape.rows * shape.out_features));
  return best_of(shape, threads, min_seconds, min_repeats, [&]() {
    kernels::matmul_forward<float>(out.data(), in.data(), weight.data(), nullptr, shape.rows, shape.in_features,
                                   shape.out_features);
  });
}

std::vector<std::string> native_bf16_flags(const std::set<std::string>& cpu_flags) {
  std::vector<std::string> found;
  for (const char* flag : {"avx512_bf16", "amx_bf16"}) {
    if (cpu_flags.count(flag)) found.emplace_back(flag);
  }
  return found;
}

std::string bf16_gemm_unavailable_reason() {
  const auto& support = kernels::bf16_matmul_support();
  return support.supported ? std::string() : support.reason;
}

std::optional<GemmResult> time_gemm_bf16(const GemmShape& shape, int threads, double min_seconds, int min_repeats) {
  if (!kernels::bf16_matmul_support().supported) return std::nullopt;
  const auto in = operand(shape.rows * shape.in_features, 1);
  const auto weight = operand(shape.out_features * shape.in_features, 2);
  std::vector<float> out(static_cast<std::size_t>(shape.rows * shape.out_features));
  std::vector<kernels::Bf16Bits> workspace(static_cast<std::size_t>(
      kernels::matmul_bf16_workspace_elements(shape.rows, shape.in_features, shape.out_features)));
  // oneDNN runs on OpenMP's threads: as many as the BLAS gets, so that one
  // thread runs in the caller and its CPU clock times it.
  const int previous_omp_threads = omp_get_max_threads();
  omp_set_num_threads(threads);
  const GemmResult result = best_of(shape, threads, min_seconds, min_repeats, [&]() {
    kernels::matmul_forward_bf16(out.data(), in.data(), weight.data(), nullptr, shape.rows, shape.in_features,
                                 shape.out_features, workspace.data());
  });
  omp_set_num_threads(previous_omp_threads);
  return result;
}

BandwidthResult measure_bandwidth(double array_bytes, int threads, int repeats) {
  BandwidthResult result;
  result.threads = std::max(1, threads);
  const auto count = static_cast<std::size_t>(array_bytes / sizeof(double));
  result.array_bytes = static_cast<double>(count * sizeof(double));
  // Not value-initialised: each thread touches its own part first, so on a
  // NUMA machine the pages land next to the core that streams them.
  std::unique_ptr<double[]> a(new double[count]), b(new double[count]), c(new double[count]);
  const auto part = [&](int t) {
    return std::pair<std::size_t, std::size_t>{count * static_cast<std::size_t>(t) / static_cast<std::size_t>(result.threads),
                                               count * static_cast<std::size_t>(t + 1) / static_cast<std::size_t>(result.threads)};
  };
  const auto on_all_threads = [&](auto&& body) {
    std::vector<std::thread> workers;
    const auto started = Clock::now();
    for (int t = 0; t < result.threads; ++t) {
      workers.emplace_back([&, t]() {
        const auto [first, last] = part(t);
        body(first, last);
      });
    }
    for (auto& w : workers) w.join();
    return seconds_since(started);
  };
  on_all_threads([&](std::size_t first, std::size_t last) {
    for (std::size_t i = first; i < last; ++i) {
      a[i] = 1.0;
      b[i] = 2.0;
      c[i] = 0.5;
    }
  });
  constexpr double scalar = 3.0;
  double best_copy = std::numeric_limits<double>::infinity();
  double best_triad = std::numeric_limits<double>::infinity();
  for (int r = 0; r < std::max(1, repeats); ++r) {
    best_copy = std::min(best_copy, on_all_threads([&](std::size_t first, std::size_t last) {
                           double* __restrict to = a.get();
                           const double* __restrict from = b.get();
                           for (std::size_t i = first; i < last; ++i) to[i] = from[i];
                         }));
    best_triad = std::min(best_triad, on_all_threads([&](std::size_t first, std::size_t last) {
                            double* __restrict to = a.get();
                            const double* __restrict x = b.get();
                            const double* __restrict y = c.get();
                            for (std::size_t i = first; i < last; ++i) to[i] = x[i] + scalar * y[i];
                          }));
    ++result.repeats;
  }
  // Read the result back so the passes cannot be optimised away.
  volatile double sink = a[count / 2];
  static_cast<void>(sink);
  result.copy_bytes_per_s = 2.0 * result.array_bytes / best_copy;
  result.triad_bytes_per_s = 3.0 * result.array_bytes / best_triad;
  return result;
}

}  // namespace meshplan::exec

namespace meshplan::exec {
namespace {

// Streams through a private buffer, reading and writing one word of every
// 64-byte line, so that whatever the thread touched before is pushed out of
// the caches (written lines cannot be kept by a replacement policy that
// guesses "streaming, read once").
// Streams through a private buffer, reading and writing one word of every
// 64-byte line, so that whatever the thread touched before is pushed out of
// the caches (written lines cannot be kept by a replacement policy that
// guesses "streaming, read once"). With `parallel` (one process of several
// threads, ColdSettings::one_process) the buffer is split over the OpenMP
// threads, so every core's caches are flushed; it also times a call by wall
// clock then, since the work runs on other threads than the caller.
class CacheEvictor {
  static constexpr double kWordBytes = sizeof(std::uint64_t);

 public:
  CacheEvictor(double bytes, bool parallel)
      : words_(static_cast<std::size_t>(std::max(bytes, 64.0) / kWordBytes), 1), parallel_(parallel) {}
  void operator()() {
    constexpr std::size_t kWordsPerLine = 64 / sizeof(std::uint64_t);
    const auto lines = static_cast<std::int64_t>(words_.size() / kWordsPerLine);
    std::uint64_t* words = words_.data();
#pragma omp parallel for schedule(static) if (parallel_)
    for (std::int64_t line = 0; line < lines; ++line) words[static_cast<std::size_t>(line) * kWordsPerLine] += 1;
    sink_ = words_[words_.size() / 2];
  }
  // Seconds `body` takes: the calling thread's CPU time, or wall time when parallel.
  template <typename F>
  double time(F&& body) const {
    if (!parallel_) {
      const double start = thread_cpu_s();
      body();
      return thread_cpu_s() - start;
    }
    const auto start = Clock::now();
    body();
    return seconds_since(start);
  }

 private:
  std::vector<std::uint64_t> words_;
  bool parallel_ = false;
  volatile std::uint64_t sink_ = 0;
};

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

// Forward and backward seconds of one repeat (backward 0 when there is none).
using PartTimes = std::array<double, 2>;

// The harness of ColdSettings: `make_repeat(evict)` runs in each worker thread
// (so its buffers are first touched there) and returns the callable that runs
// one repeat and returns its PartTimes. One untimed warm-up repeat first.
// With `one_process` the repeats run in the calling thread instead, with
// OpenBLAS and OpenMP at `threads` threads, and the figure is the median repeat.
template <typename MakeRepeat>
PartTimes cold_median(const ColdSettings& settings, MakeRepeat&& make_repeat) {
  const int threads = std::max(1, settings.threads);
  const int repeats = std::max(1, settings.repeats);
  const int previous_blas_threads = openblas_get_num_threads();
  if (settings.one_process) {
    const int previous_omp_threads = omp_get_max_threads();
    openblas_set_num_threads(threads);
    omp_set_num_threads(threads);
    CacheEvictor evict(settings.evict_bytes * threads, true);
    auto repeat = make_repeat(evict);
    std::vector<double> forward, backward;
    for (int r = -1; r < repeats; ++r) {
      const PartTimes times = repeat(r);
      if (r < 0) continue;
      forward.push_back(times[0]);
      backward.push_back(times[1]);
    }
    openblas_set_num_threads(previous_blas_threads);
    omp_set_num_threads(previous_omp_threads);
    return {median(forward), median(backward)};
  }
  openblas_set_num_threads(1);
  std::barrier together(threads);
  std::vector<PartTimes> per_thread(static_cast<std::size_t>(threads));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t]() {
      omp_set_num_threads(1);  // the kernels' OpenMP loops run in this thread alone
      CacheEvictor evict(settings.evict_bytes, false);
      auto repeat = make_repeat(evict);
      std::vector<double> forward, backward;
      for (int r = -1; r < repeats; ++r) {
        together.arrive_and_wait();
        const PartTimes times = repeat(r);
        if (r < 0) continue;
        forward.push_back(times[0]);
        backward.push_back(times[1]);
      }
      per_thread[static_cast<std::size_t>(t)] = {median(forward), median(backward)};
    });
  }
  for (auto& w : workers) w.join();
  openblas_set_num_threads(previous_blas_threads);
  std::vector<double> forward, backward;
  for (const auto& p : per_thread) {
    forward.push_back(p[0]);
    backward.push_back(p[1]);
  }
  return {median(forward), median(backward)};
}

constexpr double kFloatBytes = sizeof(float);

std::size_t to_size(std::int64_t n) { return static_cast<std::size_t>(std::max<std::int64_t>(n, 0)); }

}  // namespace

double arithmetic_intensity(const GemmShape& shape) {
  const auto m = static_cast<double>(shape.rows), n = static_cast<double>(shape.out_features),
             k = static_cast<double>(shape.in_features);
  const double elements = m * k + k * n + m * n;
  return elements > 0 ? 2 * m * n * k / elements : 0;
}

double eviction_bytes_for(double last_level_cache_bytes, double cap_bytes) {
  return std::max(8.0 * 1024 * 1024, std::min(2 * last_level_cache_bytes, cap_bytes));
}

ColdGemmResult time_gemm_cold(const GemmShape& shape, const ColdSettings& settings) {
  ColdGemmResult result;
  result.shape = shape;
  result.threads = std::max(1, settings.threads);
  result.repeats = std::max(1, settings.repeats);
  // Small GEMMs: enough copies for ~1e8 FLOPs per repeat (~1 ms), all of
  // them within half the eviction buffer, so every call's operands are cold.
  const double copy_bytes =
      static_cast<double>(shape.rows * shape.in_features + shape.out_features * shape.in_features +
                          shape.rows * shape.out_features) * kFloatBytes;
  const double wanted = std::ceil(1e8 / std::max(shape.flops(), 1.0));
  const double room = std::floor(0.5 * settings.evict_bytes / std::max(copy_bytes, 1.0));
  result.calls_per_repeat = static_cast<std::int64_t>(std::max(1.0, std::min({wanted, room, 256.0})));
  const std::int64_t copies = result.calls_per_repeat;
  const PartTimes times = cold_median(settings, [&](CacheEvictor& evict) {
    struct Operands {
      std::vector<float> in, weight, out;
    };
    auto operands = std::make_shared<std::vector<Operands>>();
    for (std::int64_t c = 0; c < copies; ++c) {
      const auto seed = static_cast<std::uint32_t>(2 * c + 1);
      operands->push_back({operand(shape.rows * shape.in_features, seed),
                           operand(shape.out_features * shape.in_features, seed + 1),
                           std::vector<float>(to_size(shape.rows * shape.out_features))});
    }
    return [&evict, operands, shape, copies](int) -> PartTimes {
      evict();
      const double t = evict.time([&]() {
        for (auto& o : *operands) {
          kernels::matmul_forward<float>(o.out.data(), o.in.data(), o.weight.data(), nullptr, shape.rows,
                                         shape.in_features, shape.out_features);
        }
      });
      return {t / static_cast<double>(copies), 0};
    };
  });
  result.call_s = times[0];
  return result;
}

double OpClassResult::counted_bytes_per_s() const {
  const double seconds = forward_s + backward_s;
  if (!(seconds > 0)) return 0;
  return (op_class == StreamOp::optimizer ? 1.0 : 3.0) * counted_forward_bytes / seconds;
}

namespace {

OpClassResult op_result(StreamOp op_class, std::string kernel, std::int64_t elements, double counted_forward_bytes,
                        const ColdSettings& settings, const PartTimes& times) {
  OpClassResult r;
  r.op_class = op_class;
  r.kernel = std::move(kernel);
  r.elements = elements;
  r.counted_forward_bytes = counted_forward_bytes;
  r.threads = std::max(1, settings.threads);
  r.repeats = std::max(1, settings.repeats);
  r.forward_s = times[0];
  r.backward_s = times[1];
  return r;
}

}  // namespace

OpClassResult time_activation_cold(std::int64_t n, const ColdSettings& settings) {
  const PartTimes times = cold_median(settings, [&](CacheEvictor& evict) {
    struct Buffers {
      std::vector<float> inp, out, dout, dinp;
    };
    auto b = std::make_shared<Buffers>(Buffers{operand(n, 3), std::vector<float>(to_size(n)), operand(n, 4),
                                               std::vector<float>(to_size(n))});
    return [&evict, b, n](int) -> PartTimes {
      evict();
      const double forward = evict.time([&]() { kernels::gelu_forward(b->out.data(), b->inp.data(), n); });
      evict();
      const double backward =
          evict.time([&]() { kernels::gelu_backward(b->dinp.data(), b->inp.data(), b->dout.data(), n); });
      return {forward, backward};
    };
  });
  return op_result(StreamOp::activation, "gelu_forward/backward", n, 2.0 * static_cast<double>(n) * kFloatBytes,
                   settings, times);
}

OpClassResult time_norm_cold(std::int64_t rows, std::int64_t channels, const ColdSettings& settings) {
  const PartTimes times = cold_median(settings, [&](CacheEvictor& evict) {
    struct Buffers {
      std::vector<float> inp, out, mean, rstd, weight, bias, dout, dinp, dweight, dbias;
    };
    const std::int64_t n = rows * channels;
    auto b = std::make_shared<Buffers>(Buffers{operand(n, 5), std::vector<float>(to_size(n)),
                                               std::vector<float>(to_size(rows)), std::vector<float>(to_size(rows)),
                                               operand(channels, 6), operand(channels, 7), operand(n, 8),
                                               std::vector<float>(to_size(n)), std::vector<float>(to_size(channels)),
                                               std::vector<float>(to_size(channels))});
    return [&evict, b, rows, channels](int) -> PartTimes {
      evict();
      const double forward = evict.time([&]() {
        kernels::layernorm_forward(b->out.data(), b->mean.data(), b->rstd.data(), b->inp.data(), b->weight.data(),
                                   b->bias.data(), rows, channels);
      });
      evict();
      const double backward = evict.time([&]() {
        kernels::layernorm_backward(b->dinp.data(), b->dweight.data(), b->dbias.data(), b->dout.data(), b->inp.data(),
                                    b->weight.data(), b->mean.data(), b->rstd.data(), rows, channels);
      });
      return {forward, backward};
    };
  });
  const std::int64_t n = rows * channels;
  return op_result(StreamOp::norm, "layernorm_forward/backward", n, 2.0 * static_cast<double>(n) * kFloatBytes,
                   settings, times);
}

OpClassResult time_elementwise_cold(std::int64_t n, const ColdSettings& settings) {
  const PartTimes times = cold_median(settings, [&](CacheEvictor& evict) {
    struct Buffers {
      std::vector<float> inp1, inp2, out, dout, dinp1, dinp2;
    };
    auto b = std::make_shared<Buffers>(Buffers{operand(n, 9), operand(n, 10), std::vector<float>(to_size(n)),
                                               operand(n, 11), std::vector<float>(to_size(n)),
                                               std::vector<float>(to_size(n))});
    return [&evict, b, n](int) -> PartTimes {
      evict();
      const double forward = evict.time(
          [&]() { kernels::residual_forward(b->out.data(), b->inp1.data(), b->inp2.data(), n); });
      evict();
      const double backward = evict.time(
          [&]() { kernels::residual_backward(b->dinp1.data(), b->dinp2.data(), b->dout.data(), n); });
      return {forward, backward};
    };
  });
  return op_result(StreamOp::elementwise, "residual_forward/backward", n, 3.0 * static_cast<double>(n) * kFloatBytes,
                   settings, times);
}

OpClassResult time_optimizer_cold(std::int64_t p, const ColdSettings& settings) {
  const PartTimes times = cold_median(settings, [&](CacheEvictor& evict) {
    struct Buffers {
      std::vector<float> params, grads, m, v;
    };
    auto b = std::make_shared<Buffers>(Buffers{operand(p, 12), std::vector<float>(to_size(p)), operand(p, 13),
                                               std::vector<float>(to_size(p), 1e-6f)});
    for (auto& m : b->m) m *= 1e-3f;
    return [&evict, b, p](int repeat) -> PartTimes {
      // Gradients as a backward pass leaves them (untimed), then the step.
      std::fill(b->grads.begin(), b->grads.end(), 1e-3f);
      evict();
      kernels::AdamWHyperparameters hp;
      hp.weight_decay = 0.1;
      volatile double norm_sink = 0;
      const double t = evict.time([&]() {
        const std::span<const float> grads(b->grads);
        norm_sink = kernels::global_l2_norm<float>(std::span<const std::span<const float>>(&grads, 1));
        kernels::adamw_update(b->params.data(), b->grads.data(), b->m.data(), b->v.data(), p, repeat + 2, hp);
        std::fill(b->grads.begin(), b->grads.end(), 0.0f);
      });
      static_cast<void>(norm_sink);
      return {t, 0};
    };
  });
  return op_result(StreamOp::optimizer, "global_l2_norm + adamw_update + zero grads", p,
                   optimizer_traffic_bytes(static_cast<double>(p), bytes_for(Precision::fp32)), settings, times);
}

}  // namespace meshplan::exec
