// The fast evaluator against the reference memory model, the pipeline
// closed form against the bubble examples of docs/validation.md, and sanity properties of time.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "model/collectives.hpp"
#include "model/evaluate.hpp"
#include "model/pipeline_time.hpp"
#include "model/search.hpp"
#include "model/stage_cost.hpp"
#include "model/stage_partition.hpp"
#include "model/topology.hpp"
#include "model/validate.hpp"
#include "test_support.hpp"

namespace meshplan {
namespace {
using namespace testing_support;

// The block kind of a model's first layer, and a plan's block costs at `precision` (the plan keeps it).
std::size_t first_layer_kind(const ModelProfile& prof) {
  return static_cast<std::size_t>(prof.block_kind[static_cast<std::size_t>(prof.layer_blocks.front())]);
}
std::vector<BlockCost> costs_at(const Evaluator& evaluator, Plan& plan, Precision precision) {
  plan.precision = precision;
  return evaluator.block_costs(plan, place_axes(evaluator.topology(), plan.mesh));
}

SearchSpace space_with_cp() {
  SearchSpace space;
  space.axes = {Axis::dp, Axis::fsdp, Axis::tp, Axis::pp, Axis::cp};
  return space;
}

TEST(PipelineTime, SeedEfficiencyExamples) {
  // "4 stages and 2 micro-batches give 40%; 4 stages and 8 micro-batches about
  // 73%; 90% at 4 stages needs 27 micro-batches."
  const std::vector<double> uniform(4, 1.0);
  auto efficiency = [&](std::int64_t m) {
    const auto timing = pipeline_timing(uniform, m, Schedule{ScheduleKind::one_f_one_b, 1});
    return static_cast<double>(m) * 1.0 / timing.step_s;
  };
  EXPECT_DOUBLE_EQ(efficiency(2), 0.4);
  EXPECT_DOUBLE_EQ(efficiency(8), 8.0 / 11.0);
  EXPECT_NEAR(efficiency(8), 0.73, 0.005);
  EXPECT_DOUBLE_EQ(efficiency(27), 0.9);
  EXPECT_LT(efficiency(26), 0.9);
  EXPECT_DOUBLE_EQ(uniform_pipeline_efficiency(2, 4), 0.4);
}

TEST(PipelineTime, InterleavingAndZeroBubble) {
  const std::vector<double> uniform(8, 3.0);
  // Interleaved 1F1B: bubble (p - 1) t / v (Narayanan et al. 2021, Sec. 2.2.2).
  EXPECT_DOUBLE_EQ(pipeline_timing(uniform, 16, Schedule{ScheduleKind::interleaved, 3}).bubble_s, 7 * 3.0 / 3);
  // ZB-H1 with T_F = T_B = T_W = 1: bubble (p - 1)(T_F + T_B - T_W) = 7 (Qi et al. 2023).
  EXPECT_DOUBLE_EQ(pipeline_timing(uniform, 16, Schedule{ScheduleKind::zb_h1, 1}, 1.0).bubble_s, 7.0);
  EXPECT_DOUBLE_EQ(pipeline_timing(uniform, 8, Schedule{ScheduleKind::zb_h1, 1}, 1.0).bubble_s, 7.0);  // m = p
  // Fewer micro-batches than stages: m - 1 W passes to defer, (p - 1)(T_F + T_B) - (m - 1) T_W
  // (it was priced 7 at m = 1, below the critical path there: 8 (T_F + T_B) + T_W).
  EXPECT_DOUBLE_EQ(pipeline_timing(uniform, 1, Schedule{ScheduleKind::zb_h1, 1}, 1.0).bubble_s, 14.0);
  EXPECT_DOUBLE_EQ(pipeline_timing(uniform, 1, Schedule{ScheduleKind::zb_h1, 1}, 1.0).step_s, 8 * 2.0 + 1.0);
  EXPECT_DOUBLE_EQ(pipeline_timing(uniform, 4, Schedule{ScheduleKind::zb_h1, 1}, 1.0).bubble_s, 14.0 - 3.0);
  // Uneven stages: the slowest sets the pace.
  const std::vector<double> uneven = {1, 1, 2, 1};
  const auto timing = pipeline_timing(uneven, 10, Schedule{});
  EXPECT_DOUBLE_EQ(timing.step_s, 10 * 2 + 3);
  EXPECT_EQ(timing.slowest_stage, 2u);
}

// Plans drawn at random from the search space; the evaluator's memory must
// equal the graph-walking reference exactly (up to summation order).
TEST(Evaluator, MemoryMatchesTheReferenceModel) {
  std::mt19937 rng(11);
  int compared = 0;
  for (const char* name : {"gpt2-124m", "llama2-70b", "gemma3-1b", "mlp-seed", "resnet50", "megatron-1t"}) {
    const auto model = must(load_model(name));
    const auto cluster = must(load_cluster("dgx-h100"));
    const std::int64_t world = 64;
    const Evaluator evaluator(model, cluster, world, model.default_seq_len());
    const auto meshes = enumerate_meshes(world, space_with_cp(), 8);
    for (int i = 0; i < 300; ++i) {
      Plan plan;
      plan.mesh = meshes[rng() % meshes.size()];
      plan.micro_batch = 1 << (rng() % 3);
      plan.global_batch = 256;
      plan.zero_stage = static_cast<int>(rng() % 4);
      plan.recompute = static_cast<Recompute>(rng() % kRecomputeModes);
      plan.sequence_parallel = rng() % 2 == 0 && plan.mesh.size(Axis::tp) > 1 && model.kind == ModelKind::transformer;
      plan.attention = rng() % 2 == 0 ? Attention::fused : Attention::unfused;
      plan.cp_comm = static_cast<CpComm>(rng() % 3);
      plan.fp32_gradients = rng() % 2 == 0;
      plan.bf16_moments = i % 3 == 0;
      if (plan.recompute == Recompute::selective && model.kind == ModelKind::transformer && i % 2 == 1) {
        plan.recompute_modules |= module_bit(RecomputeModule::layernorm);
        if (i % 4 == 3) plan.recompute_modules |= module_bit(RecomputeModule::mlp);  // every layer's MLP is dense
      }
      plan.loss = i % 2 == 0 ? Loss::eager : Loss::fused;
      const ScheduleKind kinds[] = {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::zb_h1,
                                    ScheduleKind::interleaved};
      plan.schedule = {kinds[rng() % 4], 1};
      if (plan.schedule.kind == ScheduleKind::interleaved) plan.schedule.virtual_stages = 2;
      if (quick_check(evaluator, plan) != Rejection::none) continue;
      const Explanation reference = explain_plan(model, cluster, {world, 0}, plan);
      ASSERT_TRUE(reference.memory) << plan.mesh.to_string();
      std::vector<StageMemory> stages;
      const TimeEstimate t = evaluator.evaluate(plan, &stages).time;
      // Time accounting holds for every plan, not only the default one.
      EXPECT_NEAR(t.compute_s + t.communication_exposed_s + t.bubble_s + t.optimizer_s, t.step_s, 1e-9 * t.step_s)
          << name << " " << plan.mesh.to_string() << " " << to_string(plan.schedule);
      EXPECT_LE(t.communication_exposed_s, t.communication_s * (1 + 1e-12) + 1e-15) << name << " " << plan.mesh.to_string() << " " << to_string(plan.recompute) << " " << to_string(plan.schedule) << " z" << plan.zero_stage << " b" << plan.micro_batch << " " << to_string(plan.cp_comm) << " sp" << plan.sequence_parallel;
      ASSERT_EQ(stages.size(), reference.memory->stages.size());
      for (std::size_t s = 0; s < stages.size(); ++s) {
        const auto& a = stages[s].memory;
        const auto& b = reference.memory->stages[s].memory;
        const double scale = std::max(1.0, b.total_bytes()) * 1e-9;
        EXPECT_NEAR(a.parameters_bytes, b.parameters_bytes, scale) << name << " " << plan.mesh.to_string();
        EXPECT_NEAR(a.gradients_bytes, b.gradients_bytes, scale) << name << " " << plan.mesh.to_string();
        EXPECT_NEAR(a.optimizer_bytes, b.optimizer_bytes, scale) << name << " " << plan.mesh.to_string();
        EXPECT_NEAR(a.activations_bytes, b.activations_bytes, scale)
            << name << " " << plan.mesh.to_string() << " " << to_string(plan.recompute) << " " << to_string(plan.schedule);
        EXPECT_NEAR(a.buffers_bytes, b.buffers_bytes, scale) << name << " " << plan.mesh.to_string();
        EXPECT_NEAR(a.loss_transient_bytes, b.loss_transient_bytes, scale) << name << " " << plan.mesh.to_string();
        EXPECT_NEAR(a.activation_gradient_bytes, b.activation_gradient_bytes, scale)
            << name << " " << plan.mesh.to_string() << " " << to_string(plan.attention);
        EXPECT_NEAR(a.total_bytes(), b.total_bytes(), scale) << name << " " << plan.mesh.to_string();
      }
      ++compared;
    }
  }
  EXPECT_GT(compared, 300);
}

TEST(Evaluator, QuickCheckAgreesWithValidation) {
  std::mt19937 rng(5);
  const auto cluster = must(load_cluster("dgx-a100"));
  int checked = 0;
  // 4092 tokens: tp x cp up to 4 divides them, 8 and more not (sequence parallelism's rule).
  for (const auto& [name, seq] : {std::pair{"gpt3-175b", 0}, std::pair{"llama2-70b", 0}, std::pair{"llama2-70b", 4092},
                                  std::pair{"mlp-fashion", 0}, std::pair{"resnet50", 0}}) {
    const auto model = must(load_model(name));
    const Evaluator evaluator(model, cluster, 64, seq > 0 ? seq : model.default_seq_len());
    const auto meshes = enumerate_meshes(64, space_with_cp(), 64);
    for (int i = 0; i < 400; ++i) {
      Plan plan;
      plan.seq_len = seq;
      plan.mesh = meshes[rng() % meshes.size()];
      plan.micro_batch = 1 + static_cast<std::int64_t>(rng() % 4);
      plan.global_batch = 64 + static_cast<std::int64_t>(rng() % 3) * 32;
      plan.sequence_parallel = rng() % 2 == 0;
      plan.schedule = rng() % 2 ? Schedule{ScheduleKind::interleaved, 2 + static_cast<std::int64_t>(rng() % 2)} : Schedule{};
      plan.cp_comm = static_cast<CpComm>(rng() % 3);
      const bool quick_ok = quick_check(evaluator, plan) == Rejection::none;
      const auto problems = validate_plan(model, evaluator.graph(), cluster, {64, 0}, plan);
      EXPECT_EQ(quick_ok, !has_errors(problems)) << name << " " << plan.mesh.to_string() << "\n" << messages(problems);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2000);
}

// The same for mixtures of experts: ep, experts in or out of tp (and values
// neither accepts), sequence parallelism on or off, shared experts of a width
// tp may not divide.
TEST(Evaluator, QuickCheckAgreesWithValidationOnMixturesOfExperts) {
  std::mt19937 rng(7);
  const auto cluster = must(load_cluster("dgx-h100"));
  ModelSpec model = must(load_model("qwen3-30b-a3b"));
  model.transformer.shared_expert_ffn = 1000;  // divisible by tp 1, 2, 4, 8, not 16
  SearchSpace space;
  space.axes = {Axis::dp, Axis::tp, Axis::pp, Axis::ep, Axis::cp};
  const Evaluator evaluator(model, cluster, 64, model.default_seq_len());
  const auto meshes = enumerate_meshes(64, space, 64);
  int checked = 0, accepted_out_of_tp = 0, accepted_pipelined_overlap = 0, refused_overlap = 0;
  for (int i = 0; i < 600; ++i) {
    Plan plan;
    plan.mesh = meshes[rng() % meshes.size()];
    plan.micro_batch = 1;
    plan.global_batch = 64;
    plan.sequence_parallel = rng() % 3 != 0;
    const std::int64_t tp = plan.mesh.size(Axis::tp);
    const std::int64_t choices[] = {0, 1, 2, tp};
    plan.expert_tensor_parallel = choices[rng() % 4];
    // Combined 1F1B, refused with pipeline stages unless interleaved, and with full recompute.
    plan.overlap_expert_parallel = rng() % 2 == 0;
    plan.recompute = rng() % 4 == 0 ? Recompute::full : Recompute::selective;
    if (plan.mesh.size(Axis::pp) > 1 && rng() % 2 == 0) plan.schedule = {ScheduleKind::interleaved, 2};
    const bool quick_ok = quick_check(evaluator, plan) == Rejection::none;
    const auto problems = validate_plan(model, evaluator.graph(), cluster, {64, 0}, plan);
    EXPECT_EQ(quick_ok, !has_errors(problems)) << plan.mesh.to_string() << " etp " << plan.expert_tensor_parallel
                                               << " sp " << plan.sequence_parallel << " overlap-ep "
                                               << plan.overlap_expert_parallel << "\n" << messages(problems);
    if (quick_ok && expert_split(plan).tokens > 1) ++accepted_out_of_tp;
    if (quick_ok && plan.overlap_expert_parallel && plan.mesh.size(Axis::pp) > 1) ++accepted_pipelined_overlap;
    if (!quick_ok && plan.overlap_expert_parallel && !expert_overlap_problem(plan).empty()) ++refused_overlap;
    ++checked;
  }
  EXPECT_EQ(checked, 600);
  EXPECT_GT(accepted_out_of_tp, 20);
  EXPECT_GT(accepted_pipelined_overlap, 5);
  EXPECT_GT(refused_overlap, 20);
}

// Rotary positions are priced as their elementwise pass over the local
// queries and keys (tp splits the heads): a layer of llama3-8b at tp=2 moves
// 2 x tokens x (q + kv) / tp elements more forward traffic than the same layer
// with learned positions, at the elementwise rate.
TEST(Evaluator, RotaryPositionsCostTheirElementwisePass) {
  auto model = must(load_model("llama3-8b"));
  const auto cluster = must(load_cluster("dgx-h100"));
  Plan plan = plan_with("tp=2", 1, 1);
  plan.seq_len = 4096;
  auto layer_cost = [&](const ModelSpec& m) {
    const Evaluator evaluator(m, cluster, 2, 4096);
    const ModelProfile& prof = evaluator.profile();
    const auto costs = evaluator.block_costs(plan, place_axes(evaluator.topology(), plan.mesh));
    return costs[static_cast<std::size_t>(prof.block_kind[static_cast<std::size_t>(prof.layer_blocks.front())])];
  };
  const BlockCost rotary = layer_cost(model);
  model.transformer.positions = Positions::learned;
  const BlockCost learned = layer_cost(model);
  const auto& t = model.transformer;
  const double q = static_cast<double>(t.heads * t.head_size()), kv = static_cast<double>(t.key_value_heads() * t.head_size());
  const std::size_t elementwise = static_cast<std::size_t>(StreamOp::elementwise);
  const double extra = 2 * 4096 * (q + kv) / 2 * 2;  // elements x bf16 bytes, over tp = 2
  EXPECT_NEAR(rotary.stream_bytes[elementwise] - learned.stream_bytes[elementwise], extra, 1e-9 * extra);
  const ComputeRates rates = rates_for(cluster.device, Precision::bf16);
  EXPECT_NEAR(rotary.stream_s[elementwise] - learned.stream_s[elementwise], stream_time_s(extra, rates, StreamOp::elementwise),
              1e-12);
  EXPECT_GT(rotary.forward_compute_s, learned.forward_compute_s);
}

// The fused loss (plan.hpp, Loss) keeps the logits in bf16 where the eager
// one keeps fp32 log-probabilities, and its backward writes one bf16
// gradient where the eager one holds two fp32 gradients beside the bf16 one:
// per logit 2 bytes fewer kept and 8 fewer at the loss's backward, in the
// evaluator and in the reference memory model alike; time unchanged.
// FP8 (gemm_in_fp8): a layer's four weight GEMMs of gpt2-124m (b 1, s 1024,
// no tp) run at the fp8 peak and cast, each per micro-batch, its input and
// weight forward and its output gradient backward, reading bf16 and writing
// two fp8 copies (4 bytes an element): forward (1024 x (768 x 3 + 3072) +
// 768 x 2304 + 768 x 768 + 2 x 768 x 3072) x 4 = 50,331,648 bytes, backward
// 1024 x (2304 + 768 + 3072 + 768) x 4 = 28,311,552, at the device's copy
// bandwidth. The LM head and the unfused attention core stay bf16: the same
// seconds as in the bf16 plan.
TEST(Evaluator, Fp8RunsTheLayersWeightGemmsAndCastsThem) {
  const auto model = must(load_model("gpt2-124m"));
  const auto cluster = must(load_cluster("dgx-h100"));
  const Evaluator evaluator(model, cluster, 1, 1024);
  const ModelProfile& prof = evaluator.profile();
  Plan plan = plan_with("dp=1", 1, 1);
  plan.attention = Attention::unfused;
  const auto bf16 = costs_at(evaluator, plan, Precision::bf16), fp8 = costs_at(evaluator, plan, Precision::fp8);
  const std::size_t layer = first_layer_kind(prof);
  EXPECT_DOUBLE_EQ(fp8[layer].fp8_cast_bytes.forward, 50331648.0);
  EXPECT_DOUBLE_EQ(fp8[layer].fp8_cast_bytes.backward, 28311552.0);
  const ComputeRates rates = rates_for(cluster.device, Precision::fp8);
  EXPECT_NEAR(fp8[layer].fp8_cast_forward_s, 50331648.0 / rates.memory_bytes_per_s, 1e-15);
  EXPECT_NEAR(fp8[layer].fp8_cast_backward_s, 28311552.0 / rates.memory_bytes_per_s, 1e-15);
  int weight_gemms = 0, core_gemms = 0;
  for (std::size_t k = 0; k < prof.kinds.size(); ++k) {
    ASSERT_EQ(fp8[k].gemms.size(), bf16[k].gemms.size());
    const bool is_layer = prof.kind_role[k] == BlockKind::layer;
    if (!is_layer) {
      EXPECT_EQ(fp8[k].fp8_cast_bytes.forward + fp8[k].fp8_cast_bytes.backward, 0.0);
    }
    for (std::size_t g = 0; g < fp8[k].gemms.size(); ++g) {
      const GemmCost &a = fp8[k].gemms[g], &b = bf16[k].gemms[g];
      if (is_layer && a.has_weights) {
        ++weight_gemms;
        EXPECT_LT(a.forward_s, b.forward_s);
        EXPECT_LT(a.weight_gradient_s, b.weight_gradient_s);
      } else {
        core_gemms += a.core_attention ? 1 : 0;
        EXPECT_EQ(a.forward_s, b.forward_s) << "block kind " << k << ", GEMM " << g;
        EXPECT_EQ(a.input_gradient_s, b.input_gradient_s);
      }
    }
  }
  EXPECT_EQ(weight_gemms, 4);
  EXPECT_EQ(core_gemms, 2);
  // At b 1 the host's launches bound both plans' layer (h100-sxm: 26 us a kernel), the fp8 one with its 8
  // cast kernels more forward and 4 backward.
  const double launch_s = cluster.device.launch_overhead_s;
  ASSERT_GT(launch_s, 0);
  EXPECT_NEAR(fp8[layer].forward_compute_s - bf16[layer].forward_compute_s, 8 * launch_s, 1e-12);
  EXPECT_NEAR(fp8[layer].backward_compute_s - bf16[layer].backward_compute_s, 4 * launch_s, 1e-12);
  // Without the floor the casts are in the layer's compute: the bf16 plan's, with the fp8 GEMMs' seconds in
  // place of the bf16 ones, and the casts.
  ClusterSpec unbound = cluster;
  unbound.device.launch_overhead_s = 0;
  const Evaluator device_only(model, unbound, 1, 1024);
  const BlockCost a = costs_at(device_only, plan, Precision::fp8)[layer];
  const BlockCost b = costs_at(device_only, plan, Precision::bf16)[layer];
  double forward = b.forward_compute_s + a.fp8_cast_forward_s, backward = b.backward_compute_s + a.fp8_cast_backward_s;
  for (std::size_t g = 0; g < a.gemms.size(); ++g) {
    forward += a.gemms[g].forward_s - b.gemms[g].forward_s;
    backward += a.gemms[g].input_gradient_s + a.gemms[g].weight_gradient_s - b.gemms[g].input_gradient_s - b.gemms[g].weight_gradient_s;
  }
  EXPECT_NEAR(a.forward_compute_s, forward, 1e-15);
  EXPECT_NEAR(a.backward_compute_s, backward, 1e-15);
  // explain's "fp8 casts" row (ComputePart): the casts, and none in the bf16 plan.
  EXPECT_EQ(a.compute_parts_s[static_cast<std::size_t>(ComputePart::fp8_cast_forward)], a.fp8_cast_forward_s);
  EXPECT_EQ(a.compute_parts_s[static_cast<std::size_t>(ComputePart::fp8_cast_backward)], a.fp8_cast_backward_s);
  EXPECT_EQ(b.compute_parts_s[static_cast<std::size_t>(ComputePart::fp8_cast_forward)], 0.0);
}

// Transformer Engine's chunked tp overlap (Plan::tp_comm_overlap), pair by
// pair on gpt2-124m over tp 4 on H100s (b 8, s 1024: each reduce-scatter and
// all-gather 31.6 us on NVLink), each pipelined GEMM run as 4 GEMMs of 2048
// rows at the device's curve. Forward, pipelined in 4 chunks: the
// reduce-scatters after proj and fc2 beside 3/4 of those GEMMs, the all-
// gathers before fc1 and qkv beside 3/4 of theirs. Backward: each column
// GEMM's input-gradient reduce-scatter beside its whole weight gradient and
// its input's all-gather beside its whole input gradient (bulk), and the
// output gradient's all-gather before proj and fc2 beside 3/4 of their input
// gradients. fc1's weight gradient (45.7 us) hides its reduce-scatter whole;
// every other pair exposes something. GPT-3 175B over tp 2 hides every
// pair. Totals are the same as without.
TEST(Evaluator, TpCommOverlapExposesWhatEachGemmCannotHide) {
  const auto cluster = must(load_cluster("dgx-h100"));
  const auto small = must(load_model("gpt2-124m"));
  const Evaluator evaluator(small, cluster, 4, 1024);
  Plan plan = plan_with("tp=4", 8, 8);
  plan.sequence_parallel = true;
  const std::size_t layer = first_layer_kind(evaluator.profile());
  const BlockCost plain = costs_at(evaluator, plan, Precision::bf16)[layer];
  plan.tp_comm_overlap = true;
  const BlockCost chunked = costs_at(evaluator, plan, Precision::bf16)[layer];
  std::vector<const GemmCost*> weights;  // qkv, proj, fc1, fc2
  for (const GemmCost& g : chunked.gemms) {
    if (g.has_weights) weights.push_back(&g);
  }
  ASSERT_EQ(weights.size(), 4u);
  const GemmCost &qkv = *weights[0], &proj = *weights[1], &fc1 = *weights[2], &fc2 = *weights[3];
  // A pipelined pair's GEMM runs as 4 GEMMs of a quarter of the rows: every forward, and the row GEMMs'
  // (proj, fc2) input gradients; the bulk pairs' GEMMs run whole.
  const ComputeRates rates = rates_for(cluster.device, Precision::bf16);
  auto quarters = [&](const LocalGemm& s, bool gradient) {
    return gradient ? 4 * gemm_time_s(s.rows / 4, s.k, s.n, s.batch, 2, rates) : 4 * gemm_time_s(s.rows / 4, s.n, s.k, s.batch, 2, rates);
  };
  std::size_t w = 0;
  for (std::size_t g = 0; g < plain.gemms.size(); ++g) {
    if (!plain.gemms[g].has_weights) continue;
    const GemmCost& before = plain.gemms[g];
    const GemmCost& after = *weights[w++];
    EXPECT_NEAR(before.forward_s, gemm_time_s(before.shape.rows, before.shape.n, before.shape.k, 1, 2, rates), 1e-18);
    EXPECT_NEAR(after.forward_s, quarters(after.shape, false), 1e-18);
    EXPECT_GE(after.forward_s, before.forward_s);  // no faster in pieces; as fast on the curve's plateau
    EXPECT_DOUBLE_EQ(after.weight_gradient_s, before.weight_gradient_s);
    const bool row = &after == &proj || &after == &fc2;
    EXPECT_NEAR(after.input_gradient_s, row ? quarters(after.shape, true) : before.input_gradient_s, 1e-18);
  }
  EXPECT_GT(qkv.forward_s, plain.gemms[0].forward_s);  // 2048 x 2304 x 768 sits below the plateau
  // Two all-reduces a pass (a reduce-scatter and an all-gather each, ring) and the backward's two all-gathers.
  ASSERT_EQ(plain.collectives.size(), 3u);
  ASSERT_EQ(plain.collectives[0].count, 2);
  const double half = plain.collectives[0].seconds / 4;  // one reduce-scatter or all-gather
  EXPECT_NEAR(plain.collectives[2].seconds / 2, half, 1e-18);
  EXPECT_NEAR(half, 31.6e-6, 0.1e-6);
  auto exposed = [&](double gemm_s) { return std::max(0.0, half - gemm_s); };
  const double share = 3.0 / 4;
  EXPECT_DOUBLE_EQ(chunked.tp_forward_total_s, plain.tp_forward_s);
  EXPECT_DOUBLE_EQ(chunked.tp_backward_total_s, plain.tp_backward_total_s);
  EXPECT_NEAR(chunked.tp_forward_s,
              exposed(share * proj.forward_s) + exposed(share * fc1.forward_s) + exposed(share * fc2.forward_s) +
                  exposed(share * qkv.forward_s),
              1e-18);
  EXPECT_EQ(exposed(fc1.weight_gradient_s), 0);
  EXPECT_NEAR(chunked.tp_backward_s,
              exposed(qkv.weight_gradient_s) + exposed(fc1.weight_gradient_s) + exposed(share * proj.input_gradient_s) +
                  exposed(share * fc2.input_gradient_s) + exposed(qkv.input_gradient_s) + exposed(fc1.input_gradient_s),
              1e-18);
  EXPECT_GT(chunked.tp_forward_s, 0);
  EXPECT_LT(chunked.tp_forward_s, plain.tp_forward_s);
  EXPECT_LT(chunked.tp_backward_s, plain.tp_backward_s);
  // The record says what the simulator replays: the exposed parts.
  double forward_exposed = 0, backward_exposed = 0;
  for (const BlockCollective& e : chunked.collectives) {
    EXPECT_EQ(e.hidden_under, HiddenUnder::gemm);
    (e.pass == Pass::forward ? forward_exposed : backward_exposed) += e.exposed_s;
  }
  EXPECT_DOUBLE_EQ(forward_exposed, chunked.tp_forward_s);
  EXPECT_DOUBLE_EQ(backward_exposed, chunked.tp_backward_s);

  const auto large = must(load_model("gpt3-175b"));
  const Evaluator wide(large, cluster, 2, 2048);
  Plan wide_plan = plan_with("tp=2", 1, 1);
  wide_plan.sequence_parallel = wide_plan.tp_comm_overlap = true;
  const BlockCost hidden = costs_at(wide, wide_plan, Precision::bf16)[first_layer_kind(wide.profile())];
  EXPECT_GT(hidden.tp_forward_total_s, 0);
  EXPECT_GT(hidden.tp_backward_total_s, 0);
  EXPECT_EQ(hidden.tp_forward_s, 0);
  EXPECT_EQ(hidden.tp_backward_s, 0);
}

// Megatron-Core's overlapped pipeline transfers (Plan::overlap_p2p_comm):
// Llama 3 8B over pp 4, interleaved:2, 8 micro-batches. The same transfers
// (2 x 8 x 2 chunk sends and receives a stage), of which only the fill's and
// the drain's, 3 chunk transfers each, stay exposed: 6 / 32 of them. The
// compute is the same and the step shorter by the rest, less the bubble's
// share of the transfers the passes no longer carry.
TEST(Evaluator, OverlappedPipelineTransfersExposeTheFillAndDrain) {
  const auto model = must(load_model("llama3-8b"));
  const auto cluster = must(load_cluster("dgx-h100"));
  const Evaluator evaluator(model, cluster, 4, 4096);
  Plan plan = plan_with("pp=4", 1, 8);
  plan.schedule = *parse_schedule("interleaved:2");
  const auto placements = place_axes(evaluator.topology(), plan.mesh);
  const TimeEstimate plain = evaluator.evaluate(plan, placements).time;
  plan.overlap_p2p_comm = true;
  const TimeEstimate overlapped = evaluator.evaluate(plan, placements).time;
  const auto pp = static_cast<std::size_t>(Axis::pp);
  const double total = plain.axis_communication_s[pp];
  ASSERT_GT(total, 0);
  EXPECT_DOUBLE_EQ(plain.axis_exposed_s[pp], total);
  EXPECT_DOUBLE_EQ(overlapped.axis_communication_s[pp], total);
  EXPECT_NEAR(overlapped.axis_exposed_s[pp], total * 6 / 32, 1e-12 * total);
  EXPECT_DOUBLE_EQ(overlapped.compute_s, plain.compute_s);
  // The passes lose their transfers (per micro-batch: total / 8 on each stage); the bubble scales with them.
  const double per_pass = total / 8;
  EXPECT_NEAR(overlapped.stage_forward_s + overlapped.stage_backward_s, plain.stage_forward_s + plain.stage_backward_s - per_pass,
              1e-12 * plain.step_s);
  EXPECT_NEAR(plain.step_s - overlapped.step_s,
              total - overlapped.axis_exposed_s[pp] + (plain.bubble_s - overlapped.bubble_s), 1e-9 * plain.step_s);
  EXPECT_GT(plain.bubble_s, overlapped.bubble_s);
  // The 1F1B schedule does not run it (validation refuses it); the evaluator leaves its transfers on the passes.
  plan.schedule = *parse_schedule("1f1b");
  EXPECT_DOUBLE_EQ(evaluator.evaluate(plan, placements).time.axis_exposed_s[pp],
                   evaluator.evaluate(plan, placements).time.axis_communication_s[pp]);
}

// ZeRO-1's gather of the updated weights under the next step's first forward
// (Plan::overlap_zero_gather): Llama 3 8B over dp 16 (two nodes), its bf16
// weights gathered in the gradients' 25 MiB buckets, each bucket's gather
// started as the previous bucket's layers start. Over 10 GbE a bucket's
// layers compute for less than its gather takes: the first bucket and each
// later one's excess are exposed, g + (B - 1) (g - F / B). Over DGX H100's
// InfiniBand they compute longer: only the first bucket is.
TEST(Evaluator, OverlappedZeroGatherExposesWhatTheFirstForwardCannotHide) {
  const auto model = must(load_model("llama3-8b"));
  for (const char* network : {"ethernet-10g", "dgx-h100"}) {
    SCOPED_TRACE(network);
    const auto cluster = must(load_cluster(network));
    const Evaluator evaluator(model, cluster, 16, 4096);
    const bool slow = std::string(network) == "ethernet-10g";
    Plan plan = plan_with("dp=16", 1, 16);
    plan.zero_stage = 1;
    const auto placements = place_axes(evaluator.topology(), plan.mesh);
    const AxisPlacement& dp = placements.front();
    ASSERT_EQ(dp.axis, Axis::dp);
    auto gather_s = [&](double bytes) {
      return collective_time(Collective::all_gather, bytes, dp.size, dp.bandwidth_bytes_per_s, dp.latency_s).time_s;
    };
    std::vector<StageMemory> plain_stages, overlapped_stages;
    const TimeEstimate plain = evaluator.evaluate(plan, placements, &plain_stages).time;
    plan.overlap_zero_gather = true;
    ASSERT_TRUE(zero_gather_overlap_applies(plan));
    const TimeEstimate overlapped = evaluator.evaluate(plan, placements, &overlapped_stages).time;

    const double parameter_bytes = 2 * plain_stages[0].parameters_on_device;  // bf16 weights, whole under ZeRO-1
    const GradientBuckets buckets = gradient_buckets(parameter_bytes, plan.gradient_bucket_bytes);  // bf16 gradients
    const double b = static_cast<double>(buckets.count);
    ASSERT_GT(b, 100);
    const double whole = gather_s(parameter_bytes), each = gather_s(parameter_bytes / b);
    const double bucket_forward = overlapped.stage_forward_s / b;
    const double exposed = each + (b - 1) * std::max(0.0, each - bucket_forward);
    if (slow) {
      EXPECT_GT(each, bucket_forward);
      EXPECT_GT(exposed, 0.5 * whole);
    } else {
      EXPECT_LT(each, bucket_forward);
      EXPECT_DOUBLE_EQ(exposed, each);
    }
    EXPECT_NEAR(plain_stages[0].gather_after_step_exposed_s, whole, 1e-12 * whole);
    EXPECT_NEAR(overlapped_stages[0].gather_after_step_exposed_s, exposed, 1e-12 * whole);
    EXPECT_DOUBLE_EQ(overlapped.compute_s, plain.compute_s);
    // All of the gathers stay dp's communication (one latency per bucket now); the step loses what is hidden.
    const auto dp_axis = static_cast<std::size_t>(Axis::dp);
    EXPECT_NEAR(overlapped.axis_communication_s[dp_axis] - plain.axis_communication_s[dp_axis], b * each - whole,
                1e-9 * whole);
    EXPECT_NEAR(plain.axis_exposed_s[dp_axis] - overlapped.axis_exposed_s[dp_axis], whole - exposed, 1e-9 * whole);
    EXPECT_NEAR(plain.step_s - overlapped.step_s, whole - exposed, 1e-9 * plain.step_s);
  }
  // ZeRO-0 gathers nothing after the step: the switch changes nothing.
  const auto cluster = must(load_cluster("dgx-h100"));
  const Evaluator evaluator(model, cluster, 16, 4096);
  Plan zero0 = plan_with("dp=16", 1, 16);
  const auto placements = place_axes(evaluator.topology(), zero0.mesh);
  const double step = evaluator.evaluate(zero0, placements).time.step_s;
  zero0.overlap_zero_gather = true;
  EXPECT_FALSE(zero_gather_overlap_applies(zero0));
  EXPECT_EQ(evaluator.evaluate(zero0, placements).time.step_s, step);
  // Megatron-LM refuses --overlap-param-gather without --overlap-grad-reduce; so does validation.
  Plan unoverlapped = zero0;
  unoverlapped.zero_stage = 1;
  unoverlapped.overlap_gradient_reduction = false;
  bool refused = false;
  for (const Problem& p : validate_plan(model, evaluator.graph(), cluster, {16, 0}, unoverlapped)) {
    refused = refused || (p.severity == Severity::error && p.where == "overlap_zero_gather");
  }
  EXPECT_TRUE(refused);
}

// An fp8 plan keeps the MoE router in bf16 (Op::keeps_precision: DeepSeek-V3's report, Sec. 3.3.1, keeps its
// "MoE gating modules" in BF16 or FP32; Megatron-Core's router is not a Transformer Engine module): it
// casts nothing and takes the bf16 plan's seconds; the experts' and attention's weight GEMMs run in fp8.
TEST(Evaluator, Fp8KeepsTheRouterInBf16) {
  const auto model = must(load_model("mixtral-8x7b"));
  const auto cluster = must(load_cluster("dgx-h100"));
  const Evaluator evaluator(model, cluster, 8, 4096);
  const ModelProfile& prof = evaluator.profile();
  Plan plan = plan_with("ep=8", 1, 8);
  plan.seq_len = 4096;
  const std::size_t layer = first_layer_kind(prof);
  const BlockCost fp8 = costs_at(evaluator, plan, Precision::fp8)[layer];
  const BlockCost bf16 = costs_at(evaluator, plan, Precision::bf16)[layer];
  const LayerGraph& graph = evaluator.graph();
  std::size_t g = 0, routers = 0, in_fp8 = 0;
  for (OpId id : graph.blocks[static_cast<std::size_t>(prof.layer_blocks.front())].ops) {
    const Op& op = graph.op(id);
    if (!op.gemm_like()) continue;
    const GemmCost &a = fp8.gemms.at(g), &b = bf16.gemms.at(g);
    ++g;
    if (op.name.ends_with("mlp.router")) {
      ++routers;
      EXPECT_EQ(a.element_bytes, 2.0);
      EXPECT_EQ(a.forward_s, b.forward_s);
    } else if (op.has_weights()) {
      ++in_fp8;
      EXPECT_EQ(a.element_bytes, 1.0) << op.name;
    }
  }
  EXPECT_EQ(routers, 1u);
  EXPECT_GE(in_fp8, 4u);
  EXPECT_GT(fp8.fp8_cast_bytes.forward, 0);
}

// An fp8 plan gathers its sharded weights' bf16 copy, as bf16 does (B_w' = 2; the forward's casts make the
// fp8 copy), and its optimizer writes that copy: fsdp's traffic and the optimizer step equal bf16's, while
// the memory still holds the fp8 copy beside it (B_w = 3).
TEST(Evaluator, Fp8GathersAndWritesTheBf16CopyOfTheWeights) {
  const auto model = must(load_model("llama3-8b"));
  const auto cluster = must(load_cluster("dgx-h100"));
  const Evaluator evaluator(model, cluster, 8, 8192);
  Plan plan = plan_with("fsdp=8", 2, 16);
  plan.seq_len = 8192;
  plan.recompute = Recompute::selective_op;
  auto estimate = [&](Precision precision) {
    plan.precision = precision;
    return evaluator.evaluate(plan);
  };
  const PlanEstimate fp8 = estimate(Precision::fp8), bf16 = estimate(Precision::bf16);
  const auto fsdp = static_cast<std::size_t>(Axis::fsdp);
  EXPECT_GT(bf16.time.axis_communication_s[fsdp], 0);
  EXPECT_DOUBLE_EQ(fp8.time.axis_communication_s[fsdp], bf16.time.axis_communication_s[fsdp]);
  EXPECT_DOUBLE_EQ(fp8.time.optimizer_s, bf16.time.optimizer_s);
  EXPECT_NEAR(fp8.worst_memory.parameters_bytes, 1.5 * bf16.worst_memory.parameters_bytes,
              1e-9 * bf16.worst_memory.parameters_bytes);
}

TEST(Evaluator, FusedLossKeepsTheLogitsInTheirOwnDtype) {
  const auto model = must(load_model("llama3.2-1b"));
  const auto cluster = must(load_cluster("dgx-h200"));
  for (const char* mesh : {"dp=1", "tp=2"}) {
    Plan plan = plan_with(mesh, 8, 8);
    plan.seq_len = 2048;
    plan.recompute = Recompute::none;
    plan.loss = Loss::eager;
    const std::int64_t world = plan.mesh.world_size();
    const Evaluator evaluator(model, cluster, world, 2048);
    const PlanEstimate eager = evaluator.evaluate(plan);
    const Explanation eager_reference = explain_plan(model, cluster, {world, 0}, plan);
    plan.loss = Loss::fused;
    const PlanEstimate fused = evaluator.evaluate(plan);
    const Explanation fused_reference = explain_plan(model, cluster, {world, 0}, plan);
    // Logits on one device: 8 x 2048 tokens x the vocabulary over tp.
    const double logits = 8.0 * 2048 * static_cast<double>(model.transformer.vocab) / static_cast<double>(plan.mesh.size(Axis::tp));
    for (const auto& [e, f] : {std::pair{eager.worst_memory, fused.worst_memory},
                               std::pair{eager_reference.memory->worst().memory, fused_reference.memory->worst().memory}}) {
      EXPECT_NEAR(e.activations_bytes - f.activations_bytes, 2 * logits, 1e-9 * e.activations_bytes) << mesh;
      EXPECT_NEAR(e.loss_transient_bytes, 10 * logits, 1e-9 * e.loss_transient_bytes) << mesh;
      EXPECT_NEAR(f.loss_transient_bytes, 2 * logits, 1e-9 * f.loss_transient_bytes) << mesh;
      EXPECT_EQ(e.parameters_bytes, f.parameters_bytes);
    }
    EXPECT_EQ(eager.time.step_s, fused.time.step_s) << mesh;
  }
}

// Context parallelism's three ways of moving keys and values (plan.hpp,
// CpComm), priced from the collective rules on the cp axis's link: ring
// attention hides under the attention; all-gather exposes a gather forward and
// a gather and a reduce-scatter backward; all-to-all exposes q, k, v and the
// output regrouped each way.
TEST(Evaluator, ContextParallelCommunicationByKind) {
  const auto model = must(load_model("llama3-8b"));
  const auto cluster = must(load_cluster("dgx-h100"));
  const Evaluator evaluator(model, cluster, 8, 8192);
  Plan plan = plan_with("cp=8", 1, 4);
  plan.seq_len = 8192;
  const auto placements = place_axes(evaluator.topology(), plan.mesh);
  const AxisPlacement* cp = nullptr;
  for (const AxisPlacement& p : placements) cp = p.axis == Axis::cp ? &p : cp;
  ASSERT_NE(cp, nullptr);
  auto time = [&](Collective c, double bytes) {
    return collective_time(c, bytes, 8, cp->bandwidth_bytes_per_s, cp->latency_s).time_s;
  };
  const auto& t = model.transformer;
  const double tokens = 8192.0 / 8, bytes = 2;  // bf16
  const double kv = tokens * static_cast<double>(t.key_value_heads() * t.head_size()) * bytes;
  const double q = tokens * static_cast<double>(t.heads * t.head_size()) * bytes;
  const double layers = static_cast<double>(t.layers), m = 4;
  const std::size_t axis = static_cast<std::size_t>(Axis::cp);

  const TimeEstimate ring = evaluator.evaluate(plan).time;
  EXPECT_GT(ring.axis_communication_s[axis], 0);
  EXPECT_LT(ring.axis_exposed_s[axis], 0.05 * ring.axis_communication_s[axis]);  // 1024 tokens' attention per step covers it

  plan.cp_comm = CpComm::all_gather;
  const TimeEstimate gathered = evaluator.evaluate(plan).time;
  const double per_layer = 2 * time(Collective::all_gather, 2 * kv * 8) + time(Collective::reduce_scatter, 2 * kv * 8);
  EXPECT_NEAR(gathered.axis_exposed_s[axis], m * layers * per_layer, 1e-9 * gathered.axis_exposed_s[axis]);
  EXPECT_DOUBLE_EQ(gathered.axis_exposed_s[axis], gathered.axis_communication_s[axis]);
  EXPECT_NEAR(gathered.step_s - ring.step_s, gathered.axis_exposed_s[axis] - ring.axis_exposed_s[axis], 1e-9 * ring.step_s);

  plan.cp_comm = CpComm::all_to_all;
  const TimeEstimate ulysses = evaluator.evaluate(plan).time;
  const double regroup = 2 * time(Collective::all_to_all, q) + 2 * time(Collective::all_to_all, kv);
  EXPECT_NEAR(ulysses.axis_exposed_s[axis], m * layers * 2 * regroup, 1e-9 * ulysses.axis_exposed_s[axis]);

  // Ulysses gives each cp rank a group of heads: 32 heads over tp 8 leave 4, which cp 8 cannot split.
  Plan split = plan_with("cp=8,tp=8", 1, 1);
  split.cp_comm = CpComm::all_to_all;
  const Evaluator wide(model, cluster, 64, 8192);
  EXPECT_EQ(quick_check(wide, split), Rejection::cp_heads);
  const auto problems = validate_plan(model, wide.graph(), cluster, {64, 0}, split);
  bool said = false;
  for (const Problem& p : problems) said = said || (p.severity == Severity::error && p.where == "cp_comm");
  EXPECT_TRUE(said) << messages(problems);
  split.cp_comm = CpComm::ring;
  EXPECT_EQ(quick_check(wide, split), Rejection::none);
}

// Gradients kept and reduced in fp32 (Megatron-LM's bf16 default, torchtitan's
// mixed_precision_reduce) cost 4 bytes per parameter in memory and on the wire:
// the dp all-reduce of one bucket is the collective rule on the gradient bytes
// the memory model holds, both ways.
TEST(Evaluator, Fp32GradientsDoubleTheGradientBytesInMemoryAndOnTheWire) {
  const auto model = must(load_model("gpt2-350m"));
  const auto cluster = must(load_cluster("dgx-h100"));
  const Evaluator evaluator(model, cluster, 8, 1024);
  Plan plan = plan_with("dp=8", 1, 16);
  plan.gradient_bucket_bytes = 1e15;  // one bucket: one collective to compare with
  const auto placements = place_axes(evaluator.topology(), plan.mesh);
  const AxisPlacement& dp = placements.front();
  ASSERT_EQ(dp.axis, Axis::dp);
  const std::size_t axis = static_cast<std::size_t>(Axis::dp);
  auto all_reduce = [&](double bytes) {
    return collective_time(Collective::all_reduce, bytes, 8, dp.bandwidth_bytes_per_s, dp.latency_s).time_s;
  };
  const PlanEstimate half = evaluator.evaluate(plan);
  plan.fp32_gradients = true;
  const PlanEstimate full = evaluator.evaluate(plan);
  EXPECT_DOUBLE_EQ(full.worst_memory.gradients_bytes, 2 * half.worst_memory.gradients_bytes);
  EXPECT_DOUBLE_EQ(full.worst_memory.parameters_bytes, half.worst_memory.parameters_bytes);
  EXPECT_DOUBLE_EQ(full.worst_memory.optimizer_bytes, half.worst_memory.optimizer_bytes);
  EXPECT_NEAR(half.time.axis_communication_s[axis], all_reduce(half.worst_memory.gradients_bytes),
              1e-12 * half.time.axis_communication_s[axis]);
  EXPECT_NEAR(full.time.axis_communication_s[axis], all_reduce(full.worst_memory.gradients_bytes),
              1e-12 * full.time.axis_communication_s[axis]);
  // The optimizer reads the wider gradients too.
  EXPECT_GT(full.time.optimizer_s, half.time.optimizer_s);

  // Sharded: each rank keeps 1/8 of the fp32 gradients, reduce-scattered.
  Plan sharded = plan_with("fsdp=8", 1, 16);
  const PlanEstimate sharded_half = evaluator.evaluate(sharded);
  sharded.fp32_gradients = true;
  const PlanEstimate sharded_full = evaluator.evaluate(sharded);
  EXPECT_DOUBLE_EQ(sharded_full.worst_memory.gradients_bytes, 2 * sharded_half.worst_memory.gradients_bytes);
  EXPECT_NEAR(sharded_full.worst_memory.gradients_bytes, full.worst_memory.gradients_bytes / 8, 1e-9 * full.worst_memory.gradients_bytes);
  const std::size_t fsdp = static_cast<std::size_t>(Axis::fsdp);
  EXPECT_GT(sharded_full.time.axis_communication_s[fsdp], sharded_half.time.axis_communication_s[fsdp]);
}

// Adam's moments in bf16 (Megatron-Core's precision-aware optimizer,
// DeepSeek-V3): 4 bytes per parameter of optimizer state fewer, 8 of 12 under
// bf16 and 4 of 8 under fp32, sharded as before; the optimizer step moves
// less; nothing else changes.
TEST(Evaluator, Bf16MomentsTakeFourBytesOffTheOptimizerState) {
  const auto model = must(load_model("gpt2-350m"));
  const auto cluster = must(load_cluster("dgx-h100"));
  const Evaluator evaluator(model, cluster, 8, 1024);
  for (const Precision precision : {Precision::bf16, Precision::fp32}) {
    for (const char* mesh : {"dp=8", "fsdp=8"}) {
      Plan plan = plan_with(mesh, 1, 16);
      plan.precision = precision;
      plan.zero_stage = 1;
      const PlanEstimate fp32 = evaluator.evaluate(plan);
      plan.bf16_moments = true;
      const PlanEstimate bf16 = evaluator.evaluate(plan);
      const double k = precision == Precision::bf16 ? 12 : 8;
      EXPECT_NEAR(bf16.worst_memory.optimizer_bytes, fp32.worst_memory.optimizer_bytes * (k - 4) / k,
                  1e-12 * fp32.worst_memory.optimizer_bytes) << mesh;
      EXPECT_EQ(bf16.worst_memory.parameters_bytes, fp32.worst_memory.parameters_bytes) << mesh;
      EXPECT_EQ(bf16.worst_memory.gradients_bytes, fp32.worst_memory.gradients_bytes) << mesh;
      EXPECT_EQ(bf16.worst_memory.activations_bytes, fp32.worst_memory.activations_bytes) << mesh;
      EXPECT_LT(bf16.time.optimizer_s, fp32.time.optimizer_s) << mesh;
      EXPECT_EQ(bf16.time.compute_s, fp32.time.compute_s) << mesh;
    }
  }
}

// Megatron-Core's --recompute-modules (Plan::recompute_modules) on a
// mixture of experts (Qwen3-30B-A3B: every layer routed, no shared experts)
// under tp 2 with sequence parallelism: layernorm drops the two pre-norms'
// outputs each layer keeps for the next GEMM (the attention's input and the
// router's, s h each, split over tp by sequence parallelism) and repeats the
// norms' forward; moe_act drops the experts' activation output (k s f on
// this rank's experts) and repeats the activation. Each module's repeat is
// the record's own forward time of those passes, and nothing else moves.
TEST(Evaluator, RecomputeModulesDropTheirTensorsAndRepeatTheirForward) {
  const auto model = must(load_model("qwen3-30b-a3b"));
  const auto cluster = must(load_cluster("dgx-h100"));
  const Evaluator evaluator(model, cluster, 8, 4096);
  Plan plan = plan_with("ep=4,tp=2", 1, 4);
  plan.sequence_parallel = true;
  plan.recompute = Recompute::selective;  // fused attention: the attention core repeats nothing
  const auto placements = place_axes(evaluator.topology(), plan.mesh);
  const int layer = evaluator.profile().block_kind[static_cast<std::size_t>(evaluator.profile().layer_blocks.front())];
  auto layer_cost = [&](RecomputeModules modules) {
    Plan p = plan;
    p.recompute_modules = modules;
    return evaluator.block_costs(p, placements)[static_cast<std::size_t>(layer)];
  };
  const BlockCost core = layer_cost(kDefaultRecomputeModules);
  const BlockCost norms = layer_cost(module_bit(RecomputeModule::layernorm));
  const BlockCost act = layer_cost(module_bit(RecomputeModule::moe_act));
  const BlockCost both = layer_cost(module_bit(RecomputeModule::layernorm) | module_bit(RecomputeModule::moe_act));
  const double s = 4096, h = 2048, bytes = 2;
  EXPECT_NEAR(core.activation_bytes - norms.activation_bytes, 2 * s * h * bytes / 2, 1e-6 * core.activation_bytes);
  // 128 experts over ep 4 x tp 2 ranks' tokens (this rank's 1/ep of the routed rows come from every
  // rank of the group): k s f of the whole group's tokens over ep, f split over tp.
  const double top_k = 8, ffn = 768;
  EXPECT_NEAR(core.activation_bytes - act.activation_bytes, top_k * s * ffn / 2 * bytes, 1e-6 * core.activation_bytes);
  EXPECT_NEAR(core.activation_bytes - both.activation_bytes,
              (core.activation_bytes - norms.activation_bytes) + (core.activation_bytes - act.activation_bytes),
              1e-9 * core.activation_bytes);
  const auto norm = static_cast<std::size_t>(StreamOp::norm), activation = static_cast<std::size_t>(StreamOp::activation);
  EXPECT_GT(core.stream_s[norm], 0);
  EXPECT_NEAR(norms.backward_compute_s - core.backward_compute_s, core.stream_s[norm], 1e-12);
  EXPECT_NEAR(act.backward_compute_s - core.backward_compute_s, core.stream_s[activation], 1e-12);
  EXPECT_EQ(norms.forward_compute_s, core.forward_compute_s);
  EXPECT_EQ(norms.full_activation_bytes, core.full_activation_bytes);
  EXPECT_NEAR(norms.compute_parts_s[static_cast<std::size_t>(ComputePart::recompute)], core.stream_s[norm], 1e-12);
  // The plan's time and hardware FLOPs follow: the step is longer, the norms and the activation
  // are memory-bound (no GEMM FLOPs repeated).
  Plan with_modules = plan;
  with_modules.recompute_modules = module_bit(RecomputeModule::layernorm) | module_bit(RecomputeModule::moe_act);
  const PlanEstimate before = evaluator.evaluate(plan), after = evaluator.evaluate(with_modules);
  EXPECT_GT(after.time.step_s, before.time.step_s);
  EXPECT_LT(after.worst_memory.activations_bytes, before.worst_memory.activations_bytes);
  EXPECT_EQ(after.time.hardware_flops_per_step, before.time.hardware_flops_per_step);
}

// Megatron-Core's whole-module checkpoints. `mlp` on Llama 3 8B (tp 2, sequence
// parallelism): a layer keeps its MLP's input (the second norm's output) and
// drops the rest inside, the gate and up projections and the down
// projection's input, 3 s f / tp; its backward runs the MLP's forward again
// (both GEMMs and the activation) and one more all-reduce's volume of s h
// over tp (the down projection's reduce-scatter and the gather before the
// up projection). `shared_experts` on a mixture with shared experts drops
// the same three of the shared width. Neither touches the attention; the
// hardware FLOPs grow by the repeated GEMMs.
TEST(Evaluator, WholeModuleCheckpointsRepeatTheirForwardAndReduction) {
  const auto cluster = must(load_cluster("dgx-h100"));
  const double s = 4096, bytes = 2;
  struct Case {
    const char* model;
    RecomputeModule module;
    double h, width;  // hidden, and the checkpointed MLP's width
  };
  ModelSpec shared = must(load_model("llama3-8b"));  // 16 experts, top 2, shared experts of width 4096
  shared.transformer.experts = 16;
  shared.transformer.top_k = 2;
  shared.transformer.shared_expert_ffn = 4096;
  for (const Case& k : {Case{"llama3-8b", RecomputeModule::mlp, 4096, 14336},
                        Case{"shared", RecomputeModule::shared_experts, 4096, 4096}}) {
    const ModelSpec model = std::string(k.model) == "shared" ? shared : must(load_model(k.model));
    const Evaluator evaluator(model, cluster, 8, 4096);
    Plan plan = plan_with(std::string(k.model) == "shared" ? "ep=4,tp=2" : "dp=4,tp=2", 1, 4);
    plan.sequence_parallel = true;
    plan.recompute = Recompute::selective;
    const auto placements = place_axes(evaluator.topology(), plan.mesh);
    const int layer = evaluator.profile().block_kind[static_cast<std::size_t>(evaluator.profile().layer_blocks.front())];
    Plan checkpointed = plan;
    checkpointed.recompute_modules = module_bit(k.module);
    const BlockCost core = evaluator.block_costs(plan, placements)[static_cast<std::size_t>(layer)];
    const BlockCost whole = evaluator.block_costs(checkpointed, placements)[static_cast<std::size_t>(layer)];
    EXPECT_NEAR(core.activation_bytes - whole.activation_bytes, 3 * s * k.width / 2 * bytes, 1e-6 * core.activation_bytes)
        << k.model;
    // The repeated forward: the MLP's two GEMMs (their forward as the record prices them) and the activation.
    double gemms = 0;
    const auto& gemm_work = evaluator.profile().kinds[static_cast<std::size_t>(layer)].gemms;
    for (std::size_t i = 0; i < gemm_work.size(); ++i) {
      if (gemm_work[i].module == k.module) gemms += core.gemms[i].forward_s;
    }
    EXPECT_GT(gemms, 0) << k.model;
    const double repeated = whole.backward_compute_s - core.backward_compute_s;
    EXPECT_GT(repeated, gemms) << k.model;  // and the activation's pass
    EXPECT_LT(repeated, gemms + core.stream_s[static_cast<std::size_t>(StreamOp::activation)] + 1e-12) << k.model;
    // One more all-reduce of s h over tp in the backward, exposed.
    const AxisPlacement* tp = nullptr;
    for (const AxisPlacement& p : placements) {
      if (p.axis == Axis::tp) tp = &p;
    }
    ASSERT_NE(tp, nullptr);
    const double reduce =
        collective_time(Collective::all_reduce, s * k.h * bytes, tp->size, tp->bandwidth_bytes_per_s, tp->latency_s).time_s;
    EXPECT_NEAR(whole.tp_backward_s - core.tp_backward_s, reduce, 1e-12) << k.model;
    EXPECT_EQ(whole.forward_compute_s, core.forward_compute_s);
    const PlanEstimate before = evaluator.evaluate(plan), after = evaluator.evaluate(checkpointed);
    EXPECT_GT(after.time.step_s, before.time.step_s);
    EXPECT_GT(after.time.hardware_flops_per_step, before.time.hardware_flops_per_step);
    EXPECT_LT(after.worst_memory.activations_bytes, before.worst_memory.activations_bytes);
  }
}

// Latent attention's mla_up_proj drops the queries, keys and values the
// attention keeps (s a (2 d_qk + d_v) over tp) and repeats the up-
// projections' GEMMs, whose FLOPs the hardware count adds.
TEST(Evaluator, RecomputeModuleMlaUpProjRepeatsTheUpProjections) {
  const auto model = must(load_model("deepseek-v3"));
  const auto cluster = must(load_cluster("dgx-h100"));
  const Evaluator evaluator(model, cluster, 64, 4096);
  Plan plan = plan_with("ep=8,tp=8", 1, 8);
  plan.sequence_parallel = true;
  plan.recompute = Recompute::selective;
  const auto placements = place_axes(evaluator.topology(), plan.mesh);
  const int layer = evaluator.profile().block_kind[static_cast<std::size_t>(evaluator.profile().layer_blocks.back())];
  Plan up = plan;
  up.recompute_modules = module_bit(RecomputeModule::mla_up_proj);
  const BlockCost core = evaluator.block_costs(plan, placements)[static_cast<std::size_t>(layer)];
  const BlockCost repeated = evaluator.block_costs(up, placements)[static_cast<std::size_t>(layer)];
  const double s = 4096, a = 128, bytes = 2;
  EXPECT_NEAR(core.activation_bytes - repeated.activation_bytes, s * a * (2 * 192 + 128) / 8 * bytes, 1e-6 * core.activation_bytes);
  EXPECT_GT(repeated.backward_compute_s, core.backward_compute_s);
  // Per token, the up-projections' forward FLOPs: 2 (1536 x 128 x 192 + 512 x 128 x (128 + 128)), in every layer.
  const double per_token = 2 * (1536.0 * 128 * 192 + 512.0 * 128 * 256);
  const PlanEstimate before = evaluator.evaluate(plan), after = evaluator.evaluate(up);
  EXPECT_NEAR(after.time.hardware_flops_per_step - before.time.hardware_flops_per_step, 61 * per_token * s * 8,
              1e-9 * after.time.hardware_flops_per_step);
}

// Llama 3 8B with 16 experts, top 2.
ModelSpec moe_8b() {
  ModelSpec model = must(load_model("llama3-8b"));
  model.transformer.experts = 16;
  model.transformer.top_k = 2;
  return model;
}

// Drop-and-pad expert capacity: the all-to-alls move, and the experts run,
// capacity_factor x top_k copies of each token; the model FLOPs stay the
// routed top_k copies, so the step is longer and the MFU lower. The memory
// model and the evaluator agree on the padded activations and buffers.
TEST(Evaluator, ExpertCapacityPadsTheDispatchAndTheExperts) {
  ModelSpec model = moe_8b();
  const auto cluster = must(load_cluster("dgx-h100"));
  const Plan plan = plan_with("dp=2,ep=8", 1, 16);
  auto ep_bytes = [&](const Evaluator& e) {
    double bytes = 0;
    for (const BlockCost& c : e.block_costs(plan, place_axes(e.topology(), plan.mesh)))
      for (const BlockCollective& x : c.collectives)
        if (x.axis == Axis::ep) bytes += x.bytes * x.count;
    return bytes;
  };
  const Evaluator dropless(model, cluster, 16, 2048);
  model.transformer.capacity_factor = 1.25;
  const Evaluator padded(model, cluster, 16, 2048);
  const PlanEstimate a = dropless.evaluate(plan), b = padded.evaluate(plan);
  ASSERT_GT(ep_bytes(dropless), 0);
  EXPECT_DOUBLE_EQ(ep_bytes(padded), 1.25 * ep_bytes(dropless));
  EXPECT_DOUBLE_EQ(b.time.model_flops_per_step, a.time.model_flops_per_step);
  EXPECT_GT(b.time.step_s, a.time.step_s);
  EXPECT_LT(b.time.mfu, a.time.mfu);
  EXPECT_GT(b.worst_memory.activations_bytes, a.worst_memory.activations_bytes);
  EXPECT_GT(b.worst_memory.buffers_bytes, a.worst_memory.buffers_bytes);
  const std::size_t ep = static_cast<std::size_t>(Axis::ep);
  EXPECT_GT(b.time.axis_communication_s[ep], a.time.axis_communication_s[ep]);
  // Hardware FLOPs count the padding rows the experts run: per token and layer, (k C - k) copies of the
  // SwiGLU expert's 2 h 2f + 2 f h forward FLOPs, times 3 (forward and two backward GEMMs), times 4
  // when full recomputation repeats the forward.
  const double h = 4096, f = 14336, layers = 32, tokens = 2048.0 * 16;
  const double padding_forward = (2 * 1.25 - 2) * 6 * h * f * layers * tokens;
  for (const auto& [recompute, passes] : {std::pair{Recompute::none, 3.0}, std::pair{Recompute::full, 4.0}}) {
    Plan p = plan;
    p.recompute = recompute;
    const PlanEstimate x = dropless.evaluate(p), y = padded.evaluate(p);
    EXPECT_NEAR(y.time.hardware_flops_per_step - x.time.hardware_flops_per_step, passes * padding_forward,
                1e-9 * padding_forward) << to_string(recompute);
    EXPECT_GT(y.time.hfu / y.time.mfu, x.time.hfu / x.time.mfu) << to_string(recompute);
  }
}

// Shared experts are dense weights: every ep rank holds all of them (tp splits them), where ep divides the
// routed experts; so what they add per device is the same with ep=8 as without ep. They add work to every
// token, so the step grows.
TEST(Evaluator, SharedExpertsAreHeldWholeOnEveryExpertRank) {
  ModelSpec model = moe_8b();
  const auto cluster = must(load_cluster("dgx-h100"));
  auto per_device = [&](const ModelSpec& m, const std::string& mesh) {
    const PlanEstimate e = Evaluator(m, cluster, 16, 2048).evaluate(plan_with(mesh, 1, 16));
    return std::pair{e.worst_memory.parameters_bytes, e.time.step_s};
  };
  ModelSpec shared = model;
  shared.transformer.shared_expert_ffn = 4096;
  const double layers = 32, h = 4096, fs = 4096, bytes = 2;  // bf16 weights
  for (const char* mesh : {"dp=16", "dp=2,ep=8"}) {
    const auto [without_bytes, without_step] = per_device(model, mesh);
    const auto [with_bytes, with_step] = per_device(shared, mesh);
    EXPECT_DOUBLE_EQ(with_bytes - without_bytes, layers * 3 * h * fs * bytes) << mesh;
    EXPECT_GT(with_step, without_step) << mesh;
  }
  // tp splits them as a dense MLP.
  const auto [without_tp, a] = per_device(model, "dp=8,tp=2");
  const auto [with_tp, b] = per_device(shared, "dp=8,tp=2");
  EXPECT_DOUBLE_EQ(with_tp - without_tp, layers * 3 * h * fs * bytes / 2);
}

// Dense layers among the experts': only the expert layers dispatch over ep, so one dense layer of 32 takes
// 1/32 of the all-to-all time away; the dense layer's MLP weights are split over tp but not ep.
TEST(Evaluator, DenseLayersAmongExpertsDispatchNothing) {
  ModelSpec model = moe_8b();
  const auto cluster = must(load_cluster("dgx-h100"));
  const Plan plan = plan_with("dp=2,ep=8", 1, 16);
  ModelSpec first_dense = model;
  first_dense.transformer.dense_layers = {0};
  const PlanEstimate a = Evaluator(model, cluster, 16, 2048).evaluate(plan);
  const PlanEstimate b = Evaluator(first_dense, cluster, 16, 2048).evaluate(plan);
  const std::size_t ep = static_cast<std::size_t>(Axis::ep);
  ASSERT_GT(a.time.axis_communication_s[ep], 0);
  EXPECT_NEAR(b.time.axis_communication_s[ep], a.time.axis_communication_s[ep] * 31 / 32, 1e-12);
  // Per device: 16 experts / ep 8 = 2 experts' MLPs of layer 0 and its router traded for one dense MLP.
  const double h = 4096, f = 14336, bytes = 2;
  EXPECT_DOUBLE_EQ(a.worst_memory.parameters_bytes - b.worst_memory.parameters_bytes, (2 * 3 * h * f + h * 16 - 3 * h * f) * bytes);
}

// Experts out of tp (expert_tensor_parallel 1, Megatron-Core's ETP 1) on
// dp=2,ep=4,tp=2 with sequence parallelism: the experts' parameters per device
// and every saved tensor stay; each rank runs half as many experts at whole
// widths, each over as many rows as before (the same FLOPs); the experts' tp
// collectives go; the all-to-all moves the same bytes per rank (its own half
// of the tokens, under sequence parallelism either way) over ep x tp = 8
// ranks instead of ep = 4.
TEST(Evaluator, ExpertsOutOfTensorParallelismRunWholeOverEpTimesTp) {
  const ModelSpec model = moe_8b();
  const auto cluster = must(load_cluster("dgx-h100"));
  const Evaluator evaluator(model, cluster, 16, 2048);
  Plan in_tp = plan_with("dp=2,ep=4,tp=2", 1, 16);
  in_tp.sequence_parallel = true;
  Plan out_of_tp = in_tp;
  out_of_tp.expert_tensor_parallel = 1;
  ASSERT_EQ(quick_check(evaluator, out_of_tp), Rejection::none);
  const auto placements = place_axes(evaluator.topology(), in_tp.mesh);
  const std::vector<BlockCost> a = evaluator.block_costs(in_tp, placements), b = evaluator.block_costs(out_of_tp, placements);
  ASSERT_EQ(a.size(), b.size());
  const ModelProfile& prof = evaluator.profile();
  int expert_blocks = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    EXPECT_DOUBLE_EQ(b[k].expert_parameters, a[k].expert_parameters) << k;
    EXPECT_DOUBLE_EQ(b[k].dense_parameters, a[k].dense_parameters) << k;
    EXPECT_DOUBLE_EQ(b[k].activation_bytes, a[k].activation_bytes) << k;
    const BlockProfile& bp = prof.kinds[k];
    double flops_a = 0, flops_b = 0;
    for (std::size_t g = 0; g < bp.gemms.size(); ++g) {
      flops_a += a[k].gemms[g].shape.forward_flops();
      flops_b += b[k].gemms[g].shape.forward_flops();
      if (!bp.gemms[g].expert) {
        EXPECT_EQ(b[k].gemms[g].shape.rows, a[k].gemms[g].shape.rows);
        continue;
      }
      // 16 experts: 4 a rank over ep=4, 2 a rank over ep x tp = 8; each over 2 x 2048 x 4 / 16 = 1024 routed rows.
      EXPECT_DOUBLE_EQ(a[k].gemms[g].shape.batch, 4);
      EXPECT_DOUBLE_EQ(b[k].gemms[g].shape.batch, 2);
      EXPECT_DOUBLE_EQ(a[k].gemms[g].shape.rows, 1024);
      EXPECT_DOUBLE_EQ(b[k].gemms[g].shape.rows, 1024);
      EXPECT_DOUBLE_EQ(b[k].gemms[g].shape.n * b[k].gemms[g].shape.k, 2 * a[k].gemms[g].shape.n * a[k].gemms[g].shape.k);
    }
    EXPECT_NEAR(flops_b, flops_a, 1e-9 * flops_a) << k;
    double ep_a = 0, ep_b = 0, tp_a = 0, tp_b = 0;
    for (const BlockCollective& x : a[k].collectives) (x.axis == Axis::ep ? ep_a : tp_a) += x.bytes * x.count;
    for (const BlockCollective& x : b[k].collectives) (x.axis == Axis::ep ? ep_b : tp_b) += x.bytes * x.count;
    if (bp.expert_tp_split_parameters == 0) {
      EXPECT_EQ(ep_b, 0);
      EXPECT_DOUBLE_EQ(tp_b, tp_a) << k;
      continue;
    }
    ++expert_blocks;
    // Under sequence parallelism each rank dispatches its own half of the tokens either way: the same bytes,
    // over ep (4 ranks) or over ep x tp (8).
    const double s = 2048, h = 4096, k_routed = 2;
    EXPECT_DOUBLE_EQ(ep_a, 4 * (s / 2) * k_routed * h * 2) << k;
    EXPECT_DOUBLE_EQ(ep_b, ep_a) << k;
    // The experts' tp traffic: the partial sums of every routed copy out of w_out (k s h per sample, per
    // micro-batch of 1) forward; their w_in's input gradient (k s h) backward, all-gathered again under
    // sequence parallelism; all at 2 bytes.
    EXPECT_NEAR(tp_a - tp_b, 3 * k_routed * s * h * 2, 1e-9 * tp_a) << k;
    // The all-to-all's group is ep x tp: 8 consecutive ranks, priced on that group's links.
    AxisPlacement group;
    for (const AxisPlacement& p : place_axes(evaluator.topology(), expert_mesh(out_of_tp)))
      if (p.axis == Axis::ep) group = p;
    EXPECT_EQ(group.size, 8);
    EXPECT_EQ(group.stride, 1);
    for (const BlockCollective& x : b[k].collectives) {
      if (x.axis != Axis::ep) continue;
      const double one = collective_time(Collective::all_to_all, x.bytes, group.size, group.all_to_all_bandwidth_bytes_per_s,
                                         group.latency_s).time_s;
      EXPECT_DOUBLE_EQ(x.seconds, x.count * one);
    }
  }
  EXPECT_EQ(expert_blocks, 1);
  const PlanEstimate ea = evaluator.evaluate(in_tp), eb = evaluator.evaluate(out_of_tp);
  EXPECT_DOUBLE_EQ(eb.worst_memory.parameters_bytes, ea.worst_memory.parameters_bytes);
  EXPECT_DOUBLE_EQ(eb.worst_memory.activations_bytes, ea.worst_memory.activations_bytes);
  // Dispatch and combine buffers: 2 x this rank's half of the tokens x k x h x 2 bytes, either way.
  EXPECT_DOUBLE_EQ(eb.worst_memory.buffers_bytes, ea.worst_memory.buffers_bytes);
  EXPECT_DOUBLE_EQ(eb.time.model_flops_per_step, ea.time.model_flops_per_step);
  const std::size_t tp = static_cast<std::size_t>(Axis::tp);
  EXPECT_LT(eb.time.axis_communication_s[tp], ea.time.axis_communication_s[tp]);
}

// The deduplicating dispatch (DeepEP): over an expert group that spans two
// nodes, its all-to-alls run at the all-to-all's rate with the cross-node
// term scaled by deduplicated_remote_share (16 experts, top 2, 2 nodes);
// inside one node nothing changes.
TEST(Evaluator, DeduplicatedDispatchSendsEachTokenOnceANode) {
  const ModelSpec model = moe_8b();
  const auto cluster = must(load_cluster("dgx-h100"));
  const Evaluator evaluator(model, cluster, 32, 2048);
  auto ep_seconds = [&](const Plan& plan) {
    double seconds = 0;
    for (const BlockCost& c : evaluator.block_costs(plan, place_axes(evaluator.topology(), plan.mesh)))
      for (const BlockCollective& x : c.collectives)
        if (x.axis == Axis::ep) seconds += x.seconds;
    return seconds;
  };
  for (const char* mesh : {"dp=2,ep=16", "dp=4,ep=8"}) {
    Plan nccl = plan_with(mesh, 1, 32);
    Plan deep = nccl;
    deep.ep_dispatch = EpDispatch::deduplicated;
    AxisPlacement group;
    for (const AxisPlacement& p : place_axes(evaluator.topology(), nccl.mesh))
      if (p.axis == Axis::ep) group = p;
    const double a = ep_seconds(nccl), b = ep_seconds(deep);
    ASSERT_GT(a, 0) << mesh;
    if (!group.crosses_nodes) {
      EXPECT_DOUBLE_EQ(b, a) << mesh;
      continue;
    }
    EXPECT_EQ(group.nodes_spanned, 2);
    const double share = deduplicated_remote_share(16, 2, 2);
    EXPECT_LT(share, 1);
    const double bytes = 2048.0 * 2 * 4096 * 2;  // one micro-batch's routed copies, bf16
    const double rate = all_to_all_bus_bandwidth(16, group.members_per_node, group.intra_bandwidth_bytes_per_s,
                                                 group.inter_bandwidth_bytes_per_s / share);
    const double one = collective_time(Collective::all_to_all, bytes, 16, rate, group.latency_s).time_s;
    // The layer kind's 4 all-to-alls (dispatch and combine, forward and backward).
    EXPECT_NEAR(b, 4 * one, 1e-9 * b) << mesh;
    EXPECT_LT(b, a) << mesh;
    EXPECT_LT(evaluator.evaluate(deep).time.step_s, evaluator.evaluate(nccl).time.step_s);
    // Group-limited routing (a token within 1 of 2 groups, a group a node): its copies reach the other node
    // only when that node's group is chosen, half as often; the NCCL all-to-all moves the same k copies.
    ModelSpec grouped = model;
    grouped.transformer.expert_groups = 2;
    grouped.transformer.group_top_k = 1;
    const Evaluator limited(grouped, cluster, 32, 2048);
    double c = 0, d = 0;
    for (const BlockCost& k : limited.block_costs(deep, place_axes(limited.topology(), deep.mesh)))
      for (const BlockCollective& x : k.collectives)
        if (x.axis == Axis::ep) d += x.seconds;
    for (const BlockCost& k : limited.block_costs(nccl, place_axes(limited.topology(), nccl.mesh)))
      for (const BlockCollective& x : k.collectives)
        if (x.axis == Axis::ep) c += x.seconds;
    EXPECT_DOUBLE_EQ(c, a) << mesh;
    const double half = deduplicated_remote_share(ExpertRouting{16, 2, 2, 1}, 2);
    EXPECT_NEAR(half, 2.0 * 0.5 / 2, 1e-15);  // hit 1/2 (the group, then surely), over k (N - 1) / N = 1 copy
    const double grouped_rate = all_to_all_bus_bandwidth(16, group.members_per_node, group.intra_bandwidth_bytes_per_s,
                                                         group.inter_bandwidth_bytes_per_s / half);
    EXPECT_NEAR(d, 4 * collective_time(Collective::all_to_all, bytes, 16, grouped_rate, group.latency_s).time_s, 1e-9 * d);
    EXPECT_LT(d, b) << mesh;
  }
}

// The memory the evaluator gives mixtures of experts, with the experts in tp
// or out of it, equals the graph-walking reference's (as for dense models above).
TEST(Evaluator, MixtureOfExpertsMemoryMatchesTheReferenceModel) {
  std::mt19937 rng(5);
  ModelSpec model = moe_8b();
  model.transformer.layers = 8;
  model.transformer.shared_expert_ffn = 2048;
  model.transformer.dense_layers = {0};
  const auto cluster = must(load_cluster("dgx-h100"));
  const std::int64_t world = 32;
  const Evaluator evaluator(model, cluster, world, 2048);
  SearchSpace space;
  space.axes = {Axis::dp, Axis::fsdp, Axis::tp, Axis::pp, Axis::ep, Axis::cp};
  const auto meshes = enumerate_meshes(world, space, 8);
  int compared = 0, out_of_tp = 0;
  for (int i = 0; i < 400; ++i) {
    Plan plan;
    plan.mesh = meshes[rng() % meshes.size()];
    plan.micro_batch = 1 << (rng() % 2);
    plan.global_batch = 64;
    plan.seq_len = 2048;
    plan.zero_stage = static_cast<int>(rng() % 4);
    plan.recompute = static_cast<Recompute>(rng() % kRecomputeModes);
    plan.sequence_parallel = rng() % 4 != 0 && plan.mesh.size(Axis::tp) > 1;
    plan.expert_tensor_parallel = rng() % 2 == 0 ? 1 : 0;
    plan.loss = rng() % 2 == 0 ? Loss::eager : Loss::fused;
    if (plan.recompute == Recompute::selective) {  // any of the modules a mixture of experts has
      plan.recompute_modules = static_cast<RecomputeModules>(
          (rng() % 2 ? module_bit(RecomputeModule::core_attn) : 0) | (rng() % 2 ? module_bit(RecomputeModule::layernorm) : 0) |
          (rng() % 2 ? module_bit(RecomputeModule::moe_act) : 0));
      if (plan.recompute_modules == 0) plan.recompute_modules = kDefaultRecomputeModules;
    }
    if (quick_check(evaluator, plan) != Rejection::none) continue;
    if (expert_split(plan).tokens > 1) ++out_of_tp;
    const Explanation reference = explain_plan(model, cluster, {world, 0}, plan);
    ASSERT_TRUE(reference.memory) << plan.mesh.to_string();
    std::vector<StageMemory> stages;
    evaluator.evaluate(plan, &stages);
    ASSERT_EQ(stages.size(), reference.memory->stages.size());
    for (std::size_t st = 0; st < stages.size(); ++st) {
      const auto& a = stages[st].memory;
      const auto& b = reference.memory->stages[st].memory;
      const double scale = std::max(1.0, b.total_bytes()) * 1e-9;
      const std::string what = plan.mesh.to_string() + " etp " + std::to_string(plan.expert_tensor_parallel) + " " +
                               to_string(plan.recompute) + " sp" + std::to_string(plan.sequence_parallel);
      EXPECT_NEAR(a.parameters_bytes, b.parameters_bytes, scale) << what;
      EXPECT_NEAR(a.optimizer_bytes, b.optimizer_bytes, scale) << what;
      EXPECT_NEAR(a.activations_bytes, b.activations_bytes, scale) << what;
      EXPECT_NEAR(a.buffers_bytes, b.buffers_bytes, scale) << what;
      EXPECT_NEAR(a.total_bytes(), b.total_bytes(), scale) << what;
    }
    ++compared;
  }
  std::printf("[ compared ] %d mixture-of-experts plans, %d of them with the experts out of tp\n", compared, out_of_tp);
  EXPECT_GT(compared, 60);
  EXPECT_GT(out_of_tp, 10);
}

// Combined 1F1B (overlap_expert_parallel), from the record: the routed
// experts' compute is part of each MoE layer's, none of the embedding's or
// the head's; a pair of passes exposes no more than the all-to-alls and no
// less than what outlasts all its compute. Phase by phase: with ep over two
// nodes on 10 GbE each all-to-all outlasts the compute beside it, so the pair
// exposes exactly what outlasts all its compute; inside a PCIe node the
// forward's attention (to the router) is shorter than one all-to-all though
// the pair's compute is over four times the four of them, so the pair still exposes
// some. The step exposes the whole all-to-alls of micro-batch 1's forward and
// micro-batch m's backward and each pair's exposed part for the other m - 1;
// never slower.
TEST(Evaluator, PairedPassesHideTheExpertAllToAllsPhaseByPhase) {
  const ModelSpec model = moe_8b();
  for (const char* cluster_name : {"dgx-h100", "ethernet-10g"}) {
    const auto cluster = must(load_cluster(cluster_name));
    const bool slow = std::string(cluster_name) == "ethernet-10g";
    for (const char* mesh : {"dp=2,ep=8", "ep=16"}) {
      for (std::int64_t b : {1, 2, 4}) {
        Plan plan = plan_with(mesh, b, 16 * b * 4);  // 16 data-parallel ranks either way: m = 4
        const Evaluator evaluator(model, cluster, 16, 2048);
        const auto placements = place_axes(evaluator.topology(), plan.mesh);
        const std::vector<BlockCost> costs = evaluator.block_costs(plan, placements);
        const ModelProfile& prof = evaluator.profile();
        for (std::size_t k = 0; k < costs.size(); ++k) {
          const BlockCost& c = costs[k];
          const bool layer = prof.kind_role[k] == BlockKind::layer;
          const double outlasting = std::max(0.0, c.ep_s - c.forward_compute_s - c.backward_compute_s);
          EXPECT_EQ(c.experts_forward_s > 0, layer) << cluster_name;
          EXPECT_LT(c.experts_forward_s, c.forward_compute_s);
          EXPECT_LT(c.experts_backward_s, c.backward_compute_s);
          EXPECT_LE(c.ep_paired_s, c.ep_s);
          EXPECT_GE(c.ep_paired_s, outlasting - 1e-15);
          if (!layer) continue;
          if (slow && std::string(mesh) == "ep=16") {
            EXPECT_NEAR(c.ep_paired_s, outlasting, 1e-12 * c.ep_s) << b;
          }
          if (slow && std::string(mesh) == "dp=2,ep=8") {
            EXPECT_GT(c.forward_compute_s + c.backward_compute_s, 4 * c.ep_s);
            EXPECT_GT(c.ep_paired_s, 0) << b;
          }
        }
        double ep = 0, paired = 0;
        for (const int kind : prof.block_kind) {
          ep += costs[static_cast<std::size_t>(kind)].ep_s;
          paired += costs[static_cast<std::size_t>(kind)].ep_paired_s;
        }
        const std::size_t axis = static_cast<std::size_t>(Axis::ep);
        const TimeEstimate off = evaluator.evaluate(plan).time;
        plan.overlap_expert_parallel = true;
        const TimeEstimate on = evaluator.evaluate(plan).time;
        ASSERT_GT(ep, 0);
        EXPECT_NEAR(off.axis_exposed_s[axis], 4 * ep, 1e-12 * ep);
        EXPECT_NEAR(on.axis_exposed_s[axis], ep + 3 * paired, 1e-12 * ep) << cluster_name << " " << mesh << " b " << b;
        EXPECT_DOUBLE_EQ(on.axis_communication_s[axis], off.axis_communication_s[axis]);
        EXPECT_LE(on.step_s, off.step_s);
        if (paired < ep) {
          EXPECT_LT(on.step_s, off.step_s);
        }
      }
    }
  }
}

TEST(Evaluator, MoreBandwidthIsNeverSlower) {
  const auto model = must(load_model("llama2-70b"));
  auto cluster = must(load_cluster("dgx-a100"));
  Plan plan = plan_with("dp=4,pp=2,tp=8", 1, 256);
  plan.recompute = Recompute::selective;
  plan.sequence_parallel = true;
  double previous = std::numeric_limits<double>::infinity();
  for (double scale : {0.25, 0.5, 1.0, 2.0, 4.0}) {
    ClusterSpec faster = cluster;
    faster.intra_node.bandwidth_bytes_per_s *= scale;
    faster.inter_node.bandwidth_bytes_per_s *= scale;
    const double step = Evaluator(model, faster, 64, 4096).evaluate(plan).time.step_s;
    EXPECT_LE(step, previous) << scale;
    previous = step;
  }
}

TEST(Evaluator, TimeAccountingAddsUp) {
  const auto model = must(load_model("gpt3-175b"));
  const auto cluster = must(load_cluster("dgx-a100"));
  Plan plan = plan_with("dp=16,pp=8,tp=8", 1, 1536);
  plan.zero_stage = 1;
  plan.recompute = Recompute::selective;
  plan.sequence_parallel = true;
  const auto t = Evaluator(model, cluster, 1024, 2048).evaluate(plan).time;
  EXPECT_GT(t.step_s, 0);
  EXPECT_LE(t.communication_exposed_s, t.communication_s + 1e-12);
  // The step is the slowest stage's compute and exposed communication, the bubble and the optimizer.
  EXPECT_NEAR(t.compute_s + t.communication_exposed_s + t.bubble_s + t.optimizer_s, t.step_s, 1e-9 * t.step_s);
  EXPECT_NEAR(t.tokens_per_s, 1536.0 * 2048 / t.step_s, 1e-6 * t.tokens_per_s);
  EXPECT_GT(t.mfu, 0.2);
  // Fused attention (the default) runs the causal half of the scores, and selective recompute repeats
  // nothing under it: fewer hardware FLOPs than model FLOPs (FusedAttention.HardwareFlops... prices it).
  EXPECT_LT(t.hfu, t.mfu);
  EXPECT_LE(t.hfu, 1.0);
  // Model FLOPs: 72 B L s h^2 (1 + s / 6h + V / 12hL) (Korthikanti et al. 2022, Appendix), V = 50257 here.
  const double B = 1536, L = 96, s = 2048, h = 12288, V = 50257;
  EXPECT_NEAR(t.model_flops_per_step, 72 * B * L * s * h * h * (1 + s / (6 * h) + V / (12 * h * L)), 1e-6 * t.model_flops_per_step);
}

}  // namespace
}  // namespace meshplan
