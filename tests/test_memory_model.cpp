// Unit tests of the memory model's formulas, one rule at a time.
#include <gtest/gtest.h>

#include "model/evaluate.hpp"
#include "model/explain.hpp"
#include "model/memory_model.hpp"
#include "model/published_cases.hpp"
#include "test_support.hpp"

namespace meshplan {
namespace {
using namespace testing_support;

TEST(InFlightMicroBatches, EachSchedule) {
  const Schedule gpipe{ScheduleKind::gpipe, 1}, one_f{ScheduleKind::one_f_one_b, 1}, zb{ScheduleKind::zb_h1, 1};
  EXPECT_EQ(in_flight_chunk_micro_batches(gpipe, 4, 0, 16), 16);   // GPipe keeps every micro-batch
  EXPECT_EQ(in_flight_chunk_micro_batches(one_f, 4, 0, 16), 4);    // 1F1B: p - r on stage r
  EXPECT_EQ(in_flight_chunk_micro_batches(one_f, 4, 3, 16), 1);
  EXPECT_EQ(in_flight_chunk_micro_batches(one_f, 8, 0, 3), 3);     // never more than there are
  EXPECT_EQ(in_flight_chunk_micro_batches(zb, 4, 1, 16), 4);       // ZB-H1: 1F1B's first-stage peak on every stage
  EXPECT_EQ(in_flight_chunk_micro_batches(one_f, 1, 0, 16), 1);    // no pipeline: accumulation one at a time
  EXPECT_EQ(in_flight_chunk_micro_batches(gpipe, 1, 0, 16), 1);
  // Interleaved (Megatron-LM warm-up 2 (p - r - 1) + (v - 1) p, plus one): stage 0 of p = 8, v = 3.
  const Schedule inter{ScheduleKind::interleaved, 3};
  EXPECT_EQ(in_flight_chunk_micro_batches(inter, 8, 0, 64), 2 * 7 + 2 * 8 + 1);
  // In layers that is L (1 + (p - 1) / (p v)) of Korthikanti et al. 2022, Sec. 4.2.3.
  const double chunk_layers = 96.0 / 24;
  EXPECT_DOUBLE_EQ(in_flight_chunk_micro_batches(inter, 8, 0, 64) * chunk_layers, 96.0 * (1 + 7.0 / 24));
}

struct ZeroStageCase {
  int stage;
  double params, grads, optimizer;  // bytes per parameter on each of N_d = 8 devices
};

class ZeroSharding : public ::testing::TestWithParam<ZeroStageCase> {};

TEST_P(ZeroSharding, ShardsTheRightStates) {
  const auto model = must(load_model("mlp-fashion"));
  const auto cluster = must(load_cluster("dgx-a100"));
  Plan plan = plan_with("dp=8", 1, 8);
  plan.zero_stage = GetParam().stage;
  const auto ex = explain_plan(model, cluster, {8, 0}, plan);
  ASSERT_TRUE(ex.valid) << messages(ex.problems);
  const auto& m = ex.memory->worst().memory;
  const double psi = ex.parameter_count;
  EXPECT_DOUBLE_EQ(m.parameters_bytes, GetParam().params * psi);
  EXPECT_DOUBLE_EQ(m.gradients_bytes, GetParam().grads * psi);
  EXPECT_DOUBLE_EQ(m.optimizer_bytes, GetParam().optimizer * psi);
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroSharding,
                         ::testing::Values(ZeroStageCase{0, 2, 2, 12}, ZeroStageCase{1, 2, 2, 12.0 / 8},
                                           ZeroStageCase{2, 2, 2.0 / 8, 12.0 / 8},
                                           ZeroStageCase{3, 2.0 / 8, 2.0 / 8, 12.0 / 8}));

TEST(MemoryModel, FsdpShardsLikeZeroThree) {
  const auto model = must(load_model("gpt2-124m"));
  const auto cluster = must(load_cluster("dgx-a100"));
  Plan zero3 = plan_with("dp=8", 1, 8);
  zero3.zero_stage = 3;
  Plan fsdp = plan_with("fsdp=8", 1, 8);
  const auto a = explain_plan(model, cluster, {8, 0}, zero3).memory->worst().memory;
  const auto b = explain_plan(model, cluster, {8, 0}, fsdp).memory->worst().memory;
  EXPECT_DOUBLE_EQ(a.parameters_bytes, b.parameters_bytes);
  EXPECT_DOUBLE_EQ(a.gradients_bytes, b.gradients_bytes);
  EXPECT_DOUBLE_EQ(a.optimizer_bytes, b.optimizer_bytes);
  EXPECT_DOUBLE_EQ(a.activations_bytes, b.activations_bytes);
}

TEST(MemoryModel, PrecisionBytesPerParameter) {
  EXPECT_DOUBLE_EQ(bytes_for(Precision::bf16).weight_bytes_per_parameter + bytes_for(Precision::bf16).gradient_bytes_per_parameter +
                       bytes_for(Precision::bf16).optimizer_bytes_per_parameter,
                   16);
  EXPECT_DOUBLE_EQ(bytes_for(Precision::fp32).optimizer_bytes_per_parameter, 8);
  EXPECT_DOUBLE_EQ(bytes_for(Precision::fp32).activation_bytes_per_element, 4);
  EXPECT_DOUBLE_EQ(bytes_for(Precision::fp8).weight_bytes_per_parameter, 3);
}

TEST(MemoryModel, TensorParallelSplitsWeightsButNotNorms) {
  const auto model = must(load_model("gpt2-124m"));
  const auto cluster = must(load_cluster("dgx-a100"));
  const auto four = explain_plan(model, cluster, {4, 0}, plan_with("tp=4", 1, 1)).memory->worst();
  // Norm weights, learned positions and row-parallel biases stay whole on every tp rank.
  const double replicated = 768.0 * 1024                       // learned positions
                            + 12 * (2 * 2 * 768 + 768 + 768)   // two layer norms, two row-parallel biases
                            + 2 * 768;                         // final norm
  const double total = 124'439'808;
  EXPECT_DOUBLE_EQ(four.parameters_on_device, (total - replicated) / 4 + replicated);
}

TEST(MemoryModel, TiedEmbeddingIsCopiedToTheLastStage) {
  const auto model = must(load_model("gpt2-124m"));  // tied, 12 layers
  const auto cluster = must(load_cluster("dgx-a100"));
  const auto ex = explain_plan(model, cluster, {2, 0}, plan_with("pp=2", 1, 8));
  ASSERT_TRUE(ex.valid) << messages(ex.problems);
  const double sum = ex.memory->stages[0].parameters_on_device + ex.memory->stages[1].parameters_on_device;
  EXPECT_DOUBLE_EQ(sum - ex.parameter_count, 50257.0 * 768);  // Megatron keeps the output copy on the last stage
}

TEST(MemoryModel, FullRecomputeKeepsLayerInputsPlusOneLayer) {
  const auto model = korthikanti_model(8, 1024, 16);
  const auto cluster = must(load_cluster("dgx-a100"));
  Plan none = plan_with("dp=1", 1, 1);
  none.attention = Attention::unfused;  // Korthikanti et al.'s per-layer formula
  Plan full = none;
  full.recompute = Recompute::full;
  const auto a = explain_plan(model, cluster, {1, 0}, none).memory->worst().memory.activations_bytes;
  const auto b = explain_plan(model, cluster, {1, 0}, full).memory->worst().memory.activations_bytes;
  const double s = 2048, h = 1024, per_layer = s * h * (34 + 5 * 16 * s / h);
  const double extras = a - 8 * per_layer;  // embedding and head, never recomputed
  EXPECT_NEAR(b, extras + 8 * 2 * s * h + per_layer, 1e-6 * b);
}

// torchtitan's op-level checkpointing keeps, per token of each layer, the
// layer's input and the outputs of matmuls 1, 3, 5 and 7 (q, v, gate, down)
// and of the attention kernel (output and fp32 log-sum-exp per head); the
// backward rebuilds one layer at a time, as full recompute does. So against
// full recompute it keeps q + v + gate + down + attention output more per
// token and layer, and nothing else changes.
TEST(MemoryModel, OpLevelCheckpointingKeepsEverySecondMatmulOutput) {
  for (const char* name : {"llama2-7b", "llama3-8b"}) {  // multi-head and grouped-query attention
    const auto model = must(load_model(name));
    const auto cluster = must(load_cluster("dgx-a100"));
    Plan full = plan_with("dp=1", 1, 1);
    full.recompute = Recompute::full;
    Plan op = full;
    op.recompute = Recompute::selective_op;
    const auto f = explain_plan(model, cluster, {1, 0}, full).memory->worst().memory.activations_bytes;
    const auto o = explain_plan(model, cluster, {1, 0}, op).memory->worst().memory.activations_bytes;
    const auto& t = model.transformer;
    const double s = static_cast<double>(model.default_seq_len()), h = static_cast<double>(t.hidden);
    const double q = static_cast<double>(t.heads * t.head_dim), kv = static_cast<double>(t.key_value_heads() * t.head_size());
    const double kept_per_token = 2 * (q + kv + static_cast<double>(t.ffn) + h + q) + 4 * static_cast<double>(t.heads);
    EXPECT_NEAR(o - f, static_cast<double>(t.layers) * s * kept_per_token, 1e-9 * o) << name;
    // Unfused attention's bmm and softmax are not on torchtitan's save list: nothing of the core is kept.
    Plan full_unfused = full, op_unfused = op;
    full_unfused.attention = op_unfused.attention = Attention::unfused;
    const auto fu = explain_plan(model, cluster, {1, 0}, full_unfused).memory->worst().memory.activations_bytes;
    const auto ou = explain_plan(model, cluster, {1, 0}, op_unfused).memory->worst().memory.activations_bytes;
    EXPECT_NEAR(ou - fu, static_cast<double>(t.layers) * s * 2 * (q + kv + static_cast<double>(t.ffn) + h), 1e-9 * ou) << name;

    // tp = 2 with sequence parallelism: the reduce-scatters' outputs are on
    // torchtitan's save list (o's and down's, split like the residual stream),
    // and so are down's partial sums before its reduce-scatter, whole on each
    // tp rank.
    Plan full_sp = plan_with("tp=2", 1, 1);
    full_sp.recompute = Recompute::full;
    full_sp.sequence_parallel = true;
    Plan op_sp = full_sp;
    op_sp.recompute = Recompute::selective_op;
    const auto fs = explain_plan(model, cluster, {2, 0}, full_sp).memory->worst().memory.activations_bytes;
    const auto os = explain_plan(model, cluster, {2, 0}, op_sp).memory->worst().memory.activations_bytes;
    const double kv_tp = static_cast<double>(kv_tp_split(t.key_value_heads(), 2));
    const double kept_sp = 2 * ((q + static_cast<double>(t.ffn) + h + q) / 2 + kv / kv_tp + h / 2 + h) +
                           4 * static_cast<double>(t.heads) / 2;
    EXPECT_NEAR(os - fs, static_cast<double>(t.layers) * s * kept_sp, 1e-9 * os) << name;
  }
}

// What op-level checkpointing repeats: matmuls 2, 4 and 6 of each layer (k, o,
// up) and every memory-bound op; the step lies between none and full.
TEST(MemoryModel, OpLevelCheckpointingRepeatsKOAndUp) {
  const auto model = must(load_model("llama3-8b"));
  const auto cluster = must(load_cluster("dgx-a100"));
  const Evaluator evaluator(model, cluster, 8, 4096);
  Plan none = plan_with("fsdp=8", 1, 8);
  none.seq_len = 4096;
  none.recompute = Recompute::none;
  Plan op = none, full = none;
  op.recompute = Recompute::selective_op;
  full.recompute = Recompute::full;
  const TimeEstimate a = evaluator.evaluate(none).time, b = evaluator.evaluate(op).time, c = evaluator.evaluate(full).time;
  const auto& t = model.transformer;
  const double s = 4096, h = static_cast<double>(t.hidden), kv = static_cast<double>(t.key_value_heads() * t.head_size());
  const double q = static_cast<double>(t.heads * t.head_dim);
  const double per_sample = static_cast<double>(t.layers) * 2 * s * h * (kv + q + static_cast<double>(t.ffn));
  EXPECT_NEAR(b.hardware_flops_per_step - a.hardware_flops_per_step, 8 * per_sample, 1e-9 * b.hardware_flops_per_step);
  EXPECT_EQ(a.model_flops_per_step, b.model_flops_per_step);
  EXPECT_LT(a.step_s, b.step_s);
  EXPECT_LT(b.step_s, c.step_s);
  // An MLP has no transformer blocks to checkpoint op by op.
  const auto mlp = must(load_model("mlp-seed"));
  Plan mlp_plan = plan_with("dp=1", 1, 1);
  mlp_plan.recompute = Recompute::selective_op;
  const auto refused = explain_plan(mlp, cluster, {1, 0}, mlp_plan);
  bool error = false;
  for (const Problem& p : refused.problems) error = error || (p.severity == Severity::error && p.where == "recompute");
  EXPECT_TRUE(error);
}

TEST(MemoryModel, ActivationsScaleWithMicroBatchAndContextParallel) {
  const auto model = must(load_model("llama2-7b"));
  const auto cluster = must(load_cluster("dgx-a100"));
  const auto one = explain_plan(model, cluster, {1, 0}, plan_with("dp=1", 1, 1)).memory->worst().memory;
  const auto two = explain_plan(model, cluster, {1, 0}, plan_with("dp=1", 2, 2)).memory->worst().memory;
  EXPECT_DOUBLE_EQ(two.activations_bytes, 2 * one.activations_bytes);
  const auto cp2 = explain_plan(model, cluster, {2, 0}, plan_with("cp=2", 1, 1)).memory->worst().memory;
  EXPECT_DOUBLE_EQ(cp2.activations_bytes, one.activations_bytes / 2);
  EXPECT_GT(cp2.buffers_bytes, 0);  // ring-attention key/value chunks
}

TEST(MemoryModel, BuffersAppearWithTheAxesThatNeedThem) {
  const auto model = must(load_model("gpt2-350m"));
  const auto cluster = must(load_cluster("dgx-a100"));
  EXPECT_EQ(explain_plan(model, cluster, {1, 0}, plan_with("dp=1", 1, 1)).memory->worst().memory.buffers_bytes, 0);
  const auto dp = explain_plan(model, cluster, {8, 0}, plan_with("dp=8", 1, 8)).memory->worst().memory;
  EXPECT_DOUBLE_EQ(dp.buffers_bytes, 2 * 25.0 * 1024 * 1024);  // two DDP buckets of 25 MiB
  const auto fsdp = explain_plan(model, cluster, {8, 0}, plan_with("fsdp=8", 1, 8)).memory->worst().memory;
  EXPECT_GT(fsdp.buffers_bytes, 0);
  const auto pp = explain_plan(model, cluster, {2, 0}, plan_with("pp=2", 1, 4)).memory->worst().memory;
  EXPECT_DOUBLE_EQ(pp.buffers_bytes, 4 * 1024.0 * 1024 * 2);  // send/recv x act/grad of s h 16-bit
}

TEST(MemoryModel, FeasibilityUsesHeadroom) {
  const auto model = must(load_model("llama2-7b"));
  const auto cluster = must(load_cluster("dgx-a100"));
  Plan plan = plan_with("dp=1", 1, 1);
  auto ex = explain_plan(model, cluster, {1, 0}, plan);
  // 7B x 16 bytes = 100 GiB of model states: cannot fit one 80 GiB device.
  EXPECT_TRUE(ex.valid);
  EXPECT_FALSE(ex.fits_memory());
  EXPECT_FALSE(ex.feasible());
  plan.mesh = must(parse_mesh("fsdp=8", "mesh"));
  plan.global_batch = 8;
  ex = explain_plan(model, cluster, {8, 0}, plan);
  EXPECT_TRUE(ex.feasible()) << messages(ex.problems);
  EXPECT_DOUBLE_EQ(ex.memory->usable_bytes, 0.95 * 80 * kGiB);
}

}  // namespace
}  // namespace meshplan
