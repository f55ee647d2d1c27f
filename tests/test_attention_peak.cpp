// Fused attention, peak-memory transients, the launch floor and the measured
// H100 / H200 presets (docs/cost-model.md: "Fused attention", "Peak memory",
// "Launch floor", "Measured device curves"), each against a closed form.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "model/compute_model.hpp"
#include "model/evaluate.hpp"
#include "model/explain.hpp"
#include "model/memory_model.hpp"
#include "model/plan_file.hpp"
#include "model/presets.hpp"
#include "model/published_cases.hpp"
#include "model/report_json.hpp"
#include "model/search.hpp"
#include "test_support.hpp"

namespace meshplan {
namespace {
using namespace testing_support;

constexpr double kMiB = 1024.0 * 1024;

// One layer's saved bytes per sample under `attention` (b = 1, no parallelism).
double layer_bytes(const LayerGraph& g, Attention attention) {
  ActivationSharding sharding;
  sharding.attention = attention;
  double bytes = 0;
  for (OpId id : g.blocks[static_cast<std::size_t>(g.layer_blocks().front())].ops) {
    bytes += saved_bytes_per_sample(g.op(id), sharding);
  }
  return bytes;
}

// Fused attention keeps no s x s tensor (the 5 a s / h of Korthikanti et
// al.'s Eq. 1), and keeps the fp32 log-sum-exp per query row and head.
TEST(FusedAttention, KeepsNoScoresOnlyTheSoftmaxStatistics) {
  const ModelSpec model = korthikanti_model(8, 1024, 16);  // GPT case: dropout, f = 4h
  const double s = 2048, h = 1024, a = 16;
  const LayerGraph g = build_layer_graph(model, 2048);
  EXPECT_NEAR(layer_bytes(g, Attention::unfused), s * h * (34 + 5 * a * s / h), 1e-9 * s * h);
  EXPECT_NEAR(layer_bytes(g, Attention::fused), s * h * 34 + 4 * a * s, 1e-9 * s * h);
  // Llama-style (no dropout): 32 s h + 4 a s.
  const ModelSpec llama = must(load_model("llama2-7b"));
  const LayerGraph lg = build_layer_graph(llama, 4096);
  const double ls = 4096, lh = 4096, la = 32, f = 11008;
  // ln1, qkv input, q, k, v, projection input, ln2, mlp input: 8 s h; gate, up, down input: 3 s f (x 2 bytes).
  EXPECT_NEAR(layer_bytes(lg, Attention::fused), 2 * (8 * ls * lh + 3 * ls * f) + 4 * la * ls, 1e-9 * ls * lh);
}

// The published rows ran Megatron-LM 2022: unfused, stated in the case.
TEST(FusedAttention, PublishedCasesAreUnfused) {
  for (const auto& c : korthikanti_iteration_time_cases()) EXPECT_EQ(c.plan.attention, Attention::unfused) << c.name;
  for (const auto& c : korthikanti_activation_cases()) EXPECT_EQ(c.plan.attention, Attention::unfused) << c.name;
}

TEST(FusedAttention, EvaluatorMatchesTheReferenceUnderEitherAttention) {
  const auto model = must(load_model("gpt2-350m"));
  const auto cluster = must(load_cluster("dgx-h100"));
  const Evaluator evaluator(model, cluster, 8, 1024);
  for (Attention attention : {Attention::fused, Attention::unfused}) {
    for (const char* mesh : {"dp=8", "tp=8", "pp=2,tp=4", "dp=2,pp=2,tp=2"}) {
      for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full, Recompute::selective_op}) {
        Plan plan = plan_with(mesh, 2, 16);
        plan.attention = attention;
        plan.recompute = recompute;
        plan.sequence_parallel = plan.mesh.size(Axis::tp) > 1;
        const auto reference = explain_plan(model, cluster, {8, 0}, plan);
        ASSERT_TRUE(reference.memory) << mesh;
        std::vector<StageMemory> stages;
        evaluator.evaluate(plan, &stages);
        ASSERT_EQ(stages.size(), reference.memory->stages.size());
        for (std::size_t s = 0; s < stages.size(); ++s) {
          const auto& x = stages[s].memory;
          const auto& y = reference.memory->stages[s].memory;
          const std::string where = std::string(mesh) + " " + to_string(attention) + " " + to_string(recompute);
          EXPECT_NEAR(x.activations_bytes, y.activations_bytes, 1e-9 * y.total_bytes()) << where;
          EXPECT_NEAR(x.loss_transient_bytes, y.loss_transient_bytes, 1e-9 * y.total_bytes()) << where;
          EXPECT_NEAR(x.activation_gradient_bytes, y.activation_gradient_bytes, 1e-9 * y.total_bytes()) << where;
          EXPECT_NEAR(x.total_bytes(), y.total_bytes(), 1e-9 * y.total_bytes()) << where;
        }
      }
    }
  }
}

// With a one-point curve the rate is constant: the layer's forward changes
// by F / R1 - F / R2 with F = 2 b a s^2 d (the causal half of Q K^T and
// P V), its backward by 2.5 F over the backward rates.
TEST(FusedAttention, PricedAtTheDevicesMeasuredRates) {
  const auto model = must(load_model("gpt2-124m"));
  ClusterSpec cluster = must(load_cluster("dgx-a100"));
  Plan plan = plan_with("dp=1", 4, 4);
  const double b = 4, s = 1024, a = 12, d = 64, F = 2 * b * a * s * s * d;
  auto layer = [&](double forward_tflops, double backward_tflops) {
    ClusterSpec c = cluster;
    c.device.attention_forward_curve = {{1e9, forward_tflops * 1e12}};
    c.device.attention_backward_curve = {{1e9, backward_tflops * 1e12}};
    const Evaluator evaluator(model, c, 1, 1024);
    const auto costs = evaluator.block_costs(plan, place_axes(evaluator.topology(), plan.mesh));
    return costs[static_cast<std::size_t>(evaluator.profile().uniform_layer_kind)];
  };
  const BlockCost fast = layer(400, 200), slow = layer(100, 50);
  EXPECT_NEAR(slow.forward_compute_s - fast.forward_compute_s, F / 100e12 - F / 400e12, 1e-9 * F / 100e12);
  EXPECT_NEAR(slow.backward_compute_s - fast.backward_compute_s, 2.5 * F / 50e12 - 2.5 * F / 200e12, 1e-9 * F / 50e12);
}

TEST(FusedAttention, DropoutSlowsTheKernelByTheDevicesMeasuredRatio) {
  DeviceSpec device;
  device.peak_flops_per_s[Dtype::bf16] = 1e15;
  device.attention_forward_curve = {{1e10, 100e12}, {1e12, 300e12}};
  device.attention_backward_curve = {{1e10, 50e12}, {1e12, 150e12}};
  device.attention_dropout_slowdown = {1.9, 1.7};
  const ComputeRates rates = rates_for(device, Precision::bf16);
  const AttentionTime plain = fused_attention_time_s(1e11, 0, rates, false);
  const AttentionTime dropped = fused_attention_time_s(1e11, 0, rates, true);
  EXPECT_NEAR(dropped.forward_s, 1.9 * plain.forward_s, 1e-15);
  EXPECT_NEAR(dropped.backward_s, 1.7 * plain.backward_s, 1e-15);
  // Through the evaluator: a model with dropout pays (slowdown - 1) x its
  // attention time per layer; the same model without dropout pays nothing.
  auto layer = [](double dropout, std::array<double, 2> slowdown) {
    ModelSpec model = must(load_model("gpt2-124m"));
    model.transformer.dropout = dropout;
    ClusterSpec c = must(load_cluster("dgx-h200"));
    c.device.attention_dropout_slowdown = slowdown;
    Plan plan = plan_with("dp=1", 8, 8);
    plan.attention = Attention::fused;
    const Evaluator evaluator(model, c, 1, 1024);
    const auto costs = evaluator.block_costs(plan, place_axes(evaluator.topology(), plan.mesh));
    return costs[static_cast<std::size_t>(evaluator.profile().uniform_layer_kind)];
  };
  const BlockCost none = layer(0.1, {1, 1}), slowed = layer(0.1, {1.9, 1.7}), no_dropout = layer(0.0, {1.9, 1.7});
  const double s = 1024, h = 768, b = 8;
  const double forward_flops = 2 * b * s * s * h;  // 2 B H T^2 D: the causal half of Q K^T and P V, H x D = h
  const ComputeRates h200 = rates_for(must(load_cluster("dgx-h200")).device, Precision::bf16);
  const AttentionTime at = fused_attention_time_s(forward_flops, 0, h200, false);
  EXPECT_NEAR(slowed.forward_compute_s - none.forward_compute_s, 0.9 * at.forward_s, 1e-9);
  EXPECT_NEAR(slowed.backward_compute_s - none.backward_compute_s, 0.7 * at.backward_s, 1e-9);
  EXPECT_LT(no_dropout.forward_compute_s, slowed.forward_compute_s);
  EXPECT_NEAR(no_dropout.forward_compute_s, layer(0.0, {1, 1}).forward_compute_s, 1e-15);
}

TEST(FusedAttention, CurveInterpolatesInLogFlopsAndFallsBackToHalfTheGemms) {
  DeviceSpec device;
  device.peak_flops_per_s[Dtype::bf16] = 1e15;
  device.attention_forward_curve = {{1e10, 100e12}, {1e12, 300e12}};
  device.attention_backward_curve = {{1e10, 50e12}, {1e12, 150e12}};
  const ComputeRates rates = rates_for(device, Precision::bf16);
  const AttentionTime mid = fused_attention_time_s(1e11, 0, rates, false);  // halfway in ln: 200 and 100 TFLOP/s
  EXPECT_NEAR(mid.forward_s, 1e11 / 200e12, 1e-18);
  EXPECT_NEAR(mid.backward_s, 2.5e11 / 100e12, 1e-18);
  const AttentionTime below = fused_attention_time_s(1e9, 0, rates, false);  // the end rates beyond the points
  EXPECT_NEAR(below.forward_s, 1e9 / 100e12, 1e-18);
  device.attention_forward_curve.clear();
  const AttentionTime fallback = fused_attention_time_s(1e11, 0.4, rates_for(device, Precision::bf16), false);
  EXPECT_DOUBLE_EQ(fallback.forward_s, 0.2);
  EXPECT_DOUBLE_EQ(fallback.backward_s, 0.5);
}

// Hardware FLOPs count what the causal fused kernel runs: half of the score
// matrix forward and backward, and half of the Q K^T its backward recomputes;
// model FLOPs count the whole matrix either way.
TEST(FusedAttention, HardwareFlopsCountTheCausalHalfTheKernelRuns) {
  const auto model = must(load_model("gpt2-124m"));
  const auto cluster = must(load_cluster("dgx-h100"));
  const Evaluator evaluator(model, cluster, 1, 1024);
  Plan plan = plan_with("dp=1", 8, 8);
  plan.attention = Attention::unfused;
  const TimeEstimate unfused = evaluator.evaluate(plan).time;
  plan.attention = Attention::fused;
  const TimeEstimate fused = evaluator.evaluate(plan).time;
  EXPECT_DOUBLE_EQ(unfused.hardware_flops_per_step, unfused.model_flops_per_step);
  EXPECT_DOUBLE_EQ(fused.model_flops_per_step, unfused.model_flops_per_step);
  const double scores = 12 * 2.0 * 1024 * 1024 * 768;  // layers x 2 s^2 q per sample: Q K^T, and P V the same
  // Model: 3 x (Q K^T + P V). Runs: 3 x half of that, and half of Q K^T again.
  EXPECT_NEAR(fused.hardware_flops_per_step - fused.model_flops_per_step, 8 * (-3 * scores + scores / 2),
              1e-9 * fused.model_flops_per_step);
  // Full recompute runs the layers' forward again, its attention at the causal half too.
  plan.recompute = Recompute::full;
  const TimeEstimate full = evaluator.evaluate(plan).time;
  const double head = 2.0 * 1024 * 768 * 50257;  // the LM head's forward per sample, not a layer
  const double forward = fused.model_flops_per_step / 3 - 8 * head;  // the layers' forward, 8 samples
  EXPECT_GT(full.hardware_flops_per_step, fused.hardware_flops_per_step);
  EXPECT_LT(full.hardware_flops_per_step - fused.hardware_flops_per_step, forward);
  EXPECT_NEAR(full.hardware_flops_per_step - fused.hardware_flops_per_step, forward - 8 * scores, 1e-9 * forward);
  EXPECT_LE(full.hfu, 1.0);
}

// At 131072 tokens attention is most of the step and the causal kernel runs half of what model FLOPs
// count: MFU passes 100% by the published convention, HFU does not, and explain says why.
TEST(FusedAttention, MfuAboveOneAtLongSequencesIsExplainedAndHfuStaysBelow) {
  const auto model = must(load_model("llama3-8b"));
  const auto cluster = must(load_cluster("dgx-a100"));
  Plan plan = plan_with("dp=8", 1, 64);
  plan.seq_len = 131072;
  const auto ex = explain_plan(model, cluster, {8, 0}, plan);
  ASSERT_TRUE(ex.time.has_value());
  EXPECT_GT(ex.time->mfu, 1.0);
  EXPECT_LT(ex.time->hfu, 1.0);
  EXPECT_LT(ex.time->hfu, ex.time->mfu);
  const auto note = std::find_if(ex.problems.begin(), ex.problems.end(), [](const Problem& p) { return p.where == "mfu"; });
  ASSERT_NE(note, ex.problems.end());
  EXPECT_EQ(note->severity, Severity::warning);
  EXPECT_NE(note->message.find("causal fused kernel computes half"), std::string::npos) << note->message;
  // At GPT-2's 1024 tokens the same model's MFU is far below 100%: no note.
  plan.seq_len = 1024;
  const auto short_ex = explain_plan(model, cluster, {8, 0}, plan);
  ASSERT_TRUE(short_ex.time.has_value());
  EXPECT_LT(short_ex.time->mfu, 1.0);
  EXPECT_TRUE(std::none_of(short_ex.problems.begin(), short_ex.problems.end(),
                           [](const Problem& p) { return p.where == "mfu"; }));
}

// Rates above the peak (the schema lets a GEMM curve reach 1.5 x gemm_fraction, for shapes that beat
// the tile model) put HFU above 100%: the note blames the device preset, not the FLOP convention,
// which was false at 4096 tokens. A rate that makes the step infinite is an error, not "fits".
TEST(FusedAttention, HfuAboveOneBlamesThePresetAndAnInfiniteStepIsAnError) {
  const auto model = must(load_model("llama2-7b"));
  auto cluster = must(load_cluster("dgx-a100"));
  cluster.device.gemm_efficiency = 1.0;
  cluster.device.gemm_curve = {{1, 1.5}, {100000, 1.5}};
  const Plan plan = plan_with("dp=8", 1, 64);
  const auto fast = explain_plan(model, cluster, {8, 0}, plan);
  ASSERT_TRUE(fast.time.has_value());
  EXPECT_GT(fast.time->hfu, 1.0);
  const auto note = std::find_if(fast.problems.begin(), fast.problems.end(), [](const Problem& p) { return p.where == "mfu"; });
  ASSERT_NE(note, fast.problems.end());
  EXPECT_NE(note->message.find("the device preset's rates"), std::string::npos) << note->message;
  EXPECT_EQ(note->message.find("causal"), std::string::npos) << note->message;

  auto broken = must(load_cluster("dgx-a100"));
  for (auto& point : broken.device.attention_forward_curve) point.flops_per_s = 1e-320;
  const auto ex = explain_plan(model, broken, {8, 0}, plan);
  EXPECT_FALSE(ex.valid);
  EXPECT_FALSE(ex.feasible());
  const auto error = std::find_if(ex.problems.begin(), ex.problems.end(), [](const Problem& p) { return p.where == "time"; });
  ASSERT_NE(error, ex.problems.end());
  EXPECT_EQ(error->severity, Severity::error);
  EXPECT_NE(error->message.find("not a finite number"), std::string::npos) << error->message;
}

// Peak rows on one H100 for GPT-2 124M, 8 x 1024 tokens (dropout, tied vocab 50257).
TEST(PeakMemory, LossLayerGradientAndRuntimeRows) {
  const auto model = must(load_model("gpt2-124m"));
  const auto cluster = must(load_cluster("dgx-h100"));
  Plan plan = plan_with("dp=1", 8, 8);
  const double tokens = 8 * 1024.0;
  for (Attention attention : {Attention::fused, Attention::unfused}) {
    plan.attention = attention;
    plan.loss = Loss::fused;  // the default: the logits' gradient in bf16
    EXPECT_DOUBLE_EQ(explain_plan(model, cluster, {1, 0}, plan).memory->worst().memory.loss_transient_bytes,
                     tokens * 50257 * 2);
    plan.loss = Loss::eager;
    const auto ex = explain_plan(model, cluster, {1, 0}, plan);
    ASSERT_TRUE(ex.memory) << messages(ex.problems);
    const MemoryBreakdown& m = ex.memory->worst().memory;
    EXPECT_DOUBLE_EQ(m.loss_transient_bytes, tokens * 50257 * (2 + 4 + 4));
    // The residual stream's gradient and the widest output's: the MLP's s f fused, the 12 s^2 scores unfused.
    const double widest = attention == Attention::fused ? 1024.0 * 3072 : 12 * 1024.0 * 1024;
    EXPECT_DOUBLE_EQ(m.activation_gradient_bytes, 8 * (1024.0 * 768 + widest) * 2);
    EXPECT_DOUBLE_EQ(m.workspace_bytes, 32 * kMiB);
    EXPECT_DOUBLE_EQ(m.runtime_context_bytes, 400 * kMiB);
    EXPECT_DOUBLE_EQ(m.allocated_peak_bytes(),
                     m.steady_bytes() + std::max(m.loss_transient_bytes, m.activation_gradient_bytes) + m.workspace_bytes);
    EXPECT_DOUBLE_EQ(m.total_bytes(), m.allocated_peak_bytes() + m.runtime_context_bytes + m.allocator_reserve_bytes);
  }
  // A CPU has no CUDA context, workspace or allocator reserve.
  const auto cpu = explain_plan(model, must(load_cluster("local-cpu")), {1, 0}, plan);
  ASSERT_TRUE(cpu.memory);
  EXPECT_EQ(cpu.memory->worst().memory.runtime_context_bytes, 0);
  EXPECT_EQ(cpu.memory->worst().memory.workspace_bytes, 0);
  EXPECT_EQ(cpu.memory->worst().memory.allocator_reserve_bytes, 0);
}

// Dropout masks are the model's: two s h per layer (after the attention and
// the MLP) and one after the embedding; unfused attention adds its a s^2.
TEST(PeakMemory, DropoutMasksAreCountedAsTheirShareOfActivations) {
  const auto model = must(load_model("gpt2-124m"));
  const auto cluster = must(load_cluster("dgx-h100"));
  Plan plan = plan_with("dp=1", 1, 1);
  const double s = 1024, h = 768, a = 12;
  const auto fused = explain_plan(model, cluster, {1, 0}, plan).memory->worst().memory;
  EXPECT_DOUBLE_EQ(fused.dropout_mask_bytes, 12 * 2 * s * h + s * h);
  plan.attention = Attention::unfused;
  const auto unfused = explain_plan(model, cluster, {1, 0}, plan).memory->worst().memory;
  EXPECT_DOUBLE_EQ(unfused.dropout_mask_bytes, 12 * (2 * s * h + a * s * s) + s * h);
  ModelSpec no_dropout = model;
  no_dropout.transformer.dropout = 0;
  EXPECT_EQ(explain_plan(no_dropout, cluster, {1, 0}, plan).memory->worst().memory.dropout_mask_bytes, 0);
}

// The loss lives on the last pipeline stage only; tp splits the vocabulary.
TEST(PeakMemory, LossTransientOnTheLastStageSplitByTp) {
  const auto model = must(load_model("gpt2-350m"));
  const auto cluster = must(load_cluster("dgx-h100"));
  Plan plan = plan_with("pp=2,tp=2", 1, 4);
  plan.loss = Loss::eager;
  const auto ex = explain_plan(model, cluster, {4, 0}, plan);
  ASSERT_TRUE(ex.memory) << messages(ex.problems);
  EXPECT_EQ(ex.memory->stages.front().memory.loss_transient_bytes, 0);
  EXPECT_DOUBLE_EQ(ex.memory->stages.back().memory.loss_transient_bytes, 1024.0 * 50257 / 2 * 10);
}

// What must fit is the peak: a plan whose steady states fit between them and
// the peak does not fit.
TEST(PeakMemory, FeasibilityCountsThePeak) {
  const auto model = must(load_model("gpt2-1.5b"));
  const auto cluster = must(load_cluster("dgx-h100"));
  Plan plan = plan_with("dp=1", 4, 4);
  const MemoryBreakdown m = explain_plan(model, cluster, {1, 0}, plan).memory->worst().memory;
  ASSERT_GT(m.total_bytes(), m.steady_bytes() * 1.01);
  plan.memory_headroom = 1 - (m.steady_bytes() + m.total_bytes()) / 2 / cluster.device.memory_bytes;
  const auto ex = explain_plan(model, cluster, {1, 0}, plan);
  EXPECT_TRUE(ex.valid);
  EXPECT_FALSE(ex.fits_memory());
  const Evaluator evaluator(model, cluster, 1, 1024);
  EXPECT_FALSE(evaluator.evaluate(plan).fits);
}

// The host issues one kernel per op (the fused attention one) forward and
// two backward: at a launch overhead far above any kernel's time, the step
// is the kernel count x the overhead.
TEST(LaunchFloor, SmallKernelsWaitForTheHost) {
  const auto model = must(load_model("gpt2-124m"));
  ClusterSpec cluster = must(load_cluster("dgx-h100"));
  cluster.device.launch_overhead_s = 1.0;
  const Evaluator evaluator(model, cluster, 1, 1024);
  Plan plan = plan_with("dp=1", 1, 1);
  const TimeEstimate t = evaluator.evaluate(plan).time;
  // Per layer: ln1, qkv, attention, out, residual, ln2, w_in, act, w_out, residual = 10;
  // embedding: tokens, positions, dropout = 3; head: norm, output, loss = 3.
  const double kernels = 12 * 10 + 3 + 3;
  EXPECT_DOUBLE_EQ(t.stage_forward_s, kernels);
  EXPECT_DOUBLE_EQ(t.stage_backward_s, 2 * kernels);
  EXPECT_DOUBLE_EQ(launch_floor_s(0.5, 3, rates_for(cluster.device, Precision::bf16)), 3.0);
  EXPECT_DOUBLE_EQ(launch_floor_s(5.0, 3, rates_for(cluster.device, Precision::bf16)), 5.0);
}

// The presets carry the measured figures; H200 differs only in HBM.
TEST(MeasuredPresets, H100AndH200EachCarryTheirOwnMeasurements) {
  const DeviceSpec h100 = must(load_device("h100-sxm"));
  const DeviceSpec h200 = must(load_device("h200"));
  EXPECT_NEAR(h100.gemm_efficiency, 795.2 / 989.4, 1e-3);
  EXPECT_EQ(h100.gemm_curve.size(), 8u);
  EXPECT_EQ(h100.attention_forward_curve.size(), 6u);
  EXPECT_EQ(h100.attention_backward_curve.size(), 6u);
  EXPECT_DOUBLE_EQ(h100.launch_overhead_s, 26e-6);
  EXPECT_DOUBLE_EQ(h100.context_bytes, 400 * kMiB);
  EXPECT_DOUBLE_EQ(h100.workspace_bytes, 32 * kMiB);
  EXPECT_EQ(h100.l2_bandwidth_bytes_per_s, 0);  // no citable measurement; the curve carries it
  // H200: the same GH100 compute (datasheet peaks), its own HBM3e and its own
  // measurements (tests/data/h200-measured.jsonl).
  EXPECT_DOUBLE_EQ(h200.memory_bandwidth_bytes_per_s, 4800e9);
  EXPECT_NEAR(h200.memory_bytes, 139.8 * kGiB, 1e-9 * kGiB);  // what the card reports, not the datasheet's 141 GB
  EXPECT_EQ(h200.peak_flops_per_s, h100.peak_flops_per_s);
  EXPECT_NEAR(h200.gemm_efficiency, 774.5 / 989.4, 1e-3);
  EXPECT_DOUBLE_EQ(h200.launch_overhead_s, 20.9e-6);
  EXPECT_EQ(h200.gemm_curve.size(), 8u);
  EXPECT_EQ(h200.attention_forward_curve.size(), 6u);
  // Memory-bound classes stream faster on the faster HBM, each measured.
  for (StreamOp op : {StreamOp::norm, StreamOp::activation, StreamOp::elementwise, StreamOp::cross_entropy, StreamOp::optimizer}) {
    const auto i = static_cast<std::size_t>(op);
    EXPECT_GT(h200.op_bandwidth_bytes_per_s[i], h100.op_bandwidth_bytes_per_s[i]) << to_string(op);
  }
  // Dropout's slowdown of fused attention: measured on the H200, carried to the H100 (same SMs and clocks).
  EXPECT_DOUBLE_EQ(h200.attention_dropout_slowdown[0], 1.927);
  EXPECT_DOUBLE_EQ(h200.attention_dropout_slowdown[1], 1.768);
  EXPECT_EQ(h100.attention_dropout_slowdown, h200.attention_dropout_slowdown);
}

TEST(MeasuredPresets, BadRuntimeAndAttentionCurvesAreNamedErrors) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("meshplan-attention-peak-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "dev.yaml").string();
  struct Case {
    const char* yaml;
    const char* expect;
  };
  const Case cases[] = {
      {"achievable:\n  attention_forward_curve: [[10, 50], [5, 60]]\n", "GFLOP per call must increase strictly"},
      {"achievable:\n  attention_backward_curve: [[10, 0]]\n", "item 1: TFLOP/s must be at least 1e-06"},
      // A rate a kernel cannot reach (1e-320 gave an infinite step that was called "fits")...
      {"achievable:\n  attention_forward_curve: [[1, 1e-320], [2, 1e-320]]\n", "item 1: TFLOP/s must be at least 1e-06"},
      // ...or one above the peak (MFU 184% was printed as the FLOP convention's doing).
      {"achievable:\n  attention_forward_curve: [[34.4, 50], [1099.5, 150]]\n",
       "item 2: 150 TFLOP/s is above the device's dense 16-bit peak, 100 TFLOP/s"},
      {"achievable:\n  attention_forward_curve: [[.nan, 50]]\n", "item 1: [.nan, 50]: both numbers must be finite"},
      {"runtime:\n  context_mib: -1\n", "key 'runtime.context_mib'"},
      {"runtime:\n  allocator_reserve_fraction: 2\n", "key 'runtime.allocator_reserve_fraction'"},
      {"runtime:\n  launch_us: 5\n", "unknown key"},
  };
  for (const Case& c : cases) {
    std::ofstream(path) << "name: dev\nsource: test\npeak_tflops:\n  bf16: 100\nmemory_gib: 8\n"
                           "memory_bandwidth_gb_per_s: 100\n"
                        << c.yaml;
    const auto device = load_device(path);
    EXPECT_FALSE(device.ok()) << c.yaml;
    EXPECT_NE(messages(device.problems).find(c.expect), std::string::npos) << c.yaml << messages(device.problems);
  }
  std::filesystem::remove_all(dir);
}

// The search tries each attention asked for, transformers only.
TEST(FusedAttention, SearchDimension) {
  const auto model = must(load_model("gpt2-124m"));
  const auto cluster = must(load_cluster("dgx-h100"));
  SearchSpace space;
  space.micro_batches = {1, 2};
  const Evaluator evaluator(model, cluster, 8, 1024);
  const auto one = search(evaluator, 64, space);
  space.attentions = {Attention::fused, Attention::unfused};
  const auto both = search(evaluator, 64, space);
  // Recompute none, selective, full: fused attention tries none and full (selective is none's
  // plan there), unfused all three.
  EXPECT_EQ(2 * both.stats.plans, 5 * one.stats.plans);
  ASSERT_FALSE(both.ranked.empty());
  EXPECT_EQ(both.ranked.front().plan.attention, Attention::fused);  // no s x s passes: faster on H100
}

// Selective recompute drops the attention core's s x s tensors and repeats it; fused attention
// keeps none, so the plan equals the one without recompute and the search does not list it twice,
// unless none is not searched.
TEST(FusedAttention, SelectiveRecomputeIsNotRepeatedUnderFusedAttention) {
  const auto model = must(load_model("gpt2-124m"));
  const auto cluster = must(load_cluster("dgx-h100"));
  const Evaluator evaluator(model, cluster, 8, 1024);
  SearchSpace space;
  space.micro_batches = {1, 2};
  space.attentions = {Attention::fused, Attention::unfused};
  const auto result = search(evaluator, 64, space);
  ASSERT_FALSE(result.ranked.empty());
  int selective_unfused = 0;
  for (const auto& c : result.ranked) {
    EXPECT_FALSE(c.plan.recompute == Recompute::selective && c.plan.attention == Attention::fused);
    selective_unfused += c.plan.recompute == Recompute::selective;
  }
  EXPECT_GT(selective_unfused, 0);  // unfused attention still tries it

  // The two are the same plan: equal time and memory.
  Plan plan = result.ranked.front().plan;
  plan.attention = Attention::fused;
  plan.recompute = Recompute::none;
  const PlanEstimate none = evaluator.evaluate(plan);
  plan.recompute = Recompute::selective;
  const PlanEstimate selective = evaluator.evaluate(plan);
  EXPECT_EQ(none.time.step_s, selective.time.step_s);
  EXPECT_EQ(none.worst_memory.total_bytes(), selective.worst_memory.total_bytes());

  space.recomputes = {Recompute::selective};  // asked for alone: searched
  space.attentions = {Attention::fused};
  const auto alone = search(evaluator, 64, space);
  ASSERT_FALSE(alone.ranked.empty());
  EXPECT_EQ(alone.ranked.front().plan.recompute, Recompute::selective);
}

}  // namespace
}  // namespace meshplan
