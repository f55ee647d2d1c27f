#include "model/compute_model.hpp"

#include <algorithm>
#include <cmath>

namespace meshplan {

ComputeRates rates_for(const DeviceSpec& device, Precision precision) {
  ComputeRates rates;
  rates.peak_flops_per_s = device.peak_for(gemm_dtype(precision)).value_or(0);
  rates.gemm_efficiency = device.gemm_efficiency;
  rates.memory_bytes_per_s = device.memory_bandwidth_bytes_per_s * device.memory_efficiency;
  rates.compute_units = device.compute_units;
  for (const GemmCurvePoint& point : device.gemm_curve) {
    if (rates.curve_points == static_cast<int>(kMaxGemmCurvePoints)) break;  // load_device allows no more
    rates.curve_log_intensity[static_cast<std::size_t>(rates.curve_points)] = std::log(point.intensity);
    rates.curve_fraction[static_cast<std::size_t>(rates.curve_points)] = point.fraction;
    ++rates.curve_points;
  }
  for (std::size_t i = 0; i < kStreamOps; ++i) {
    rates.stream_bytes_per_s[i] = device.op_bandwidth_bytes_per_s[i] > 0 ? device.op_bandwidth_bytes_per_s[i] : rates.memory_bytes_per_s;
  }
  return rates;
}

double tile_wave_efficiency(double m, double n, double batch, std::int64_t compute_units) {
  if (compute_units <= 0 || m <= 0 || n <= 0) return 1.0;
  // Output tile shapes cuBLAS commonly picks on Ampere/Hopper (the guide's Sec. 2.3).
  static constexpr double tiles[][2] = {{256, 128}, {128, 256}, {128, 128}, {128, 64}, {64, 128}, {64, 64}};
  const double units = static_cast<double>(compute_units);
  double best = 0;
  for (const auto& tile : tiles) {
    const double count = std::ceil(m / tile[0]) * std::ceil(n / tile[1]) * batch;
    const double waves = std::ceil(count / units);
    best = std::max(best, m * n * batch / (waves * units * tile[0] * tile[1]));
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

double gemm_time_s(double m, double n, double k, double batch, double element_bytes, const ComputeRates& rates) {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
  const double flops = 2 * m * n * k * batch;
  const double achievable =
      rates.peak_flops_per_s * rates.gemm_efficiency * tile_wave_efficiency(m, n, batch, rates.compute_units) *
      gemm_curve_fraction(m, n, k, rates);
  const double compute_s = achievable > 0 ? flops / achievable : 0;
  const double traffic_bytes = (m * k + k * n + m * n) * batch * element_bytes;
  return std::max(compute_s, memory_time_s(traffic_bytes, rates));
}

}  // namespace meshplan
