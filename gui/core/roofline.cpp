// plan_roofline: the ops of one layer, the embedding and the head as roofline
// points, read from the evaluator's cost record (model/stage_cost.hpp).
#include "gui/core/roofline.hpp"

#include <set>

#include "model/compute_model.hpp"
#include "model/stage_cost.hpp"
#include "model/topology.hpp"

namespace meshplan::studio {

Roofline plan_roofline(const Evaluator& evaluator, const Plan& plan) {
  Roofline out;
  const ComputeRates rates = rates_for(evaluator.cluster().device, plan.precision);
  out.peak_flops_per_s = rates.peak_flops_per_s;
  out.achievable_flops_per_s = rates.peak_flops_per_s * rates.gemm_efficiency;
  out.memory_bytes_per_s = rates.memory_bytes_per_s;
  const double act = bytes_for(plan).activation_bytes_per_element;
  const double b = static_cast<double>(plan.micro_batch);
  const ActivationSplit split = activation_split(plan);
  const std::vector<BlockCost> costs = evaluator.block_costs(plan, place_axes(evaluator.topology(), plan.mesh));

  const LayerGraph& graph = evaluator.graph();
  std::set<int> blocks;
  const auto layers = graph.layer_blocks();
  if (!layers.empty()) blocks.insert(layers.front());
  for (std::size_t i = 0; i < graph.blocks.size(); ++i) {
    if (graph.blocks[i].kind != BlockKind::layer) blocks.insert(static_cast<int>(i));
  }
  for (int block : blocks) {
    // The record's GEMMs are in the block's op order.
    const BlockCost& cost = costs[static_cast<std::size_t>(evaluator.profile().block_kind[static_cast<std::size_t>(block)])];
    std::size_t next_gemm = 0;
    for (OpId id : graph.blocks[static_cast<std::size_t>(block)].ops) {
      const Op& op = graph.op(id);
      RooflinePoint p;
      p.name = op.name;
      if (op.gemm_like()) {
        const GemmCost& g = cost.gemms.at(next_gemm++);
        p.gemm = true;
        p.flops = g.shape.forward_flops();
        p.bytes = g.shape.operand_elements() * g.element_bytes;
        p.time_s = g.forward_s;
      } else {
        p.flops = op.forward_flops_per_sample * b / split.of(op.tensor_parallel_region);
        p.bytes = memory_pass_bytes(op.memory_elements_per_sample, op.memory_fixed_bytes_per_sample, act, b, split,
                                    op.tensor_parallel_region);
        p.time_s = stream_time_s(p.bytes, rates, stream_op_of(op.kind));
      }
      if (p.flops > 0 && p.bytes > 0 && p.time_s > 0) out.points.push_back(p);
    }
  }
  return out;
}

}  // namespace meshplan::studio
