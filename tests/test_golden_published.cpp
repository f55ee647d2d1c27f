// Golden tests against published memory figures (../shared/reference/
// validation-visible.md), read from model/published_cases.cpp, the same list
// `meshplan validation` reports on. No constant in the model was fitted to them.
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

// Korthikanti et al. 2022, Figure 1: activation memory per GPU of the first
// pipeline stage for the Table 3 configurations, within 5%.
TEST(KorthikantiFigure1, FirstStageActivationsWithinFivePercent) {
  const auto results = predict(korthikanti_activation_cases());
  ASSERT_EQ(results.size(), 8u);
  expect_within(results, 0.05);
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
