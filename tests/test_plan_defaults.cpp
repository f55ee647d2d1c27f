// The plan defaults (model/plan_defaults.hpp): one rule for `explain`,
// `simulate` and the decision guide. The guide used to say ZeRO-1 only when
// dp > 1, explain when dp x ep > 1; an expert-parallel plan with dp = 1 has
// ep data-parallel replicas of its dense layers, whose optimizer state ZeRO-1
// shards (the search prices ZeRO > 0 there too).
#include <gtest/gtest.h>

#include "model/decision_guide.hpp"
#include "model/plan_defaults.hpp"
#include "model/presets.hpp"
#include "model/search.hpp"

namespace meshplan {
namespace {

Mesh mesh(std::initializer_list<MeshAxis> axes) {
  Mesh m;
  m.axes = axes;
  return m;
}

TEST(PlanDefaults, ZeroOneWhereTheOptimizerHasDataParallelReplicas) {
  EXPECT_EQ(default_zero_stage(mesh({{Axis::dp, 1}})), 0);
  EXPECT_EQ(default_zero_stage(mesh({{Axis::dp, 8}})), 1);
  EXPECT_EQ(default_zero_stage(mesh({{Axis::fsdp, 8}})), 0);  // fsdp is ZeRO-3 by itself
  EXPECT_EQ(default_zero_stage(mesh({{Axis::pp, 2}, {Axis::tp, 4}})), 0);
  // dp = 1, ep > 1: the dense layers have 4 replicas (the guide's old rule said 0).
  EXPECT_EQ(default_zero_stage(mesh({{Axis::ep, 4}})), 1);
  EXPECT_EQ(default_zero_stage(mesh({{Axis::pp, 2}, {Axis::ep, 4}, {Axis::tp, 2}})), 1);
}

TEST(PlanDefaults, AgreesWithWhatTheSearchCountsAsOneZeroPlan) {
  // The search skips ZeRO > 0 exactly where it is the same plan as ZeRO 0
  // (model/search.cpp): the default must be 0 there and 1 elsewhere.
  const auto model = load_model("gpt3-175b");
  ASSERT_TRUE(model.ok());
  const auto cluster = load_cluster("dgx-a100");
  ASSERT_TRUE(cluster.ok());
  SearchSpace space;
  space.axes = {Axis::dp, Axis::ep, Axis::tp, Axis::pp};
  for (const Mesh& m : enumerate_meshes(16, space, 8)) {
    const bool data_parallel_replicas = m.size(Axis::dp) * m.size(Axis::ep) > 1;
    EXPECT_EQ(default_zero_stage(m), data_parallel_replicas ? 1 : 0) << m.to_string();
  }
}

TEST(PlanDefaults, DefaultPlanCarriesEveryRule) {
  const Plan transformer = default_plan(ModelKind::transformer, mesh({{Axis::ep, 2}, {Axis::tp, 4}}), 2048);
  EXPECT_EQ(transformer.micro_batch, 1);
  EXPECT_EQ(transformer.zero_stage, 1);
  EXPECT_EQ(transformer.recompute, Recompute::selective);
  EXPECT_TRUE(transformer.sequence_parallel);
  EXPECT_EQ(transformer.schedule.kind, ScheduleKind::one_f_one_b);
  // Sequence parallelism splits each cp rank's tokens over tp: off where tp does not divide them.
  EXPECT_FALSE(default_plan(ModelKind::transformer, mesh({{Axis::tp, 4}}), 1022).sequence_parallel);
  EXPECT_TRUE(default_plan(ModelKind::transformer, mesh({{Axis::cp, 2}, {Axis::tp, 4}}), 2048).sequence_parallel);
  EXPECT_FALSE(default_plan(ModelKind::transformer, mesh({{Axis::cp, 2}, {Axis::tp, 4}}), 2052).sequence_parallel);
  const Plan mlp = default_plan(ModelKind::mlp, mesh({{Axis::dp, 2}, {Axis::tp, 2}}), 1);
  EXPECT_EQ(mlp.recompute, Recompute::none);
  EXPECT_FALSE(mlp.sequence_parallel);
  EXPECT_EQ(mlp.zero_stage, 1);
}

// A search without named axes tries ep for a mixture-of-experts model (only ep splits its experts)
// and not for a dense one; cp never by default.
TEST(PlanDefaults, SearchAxesAddEpForAMixtureOfExperts) {
  auto model = load_model("llama3-8b");
  ASSERT_TRUE(model.ok());
  const std::vector<Axis> dense{Axis::dp, Axis::fsdp, Axis::tp, Axis::pp};
  EXPECT_EQ(default_search_axes(model.value), dense);
  model.value.transformer.experts = 8;
  model.value.transformer.top_k = 2;
  const std::vector<Axis> moe{Axis::dp, Axis::fsdp, Axis::tp, Axis::pp, Axis::ep};
  EXPECT_EQ(default_search_axes(model.value), moe);
  const auto mlp = load_model("mlp-fashion");
  ASSERT_TRUE(mlp.ok());
  EXPECT_EQ(default_search_axes(mlp.value), dense);
}

TEST(DecisionGuide, AsksWithThePlanDefaults) {
  // gpt3-175b on 64 A100s: no single device, FSDP or tp x FSDP plan fits with
  // micro-batch 1, so the guide asks pipelines with ZeRO-1 data parallelism.
  const auto model = load_model("gpt3-175b");
  const auto cluster = load_cluster("dgx-a100");
  ASSERT_TRUE(model.ok() && cluster.ok());
  const DecisionGuide guide =
      build_decision_guide(model.value, cluster.value, 64, 64, 0, Precision::bf16, 0.05);
  ASSERT_FALSE(guide.questions.empty());
  EXPECT_EQ(guide.recompute, "selective recompute (nothing to repeat under fused attention)");  // the default attention is fused
  for (const auto& q : guide.questions) {
    if (q.answered) {
      EXPECT_GT(q.usable_bytes, 0) << q.question;
      EXPECT_EQ(q.batch_differs, q.global_batch != 64) << q.question;
    } else {
      EXPECT_FALSE(q.reason.empty()) << q.question;
    }
  }
}

}  // namespace
}  // namespace meshplan
