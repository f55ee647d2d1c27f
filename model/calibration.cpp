// The fits of calibration.hpp: least squares for a link, merging for a curve.
#include "model/calibration.hpp"

#include <algorithm>
#include <cmath>

namespace meshplan {

LinkFit fit_link(const std::vector<CollectiveSample>& samples) {
  LinkFit fit;
  // Rows (x1, x2) / t against 1: x1 = latency steps, x2 = S x F_bus; unknowns (alpha, 1/B).
  struct Row {
    double x1, x2;
  };
  std::vector<Row> rows;
  for (const auto& s : samples) {
    if (!(s.time_s > 0) || s.ranks < 2) continue;
    rows.push_back({static_cast<double>(latency_steps(s.collective, s.ranks, CollectiveAlgorithm::ring)) / s.time_s,
                    s.bytes * bus_bandwidth_factor(s.collective, s.ranks) / s.time_s});
  }
  if (rows.size() < 2) return fit;
  double a11 = 0, a12 = 0, a22 = 0, b1 = 0, b2 = 0;
  for (const auto& r : rows) {
    a11 += r.x1 * r.x1;
    a12 += r.x1 * r.x2;
    a22 += r.x2 * r.x2;
    b1 += r.x1;
    b2 += r.x2;
  }
  double alpha = 0, inverse_bandwidth = 0;
  const double det = a11 * a22 - a12 * a12;
  if (det > 1e-12 * a11 * a22) {
    alpha = (b1 * a22 - b2 * a12) / det;
    inverse_bandwidth = (a11 * b2 - a12 * b1) / det;
  }
  // Constrained to alpha >= 0 and 1/B >= 0: the best one-unknown fit on the boundary.
  if (!(alpha >= 0) || !(inverse_bandwidth >= 0) || !(det > 1e-12 * a11 * a22)) {
    const double bandwidth_only = a22 > 0 ? b2 / a22 : 0;
    const double latency_only = a11 > 0 ? b1 / a11 : 0;
    auto residual = [&](double a, double ib) {
      double sum = 0;
      for (const auto& r : rows) sum += (a * r.x1 + ib * r.x2 - 1) * (a * r.x1 + ib * r.x2 - 1);
      return sum;
    };
    if (residual(0, bandwidth_only) <= residual(latency_only, 0)) {
      alpha = 0;
      inverse_bandwidth = bandwidth_only;
    } else {
      alpha = latency_only;
      inverse_bandwidth = 0;
    }
  }
  if (!(inverse_bandwidth > 0)) return fit;
  fit.ok = true;
  fit.latency_s = alpha;
  fit.bandwidth_bytes_per_s = 1.0 / inverse_bandwidth;
  std::vector<double> errors;
  for (const auto& r : rows) errors.push_back(std::abs(alpha * r.x1 + inverse_bandwidth * r.x2 - 1));
  std::sort(errors.begin(), errors.end());
  fit.worst_relative_error = errors.back();
  fit.median_relative_error = errors[errors.size() / 2];
  return fit;
}


std::vector<GemmCurvePoint> build_gemm_curve(std::vector<GemmCurvePoint> measured, double merge_relative,
                                             std::size_t max_points) {
  struct Group {
    double first_intensity = 0, intensity_sum = 0, fraction_sum = 0;
    int count = 0;
    double intensity() const { return intensity_sum / count; }
  };
  std::erase_if(measured, [](const GemmCurvePoint& p) { return !(p.intensity > 0) || !(p.fraction > 0); });
  std::sort(measured.begin(), measured.end(),
            [](const GemmCurvePoint& a, const GemmCurvePoint& b) { return a.intensity < b.intensity; });
  std::vector<Group> groups;
  for (const auto& p : measured) {
    if (groups.empty() || p.intensity > groups.back().first_intensity * (1 + merge_relative)) {
      groups.push_back({p.intensity, 0, 0, 0});
    }
    groups.back().intensity_sum += p.intensity;
    groups.back().fraction_sum += p.fraction;
    ++groups.back().count;
  }
  while (groups.size() > std::max<std::size_t>(max_points, 1)) {
    std::size_t closest = 0;
    for (std::size_t i = 1; i + 1 < groups.size(); ++i) {
      if (groups[i + 1].intensity() / groups[i].intensity() <
          groups[closest + 1].intensity() / groups[closest].intensity()) {
        closest = i;
      }
    }
    groups[closest].intensity_sum += groups[closest + 1].intensity_sum;
    groups[closest].fraction_sum += groups[closest + 1].fraction_sum;
    groups[closest].count += groups[closest + 1].count;
    groups.erase(groups.begin() + static_cast<std::ptrdiff_t>(closest) + 1);
  }
  std::vector<GemmCurvePoint> curve;
  for (const auto& g : groups) curve.push_back({g.intensity(), std::clamp(g.fraction_sum / g.count, 1e-3, 1.5)});
  return curve;
}

}  // namespace meshplan
