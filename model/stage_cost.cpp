// The split rules of stage_cost.hpp, written once.
#include "model/stage_cost.hpp"

#include "model/topology.hpp"

#include <algorithm>
#include <cmath>

namespace meshplan {

std::string to_string(ComputePart part) {
  switch (part) {
    case ComputePart::matmul_forward: return "matmul_forward";
    case ComputePart::matmul_backward: return "matmul_backward";
    case ComputePart::attention_forward: return "attention_forward";
    case ComputePart::attention_backward: return "attention_backward";
    case ComputePart::memory_bound_forward: return "memory_bound_forward";
    case ComputePart::memory_bound_backward: return "memory_bound_backward";
    case ComputePart::fp8_cast_forward: return "fp8_cast_forward";
    case ComputePart::fp8_cast_backward: return "fp8_cast_backward";
    case ComputePart::recompute: return "recompute";
    case ComputePart::launch_overhead: return "launch_overhead";
  }
  return "?";
}

ActivationSplit activation_split(std::int64_t tp, std::int64_t cp, bool sequence_parallel) {
  const double t = static_cast<double>(tp), c = static_cast<double>(cp);
  return {c * (sequence_parallel ? t : 1.0), c * t};
}

LocalGemm local_gemm(double rows_per_sample, double n, double k, double batch, TpSplit split, const Plan& plan,
                     double kv_n, std::int64_t kv_heads, bool expert) {
  const ExpertSplit experts = expert ? expert_split(plan) : ExpertSplit{plan.mesh.size(Axis::tp), 1, 1};
  const double tp = static_cast<double>(experts.tp);
  // A routed expert's GEMM: each rank runs its E / ep experts (batch), each over the rows routed to it
  // from the whole expert-parallel group (ep x its own share of the tokens).
  LocalGemm g{rows_per_sample * static_cast<double>(plan.micro_batch) /
                  static_cast<double>(plan.mesh.size(Axis::cp) * experts.tokens) * static_cast<double>(experts.ep),
              n, k, batch / static_cast<double>(experts.ep)};
  if (split == TpSplit::columns)
    g.n = (n - kv_n) / tp + kv_n / static_cast<double>(kv_tp_split(kv_heads, plan.mesh.size(Axis::tp)));
  if (split == TpSplit::rows) g.k /= tp;
  if (split == TpSplit::heads) g.batch /= tp;
  if (split == TpSplit::sequence && plan.sequence_parallel) g.rows /= tp;
  return g;
}

ExpertDispatchRate expert_dispatch_rate(const AxisPlacement& group, const Plan& plan, const ExpertRouting& routing) {
  ExpertDispatchRate rate{group.all_to_all_bandwidth_bytes_per_s, 1.0};
  if (plan.ep_dispatch != EpDispatch::deduplicated || !group.crosses_nodes) return rate;
  rate.nic_share = deduplicated_remote_share(routing, group.nodes_spanned);
  rate.bandwidth_bytes_per_s = all_to_all_bus_bandwidth(group.size, group.members_per_node, group.intra_bandwidth_bytes_per_s,
                                                        group.inter_bandwidth_bytes_per_s / rate.nic_share);
  return rate;
}

bool ep_encloses_tp(const Mesh& mesh) {
  std::ptrdiff_t ep = -1, tp = -1;
  for (std::size_t i = 0; i < mesh.axes.size(); ++i) {
    if (mesh.axes[i].size <= 1) continue;
    if (mesh.axes[i].axis == Axis::ep) ep = static_cast<std::ptrdiff_t>(i);
    if (mesh.axes[i].axis == Axis::tp) tp = static_cast<std::ptrdiff_t>(i);
  }
  if (ep < 0 || tp < 0) return true;
  if (ep > tp) return false;
  for (std::ptrdiff_t i = ep + 1; i < tp; ++i) {
    if (mesh.axes[static_cast<std::size_t>(i)].size > 1) return false;
  }
  return true;
}

ExpertTpFaults expert_tp_faults(const Plan& plan, std::int64_t experts) {
  ExpertTpFaults f;
  const std::int64_t etp = plan.expert_tensor_parallel, tp = plan.mesh.size(Axis::tp);
  if (etp == 0) return f;
  f.dense_model = experts == 0;
  f.value = !f.dense_model && etp != 1 && etp != tp;
  if (!f.dense_model && etp == 1 && tp > 1) {
    f.no_sequence_parallel = !plan.sequence_parallel;
    f.ep_not_outside_tp = !ep_encloses_tp(plan.mesh);
  }
  return f;
}

std::vector<WidthFault> mlp_width_faults(const TransformerDims& t, const Plan& plan) {
  std::vector<WidthFault> out;
  const std::int64_t tp = plan.mesh.size(Axis::tp);
  const std::int64_t ffn_tp = t.experts > 0 ? expert_split(plan).tp : tp;
  if (t.ffn % ffn_tp != 0) out.push_back({"the feed-forward size", t.ffn, ffn_tp});
  if (t.experts > 0 && t.shared_expert_ffn % tp != 0) out.push_back({"the shared experts' width", t.shared_expert_ffn, tp});
  if (t.experts > 0 && !t.dense_layers.empty() && t.dense_width() % tp != 0) {
    out.push_back({"the dense layers' feed-forward size", t.dense_width(), tp});
  }
  return out;
}

Mesh expert_mesh(const Plan& plan) {
  const ExpertSplit experts = expert_split(plan);
  if (experts.tokens == 1) return plan.mesh;
  Mesh out;
  for (const MeshAxis& a : plan.mesh.axes) {
    if (a.axis == Axis::ep) continue;
    out.axes.push_back(a.axis == Axis::tp ? MeshAxis{Axis::ep, experts.ep} : a);
  }
  return out;
}

std::vector<AxisPlacement> expert_placements(const Topology& topology, const Plan& plan,
                                             const std::vector<AxisPlacement>& placements) {
  return expert_split(plan).tokens > 1 ? place_axes(topology, expert_mesh(plan)) : placements;
}

PipelineTransfer pipeline_transfer(const ModelProfile& profile, const Plan& plan) {
  PipelineTransfer t;
  const double tp = static_cast<double>(plan.mesh.size(Axis::tp));
  t.boundary_bytes = profile.residual_elements_per_sample * static_cast<double>(plan.micro_batch) *
                     bytes_for(plan).activation_bytes_per_element / activation_split(plan).sequence;
  t.gather_after_receive = profile.kind == ModelKind::transformer && tp > 1 && !plan.sequence_parallel;
  t.send_bytes = t.gather_after_receive ? t.boundary_bytes / tp : t.boundary_bytes;
  return t;
}

GradientBuckets gradient_buckets(double reduced_bytes, double bucket_bytes) {
  GradientBuckets b;
  if (!(reduced_bytes > 0)) return b;
  b.size = std::max(bucket_bytes, reduced_bytes / kMostGradientBuckets);
  b.count = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(reduced_bytes / b.size)));
  b.last = reduced_bytes - static_cast<double>(b.count - 1) * b.size;
  if (!(b.last > 0)) {  // rounding put the boundary just past the total
    b.count = std::max<std::int64_t>(1, b.count - 1);
    b.last = reduced_bytes - static_cast<double>(b.count - 1) * b.size;
  }
  return b;
}

double bucket_reduction_end_s(const GradientBuckets& buckets, double each_s, double last_s, double compute_s) {
  if (buckets.count <= 0) return 0;
  const double total = buckets.through(buckets.count - 1);
  auto ready = [&](std::int64_t k) { return compute_s * std::min(1.0, buckets.through(k) / total); };
  auto after = [&](std::int64_t k) { return static_cast<double>(buckets.count - 1 - k) * each_s + last_s; };
  double end = ready(buckets.count - 1) + last_s;
  if (buckets.count >= 2) {
    end = std::max(end, ready(0) + after(0));
    end = std::max(end, ready(buckets.count - 2) + after(buckets.count - 2));
  }
  return end;
}

}  // namespace meshplan
