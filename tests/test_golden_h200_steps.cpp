// Golden test: single-GPU training steps measured on one H200 with PyTorch
// (tests/data/h200-steps.jsonl and h200-steps-holdout.jsonl, written by
// scripts/gpu/measure_steps.py; docs/validation.md, "Single GPU, measured")
// against the evaluator on the same model, sequence, micro-batch and
// recompute, fused attention, bf16, on the `h200` preset (itself measured:
// tests/data/h200-measured.jsonl). No figure of the cost model was fitted to
// these rows. The holdout rows were measured with the others but compared
// only after the last change to the model the comparison informed.
//
// Step time is compared with the fastest run of each case (eager or
// torch.compile), peak memory with the eager run under --loss eager (fp32
// log-probabilities and their gradients, every saved activation) and with the
// compiled run (blocks and loss compiled) under --loss fused (the logits kept
// in bf16). The worst rows are reported by scripts/gpu/compare_steps.py, not
// asserted (docs/validation-h200.md says which and by how much).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "model/evaluate.hpp"
#include "read_text.hpp"
#include "test_support.hpp"

namespace meshplan {
namespace {
using namespace testing_support;

struct Measured {
  double fastest_s = 0;     // the faster of eager and compiled
  double eager_bytes = 0;   // device memory in use after the eager steps (0 = not run)
  double compiled_bytes = 0;  // the same after the steps with every block and the loss compiled (0 = not run)
  bool compiled = false;    // a compiled run exists (else the time is eager's alone: not compared)
};
using Case = std::tuple<std::string, std::int64_t, std::int64_t, std::string>;  // model, seq, micro-batch, recompute

std::map<Case, Measured> read_cases(const std::vector<std::string>& files) {
  std::map<Case, Measured> cases;
  for (const std::string& file : files) {
    std::istringstream lines(read_text(std::string(MESHPLAN_TEST_DATA) + "/" + file));
    for (std::string line; std::getline(lines, line);) {
      if (line.empty()) continue;
      const auto row = nlohmann::json::parse(line);
      if (row.contains("section") || row.contains("error")) continue;
      Measured& m = cases[{row["model"], row["seq"], row["micro_batch"], row["recompute"]}];
      const double step = row["step_s"];
      if (m.fastest_s == 0 || step < m.fastest_s) m.fastest_s = step;
      if (row["mode"] == "eager") m.eager_bytes = row["device_used_bytes"];
      if (row["mode"] == "compile") m.compiled_bytes = row["device_used_bytes"];
      if (row["mode"] != "eager") m.compiled = true;
    }
  }
  return cases;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Errors {
  std::vector<double> time, memory, compiled_memory;
  int cases = 0, called_too_big = 0;
};

Errors compare(const std::vector<std::string>& files) {
  Errors e;
  const ClusterSpec cluster = must(load_cluster("dgx-h200"));
  for (const auto& [key, measured] : read_cases(files)) {
    const auto& [name, seq, micro_batch, recompute] = key;
    ModelSpec model = must(load_model(name));
    // measure_steps.py gives learned positions as many rows as the sequence.
    model.transformer.seq_len = std::max(model.transformer.seq_len, seq);
    Plan plan = plan_with("dp=1", micro_batch, micro_batch);
    plan.recompute = *parse_recompute(recompute);
    plan.attention = Attention::fused;
    plan.loss = Loss::eager;  // the eager runs' memory; the time is the same for both
    const PlanEstimate estimate = Evaluator(model, cluster, 1, seq).evaluate(plan);
    ++e.cases;
    if (!estimate.fits) ++e.called_too_big;
    if (measured.compiled) e.time.push_back(std::abs(estimate.time.step_s / measured.fastest_s - 1));
    if (measured.eager_bytes > 0) e.memory.push_back(std::abs(estimate.worst_memory.total_bytes() / measured.eager_bytes - 1));
    if (measured.compiled_bytes > 0) {
      plan.loss = Loss::fused;
      const PlanEstimate fused = Evaluator(model, cluster, 1, seq).evaluate(plan);
      e.compiled_memory.push_back(std::abs(fused.worst_memory.total_bytes() / measured.compiled_bytes - 1));
    }
  }
  return e;
}

TEST(GoldenH200Steps, EveryMeasuredCaseIsComparedAndNoneThatTrainedIsCalledTooBig) {
  const Errors e = compare({"h200-steps.jsonl", "h200-steps-holdout.jsonl"});
  EXPECT_EQ(e.cases, 22);       // 16 cases + 6 holdout
  EXPECT_EQ(e.time.size(), 20u);  // all but the two eager-only cases
  EXPECT_EQ(e.called_too_big, 0);
}

// Issue 15's targets: median <= 10%, worst <= 25%. Measured in this tree:
// median 5.8% and worst 16.2% (14 cases), holdout median 5.8% and worst 14.9% (6).
TEST(GoldenH200Steps, StepTimeAgainstTheFastestRunMeetsTheTargets) {
  for (const char* file : {"h200-steps.jsonl", "h200-steps-holdout.jsonl"}) {
    const Errors e = compare({file});
    EXPECT_LE(median(e.time), 0.10) << file;
    EXPECT_LE(*std::max_element(e.time.begin(), e.time.end()), 0.25) << file;
  }
}

// Measured in this tree: median 5.0% over the 16 eager runs, 5.3% over the 6 holdout ones.
TEST(GoldenH200Steps, PeakMemoryMedianWithinTenPercentOfTheEagerRun) {
  const Errors all = compare({"h200-steps.jsonl", "h200-steps-holdout.jsonl"});
  ASSERT_EQ(all.memory.size(), 22u);
  EXPECT_LE(median(all.memory), 0.10);
}

// The compiled runs hold far less than the eager ones (the compiled loss
// keeps no fp32 logits): against them the fused loss's prediction. Measured
// in this tree: median 4.9% over 14 compiled runs, 6.9% over the 6 holdout
// ones (the eager loss's prediction: 25.7% and 25.1%).
TEST(GoldenH200Steps, PeakMemoryMedianWithinTenPercentOfTheCompiledRunWithTheFusedLoss) {
  const Errors all = compare({"h200-steps.jsonl", "h200-steps-holdout.jsonl"});
  ASSERT_EQ(all.compiled_memory.size(), 20u);
  EXPECT_LE(median(all.compiled_memory), 0.10);
}

}  // namespace
}  // namespace meshplan
