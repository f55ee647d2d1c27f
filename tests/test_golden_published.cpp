// Golden tests against published memory figures (../shared/reference/
// validation-visible.md) and published multi-GPU throughputs, read from
// model/published_cases.cpp, the same list `meshplan validation` reports on.
// No constant in the model was fitted to them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "model/published_cases.hpp"
#include "test_support.hpp"

namespace meshplan {
namespace {
using namespace testing_support;

void expect_within(const std::vector<PublishedResult>& results, double tolerance) {
  ASSERT_FALSE(results.empty());
  for (const auto& r : results) {
    std::printf("[ golden ] %-34s published %8.2f %-3s predicted %8.2f  %+5.1f%%\n", r.c.name.c_str(), r.c.published,
                unit_of(r.c.quantity).c_str(), r.predicted, 100 * r.error());
    EXPECT_LE(std::abs(r.error()), tolerance) << r.c.name << " (" << r.c.source << ")";
  }
}

// ZeRO (Rajbhandari et al. 2020, Fig. 1): Psi = 7.5B, N_d = 64, mixed-precision
// Adam: 120, 31.4, 16.6, 1.88 GB. The paper prints three significant figures;
// our Psi is 7.50015e9.
TEST(ZeroFigure1, ModelStatesPerDevice) {
  const auto results = predict(zero_model_state_cases());
  ASSERT_EQ(results.size(), 4u);
  expect_within(results, 0.0051);
}

// torchtitan's Llama 3.1 8B FSDP on 8 and 128 H100s (Tables 1 and 3, eager):
// 82.4 and 67.0 GiB peak reserved per GPU, each within issue 15's 10%.
TEST(TorchtitanH100, PeakMemoryPerDevice) {
  const auto results = predict(torchtitan_h100_memory_cases());
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].c.published, 82.4);
  EXPECT_EQ(results[1].c.published, 67.0);
  expect_within(results, kPeakMemoryTarget);
}

// Korthikanti et al. 2022, Figure 1: activation memory per GPU of the first
// pipeline stage for the Table 3 configurations, within 5%.
TEST(KorthikantiFigure1, FirstStageActivationsWithinFivePercent) {
  const auto results = predict(korthikanti_activation_cases());
  ASSERT_EQ(results.size(), 8u);
  expect_within(results, 0.05);
}

// Published multi-GPU runs as step times (docs/validation.md, "Published
// multi-GPU runs"). The conversions first, by hand from the sources' numbers.
TEST(PublishedMultiGpu, StepTimesImpliedByThePublishedThroughputs) {
  const auto cases = published_multi_gpu_cases();
  ASSERT_EQ(cases.size(), 23u);
  const auto results = predict(cases);
  // Narayanan et al. 2021 Table 1, 1T row: Eq. 3 with B 3072, s 2048, l 128,
  // h 25600, V 51200, at 163 TFLOP/s on each of 3072 GPUs.
  const double l = 128, h = 25600, s = 2048, v = 51200, b = 3072;
  const double flops = 96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h));
  EXPECT_NEAR(results[9].c.published, flops / (163e12 * 3072), 1e-9);
  // 102.6 s: with 3072 x 2048 tokens a step, the paper's 450B tokens take
  // 71,526 steps, 85 days, as its Sec. 5.1 estimate (84 days) says.
  EXPECT_NEAR(results[9].c.published, 102.6, 0.1);
  // torchtitan, Llama 3 8B: 64 sequences of 8192 tokens at 2973 tokens/s on each of 64 GPUs.
  EXPECT_NEAR(results[10].c.published, 64.0 * 8192 / (2973.0 * 64), 1e-12);
  // torchtitan, Llama 2 13B without checkpointing: local batch 2 of 4096 tokens at 2162 tokens/s.
  EXPECT_NEAR(results[12].c.published, 128.0 * 4096 / (2162.0 * 64), 1e-12);
  EXPECT_EQ(results[12].c.plan.micro_batch, 2);
  EXPECT_EQ(results[12].c.plan.recompute, Recompute::none);
  // Llama 3 Table 4, first row: 2048 x 8192 tokens on 8192 GPUs at 430 TFLOP/s,
  // with meshplan's model FLOPs (6 N D-style) of that step.
  EXPECT_EQ(results[16].c.plan.global_batch, 2048);
  EXPECT_EQ(results[16].c.plan.mesh.world_size(), 8192);
  EXPECT_EQ(results[18].c.plan.mesh.world_size(), 16384);
  EXPECT_EQ(results[18].c.plan.global_batch * results[18].c.plan.seq_len, 16 * 8 * 131072);
  // Megatron Bridge, Llama 3 70B FP8 (NeMo 25.11): 128 x 8192 tokens at 1602 tokens/s on each of 64 GPUs,
  // dp 64 / (tp 4 x pp 8); Llama 3.1 405B: 126 layers and the embedding and loss in 64 chunks of 2.
  EXPECT_NEAR(results[19].c.published, 128.0 * 8192 / (1602.0 * 64), 1e-12);
  EXPECT_EQ(results[19].c.plan.mesh.size(Axis::dp), 2);
  EXPECT_TRUE(results[19].c.plan.tp_comm_overlap);
  EXPECT_EQ(results[21].c.plan.mesh.size(Axis::dp), 8);
  EXPECT_EQ(results[21].c.plan.stage_layers.size(), 64u);
  std::int64_t layers = 0;
  for (std::int64_t n : results[21].c.plan.stage_layers) layers += n;
  EXPECT_EQ(layers, 126);
  for (const auto& r : results) {
    std::printf("[ golden ] %-36s implied %8.3f s  predicted %8.3f s  %+6.1f%%\n", r.c.name.c_str(), r.c.published,
                r.predicted, 100 * r.error());
    EXPECT_GT(r.c.published, 0) << r.c.name;
    EXPECT_GT(r.predicted, 0) << r.c.name << ": the plan must be valid";
    EXPECT_FALSE(r.c.note.empty()) << r.c.name;
  }
}

// Each row within issue 15's 12% (the 90th-percentile target), or, for the
// rows docs/validation.md states as misses, within that miss + 2 points: a
// regression fails here; a row that improves past its target is then to be
// moved to the first kind. The median is pinned the same way (11.4% stated).
TEST(PublishedMultiGpu, RowsWithinTargetOrStatedMiss) {
  const std::pair<const char*, double> stated_misses[] = {
      {"1.7B, 32 A100", 0.126},
      {"76.1B, 1024 A100", 0.139},
      {"Llama 3 8B, 64 A100, FSDP", 0.227},
      {"Llama 3 70B, 64 A100, FSDP", 0.161},
      {"Llama 2 13B, 64 A100, FSDP, no AC", 0.218},
      {"Llama 2 13B, 64 A100, FSDP, op AC", 0.226},
      {"Llama 2 70B, 64 A100, FSDP, op AC", 0.274},
      {"Llama 2 70B, 64 A100, FSDP, full AC", 0.151},
      {"Llama 3 405B, 16384 H100, seq 131072", 0.128},
  };
  const auto results = predict(published_multi_gpu_cases());
  for (const auto& r : results) {
    double bound = kMultiGpuP90Target;
    for (const auto& [name, miss] : stated_misses) {
      if (r.c.name == name) bound = miss + 0.02;
    }
    EXPECT_LE(std::abs(r.error()), bound) << r.c.name << " (" << r.c.source << "): " << 100 * r.error() << "%";
  }
  EXPECT_LE(error_quantile(results, 0.5), 0.114 + 0.02);
}

TEST(PublishedMultiGpu, ErrorQuantilesByNearestRank) {
  std::vector<PublishedResult> results;
  for (double predicted : {1.01, 0.97, 1.10, 1.30, 0.95}) {  // |errors| 1, 3, 10, 30, 5 %
    PublishedCase c;
    c.published = 1;
    results.push_back({c, predicted});
  }
  EXPECT_NEAR(error_quantile(results, 0.5), 0.05, 1e-12);
  EXPECT_NEAR(error_quantile(results, 0.9), 0.30, 1e-12);
  EXPECT_NEAR(error_quantile(results, 0.2), 0.01, 1e-12);
  EXPECT_EQ(error_quantile({}, 0.5), 0);
}

TEST(SeedRuleOfThumb, AdamNeedsFourTimesTheFp32ModelSize) {
  // "Budget about 4x the fp32 model size for Adam training (params + grads + two moments)."
  for (const char* name : {"gpt2-124m", "llama2-7b", "mlp-seed"}) {
    const auto model = must(load_model(name));
    const auto cluster = must(load_cluster("dgx-h100"));
    Plan plan = plan_with("dp=1", 1, 1);
    plan.precision = Precision::fp32;
    const Explanation ex = explain_plan(model, cluster, {1, 0}, plan);
    ASSERT_TRUE(ex.memory);
    const auto& m = ex.memory->worst().memory;
    const double fp32_model_bytes = 4 * ex.parameter_count;
    EXPECT_DOUBLE_EQ((m.parameters_bytes + m.gradients_bytes + m.optimizer_bytes) / fp32_model_bytes, 4.0) << name;
  }
}

}  // namespace
}  // namespace meshplan
