// What `meshplan calibrate` measures on this machine, as plain functions
// that return numbers: the machine's description (/proc/cpuinfo,
// /proc/meminfo, sysfs), the GEMM rate of kernels::matmul_forward by shape,
// the bf16 GEMM rate of kernels::matmul_forward_bf16 (oneDNN, the path
// `meshplan train --precision bf16` runs) where this build and CPU have it,
// and STREAM-style memory bandwidth. executor/calibrate/local_preset.hpp turns
// them into the local-cpu presets; cli/calibrate_command.cpp runs them.
//
// Why timings are "best of several after a warm-up": the first call pays for
// page faults and BLAS buffer set-up, and other processes can only make a
// run slower, never faster, so the fastest repeat is the closest to what
// the hardware does (the convention of STREAM and of OpenBLAS's benchmarks).
//
// The refinements of `achievable:` (the GEMM curve by arithmetic intensity
// and the rate of each memory-bound op class) are measured differently, as a
// training step sees them: cold operands, every core busy, median of
// repeats (see ColdSettings).
//
// Defines: MachineInfo, probe_machine, GemmShape, GemmResult, time_gemm_fp32,
// time_gemm_bf16, native_bf16_flags, bf16_gemm_unavailable_reason, BandwidthResult, measure_bandwidth,
// theoretical_fp32_flops_per_cycle, arithmetic_intensity, ColdSettings, eviction_bytes_for, ColdGemmResult,
// time_gemm_cold, OpClassResult, time_activation_cold, time_norm_cold,
// time_elementwise_cold, time_optimizer_cold. (fit_link and build_gemm_curve, which
// turn measurements into figures, are in model/calibration.hpp.)
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model/calibration.hpp"
#include "model/device_spec.hpp"

namespace meshplan::exec {

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

// The CPU flags among `cpu_flags` (/proc/cpuinfo) that give native bf16
// arithmetic: avx512_bf16 (VDPBF16PS, Cooper Lake, Sapphire Rapids, Zen 4)
// and amx_bf16 (AMX tiles, Sapphire Rapids). Empty: none.
std::vector<std::string> native_bf16_flags(const std::set<std::string>& cpu_flags);

// Why this build or CPU has no bf16 GEMM (kernels::bf16_matmul_support()),
// or "" when it has one. Debian's OpenBLAS has no bf16 GEMM (cblas_sbgemm is
// declared but not exported), so the bf16 path is oneDNN's.
std::string bf16_gemm_unavailable_reason();

// The same as time_gemm_fp32 through kernels::matmul_forward_bf16: the float
// operands rounded to bf16 on every call, then oneDNN's bf16 matmul with
// fp32 accumulation, as a training step pays it; oneDNN's OpenMP threads set
// to `threads` for the call. nullopt when bf16_gemm_unavailable_reason() is not "".
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

// ---- Cold operands, every core busy (the `achievable:` refinements) ----

// I = 2 m n k / (m k + k n + m n): FLOPs per element of a GEMM's two operands
// and its result (model/device_spec.hpp, GemmCurvePoint).
double arithmetic_intensity(const GemmShape& shape);

// How the cold measurements run. `threads` std::threads (one per physical
// core: a local-cpu device is one core of a job where every core trains),
// each with its own buffers, OpenBLAS and OpenMP at one thread, all released
// together by a barrier before every repeat. Before each timed call a thread
// streams (reads and writes) through its own `evict_bytes` buffer, so the
// operands come from memory as they do in a training step, where each op's
// inputs were written long before. Each call is timed by the thread's CPU
// clock: all work runs in the calling thread, and time slices that other
// processes take do not count. A figure is the median over threads of each
// thread's median repeat (not the best: a cold call's time varies with what
// the other cores do, and the median is what a step meets).
//
// `one_process` measures the other way a rank can use the cores: one process
// whose OpenBLAS and OpenMP run `threads` threads (a one-rank job on a
// several-core machine). Then each call is timed by wall clock, the eviction
// buffer (threads x evict_bytes) is streamed by all threads, and a figure is
// the median repeat; results stay totals for the process (a caller divides
// by `threads` for the per-core figures of `achievable.threaded`).
struct ColdSettings {
  int threads = 1;
  double evict_bytes = 0;
  int repeats = 5;
  bool one_process = false;
};

// 2 x the last-level cache, capped at `cap_bytes` (a VM may report the host's
// whole L3, 480 MiB on the development machine) and at least 8 MiB.
double eviction_bytes_for(double last_level_cache_bytes, double cap_bytes);

struct ColdGemmResult {
  GemmShape shape;
  int threads = 1;
  int repeats = 0;
  std::int64_t calls_per_repeat = 1;  // distinct cold operand copies timed together (small GEMMs)
  double call_s = 0;                  // median (threads) of median (repeats) time of one call
  double flops_per_s() const { return call_s > 0 ? shape.flops() / call_s : 0; }
  double intensity() const { return arithmetic_intensity(shape); }
};

// kernels::matmul_forward<float> (no bias: one cblas_sgemm) on cold operands.
// A GEMM of less than ~1e8 FLOPs is timed as several calls on distinct copies
// of its operands (all evicted), so one repeat is long enough to time.
ColdGemmResult time_gemm_cold(const GemmShape& shape, const ColdSettings& settings);

// One memory-bound op class: the executor's kernel timed forward and backward
// on cold buffers; `counted_forward_bytes` is the forward traffic the cost
// model counts for the class, and the cost model prices a backward as 2x the
// forward, so the rate that makes forward + backward exact is
// 3 x counted_forward_bytes / (forward_s + backward_s). The optimizer has no
// backward (backward_s = 0) and counts its whole step: rate = bytes / forward_s.
struct OpClassResult {
  StreamOp op_class = StreamOp::elementwise;
  std::string kernel;
  std::int64_t elements = 0;  // elements of the op's input (parameters for the optimizer)
  double forward_s = 0;
  double backward_s = 0;
  double counted_forward_bytes = 0;
  int threads = 1;
  int repeats = 0;
  double counted_bytes_per_s() const;
};

// GELU (kernels::gelu_forward/backward) over n floats; counted 2n x 4 bytes.
OpClassResult time_activation_cold(std::int64_t n, const ColdSettings& settings);
// LayerNorm (kernels::layernorm_forward/backward) over rows x channels; counted 2 rows C x 4 bytes.
OpClassResult time_norm_cold(std::int64_t rows, std::int64_t channels, const ColdSettings& settings);
// Residual add (kernels::residual_forward/backward) of n floats; counted 3n x 4 bytes.
OpClassResult time_elementwise_cold(std::int64_t n, const ColdSettings& settings);
// The optimizer step of the executor (executor/train/trainer.cpp) over p fp32
// parameters: kernels::global_l2_norm of the gradients, kernels::adamw_update,
// and zeroing the gradients (Parameters::zero_grads); counted as the cost model
// counts Adam (model/stage_cost.hpp, optimizer_traffic_bytes, fp32).
OpClassResult time_optimizer_cold(std::int64_t p, const ColdSettings& settings);

}  // namespace meshplan::exec
