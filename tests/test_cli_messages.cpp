// What the meshplan command says, as a user reads it: unknown flags, commands,
// presets and values name the command and suggest the nearest known name;
// counts agree with their nouns; small sizes show in a unit that shows them;
// JSON counts are whole numbers and plan files carry the decimals the presets
// wrote; and explain, plan and train agree on whether local-cpu has a bf16
// figure (the device preset is the one answer).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "cli_runner.hpp"

namespace {

using namespace meshplan::testing_support;
namespace fs = std::filesystem;
using Json = nlohmann::json;

// ---- Unknown names: the command, the name, the nearest known one (issue 13, item 6) ----

struct Mistyped {
  const char* name;
  std::vector<std::string> args;
  std::string expected;  // a whole line (or its start) of stderr
};

class CliMistyped : public ::testing::TestWithParam<Mistyped> {};

TEST_P(CliMistyped, NamesTheCommandAndSuggestsTheNearest) {
  const CliRun r = run(GetParam().args);
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(GetParam().expected), std::string::npos) << "expected: " << GetParam().expected << "\ngot: " << r.err;
  EXPECT_EQ(r.err.find("were not expected"), std::string::npos) << r.err;
  expect_no_crash_text(r);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CliMistyped,
    ::testing::Values(
        Mistyped{"explain_flag", {"explain", "--microbatch", "2"},
                 "meshplan explain: unknown flag --microbatch (did you mean --micro-batch?); see meshplan explain --help\n"},
        Mistyped{"flag_with_value", {"plan", "--global-batch", "64", "--globalbatch=64"},
                 "meshplan plan: unknown flag --globalbatch (did you mean --global-batch?); see meshplan plan --help\n"},
        Mistyped{"train_flag", {"train", "--plan", "x.json", "--step", "3"},
                 "meshplan train: unknown flag --step (did you mean --steps?)"},
        Mistyped{"far_flag", {"explain", "--frobnicate", "1"},
                 "meshplan explain: unknown flag --frobnicate; see meshplan explain --help\n"},
        Mistyped{"command", {"expalin"}, "meshplan: unknown command 'expalin' (did you mean explain?); commands: "},
        Mistyped{"top_level_flag", {"--verison"}, "meshplan: unknown flag --verison (did you mean --version?); see meshplan --help\n"},
        Mistyped{"model", {"explain", "--model", "llama3-8B"},
                 "--model llama3-8B: unknown model preset; did you mean llama3-8b? (known: "},
        Mistyped{"cluster", {"explain", "--cluster", "dgx-a10"}, "--cluster dgx-a10: unknown cluster preset; did you mean dgx-a100?"},
        Mistyped{"precision", {"explain", "--precision", "bf61"}, "--precision: 'bf61' is not one of: fp32, bf16, fp16, fp8, auto (did you mean bf16?)"},
        Mistyped{"recompute", {"explain", "--recompute", "selectve"}, "(did you mean selective?)"},
        Mistyped{"sweep_precision", {"sweep", "--precision", "fp23"}, "(did you mean fp32?)"},
        Mistyped{"presets_kind", {"presets", "model"},
                 "meshplan presets: kind: 'model' is not one of: all, models, devices, clusters (did you mean models?); "
                 "see meshplan presets --help\n"},
        // An empty value was read as the flag not given: `simulate --plan ""` simulated the default GPT-3 job.
        Mistyped{"empty_plan", {"simulate", "--plan", ""},
                 "meshplan simulate: --plan: empty value; give one, or leave the flag out for its default"},
        Mistyped{"empty_batch", {"explain", "--global-batch", ""}, "meshplan explain: --global-batch: empty value"},
        Mistyped{"blank_axes", {"plan", "--axes", " "}, "meshplan plan: --axes: empty value"},
        // CLI::PositiveNumber said "Value 0 not in range 0.000000 to 1797...": a range that holds 0, in 300 digits.
        Mistyped{"log_every_zero", {"train", "--plan", "x.json", "--log-every", "0"},
                 "meshplan train: --log-every: must be at least 1, got 0"},
        Mistyped{"slurm_nodes_zero", {"launch", "--plan", "x.json", "--slurm", "--nodes", "0"},
                 "meshplan launch: --nodes: must be at least 1, got 0"},
        // CLI11 detects the base: explain's --global-batch 010 was 8, plan's comma list read 10, --gpus 0x8 was 8.
        Mistyped{"octal", {"explain", "--global-batch", "010"},
                 "meshplan explain: --global-batch: '010': write numbers in decimal, without leading zeros"},
        Mistyped{"hex", {"explain", "--gpus=0x8"}, "meshplan explain: --gpus: '0x8': write numbers in decimal"},
        Mistyped{"octal_list", {"plan", "--gpus", "010"}, "--gpus: '010': write numbers in decimal, without leading zeros"},
        // One model whose search cannot use the axis asked for: bad input, not "no plan fits".
        Mistyped{"ep_dense", {"plan", "--model", "gpt2-124m", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch", "64",
                              "--axes", "ep"},
                 "--axes: ep splits a mixture of experts' experts, and gpt2-124m has none"}),
    [](const auto& test_info) { return std::string(test_info.param.name); });

TEST(CliMessages, HelpShowsNoFlagDefaultsInBraces) {
  const CliRun r = run({"sweep", "--help"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("--no-progress"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("{false}"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("{true}"), std::string::npos) << r.out;
}

// ---- Counts, units, JSON numbers (issue 13, item 12) ----

// mlp-fashion on one local-cpu core: one micro-batch, a few MiB of memory.
const std::vector<std::string> kTinyJob = {"explain", "--model", "mlp-fashion", "--cluster", "local-cpu", "--gpus", "1",
                                           "--mesh", "dp=1", "--micro-batch", "128", "--global-batch", "128",
                                           "--precision", "fp32"};

TEST(CliMessages, CountsAgreeWithTheirNouns) {
  const CliRun r = run(kTinyJob);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("micro-batch 128 x 1 micro-batch x 1 data-parallel"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(", 1 micro-batch in flight)"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(" 1 micro-batches"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(" 1 layers"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("(s)"), std::string::npos) << r.out;
}

TEST(CliMessages, SmallSizesShowInAUnitThatShowsThem) {
  const CliRun r = run(kTinyJob);
  ASSERT_EQ(r.status, 0) << r.err;
  std::smatch m;
  const std::string out = r.out;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("verdict: fits: ([0-9.]+) (B|KiB|MiB|GiB) of ([0-9.]+) GiB usable")))
      << r.out;
  EXPECT_GE(std::stod(m[1]), 1.0) << m[0];  // never "0.00 of 11.40 GiB"
  EXPECT_NE(m[2], "GiB") << m[0];
  // The table's rows too: no row of zeros where the memory is not zero.
  EXPECT_EQ(out.find("  total                         0.00"), std::string::npos) << out;
}

// plan's search line and decision guide, simulate's header, on the same tiny job.
TEST(CliMessages, PlanAndSimulateCountAndSizeInWordsThatFit) {
  const CliRun plan = run({"plan", "--model", "mlp-fashion", "--cluster", "local-cpu", "--gpus", "1", "--global-batch",
                           "128", "--precision", "fp32"});
  ASSERT_EQ(plan.status, 0) << plan.err;
  EXPECT_NE(plan.out.find("search: 1 mesh, "), std::string::npos) << plan.out;
  EXPECT_EQ(plan.out.find("0.00 GiB"), std::string::npos) << plan.out;   // the guide's sizes show their digits
  EXPECT_NE(plan.out.find(" MiB needed, "), std::string::npos) << plan.out;
  const CliRun simulate = run({"simulate", "--model", "mlp-fashion", "--cluster", "local-cpu", "--gpus", "1", "--mesh", "dp=1",
                               "--micro-batch", "128", "--global-batch", "128", "--precision", "fp32"});
  ASSERT_EQ(simulate.status, 0) << simulate.err;
  EXPECT_NE(simulate.out.find(", 1 micro-batch per step"), std::string::npos) << simulate.out;
  EXPECT_EQ(simulate.out.find("0.00 GiB"), std::string::npos) << simulate.out;
}

// simulate says why its step differs from the analytical one, naming only
// what applies to the plan: nothing for one stage with links not shared
// (the same model, the same step), the pipeline's rules and sharded weights
// on stages where they apply.
TEST(CliMessages, SimulateSaysWhyItDiffersFromTheAnalyticalStep) {
  const std::vector<std::string> job = {"simulate", "--model", "gpt2-350m", "--cluster", "ethernet-10g", "--gpus", "8",
                                        "--micro-batch", "2", "--global-batch", "64", "--no-contention"};
  auto with = [&](std::initializer_list<std::string> more) {
    std::vector<std::string> args = job;
    args.insert(args.end(), more);
    return run(args);
  };
  const CliRun one_stage = with({"--mesh", "dp=8"});
  ASSERT_EQ(one_stage.status, 0) << one_stage.err;
  EXPECT_EQ(one_stage.out.find("why:"), std::string::npos) << one_stage.out;
  const CliRun pipelined = with({"--mesh", "pp=4,dp=2", "--schedule", "interleaved:2"});
  ASSERT_EQ(pipelined.status, 0) << pipelined.err;
  EXPECT_NE(pipelined.out.find("why: pipeline sends are asynchronous here"), std::string::npos) << pipelined.out;
  EXPECT_EQ(pipelined.out.find("share it"), std::string::npos) << pipelined.out;       // --no-contention
  EXPECT_EQ(pipelined.out.find("weights sharded"), std::string::npos) << pipelined.out;  // none here
  const CliRun sharded = with({"--mesh", "pp=2,fsdp=4"});
  ASSERT_EQ(sharded.status, 0) << sharded.err;
  EXPECT_NE(sharded.out.find("weights sharded on pipeline stages"), std::string::npos) << sharded.out;
  // --json: the same reasons, whole, under analytical.differs_because.
  const Json one = Json::parse(with({"--mesh", "dp=8", "--json"}).out);
  EXPECT_TRUE(one["analytical"]["differs_because"].is_array());
  EXPECT_TRUE(one["analytical"]["differs_because"].empty()) << one["analytical"].dump();
  const Json two = Json::parse(with({"--mesh", "pp=2,fsdp=4", "--json"}).out);
  ASSERT_EQ(two["analytical"]["differs_because"].size(), 2u) << two["analytical"].dump();
  EXPECT_EQ(two["analytical"]["differs_because"][0].get<std::string>().rfind("pipeline sends are asynchronous here", 0), 0u);
  EXPECT_EQ(two["analytical"]["differs_because"][1].get<std::string>().rfind("weights sharded on pipeline stages", 0), 0u);
}

TEST(CliMessages, JsonCountsAreWholeNumbers) {
  auto args = kTinyJob;
  args.push_back("--json");
  const CliRun r = run(args);
  ASSERT_EQ(r.status, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_TRUE(j["parameters"].is_number_integer()) << j["parameters"].dump();
  EXPECT_TRUE(j["parameters_per_device"].is_number_integer()) << j["parameters_per_device"].dump();
  for (const auto& stage : j["stages"]) EXPECT_TRUE(stage["parameters_per_device"].is_number_integer());
  // The big default job too (174.6 B parameters, sharded over tp and pp).
  const Json big = Json::parse(run({"explain", "--json"}).out);
  EXPECT_TRUE(big["parameters"].is_number_integer()) << big["parameters"].dump();
  EXPECT_TRUE(big["parameters_per_device"].is_number_integer()) << big["parameters_per_device"].dump();
}

TEST(CliMessages, PlanFilesCarryTheDecimalsThePresetsWrote) {
  const auto path = temp_path("decimals-plan.json");
  const CliRun r = run({"explain", "--model", "llama2-7b", "--cluster", "dgx-a100", "--gpus", "16", "--mesh", "dp=2,tp=8",
                        "--global-batch", "64", "--emit-plan", path.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string text = read_text(path);
  // dgx-a100: latency_us 2.0 and 5.0, as written, not 4.9999999999999996e-06.
  EXPECT_EQ(text.find("99999999"), std::string::npos) << text;
  EXPECT_EQ(text.find("00000001"), std::string::npos) << text;
  const Json plan = Json::parse(text);
  EXPECT_EQ(plan["cluster"]["inter_node"]["latency_s"].dump(), "5e-06");
  EXPECT_EQ(plan["cluster"]["intra_node"]["latency_s"].dump(), "2e-06");
  EXPECT_TRUE(plan["prediction"]["parameters"].is_number_integer()) << plan["prediction"]["parameters"].dump();
  EXPECT_TRUE(plan["prediction"]["parameters_per_device"].is_number_integer());
}

// ---- bf16 on local-cpu: the device preset is the one answer (issue 13, item 8) ----

// A user presets folder for one test: empty, or with a local-cpu device.
fs::path user_folder(const std::string& name, const std::string& device_yaml = "") {
  const fs::path folder = temp_path(name);
  fs::create_directories(folder / "devices");
  if (!device_yaml.empty()) std::ofstream(folder / "devices" / "local-cpu.yaml") << device_yaml;
  return folder;
}

CliRun run_with_user_presets(const fs::path& folder, const std::vector<std::string>& args) {
  return run_under({"env", "MESHPLAN_USER_PRESETS=" + folder.string()}, args);
}

std::vector<std::string> tiny_job_in(const std::string& precision) {
  auto args = kTinyJob;
  args.back() = precision;
  return args;
}

TEST(CliBf16, ThePlaceholderSaysItHasNoFigureAndWhatMeasuresIt) {
  const fs::path none = user_folder("bf16-no-user-presets");
  const CliRun r = run_with_user_presets(none, tiny_job_in("bf16"));
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--precision: the local-cpu preset is the built-in placeholder, which has no bf16 figure"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("`meshplan calibrate` measures this CPU's bf16 GEMM rate"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("no bf16 support"), std::string::npos) << r.err;
  // auto stays fp32 there.
  const CliRun automatic = run_with_user_presets(none, tiny_job_in("auto"));
  EXPECT_EQ(automatic.status, 0) << automatic.err;
  EXPECT_NE(automatic.out.find("precision fp32"), std::string::npos) << automatic.out;
  // An accelerator without the format still says the hardware has none.
  const CliRun a100 = run({"explain", "--precision", "fp8"});
  EXPECT_NE(a100.err.find("a100-80g has no fp8 support"), std::string::npos) << a100.err;
}

TEST(CliBf16, APresetWithABf16FigurePlansBf16) {
  const fs::path with = user_folder("bf16-user-presets",
                                    "name: local-cpu\n"
                                    "source: \"test: a local-cpu with a bf16 figure\"\n"
                                    "peak_tflops:\n  fp32: 0.1\n  bf16: 0.3\n"
                                    "memory_gib: 12\nmemory_bandwidth_gb_per_s: 10\n"
                                    "achievable:\n  gemm_fraction: 0.8\n  memory_bandwidth_fraction: 0.85\n");
  const CliRun r = run_with_user_presets(with, tiny_job_in("bf16"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("precision bf16"), std::string::npos) << r.out;
  const CliRun automatic = run_with_user_presets(with, tiny_job_in("auto"));
  EXPECT_EQ(automatic.status, 0) << automatic.err;
  EXPECT_NE(automatic.out.find("precision bf16"), std::string::npos) << automatic.out;
}

TEST(CliBf16, TrainInBf16OnAPlanWithoutABf16FigureSaysSo) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST (Debian dataset-fashion-mnist) is not installed";
  }
  const fs::path none = user_folder("bf16-train-no-user-presets");
  const auto plan = temp_path("bf16-train-plan.json");
  auto explain = kTinyJob;
  explain.insert(explain.end(), {"--emit-plan", plan.string()});
  ASSERT_EQ(run_with_user_presets(none, explain).status, 0);
  const CliRun r = run_with_user_presets(none, {"train", "--plan", plan.string(), "--data", "fashion-mnist", "--steps", "1",
                                                "--precision", "bf16"});
  if (r.status == 2 && r.err.find("bf16 is not available") != std::string::npos) {
    GTEST_SKIP() << "this CPU or build runs no bf16 matmul: " << r.err;
  }
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("note: the local-cpu preset is the built-in placeholder, which has no bf16 figure"),
            std::string::npos)
      << r.out;
  // In fp32 there is nothing to say.
  const CliRun fp32 = run_with_user_presets(none, {"train", "--plan", plan.string(), "--data", "fashion-mnist", "--steps", "1"});
  ASSERT_EQ(fp32.status, 0) << fp32.err;
  EXPECT_EQ(fp32.out.find("bf16 figure"), std::string::npos) << fp32.out;
}

}  // namespace
