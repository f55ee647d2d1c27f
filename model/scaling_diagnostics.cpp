#include "model/scaling_diagnostics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace meshplan {

ScalingDiagnostics scaling_diagnostics(const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan,
                                       std::int64_t seq_len, const std::vector<AxisPlacement>& placements,
                                       double links_fsdp, double links_tp) {
  ScalingDiagnostics out;
  const double peak = cluster.device.peak_for(gemm_dtype(plan.precision)).value_or(0);
  if (peak <= 0) return out;
  const double tokens = static_cast<double>(plan.global_batch) * static_cast<double>(seq_len);
  const Mesh& mesh = plan.mesh;
  const double data_devices = static_cast<double>(mesh.size(Axis::dp) * mesh.size(Axis::fsdp));
  double feed_forward = 0;
  if (model.kind == ModelKind::transformer) feed_forward = static_cast<double>(model.transformer.ffn);
  if (model.kind == ModelKind::mlp) {
    for (auto size : model.mlp.layer_sizes) feed_forward = std::max(feed_forward, static_cast<double>(size));
  }
  double slowest_w = std::numeric_limits<double>::infinity();
  for (const AxisPlacement& p : placements) {
    if (p.size <= 1 || !(p.bandwidth_bytes_per_s > 0) || std::isinf(p.bandwidth_bytes_per_s)) continue;
    const double threshold = peak / p.bandwidth_bytes_per_s;  // C / W, FLOPs per byte
    AxisDiagnostic d;
    d.axis = p.axis;
    d.size = p.size;
    d.threshold = threshold;
    if (p.axis == Axis::dp || p.axis == Axis::fsdp) {
      d.value = tokens / data_devices;
      d.rule = "B/X > C/W";
      slowest_w = std::min(slowest_w, p.bandwidth_bytes_per_s);
    } else if (p.axis == Axis::tp && feed_forward > 0) {
      d.value = feed_forward / static_cast<double>(p.size);
      d.rule = "F/Y > C/W";
      slowest_w = std::min(slowest_w, p.bandwidth_bytes_per_s);
    } else {
      continue;
    }
    d.compute_bound = d.value > d.threshold;
    out.axes.push_back(d);
  }
  if (model.kind == ModelKind::transformer && feed_forward > 0 && std::isfinite(slowest_w)) {
    const double n = data_devices * static_cast<double>(mesh.size(Axis::tp));
    const double x_opt = std::sqrt(tokens / feed_forward * links_fsdp / links_tp * n);
    out.optimal_fsdp = std::min(x_opt, n);
    out.optimal_tp = n / *out.optimal_fsdp;
    out.tokens_per_device = tokens / n;
    const double alpha = peak / slowest_w;
    out.compute_bound_tokens_per_device = 4 * alpha * alpha / (links_fsdp * links_tp * feed_forward);
  }
  return out;
}

}  // namespace meshplan
