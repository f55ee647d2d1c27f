// The fast evaluator (evaluate.hpp) in four named phases: the cost record of
// one block of each kind (block_costs, cached by the search), the fold of
// those records over each pipeline stage (StageSum), each stage's memory, and
// the step time (pipeline, data-parallel reduction, optimizer) with its
// accounting per axis. Local shapes, splits and the pipeline transfer come
// from stage_cost.hpp, the rules the simulator and the studio read too.
#include "model/evaluate.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "model/collectives.hpp"
#include "model/model_states.hpp"
#include "model/pipeline_time.hpp"
#include "model/schedule.hpp"
#include "model/sharded_replay.hpp"
#include "model/stage_partition.hpp"

namespace meshplan {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Link {
  double bandwidth_bytes_per_s = kInf;
  double latency_s = 0;
  std::int64_t size = 1;
  bool overlaps_compute = true;  // AxisPlacement::overlaps_compute: false hides nothing
  double all_to_all_bandwidth_bytes_per_s = kInf;  // AxisPlacement's: an all-to-all cannot aggregate NICs
};

double cost(Collective collective, double bytes, const Link& link) {
  if (link.size <= 1 || bytes <= 0) return 0;
  const double bandwidth =
      collective == Collective::all_to_all ? link.all_to_all_bandwidth_bytes_per_s : link.bandwidth_bytes_per_s;
  return collective_time(collective, bytes, link.size, bandwidth, link.latency_s).time_s;
}

struct Links {
  Link by_axis[6];
  explicit Links(const std::vector<AxisPlacement>& placements) {
    for (const auto& p : placements)
      by_axis[static_cast<int>(p.axis)] = {p.bandwidth_bytes_per_s, p.latency_s, p.size, p.overlaps_compute,
                                           p.all_to_all_bandwidth_bytes_per_s};
  }
  const Link& of(Axis axis) const { return by_axis[static_cast<int>(axis)]; }
};

// The plan's sizes and byte widths both halves of the evaluation read.
struct PlanScalars {
  PrecisionBytes bytes;
  double act, tp, cp, ep, dp, fsdp, b, seq;
  std::int64_t kv_heads;
  double kv_tp;  // ways tp splits the key/value heads (kv_tp_split)
  bool sp;
  ActivationSplit split;
  ExpertSplit experts;
  Links links;
  Link expert_ep_link;  // the routed experts' all-to-all group (expert_mesh's ep; block_costs sets it)
  PlanScalars(const Plan& plan, const std::vector<AxisPlacement>& placements, const ModelProfile& prof)
      : bytes(bytes_for(plan)),
        act(bytes.activation_bytes_per_element),
        tp(static_cast<double>(plan.mesh.size(Axis::tp))),
        cp(static_cast<double>(plan.mesh.size(Axis::cp))),
        ep(static_cast<double>(plan.mesh.size(Axis::ep))),
        dp(static_cast<double>(plan.mesh.size(Axis::dp))),
        fsdp(static_cast<double>(plan.mesh.size(Axis::fsdp))),
        b(static_cast<double>(plan.micro_batch)),
        seq(static_cast<double>(prof.seq_len)),
        kv_heads(prof.kv_heads),
        kv_tp(static_cast<double>(kv_tp_split(prof.kv_heads, plan.mesh.size(Axis::tp)))),
        sp(plan.sequence_parallel),
        split(activation_split(plan)),
        experts(expert_split(plan)),
        links(placements),
        expert_ep_link(links.of(Axis::ep)) {}
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

// ---- phase 1: the record of one block of one kind

// Parameters, saved activations and the backward's peak transients.
void block_memory(BlockCost& c, const BlockProfile& bp, BlockKind role, const ModelProfile& prof, const Plan& plan,
                  const PlanScalars& ps) {
  const double b = ps.b, act = ps.act;
  const ActivationSplit& split = ps.split;
  c.dense_parameters = bp.tp_split_parameters / ps.tp + bp.kv_parameters / ps.kv_tp + bp.replicated_parameters;
  c.expert_parameters = (bp.expert_tp_split_parameters / static_cast<double>(ps.experts.tp) + bp.expert_replicated_parameters) /
                        static_cast<double>(ps.experts.ep);
  c.tied_parameters = bp.tied_parameters / ps.tp;
  const std::size_t a = attention_index(plan.attention);
  // Bytes on this device of tensors in one region (1: tensor-parallel), `key_value` of their elements keys and values.
  auto region_bytes = [&](int region, double elements, double fixed_bytes, double key_value) {
    double bytes = (elements * act + fixed_bytes) * b / split.of(region == 1);
    // Keys and values split over cp x kv_tp, not cp x tp: add back what tp > kv_tp took off.
    if (region == 1 && ps.kv_tp != ps.tp) bytes += key_value * act * b * (1 / (ps.cp * ps.kv_tp) - 1 / split.of(true));
    return bytes;
  };
  for (int region = 0; region < 2; ++region) {
    for (std::size_t m = 0; m < kRecomputeModules; ++m) {
      const double saved = region_bytes(region, bp.saved_elements[a][region][m], bp.saved_fixed_bytes[a][region][m],
                                        bp.saved_key_value_elements[a][m]);
      c.full_activation_bytes += saved;
      if (!recomputes(plan, static_cast<RecomputeModule>(m))) c.activation_bytes += saved;
    }
  }
  c.input_bytes = bp.input_elements_per_sample * act * b / split.sequence;
  if (plan.recompute == Recompute::selective_op && role == BlockKind::layer) {
    // Op-level checkpointing keeps the input and what its ops keep (memory_model.cpp, block_op_sac_bytes).
    c.activation_bytes = c.input_bytes;
    for (int region = 0; region < 2; ++region) {
      c.activation_bytes += region_bytes(region, bp.op_sac_elements[a][region], bp.op_sac_fixed_bytes[a][region],
                                         bp.op_sac_key_value_elements[a]);
    }
    if (tp_reduce_scatters(plan.mesh.size(Axis::tp), ps.sp)) {
      c.activation_bytes += (bp.op_sac_reduce_scatter_elements[a][0] / split.sequence +
                             bp.op_sac_reduce_scatter_elements[a][1] / ps.cp) * act * b;
    }
  }
  // Peak transients (memory_model.cpp, add_peak_memory; the same rules).
  if (role == BlockKind::layer) {
    c.gradient_elements = b * (prof.residual_elements_per_sample / split.sequence +
                               std::max(bp.largest_output_elements[a][0] / split.sequence, bp.largest_output_elements[a][1] / split.tensor_parallel));
  }
  c.loss_logits = b * (bp.loss_logit_elements[0] / split.sequence + bp.loss_logit_elements[1] / split.tensor_parallel);
  if (plan.loss == Loss::fused && c.loss_logits > 0) {
    // The profile keeps the eager loss's fp32 log-probabilities (memory_model.cpp, tensor_bytes_per_sample).
    const double saving = c.loss_logits * (bp.loss_logit_eager_bytes - act);
    c.activation_bytes -= saving;
    c.full_activation_bytes -= saving;
  }
}

double& part(BlockCost& c, ComputePart p) { return c.compute_parts_s[static_cast<std::size_t>(p)]; }

// The forward seconds of each recompute module's ops but core attention's
// (RecomputeModule; what selective recompute of it repeats).
using ModuleSeconds = std::array<double, kRecomputeModules>;

// One fp8 GEMM's casts (fp8_cast_bytes), added to the record: memory-bound,
// streamed at the device's copy bandwidth; 2 kernels forward (input and
// weight), 1 backward (output gradient).
struct Fp8CastSeconds {
  double forward_s = 0, backward_s = 0;
};
Fp8CastSeconds add_fp8_casts(BlockCost& c, const LocalGemm& gemm, double act, const ComputeRates& rates,
                             double (&kernels)[2]) {
  const Fp8CastBytes bytes = fp8_cast_bytes(gemm, act);
  const Fp8CastSeconds cast{memory_time_s(bytes.forward, rates), memory_time_s(bytes.backward, rates)};
  c.fp8_cast_bytes.forward += bytes.forward;
  c.fp8_cast_bytes.backward += bytes.backward;
  c.fp8_cast_forward_s += cast.forward_s;
  c.fp8_cast_backward_s += cast.backward_s;
  part(c, ComputePart::fp8_cast_forward) += cast.forward_s;
  part(c, ComputePart::fp8_cast_backward) += cast.backward_s;
  kernels[0] += 2;
  kernels[1] += 1;
  return cast;
}

// The rates of a plan's GEMMs: at the plan's precision, and where an fp8 plan
// keeps a GEMM in bf16 (gemm_in_fp8), at bf16's.
struct GemmRates {
  const ComputeRates& plan;
  const ComputeRates& high_precision;
};

// Whether a block's tp collectives run in chunks beside its GEMMs: Transformer
// Engine's overlap (Plan::tp_comm_overlap) on a link that can overlap
// compute, in the layers (tp_overlap_exposed says what stays exposed).
bool chunks_tp(const Plan& plan, const PlanScalars& ps, BlockKind role) {
  return role == BlockKind::layer && tp_comm_overlap_applies(plan) && ps.links.of(Axis::tp).overlaps_compute;
}
// The GEMMs that overlap pairs with a collective: a dense layer's weight GEMMs split over tp by rows or
// columns (TE's linear layers; routed experts' grouped GEMMs are not among them).
bool pairs_with_tp_collective(const GemmWork& g) {
  return g.has_weights && !g.expert && (g.tp_split == TpSplit::rows || g.tp_split == TpSplit::columns);
}
// Bytes one device's tp collective moves for `elements` per sample of the micro-batch, over cp.
double tp_collective_bytes(double elements_per_sample, const PlanScalars& ps) {
  return elements_per_sample * ps.b / ps.cp * ps.act;
}

// GEMMs, memory-bound passes, fused attention and the launch floor; returns
// the forward seconds of core attention (what selective recompute repeats and
// ring attention hides under), and the other modules' in `modules`.
double block_compute(BlockCost& c, const BlockProfile& bp, BlockKind role, const Plan& plan, const PlanScalars& ps,
                     const GemmRates& gemm_rates, ModuleSeconds& modules) {
  const ComputeRates& rates = gemm_rates.plan;
  const double b = ps.b, act = ps.act;
  const std::size_t a = attention_index(plan.attention);
  const bool fused = plan.attention == Attention::fused;
  double core_forward_s = 0;
  double unfused_attention_gemms_s = 0;  // fused attention's fallback price
  double cast_kernels[2] = {0, 0};       // [forward, backward] kernels of the fp8 casts
  double chunk_kernels[2] = {0, 0};      // and of the tp overlap's chunked GEMMs beyond one each
  const bool chunked = chunks_tp(plan, ps, role);
  c.gemms.reserve(bp.gemms.size());
  for (const GemmWork& g : bp.gemms) {
    GemmCost& gc = c.gemms.emplace_back();
    gc.shape = local_gemm(g, plan, ps.kv_heads);
    gc.core_attention = g.core_attention;
    gc.has_weights = g.has_weights;
    const LocalGemm& s = gc.shape;
    const bool fp8 = gemm_in_fp8(plan, role, g);
    const ComputeRates& r = fp8 ? rates : gemm_rates.high_precision;
    const double element_bytes = gc.element_bytes = fp8 ? 1.0 : act;
    // Under the chunked tp overlap a pipelined pair's GEMM runs as tp GEMMs of rows / tp: a column
    // GEMM's forward and a row GEMM's forward and input gradient (docs/cost-model.md).
    const bool dense_split = chunked && pairs_with_tp_collective(g);
    const double forward_chunks = dense_split ? ps.tp : 1;
    const double gradient_chunks = dense_split && g.tp_split == TpSplit::rows ? ps.tp : 1;
    gc.forward_s = forward_chunks * gemm_time_s(s.rows / forward_chunks, s.n, s.k, s.batch, element_bytes, r);
    if (fused && g.core_attention) {  // priced as one fused kernel below
      gc.fused_away = true;
      unfused_attention_gemms_s += gc.forward_s;
      continue;
    }
    gc.input_gradient_s =
        g.needs_input_gradient
            ? gradient_chunks * gemm_time_s(s.rows / gradient_chunks, s.k, s.n, s.batch, element_bytes, r)
            : 0.0;
    chunk_kernels[0] += forward_chunks - 1;
    chunk_kernels[1] += g.needs_input_gradient ? gradient_chunks - 1 : 0;
    gc.weight_gradient_s = gemm_time_s(s.k, s.n, s.rows, s.batch, element_bytes, r);
    const Fp8CastSeconds cast = fp8 ? add_fp8_casts(c, s, act, rates, cast_kernels) : Fp8CastSeconds{};
    const double forward_s = gc.forward_s + cast.forward_s;
    const double backward_s = gc.input_gradient_s + gc.weight_gradient_s + cast.backward_s;
    c.forward_compute_s += forward_s;
    c.op_sac_recompute_s += forward_s * g.op_sac_recomputed;
    c.backward_compute_s += backward_s;
    part(c, g.core_attention ? ComputePart::attention_forward : ComputePart::matmul_forward) += gc.forward_s;
    part(c, g.core_attention ? ComputePart::attention_backward : ComputePart::matmul_backward) +=
        gc.input_gradient_s + gc.weight_gradient_s;
    if (g.has_weights) c.weight_gradient_s += gc.weight_gradient_s;
    if (g.core_attention) core_forward_s += gc.forward_s;
    if (g.expert) {
      c.experts_forward_s += forward_s;
      c.experts_backward_s += backward_s;
    }
    modules[static_cast<std::size_t>(g.module)] += forward_s;
  }
  // A memory-bound pass's bytes on this device: its elements at the activation dtype and its fixed-
  // width bytes, per sample, over the split of its region (1: tensor-parallel).
  auto pass_bytes = [&](double elements, double fixed_bytes, int region) {
    return memory_pass_bytes(elements, fixed_bytes, act, b, ps.split, region == 1);
  };
  // The forward seconds of module m's memory-bound passes.
  auto module_passes_s = [&](std::size_t m) {
    double seconds = 0;
    for (int region = 0; region < 2; ++region) {
      for (std::size_t cls = 0; cls < kStreamOps; ++cls) {
        const double bytes = pass_bytes(bp.module_memory_elements[m][region][cls], bp.module_memory_fixed_bytes[m][region][cls], region);
        if (bytes > 0) seconds += stream_time_s(bytes, rates, static_cast<StreamOp>(cls));
      }
    }
    return seconds;
  };
  // The experts' activation (the moe_act module's passes): forward, its gradient, and its repeat under moe_act
  // recompute. Only blocks with routed experts have one (the search prices millions of dense blocks).
  if (bp.expert_tp_split_parameters > 0) {
    const double experts_activation_s = module_passes_s(static_cast<std::size_t>(RecomputeModule::moe_act));
    c.experts_forward_s += experts_activation_s;
    c.experts_backward_s += (recomputes(plan, RecomputeModule::moe_act) ? 3 : 2) * experts_activation_s;
  }
  if (plan.recompute == Recompute::selective) {  // the memory-bound passes a module repeats (of the plan's modules)
    for (std::size_t m = static_cast<std::size_t>(RecomputeModule::layernorm); m < kRecomputeModules; ++m) {
      if (recomputes(plan, static_cast<RecomputeModule>(m))) modules[m] += module_passes_s(m);
    }
  }
  for (int region = 0; region < 2; ++region) {
    for (int core = 0; core < (fused ? 1 : 2); ++core) {  // fused attention has no softmax / dropout passes of its own
      double t = 0;
      for (std::size_t cls = 0; cls < kStreamOps; ++cls) {
        const double bytes = pass_bytes(bp.memory_elements[region][core][cls], bp.memory_fixed_bytes[region][core][cls], region);
        if (bytes > 0) {
          const double seconds = stream_time_s(bytes, rates, static_cast<StreamOp>(cls));
          c.stream_bytes[cls] += bytes;
          c.stream_s[cls] += seconds;
          t += seconds;
        }
      }
      c.forward_compute_s += t;
      c.op_sac_recompute_s += t;  // no memory-bound op is on torchtitan's save list
      c.backward_compute_s += 2 * t;  // gradients read the saved input and the output gradient, write the input gradient
      part(c, core == 1 ? ComputePart::attention_forward : ComputePart::memory_bound_forward) += t;
      part(c, core == 1 ? ComputePart::attention_backward : ComputePart::memory_bound_backward) += 2 * t;
      if (core == 1) core_forward_s += t;
    }
  }
  if (fused && bp.fused_attention_flops_per_sample > 0) {
    const AttentionTime attention =
        fused_attention_time_s(bp.fused_attention_flops_per_sample * b / ps.split.tensor_parallel, unfused_attention_gemms_s, rates,
                               bp.attention_dropout);
    c.forward_compute_s += attention.forward_s;
    c.backward_compute_s += attention.backward_s;
    part(c, ComputePart::attention_forward) += attention.forward_s;
    part(c, ComputePart::attention_backward) += attention.backward_s;
    core_forward_s += attention.forward_s;
  }
  // Launch floor: the host issues each kernel (one per op forward, two backward).
  const double kernels_s = c.forward_compute_s + c.backward_compute_s;
  c.forward_compute_s = launch_floor_s(c.forward_compute_s, bp.forward_kernels[a] + cast_kernels[0] + chunk_kernels[0], rates);
  c.backward_compute_s =
      launch_floor_s(c.backward_compute_s, 2 * bp.forward_kernels[a] + cast_kernels[1] + chunk_kernels[1], rates);
  part(c, ComputePart::launch_overhead) += c.forward_compute_s + c.backward_compute_s - kernels_s;
  return core_forward_s;
}

// Adds `count` collectives of `bytes` each to the record; returns their seconds.
double add_collective(BlockCost& c, Axis axis, Collective kind, Pass pass, HiddenUnder hidden, double bytes,
                      double count, const Link& link) {
  const double seconds = count * cost(kind, bytes, link);
  if (count > 0) c.collectives.push_back({axis, kind, pass, hidden, bytes, count, seconds, seconds});
  return seconds;
}

// Transformer Engine's userbuffers overlap (Plan::tp_comm_overlap; NeMo's
// "Communication Overlap" guide): under sequence parallelism each dense
// GEMM of a layer is paired with the collective next to it. A pipelined pair
// splits the GEMM and its collective into n = tp chunks (an all-gather becomes
// n - 1 ring steps, each beside the GEMM of the chunk in hand; a reduce-scatter
// the same, after), so it takes (n - 1) max(G / n, C / (n - 1)) + G / n and
// exposes max(0, C - G (n - 1) / n). A bulk pair (no data dependence) runs the
// whole collective beside the whole GEMM: max(0, C - G). Forward: the
// reduce-scatter of a row-parallel GEMM's partial sums beside that GEMM, the
// all-gather that follows it beside the next column-parallel GEMM (the next
// layer's first, after the last), both pipelined. Backward, per column-
// parallel GEMM: its input gradient's reduce-scatter beside its weight
// gradient and its input's all-gather (kept sharded for its weight gradient)
// beside its input gradient, both bulk; the all-gather of the next row-
// parallel GEMM's output gradient beside that GEMM's input gradient,
// pipelined: the pairs Megatron Bridge's userbuffers configurations name
// (training/comm_overlap.py). Collectives no dense GEMM pairs (a routed
// expert's in tp) stay exposed. The `*_total_s` are the seconds of the
// record's entries.
struct TpOverlapExposed {
  double forward_s = 0, forward_gathers_s = 0, forward_gathers_total_s = 0;  // the gathers: what op-level checkpointing repeats
  double backward_reduce_s = 0, backward_gather_s = 0;                        // the all-reduce entry's and the SP all-gather entry's
};
TpOverlapExposed tp_overlap_exposed(const BlockCost& c, const BlockProfile& bp, const PlanScalars& ps, const Link& link,
                                    double forward_total_s, double backward_reduce_total_s, double backward_gather_total_s) {
  const double n = ps.tp, pipelined = (n - 1) / n;
  auto hidden = [](double comm_s, double capacity_s) { return std::max(0.0, comm_s - capacity_s); };
  const std::size_t count = bp.gemms.size();
  auto dense = [&](std::size_t i, TpSplit split) {
    return bp.gemms[i].tp_split == split && pairs_with_tp_collective(bp.gemms[i]);
  };
  // The first dense GEMM split `split` after i (wrapping to the block's start when `wrap`), or `count`.
  auto next = [&](std::size_t i, TpSplit split, bool wrap) {
    for (std::size_t step = 1; step <= count; ++step) {
      const std::size_t j = i + step;
      if (j >= count && !wrap) break;
      if (dense(j % count, split)) return j % count;
    }
    return count;
  };
  TpOverlapExposed e;
  double forward_paired_s = 0, reduce_paired_s = 0, gather_paired_s = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const GemmWork& g = bp.gemms[i];
    if (dense(i, TpSplit::rows)) {
      const double partial_sums = tp_collective_bytes(g.tp_reduce_elements, ps);
      const double scatter = cost(Collective::reduce_scatter, partial_sums, link);
      const double gather = cost(Collective::all_gather, partial_sums, link);
      const std::size_t j = next(i, TpSplit::columns, true);
      const double gather_exposed = j < count ? hidden(gather, c.gemms[j].forward_s * pipelined) : gather;
      e.forward_s += hidden(scatter, c.gemms[i].forward_s * pipelined) + gather_exposed;
      e.forward_gathers_s += gather_exposed;
      e.forward_gathers_total_s += gather;
      forward_paired_s += scatter + gather;
    } else if (dense(i, TpSplit::columns) && g.needs_input_gradient) {
      const double input = tp_collective_bytes(g.tp_reduce_elements, ps);
      const double scatter = cost(Collective::reduce_scatter, input, link);
      const double gather = cost(Collective::all_gather, input, link);
      const std::size_t r = next(i, TpSplit::rows, false);
      const double gradient_gather = r < count ? hidden(gather, c.gemms[r].input_gradient_s * pipelined) : gather;
      e.backward_reduce_s += hidden(scatter, c.gemms[i].weight_gradient_s) + gradient_gather;
      e.backward_gather_s += hidden(gather, c.gemms[i].input_gradient_s);
      reduce_paired_s += scatter + gather;
      gather_paired_s += gather;
    }
  }
  // What no pair accounts for stays exposed; nothing exposes more than the entry holds.
  e.forward_s = std::min(forward_total_s, e.forward_s + std::max(0.0, forward_total_s - forward_paired_s));
  e.backward_reduce_s =
      std::min(backward_reduce_total_s, e.backward_reduce_s + std::max(0.0, backward_reduce_total_s - reduce_paired_s));
  e.backward_gather_s =
      std::min(backward_gather_total_s, e.backward_gather_s + std::max(0.0, backward_gather_total_s - gather_paired_s));
  return e;
}

// Tensor-parallel communication inside the block, and what recomputation repeats in the backward
// (its compute, and a recomputed forward's tp collectives). First in the record: the repeats read
// the forward tp collective at its front.
void block_tp_collectives(BlockCost& c, const BlockProfile& bp, BlockKind role, double core_forward_s,
                          const ModuleSeconds& modules, const Plan& plan, const PlanScalars& ps) {
  const Link& tp_link = ps.links.of(Axis::tp);
  const bool full_recompute = plan.recompute == Recompute::full && role == BlockKind::layer;
  // Tensor-parallel all-reduces (reduce-scatter + all-gather under sequence
  // parallelism: the same volume); each moves elements x b / cp x act / count.
  // Forward reductions sit on the critical path. Backward ones (input
  // gradients of column-parallel GEMMs), and sequence parallelism's extra
  // all-gathers of the sharded GEMM inputs (Korthikanti et al. 2022, Sec.
  // 4.2.2), can run under the weight-gradient GEMMs when the plan says so.
  // Routed experts out of tp (Plan::expert_tensor_parallel) run none of theirs.
  const bool experts_in_tp = ps.experts.tokens == 1;
  // Bytes each of `count` collectives moves for `elements` per sample of the micro-batch.
  auto bytes_each = [&](double elements, int count) { return tp_collective_bytes(elements, ps) / count; };
  const int forward_collectives = bp.tp_forward_collectives - (experts_in_tp ? 0 : bp.expert_tp_forward_collectives);
  const int backward_collectives = bp.tp_backward_collectives - (experts_in_tp ? 0 : bp.expert_tp_backward_collectives);
  // Transformer Engine's chunked overlap (tp_comm_overlap) prices a layer's collectives pair by pair
  // (ZB-H1 exposes the backward's all the same: tp_backward_exposed_s).
  const bool chunked = chunks_tp(plan, ps, role);
  std::size_t forward_entry = c.collectives.size(), reduce_entry = forward_entry, gather_entry = forward_entry;
  if (forward_collectives > 0) {
    const double elements = bp.tp_forward_reduce_elements - (experts_in_tp ? 0 : bp.expert_tp_forward_reduce_elements);
    const double each = bytes_each(elements, forward_collectives);
    forward_entry = c.collectives.size();
    c.tp_forward_total_s = c.tp_forward_s =
        add_collective(c, Axis::tp, Collective::all_reduce, Pass::forward, chunked ? HiddenUnder::gemm : HiddenUnder::nothing,
                       each, forward_collectives, tp_link);
  }
  double backward_tp_s = 0, backward_reduce_s = 0, backward_gather_s = 0;
  if (backward_collectives > 0) {
    const double elements = bp.tp_backward_reduce_elements - (experts_in_tp ? 0 : bp.expert_tp_backward_reduce_elements);
    const double each = bytes_each(elements, backward_collectives);
    const HiddenUnder hidden = chunked ? HiddenUnder::gemm : HiddenUnder::weight_gradient;
    reduce_entry = c.collectives.size();
    backward_reduce_s = add_collective(c, Axis::tp, Collective::all_reduce, Pass::backward, hidden, each,
                                       backward_collectives, tp_link);
    if (ps.sp) {
      gather_entry = c.collectives.size();
      backward_gather_s = add_collective(c, Axis::tp, Collective::all_gather, Pass::backward, hidden, each,
                                         backward_collectives, tp_link);
    }
    backward_tp_s = backward_reduce_s + backward_gather_s;
  }
  c.tp_backward_total_s = backward_tp_s;
  c.tp_backward_s = plan.overlap_tensor_parallel && !plan.tp_comm_overlap && tp_link.overlaps_compute
                        ? std::max(0.0, backward_tp_s - c.weight_gradient_s)
                        : backward_tp_s;
  TpOverlapExposed overlap;
  if (chunked) {
    overlap = tp_overlap_exposed(c, bp, ps, tp_link, c.tp_forward_total_s, backward_reduce_s, backward_gather_s);
    if (forward_entry < c.collectives.size()) c.tp_forward_s = c.collectives[forward_entry].exposed_s = overlap.forward_s;
    if (reduce_entry < c.collectives.size()) c.collectives[reduce_entry].exposed_s = overlap.backward_reduce_s;
    if (gather_entry < c.collectives.size()) c.collectives[gather_entry].exposed_s = overlap.backward_gather_s;
    c.tp_backward_s = overlap.backward_reduce_s + overlap.backward_gather_s;
  }
  // Selective recompute drops the s x s tensors; fused attention keeps none to drop. The other
  // modules (Plan::recompute_modules) repeat their ops' forward.
  if (recomputes(plan, RecomputeModule::core_attn) && plan.attention == Attention::unfused) {
    c.backward_compute_s += core_forward_s;
    part(c, ComputePart::recompute) += core_forward_s;
  }
  for (std::size_t m = static_cast<std::size_t>(RecomputeModule::layernorm); m < kRecomputeModules; ++m) {
    if (!recomputes(plan, static_cast<RecomputeModule>(m)) || role != BlockKind::layer) continue;
    c.backward_compute_s += modules[m];
    part(c, ComputePart::recompute) += modules[m];
    // A whole-module checkpoint (mlp, shared_experts) runs the module's forward again, its
    // row-parallel GEMM's reduction too (all-gather and reduce-scatter under sequence parallelism).
    if (const int count = bp.module_tp_forward_collectives[m]; count > 0) {
      const double again = add_collective(c, Axis::tp, Collective::all_reduce, Pass::backward, HiddenUnder::nothing,
                                          bytes_each(bp.module_tp_forward_reduce_elements[m], count), count, tp_link);
      c.tp_backward_s += again;
      c.tp_backward_total_s += again;
    }
  }
  // A recomputed forward's tp collectives run again in the backward, exposed
  // (`gathers_only`: only the all-gather half of each all-reduce); under
  // tp_comm_overlap as much of it as of the forward's.
  auto repeat_forward_tp = [&](bool gathers_only) {
    if (forward_collectives == 0) return;
    BlockCollective again = c.collectives[forward_entry];
    again.pass = Pass::backward;
    if (gathers_only) {
      again.kind = Collective::all_gather;
      again.seconds = again.count * cost(Collective::all_gather, again.bytes, tp_link);
      again.exposed_s = chunked ? std::min(again.seconds, overlap.forward_gathers_s +
                                                              std::max(0.0, again.seconds - overlap.forward_gathers_total_s))
                                : again.seconds;
    }
    if (!chunked) again.exposed_s = again.seconds;
    c.tp_backward_s += again.exposed_s;
    c.tp_backward_total_s += again.seconds;
    c.collectives.push_back(again);
  };
  // Op-level checkpointing repeats its unsaved ops and, since only reduce-
  // scatter outputs are on torchtitan's save list, the forward's other tp
  // collectives: the all-gathers under sequence parallelism (half of each
  // all-reduce's volume), the whole all-reduces without it.
  if (plan.recompute == Recompute::selective_op && role == BlockKind::layer) {
    c.backward_compute_s += c.op_sac_recompute_s;
    part(c, ComputePart::recompute) += c.op_sac_recompute_s;
    repeat_forward_tp(ps.sp);
  }
  if (full_recompute) {
    c.backward_compute_s += c.forward_compute_s;
    part(c, ComputePart::recompute) += c.forward_compute_s;
    repeat_forward_tp(false);
  }
}

// Context-parallel exchanges of keys and values (plan.hpp, CpComm).
void block_cp_collectives(BlockCost& c, double core_forward_s, const ModelProfile& prof, const Plan& plan,
                          const PlanScalars& ps) {
  const double act = ps.act, cp = ps.cp, b = ps.b, seq = ps.seq;
  const Link& cp_link = ps.links.of(Axis::cp);
  if (cp > 1 && core_forward_s > 0 && plan.cp_comm != CpComm::ring) {
    const double tokens = seq * b / cp;  // this rank's chunk
    const double kv_bytes = tokens * static_cast<double>(prof.kv_width) / ps.kv_tp * act;  // its keys (or values)
    if (plan.cp_comm == CpComm::all_gather) {
      // All-gather every chunk's keys and values; the backward gathers them
      // again and reduce-scatters their gradients (Dubey et al. 2024, Sec. 3.3.2: exposed).
      const double gathered = 2 * kv_bytes * cp;
      const double gather = cost(Collective::all_gather, gathered, cp_link);
      const double scatter = cost(Collective::reduce_scatter, gathered, cp_link);
      c.cp_forward_exposed_s = gather;
      c.cp_backward_exposed_s = gather + scatter;
      c.collectives.push_back({Axis::cp, Collective::all_gather, Pass::forward, HiddenUnder::nothing, gathered, 1, gather, gather});
      c.collectives.push_back({Axis::cp, Collective::all_gather, Pass::backward, HiddenUnder::nothing, gathered, 1, gather, gather});
      c.collectives.push_back({Axis::cp, Collective::reduce_scatter, Pass::backward, HiddenUnder::nothing, gathered, 1, scatter, scatter});
    } else {
      // DeepSpeed-Ulysses: q, k and v from sequence chunks to head groups, the
      // output back; the backward moves their gradients the same way (Jacobs et al. 2023, Sec. 3).
      const double q_bytes = tokens * static_cast<double>(prof.q_width) / ps.tp * act;
      const double q_and_output = 2 * cost(Collective::all_to_all, q_bytes, cp_link);
      const double keys_and_values = 2 * cost(Collective::all_to_all, kv_bytes, cp_link);
      c.cp_forward_exposed_s = c.cp_backward_exposed_s = q_and_output + keys_and_values;
      for (Pass pass : {Pass::forward, Pass::backward}) {
        c.collectives.push_back({Axis::cp, Collective::all_to_all, pass, HiddenUnder::nothing, q_bytes, 2, q_and_output, q_and_output});
        c.collectives.push_back({Axis::cp, Collective::all_to_all, pass, HiddenUnder::nothing, kv_bytes, 2, keys_and_values, keys_and_values});
      }
    }
    c.cp_s = c.cp_forward_exposed_s + c.cp_backward_exposed_s;
  }
  // Ring attention passes key/value chunks around the cp ring,
  // overlapped with the attention of the chunk in hand (Liu et al. 2023).
  if (cp > 1 && core_forward_s > 0 && plan.cp_comm == CpComm::ring) {
    const double chunk_bytes = 2 * (seq * b / cp) * static_cast<double>(prof.kv_width) / ps.kv_tp * act;
    const double forward_ring = (cp - 1) * cost(Collective::send_recv, chunk_bytes, cp_link);
    c.cp_s = 3 * forward_ring;  // backward moves key/value and their gradients
    const double hidden = cp_link.overlaps_compute ? core_forward_s : 0.0;
    c.cp_forward_exposed_s = std::max(0.0, forward_ring - hidden);
    c.cp_backward_exposed_s = std::max(0.0, 2 * forward_ring - 2 * hidden);
    c.collectives.push_back({Axis::cp, Collective::send_recv, Pass::forward, HiddenUnder::attention, chunk_bytes,
                             cp - 1, forward_ring, c.cp_forward_exposed_s});
    c.collectives.push_back({Axis::cp, Collective::send_recv, Pass::backward, HiddenUnder::attention, chunk_bytes,
                             2 * (cp - 1), 2 * forward_ring, c.cp_backward_exposed_s});
  }
}

// Expert parallelism: dispatch and combine all-to-all, forward and backward
// (Lepikhin et al. 2021). Under sequence parallelism each tp rank routes its
// own 1/tp of the tokens (Megatron-Core's all-to-all dispatcher; with the
// experts in tp, their tp collectives gather and reduce-scatter the routed
// copies), over ep, or over ep x tp with the experts out of tp.
// With overlap_expert_parallel (Megatron-Core's combined 1F1B) a forward and
// another micro-batch's backward run layer by layer together, a compute
// stream and a communication stream alternating in four phases
// (TransformerLayerSchedulePlan.run, model_chunk_schedule_plan.py):
//   the backward's combine      beside the forward's attention (to the router),
//   the forward's dispatch      beside the backward's experts,
//   the backward's dispatch     beside the forward's experts,
//   the forward's combine       beside the backward's attention.
// Each phase waits for both halves of the one before it (each half reads
// what the other stream made), so a phase takes the longer of its two and
// the pair exposes, per phase, the all-to-all beyond its compute. Not
// priced: the SMs the all-to-all kernels take from the compute beside them
// (docs/cost-model.md, "Expert-parallel overlap").
void block_ep_collectives(BlockCost& c, const BlockProfile& bp, const ModelProfile& prof, const PlanScalars& ps) {
  const double act = ps.act, cp = ps.cp, b = ps.b, seq = ps.seq;
  if (ps.experts.ep > 1 && bp.expert_tp_split_parameters > 0) {
    const double routed_bytes = (seq * b / (cp * static_cast<double>(ps.experts.dispatched))) * prof.expert_slots *
                                static_cast<double>(prof.hidden) * act;
    const double one = cost(Collective::all_to_all, routed_bytes, ps.expert_ep_link);
    c.ep_s = 4 * one;
    // Priced whether or not the plan pairs its passes (the record is the same
    // for every schedule); the evaluator and the simulator read it only under overlap_expert_parallel.
    const bool hides = ps.expert_ep_link.overlaps_compute;
    const double beside[] = {c.forward_compute_s - c.experts_forward_s, c.experts_backward_s, c.experts_forward_s,
                             c.backward_compute_s - c.experts_backward_s};
    c.ep_paired_s = 0;
    for (double compute : beside) c.ep_paired_s += hides ? std::max(0.0, one - compute) : one;
    const HiddenUnder hidden = hides ? HiddenUnder::paired_pass : HiddenUnder::nothing;
    for (Pass pass : {Pass::forward, Pass::backward}) {
      c.collectives.push_back({Axis::ep, Collective::all_to_all, pass, hidden, routed_bytes, 2, 2 * one, c.ep_paired_s / 2});
    }
  }
}

// Tensor-, context- and expert-parallel communication inside the block.
void block_collectives(BlockCost& c, const BlockProfile& bp, BlockKind role, double core_forward_s,
                       const ModuleSeconds& modules, const ModelProfile& prof, const Plan& plan, const PlanScalars& ps) {
  c.collectives.reserve(6);
  block_tp_collectives(c, bp, role, core_forward_s, modules, plan, ps);
  block_cp_collectives(c, core_forward_s, prof, plan, ps);
  block_ep_collectives(c, bp, prof, ps);
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
  PlanScalars plan_scalars(plan, placements, prof);
  if (plan_scalars.experts.ep > 1) {  // the experts' all-to-all group and its dispatch rate
    for (const AxisPlacement& p : expert_placements(topology_, plan, placements)) {
      if (p.axis != Axis::ep) continue;
      plan_scalars.expert_ep_link = Links({p}).of(Axis::ep);
      plan_scalars.expert_ep_link.all_to_all_bandwidth_bytes_per_s =
          expert_dispatch_rate(p, plan, prof.routing()).bandwidth_bytes_per_s;
    }
  }
  const GemmRates rates{rates_[static_cast<std::size_t>(plan.precision)],
                        rates_[static_cast<std::size_t>(unquantized(plan.precision))]};
  std::vector<BlockCost> kind_cost(prof.kinds.size());
  for (std::size_t k = 0; k < prof.kinds.size(); ++k) {
    const BlockProfile& bp = prof.kinds[k];
    BlockCost& c = kind_cost[k];
    block_memory(c, bp, prof.kind_role[k], prof, plan, plan_scalars);
    ModuleSeconds modules{};
    const double core_forward_s = block_compute(c, bp, prof.kind_role[k], plan, plan_scalars, rates, modules);
    block_collectives(c, bp, prof.kind_role[k], core_forward_s, modules, prof, plan, plan_scalars);
  }
  return kind_cost;
}

PlanEstimate Evaluator::evaluate(const Plan& plan, const std::vector<AxisPlacement>& placements,
                                 std::vector<StageMemory>* stages) const {
  return evaluate(plan, placements, block_costs(plan, placements), stages);
}

namespace {

// ---- phase 2: the records folded over each pipeline stage

// One block's forward and backward on its stage: compute and the in-layer
// collectives the record leaves exposed. ZB-H1 splits the backward, and its B
// pass has no W GEMMs beside it to hide tp collectives under.
double tp_backward_exposed_s(const BlockCost& c, const Plan& plan) {
  return plan.schedule.kind == ScheduleKind::zb_h1 ? c.tp_backward_total_s : c.tp_backward_s;
}
double block_forward_s(const BlockCost& c) { return c.forward_compute_s + c.tp_forward_s + c.cp_forward_exposed_s + c.ep_s / 2; }
double block_backward_s(const BlockCost& c, const Plan& plan) {
  return c.backward_compute_s + tp_backward_exposed_s(c, plan) + c.cp_backward_exposed_s + c.ep_s / 2;
}

// One stage's sums per micro-batch. Reused across calls on a thread (the
// search evaluates millions of plans): no allocation in the fold.
struct StageSum {
  double dense = 0, expert = 0, largest_block = 0;
  double chunk_activation_bytes = 0, largest_layer_bytes = 0, gradient_elements = 0, loss_logits = 0;
  double forward_s = 0, backward_s = 0, weight_gradient_s = 0, compute_s = 0, backward_compute_s = 0;
  double tp_s = 0, tp_exposed_s = 0, cp_s = 0, cp_exposed_s = 0, ep_s = 0;
  double ep_hidden_s = 0;   // what the schedule's paired passes hide of ep_s, per micro-batch on average (overlap_expert_parallel)
  std::int64_t layers = 0;
  double blocks_with_parameters = 0;
  // Filled by the memory phase.
  double gradient_bytes = 0, parameter_bytes = 0, optimizer_parameters = 0;
  // Filled by the time phase.
  double fsdp_s = 0, fsdp_exposed_s = 0;

  // Adds `count` blocks of one kind (`in_chunk`: a pipeline-partitioned layer).
  void add(const BlockCost& c, bool in_chunk, double count, const Plan& plan) {
    // The block's figures are read before any sum is written: the compiler
    // cannot tell the sums (doubles) from the record's fields, and would read
    // the record again after every store.
    const double parameters = c.dense_parameters + c.expert_parameters;
    const double block_activation_bytes = plan.recompute == Recompute::full ? c.input_bytes : c.activation_bytes;  // selective-op: in activation_bytes
    const double forward = block_forward_s(c), backward = block_backward_s(c, plan);
    const double tp_exposed = c.tp_forward_s + tp_backward_exposed_s(c, plan), tp = c.tp_forward_total_s + c.tp_backward_total_s;
    const double weight_gradient = c.weight_gradient_s, backward_compute = c.backward_compute_s;
    const double compute = c.forward_compute_s + c.backward_compute_s;
    const double cp = c.cp_s, cp_exposed = c.cp_forward_exposed_s + c.cp_backward_exposed_s, ep = c.ep_s;
    dense += count * c.dense_parameters;
    expert += count * c.expert_parameters;
    largest_block = std::max(largest_block, parameters);
    if (parameters > 0) blocks_with_parameters += count;
    gradient_elements = std::max(gradient_elements, c.gradient_elements);
    loss_logits += c.loss_logits;
    if (in_chunk) {
      chunk_activation_bytes += count * block_activation_bytes;
      largest_layer_bytes = std::max(largest_layer_bytes, c.full_activation_bytes);
      layers += static_cast<std::int64_t>(count);
    }
    forward_s += count * forward;
    backward_s += count * backward;
    weight_gradient_s += count * weight_gradient;
    compute_s += count * compute;
    backward_compute_s += count * backward_compute;
    tp_s += count * tp;
    tp_exposed_s += count * tp_exposed;
    cp_s += count * cp;
    cp_exposed_s += count * cp_exposed;
    ep_s += count * ep;
  }
};

const BlockCost& cost_of_block(const ModelProfile& prof, const std::vector<BlockCost>& kind_cost, int block) {
  return kind_cost[static_cast<std::size_t>(prof.block_kind[static_cast<std::size_t>(block)])];
}

// Chunk c holds the next chunk_layers(c) layers (stage_partition.hpp) and runs on stage c mod pp.
// Calls add(stage, block cost, in_chunk, count) for every block of every stage:
// the layers chunk by chunk (chunk c on stage c mod pp), the embedding on the
// first stage, the head on the last.
template <typename Add>
void for_each_stage_block(const ModelProfile& prof, const Plan& plan, const std::vector<BlockCost>& kind_cost,
                          std::int64_t pp, std::int64_t v, Add&& add) {
  const std::int64_t layers = static_cast<std::int64_t>(prof.layer_blocks.size());
  const std::int64_t chunks = pp * v;
  // chunk_layers' even split is layers / chunks for every chunk when chunks divides the layers
  // (as validation requires): hoisted, so the hot loop does no division per chunk.
  const std::int64_t even_size = plan.stage_layers.empty() && layers % chunks == 0 ? layers / chunks : 0;
  std::int64_t next_layer = 0;
  for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
    const std::int64_t size = even_size > 0 ? even_size : chunk_layers(layers, chunks, plan.stage_layers, chunk);
    const std::int64_t stage = chunk % pp;
    if (prof.uniform_layer_kind >= 0) {  // every layer alike: add them all at once
      const std::int64_t n = std::min(size, layers - next_layer);
      if (n > 0) add(stage, cost_of_block(prof, kind_cost, prof.layer_blocks[static_cast<std::size_t>(next_layer)]), true, static_cast<double>(n));
      next_layer += n;
      continue;
    }
    for (std::int64_t i = 0; i < size && next_layer < layers; ++i, ++next_layer) {
      add(stage, cost_of_block(prof, kind_cost, prof.layer_blocks[static_cast<std::size_t>(next_layer)]), true, 1.0);
    }
  }
  if (prof.embedding_block >= 0) add(std::int64_t{0}, cost_of_block(prof, kind_cost, prof.embedding_block), false, 1.0);
  if (prof.head_block >= 0) add(pp - 1, cost_of_block(prof, kind_cost, prof.head_block), false, 1.0);
}

void fold_stages(std::vector<StageSum>& sum, const ModelProfile& prof, const Plan& plan,
                 const std::vector<BlockCost>& kind_cost, std::int64_t pp, std::int64_t v) {
  for_each_stage_block(prof, plan, kind_cost, pp, v, [&](std::int64_t stage, const BlockCost& c, bool in_chunk, double count) {
    sum[static_cast<std::size_t>(stage)].add(c, in_chunk, count, plan);
  });
}

// Combined 1F1B (overlap_expert_parallel): of the stage's m v chunk-forwards
// (and as many backwards), all but the unpaired ones at the ends of its list
// (schedule.hpp) hide their all-to-alls under their partners' compute; the
// per-micro-batch passes carry the average. With one stage this is exactly
// what the simulator replays (micro-batch 1's forward and micro-batch m's
// backward expose their all-to-alls, the others hide them); with chunks of
// unequal size, the average is the evaluator's approximation.
// (A fold of its own, run only for such plans: the search's hot fold stays as it was.)
void hide_paired_all_to_alls(std::vector<StageSum>& sum, const ModelProfile& prof, const Plan& plan,
                             const std::vector<BlockCost>& kind_cost, std::int64_t pp, std::int64_t v, std::int64_t m) {
  thread_local std::vector<double> pairing;  // per stage: what pairing every pass would hide, per micro-batch
  pairing.assign(static_cast<std::size_t>(pp), 0.0);
  for_each_stage_block(prof, plan, kind_cost, pp, v, [&](std::int64_t stage, const BlockCost& c, bool, double count) {
    pairing[static_cast<std::size_t>(stage)] += count * c.ep_hidden_by_pairing_s();
  });
  const double passes = static_cast<double>(m * v);
  for (std::int64_t r = 0; r < pp; ++r) {
    StageSum& s = sum[static_cast<std::size_t>(r)];
    const double unpaired = static_cast<double>(unpaired_forwards(plan.schedule, pp, m, r));
    s.ep_hidden_s = pairing[static_cast<std::size_t>(r)] * (passes - unpaired) / passes;
    s.forward_s -= s.ep_hidden_s / 2;
    s.backward_s -= s.ep_hidden_s / 2;
  }
}

// ---- phase 3: each stage's memory (the same rules as memory_model.cpp)

struct StageMemoryInputs {
  const ModelProfile& prof;
  const Plan& plan;
  const PlanScalars& ps;
  const std::vector<BlockCost>& kind_cost;
  const DeviceSpec& device;
  std::int64_t pp, v, m;
  std::int64_t micro_batches;  // plan.micro_batches(), taken once (m is at least one)
  double boundary_bytes;
};

// Inlined into its one caller, the per-stage loop of Evaluator::evaluate, as
// it was before that grew: called once per stage of every plan the search
// prices, its call (and the reload of its inputs) cost about 235
// instructions per evaluation (callgrind, bench_planner).
[[gnu::always_inline]] inline StageMemory stage_memory(StageSum& s, std::int64_t r, const StageMemoryInputs& in) {
  const ModelProfile& prof = in.prof;
  const Plan& plan = in.plan;
  const PrecisionBytes& bytes = in.ps.bytes;
  const double dp = in.ps.dp, fsdp = in.ps.fsdp, ep = in.ps.ep, tp = in.ps.tp, cp = in.ps.cp, act = in.ps.act;
  const std::int64_t pp = in.pp;
  auto dense_group = [&](ModelState state) { return sharding_group(fsdp, dp, ep, plan.zero_stage, state, false); };
  auto expert_group = [&](ModelState state) { return sharding_group(fsdp, dp, ep, plan.zero_stage, state, true); };
  if (r > 0 && prof.head_block >= 0 && r == pp - 1) {
    // Megatron keeps a copy of a tied embedding on the last stage for the output layer.
    const BlockCost& head = cost_of_block(prof, in.kind_cost, prof.head_block);
    s.dense += head.tied_parameters;
    s.largest_block = std::max(s.largest_block, head.dense_parameters + head.expert_parameters + head.tied_parameters);
    if (head.dense_parameters + head.expert_parameters == 0 && head.tied_parameters > 0) s.blocks_with_parameters += 1;
  }
  StageMemory sm;
  sm.stage = r;
  sm.layers = s.layers;
  sm.parameters_on_device = s.dense / dense_group(ModelState::parameters) + s.expert / expert_group(ModelState::parameters);
  MemoryBreakdown& mem = sm.memory;
  mem.parameters_bytes = sm.parameters_on_device * bytes.weight_bytes_per_parameter;
  mem.gradients_bytes = (s.dense / dense_group(ModelState::gradients) + s.expert / expert_group(ModelState::gradients)) * bytes.gradient_bytes_per_parameter;
  s.optimizer_parameters = s.dense / dense_group(ModelState::optimizer) + s.expert / expert_group(ModelState::optimizer);
  mem.optimizer_bytes = s.optimizer_parameters * bytes.optimizer_bytes_per_parameter;
  s.gradient_bytes = (s.dense + s.expert) * bytes.gradient_bytes_per_parameter;
  s.parameter_bytes = (s.dense + s.expert) * bytes.gathered_bytes_per_parameter;  // what gathering them moves

  const double in_flight = in_flight_chunk_micro_batches(plan.schedule, pp, r, in.micro_batches);
  const double chunks_here = static_cast<double>(in.v);
  double activations = s.chunk_activation_bytes / chunks_here * in_flight;
  if (recomputes_layer_forward(plan.recompute)) activations += s.largest_layer_bytes;
  sm.in_flight_micro_batches = in_flight / chunks_here;
  if (r == 0 && prof.embedding_block >= 0) {
    activations += embedding_in_flight_micro_batches(plan.schedule, pp, in.m) *
                   cost_of_block(prof, in.kind_cost, prof.embedding_block).activation_bytes;
  }
  if (r == pp - 1 && prof.head_block >= 0) {
    activations += head_in_flight_micro_batches(plan.schedule, pp, in.m) *
                   cost_of_block(prof, in.kind_cost, prof.head_block).activation_bytes;
  }
  mem.activations_bytes = activations;

  double buffers = 0;
  if (dense_group(ModelState::parameters) > 1 || expert_group(ModelState::parameters) > 1) {
    const double gathered = s.blocks_with_parameters > 1 ? 2 : 1;  // the running block and the prefetched next one
    buffers += s.largest_block * (gathered * bytes.weight_bytes_per_parameter + bytes.gradient_bytes_per_parameter);
  }
  if (dp * ep > 1 && !zero_shards(plan.zero_stage, ModelState::parameters)) {
    buffers += std::min(2 * plan.gradient_bucket_bytes, s.gradient_bytes);
  }
  if (pp > 1) buffers += 4 * in.boundary_bytes;
  if (prof.kind == ModelKind::transformer) {
    const double tokens = in.ps.seq * in.ps.b / cp;
    if (tp > 1 && in.ps.sp) buffers += tokens * static_cast<double>(prof.hidden) * act;
    if (cp > 1) {
      buffers += context_parallel_buffer_elements(plan.cp_comm, tokens, cp, static_cast<double>(prof.q_width) / tp,
                                                  static_cast<double>(prof.kv_width) / in.ps.kv_tp) * act;
    }
    if (in.ps.experts.ep > 1) {
      buffers += expert_dispatch_buffer_elements(tokens / static_cast<double>(in.ps.experts.dispatched), prof.expert_slots,
                                                 static_cast<double>(prof.hidden)) * act;
    }
  }
  mem.buffers_bytes = buffers;
  add_peak_memory(mem, s.loss_logits, s.layers > 0 ? s.gradient_elements : 0.0, act, in.device, plan.loss);
  return sm;
}

// ---- phase 4: step time

// Sharded weights (fsdp, ZeRO-3) on a stage of a pipeline, in closed form:
// per micro-batch, gather the stage's weights for the forward and again for
// the backward, reduce-scatter its gradients; the first block's share cannot
// hide, the rest hides under the compute. (One stage is replayed block by
// block instead: replay_sharded below; docs/simulator.md, "Differences".)
// Whether the next block's weights are gathered while a block computes
// (FSDP's prefetch): asked for, and on links that can move data meanwhile.
bool prefetches_gathers(const Plan& plan, const Link& fsdp_group) {
  return plan.overlap_parameter_gather && fsdp_group.overlaps_compute;
}

struct WeightShardingCost {
  const Link& group;
  double parameter_bytes = -1, gradient_bytes = -1;  // of the last stage priced
  double gather = 0, scatter = 0;
  // Stages alike (the middle ones of a pipeline) price alike: the last figures are reused.
  void price(const StageSum& s) {
    if (s.parameter_bytes != parameter_bytes) {
      parameter_bytes = s.parameter_bytes;
      gather = cost(Collective::all_gather, parameter_bytes, group);
    }
    if (s.gradient_bytes != gradient_bytes) {
      gradient_bytes = s.gradient_bytes;
      scatter = cost(Collective::reduce_scatter, gradient_bytes, group);
    }
  }
};

void add_weight_sharding(StageSum& s, const Plan& plan, WeightShardingCost& price) {
  price.price(s);
  const Link& fsdp_group = price.group;
  const double gather = price.gather, scatter = price.scatter;
  const double blocks = std::max<double>(1, static_cast<double>(s.layers));
  auto exposed = [&](double comm, double compute) {
    return prefetches_gathers(plan, fsdp_group)
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

// The data-parallel reduction of a stage's gradients (none with ZeRO-3,
// whose reduce-scatter is the fsdp group's): the group, over dp x ep,
// whether it runs, whether it may overlap the last gradient pass, and the
// buckets of `gradient_bytes` (the stage's, before the fsdp reduce-scatter)
// with the time of each and of the last.
struct DataParallelReduction {
  Link group;
  bool reduced = false, overlapped = false;
  GradientBuckets buckets;
  double each_s = 0, last_s = 0;
  DataParallelReduction(const Plan& plan, const PlanScalars& ps)
      : group(combine({ps.links.of(Axis::dp), ps.links.of(Axis::ep)})),
        reduced(group.size > 1 && !zero_shards(plan.zero_stage, ModelState::parameters)),
        overlapped(plan.overlap_gradient_reduction && group.overlaps_compute) {}
  // HSDP: the fsdp group has already reduce-scattered the gradients.
  void price(double gradient_bytes, const Plan& plan, const PlanScalars& ps) {
    const Collective kind = gradient_reduction(plan.zero_stage);
    buckets = gradient_buckets(gradient_bytes / ps.fsdp, plan.gradient_bucket_bytes);
    each_s = buckets.count > 1 ? cost(kind, buckets.size, group) : 0;
    last_s = buckets.count > 1 && buckets.last == buckets.size ? each_s : cost(kind, buckets.last, group);
  }
  double total_s() const { return buckets.count > 0 ? static_cast<double>(buckets.count - 1) * each_s + last_s : 0; }
};

// replay_sharded_stage through a small cache: the planner evaluates one mesh
// under many schedules, ZeRO stages and batch sizes whose stages replay the
// same blocks. The key is every input of the replay (a pure function), so a
// hit returns exactly what the replay would.
ShardedStep replay_cached(std::span<const ShardedRun> runs, std::int64_t micro_batches, bool split, bool prefetch,
                          const ShardedBuckets& buckets) {
  constexpr std::size_t kSlots = 512;
  struct Slot {
    std::vector<double> key;
    ShardedStep step;
  };
  thread_local std::vector<Slot> slots(kSlots);
  thread_local std::vector<double> key;
  key.clear();
  key.insert(key.end(), {static_cast<double>(micro_batches), split ? 1.0 : 0.0, prefetch ? 1.0 : 0.0,
                         static_cast<double>(buckets.count), buckets.threshold_each, buckets.each_s, buckets.last_s,
                         buckets.overlapped ? 1.0 : 0.0});
  bool paired = false;
  for (const ShardedRun& run : runs) {
    const ShardedBlock& b = run.block;
    key.insert(key.end(), {static_cast<double>(run.count), b.forward_s, b.backward_s, b.backward_compute_s,
                           b.weight_gradient_s, b.gather_s, b.scatter_s, b.gradient_bytes, b.gathers ? 1.0 : 0.0});
    paired = paired || b.forward_paired_s != b.forward_s || b.backward_paired_s != b.backward_s;
  }
  // Paired passes (combined 1F1B) after a -1 where the next run's count (>= 1) would stand: the other
  // keys stay as they were, and no key of one kind reads as one of the other.
  if (paired) {
    key.push_back(-1.0);
    for (const ShardedRun& run : runs) key.insert(key.end(), {run.block.forward_paired_s, run.block.backward_paired_s});
  }
  // FNV-1a over the key's 64-bit words, each folded onto its low half first:
  // a product carries differences only upwards, and keys that differ in a
  // double's exponent (0 and 1, small counts) differ only in its high bits,
  // which would otherwise never reach the low bits the slot is taken from.
  // The finalizer (MurmurHash3's fmix64) spreads the rest.
  std::uint64_t hash = 1469598103934665603ull;
  for (double x : key) {
    std::uint64_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    hash = (hash ^ bits ^ (bits >> 32)) * 1099511628211ull;
  }
  hash ^= hash >> 33;
  hash *= 0xff51afd7ed558ccdull;
  hash ^= hash >> 33;
  hash *= 0xc4ceb9fe1a85ec53ull;
  hash ^= hash >> 33;
  // Two ways per set, the one used last in front: a key that shares its set
  // with another (the two ZB-H1 / 1F1B replays of one mesh, say) keeps both.
  const std::size_t set = (hash % (kSlots / 2)) * 2;
  Slot& front = slots[set];
  Slot& back = slots[set + 1];
  // Bitwise equality (a NaN input then hits too: the same bits replay the same).
  auto same = [&](const std::vector<double>& k) {
    return k.size() == key.size() && std::memcmp(k.data(), key.data(), key.size() * sizeof(double)) == 0;
  };
  if (same(front.key)) return front.step;
  std::swap(front, back);  // the front one becomes the back; a hit on the back one comes to the front
  if (!same(front.key)) {
    front.step = replay_sharded_stage(runs, micro_batches, split, prefetch, buckets);
    front.key = key;
  }
  return front.step;
}

// One stage with sharded weights (pp = 1): the block-by-block replay of
// sharded_replay.hpp, which is the simulator's model, in place of the
// closed form above. Each block's record gives its pass times and its
// weights; gathers and reduce-scatters are priced per block (each pays the
// collective's latency); with a data-parallel axis beside fsdp (HSDP) the
// buckets fill as the replayed last backward produces them (`dp`: the
// stage's reduction as after_pipeline priced it).
ShardedStep replay_sharded(const ModelProfile& prof, const Plan& plan, const PlanScalars& ps,
                           const std::vector<BlockCost>& kind_cost, const Link& fsdp_group,
                           const DataParallelReduction& dp) {
  const bool split = plan.schedule.kind == ScheduleKind::zb_h1;
  thread_local std::vector<ShardedBlock> kinds;
  thread_local std::vector<ShardedRun> runs;
  thread_local std::vector<int> run_kind;
  kinds.resize(kind_cost.size());
  for (std::size_t k = 0; k < kind_cost.size(); ++k) {
    const BlockCost& c = kind_cost[k];
    const double parameters = c.dense_parameters + c.expert_parameters;
    ShardedBlock& b = kinds[k];
    b.forward_s = block_forward_s(c);
    b.backward_s = block_backward_s(c, plan);
    b.backward_compute_s = c.backward_compute_s;
    b.weight_gradient_s = c.weight_gradient_s;
    const double hidden = plan.overlap_expert_parallel ? c.ep_hidden_by_pairing_s() / 2 : 0.0;
    b.forward_paired_s = b.forward_s - hidden;
    b.backward_paired_s = b.backward_s - hidden;
    b.gradient_bytes = parameters * ps.bytes.gradient_bytes_per_parameter;
    b.gathers = parameters > 0;
    b.gather_s = cost(Collective::all_gather, parameters * ps.bytes.gathered_bytes_per_parameter, fsdp_group);
    b.scatter_s = cost(Collective::reduce_scatter, b.gradient_bytes, fsdp_group);
  }
  // The blocks in forward order, alike neighbours as one run.
  runs.clear();
  run_kind.clear();
  auto add = [&](int kind, std::int64_t count) {
    if (!runs.empty() && run_kind.back() == kind) {
      runs.back().count += count;
    } else {
      runs.push_back({kinds[static_cast<std::size_t>(kind)], count});
      run_kind.push_back(kind);
    }
  };
  auto kind_of = [&](int block) { return prof.block_kind[static_cast<std::size_t>(block)]; };
  if (prof.embedding_block >= 0) add(kind_of(prof.embedding_block), 1);
  if (prof.uniform_layer_kind >= 0) {
    add(prof.uniform_layer_kind, static_cast<std::int64_t>(prof.layer_blocks.size()));
  } else {
    for (int block : prof.layer_blocks) add(kind_of(block), 1);
  }
  if (prof.head_block >= 0) add(kind_of(prof.head_block), 1);

  ShardedBuckets buckets;
  if (dp.reduced) {
    buckets.count = dp.buckets.count;
    buckets.threshold_each = dp.buckets.size * ps.fsdp;
    buckets.each_s = dp.each_s;
    buckets.last_s = dp.last_s;
    buckets.overlapped = dp.overlapped;
  }
  return replay_cached(runs, plan.micro_batches(), split, prefetches_gathers(plan, fsdp_group), buckets);
}

// ZeRO-1/2's gather of the updated weights under the next step's first forward
// (Plan::overlap_zero_gather; docs/cost-model.md, "ZeRO's gather of the updated
// weights"), as Megatron-Core runs it: each of the stage's `chunks` gathers its
// weights in its own buckets, and a bucket's layers, as they start, start the
// next bucket's gather (forward pre-hooks), so a chunk's first forward goes at
// the slower of its compute and its gathers, bucket by bucket. The first
// chunk's first bucket is waited for whole; a later chunk's first bucket was
// started ahead (the schedule's param_sync_func). A chunk's buckets are its
// gradients' (the same parameters, bucketed alike: gradient_buckets over the
// chunk's share of `gradient_bytes`, as the simulator buckets each chunk);
// `forward_s`: one micro-batch's forward through the stage.
struct ZeroGather {
  double total_s = 0, exposed_s = 0;
};
ZeroGather overlapped_zero_gather(double parameter_bytes, double gradient_bytes, double bucket_bytes,
                                  std::int64_t chunks, double forward_s, const Link& group) {
  const double v = static_cast<double>(chunks);
  const double b = static_cast<double>(std::max<std::int64_t>(1, gradient_buckets(gradient_bytes / v, bucket_bytes).count));
  const double each_s = cost(Collective::all_gather, parameter_bytes / (v * b), group);
  const double bucket_forward_s = forward_s / (v * b);  // the layers one bucket holds, one micro-batch
  return {v * b * each_s, each_s + v * (b - 1) * std::max(0.0, each_s - bucket_forward_s)};
}

// Data-parallel gradient reduction after the last micro-batch (in buckets,
// overlapping its last gradient pass), ZeRO-1/2's gather of the updated weights, and
// the optimizer, each the largest of any stage (the slowest stage's compute
// is not the stage with the most gradients or the latest last pass).
struct AfterPipeline {
  double dp_s = 0, dp_exposed_s = 0, gather_after_step_s = 0, optimizer_s = 0;
  DataParallelReduction dp;  // as priced for the last stage priced (one stage: that stage's)
};

// `stages` (optional) receives each stage's exposed gather.
AfterPipeline after_pipeline(const std::vector<StageSum>& sum, const Plan& plan, const PlanScalars& ps,
                             const ComputeRates& rates, std::vector<StageMemory>* stages) {
  AfterPipeline out{0, 0, 0, 0, DataParallelReduction(plan, ps)};
  DataParallelReduction& dp = out.dp;
  const bool gathered = dp.reduced && zero_shards(plan.zero_stage, ModelState::optimizer);
  const bool gather_overlapped = gathered && zero_gather_overlap_applies(plan) && dp.group.overlaps_compute;
  const bool split = plan.schedule.kind == ScheduleKind::zb_h1;  // the last gradient pass is a W
  // Stages alike (the middle ones of a pipeline) price alike: the last stage's
  // figures are reused when its gradients and last pass were the same.
  double seen_gradients = -1, seen_compute = -1, seen_pass = -1, seen_parameters = -1, seen_forward = -1;
  double seen_gathered_gradients = -1;
  double reduce = 0, gather = 0, gather_exposed = 0, exposed = 0;
  for (std::size_t r = 0; r < sum.size(); ++r) {
    const StageSum& s = sum[r];
    if (dp.reduced) {
      const double local_gradients = s.gradient_bytes / ps.fsdp;  // HSDP: fsdp already reduce-scattered
      // The buckets fill during the last gradient pass: ZB-H1's last W, or
      // the last backward, whose own collectives follow its compute (it has
      // no partner under combined 1F1B: its all-to-alls are whole).
      const double compute = split ? s.weight_gradient_s : s.backward_compute_s;
      const double pass = split ? s.weight_gradient_s : s.backward_s + s.ep_hidden_s / 2;
      if (local_gradients != seen_gradients || compute != seen_compute || pass != seen_pass) {
        seen_gradients = local_gradients;
        seen_compute = compute;
        seen_pass = pass;
        dp.price(s.gradient_bytes, plan, ps);
        reduce = dp.total_s();
        exposed = dp.overlapped ? std::max(0.0, bucket_reduction_end_s(dp.buckets, dp.each_s, dp.last_s, compute) - pass)
                                : reduce;
      }
      if (gathered && (s.parameter_bytes != seen_parameters ||
                       (gather_overlapped && (s.forward_s != seen_forward || local_gradients != seen_gathered_gradients)))) {
        seen_parameters = s.parameter_bytes;
        seen_forward = s.forward_s;
        seen_gathered_gradients = local_gradients;
        if (gather_overlapped) {
          const ZeroGather g = overlapped_zero_gather(s.parameter_bytes / ps.fsdp, local_gradients, plan.gradient_bucket_bytes,
                                                      plan.schedule.virtual_stages, s.forward_s, dp.group);
          gather = g.total_s;
          gather_exposed = g.exposed_s;
        } else {
          gather = gather_exposed = cost(Collective::all_gather, s.parameter_bytes / ps.fsdp, dp.group);
        }
      }
      // The stage that communicates most, as the exposed part is that of the stage that waits longest.
      out.dp_exposed_s = std::max(out.dp_exposed_s, exposed);
      out.dp_s = std::max(out.dp_s, reduce + gather);
    }
    out.optimizer_s = std::max(out.optimizer_s, stream_time_s(optimizer_traffic_bytes(s.optimizer_parameters, ps.bytes),
                                                              rates, StreamOp::optimizer));
    out.gather_after_step_s = std::max(out.gather_after_step_s, gather_exposed);
    if (stages) (*stages)[r].gather_after_step_exposed_s = gather_exposed;
  }
  return out;
}

// Communication per axis and in total, of the slowest stage over the step.
void account_axes(TimeEstimate& time, const StageSum& slow, const Plan& plan, double fsdp, double md, double p2p_s,
                  double p2p_exposed_s, const AfterPipeline& after) {
  const std::size_t fsdp_axis = zero_shards(plan.zero_stage, ModelState::parameters) && fsdp == 1 ? static_cast<std::size_t>(Axis::dp) : static_cast<std::size_t>(Axis::fsdp);
  time.axis_communication_s[static_cast<std::size_t>(Axis::tp)] = md * slow.tp_s;
  time.axis_exposed_s[static_cast<std::size_t>(Axis::tp)] = md * slow.tp_exposed_s;
  time.axis_communication_s[static_cast<std::size_t>(Axis::pp)] = md * 2 * p2p_s;
  time.axis_exposed_s[static_cast<std::size_t>(Axis::pp)] = p2p_exposed_s;
  time.axis_communication_s[static_cast<std::size_t>(Axis::cp)] = md * slow.cp_s;
  time.axis_exposed_s[static_cast<std::size_t>(Axis::cp)] = md * slow.cp_exposed_s;
  time.axis_communication_s[static_cast<std::size_t>(Axis::ep)] = md * slow.ep_s;
  time.axis_exposed_s[static_cast<std::size_t>(Axis::ep)] = md * (slow.ep_s - slow.ep_hidden_s);
  time.axis_communication_s[fsdp_axis] += md * slow.fsdp_s;
  time.axis_exposed_s[fsdp_axis] += md * slow.fsdp_exposed_s;
  time.axis_communication_s[static_cast<std::size_t>(Axis::dp)] += after.dp_s;
  time.axis_exposed_s[static_cast<std::size_t>(Axis::dp)] += after.dp_exposed_s + after.gather_after_step_s;
  for (std::size_t a = 0; a < 6; ++a) {
    time.communication_s += time.axis_communication_s[a];
    time.communication_exposed_s += time.axis_exposed_s[a];
  }
}

// ---- phase 5: FLOPs per step and the utilisation they give
void add_flops(TimeEstimate& time, const ModelProfile& prof, const Plan& plan, double world_peak, double seq) {
  const double global = static_cast<double>(plan.global_batch);
  time.model_flops_per_step = prof.model_flops_per_sample * global;
  const double repeated = recompute_flops_per_sample(prof, plan);
  time.hardware_flops_per_step = time.model_flops_per_step + (prof.padding_flops_per_sample + repeated) * global;
  if (time.step_s > 0) {
    time.tokens_per_s = global * seq / time.step_s;
    if (world_peak > 0) {
      time.mfu = time.model_flops_per_step / (time.step_s * world_peak);
      time.hfu = time.hardware_flops_per_step / (time.step_s * world_peak);
    }
  }
}

}  // namespace

PlanEstimate Evaluator::evaluate(const Plan& plan, const std::vector<AxisPlacement>& placements,
                                 const std::vector<BlockCost>& kind_cost, std::vector<StageMemory>* stages) const {
  PlanEstimate estimate;
  const ModelProfile& prof = profile_;
  const PlanScalars ps(plan, placements, prof);
  const ComputeRates& rates = rates_[static_cast<std::size_t>(plan.precision)];
  const std::int64_t pp = prof.kind == ModelKind::cnn ? 1 : plan.mesh.size(Axis::pp);
  const std::int64_t v = plan.schedule.virtual_stages;
  const std::int64_t micro_batches = plan.micro_batches();
  const std::int64_t m = std::max<std::int64_t>(micro_batches, 1);

  thread_local std::vector<StageSum> sum;
  sum.assign(static_cast<std::size_t>(pp), StageSum{});
  fold_stages(sum, prof, plan, kind_cost, pp, v);

  const PipelineTransfer transfer = pipeline_transfer(prof, plan);
  double worst_total = -1;
  if (stages) stages->clear();
  const StageMemoryInputs memory_in{prof, plan, ps, kind_cost, cluster_.device, pp, v, m, micro_batches,
                                       transfer.boundary_bytes};
  for (std::int64_t r = 0; r < pp; ++r) {
    const StageMemory sm = stage_memory(sum[static_cast<std::size_t>(r)], r, memory_in);
    if (sm.memory.total_bytes() > worst_total) {
      worst_total = sm.memory.total_bytes();
      estimate.worst_stage = r;
      estimate.worst_memory = sm.memory;
      estimate.parameters_on_device = sm.parameters_on_device;
    }
    if (stages) stages->push_back(sm);
  }
  estimate.capacity_bytes = cluster_.device.memory_bytes;
  estimate.usable_bytes = cluster_.device.memory_bytes * (1.0 - plan.memory_headroom);
  estimate.fits = worst_total <= estimate.usable_bytes;

  // Each stage's micro-batch: its blocks, the pipeline transfers (Megatron's
  // scatter/gather adds a tp all-gather on arrival) and the exposed part of
  // the weight gathers when weights are sharded.
  TimeEstimate& time = estimate.time;
  const Link& tp_link = ps.links.of(Axis::tp);
  const Link fsdp_group = zero_shards(plan.zero_stage, ModelState::parameters) ? combine({ps.links.of(Axis::fsdp), ps.links.of(Axis::dp), ps.links.of(Axis::ep)})
                                               : ps.links.of(Axis::fsdp);
  const double p2p_gather_s = transfer.gather_after_receive ? cost(Collective::all_gather, transfer.boundary_bytes, tp_link) : 0;
  const double p2p_s = pp > 1 ? static_cast<double>(v) * (cost(Collective::send_recv, transfer.send_bytes, ps.links.of(Axis::pp)) + p2p_gather_s) : 0;
  // Overlapped pipeline transfers (Plan::overlap_p2p_comm) leave each pass;
  // the fill's and the drain's, p - 1 chunk transfers each, stay on the step.
  const bool p2p_hidden = p2p_overlap_applies(plan);
  const double p2p_pass_s = p2p_hidden ? 0.0 : p2p_s;
  const double p2p_fill_drain_s = p2p_hidden ? 2.0 * static_cast<double>(pp - 1) * p2p_s / static_cast<double>(v) : 0.0;
  thread_local std::vector<double> stage_s;
  stage_s.assign(static_cast<std::size_t>(pp), 0.0);
  WeightShardingCost weight_sharding{fsdp_group};
  if (plan.overlap_expert_parallel) hide_paired_all_to_alls(sum, prof, plan, kind_cost, pp, v, m);
  for (std::int64_t r = 0; r < pp; ++r) {
    StageSum& s = sum[static_cast<std::size_t>(r)];
    s.forward_s += p2p_pass_s;
    s.backward_s += p2p_pass_s;
    if (fsdp_group.size > 1 && pp > 1) add_weight_sharding(s, plan, weight_sharding);
    stage_s[static_cast<std::size_t>(r)] = s.forward_s + s.backward_s;
  }
  std::size_t slowest = 0;
  for (std::size_t r = 1; r < stage_s.size(); ++r) {
    if (stage_s[r] > stage_s[slowest]) slowest = r;
  }
  StageSum& slow = sum[slowest];
  const double md = static_cast<double>(m);
  const PipelineTiming pipeline = pipeline_timing(stage_s, m, plan.schedule, slow.weight_gradient_s);
  time.bubble_s = pipeline.bubble_s;
  AfterPipeline after = after_pipeline(sum, plan, ps, rates, stages);
  double before_optimizer_s = pipeline.step_s + p2p_fill_drain_s + after.dp_exposed_s;
  if (fsdp_group.size > 1 && pp == 1) {
    // The replay's waits for gathers and its reduce-scatter tail are fsdp's
    // exposed time; what the buckets add after both is dp's.
    const ShardedStep sharded = replay_sharded(prof, plan, ps, kind_cost, fsdp_group, after.dp);
    const double reduced_s = std::max(sharded.passes_end_s, sharded.reductions_end_s);
    slow.fsdp_s = sharded.gather_total_s + sharded.scatter_total_s;
    slow.fsdp_exposed_s = (reduced_s - md * stage_s[0]) / md;
    slow.forward_s += sharded.forward_wait_s / md;
    slow.backward_s += sharded.backward_wait_s / md;
    after.dp_exposed_s = std::max(0.0, sharded.end_s - reduced_s);
    before_optimizer_s = sharded.end_s;
  }
  time.optimizer_s = after.optimizer_s;
  time.step_s = before_optimizer_s + after.gather_after_step_s + after.optimizer_s;

  time.compute_s = md * slow.compute_s;  // the optimizer is reported on its own
  time.slowest_stage = static_cast<std::int64_t>(slowest);
  account_axes(time, slow, plan, ps.fsdp, md, p2p_s, p2p_hidden ? p2p_fill_drain_s : md * 2 * p2p_s, after);
  time.stage_forward_s = slow.forward_s;
  time.stage_backward_s = slow.backward_s;
  time.stage_weight_gradient_s = slow.weight_gradient_s;
  add_flops(time, prof, plan, static_cast<double>(plan.mesh.world_size()) * rates.peak_flops_per_s, ps.seq);
  return estimate;
}

std::array<double, kComputeParts> Evaluator::compute_parts(const Plan& plan, const std::vector<BlockCost>& kind_cost,
                                                        std::int64_t stage) const {
  const ModelProfile& prof = profile_;
  const std::int64_t pp = prof.kind == ModelKind::cnn ? 1 : plan.mesh.size(Axis::pp);
  std::array<double, kComputeParts> parts{};
  for_each_stage_block(prof, plan, kind_cost, pp, plan.schedule.virtual_stages,
                       [&](std::int64_t s, const BlockCost& c, bool, double count) {
                         if (s != stage) return;
                         for (std::size_t i = 0; i < kComputeParts; ++i) parts[i] += count * c.compute_parts_s[i];
                       });
  const double m = static_cast<double>(std::max<std::int64_t>(plan.micro_batches(), 1));
  for (double& part : parts) part *= m;
  return parts;
}

}  // namespace meshplan
