// What `meshplan calibrate` measures on this machine, as plain functions
// that return numbers: the machine's description (/proc/cpuinfo,
// /proc/meminfo, sysfs), the GEMM rate of kernels::matmul_forward by shape,
// the bf16 GEMM rate when the BLAS exports cblas_sbgemm, and STREAM-style
// memory bandwidth. calibrate_command.cpp turns them into presets.
//
// Why timings are "best of several after a warm-up": the first call pays for
// page faults and BLAS buffer set-up, and other processes can only make a
// run slower, never faster, so the fastest repeat is the closest to what
// the hardware does (the convention of STREAM and of OpenBLAS's benchmarks).
//
// Defines: MachineInfo, probe_machine, GemmShape, GemmResult, time_gemm_fp32,
// time_gemm_bf16, bf16_gemm_available, BandwidthResult, measure_bandwidth,
// theoretical_fp32_flops_per_cycle, CollectiveSample, LinkFit, fit_link.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model/collectives.hpp"

namespace meshplan::cli {

struct MachineInfo {
  std::string cpu_model;            // /proc/cpuinfo "model name"
  std::int64_t logical_cpus = 1;    // CPUs this process may run on (affinity mask)
  std::int64_t physical_cores = 1;  // distinct (physical id, core id) among them; = logical without that data
  double cpu_mhz = 0;               // /proc/cpuinfo "cpu MHz" of the first CPU; 0 when absent
  std::set<std::string> cpu_flags;  // /proc/cpuinfo "flags" of the first CPU
  double memory_total_bytes = 0;    // /proc/meminfo MemTotal (sysconf pages x page size without it)
  double memory_available_bytes = 0;  // /proc/meminfo MemAvailable
  double last_level_cache_bytes = 0;  // largest cache in /sys/devices/system/cpu/cpu0/cache; 0 when unknown
  double load_average_1min = 0;       // /proc/loadavg: other work on the machine slows every measurement
};

MachineInfo probe_machine();

// FP32 FLOPs one core can retire per cycle, from its SIMD flags: AVX-512 with
// 2 FMA units (16 lanes x 2 FLOP x 2) = 64, AVX2+FMA with 2 FMA units = 32,
// AVX = 16, else SSE = 8. An assumption: /proc/cpuinfo does not say how many
// FMA units a core has (some AVX-512 parts have one).
int theoretical_fp32_flops_per_cycle(const std::set<std::string>& cpu_flags);

// out[rows, out_features] = in[rows, in_features] . weight[out_features, in_features]^T,
// the shape of a linear layer's forward: M = rows, N = out_features, K = in_features.
struct GemmShape {
  std::string label;
  std::int64_t rows = 0;
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
  double flops() const { return 2.0 * static_cast<double>(rows) * static_cast<double>(in_features) * static_cast<double>(out_features); }
};

struct GemmResult {
  GemmShape shape;
  int threads = 1;
  double best_s = 0;
  int repeats = 0;
  bool thread_cpu_clock = false;  // timed by the thread's CPU clock (one thread), else wall time
  double flops_per_s() const { return best_s > 0 ? shape.flops() / best_s : 0; }
};

// Times kernels::matmul_forward<float> (no bias: one cblas_sgemm) on `threads`
// OpenBLAS threads: one warm-up call, then repeats until `min_seconds` have
// passed and at least `min_repeats` were made; the best repeat counts. One
// thread is timed by its CPU clock (OpenBLAS then runs in the caller), so a
// busy machine's preemptions do not count; more threads by wall time.
GemmResult time_gemm_fp32(const GemmShape& shape, int threads, double min_seconds, int min_repeats);

// Whether the linked OpenBLAS exports cblas_sbgemm (Debian's 0.3.21 declares
// it in cblas.h but is built without BUILD_BFLOAT16, so it is looked up at run time).
bool bf16_gemm_available();

// The same with bf16 operands and fp32 output through cblas_sbgemm; nullopt when unavailable.
std::optional<GemmResult> time_gemm_bf16(const GemmShape& shape, int threads, double min_seconds, int min_repeats);

struct BandwidthResult {
  int threads = 1;
  double array_bytes = 0;        // each of the three float64 arrays
  double copy_bytes_per_s = 0;   // a[i] = b[i]: 16 bytes moved per element
  double triad_bytes_per_s = 0;  // a[i] = b[i] + s * c[i]: 24 bytes moved per element
  int repeats = 0;
};

// STREAM (McCalpin 1995) copy and triad over three float64 arrays of
// `array_bytes` each, split evenly over `threads` threads (each thread first
// touches its own part); the best of `repeats` passes. Bytes are counted as
// STREAM counts them: reads + writes, no write-allocate traffic.
BandwidthResult measure_bandwidth(double array_bytes, int threads, int repeats);

// One timed collective (executor/comm/collective_bench.hpp: S in bytes as
// nccl-tests counts it, t the median iteration of the slowest rank).
struct CollectiveSample {
  Collective collective = Collective::all_reduce;
  std::int64_t ranks = 2;
  double bytes = 0;
  double time_s = 0;
};

// The link figures of the cost model (model/collectives.hpp) fitted to the
// samples: t = latency_steps(collective, n, ring) x latency
//            + S x F_bus(collective, n) / bandwidth,
// least squares on the relative error (every size counts alike, from a few
// microseconds to tens of milliseconds), latency and 1/bandwidth kept >= 0.
// The ring's latency steps because collective_time prices the cheaper of
// ring and tree and for 2 ranks they coincide. `worst_relative_error`: the
// largest |fit - t| / t over the samples.
struct LinkFit {
  bool ok = false;                 // at least two samples with distinct shapes and a positive bandwidth
  double latency_s = 0;
  double bandwidth_bytes_per_s = 0;  // bus bandwidth per direction
  double worst_relative_error = 0;
  double median_relative_error = 0;
};

LinkFit fit_link(const std::vector<CollectiveSample>& samples);

}  // namespace meshplan::cli
