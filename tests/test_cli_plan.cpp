// `meshplan plan` and `meshplan sweep` as a user runs them: the table, the
// JSON, plan files that `meshplan explain` reproduces, sweep files whose rows
// match the search's candidates, precise messages for bad flags, and Ctrl-C
// that leaves a complete file behind. No timing assertions.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "cli/progress.hpp"
#include "cli_runner.hpp"
#include "model/plan_file.hpp"

namespace {

using namespace meshplan::testing_support;

// RFC 4180 records; `complete` is false when the text ends inside a record.
struct Csv {
  std::vector<std::vector<std::string>> records;
  bool complete = true;
};

Csv parse_csv(const std::string& text) {
  Csv csv;
  std::vector<std::string> record;
  std::string field;
  bool quoted = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      record.push_back(field);
      field.clear();
    } else if (c == '\n') {
      record.push_back(field);
      field.clear();
      csv.records.push_back(record);
      record.clear();
    } else {
      field += c;
    }
  }
  csv.complete = !quoted && field.empty() && record.empty();
  return csv;
}

const std::vector<std::string> kSweepColumns = {
    "model", "cluster", "world_size", "global_batch", "mesh", "dp", "fsdp", "tp", "pp", "cp", "ep", "micro_batch",
    "micro_batches", "zero", "recompute", "sequence_parallel", "schedule", "precision", "stage_layers", "feasible", "reason",
    "memory_total_bytes", "memory_parameters_bytes", "memory_gradients_bytes", "memory_optimizer_bytes",
    "memory_activations_bytes", "memory_buffers_bytes", "step_s", "compute_s", "communication_s",
    "communication_exposed_s", "bubble_s", "tokens_per_s", "mfu", "hfu"};

std::size_t column_of(const std::string& name) {
  return static_cast<std::size_t>(std::find(kSweepColumns.begin(), kSweepColumns.end(), name) - kSweepColumns.begin());
}

// A small job whose whole search takes a fraction of a second.
const std::vector<std::string> kSmallJob = {"--model", "llama2-7b", "--cluster", "dgx-a100", "--gpus", "16",
                                            "--global-batch", "64"};

// `meshplan <command>` on the small job, with more flags.
std::vector<std::string> small_job(const std::string& command, const std::vector<std::string>& more = {}) {
  std::vector<std::string> args = {command};
  args.insert(args.end(), kSmallJob.begin(), kSmallJob.end());
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// "search: 202 meshes, 90291 candidates, ..." -> 90291
std::int64_t candidates_in(const std::string& plan_output) {
  std::smatch match;
  const std::regex pattern("search: [0-9]+ meshes, ([0-9]+) candidates");
  if (!std::regex_search(plan_output, match, pattern)) return -1;
  return std::stoll(match[1]);
}

TEST(CliPlan, Gpt3On1024A100sPrintsTheRankedTable) {
  const CliRun r = run({"plan", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--gpus", "1024", "--global-batch", "1536"});
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* text : {"gpt3-175b on 1024 x a100-80g", "rank", "mesh", "micro-batch", "zero", "recompute", "schedule",
                           "GiB/device", "step s", "MFU %", "tokens/s", "exposed comm s", "bubble s", "Pareto front",
                           "feasible of", "exceed the 76.0 GiB usable per device", "evaluations/s", "decision guide",
                           "Does gpt3-175b train on one a100-80g?  no", "-> start from:", "compute-bound"}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
  }
  EXPECT_NE(r.out.find("\n     1  "), std::string::npos) << r.out;   // rank 1
  EXPECT_NE(r.out.find("\n    10  "), std::string::npos) << r.out;   // --top defaults to 10
  EXPECT_EQ(r.out.find("\n    11  "), std::string::npos) << r.out;
  EXPECT_GT(candidates_in(r.out), 0);
  expect_no_crash_text(r);
}

TEST(CliPlan, JsonIsTheExplainObjectOfEachTopPlan) {
  const CliRun r = run(small_job("plan", {"--json", "--top", "3"}));
  ASSERT_EQ(r.status, 0) << r.err;
  const auto plans = nlohmann::json::parse(r.out);
  ASSERT_TRUE(plans.is_array());
  ASSERT_GE(plans.size(), 1u);
  EXPECT_LE(plans.size(), 3u);
  double previous_step_s = 0;
  for (const auto& p : plans) {
    for (const char* key : {"model", "cluster", "world_size", "parameters", "feasible", "plan", "memory_bytes", "usable_bytes",
                            "stages", "time_s", "tokens_per_s", "mfu", "hfu", "model_flops_per_step"}) {
      EXPECT_TRUE(p.contains(key)) << key;
    }
    EXPECT_TRUE(p["feasible"].get<bool>());
    EXPECT_LE(p["memory_bytes"]["total"].get<double>(), p["usable_bytes"].get<double>());
    for (const char* key : {"mesh", "micro_batch", "micro_batches", "zero", "recompute", "schedule", "precision"}) {
      EXPECT_TRUE(p["plan"].contains(key)) << key;
    }
    const double step_s = p["time_s"]["step"].get<double>();
    EXPECT_GE(step_s, previous_step_s);  // fastest first
    previous_step_s = step_s;
  }
}

// Plan file -> the explain flags that say the same plan.
std::vector<std::string> explain_flags_for(const meshplan::PlanFile& file, const std::string& model) {
  const meshplan::Plan& p = file.plan;
  return {"explain", "--json", "--model", model, "--cluster", file.cluster.name, "--gpus", std::to_string(file.world_size),
          "--mesh", p.mesh.to_string(), "--micro-batch", std::to_string(p.micro_batch), "--global-batch",
          std::to_string(p.global_batch), "--zero", std::to_string(p.zero_stage), "--recompute", meshplan::to_string(p.recompute),
          p.sequence_parallel ? "--sequence-parallel" : "--no-sequence-parallel", "--schedule", meshplan::to_string(p.schedule),
          "--precision", meshplan::to_string(p.precision)};
}

TEST(CliPlan, EmittedPlanIsWhatExplainComputes) {
  const auto plan_path = temp_path("picked.json");
  const CliRun r = run(small_job("plan", {"--emit-plan", plan_path.string(), "--pick", "2", "--top", "3"}));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("wrote plan 2"), std::string::npos) << r.err;
  const auto file = meshplan::read_plan_file(plan_path.string());
  ASSERT_TRUE(file.ok()) << (file.problems.empty() ? "" : meshplan::describe(file.problems.front()));
  EXPECT_EQ(file.value.model.name, "llama2-7b");
  EXPECT_EQ(file.value.world_size, 16);
  ASSERT_TRUE(file.value.prediction.time.has_value());

  // The second row of the table is the plan written.
  const CliRun listed = run(small_job("plan", {"--json", "--top", "2"}));
  ASSERT_EQ(listed.status, 0) << listed.err;
  const auto second = nlohmann::json::parse(listed.out).at(1);
  EXPECT_EQ(second["plan"]["mesh"].dump(), nlohmann::json::parse(read_text(plan_path))["plan"]["mesh"].dump());

  // explain, given the same plan as flags, predicts the same memory and time, and writes the same plan file.
  const auto again_path = temp_path("again.json");
  auto args = explain_flags_for(file.value, "llama2-7b");
  args.push_back("--emit-plan");
  args.push_back(again_path.string());
  const CliRun explained = run(args);
  ASSERT_EQ(explained.status, 0) << explained.err;
  const auto j = nlohmann::json::parse(explained.out);
  EXPECT_NEAR(j["memory_bytes"]["total"].get<double>(), file.value.prediction.memory.total_bytes(), 1.0);
  EXPECT_DOUBLE_EQ(j["time_s"]["step"].get<double>(), file.value.prediction.time->step_s);
  const auto again = meshplan::read_plan_file(again_path.string());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(meshplan::plan_file_to_json(again.value).dump(), meshplan::plan_file_to_json(file.value).dump());
}

// Llama 3 405B's 126 layers on pp = 32: the search's uneven split is shown
// in the table, written to the plan file, printed by --json, read back by
// explain (as --stage-layers) and simulate --plan, and put in sweep rows.
TEST(CliPlan, UnevenSplitTravelsWithThePlan) {
  const std::vector<std::string> job = {"--model", "llama3-405b", "--cluster", "dgx-h100", "--gpus", "1024",
                                        "--global-batch", "2048", "--axes", "dp,tp,pp", "--micro-batches", "1",
                                        "--recompute", "selective", "--zero", "1", "--max-pp", "32"};
  auto with = [&](std::vector<std::string> args, const std::vector<std::string>& more) {
    args.insert(args.end(), job.begin(), job.end());
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  const auto plan_path = temp_path("uneven.json");
  const CliRun r = run(with({"plan"}, {"--top", "3", "--emit-plan", plan_path.string()}));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("stage layers"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("layers per chunk"), std::string::npos) << r.err;

  const auto file = meshplan::read_plan_file(plan_path.string());
  ASSERT_TRUE(file.ok()) << (file.problems.empty() ? "" : meshplan::describe(file.problems.front()));
  const meshplan::Plan& p = file.value.plan;
  ASSERT_FALSE(p.stage_layers.empty());
  EXPECT_EQ(static_cast<std::int64_t>(p.stage_layers.size()), p.mesh.size(meshplan::Axis::pp) * p.schedule.virtual_stages);
  std::int64_t sum = 0;
  std::string listed;
  for (auto n : p.stage_layers) {
    sum += n;
    listed += (listed.empty() ? "" : ",") + std::to_string(n);
  }
  EXPECT_EQ(sum, 126);

  const CliRun json = run(with({"plan"}, {"--json", "--top", "1"}));
  ASSERT_EQ(json.status, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out).at(0)["plan"]["stage_layers"].get<std::vector<std::int64_t>>(), p.stage_layers);

  auto args = explain_flags_for(file.value, "llama3-405b");
  args.insert(args.end(), {"--stage-layers", listed});
  const CliRun explained = run(args);
  ASSERT_EQ(explained.status, 0) << explained.err;
  const auto j = nlohmann::json::parse(explained.out);
  EXPECT_EQ(j["plan"]["stage_layers"].get<std::vector<std::int64_t>>(), p.stage_layers);
  EXPECT_DOUBLE_EQ(j["time_s"]["step"].get<double>(), file.value.prediction.time->step_s);

  const CliRun simulated = run({"simulate", "--plan", plan_path.string()});
  EXPECT_EQ(simulated.status, 0) << simulated.err;

  const CliRun sweep = run(with({"sweep"}, {"--out", "-"}));
  ASSERT_EQ(sweep.status, 0) << sweep.err;
  const Csv csv = parse_csv(sweep.out);
  ASSERT_TRUE(csv.complete);
  bool found = false;
  for (std::size_t i = 1; i < csv.records.size(); ++i) {
    found = found || csv.records[i].at(column_of("stage_layers")) == listed;
  }
  EXPECT_TRUE(found) << listed;
}

TEST(CliPlan, ExplainWritesNoPlanFileForAnInvalidPlan) {
  const auto path = temp_path("invalid.json");
  const CliRun r = run({"explain", "--mesh", "dp=16,pp=8,tp=16", "--emit-plan", path.string()});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--emit-plan"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(CliPlan, NoFeasiblePlanExitsOneAndSaysWhy) {
  const CliRun r = run({"plan", "--model", "gpt3-175b", "--gpus", "8", "--global-batch", "8"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.out.find("no feasible plan"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("exceed the 76.0 GiB usable per device"), std::string::npos) << r.err;
  const CliRun json = run({"plan", "--json", "--model", "gpt3-175b", "--gpus", "8", "--global-batch", "8"});
  EXPECT_EQ(json.status, 1);
  EXPECT_EQ(nlohmann::json::parse(json.out).size(), 0u);
}

TEST(CliPlan, GuideOnly) {
  const CliRun big = run({"plan", "--guide-only"});
  ASSERT_EQ(big.status, 0) << big.err;
  EXPECT_NE(big.out.find("Does FSDP (ZeRO-3) over all 1024 devices fit?"), std::string::npos) << big.out;
  EXPECT_NE(big.out.find("GiB needed"), std::string::npos);
  EXPECT_NE(big.out.find("C/W"), std::string::npos);
  EXPECT_EQ(big.out.find("Pareto"), std::string::npos);

  const CliRun small = run({"plan", "--guide-only", "--model", "gpt2-124m", "--gpus", "8", "--global-batch", "64"});
  ASSERT_EQ(small.status, 0) << small.err;
  EXPECT_NE(small.out.find("Does gpt2-124m train on one a100-80g?  yes"), std::string::npos) << small.out;
  EXPECT_NE(small.out.find("plain data parallelism, dp=8"), std::string::npos) << small.out;
  EXPECT_NE(small.out.find("evaluator, dp=8"), std::string::npos) << small.out;
}

TEST(CliSweep, CsvHasOneRowPerCandidate) {
  const auto path = temp_path("small.csv");
  const CliRun sweep = run(small_job("sweep", {"--out", path.string()}));
  ASSERT_EQ(sweep.status, 0) << sweep.err;
  const CliRun plan = run(small_job("plan"));
  ASSERT_EQ(plan.status, 0) << plan.err;

  const Csv csv = parse_csv(read_text(path));
  ASSERT_TRUE(csv.complete);
  ASSERT_FALSE(csv.records.empty());
  EXPECT_EQ(csv.records.front(), kSweepColumns);
  const auto rows = static_cast<std::int64_t>(csv.records.size()) - 1;
  EXPECT_EQ(rows, candidates_in(plan.out));
  EXPECT_NE(sweep.err.find(std::to_string(rows) + " rows"), std::string::npos) << sweep.err;

  const std::size_t feasible_at = column_of("feasible"), reason_at = column_of("reason");
  const std::size_t step_at = column_of("step_s"), memory_at = column_of("memory_total_bytes");
  std::int64_t feasible = 0, rejected_early = 0;
  for (std::size_t i = 1; i < csv.records.size(); ++i) {
    const auto& row = csv.records[i];
    ASSERT_EQ(row.size(), kSweepColumns.size()) << i;
    EXPECT_EQ(row[0], "llama2-7b");
    if (row[feasible_at] == "true") {
      ++feasible;
      EXPECT_TRUE(row[reason_at].empty());
      EXPECT_FALSE(row[step_at].empty());
    } else {
      EXPECT_EQ(row[feasible_at], "false");
      EXPECT_FALSE(row[reason_at].empty());
      if (row[memory_at].empty()) ++rejected_early;
    }
  }
  EXPECT_GT(feasible, 0);
  EXPECT_GT(rejected_early, 0);
  EXPECT_NE(plan.out.find(std::to_string(feasible) + " feasible of " + std::to_string(rows) + " candidates"), std::string::npos);
}

TEST(CliSweep, CrossesGpuCountsAndGoesToStdout) {
  const CliRun r = run({"sweep", "--model", "llama2-7b", "--gpus", "8,16", "--global-batch", "64", "--axes", "dp,tp",
                        "--out", "-"});
  ASSERT_EQ(r.status, 0) << r.err;
  const Csv csv = parse_csv(r.out);
  ASSERT_TRUE(csv.complete);
  std::set<std::string> worlds;
  for (std::size_t i = 1; i < csv.records.size(); ++i) worlds.insert(csv.records[i].at(2));
  EXPECT_EQ(worlds, (std::set<std::string>{"8", "16"}));
}

TEST(CliSweep, JsonLinesParseLineByLine) {
  const auto path = temp_path("small.jsonl");
  const CliRun r = run({"sweep", "--model", "gpt2-124m,llama2-7b", "--gpus", "8", "--global-batch", "32", "--out", path.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  std::ifstream in(path);
  std::string line;
  std::size_t lines = 0, feasible = 0;
  std::set<std::string> models;
  while (std::getline(in, line)) {
    ++lines;
    const auto j = nlohmann::json::parse(line);
    for (const auto& column : kSweepColumns) ASSERT_TRUE(j.contains(column)) << column;
    models.insert(j["model"].get<std::string>());
    if (j["feasible"].get<bool>()) {
      ++feasible;
      EXPECT_TRUE(j["reason"].is_null());
      EXPECT_GT(j["step_s"].get<double>(), 0);
    } else {
      EXPECT_TRUE(j["reason"].is_string());
    }
  }
  EXPECT_GT(lines, 0u);
  EXPECT_GT(feasible, 0u);
  EXPECT_EQ(models, (std::set<std::string>{"gpt2-124m", "llama2-7b"}));
  EXPECT_NE(r.err.find(std::to_string(lines) + " rows"), std::string::npos) << r.err;
}

struct BadInput {
  const char* name;
  std::vector<std::string> args;
  std::vector<std::string> fragments;  // all on stderr
};

void PrintTo(const BadInput& input, std::ostream* out) { *out << input.name; }

class CliPlanBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(CliPlanBadInput, ExitsTwoNamingTheFlag) {
  const CliRun r = run(GetParam().args);
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  for (const auto& fragment : GetParam().fragments) EXPECT_NE(r.err.find(fragment), std::string::npos) << fragment << "\n" << r.err;
  expect_no_crash_text(r);
}

const std::string kNoDir = "/nonexistent-meshplan-dir/x";

INSTANTIATE_TEST_SUITE_P(
    Cases, CliPlanBadInput,
    ::testing::Values(
        BadInput{"axes", {"plan", "--axes", "dp,xx"}, {"--axes", "'xx'", "dp, fsdp, tp, pp, cp, ep"}},
        BadInput{"axes_empty_item", {"plan", "--axes", "dp,,tp"}, {"--axes", "empty item"}},
        BadInput{"zero", {"plan", "--zero", "0,4"}, {"--zero", "'4'"}},
        BadInput{"recompute", {"plan", "--recompute", "some"}, {"--recompute", "none, selective, full"}},
        BadInput{"schedules", {"plan", "--schedules", "1f1b,interleaved:2"}, {"--schedules", "--interleave"}},
        BadInput{"interleave", {"plan", "--interleave", "1"}, {"--interleave", "'1'"}},
        BadInput{"precision_word", {"plan", "--precision", "int4"}, {"--precision", "'int4'"}},
        BadInput{"precision_device", {"plan", "--precision", "bf16,fp8"}, {"--precision", "no fp8 support"}},
        BadInput{"micro_batches", {"plan", "--micro-batches", "0,1"}, {"--micro-batches", "'0'"}},
        BadInput{"max_tp", {"plan", "--max-tp", "-2"}, {"--max-tp"}},
        BadInput{"max_pp_text", {"plan", "--max-pp", "abc"}, {"--max-pp"}},
        BadInput{"headroom", {"plan", "--headroom", "1.5"}, {"--headroom", "[0, 1)"}},
        BadInput{"threads", {"plan", "--threads", "-1"}, {"--threads"}},
        BadInput{"top", {"plan", "--top", "0"}, {"--top", "at least 1"}},
        BadInput{"pick", {"plan", "--pick", "0"}, {"--pick"}},
        BadInput{"pick_past_end", {"plan", "--model", "gpt2-124m", "--gpus", "1", "--global-batch", "1", "--micro-batches", "1",
                                   "--emit-plan", "never-written.json", "--pick", "99"},
                 {"--pick", "past the last"}},
        BadInput{"gpus_nodes", {"plan", "--gpus", "12"}, {"--gpus", "whole number of dgx-a100 nodes"}},
        BadInput{"gpus_list", {"plan", "--gpus", "8,16"}, {"--gpus", "meshplan sweep"}},
        BadInput{"gpus_text", {"plan", "--gpus", "many"}, {"--gpus", "'many'"}},
        BadInput{"model", {"plan", "--model", "gpt5"}, {"--model gpt5", "unknown model preset"}},
        BadInput{"seq", {"plan", "--seq", "4096"}, {"--seq", "2048 learned positions"}},
        BadInput{"emit_plan_dir", {"plan", "--model", "gpt2-124m", "--gpus", "8", "--global-batch", "8", "--emit-plan",
                                   kNoDir + "/plan.json"},
                 {"--emit-plan", kNoDir}},
        BadInput{"sweep_out_extension", {"sweep", "--out", "sweep.txt"}, {"--out", ".csv or .jsonl"}},
        BadInput{"sweep_out_dir", {"sweep", "--gpus", "8", "--model", "gpt2-124m", "--out", kNoDir + "/s.csv"}, {"--out", kNoDir}},
        BadInput{"sweep_gpus_empty_item", {"sweep", "--gpus", "8,,16"}, {"--gpus", "empty item"}},
        BadInput{"sweep_model_list", {"sweep", "--model", "gpt2-124m,nope"}, {"--model nope", "unknown model preset"}},
        BadInput{"sweep_batch", {"sweep", "--global-batch", "0"}, {"--global-batch", "'0'"}},
        BadInput{"unknown_flag", {"plan", "--axis", "dp"}, {"--axis"}}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(CliPlan, HelpNamesTheFlags) {
  const CliRun plan = run({"plan", "--help"});
  EXPECT_EQ(plan.status, 0);
  for (const char* flag : {"--axes", "--max-tp", "--micro-batches", "--schedules", "--interleave", "--top", "--json",
                           "--emit-plan", "--pick", "--guide-only", "--threads"}) {
    EXPECT_NE(plan.out.find(flag), std::string::npos) << flag;
  }
  const CliRun sweep = run({"sweep", "--help"});
  EXPECT_EQ(sweep.status, 0);
  EXPECT_NE(sweep.out.find("--out"), std::string::npos);
  EXPECT_NE(run({"explain", "--help"}).out.find("--emit-plan"), std::string::npos);
}

TEST(CliPlan, FuzzedFlagsNeverCrash) {
  const std::vector<std::vector<std::string>> flags = {
      {"--model", "gpt2-124m", "mlp-seed", "resnet50", "llama2-7b", "nope"},
      {"--cluster", "dgx-a100", "ethernet-10g", "dgx-h100"},
      {"--gpus", "1", "4", "8", "16", "0", "x", "7"},
      {"--global-batch", "1", "8", "64", "0", "3"},
      {"--axes", "dp", "dp,tp", "fsdp,tp,pp", "dp,cp,ep", "xx", ""},
      {"--micro-batches", "1", "1,2", "0", ","},
      {"--zero", "0", "1,3", "5"},
      {"--recompute", "none", "full,selective", "x"},
      {"--schedules", "1f1b", "gpipe,zb-h1", "interleaved", "x"},
      {"--precision", "fp32", "bf16,fp32", "auto", "fp8"},
      {"--max-tp", "0", "2", "-1"},
      {"--top", "1", "3", "0"},
      {"--seq", "128", "0", "-5"},
      {"--json"}};
  std::mt19937 rng(7);
  for (int i = 0; i < 40; ++i) {
    std::vector<std::string> args = {i % 4 == 0 ? "sweep" : "plan"};
    for (const auto& flag : flags) {
      if (rng() % 3 != 0) continue;
      if (args[0] == "sweep" && flag[0] == "--json") continue;
      args.push_back(flag[0]);
      if (flag.size() > 1) args.push_back(flag[1 + rng() % (flag.size() - 1)]);
    }
    if (args[0] == "sweep") {
      args.push_back("--out");
      args.push_back(temp_path("fuzz.csv").string());
    }
    if (std::find(args.begin(), args.end(), "--gpus") == args.end()) {
      args.insert(args.end(), {"--gpus", "8", "--global-batch", "8"});
    }
    const CliRun r = run(args);
    std::string line;
    for (const auto& a : args) line += a + " ";
    EXPECT_TRUE(r.status == 0 || r.status == 1 || r.status == 2) << r.status << ": " << line << "\n" << r.err;
    if (r.status == 2) {
      EXPECT_FALSE(r.err.empty()) << line;
    }
    expect_no_crash_text(r);
  }
}

// A sweep big enough to take several seconds, stopped with SIGINT: exit 130,
// and the CSV holds exactly the rows it reports, each complete.
TEST(CliSweep, CtrlCKeepsEveryRowWritten) {
  const auto csv_path = temp_path("interrupted.csv");
  const auto err_path = temp_path("interrupted.err");
  std::filesystem::remove(csv_path);
  const std::vector<std::string> args = {MESHPLAN_BINARY, "sweep", "--model", "gpt3-175b,llama3-405b,llama2-70b,llama3-70b",
                                         "--gpus", "1024,2048,4096", "--global-batch", "1536,3072", "--axes",
                                         "dp,fsdp,tp,pp,cp", "--out", csv_path.string()};
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::FILE* err = std::freopen(err_path.c_str(), "w", stderr);
    std::FILE* out = std::freopen("/dev/null", "w", stdout);
    if (err && out) ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  // The handler is installed before the file is opened: wait for the header, then let it run a little.
  for (int i = 0; i < 200 && (!std::filesystem::exists(csv_path) || std::filesystem::file_size(csv_path) == 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(::kill(child, SIGINT), 0);
  int raw = 0;
  ASSERT_EQ(::waitpid(child, &raw, 0), child);
  ASSERT_TRUE(WIFEXITED(raw)) << "killed by signal " << WTERMSIG(raw);
  const std::string err = read_text(err_path);
  ASSERT_EQ(WEXITSTATUS(raw), 130) << "the sweep finished before it was interrupted; make it bigger\n" << err;

  const std::string text = read_text(csv_path);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  const Csv csv = parse_csv(text);
  EXPECT_TRUE(csv.complete);
  ASSERT_FALSE(csv.records.empty());
  EXPECT_EQ(csv.records.front(), kSweepColumns);
  for (std::size_t i = 1; i < csv.records.size(); ++i) ASSERT_EQ(csv.records[i].size(), kSweepColumns.size()) << "row " << i;
  const std::string kept = "interrupted; kept " + std::to_string(csv.records.size() - 1) + " rows";
  EXPECT_NE(err.find(kept), std::string::npos) << err;
  std::filesystem::remove(csv_path);
}

TEST(Progress, TextSaysShareRateAndTimeLeft) {
  const std::string half = meshplan::cli::format_progress(0.5, 1000, 2.0);
  EXPECT_NE(half.find(" 50% of meshes"), std::string::npos) << half;
  EXPECT_NE(half.find("1000 candidates"), std::string::npos) << half;
  EXPECT_NE(half.find("500/s"), std::string::npos) << half;
  EXPECT_NE(half.find("ETA 2 s"), std::string::npos) << half;
  EXPECT_NE(half.find("[##########..........]"), std::string::npos) << half;
  EXPECT_EQ(meshplan::cli::format_progress(0, 0, 0).find("ETA"), std::string::npos);
  EXPECT_NE(meshplan::cli::format_progress(1.7, 5, 1).find("100%"), std::string::npos);
  EXPECT_NE(meshplan::cli::format_progress(0.01, 5, 100).find("ETA 2 h 45 min"), std::string::npos);
}

TEST(Progress, RedrawsAtMostTenTimesASecond) {
  using namespace std::chrono_literals;
  const auto t0 = meshplan::cli::Progress::Clock::time_point{} + 1h;
  std::ostringstream terminal, log;
  meshplan::cli::Progress bar(terminal, true, t0), lines(log, false, t0);
  int redraws = 0;
  for (int ms = 1; ms <= 1000; ++ms) {  // told every millisecond for a second
    const auto before = terminal.str().size();
    bar.update(ms / 1000.0, ms, t0 + std::chrono::milliseconds(ms));
    lines.update(ms / 1000.0, ms, t0 + std::chrono::milliseconds(ms));
    redraws += terminal.str().size() != before;
  }
  EXPECT_EQ(redraws, 10);
  EXPECT_EQ(terminal.str().rfind('\r', 0), 0u);  // redrawn in place
  EXPECT_TRUE(log.str().empty());                 // plain lines: not within the first second
  lines.update(0.9, 2000, t0 + 2500ms);
  EXPECT_NE(log.str().find(" 90% of meshes, 2000 candidates, 800/s"), std::string::npos) << log.str();
  EXPECT_EQ(log.str().find('\r'), std::string::npos);
  bar.finish();
  EXPECT_TRUE(terminal.str().ends_with("\r\x1b[K"));
}

}  // namespace
