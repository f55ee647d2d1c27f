#include "cli/emit_plan.hpp"

#include "executor/train/trainable.hpp"
#include "model/plan_file.hpp"

namespace meshplan::cli {

Problems emit_plan_file(const std::string& path, const ModelSpec& model, const ClusterSpec& cluster,
                        std::int64_t world_size, const Plan& plan, const Explanation& explanation) {
  Problems problems;
  for (const Problem& p : exec::trainable(model, plan, explanation.seq_len)) {
    if (p.severity != Severity::error) continue;  // warnings (dropout) do not stop training
    if (model.kind == ModelKind::cnn)
      return {{Severity::error, "--emit-plan", p.message + "; no plan file written (explain and plan still cost it)"}};
    problems.push_back({Severity::warning, "--emit-plan", "meshplan train will refuse this plan: " + describe(p)});
  }
  for (const Problem& p : write_plan_file(path, model, cluster, world_size, plan, explanation))
    problems.push_back({p.severity, "--emit-plan " + p.where, p.message});
  return problems;
}

}  // namespace meshplan::cli
