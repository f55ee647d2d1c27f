// How long one op takes on one device: a roofline (Williams et al. 2009)
// per GEMM, at the device's achievable GEMM rate, corrected for tile and wave
// quantization (NVIDIA, "Matrix Multiplication Background User's Guide",
// 2023, Ch. 3), for the L2-to-SM operand traffic of the chosen output tile
// where the device gives its L2 bandwidth, and, where the device carries a
// measured curve, for the efficiency GEMMs of its arithmetic intensity
// reach; memory-bound ops at the achievable memory bandwidth, or at their
// class's measured rate; fused attention at the device's measured
// fused-attention rates; and a launch floor: a run of kernels takes at least
// its kernel count x the host's time to issue one.
// Formulas: docs/cost-model.md, "Compute".
#pragma once

#include <array>
#include <cstdint>

#include "model/device_spec.hpp"
#include "model/precision.hpp"

namespace meshplan {

struct ComputeRates {
  double peak_flops_per_s = 0;          // dense peak at the GEMM dtype
  double gemm_efficiency = 0.8;         // large-GEMM fraction of peak
  double memory_bytes_per_s = 0;        // achievable memory bandwidth
  std::int64_t compute_units = 0;       // SMs; 0 disables wave quantization
  double l2_bytes_per_s = 0;            // L2 -> SM bandwidth; 0 = no tile traffic bound
  // DeviceSpec::gemm_curve as ln(intensity) -> fraction; no points = 1.
  int curve_points = 0;
  std::array<double, kMaxGemmCurvePoints> curve_log_intensity{};
  std::array<double, kMaxGemmCurvePoints> curve_fraction{};
  // Bytes/s of counted traffic per StreamOp (memory_bytes_per_s where the device has no figure).
  std::array<double, kStreamOps> stream_bytes_per_s{};
  // DeviceSpec::attention_{forward,backward}_curve as ln(forward FLOPs) -> FLOP/s; no points = fallback.
  int attention_points[2] = {0, 0};  // [forward, backward]
  std::array<double, kMaxGemmCurvePoints> attention_log_flops[2]{};
  std::array<double, kMaxGemmCurvePoints> attention_flops_per_s[2]{};
  double launch_overhead_s = 0;     // host time per kernel (0 = no floor)
  std::array<double, 2> attention_dropout_slowdown{1, 1};  // DeviceSpec's: {forward, backward}
};

struct AttentionTime {
  double forward_s = 0;
  double backward_s = 0;
};

// Seconds of one causal fused-attention call whose forward does
// `forward_flops` = 2 b heads s^2 head_dim FLOPs (the causal half of Q K^T
// and P V), forward and backward (2.5x the forward FLOPs: FlashAttention-2
// recomputes Q K^T and runs four more matmuls, Dao 2023, Sec. 3.1.2), at the
// device's measured rates, linear in ln(FLOPs) between points and the end
// rates beyond them. Without a measured curve: the causal half of the
// unfused Q K^T and P V GEMM time, `unfused_gemms_forward_s`, and 2.5x that
// backward, with no memory-bound softmax or dropout passes.
// With `dropout` (the model's p > 0) both are multiplied by the device's
// measured attention_dropout_slowdown (the kernel that can draw the mask,
// against the one the curves measured).
AttentionTime fused_attention_time_s(double forward_flops, double unfused_gemms_forward_s, const ComputeRates& rates,
                                     bool dropout);

// `kernels` kernels that together take `device_s` on the device take at
// least kernels x launch_overhead_s: the host issues them one by one and
// runs ahead only while the device is busier than it.
inline double launch_floor_s(double device_s, double kernels, const ComputeRates& rates) {
  const double host_s = kernels * rates.launch_overhead_s;
  return device_s > host_s ? device_s : host_s;
}

// Rates for GEMMs at `precision`; peak 0 when the device lacks the dtype.
ComputeRates rates_for(const DeviceSpec& device, Precision precision);

// The fraction of the achievable GEMM rate (peak x gemm_efficiency) at which
// the L2 cache can feed CTAs that each compute a bm x bn output tile: every
// step along k copies (bm + bn) operand elements of `element_bytes` from L2
// into shared memory for 2 bm bn FLOPs, so all SMs together run at most
// l2_bytes_per_s x 2 bm bn / ((bm + bn) element_bytes) FLOP/s. In (0, 1];
// 1 when the device gives no L2 bandwidth.
double tile_rate_fraction(double bm, double bn, double element_bytes, const ComputeRates& rates);

// For the best of cuBLAS's common output tile shapes, the fraction of a full
// wave of full tiles that an (m x n) x batch output keeps busy (1 without
// compute_units), times that tile's tile_rate_fraction: the best tile is the
// one that finishes first, so a small tile that quantizes well can lose to a
// large one that reuses more. In (0, 1].
double tile_efficiency(double m, double n, double batch, double element_bytes, const ComputeRates& rates);

// The device's measured GEMM efficiency at arithmetic intensity
// 2 m n k / (m k + k n + m n): linear in ln(intensity) between the curve's
// points, the end values beyond them; 1 without a curve.
double gemm_curve_fraction(double m, double n, double k, const ComputeRates& rates);

// Seconds for batch x (m x k) . (k x n) with `element_bytes` operands:
// max(compute at peak x efficiency x tile_efficiency x curve, operand + result traffic at memory bandwidth).
double gemm_time_s(double m, double n, double k, double batch, double element_bytes, const ComputeRates& rates);

// Seconds to stream `bytes` through memory.
inline double memory_time_s(double bytes, const ComputeRates& rates) {
  return rates.memory_bytes_per_s > 0 ? bytes / rates.memory_bytes_per_s : 0;
}

// Seconds for a memory-bound op of class `op` that the cost model counts as `bytes` of traffic.
inline double stream_time_s(double bytes, const ComputeRates& rates, StreamOp op) {
  const double rate = rates.stream_bytes_per_s[static_cast<std::size_t>(op)];
  return rate > 0 ? bytes / rate : 0;
}

}  // namespace meshplan
