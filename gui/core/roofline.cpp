// plan_roofline: the ops of one layer, the embedding and the head as roofline
// points, at the local shapes and splits of model/stage_cost.hpp.
#include "gui/core/roofline.hpp"

#include <set>

#include "model/compute_model.hpp"
#include "model/stage_cost.hpp"

namespace meshplan::studio {

Roofline plan_roofline(const Evaluator& evaluator, const Plan& plan) {
  Roofline out;
  const ComputeRates rates = rates_for(evaluator.cluster().device, plan.precision);
  // What an fp8 plan keeps in bf16 (gemm_in_fp8) runs at bf16's rates.
  const ComputeRates high_precision =
      plan.precision == Precision::fp8 ? rates_for(evaluator.cluster().device, Precision::bf16) : rates;
  out.peak_flops_per_s = rates.peak_flops_per_s;
  out.achievable_flops_per_s = rates.peak_flops_per_s * rates.gemm_efficiency;
  out.memory_bytes_per_s = rates.memory_bytes_per_s;
  const double act = bytes_for(plan).activation_bytes_per_element;
  const double b = static_cast<double>(plan.micro_batch);
  const ActivationSplit split = activation_split(plan);

  const LayerGraph& graph = evaluator.graph();
  std::set<int> blocks;
  const auto layers = graph.layer_blocks();
  if (!layers.empty()) blocks.insert(layers.front());
  for (std::size_t i = 0; i < graph.blocks.size(); ++i) {
    if (graph.blocks[i].kind != BlockKind::layer) blocks.insert(static_cast<int>(i));
  }
  for (int block : blocks) {
    const BlockKind role = graph.blocks[static_cast<std::size_t>(block)].kind;
    for (OpId id : graph.blocks[static_cast<std::size_t>(block)].ops) {
      const Op& op = graph.op(id);
      RooflinePoint p;
      p.name = op.name;
      const bool gemm_like = op.kind == OpKind::gemm || op.kind == OpKind::attention_scores ||
                             op.kind == OpKind::attention_values || op.kind == OpKind::conv;
      if (gemm_like && op.gemm.n > 0 && op.gemm.k > 0) {
        const LocalGemm g = local_gemm(op, plan, graph.kv_heads);
        const bool fp8 = gemm_in_fp8(plan, role, op.has_weights());
        const double gemm_bytes = fp8 ? 1.0 : act;
        p.gemm = true;
        p.flops = g.forward_flops();
        p.bytes = g.operand_elements() * gemm_bytes;
        p.time_s = gemm_time_s(g.rows, g.n, g.k, g.batch, gemm_bytes, fp8 ? rates : high_precision);
      } else {
        const double divisor = split.of(op.tensor_parallel_region);
        p.flops = op.forward_flops_per_sample * b / divisor;
        p.bytes = (op.memory_elements_per_sample * act + op.memory_fixed_bytes_per_sample) * b / divisor;
        p.time_s = stream_time_s(p.bytes, rates, stream_op_of(op.kind));
      }
      if (p.flops > 0 && p.bytes > 0 && p.time_s > 0) out.points.push_back(p);
    }
  }
  return out;
}

}  // namespace meshplan::studio
