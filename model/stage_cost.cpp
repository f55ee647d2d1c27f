// The split rules of stage_cost.hpp, written once.
#include "model/stage_cost.hpp"

namespace meshplan {

ActivationSplit activation_split(std::int64_t tp, std::int64_t cp, bool sequence_parallel) {
  const double t = static_cast<double>(tp), c = static_cast<double>(cp);
  return {c * (sequence_parallel ? t : 1.0), c * t};
}

LocalGemm local_gemm(double rows_per_sample, double n, double k, double batch, TpSplit split, const Plan& plan,
                     double kv_n, std::int64_t kv_heads) {
  const double tp = static_cast<double>(plan.mesh.size(Axis::tp));
  LocalGemm g{rows_per_sample * static_cast<double>(plan.micro_batch) / static_cast<double>(plan.mesh.size(Axis::cp)),
              n, k, batch};
  if (split == TpSplit::columns)
    g.n = (n - kv_n) / tp + kv_n / static_cast<double>(kv_tp_split(kv_heads, plan.mesh.size(Axis::tp)));
  if (split == TpSplit::rows) g.k /= tp;
  if (split == TpSplit::heads) g.batch /= tp;
  return g;
}

PipelineTransfer pipeline_transfer(const ModelProfile& profile, const Plan& plan) {
  PipelineTransfer t;
  const double tp = static_cast<double>(plan.mesh.size(Axis::tp));
  t.boundary_bytes = profile.residual_elements_per_sample * static_cast<double>(plan.micro_batch) *
                     bytes_for(plan.precision).activation_bytes_per_element / activation_split(plan).sequence;
  t.gather_after_receive = profile.kind == ModelKind::transformer && tp > 1 && !plan.sequence_parallel;
  t.send_bytes = t.gather_after_receive ? t.boundary_bytes / tp : t.boundary_bytes;
  return t;
}

}  // namespace meshplan
