// `meshplan train` as a user runs it: a plan file from explain, metrics as
// JSON Lines, resume after a stop with bit-identical losses, damaged
// checkpoints refused, multi-rank plans refused with a reason.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "cli_runner.hpp"

namespace {
using namespace meshplan::testing_support;

std::string emit_plan(const std::string& name, const std::string& mesh, std::int64_t micro, std::int64_t global) {
  const auto path = temp_path(name).string();
  const CliRun r = run({"explain", "--model", "mlp-fashion", "--cluster", "local-cpu", "--gpus",
                        mesh == "dp=1" ? "1" : "2", "--mesh", mesh, "--micro-batch", std::to_string(micro),
                        "--global-batch", std::to_string(global), "--emit-plan", path});
  EXPECT_EQ(r.status, 0) << r.err;
  return path;
}

std::vector<double> losses(const std::filesystem::path& metrics) {
  std::vector<double> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["kind"] == "train") out.push_back(j["loss"].get<double>());
  }
  return out;
}

TEST(CliTrain, MetricsAndBitIdenticalResume) {
  const std::string plan = emit_plan("train-plan.json", "dp=1", 32, 64);  // 2 micro-batches per step
  const auto whole = temp_path("whole.jsonl"), parts = temp_path("parts.jsonl"), dir = temp_path("ck");
  CliRun r = run({"train", "--plan", plan, "--data", "fashion-mnist", "--steps", "8", "--metrics", whole.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto expected = losses(whole);
  ASSERT_EQ(expected.size(), 8u);
  EXPECT_LT(expected.back(), expected.front());
  std::ifstream first_line(whole);
  std::string line;
  std::getline(first_line, line);
  const auto j = nlohmann::json::parse(line);
  for (const char* key : {"step", "loss", "lr", "grad_norm", "step_s", "samples_per_s", "mfu", "memory_bytes"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }

  r = run({"train", "--plan", plan, "--data", "fashion-mnist", "--steps", "8", "--checkpoint-dir", dir.string(),
           "--stop-after", "3", "--metrics", parts.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir / "step-000003" / "COMPLETE"));
  r = run({"train", "--plan", plan, "--data", "fashion-mnist", "--steps", "8", "--checkpoint-dir", dir.string(),
           "--resume", "--metrics", parts.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("resumed from"), std::string::npos);
  EXPECT_EQ(losses(parts), expected);  // bit-identical, not just close
}

TEST(CliTrain, DamagedCheckpointIsRefused) {
  const std::string plan = emit_plan("damage-plan.json", "dp=1", 16, 16);
  const auto dir = temp_path("damaged");
  CliRun r = run({"train", "--plan", plan, "--data", "fashion-mnist", "--steps", "2", "--checkpoint-dir", dir.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto tensor = dir / "step-000002" / "linear0.weight.f32";
  ASSERT_TRUE(std::filesystem::exists(tensor));
  {
    std::fstream file(tensor, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(100);
    file.put('\x7f');
  }
  r = run({"train", "--plan", plan, "--data", "fashion-mnist", "--steps", "4", "--checkpoint-dir", dir.string(), "--resume"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("checksum"), std::string::npos) << r.err;
  expect_no_crash_text(r);
}

TEST(CliTrain, RefusesWhatItCannotRunYet) {
  const std::string plan = emit_plan("two-ranks.json", "dp=2", 16, 32);
  CliRun r = run({"train", "--plan", plan, "--data", "fashion-mnist", "--steps", "2"});
  EXPECT_EQ(r.status, 2);
  // A two-rank plan in one process: refused, naming the launch that fits.
  EXPECT_NE(r.err.find("mpirun -np 2"), std::string::npos) << r.err;
  r = run({"train", "--plan", temp_path("nope.json").string(), "--steps", "2"});
  EXPECT_EQ(r.status, 2);
  r = run({"train", "--plan", emit_plan("one.json", "dp=1", 16, 16), "--data", "nonsense", "--steps", "2"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--data"), std::string::npos) << r.err;
  expect_no_crash_text(r);
}

// A language model's evaluation reads --eval-samples windows of the validation
// split every --eval-every steps; a non-positive count is refused.
TEST(CliTrain, LanguageModelEvaluationReadsEvalSamplesWindows) {
  const auto plan = temp_path("lm-plan.json").string();
  CliRun r = run({"explain", "--model", MESHPLAN_TEST_SOURCE "/parallel/gpt-tiny-bytes.yaml", "--cluster", "local-cpu",
                  "--gpus", "1", "--mesh", "dp=1", "--micro-batch", "2", "--global-batch", "2", "--precision", "fp32",
                  "--emit-plan", plan});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto metrics = temp_path("lm.jsonl");
  r = run({"train", "--plan", plan, "--data", "text:" MESHPLAN_TEST_SOURCE "/test_cli_train.cpp", "--steps", "2",
           "--eval-every", "1", "--eval-samples", "5", "--metrics", metrics.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  int evaluations = 0;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["kind"] != "eval") continue;
    ++evaluations;
    EXPECT_EQ(j["eval_samples"], 5) << line;
    EXPECT_GT(j["eval_loss"].get<double>(), 0.0) << line;
  }
  EXPECT_EQ(evaluations, 2);  // after steps 1 and 2
  r = run({"train", "--plan", plan, "--data", "text:" MESHPLAN_TEST_SOURCE "/test_cli_train.cpp", "--steps", "1",
           "--eval-samples", "0"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--eval-samples"), std::string::npos) << r.err;
}

#ifdef NDEBUG
TEST(CliTrain, FashionMnistReachesEightyFivePercentInTwoEpochs) {
  // The issue's own commands, with the default learning rate (1e-3, Adam's usual).
  const std::string plan = emit_plan("fashion.json", "dp=1", 128, 128);
  const auto metrics = temp_path("fashion.jsonl");
  const CliRun r = run({"train", "--plan", plan, "--data", "fashion-mnist", "--epochs", "2", "--metrics", metrics.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  double accuracy = 0;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["kind"] == "eval") {
      accuracy = j["eval_accuracy"].get<double>();
      EXPECT_EQ(j["eval_samples"], 10000);  // the whole Fashion-MNIST test split
    }
  }
  std::printf("[ fashion-mnist ] eval_accuracy after 2 epochs: %.4f\n", accuracy);
  EXPECT_GE(accuracy, 0.85);
}
#endif

}  // namespace
