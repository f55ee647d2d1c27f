// shrink_plan (model/shrink.hpp): the shrunk plan keeps every divisibility
// the plan relies on, fits the budget it was given by the planner's own
// estimate, and a larger budget never gives a smaller model.
#include <gtest/gtest.h>

#include <random>

#include "model/explain.hpp"
#include "model/shrink.hpp"

namespace meshplan {
namespace {

template <typename T>
T must(Loaded<T> loaded) {
  EXPECT_TRUE(loaded.ok()) << (loaded.problems.empty() ? "" : describe(loaded.problems.front()));
  return std::move(loaded.value);
}

Plan make_plan(std::int64_t dp, std::int64_t tp, std::int64_t pp, std::int64_t v, bool sp, std::int64_t micro_batch,
               std::int64_t global_batch) {
  Plan plan;
  plan.mesh.axes = {{Axis::dp, dp}, {Axis::pp, pp}, {Axis::tp, tp}};
  plan.micro_batch = micro_batch;
  plan.global_batch = global_batch;
  plan.sequence_parallel = sp;
  plan.schedule = v > 1 ? Schedule{ScheduleKind::interleaved, v} : Schedule{ScheduleKind::one_f_one_b, 1};
  plan.precision = Precision::bf16;
  return plan;
}

ShrinkBudget budget(double gib, double step_s) {
  ShrinkBudget b;
  b.cluster = must(load_cluster("local-cpu"));
  b.memory_bytes_per_rank = gib * 1024.0 * 1024.0 * 1024.0;
  b.step_seconds = step_s;
  return b;
}

// Every rule the executor and the planner check for this plan.
void expect_divisible(const ShrinkResult& r) {
  const TransformerDims& t = r.model.transformer;
  const std::int64_t tp = r.plan.mesh.size(Axis::tp), pp = r.plan.mesh.size(Axis::pp);
  const std::int64_t v = r.plan.schedule.kind == ScheduleKind::interleaved ? r.plan.schedule.virtual_stages : 1;
  EXPECT_EQ(t.heads % tp, 0) << t.heads << " heads, tp " << tp;
  EXPECT_EQ(t.hidden % t.heads, 0) << t.hidden << " hidden, " << t.heads << " heads";
  EXPECT_EQ(t.ffn % tp, 0) << t.ffn << " ffn, tp " << tp;
  EXPECT_EQ(t.heads % t.kv_heads, 0) << t.heads << " heads, " << t.kv_heads << " kv heads";
  if (t.positions == Positions::rotary) {
    EXPECT_EQ(t.head_size() % 2, 0) << "rotary head_dim " << t.head_size();
  }
  EXPECT_EQ(t.layers % (pp * v), 0) << t.layers << " layers, pp x v " << pp * v;
  EXPECT_GE(t.layers, pp * v);
  if (r.plan.sequence_parallel) {
    EXPECT_EQ(r.plan.micro_batch * r.plan.seq_len % tp, 0);
  }
  EXPECT_LE(r.plan.seq_len, t.seq_len);
  EXPECT_GT(r.plan.micro_batches(), 0);
}

// A grouped-query model keeps grouped-query attention, with kv heads the executor can split over tp.
TEST(Shrink, LlamaKeepsGroupedQueryAttentionSplittableOverTp) {
  const ModelSpec llama = must(load_model("llama3-8b"));  // 32 heads, 8 kv heads
  for (const std::int64_t tp : {1, 2, 4}) {
    const Plan plan = make_plan(1, tp, 2, 1, tp > 1, 1, 4);
    const ShrinkResult r = must(shrink_plan(llama, plan, budget(1.0, 2.0)));
    expect_divisible(r);
    EXPECT_LT(r.model.transformer.kv_heads, r.model.transformer.heads) << "tp " << tp;
    EXPECT_EQ(r.model.transformer.norm, Norm::rmsnorm);
    EXPECT_EQ(r.model.transformer.rope_theta, 500000);
  }
}

// Where tp splits the original's kv heads, the shrunk model's kv heads stay a
// multiple of tp; where tp does not (Gemma 3 1B's single kv head on tp 2,
// Gemma 3 4B's 4 on tp 8), the shrunk model keeps the group size and so
// replicates its kv heads over tp the same way.
TEST(Shrink, KeyValueHeadsKeepTheOriginalsSplitOrReplication) {
  struct Case {
    const char* model;
    std::int64_t tp;
    bool split;
  };
  for (const Case c : {Case{"llama3-8b", 8, true}, Case{"gemma3-1b", 2, false}, Case{"gemma3-4b", 8, false},
                       Case{"gemma3-4b", 4, true}}) {
    const ModelSpec model = must(load_model(c.model));
    const Plan plan = make_plan(1, c.tp, 1, 1, false, 1, 4);
    const ShrinkResult r = must(shrink_plan(model, plan, budget(1.0, 2.0)));
    expect_divisible(r);
    const TransformerDims& t = r.model.transformer;
    const std::string where = std::string(c.model) + " tp " + std::to_string(c.tp);
    EXPECT_EQ(t.kv_tp_split(c.tp) == c.tp, c.split) << where << ": " << t.kv_heads << " kv heads";
    // Split over tp, the kv heads may have to grow back to the heads (8 heads left on tp 8);
    // replicated, the group size is kept.
    if (c.split) {
      EXPECT_LE(t.kv_heads, t.heads) << where;
    } else {
      EXPECT_LT(t.kv_heads, t.heads) << where;
    }
    EXPECT_LE(t.heads / t.kv_heads, model.transformer.heads / model.transformer.kv_heads) << where << ": group size";
  }
}

// Rotary positions rotate pairs of a head's dimensions: every rung keeps
// head_dim even (Gemma 3 1B's 256 once shrank to 107, which train refuses).
TEST(Shrink, RotaryModelsKeepAnEvenHeadDim) {
  for (const char* name : {"gemma3-1b", "llama3-8b", "llama3.2-1b"}) {
    const ModelSpec model = must(load_model(name));
    const Plan plan = make_plan(2, 2, 1, 1, true, 1, 4);
    for (const double step_s : {0.1, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 4.0}) {
      const ShrinkResult r = must(shrink_plan(model, plan, budget(4.41, step_s)));
      expect_divisible(r);
    }
  }
}

TEST(Shrink, Gpt3OnFourRanksKeepsTheMeshAndFitsByThePlannersEstimate) {
  const ModelSpec gpt3 = must(load_model("gpt3-175b"));
  const Plan plan = make_plan(2, 2, 1, 1, false, 1, 8);
  const ShrinkBudget b = budget(1.0, 2.0);
  const ShrinkResult r = must(shrink_plan(gpt3, plan, b));
  expect_divisible(r);
  EXPECT_TRUE(r.fits_memory);
  EXPECT_TRUE(r.fits_time);
  EXPECT_EQ(r.plan.mesh.to_string(), plan.mesh.to_string());
  EXPECT_EQ(r.plan.global_batch, 8);
  EXPECT_EQ(r.plan.micro_batch, 1);
  EXPECT_LT(r.parameters, 1e9);
  EXPECT_LT(r.model.transformer.layers, 96);
  EXPECT_EQ(r.model.transformer.vocab, 256);
  // The estimate the result states is the planner's for the shrunk plan, on this machine.
  const Explanation e = explain_plan(r.model, r.cluster, Deployment{4, 0}, r.plan);
  ASSERT_TRUE(e.valid);
  ASSERT_TRUE(e.memory && e.time);
  EXPECT_DOUBLE_EQ(e.memory->worst().memory.total_bytes(), r.memory_bytes_per_rank);
  EXPECT_LE(r.memory_bytes_per_rank, b.memory_bytes_per_rank);
  EXPECT_LE(e.time->step_s, 2.0);
  // Every change is reported before -> after.
  bool layers = false;
  for (const ShrinkChange& c : r.changes)
    if (c.field == "layers") layers = c.before == "96" && c.after == std::to_string(r.model.transformer.layers);
  EXPECT_TRUE(layers);
}

TEST(Shrink, RandomPlansKeepEveryDivisibilityAndFit) {
  const std::vector<std::string> models{"gpt3-175b", "gpt2-1.5b", "gpt2-124m", "llama2-70b", "megatron-1t"};
  std::mt19937 rng(20261122);
  const auto pick = [&](std::initializer_list<std::int64_t> options) {
    std::uniform_int_distribution<std::size_t> d(0, options.size() - 1);
    return *(options.begin() + static_cast<std::ptrdiff_t>(d(rng)));
  };
  for (int trial = 0; trial < 24; ++trial) {
    const ModelSpec model = must(load_model(models[static_cast<std::size_t>(trial) % models.size()]));
    const std::int64_t tp = pick({1, 2, 4}), pp = pick({1, 2}), dp = pick({1, 2});
    const std::int64_t v = pp > 1 ? pick({1, 2}) : 1;
    const bool sp = tp > 1 && pick({0, 1}) == 1;
    const std::int64_t micro_batch = pick({1, 2});
    const Plan plan = make_plan(dp, tp, pp, v, sp, micro_batch, micro_batch * dp * pp * 2);
    const ShrinkBudget b = budget(static_cast<double>(pick({1, 2, 4})) * 0.5, 3.0);
    SCOPED_TRACE(model.name + " " + plan.mesh.to_string() + " v=" + std::to_string(v) + (sp ? " sp" : ""));
    const ShrinkResult r = must(shrink_plan(model, plan, b));
    expect_divisible(r);
    EXPECT_TRUE(r.fits_memory) << r.why;
    EXPECT_TRUE(r.fits_time) << r.why;
    EXPECT_LE(r.model.transformer.layers, model.transformer.layers);
    EXPECT_LE(r.model.transformer.hidden, model.transformer.hidden);
    EXPECT_LE(r.model.transformer.ffn, model.transformer.ffn);
  }
}

TEST(Shrink, ALargerBudgetNeverGivesASmallerModel) {
  const ModelSpec gpt3 = must(load_model("gpt3-175b"));
  const Plan plan = make_plan(2, 2, 2, 1, true, 1, 8);
  for (const double step : {0.1, 1.0, 10.0}) {
    double last = 0;
    for (const double gib : {0.05, 0.25, 1.0, 4.0, 16.0}) {
      const ShrinkResult r = must(shrink_plan(gpt3, plan, budget(gib, step)));
      SCOPED_TRACE(std::to_string(gib) + " GiB, " + std::to_string(step) + " s");
      expect_divisible(r);
      EXPECT_GE(r.parameters, last);
      last = r.parameters;
    }
  }
  // And along the time target at a fixed memory budget.
  double last = 0;
  for (const double step : {0.05, 0.2, 1.0, 5.0, 50.0}) {
    const ShrinkResult r = must(shrink_plan(gpt3, plan, budget(4.0, step)));
    const TransformerDims& t = r.model.transformer;
    EXPECT_GE(r.parameters, last) << step << " s";
    last = r.parameters;
    EXPECT_LE(r.step_seconds, step) << t.layers << " layers, hidden " << t.hidden;
  }
}

TEST(Shrink, APlanThatFitsIsKeptAndAnImpossibleBudgetSaysWhy) {
  const ModelSpec small = must(load_model("gpt-byte-10m"));
  const Plan plan = make_plan(2, 1, 1, 1, false, 4, 8);
  const ShrinkResult kept = must(shrink_plan(small, plan, budget(8.0, 1000.0)));
  EXPECT_EQ(kept.model.transformer.layers, 6);
  EXPECT_EQ(kept.model.transformer.hidden, 384);
  EXPECT_EQ(kept.model.transformer.ffn, 1536);
  EXPECT_EQ(kept.plan.seq_len, 256);
  ASSERT_EQ(kept.changes.size(), 1u);  // only the precision: the executor computes fp32
  EXPECT_EQ(kept.changes[0].field, "precision");
  EXPECT_NE(kept.why.find("fits as it is"), std::string::npos) << kept.why;

  const ShrinkResult over = must(shrink_plan(small, plan, budget(1e-6, 1000.0)));
  EXPECT_FALSE(over.fits_memory);
  EXPECT_NE(over.why.find("memory budget"), std::string::npos) << over.why;
  EXPECT_EQ(over.model.transformer.layers, 1);  // the smallest rung: one layer per pipeline chunk
  EXPECT_EQ(over.model.transformer.heads, 1);

  ModelSpec mlp = small;
  mlp.kind = ModelKind::mlp;
  EXPECT_FALSE(shrink_plan(mlp, plan, budget(1.0, 1.0)).ok());
  EXPECT_FALSE(shrink_plan(small, plan, budget(0.0, 1.0)).ok());
}

}  // namespace
}  // namespace meshplan
