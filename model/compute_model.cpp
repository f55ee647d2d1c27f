#include "model/compute_model.hpp"

#include <algorithm>
#include <cmath>

namespace meshplan {

ComputeRates rates_for(const DeviceSpec& device, Precision precision) {
  ComputeRates rates;
  rates.peak_flops_per_s = device.peak_for(gemm_dtype(precision)).value_or(0);
  rates.gemm_efficiency =
      precision == Precision::fp8 && device.fp8_gemm_efficiency > 0 ? device.fp8_gemm_efficiency : device.gemm_efficiency;
  rates.memory_bytes_per_s = device.memory_bandwidth_bytes_per_s * device.memory_efficiency;
  rates.compute_units = device.compute_units;
  rates.l2_bytes_per_s = device.l2_bandwidth_bytes_per_s;
  for (const GemmCurvePoint& point : device.gemm_curve) {
    if (rates.curve_points == static_cast<int>(kMaxGemmCurvePoints)) break;  // load_device allows no more
    rates.curve_log_intensity[static_cast<std::size_t>(rates.curve_points)] = std::log(point.intensity);
    rates.curve_fraction[static_cast<std::size_t>(rates.curve_points)] = point.fraction;
    ++rates.curve_points;
  }
  const std::vector<AttentionRatePoint>* curves[2] = {&device.attention_forward_curve, &device.attention_backward_curve};
  for (int c = 0; c < 2; ++c) {
    for (const AttentionRatePoint& point : *curves[c]) {
      if (rates.attention_points[c] == static_cast<int>(kMaxGemmCurvePoints)) break;  // load_device allows no more
      const auto i = static_cast<std::size_t>(rates.attention_points[c]++);
      rates.attention_log_flops[c][i] = std::log(point.forward_flops);
      rates.attention_flops_per_s[c][i] = point.flops_per_s;
    }
  }
  rates.launch_overhead_s = device.launch_overhead_s;
  rates.attention_dropout_slowdown = device.attention_dropout_slowdown;
  for (std::size_t i = 0; i < kStreamOps; ++i) {
    rates.stream_bytes_per_s[i] = device.op_bandwidth_bytes_per_s[i] > 0 ? device.op_bandwidth_bytes_per_s[i] : rates.memory_bytes_per_s;
  }
  return rates;
}

namespace {

// Output tile shapes cuBLAS commonly picks on Ampere/Hopper (the guide's Sec. 2.3).
constexpr double kTiles[][2] = {{256, 128}, {128, 256}, {128, 128}, {128, 64}, {64, 128}, {64, 64}};

// L2 bytes/s x 2 / (achievable FLOP/s x element bytes): times bm bn / (bm + bn)
// it is the fraction of the achievable rate L2 can feed; 0 = unbounded.
double tile_feed_scale(double element_bytes, const ComputeRates& rates) {
  const double achievable = rates.peak_flops_per_s * rates.gemm_efficiency;
  if (rates.l2_bytes_per_s <= 0 || achievable <= 0 || element_bytes <= 0) return 0;
  return rates.l2_bytes_per_s * 2 / (achievable * element_bytes);
}

double fed_fraction(double bm, double bn, double scale) {
  return scale > 0 ? std::min(1.0, scale * bm * bn / (bm + bn)) : 1.0;
}

}  // namespace

double tile_rate_fraction(double bm, double bn, double element_bytes, const ComputeRates& rates) {
  return fed_fraction(bm, bn, tile_feed_scale(element_bytes, rates));
}

double tile_efficiency(double m, double n, double batch, double element_bytes, const ComputeRates& rates) {
  if (rates.compute_units <= 0 || m <= 0 || n <= 0) return 1.0;
  const double units = static_cast<double>(rates.compute_units);
  const double scale = tile_feed_scale(element_bytes, rates);
  double best = 0;
  for (const auto& tile : kTiles) {
    const double count = std::ceil(m / tile[0]) * std::ceil(n / tile[1]) * batch;
    const double waves = std::ceil(count / units);
    const double wave_fraction = m * n * batch / (waves * units * tile[0] * tile[1]);
    best = std::max(best, wave_fraction * fed_fraction(tile[0], tile[1], scale));
  }
  return best;
}

double gemm_curve_fraction(double m, double n, double k, const ComputeRates& rates) {
  const int points = rates.curve_points;
  if (points == 0) return 1.0;
  const double x = std::log(2 * m * n * k / (m * k + k * n + m * n));
  if (points == 1 || x <= rates.curve_log_intensity[0]) return rates.curve_fraction[0];
  const auto last = static_cast<std::size_t>(points - 1);
  if (x >= rates.curve_log_intensity[last]) return rates.curve_fraction[last];
  std::size_t i = 1;
  while (x > rates.curve_log_intensity[i]) ++i;
  const double x0 = rates.curve_log_intensity[i - 1], x1 = rates.curve_log_intensity[i];
  const double f0 = rates.curve_fraction[i - 1], f1 = rates.curve_fraction[i];
  return f0 + (f1 - f0) * (x - x0) / (x1 - x0);
}

namespace {

// Linear in x between points, the end values beyond them.
double interpolate(double x, const double* xs, const double* ys, int points) {
  if (points == 1 || x <= xs[0]) return ys[0];
  const auto last = static_cast<std::size_t>(points - 1);
  if (x >= xs[last]) return ys[last];
  std::size_t i = 1;
  while (x > xs[i]) ++i;
  return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - xs[i - 1]) / (xs[i] - xs[i - 1]);
}

}  // namespace

AttentionTime fused_attention_time_s(double forward_flops, double unfused_gemms_forward_s, const ComputeRates& rates,
                                     bool dropout) {
  AttentionTime t;
  if (forward_flops <= 0) return t;
  constexpr double kBackwardFlopsPerForward = 2.5;
  const double forward_slowdown = dropout ? rates.attention_dropout_slowdown[0] : 1.0;
  const double backward_slowdown = dropout ? rates.attention_dropout_slowdown[1] : 1.0;
  if (rates.attention_points[0] == 0 || rates.attention_points[1] == 0) {
    t.forward_s = 0.5 * unfused_gemms_forward_s * forward_slowdown;
    t.backward_s = kBackwardFlopsPerForward * 0.5 * unfused_gemms_forward_s * backward_slowdown;
    return t;
  }
  const double x = std::log(forward_flops);
  const double forward_rate = interpolate(x, rates.attention_log_flops[0].data(), rates.attention_flops_per_s[0].data(), rates.attention_points[0]);
  const double backward_rate = interpolate(x, rates.attention_log_flops[1].data(), rates.attention_flops_per_s[1].data(), rates.attention_points[1]);
  t.forward_s = forward_flops / forward_rate * forward_slowdown;
  t.backward_s = kBackwardFlopsPerForward * forward_flops / backward_rate * backward_slowdown;
  return t;
}

double gemm_time_s(double m, double n, double k, double batch, double element_bytes, const ComputeRates& rates) {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
  const double flops = 2 * m * n * k * batch;
  const double achievable =
      rates.peak_flops_per_s * rates.gemm_efficiency * tile_efficiency(m, n, batch, element_bytes, rates) *
      gemm_curve_fraction(m, n, k, rates);
  const double compute_s = achievable > 0 ? flops / achievable : 0;
  const double traffic_bytes = (m * k + k * n + m * n) * batch * element_bytes;
  return std::max(compute_s, memory_time_s(traffic_bytes, rates));
}

}  // namespace meshplan
