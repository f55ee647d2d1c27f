#include "model/evaluate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/collectives.hpp"
#include "model/pipeline_time.hpp"

namespace meshplan {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Link {
  double bandwidth_bytes_per_s = kInf;
  double latency_s = 0;
  std::int64_t size = 1;
  bool overlaps_compute = true;  // AxisPlacement::overlaps_compute: false hides nothing
};

double cost(Collective collective, double bytes, const Link& link) {
  if (link.size <= 1 || bytes <= 0) return 0;
  return collective_time(collective, bytes, link.size, link.bandwidth_bytes_per_s, link.latency_s).time_s;
}

struct Links {
  Link by_axis[6];
  explicit Links(const std::vector<AxisPlacement>& placements) {
    for (const auto& p : placements)
      by_axis[static_cast<int>(p.axis)] = {p.bandwidth_bytes_per_s, p.latency_s, p.size, p.overlaps_compute};
  }
  const Link& of(Axis axis) const { return by_axis[static_cast<int>(axis)]; }
};

// The plan's sizes and byte widths both halves of the evaluation read.
struct PlanScalars {
  PrecisionBytes bytes;
  double act, gemm_bytes, tp, cp, ep, dp, fsdp, b, seq;
  bool sp;
  Links links;
  PlanScalars(const Plan& plan, const std::vector<AxisPlacement>& placements, const ModelProfile& prof)
      : bytes(bytes_for(plan.precision)),
        act(bytes.activation_bytes_per_element),
        gemm_bytes(plan.precision == Precision::fp8 ? 1.0 : act),
        tp(static_cast<double>(plan.mesh.size(Axis::tp))),
        cp(static_cast<double>(plan.mesh.size(Axis::cp))),
        ep(static_cast<double>(plan.mesh.size(Axis::ep))),
        dp(static_cast<double>(plan.mesh.size(Axis::dp))),
        fsdp(static_cast<double>(plan.mesh.size(Axis::fsdp))),
        b(static_cast<double>(plan.micro_batch)),
        seq(static_cast<double>(prof.seq_len)),
        sp(plan.sequence_parallel),
        links(placements) {}
};

// A group spanning several axes: size is the product, the slowest axis sets the pace.
Link combine(std::initializer_list<Link> links) {
  Link out;
  for (const Link& l : links) {
    if (l.size <= 1) continue;
    out.size *= l.size;
    out.bandwidth_bytes_per_s = std::min(out.bandwidth_bytes_per_s, l.bandwidth_bytes_per_s);
    out.latency_s = std::max(out.latency_s, l.latency_s);
    out.overlaps_compute = out.overlaps_compute && l.overlaps_compute;
  }
  return out;
}


}  // namespace

Evaluator::Evaluator(const ModelSpec& model, const ClusterSpec& cluster, std::int64_t world_size, std::int64_t seq_len)
    : model_(model),
      cluster_(cluster),
      graph_(build_layer_graph(model, seq_len)),
      profile_(build_profile(model, graph_)),
      topology_(build_topology(cluster, world_size)) {
  for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16, Precision::fp8}) {
    rates_[static_cast<std::size_t>(p)] = rates_for(cluster_.device, p);
  }
}

PlanEstimate Evaluator::evaluate(const Plan& plan, std::vector<StageMemory>* stages) const {
  return evaluate(plan, place_axes(topology_, plan.mesh), stages);
}

std::vector<BlockCost> Evaluator::block_costs(const Plan& plan, const std::vector<AxisPlacement>& placements) const {
  const ModelProfile& prof = profile_;
  const PlanScalars plan_scalars(plan, placements, prof);
  const ComputeRates& rates = rates_[static_cast<std::size_t>(plan.precision)];
  const double act = plan_scalars.act, gemm_bytes = plan_scalars.gemm_bytes, tp = plan_scalars.tp, cp = plan_scalars.cp, ep = plan_scalars.ep, b = plan_scalars.b, seq = plan_scalars.seq;
  const bool sp = plan_scalars.sp;
  const Link& tp_link = plan_scalars.links.of(Axis::tp);
  const Link& cp_link = plan_scalars.links.of(Axis::cp);
  const Link& ep_link = plan_scalars.links.of(Axis::ep);

  // ---- cost of one block of each kind
  std::vector<BlockCost> kind_cost(prof.kinds.size());
  for (std::size_t k = 0; k < prof.kinds.size(); ++k) {
    const BlockProfile& bp = prof.kinds[k];
    BlockCost& c = kind_cost[k];
    c.dense_parameters = bp.tp_split_parameters / tp + bp.replicated_parameters;
    c.expert_parameters = (bp.expert_tp_split_parameters / tp + bp.expert_replicated_parameters) / ep;
    c.tied_parameters = bp.tied_parameters / tp;
    const std::size_t a = attention_index(plan.attention);
    const bool fused = plan.attention == Attention::fused;
    for (int region = 0; region < 2; ++region) {
      const double split = cp * ((region == 1 || sp) ? tp : 1.0);
      for (int selective = 0; selective < 2; ++selective) {
        const double saved = (bp.saved_elements[a][region][selective] * act + bp.saved_fixed_bytes[a][region][selective]) * b / split;
        c.full_activation_bytes += saved;
        if (!(selective == 1 && plan.recompute == Recompute::selective)) c.activation_bytes += saved;
      }
    }
    c.input_bytes = bp.input_elements_per_sample * act * b / (cp * (sp ? tp : 1.0));
    // Peak transients (memory_model.cpp, add_peak_memory; the same rules).
    const double sequence_split = cp * (sp ? tp : 1.0);
    if (prof.kind_role[k] == BlockKind::layer) {
      c.gradient_elements = b * (prof.residual_elements_per_sample / sequence_split +
                                 std::max(bp.largest_output_elements[a][0] / sequence_split, bp.largest_output_elements[a][1] / (cp * tp)));
    }
    c.loss_logits = b * (bp.loss_logit_elements[0] / sequence_split + bp.loss_logit_elements[1] / (cp * tp));

    double core_forward_s = 0;
    double unfused_attention_gemms_s = 0;  // fused attention's fallback price
    for (const GemmWork& g : bp.gemms) {
      double rows = g.rows_per_sample * b / cp, n = g.n, k_dim = g.k, batch = g.batch;
      if (g.tp_split == TpSplit::columns) n /= tp;
      if (g.tp_split == TpSplit::rows) k_dim /= tp;
      if (g.tp_split == TpSplit::heads) batch /= tp;
      const double forward = gemm_time_s(rows, n, k_dim, batch, gemm_bytes, rates);
      if (fused && g.core_attention) {  // priced as one fused kernel below
        unfused_attention_gemms_s += forward;
        continue;
      }
      const double input_gradient = g.needs_input_gradient ? gemm_time_s(rows, k_dim, n, batch, gemm_bytes, rates) : 0.0;
      const double weight_gradient = gemm_time_s(k_dim, n, rows, batch, gemm_bytes, rates);
      c.forward_compute_s += forward;
      c.backward_compute_s += input_gradient + weight_gradient;
      if (g.has_weights) c.weight_gradient_s += weight_gradient;
      if (g.core_attention) core_forward_s += forward;
    }
    for (int region = 0; region < 2; ++region) {
      const double split = cp * ((region == 1 || sp) ? tp : 1.0);
      for (int core = 0; core < (fused ? 1 : 2); ++core) {  // fused attention has no softmax / dropout passes of its own
        double t = 0;
        for (std::size_t cls = 0; cls < kStreamOps; ++cls) {
          const double bytes_per_sample = bp.memory_elements[region][core][cls] * act + bp.memory_fixed_bytes[region][core][cls];
          if (bytes_per_sample > 0) t += stream_time_s(bytes_per_sample * b / split, rates, static_cast<StreamOp>(cls));
        }
        c.forward_compute_s += t;
        c.backward_compute_s += 2 * t;  // gradients read the saved input and the output gradient, write the input gradient
        if (core == 1) core_forward_s += t;
      }
    }
    if (fused && bp.fused_attention_flops_per_sample > 0) {
      const AttentionTime attention =
          fused_attention_time_s(bp.fused_attention_flops_per_sample * b / (cp * tp), unfused_attention_gemms_s, rates);
      c.forward_compute_s += attention.forward_s;
      c.backward_compute_s += attention.backward_s;
      core_forward_s += attention.forward_s;
    }
    // Launch floor: the host issues each kernel (one per op forward, two backward).
    c.forward_compute_s = launch_floor_s(c.forward_compute_s, bp.forward_kernels[a], rates);
    c.backward_compute_s = launch_floor_s(c.backward_compute_s, 2 * bp.forward_kernels[a], rates);
    // Tensor-parallel all-reduces (reduce-scatter + all-gather under sequence parallelism: the same volume).
    auto tp_time = [&](double elements, int collectives) {
      if (collectives == 0) return 0.0;
      const double each = elements * b / cp * act / collectives;
      return collectives * cost(Collective::all_reduce, each, tp_link);
    };
    // Forward reductions sit on the critical path. Backward ones (input
    // gradients of column-parallel GEMMs), and sequence parallelism's extra
    // all-gathers of the sharded GEMM inputs (Korthikanti et al. 2022, Sec.
    // 4.2.2), can run under the weight-gradient GEMMs when the plan says so.
    c.tp_forward_s = tp_time(bp.tp_forward_reduce_elements, bp.tp_forward_collectives);
    double backward_tp_s = tp_time(bp.tp_backward_reduce_elements, bp.tp_backward_collectives);
    if (sp && bp.tp_backward_collectives > 0) {
      const double each = bp.tp_backward_reduce_elements * b / cp * act / bp.tp_backward_collectives;
      backward_tp_s += bp.tp_backward_collectives * cost(Collective::all_gather, each, tp_link);
    }
    c.tp_backward_total_s = backward_tp_s;
    c.tp_backward_s = plan.overlap_tensor_parallel && tp_link.overlaps_compute
                          ? std::max(0.0, backward_tp_s - c.weight_gradient_s)
                          : backward_tp_s;
    // Selective recompute drops the s x s tensors; fused attention keeps none to drop.
    if (plan.recompute == Recompute::selective && !fused) c.backward_compute_s += core_forward_s;
    if (plan.recompute == Recompute::full && prof.kind_role[k] == BlockKind::layer) {
      c.backward_compute_s += c.forward_compute_s;
      c.tp_backward_s += c.tp_forward_s;  // the recomputed forward communicates again
      c.tp_backward_total_s += c.tp_forward_s;
    }
    // Context parallelism: ring attention passes key/value chunks around the cp ring,
    // overlapped with the attention of the chunk in hand (Liu et al. 2023).
    if (cp > 1 && core_forward_s > 0) {
      const double chunk_bytes = 2 * (seq * b / cp) * static_cast<double>(prof.kv_width) / tp * act;
      const double forward_ring = (cp - 1) * cost(Collective::send_recv, chunk_bytes, cp_link);
      c.cp_s = 3 * forward_ring;  // backward moves key/value and their gradients
      const double hidden = cp_link.overlaps_compute ? core_forward_s : 0.0;
      c.cp_forward_exposed_s = std::max(0.0, forward_ring - hidden);
      c.cp_backward_exposed_s = std::max(0.0, 2 * forward_ring - 2 * hidden);
    }
    // Expert parallelism: dispatch and combine all-to-all, forward and backward (Lepikhin et al. 2021).
    if (ep > 1 && bp.expert_tp_split_parameters > 0) {
      const double routed_bytes = (seq * b / cp) * static_cast<double>(prof.top_k * prof.hidden) * act;
      c.ep_s = 4 * cost(Collective::all_to_all, routed_bytes, ep_link);
    }
  }

  return kind_cost;
}

PlanEstimate Evaluator::evaluate(const Plan& plan, const std::vector<AxisPlacement>& placements,
                                 std::vector<StageMemory>* stages) const {
  return evaluate(plan, placements, block_costs(plan, placements), stages);
}

PlanEstimate Evaluator::evaluate(const Plan& plan, const std::vector<AxisPlacement>& placements,
                                 const std::vector<BlockCost>& kind_cost, std::vector<StageMemory>* stages) const {
  PlanEstimate estimate;
  const ModelProfile& prof = profile_;
  const Mesh& mesh = plan.mesh;
  const PlanScalars plan_scalars(plan, placements, prof);
  const PrecisionBytes& bytes = plan_scalars.bytes;
  const ComputeRates& rates = rates_[static_cast<std::size_t>(plan.precision)];
  const double act = plan_scalars.act, tp = plan_scalars.tp, cp = plan_scalars.cp, ep = plan_scalars.ep, dp = plan_scalars.dp, fsdp = plan_scalars.fsdp, b = plan_scalars.b, seq = plan_scalars.seq;
  const bool sp = plan_scalars.sp;
  const Link& tp_link = plan_scalars.links.of(Axis::tp);
  const Link& pp_link = plan_scalars.links.of(Axis::pp);
  const Link& ep_link = plan_scalars.links.of(Axis::ep);
  const Link& dp_link = plan_scalars.links.of(Axis::dp);
  const Link& fsdp_link = plan_scalars.links.of(Axis::fsdp);
  const std::int64_t pp = prof.kind == ModelKind::cnn ? 1 : mesh.size(Axis::pp);
  const std::int64_t v = plan.schedule.virtual_stages;
  const std::int64_t m = std::max<std::int64_t>(plan.micro_batches(), 1);

  // ---- stage partition: chunk c holds layers [start, start + size) and runs on stage c mod pp
  const std::int64_t layers = static_cast<std::int64_t>(prof.layer_blocks.size());
  const std::int64_t chunks = pp * v;
  struct StageSum {
    double dense = 0, expert = 0, largest_block = 0;
    double chunk_activation_bytes = 0, largest_layer_bytes = 0, gradient_elements = 0, loss_logits = 0;
    double forward_s = 0, backward_s = 0, weight_gradient_s = 0, compute_s = 0;
    double tp_s = 0, tp_exposed_s = 0, cp_s = 0, cp_exposed_s = 0, ep_s = 0;
    std::int64_t layers = 0;
    double blocks_with_parameters = 0;
    // Filled below, per stage.
    double gradient_bytes = 0, parameter_bytes = 0, optimizer_parameters = 0, fsdp_s = 0, fsdp_exposed_s = 0;
  };
  // Reused across calls on this thread: the search evaluates millions of plans.
  thread_local std::vector<StageSum> sum;
  sum.assign(static_cast<std::size_t>(pp), StageSum{});
  // Adds `count` blocks of one kind to a stage.
  auto add_block = [&](StageSum& s, int block, bool in_chunk, double count) {
    const BlockCost& c = kind_cost[static_cast<std::size_t>(prof.block_kind[static_cast<std::size_t>(block)])];
    s.dense += count * c.dense_parameters;
    s.expert += count * c.expert_parameters;
    s.largest_block = std::max(s.largest_block, c.dense_parameters + c.expert_parameters);
    if (c.dense_parameters + c.expert_parameters > 0) s.blocks_with_parameters += count;
    s.gradient_elements = std::max(s.gradient_elements, c.gradient_elements);
    s.loss_logits += c.loss_logits;
    if (in_chunk) {
      s.chunk_activation_bytes += count * (plan.recompute == Recompute::full ? c.input_bytes : c.activation_bytes);
      s.largest_layer_bytes = std::max(s.largest_layer_bytes, c.full_activation_bytes);
      s.layers += static_cast<std::int64_t>(count);
    }
    s.forward_s += count * (c.forward_compute_s + c.tp_forward_s + c.cp_forward_exposed_s + c.ep_s / 2);
    s.backward_s += count * (c.backward_compute_s + c.tp_backward_s + c.cp_backward_exposed_s + c.ep_s / 2);
    s.weight_gradient_s += count * c.weight_gradient_s;
    s.compute_s += count * (c.forward_compute_s + c.backward_compute_s);
    s.tp_s += count * (c.tp_forward_s + c.tp_backward_total_s);
    s.tp_exposed_s += count * (c.tp_forward_s + c.tp_backward_s);
    s.cp_s += count * c.cp_s;
    s.cp_exposed_s += count * (c.cp_forward_exposed_s + c.cp_backward_exposed_s);
    s.ep_s += count * c.ep_s;
  };
  std::int64_t next_layer = 0;
  for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
    const std::int64_t size = plan.stage_layers.empty() ? layers / chunks : plan.stage_layers[static_cast<std::size_t>(chunk)];
    StageSum& s = sum[static_cast<std::size_t>(chunk % pp)];
    if (prof.uniform_layer_kind >= 0) {  // every layer alike: add them all at once
      const std::int64_t n = std::min(size, layers - next_layer);
      if (n > 0) add_block(s, prof.layer_blocks[static_cast<std::size_t>(next_layer)], true, static_cast<double>(n));
      next_layer += n;
      continue;
    }
    for (std::int64_t i = 0; i < size && next_layer < layers; ++i, ++next_layer) {
      add_block(s, prof.layer_blocks[static_cast<std::size_t>(next_layer)], true, 1);
    }
  }
  if (prof.embedding_block >= 0) add_block(sum.front(), prof.embedding_block, false, 1);
  if (prof.head_block >= 0) add_block(sum.back(), prof.head_block, false, 1);

  // ---- memory per stage (the same rules as memory_model.cpp)
  auto dense_group = [&](int needed) { return fsdp * (plan.zero_stage >= needed ? dp * ep : 1.0); };
  auto expert_group = [&](int needed) { return fsdp * (plan.zero_stage >= needed ? dp : 1.0); };
  const double boundary_bytes = prof.residual_elements_per_sample * b * act / (cp * (sp ? tp : 1.0));
  // Pipeline sends: Megatron-LM's scatter/gather optimisation (Narayanan et al.
  // 2021, Sec. 4.1) sends 1/t of the activation from each tp rank and
  // all-gathers it inside the receiving node; with sequence parallelism the
  // activation is already split.
  const double p2p_bytes = prof.kind == ModelKind::transformer && tp > 1 && !sp ? boundary_bytes / tp : boundary_bytes;
  const double p2p_gather_s =
      prof.kind == ModelKind::transformer && tp > 1 && !sp ? cost(Collective::all_gather, boundary_bytes, tp_link) : 0;
  double worst_total = -1;
  if (stages) stages->clear();
  for (std::int64_t r = 0; r < pp; ++r) {
    StageSum& s = sum[static_cast<std::size_t>(r)];
    if (r > 0 && prof.head_block >= 0 && r == pp - 1) {
      // Megatron keeps a copy of a tied embedding on the last stage for the output layer.
      const BlockCost& head = kind_cost[static_cast<std::size_t>(prof.block_kind[static_cast<std::size_t>(prof.head_block)])];
      s.dense += head.tied_parameters;
      s.largest_block = std::max(s.largest_block, head.dense_parameters + head.expert_parameters + head.tied_parameters);
      if (head.dense_parameters + head.expert_parameters == 0 && head.tied_parameters > 0) s.blocks_with_parameters += 1;
    }
    StageMemory sm;
    sm.stage = r;
    sm.layers = s.layers;
    sm.parameters_on_device = s.dense / dense_group(3) + s.expert / expert_group(3);
    MemoryBreakdown& mem = sm.memory;
    mem.parameters_bytes = sm.parameters_on_device * bytes.weight_bytes_per_parameter;
    mem.gradients_bytes = (s.dense / dense_group(2) + s.expert / expert_group(2)) * bytes.gradient_bytes_per_parameter;
    s.optimizer_parameters = s.dense / dense_group(1) + s.expert / expert_group(1);
    mem.optimizer_bytes = s.optimizer_parameters * bytes.optimizer_bytes_per_parameter;
    s.gradient_bytes = (s.dense + s.expert) * bytes.gradient_bytes_per_parameter;
    s.parameter_bytes = (s.dense + s.expert) * bytes.weight_bytes_per_parameter;

    const double in_flight = in_flight_chunk_micro_batches(plan.schedule, pp, r, plan.micro_batches());
    const double chunks_here = static_cast<double>(v);
    double activations = s.chunk_activation_bytes / chunks_here * in_flight;
    if (plan.recompute == Recompute::full) activations += s.largest_layer_bytes;
    sm.in_flight_micro_batches = in_flight / chunks_here;
    const double m_at_least_one = static_cast<double>(m);
    const bool pipelined = pp > 1;
    if (r == 0 && prof.embedding_block >= 0) {
      const double embedding_in_flight = !pipelined ? 1
                                         : plan.schedule.kind == ScheduleKind::gpipe
                                             ? m_at_least_one
                                             : std::min(static_cast<double>(pp), m_at_least_one);
      activations += embedding_in_flight * kind_cost[static_cast<std::size_t>(prof.block_kind[static_cast<std::size_t>(prof.embedding_block)])].activation_bytes;
    }
    if (r == pp - 1 && prof.head_block >= 0) {
      const double head_in_flight = pipelined && plan.schedule.kind == ScheduleKind::gpipe ? m_at_least_one : 1;
      activations += head_in_flight * kind_cost[static_cast<std::size_t>(prof.block_kind[static_cast<std::size_t>(prof.head_block)])].activation_bytes;
    }
    mem.activations_bytes = activations;

    double buffers = 0;
    if (dense_group(3) > 1 || expert_group(3) > 1) {
      const double gathered = s.blocks_with_parameters > 1 ? 2 : 1;  // the running block and the prefetched next one
      buffers += s.largest_block * (gathered * bytes.weight_bytes_per_parameter + bytes.gradient_bytes_per_parameter);
    }
    if (dp * ep > 1 && plan.zero_stage < 3) {
      buffers += std::min(2 * plan.gradient_bucket_bytes, s.gradient_bytes);
    }
    if (pp > 1) buffers += 4 * boundary_bytes;
    if (prof.kind == ModelKind::transformer) {
      const double tokens = seq * b / cp;
      if (tp > 1 && sp) buffers += tokens * static_cast<double>(prof.hidden) * act;
      if (cp > 1) buffers += 2 * 2 * tokens * static_cast<double>(prof.kv_width) / tp * act;
      if (ep > 1) buffers += 2 * tokens * static_cast<double>(prof.top_k * prof.hidden) * act;
    }
    mem.buffers_bytes = buffers;
    add_peak_memory(mem, s.loss_logits, s.layers > 0 ? s.gradient_elements : 0.0, act, cluster_.device);
    if (mem.total_bytes() > worst_total) {
      worst_total = mem.total_bytes();
      estimate.worst_stage = r;
      estimate.worst_memory = mem;
      estimate.parameters_on_device = sm.parameters_on_device;
    }
    if (stages) stages->push_back(sm);
  }
  estimate.capacity_bytes = cluster_.device.memory_bytes;
  estimate.usable_bytes = cluster_.device.memory_bytes * (1.0 - plan.memory_headroom);
  estimate.fits = worst_total <= estimate.usable_bytes;

  // ---- time
  TimeEstimate& time = estimate.time;
  const Link fsdp_group = plan.zero_stage >= 3 ? combine({fsdp_link, dp_link, ep_link}) : fsdp_link;
  const bool sharded_weights = fsdp_group.size > 1;
  const double p2p_s =
      pp > 1 ? static_cast<double>(v) * (cost(Collective::send_recv, p2p_bytes, pp_link) + p2p_gather_s) : 0;
  thread_local std::vector<double> stage_s;
  stage_s.assign(static_cast<std::size_t>(pp), 0.0);
  for (std::int64_t r = 0; r < pp; ++r) {
    StageSum& s = sum[static_cast<std::size_t>(r)];
    s.forward_s += p2p_s;
    s.backward_s += p2p_s;
    if (sharded_weights) {
      // Per micro-batch: gather weights for the forward and again for the backward, reduce-scatter gradients.
      const double gather = cost(Collective::all_gather, s.parameter_bytes, fsdp_group);
      const double scatter = cost(Collective::reduce_scatter, s.gradient_bytes, fsdp_group);
      const double blocks = std::max<double>(1, static_cast<double>(s.layers));
      // The first block's share cannot hide; the rest hides under the compute.
      auto exposed = [&](double comm, double compute) {
        return plan.overlap_parameter_gather && fsdp_group.overlaps_compute
                   ? comm / blocks + std::max(0.0, comm * (1 - 1 / blocks) - compute)
                   : comm;
      };
      const double forward_exposed = exposed(gather, s.forward_s);
      const double backward_exposed = exposed(gather + scatter, s.backward_s);
      s.fsdp_s = 2 * gather + scatter;
      s.fsdp_exposed_s = forward_exposed + backward_exposed;
      s.forward_s += forward_exposed;
      s.backward_s += backward_exposed;
    }
    stage_s[static_cast<std::size_t>(r)] = s.forward_s + s.backward_s;
  }
  std::size_t slowest = 0;
  for (std::size_t r = 1; r < stage_s.size(); ++r) {
    if (stage_s[r] > stage_s[slowest]) slowest = r;
  }
  const StageSum& slow = sum[slowest];
  const PipelineTiming pipeline = pipeline_timing(stage_s, m, plan.schedule, slow.weight_gradient_s);
  const double pipeline_s = pipeline.step_s;
  time.bubble_s = pipeline.bubble_s;

  // Data-parallel gradient reduction after the last micro-batch, overlapping its backward in buckets.
  double dp_s = 0, dp_exposed = 0, gather_after_step_s = 0, optimizer_s = 0;
  const Link dp_group = combine({dp_link, ep_link});
  for (std::int64_t r = 0; r < pp; ++r) {
    const StageSum& s = sum[static_cast<std::size_t>(r)];
    double reduce = 0, gather = 0;
    if (dp_group.size > 1 && plan.zero_stage < 3) {
      const double local_gradients = s.gradient_bytes / fsdp;  // HSDP: fsdp already reduce-scattered
      reduce = plan.zero_stage == 0 ? cost(Collective::all_reduce, local_gradients, dp_group)
                                    : cost(Collective::reduce_scatter, local_gradients, dp_group);
      if (plan.zero_stage >= 1) gather = cost(Collective::all_gather, s.parameter_bytes / fsdp, dp_group);
      const double last_bucket = local_gradients > 0 ? reduce * std::min(1.0, plan.gradient_bucket_bytes / local_gradients) : 0;
      const double exposed = plan.overlap_gradient_reduction && dp_group.overlaps_compute
                                 ? std::max(reduce - s.backward_s, last_bucket)
                                 : reduce;
      if (exposed > dp_exposed) dp_exposed = exposed;
      if (r == static_cast<std::int64_t>(slowest)) dp_s = reduce + gather;
    }
    // Adam: read and write master weights and both moments, read gradients, write the working weights.
    const double optimizer_traffic = s.optimizer_parameters * (2 * bytes.optimizer_bytes_per_parameter +
                                                                bytes.gradient_bytes_per_parameter +
                                                                bytes.weight_bytes_per_parameter);
    optimizer_s = std::max(optimizer_s, stream_time_s(optimizer_traffic, rates, StreamOp::optimizer));
    gather_after_step_s = std::max(gather_after_step_s, gather);
  }
  time.optimizer_s = optimizer_s;
  time.step_s = pipeline_s + dp_exposed + gather_after_step_s + optimizer_s;

  const double md = static_cast<double>(m);
  time.compute_s = md * slow.compute_s;  // the optimizer is reported on its own
  const std::size_t fsdp_axis = plan.zero_stage >= 3 && fsdp == 1 ? static_cast<std::size_t>(Axis::dp) : static_cast<std::size_t>(Axis::fsdp);
  time.axis_communication_s[static_cast<std::size_t>(Axis::tp)] = md * slow.tp_s;
  time.axis_exposed_s[static_cast<std::size_t>(Axis::tp)] = md * slow.tp_exposed_s;
  time.axis_communication_s[static_cast<std::size_t>(Axis::pp)] = md * 2 * p2p_s;
  time.axis_exposed_s[static_cast<std::size_t>(Axis::pp)] = md * 2 * p2p_s;
  time.axis_communication_s[static_cast<std::size_t>(Axis::cp)] = md * slow.cp_s;
  time.axis_exposed_s[static_cast<std::size_t>(Axis::cp)] = md * slow.cp_exposed_s;
  time.axis_communication_s[static_cast<std::size_t>(Axis::ep)] = md * slow.ep_s;
  time.axis_exposed_s[static_cast<std::size_t>(Axis::ep)] = md * slow.ep_s;
  time.axis_communication_s[fsdp_axis] += md * sum[slowest].fsdp_s;
  time.axis_exposed_s[fsdp_axis] += md * sum[slowest].fsdp_exposed_s;
  time.axis_communication_s[static_cast<std::size_t>(Axis::dp)] += dp_s;
  time.axis_exposed_s[static_cast<std::size_t>(Axis::dp)] += dp_exposed + gather_after_step_s;
  for (std::size_t a = 0; a < 6; ++a) {
    time.communication_s += time.axis_communication_s[a];
    time.communication_exposed_s += time.axis_exposed_s[a];
  }
  time.stage_forward_s = slow.forward_s;
  time.stage_backward_s = slow.backward_s;
  time.stage_weight_gradient_s = slow.weight_gradient_s;

  const double global = static_cast<double>(plan.global_batch);
  time.model_flops_per_step = prof.model_flops_per_sample * global;
  double recompute_flops_per_sample = 0;
  for (std::size_t block = 0; block < prof.block_kind.size(); ++block) {
    if (prof.block_role[block] != BlockKind::layer) continue;
    const BlockProfile& bp = prof.kinds[static_cast<std::size_t>(prof.block_kind[block])];
    const bool fused = plan.attention == Attention::fused;
    if (plan.recompute == Recompute::selective && !fused) recompute_flops_per_sample += bp.core_attention_flops_per_sample;
    if (fused) recompute_flops_per_sample += bp.attention_scores_flops_per_sample;  // the backward recomputes Q K^T
    if (plan.recompute == Recompute::full) recompute_flops_per_sample += bp.matmul_forward_flops_per_sample;
  }
  time.hardware_flops_per_step = time.model_flops_per_step + recompute_flops_per_sample * global;
  const double world_peak = static_cast<double>(mesh.world_size()) * rates.peak_flops_per_s;
  if (time.step_s > 0) {
    time.tokens_per_s = global * seq / time.step_s;
    if (world_peak > 0) {
      time.mfu = time.model_flops_per_step / (time.step_s * world_peak);
      time.hfu = time.hardware_flops_per_step / (time.step_s * world_peak);
    }
  }
  return estimate;
}

}  // namespace meshplan
