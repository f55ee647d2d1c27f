// The plan defaults (plan_defaults.hpp says why these).
#include "model/plan_defaults.hpp"

namespace meshplan {

int default_zero_stage(const Mesh& mesh) { return mesh.zero_group_size() > 1 ? 1 : 0; }

Recompute default_recompute(ModelKind kind) {
  return kind == ModelKind::transformer ? Recompute::selective : Recompute::none;
}

bool default_sequence_parallel(ModelKind kind, const Mesh& mesh, std::int64_t seq_len) {
  return kind == ModelKind::transformer && mesh.size(Axis::tp) > 1 && mesh.sequence_parallel_divides(seq_len);
}

Plan default_plan(ModelKind kind, const Mesh& mesh, std::int64_t seq_len) {
  Plan plan;
  plan.mesh = mesh;
  plan.micro_batch = 1;
  plan.zero_stage = default_zero_stage(mesh);
  plan.recompute = default_recompute(kind);
  plan.sequence_parallel = default_sequence_parallel(kind, mesh, seq_len);
  plan.schedule = {ScheduleKind::one_f_one_b, 1};
  return plan;
}

std::int64_t plan_seq_len(const ModelSpec& model, const Plan& plan) {
  return plan.seq_len > 0 ? plan.seq_len : model.default_seq_len();
}

std::vector<Axis> default_search_axes(const ModelSpec& model) {
  std::vector<Axis> axes{Axis::dp, Axis::fsdp, Axis::tp, Axis::pp};
  if (model.has_experts()) axes.push_back(Axis::ep);
  return axes;
}

}  // namespace meshplan
