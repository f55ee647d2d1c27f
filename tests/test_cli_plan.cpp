// `meshplan plan` and `meshplan sweep` as a user runs them: the table, the
// JSON, plan files that `meshplan explain` reproduces, sweep files whose rows
// match the search's candidates (all of them, or --feasible-only), gzip
// output that inflates to the same text, precise messages for bad flags, and
// Ctrl-C that leaves a complete file (and a complete gzip stream) behind. No
// timing assertions.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
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
    "micro_batches", "zero", "recompute", "recompute_modules", "sequence_parallel", "schedule", "precision", "attention", "cp_comm", "fp32_gradients",
    "bf16_moments", "loss", "expert_tensor_parallel", "ep_dispatch", "overlap_expert_parallel", "tp_comm_overlap", "overlap_p2p_comm", "overlap_zero_gather", "stage_layers", "feasible", "reason",
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
// `meshplan` with the arguments of each list in turn (a command, a job's flags, a case's own flags).
CliRun run_joined(std::initializer_list<std::vector<std::string>> parts) {
  std::vector<std::string> args;
  for (const auto& part : parts) args.insert(args.end(), part.begin(), part.end());
  return run(args);
}

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
                           "Does gpt3-175b train on one a100-80g?  no", "-> start from:", "compute-bound",
                           "micro-batch 1, selective recompute (nothing to repeat under fused attention))"}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
  }
  EXPECT_NE(r.out.find("\n     1  "), std::string::npos) << r.out;   // rank 1
  EXPECT_NE(r.out.find("\n    10  "), std::string::npos) << r.out;   // --top defaults to 10
  EXPECT_EQ(r.out.find("\n    11  "), std::string::npos) << r.out;
  EXPECT_GT(candidates_in(r.out), 0);
  expect_no_crash_text(r);
}

// Llama 3 8B's preset with 16 experts, top 2, as a model file.
std::filesystem::path moe_8b_file(const std::string& name) {
  const auto moe = temp_path(name);
  std::ifstream in(std::string(MESHPLAN_SOURCE_DIR) + "/presets/models/llama3-8b.yaml");
  std::ofstream out(moe);
  for (std::string line; std::getline(in, line);) out << (line.rfind("name:", 0) == 0 ? "name: moe-8b" : line) << "\n";
  out << "experts: 16\ntop_k: 2\n";
  return moe;
}

// Without --axes, a mixture-of-experts model's search tries ep (dense models' does not), in plan and in
// explain without --mesh; --axes given is searched as given.
TEST(CliPlan, AMixtureOfExpertsIsSearchedOverEpByDefault) {
  const auto moe = moe_8b_file("moe-8b.yaml");
  const std::vector<std::string> job = {"--model", moe.string(), "--cluster", "dgx-h100", "--gpus", "32",
                                        "--global-batch", "64", "--seq", "2048"};
  auto with = [&](const std::vector<std::string>& head, const std::vector<std::string>& tail = {}) {
    return run_joined({head, job, tail});
  };
  const CliRun plan = with({"plan"});
  ASSERT_EQ(plan.status, 0) << plan.err;
  EXPECT_NE(plan.out.find("search: axes dp,fsdp,tp,pp,ep;"), std::string::npos) << plan.out;
  const CliRun given = with({"plan"}, {"--axes", "dp,tp"});
  ASSERT_EQ(given.status, 0) << given.err;
  EXPECT_NE(given.out.find("search: axes dp,tp;"), std::string::npos) << given.out;
  const CliRun dense = run({"plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--global-batch",
                            "64", "--seq", "2048"});
  ASSERT_EQ(dense.status, 0) << dense.err;
  EXPECT_NE(dense.out.find("search: axes dp,fsdp,tp,pp;"), std::string::npos) << dense.out;
  // --max-ep bounds ep, and the search line says so.
  const CliRun bounded = with({"plan"}, {"--max-ep", "4", "--top", "50"});
  ASSERT_EQ(bounded.status, 0) << bounded.err;
  EXPECT_NE(bounded.out.find("search: axes dp,fsdp,tp,pp,ep, ep <= 4;"), std::string::npos) << bounded.out;
  for (const char* big : {"ep=8", "ep=16"}) EXPECT_EQ(bounded.out.find(big), std::string::npos) << big << bounded.out;
  EXPECT_NE(bounded.out.find("ep=4"), std::string::npos) << bounded.out;
  // explain without --mesh ranks the same search: its plan is plan's first.
  const CliRun explain = with({"explain"}, {"--json"});
  ASSERT_LE(explain.status, 1) << explain.err;
  const auto first = plan.out.substr(plan.out.find("\n     1  ") + 8, 40);
  std::string mesh;
  for (const auto& [axis, size] : nlohmann::ordered_json::parse(explain.out)["plan"]["mesh"].items())
    mesh += (mesh.empty() ? "" : ",") + axis + "=" + std::to_string(size.get<std::int64_t>());
  EXPECT_EQ(first.substr(0, first.find(' ')), mesh) << plan.out << explain.out;
}

// Without --global-batch, plan and sweep take the same rule as explain
// (model/default_batch.hpp): Llama 3 70B's 8192-token sequences get GPT-3
// 175B's 3.2M tokens as 384 sequences, not GPT-3's 1536 sequences; and say so.
TEST(CliPlan, WithoutGlobalBatchUsesTheRuleForThatModel) {
  const std::vector<std::string> job = {"--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "64"};
  std::vector<std::string> plan_args = {"plan", "--json", "--top", "1"};
  plan_args.insert(plan_args.end(), job.begin(), job.end());
  const CliRun planned = run(plan_args);
  ASSERT_EQ(planned.status, 0) << planned.err;
  EXPECT_EQ(nlohmann::json::parse(planned.out).at(0)["plan"]["global_batch"].get<std::int64_t>(), 384);
  EXPECT_NE(planned.err.find("no --global-batch: using 384 for llama3-70b on 64 devices"), std::string::npos)
      << planned.err;

  const auto out = temp_path("default-batch.csv");
  std::vector<std::string> sweep_args = {"sweep", "--out", out.string(), "--no-progress", "--feasible-only"};
  sweep_args.insert(sweep_args.end(), job.begin(), job.end());
  const CliRun swept = run(sweep_args);
  ASSERT_EQ(swept.status, 0) << swept.err;
  const Csv csv = parse_csv(read_text(out));
  ASSERT_GE(csv.records.size(), 2u);
  for (std::size_t i = 1; i < csv.records.size(); ++i) EXPECT_EQ(csv.records[i].at(column_of("global_batch")), "384");
  EXPECT_NE(swept.err.find("no --global-batch: using 384"), std::string::npos) << swept.err;
}

// Searching both attention implementations, the table says which each row
// uses (the rows would read alike otherwise); with one, no such column.
TEST(CliPlan, BothAttentionsGetAnAttentionColumn) {
  const std::vector<std::string> job = {"plan", "--model", "gpt2-1.5b", "--cluster", "dgx-h100", "--gpus", "8",
                                        "--global-batch", "64", "--top", "40"};
  std::vector<std::string> both = job;
  both.insert(both.end(), {"--attention", "fused,unfused"});
  const CliRun searched = run(both);
  ASSERT_EQ(searched.status, 0) << searched.err;
  const std::string header = "  rank  mesh";
  const auto header_line = [&](const std::string& out) {
    const auto at = out.find(header);
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  EXPECT_NE(header_line(searched.out).find(" attention "), std::string::npos) << searched.out;
  EXPECT_NE(searched.out.find(" fused "), std::string::npos) << searched.out;
  EXPECT_NE(searched.out.find("recompute none,selective (unfused attention only),full;"), std::string::npos)
      << searched.out;
  const CliRun fused_only = run(job);
  ASSERT_EQ(fused_only.status, 0) << fused_only.err;
  ASSERT_FALSE(header_line(fused_only.out).empty()) << fused_only.out;
  EXPECT_EQ(header_line(fused_only.out).find(" attention "), std::string::npos) << fused_only.out;
  // Selective recompute under fused attention is the plan without recompute: said once, not searched twice.
  EXPECT_NE(fused_only.out.find("recompute none,full (selective: the same plans as none with fused attention);"),
            std::string::npos)
      << fused_only.out;
  const std::string tables = fused_only.out.substr(0, fused_only.out.find("decision guide"));
  EXPECT_EQ(tables.find(" selective "), std::string::npos) << fused_only.out;
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
  std::vector<std::string> args = {"explain", "--json", "--model", model, "--cluster", file.cluster.name, "--gpus", std::to_string(file.world_size),
          "--mesh", p.mesh.to_string(), "--micro-batch", std::to_string(p.micro_batch), "--global-batch",
          std::to_string(p.global_batch), "--zero", std::to_string(p.zero_stage), "--recompute", meshplan::to_string(p.recompute),
          p.sequence_parallel ? "--sequence-parallel" : "--no-sequence-parallel", "--schedule", meshplan::to_string(p.schedule),
          "--precision", meshplan::to_string(p.precision), "--attention", meshplan::to_string(p.attention)};
  if (p.fp32_gradients) args.push_back("--fp32-gradients");
  return args;
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

// explain without --mesh shows the searched plan with the search's own
// pipeline split: Gemma 3 1B's 26 layers over pipeline chunks that do not
// divide them used to lose the uneven split and fail validation ("do not
// divide evenly"). Its single kv head is replicated over tp = 2, so the
// search's first plan (pp = 2, interleaved: 8 chunks) fits.
TEST(CliPlan, ExplainKeepsTheSearchedUnevenSplit) {
  const CliRun r = run({"explain", "--model", "gemma3-1b", "--cluster", "dgx-a100", "--gpus", "8", "--global-batch", "64"});
  EXPECT_EQ(r.status, 0) << r.err;  // explained, and fits
  EXPECT_EQ(r.err.find("do not divide evenly"), std::string::npos) << r.err;
  const std::size_t split = r.out.find("layers per chunk ");
  ASSERT_NE(split, std::string::npos) << r.out;
  std::int64_t chunks = 0, layers = 0, first = -1;
  bool uneven = false;
  std::istringstream counts(r.out.substr(split + 17, r.out.find('\n', split) - split - 17));
  for (std::string count; std::getline(counts, count, ',');) {
    const std::int64_t n = std::stoll(count);
    uneven = uneven || (first >= 0 && n != first);
    if (first < 0) first = n;
    layers += n;
    ++chunks;
  }
  EXPECT_EQ(layers, 26) << r.out;
  EXPECT_NE(26 % chunks, 0) << r.out;
  EXPECT_TRUE(uneven) << r.out;
}

// --emit-plan says when `meshplan train` will refuse the file it writes: a
// GPT or Llama plan is written without a word, a plan with context
// parallelism (which the executor does not run) with a warning per reason
// naming the field, and a ResNet plan not at all (exit 2), while explain and
// plan still print their whole answer.
TEST(CliPlan, EmitPlanWarnsWhatTrainWillRefuse) {
  const auto gpt = temp_path("emit-gpt.json");
  CliRun r = run({"explain", "--model", "gpt2-124m", "--cluster", "dgx-a100", "--gpus", "8", "--mesh", "dp=8",
                  "--micro-batch", "1", "--global-batch", "8", "--emit-plan", gpt.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(gpt));
  EXPECT_EQ(r.err.find("train will refuse"), std::string::npos) << r.err;

  const auto llama = temp_path("emit-llama.json");
  r = run({"explain", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--mesh", "tp=8",
           "--micro-batch", "1", "--global-batch", "8", "--emit-plan", llama.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(llama));
  EXPECT_EQ(r.err.find("train will refuse"), std::string::npos) << r.err;

  const std::vector<std::string> cp_job = {"--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8",
                                           "--mesh", "cp=2,tp=4", "--micro-batch", "1", "--global-batch", "8"};
  std::vector<std::string> plain_args = {"explain"};
  plain_args.insert(plain_args.end(), cp_job.begin(), cp_job.end());
  const CliRun plain = run(plain_args);
  ASSERT_EQ(plain.status, 0) << plain.err;
  const auto cp = temp_path("emit-cp.json");
  std::vector<std::string> cp_args = plain_args;
  cp_args.insert(cp_args.end(), {"--emit-plan", cp.string()});
  r = run(cp_args);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(cp));
  EXPECT_NE(r.err.find("meshplan explain: warning: --emit-plan: meshplan train will refuse this plan: mesh.cp: "),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, plain.out);  // stdout as without --emit-plan
  // plan warns the same way when the plan it writes has cp (the only axis it may use here).
  const auto planned = temp_path("emit-cp-plan.json");
  r = run({"plan", "--model", "gpt-byte-10m", "--cluster", "local-cpu", "--gpus", "2", "--global-batch", "2",
           "--axes", "cp", "--precision", "fp32", "--emit-plan", planned.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(planned));
  EXPECT_NE(r.err.find("meshplan plan: warning: --emit-plan: meshplan train will refuse this plan: mesh.cp: "),
            std::string::npos)
      << r.err;

  const std::vector<std::string> resnet = {"--model", "resnet50", "--cluster", "dgx-a100", "--gpus", "8",
                                           "--global-batch", "256"};
  std::vector<std::string> explain = {"explain", "--mesh", "dp=8", "--micro-batch", "32"}, plan = {"plan"};
  explain.insert(explain.end(), resnet.begin(), resnet.end());
  plan.insert(plan.end(), resnet.begin(), resnet.end());
  const CliRun explained = run(explain);
  ASSERT_EQ(explained.status, 0) << explained.err;
  for (std::vector<std::string> args : {explain, plan}) {
    const auto path = temp_path("emit-resnet-" + args.front() + ".json");
    args.insert(args.end(), {"--emit-plan", path.string()});
    r = run(args);
    EXPECT_EQ(r.status, 2) << args.front() << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(path)) << args.front();
    EXPECT_NE(r.err.find("meshplan " + args.front() +
                         ": --emit-plan: ResNet/CNN models are planned but not trained by the executor; no plan "
                         "file written"),
              std::string::npos)
        << r.err;
    if (args.front() == "explain") {
      EXPECT_EQ(r.out, explained.out);
    } else {
      EXPECT_NE(r.out.find("Pareto front"), std::string::npos) << r.out;
    }
    expect_no_crash_text(r);
  }
}

TEST(CliPlan, ExplainWritesNoPlanFileForAnInvalidPlan) {
  const auto path = temp_path("invalid.json");
  const CliRun r = run({"explain", "--mesh", "dp=16,pp=8,tp=16", "--emit-plan", path.string()});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--emit-plan"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path));
}

// Recompute modes of transformer layers asked of an MLP: the search says that,
// not that no mesh exists.
TEST(CliPlan, TransformerRecomputeOnAnMlpSaysWhyThereAreNoCandidates) {
  const CliRun r = run({"plan", "--model", "mlp-seed", "--gpus", "8", "--recompute", "selective-op"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.out.find("--recompute selective-op applies to transformer layers; mlp models recompute none or full"),
            std::string::npos) << r.out;
  const CliRun explain = run({"explain", "--model", "mlp-seed", "--gpus", "8", "--mesh", "dp=8", "--recompute", "selective-op"});
  EXPECT_EQ(explain.status, 2) << explain.out;
  EXPECT_NE(explain.err.find("op-level checkpointing of transformer blocks"), std::string::npos) << explain.err;
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

// Ulysses context parallelism over two nodes, two members per node: explain says at what rate its
// all-to-all runs (each device's bytes for the other node through its own NIC share, not the ring's
// share of the node's NICs), and the JSON carries it; ring cp runs no all-to-all and gets no line.
TEST(CliExplain, SaysTheRateOfAnAllToAllAcrossNodes) {
  const std::vector<std::string> job = {"explain", "--model", "gpt2-124m", "--cluster", "dgx-h100", "--gpus", "16",
                                        "--mesh", "cp=4,dp=4", "--global-batch", "64"};
  auto with = [&](const std::vector<std::string>& more) { return run_joined({job, more}); };
  const CliRun ulysses = with({"--cp-comm", "all-to-all"});
  ASSERT_EQ(ulysses.status, 0) << ulysses.err;
  EXPECT_NE(ulysses.out.find("cp: an all-to-all runs at"), std::string::npos) << ulysses.out;
  const CliRun ring = with({"--cp-comm", "ring"});
  ASSERT_EQ(ring.status, 0) << ring.err;
  EXPECT_EQ(ring.out.find("an all-to-all runs at"), std::string::npos) << ring.out;
  const CliRun json = with({"--cp-comm", "all-to-all", "--json"});
  ASSERT_EQ(json.status, 0) << json.err;
  const auto cp = nlohmann::json::parse(json.out)["axis_links"][0];
  ASSERT_EQ(cp["axis"], "cp");
  EXPECT_EQ(cp["members_per_node"], 2);
  // 4 ranks, 2 per node: (n - 1) / max((m - 1) / B_intra, (n - m) m / B_inter) = 3 / 4 x B_inter, the NIC
  // share (B_node x 2 / 8) being the ring's bandwidth here, below NVLink's.
  const double ring_rate = cp["bandwidth_bytes_per_s"].get<double>();
  EXPECT_NEAR(cp["all_to_all_bandwidth_bytes_per_s"].get<double>(), 0.75 * ring_rate, 1e-9 * ring_rate);
}

// Issue 13, item 4: explain prints which link each axis rides, and warns
// when tp leaves the node although another order of the same axes keeps it
// inside, naming that order and both predicted step times.
TEST(CliExplain, WarnsWhenTensorParallelismLeavesTheNode) {
  const std::vector<std::string> job = {"explain", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "64",
                                        "--global-batch", "512"};
  auto with = [&](const std::vector<std::string>& more) { return run_joined({job, more}); };
  const CliRun text = with({"--mesh", "tp=8,dp=8"});
  ASSERT_LE(text.status, 1) << text.err;
  EXPECT_NE(text.out.find("links per axis"), std::string::npos) << text.out;
  std::smatch row;
  ASSERT_TRUE(std::regex_search(text.out, row, std::regex("\n +tp +8 +8 +1 +8 +InfiniBand \\(across nodes\\)")))
      << text.out;
  ASSERT_TRUE(std::regex_search(text.out, row, std::regex("\n +dp +8 +1 +8 +1 +NVLink \\(inside a node\\)")))
      << text.out;
  // Under its own heading, after the problems (none here).
  EXPECT_NE(text.out.find("\nwarnings:\n  - --mesh: tp=8 crosses nodes"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("\nproblems:\n"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("Use --mesh dp=8,tp=8 to keep it inside a node"), std::string::npos) << text.out;

  const CliRun crossing = with({"--mesh", "tp=8,dp=8", "--json"});
  const CliRun inside = with({"--mesh", "dp=8,tp=8", "--json"});
  ASSERT_LE(crossing.status, 1) << crossing.err;
  ASSERT_EQ(inside.status, crossing.status) << inside.err;
  const auto c = nlohmann::json::parse(crossing.out), i = nlohmann::json::parse(inside.out);
  ASSERT_EQ(c["axis_links"].size(), 2u);
  EXPECT_EQ(c["axis_links"][0]["axis"], "tp");
  EXPECT_TRUE(c["axis_links"][0]["crosses_nodes"].get<bool>());
  EXPECT_EQ(c["axis_links"][0]["link"], "infiniband");
  EXPECT_EQ(c["axis_links"][0]["members_per_node"], 1);
  EXPECT_EQ(c["axis_links"][0]["nodes_spanned"], 8);
  EXPECT_EQ(i["axis_links"][1]["axis"], "tp");
  EXPECT_FALSE(i["axis_links"][1]["crosses_nodes"].get<bool>());
  EXPECT_EQ(i["axis_links"][1]["link"], "nvlink");
  EXPECT_GT(i["axis_links"][1]["bandwidth_bytes_per_s"].get<double>(), c["axis_links"][0]["bandwidth_bytes_per_s"].get<double>());
  // The warning is a warning (exit status unchanged), and its step times are the two plans' own.
  // Beside it, explain's note on the chunked tp overlap this plan (tp 8, sequence parallelism) could run.
  ASSERT_EQ(c["warnings"].size(), 2u);
  EXPECT_NE(c["warnings"][0].get<std::string>().find("--mesh dp=8,tp=8"), std::string::npos);
  EXPECT_TRUE(c["warnings"][1].get<std::string>().starts_with("tp_comm_overlap: ")) << c["warnings"].dump();
  EXPECT_EQ(c["mesh_reordering"]["mesh"], "dp=8,tp=8");
  EXPECT_DOUBLE_EQ(c["mesh_reordering"]["step_s"].get<double>(), c["time_s"]["step"].get<double>());
  EXPECT_DOUBLE_EQ(c["mesh_reordering"]["reordered_step_s"].get<double>(), i["time_s"]["step"].get<double>());
  EXPECT_LT(i["time_s"]["step"].get<double>(), c["time_s"]["step"].get<double>());
  EXPECT_TRUE(i["mesh_reordering"].is_null());
  ASSERT_EQ(i["warnings"].size(), 1u);  // the tp overlap note alone
  EXPECT_TRUE(i["warnings"][0].get<std::string>().starts_with("tp_comm_overlap: ")) << i["warnings"].dump();
}

// A reordering may trade which axis crosses nodes: an MoE whose ep=4 crosses
// nodes while cp=4 stays inside is told to put ep inside and cp across (ring
// attention hides its transfers; the experts' all-to-alls do not), where the
// old rule (fewer axes crossing) had no order to offer. The advice's step
// times are the two plans' own.
TEST(CliExplain, SuggestsTradingWhichAxisCrossesNodes) {
  const auto moe = moe_8b_file("moe-8b-order.yaml");
  const std::vector<std::string> job = {"explain", "--model", moe.string(), "--cluster", "dgx-h100", "--gpus", "32",
                                        "--global-batch", "64", "--seq", "2048", "--json"};
  const CliRun slow = run_joined({job, {"--mesh", "ep=4,cp=4,tp=2"}});
  const CliRun fast = run_joined({job, {"--mesh", "cp=4,ep=4,tp=2"}});
  ASSERT_LE(slow.status, 1) << slow.err;
  ASSERT_LE(fast.status, 1) << fast.err;
  const auto s = nlohmann::json::parse(slow.out), f = nlohmann::json::parse(fast.out);
  ASSERT_TRUE(s["mesh_reordering"].is_object()) << slow.out;
  EXPECT_EQ(s["mesh_reordering"]["mesh"], "cp=4,ep=4,tp=2");
  EXPECT_EQ(s["mesh_reordering"]["brings_inside"], nlohmann::json::array({"ep"}));
  EXPECT_EQ(s["mesh_reordering"]["moves_across"], nlohmann::json::array({"cp"}));
  EXPECT_DOUBLE_EQ(s["mesh_reordering"]["reordered_step_s"].get<double>(), f["time_s"]["step"].get<double>());
  EXPECT_LT(f["time_s"]["step"].get<double>(), 0.8 * s["time_s"]["step"].get<double>());
  bool warned = false;
  for (const auto& w : s["warnings"]) {
    const std::string text = w.get<std::string>();
    warned = warned || (text.find("ep=4 crosses nodes") != std::string::npos &&
                        text.find("Use --mesh cp=4,ep=4,tp=2 to keep it inside a node (cp=4 crosses nodes instead)") !=
                            std::string::npos);
  }
  EXPECT_TRUE(warned) << s["warnings"].dump();
  // The faster order has no better order to offer: trading back is slower.
  EXPECT_TRUE(f["mesh_reordering"].is_null()) << fast.out;
}

// --expert-tp 1: explain says the experts leave tp and names their
// all-to-all group (ep x tp, with its links); the plan file it emits keeps
// the choice; a bad value names the flag; the search tries both and its table
// says which each row runs.
TEST(CliExplain, ExpertsOutOfTensorParallelism) {
  const auto moe = moe_8b_file("moe-8b-etp.yaml");
  const std::vector<std::string> job = {"--model", moe.string(), "--cluster", "dgx-h100", "--gpus", "32",
                                        "--global-batch", "64", "--seq", "2048"};
  const auto emitted = temp_path("etp-plan.json");
  const CliRun text = run_joined({{"explain"}, job, {"--mesh", "dp=2,ep=8,tp=2", "--expert-tp", "1", "--emit-plan", emitted.string()}});
  ASSERT_LE(text.status, 1) << text.err;
  EXPECT_NE(text.out.find("experts out of tp (ep x tp = 16)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("experts out of tp: their all-to-all group is ep x tp = 16 ranks (stride 1, 8 per node, 2 nodes)"),
            std::string::npos) << text.out;
  std::ifstream in(emitted);
  const auto file = nlohmann::json::parse(in);
  EXPECT_EQ(file["plan"]["expert_tensor_parallel"], 1);
  const CliRun json = run_joined({{"explain"}, job, {"--mesh", "dp=2,ep=8,tp=2", "--expert-tp", "1", "--json"}});
  ASSERT_LE(json.status, 1) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["expert_link"]["size"], 16);
  EXPECT_EQ(j["expert_link"]["axis"], "ep x tp");
  const CliRun in_tp = run_joined({{"explain"}, job, {"--mesh", "dp=2,ep=8,tp=2", "--json"}});
  ASSERT_LE(in_tp.status, 1) << in_tp.err;
  EXPECT_FALSE(nlohmann::json::parse(in_tp.out).contains("expert_link"));
  const CliRun bad = run_joined({{"explain"}, job, {"--mesh", "dp=2,ep=8,tp=2", "--expert-tp", "2"}});
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("--expert-tp: '2' is not one of: tp, 1"), std::string::npos) << bad.err;
  const CliRun no_sp = run_joined({{"explain"}, job, {"--mesh", "dp=2,ep=8,tp=2", "--expert-tp", "1", "--no-sequence-parallel"}});
  EXPECT_EQ(no_sp.status, 2);
  EXPECT_NE((no_sp.out + no_sp.err).find("--expert-tp: experts out of tp route each tp rank's own tokens"), std::string::npos)
      << no_sp.out << no_sp.err;
  // plan tries both on meshes where experts can leave tp, and the table says which each row runs;
  // --expert-tp tp alone tries none out of tp, and the search line says so.
  const CliRun searched = run_joined({{"plan"}, job, {"--axes", "dp,ep,tp", "--top", "400"}});
  ASSERT_EQ(searched.status, 0) << searched.err;
  EXPECT_NE(searched.out.find("expert tp"), std::string::npos) << searched.out;
  const CliRun only_tp = run_joined({{"plan"}, job, {"--axes", "dp,ep,tp", "--top", "400", "--expert-tp", "tp"}});
  ASSERT_EQ(only_tp.status, 0) << only_tp.err;
  EXPECT_EQ(only_tp.out.find("expert tp  "), std::string::npos) << only_tp.out;
  EXPECT_NE(only_tp.out.find("; expert tp tp"), std::string::npos) << only_tp.out;
  const CliRun deep = run_joined({{"explain"}, job, {"--mesh", "dp=2,ep=16", "--ep-dispatch", "deduplicated", "--json"}});
  const CliRun nccl = run_joined({{"explain"}, job, {"--mesh", "dp=2,ep=16", "--json"}});
  ASSERT_LE(deep.status, 1) << deep.err;
  ASSERT_LE(nccl.status, 1) << nccl.err;
  const auto d = nlohmann::json::parse(deep.out), n = nlohmann::json::parse(nccl.out);
  EXPECT_EQ(d["plan"]["ep_dispatch"], "deduplicated");
  EXPECT_LT(d["communication_s_by_axis"]["ep"]["total"].get<double>(), n["communication_s_by_axis"]["ep"]["total"].get<double>());
  const CliRun deep_text = run_joined({{"explain"}, job, {"--mesh", "dp=2,ep=16", "--ep-dispatch", "deduplicated"}});
  EXPECT_NE(deep_text.out.find(", ep dispatch deduplicated"), std::string::npos) << deep_text.out;
  const CliRun bad_dispatch = run_joined({{"explain"}, job, {"--mesh", "dp=2,ep=16", "--ep-dispatch", "deepep"}});
  EXPECT_EQ(bad_dispatch.status, 2);
  EXPECT_NE(bad_dispatch.err.find("--ep-dispatch: 'deepep' is not one of: all-to-all, deduplicated"), std::string::npos)
      << bad_dispatch.err;
  // --expert-tp 1 alone still plans meshes where experts cannot leave tp (here tp is never above 1): as in tp.
  const CliRun only_out = run_joined({{"plan"}, job, {"--axes", "dp,ep", "--expert-tp", "1"}});
  ASSERT_EQ(only_out.status, 0) << only_out.err;
  EXPECT_NE(only_out.out.find("feasible plans"), std::string::npos) << only_out.out;
  const CliRun wrong = run_joined({{"plan"}, job, {"--expert-tp", "2"}});
  EXPECT_EQ(wrong.status, 2);
  EXPECT_NE(wrong.err.find("--expert-tp: '2' is not one of: tp, 1"), std::string::npos) << wrong.err;
}

// Issue 13, item 5: without --mesh, explain (and simulate) use the plan the
// search ranks first for this model, cluster and device count, and say so;
// without --global-batch, a stated rule instead of GPT-3's 1536 for all.
TEST(CliExplain, WithoutMeshUsesTheSearchsFirstPlan) {
  const std::vector<std::string> job = {"--model", "llama2-7b", "--cluster", "dgx-a100", "--gpus", "16"};
  std::vector<std::string> args = {"explain", "--json"};
  args.insert(args.end(), job.begin(), job.end());
  const CliRun explained = run(args);
  ASSERT_EQ(explained.status, 0) << explained.err;
  // GPT-3's 2M-token batch for its 6.7B size (nearest llama2-7b's 6.74B), over 4096-token sequences.
  EXPECT_NE(explained.err.find("no --global-batch: using 512"), std::string::npos) << explained.err;
  EXPECT_NE(explained.err.find("no --mesh: using the plan the search ranks first"), std::string::npos) << explained.err;
  const auto e = nlohmann::json::parse(explained.out);
  EXPECT_TRUE(e["mesh_searched"].get<bool>());
  EXPECT_EQ(e["plan"]["global_batch"], 512);

  std::vector<std::string> plan_args = {"plan", "--json", "--top", "1", "--global-batch", "512"};
  plan_args.insert(plan_args.end(), job.begin(), job.end());
  const CliRun planned = run(plan_args);
  ASSERT_EQ(planned.status, 0) << planned.err;
  const auto first = nlohmann::json::parse(planned.out).at(0);
  EXPECT_EQ(e["plan"].dump(), first["plan"].dump());
  EXPECT_DOUBLE_EQ(e["time_s"]["step"].get<double>(), first["time_s"]["step"].get<double>());

  // The mesh explain chose is named on stderr, and simulate chooses the same.
  std::string mesh;
  for (const auto& [axis, size] : e["plan"]["mesh"].items()) mesh += (mesh.empty() ? "" : ",") + axis + "=" + size.dump();
  std::vector<std::string> sim_args = {"simulate"};
  sim_args.insert(sim_args.end(), job.begin(), job.end());
  const CliRun simulated = run(sim_args);
  ASSERT_EQ(simulated.status, 0) << simulated.err;
  EXPECT_NE(simulated.err.find("no --mesh"), std::string::npos) << simulated.err;
  std::smatch chosen;
  ASSERT_TRUE(std::regex_search(simulated.out, chosen, std::regex("mesh ([a-z]+=[0-9]+(,[a-z]+=[0-9]+)*)"))) << simulated.out;
  EXPECT_NE(explained.err.find("(" + chosen[1].str() + ","), std::string::npos) << chosen[1] << "\n" << explained.err;

  // Flags that are given hold: the search keeps full recompute.
  args.insert(args.end(), {"--recompute", "full"});
  const CliRun full = run(args);
  ASSERT_EQ(full.status, 0) << full.err;
  EXPECT_EQ(nlohmann::json::parse(full.out)["plan"]["recompute"], "full");

  // The quick start's plan is still there when asked for by name.
  const CliRun gpt3 = run({"explain", "--mesh", "dp=16,pp=8,tp=8"});
  EXPECT_EQ(gpt3.status, 0) << gpt3.err;
  EXPECT_NE(gpt3.out.find("mesh dp=16,pp=8,tp=8; micro-batch 1 x 96 micro-batches x 16 data-parallel = global batch 1536"),
            std::string::npos) << gpt3.out;
  EXPECT_NE(gpt3.err.find("no --global-batch: using 1536"), std::string::npos) << gpt3.err;
}

// "meshplan plan ... --gpus N" and what it finds: exit 0 when a plan fits.
int plan_status(const std::string& model, std::int64_t gpus, std::int64_t global_batch) {
  return run({"plan", "--model", model, "--cluster", "dgx-a100", "--gpus", std::to_string(gpus), "--global-batch",
              std::to_string(global_batch), "--top", "1"})
      .status;
}

// Issue 13, item 7: when nothing fits, say the fewest devices that would do
// (checked here by planning at that count and at the one below it) and the
// memory a device would need at this count.
TEST(CliPlan, WhenNothingFitsSaysTheFewestDevicesThatWould) {
  const CliRun r = run({"plan", "--model", "llama3-70b", "--cluster", "dgx-a100", "--gpus", "8", "--global-batch", "64"});
  ASSERT_EQ(r.status, 1) << r.err;
  std::smatch fewest;
  ASSERT_TRUE(std::regex_search(r.out, fewest, std::regex("the fewest devices that fit: ([0-9]+) \\(([0-9]+) do not\\)")))
      << r.out;
  const std::int64_t fits_at = std::stoll(fewest[1]), not_at = std::stoll(fewest[2]);
  EXPECT_GT(fits_at, 8);
  EXPECT_EQ(fits_at % 8, 0);
  EXPECT_EQ(not_at, fits_at - 8);  // one node fewer
  EXPECT_EQ(plan_status("llama3-70b", fits_at, 64), 0);
  EXPECT_EQ(plan_status("llama3-70b", not_at, 64), 1);
  EXPECT_NE(r.err.find("the fewest devices that fit: " + fewest[1].str()), std::string::npos) << r.err;
  std::smatch peak;
  ASSERT_TRUE(std::regex_search(r.out, peak, std::regex("at 8 devices no plan fits: the least memory any of the [0-9]+ "
                                                        "evaluated needs is ([0-9.]+) GiB per device")))
      << r.out;
  EXPECT_GT(std::stod(peak[1]), 76.0);  // more than an A100 80GB's usable 76 GiB

  // explain on a plan that does not fit says the same, in text and JSON.
  const std::vector<std::string> explain = {"explain", "--model", "llama3-70b", "--cluster", "dgx-a100", "--gpus", "8",
                                            "--mesh", "fsdp=8", "--global-batch", "64"};
  const CliRun text = run(explain);
  EXPECT_EQ(text.status, 1) << text.err;
  EXPECT_NE(text.out.find("the fewest devices that fit: " + fewest[1].str() + " (" + fewest[2].str() + " do not)"),
            std::string::npos) << text.out;
  std::vector<std::string> json_args = explain;
  json_args.push_back("--json");
  const CliRun json = run(json_args);
  EXPECT_EQ(json.status, 1) << json.err;
  const auto fit = nlohmann::json::parse(json.out)["what_would_fit"];
  EXPECT_EQ(fit["smallest_fitting_world_size"], fits_at);
  EXPECT_EQ(fit["largest_not_fitting_world_size"], not_at);
  EXPECT_EQ(fit["plans_that_fit"], 0);
  EXPECT_NEAR(fit["smallest_peak"]["memory_bytes"].get<double>() / (1024.0 * 1024 * 1024), std::stod(peak[1]), 0.006);

  // A plan that fits has nothing to add.
  const CliRun fine = run({"explain", "--json", "--model", "llama3-70b", "--cluster", "dgx-a100", "--gpus",
                           std::to_string(fits_at), "--global-batch", "64"});
  EXPECT_EQ(fine.status, 0) << fine.err;
  EXPECT_TRUE(nlohmann::json::parse(fine.out)["what_would_fit"].is_null());
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

// The plan flags a sweep holds fixed are columns too, so rows from sweeps
// with different --cp-comm, --fp32-gradients or --loss can be told apart.
TEST(CliSweep, FixedPlanFlagsAreColumns) {
  const CliRun plain = run({"sweep", "--model", "llama2-7b", "--gpus", "8", "--global-batch", "64", "--axes", "dp,cp",
                            "--out", "-", "--no-progress"});
  const CliRun fixed = run({"sweep", "--model", "llama2-7b", "--gpus", "8", "--global-batch", "64", "--axes", "dp,cp",
                            "--out", "-", "--no-progress", "--cp-comm", "all-gather", "--fp32-gradients", "--loss", "eager"});
  ASSERT_EQ(plain.status, 0) << plain.err;
  ASSERT_EQ(fixed.status, 0) << fixed.err;
  const Csv a = parse_csv(plain.out), b = parse_csv(fixed.out);
  ASSERT_GT(a.records.size(), 1u);
  ASSERT_EQ(a.records.size(), b.records.size());
  const std::size_t cp_comm = column_of("cp_comm"), fp32 = column_of("fp32_gradients");
  const std::size_t gradients = column_of("memory_gradients_bytes"), loss = column_of("loss");
  const std::size_t activations = column_of("memory_activations_bytes");
  bool priced = false, fused_less = false;
  for (std::size_t i = 1; i < a.records.size(); ++i) {
    EXPECT_EQ(a.records[i].at(cp_comm), "ring");
    EXPECT_EQ(a.records[i].at(fp32), "false");
    EXPECT_EQ(b.records[i].at(cp_comm), "all-gather");
    EXPECT_EQ(b.records[i].at(fp32), "true");
    EXPECT_EQ(a.records[i].at(loss), "fused");
    EXPECT_EQ(b.records[i].at(loss), "eager");
    if (!a.records[i].at(activations).empty()) {
      EXPECT_LE(std::stod(a.records[i].at(activations)), std::stod(b.records[i].at(activations))) << i;
      fused_less = fused_less || std::stod(a.records[i].at(activations)) < std::stod(b.records[i].at(activations));
    }
    if (!a.records[i].at(gradients).empty()) {
      EXPECT_DOUBLE_EQ(std::stod(b.records[i].at(gradients)), 2 * std::stod(a.records[i].at(gradients))) << i;
      priced = priced || a.records[i].at(column_of("step_s")) != b.records[i].at(column_of("step_s"));
    }
  }
  EXPECT_TRUE(priced);
  EXPECT_TRUE(fused_less);
}

// --cp-comm acts on the cp axis: a search without it says so (a warning on
// stderr; the search still runs).
TEST(CliPlan, CpCommWithoutTheCpAxisSaysItHasNoEffect) {
  const std::vector<std::string> job = {"plan", "--model", "llama2-7b", "--gpus", "8", "--global-batch", "64", "--top", "1",
                                        "--cp-comm", "all-gather"};
  const CliRun without = run(job);
  ASSERT_EQ(without.status, 0) << without.err;
  EXPECT_NE(without.err.find("warning: --cp-comm: all-gather"), std::string::npos) << without.err;
  std::vector<std::string> with_cp = job;
  with_cp.insert(with_cp.end(), {"--axes", "dp,cp"});
  const CliRun with = run(with_cp);
  ASSERT_EQ(with.status, 0) << with.err;
  EXPECT_EQ(with.err.find("--cp-comm"), std::string::npos) << with.err;
}

// --loss on explain: the fused loss (the default) is named on the plan line
// and keeps fewer bytes than the eager one; a value outside the choices is
// refused with them and a suggestion.
TEST(CliExplain, LossFlagNamesTheFusedLossAndRefusesOthers) {
  const std::vector<std::string> job = {"explain", "--model", "llama3.2-1b", "--cluster", "dgx-h200", "--gpus", "1",
                                        "--mesh", "dp=1", "--micro-batch", "8", "--global-batch", "8", "--seq", "2048", "--json"};
  std::vector<std::string> eager_job = job;
  eager_job.insert(eager_job.end(), {"--loss", "eager"});
  const CliRun eager = run(eager_job);
  const CliRun fused = run(job);  // the default
  ASSERT_EQ(eager.status, 0) << eager.err;
  ASSERT_EQ(fused.status, 0) << fused.err;
  const auto e = nlohmann::json::parse(eager.out), f = nlohmann::json::parse(fused.out);
  EXPECT_EQ(e["plan"]["loss"], "eager");
  EXPECT_EQ(f["plan"]["loss"], "fused");
  EXPECT_LT(f["memory_bytes"]["loss_transient"].get<double>(), e["memory_bytes"]["loss_transient"].get<double>());
  EXPECT_LT(f["memory_bytes"]["activations"].get<double>(), e["memory_bytes"]["activations"].get<double>());
  std::vector<std::string> text_job(job.begin(), job.end() - 1);  // without --json
  text_job.insert(text_job.end(), {"--loss", "fused"});
  const CliRun text = run(text_job);
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("attention fused, loss fused"), std::string::npos) << text.out;
  text_job.back() = "fuse";
  const CliRun bad = run(text_job);
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("--loss: 'fuse' is not one of: eager, fused (did you mean fused?)"), std::string::npos) << bad.err;
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

// The bytes of a whole gzip stream (RFC 1952), inflated by zlib; nullopt when
// the file is not gzip, is damaged, or ends before the stream's trailer.
std::optional<std::string> gunzip(const std::filesystem::path& path) {
  const std::string packed = read_text(path);
  z_stream stream{};
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) return std::nullopt;  // 16+: gzip framing only
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(packed.data()));
  stream.avail_in = static_cast<uInt>(packed.size());
  std::string text;
  int status = Z_OK;
  char buffer[1 << 16];
  while (status == Z_OK) {
    stream.next_out = reinterpret_cast<Bytef*>(buffer);
    stream.avail_out = sizeof buffer;
    status = inflate(&stream, Z_NO_FLUSH);
    text.append(buffer, sizeof buffer - stream.avail_out);
  }
  const bool whole = status == Z_STREAM_END && stream.avail_in == 0;
  inflateEnd(&stream);
  if (!whole) return std::nullopt;
  return text;
}

// --feasible-only writes exactly the feasible rows of the full sweep, in the
// same order, and the count the search reports as feasible.
TEST(CliSweep, FeasibleOnlyKeepsExactlyTheFeasibleRows) {
  const auto all_path = temp_path("all.csv"), feasible_path = temp_path("feasible.csv");
  const CliRun all = run(small_job("sweep", {"--out", all_path.string(), "--no-progress"}));
  ASSERT_EQ(all.status, 0) << all.err;
  const CliRun only = run(small_job("sweep", {"--out", feasible_path.string(), "--feasible-only", "--no-progress"}));
  ASSERT_EQ(only.status, 0) << only.err;
  const CliRun plan = run(small_job("plan"));
  ASSERT_EQ(plan.status, 0) << plan.err;

  const Csv full = parse_csv(read_text(all_path));
  const std::string feasible_text = read_text(feasible_path);
  const Csv kept = parse_csv(feasible_text);
  ASSERT_TRUE(full.complete);
  ASSERT_TRUE(kept.complete);
  ASSERT_FALSE(kept.records.empty());
  EXPECT_EQ(kept.records.front(), kSweepColumns);
  const std::size_t fits = column_of("feasible");
  std::vector<std::vector<std::string>> expected;
  for (std::size_t i = 1; i < full.records.size(); ++i) {
    if (full.records[i].at(fits) == "true") expected.push_back(full.records[i]);
  }
  const std::vector<std::vector<std::string>> rows(kept.records.begin() + 1, kept.records.end());
  for (const auto& row : rows) ASSERT_EQ(row.at(fits), "true");
  EXPECT_EQ(rows, expected);
  const auto feasible = static_cast<std::int64_t>(rows.size());
  const auto candidates = static_cast<std::int64_t>(full.records.size()) - 1;
  EXPECT_GT(feasible, 0);
  EXPECT_LT(feasible, candidates);
  EXPECT_NE(plan.out.find(std::to_string(feasible) + " feasible of " + std::to_string(candidates) + " candidates"),
            std::string::npos) << plan.out;
  EXPECT_NE(only.err.find(std::to_string(feasible) + " rows (" + std::to_string(feasible) + " feasible of " +
                          std::to_string(candidates) + " candidates"), std::string::npos) << only.err;
  EXPECT_NE(all.err.find(std::to_string(candidates) + " rows (" + std::to_string(feasible) + " feasible"),
            std::string::npos) << all.err;
  EXPECT_LT(feasible_text.size(), read_text(all_path).size());
}

// sweep.csv.gz and sweep.jsonl.gz are gzip streams of exactly the text that
// sweep.csv and sweep.jsonl hold, with or without --feasible-only.
TEST(CliSweep, GzipOutputInflatesToThePlainOutput) {
  for (const std::string extension : {".csv", ".jsonl"}) {
    for (const bool feasible_only : {false, true}) {
      SCOPED_TRACE(extension + (feasible_only ? " --feasible-only" : ""));
      const auto plain_path = temp_path("plain" + extension), packed_path = temp_path("packed" + extension + ".gz");
      std::vector<std::string> more = {"--no-progress"};
      if (feasible_only) more.push_back("--feasible-only");
      auto plain_args = more, packed_args = more;
      plain_args.insert(plain_args.end(), {"--out", plain_path.string()});
      packed_args.insert(packed_args.end(), {"--out", packed_path.string()});
      const CliRun plain = run(small_job("sweep", plain_args));
      ASSERT_EQ(plain.status, 0) << plain.err;
      const CliRun packed = run(small_job("sweep", packed_args));
      ASSERT_EQ(packed.status, 0) << packed.err;
      const std::string text = read_text(plain_path);
      const auto inflated = gunzip(packed_path);
      ASSERT_TRUE(inflated.has_value()) << packed_path << " is not a whole gzip stream";
      EXPECT_EQ(*inflated, text);
      EXPECT_LT(std::filesystem::file_size(packed_path) * 4, text.size());  // repetitive text: deflate packs it
      EXPECT_NE(packed.err.find(packed_path.string()), std::string::npos) << packed.err;
    }
  }
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
        BadInput{"recompute", {"plan", "--recompute", "some"}, {"--recompute", "none, selective, full, selective-op"}},
        BadInput{"attention", {"plan", "--attention", "fused,flash"}, {"--attention", "'flash'", "fused, unfused"}},
        BadInput{"cp_comm", {"plan", "--cp-comm", "allgather"}, {"--cp-comm", "'allgather'", "ring, all-gather, all-to-all", "all-gather?"}},
        BadInput{"cp_comm_explain", {"explain", "--mesh", "cp=8", "--gpus", "8", "--cp-comm", "a2a"}, {"--cp-comm", "'a2a'"}},
        BadInput{"schedules", {"plan", "--schedules", "1f1b,interleaved:2"}, {"--schedules", "--interleave"}},
        BadInput{"interleave", {"plan", "--interleave", "1"}, {"--interleave", "'1'"}},
        BadInput{"precision_word", {"plan", "--precision", "int4"}, {"--precision", "'int4'"}},
        BadInput{"precision_device", {"plan", "--precision", "bf16,fp8"}, {"--precision", "no fp8 support"}},
        BadInput{"micro_batches", {"plan", "--micro-batches", "0,1"}, {"--micro-batches", "'0'"}},
        BadInput{"max_tp", {"plan", "--max-tp", "-2"}, {"--max-tp"}},
        BadInput{"max_pp_text", {"plan", "--max-pp", "abc"}, {"--max-pp"}},
        BadInput{"max_cp", {"plan", "--max-cp", "-1"}, {"--max-cp", "0 (no limit of its own) or more"}},
        BadInput{"max_ep", {"sweep", "--max-ep", "-4"}, {"--max-ep", "0 (no limit of its own) or more"}},
        BadInput{"headroom", {"plan", "--headroom", "1.5"}, {"--headroom", "[0, 1)"}},
        // Expert settings on a dense model: warned (they had no effect, silently); the bad --axes makes it exit 2.
        BadInput{"expert_flags_dense", {"plan", "--model", "gpt2-124m", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch",
                                        "64", "--axes", "dp,ep", "--expert-tp", "1", "--ep-dispatch", "deduplicated"},
                 {"warning: --expert-tp: sets the routed experts' tensor parallelism, and gpt2-124m has none",
                  "warning: --ep-dispatch: moves routed tokens", "--axes: ep splits"}},
        // A sweep over several models names the one a flag does not fit.
        BadInput{"sweep_names_the_model", {"sweep", "--model", "mixtral-8x7b,gpt2-124m", "--cluster", "dgx-h100", "--gpus",
                                           "8", "--global-batch", "8", "--recompute-modules", "moe_act"},
                 {"--recompute-modules", "has no experts (gpt2-124m)"}},
        // Every problem in one run: a refused flag no longer hides the plan's own errors.
        BadInput{"every_problem", {"explain", "--mesh", "dp=8", "--gpus", "8", "--global-batch", "12", "--micro-batch", "0",
                                   "--headroom", "2"},
                 {"--headroom", "[0, 1)", "--micro-batch", "at least 1"}},
        BadInput{"threads", {"plan", "--threads", "-1"}, {"--threads"}},
        BadInput{"top", {"plan", "--top", "0"}, {"--top", "at least 1"}},
        BadInput{"pick", {"plan", "--pick", "0"}, {"--pick"}},
        BadInput{"pick_past_end", {"plan", "--model", "gpt2-124m", "--gpus", "1", "--global-batch", "1", "--micro-batches", "1",
                                   "--emit-plan", "never-written.json", "--pick", "99"},
                 {"--pick", "past the last"}},
        BadInput{"gpus_nodes", {"plan", "--gpus", "12"}, {"--gpus", "whole number of dgx-a100 nodes"}},
        BadInput{"gpus_too_many", {"plan", "--gpus", "1048577"}, {"--gpus", "[1, 1048576]"}},
        BadInput{"gpus_list", {"plan", "--gpus", "8,16"}, {"--gpus", "meshplan sweep"}},
        BadInput{"gpus_text", {"plan", "--gpus", "many"}, {"--gpus", "'many'"}},
        BadInput{"model", {"plan", "--model", "gpt5"}, {"--model gpt5", "unknown model preset"}},
        BadInput{"seq", {"plan", "--seq", "4096"}, {"--seq", "2048 learned positions", "with seq_len: 4096"}},
        BadInput{"emit_plan_dir", {"plan", "--model", "gpt2-124m", "--gpus", "8", "--global-batch", "8", "--emit-plan",
                                   kNoDir + "/plan.json"},
                 {"--emit-plan", kNoDir}},
        BadInput{"sweep_out_extension", {"sweep", "--out", "sweep.txt"}, {"--out", ".csv or .jsonl"}},
        BadInput{"sweep_out_gz_extension", {"sweep", "--out", "sweep.txt.gz"}, {"--out", "'sweep.txt.gz'", ".gz"}},
        BadInput{"sweep_out_dir", {"sweep", "--gpus", "8", "--model", "gpt2-124m", "--out", kNoDir + "/s.csv"}, {"--out", kNoDir}},
        BadInput{"sweep_out_gz_dir", {"sweep", "--gpus", "8", "--model", "gpt2-124m", "--out", kNoDir + "/s.csv.gz"},
                 {"--out", kNoDir, "cannot open for writing"}},
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
      {"--attention", "fused", "unfused,fused", "x"},
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

// A sweep big enough to take several seconds, to `path`, stopped with SIGINT
// once the file has some bytes; returns stderr. Exit status 130 is asserted.
std::string interrupted_sweep(const std::filesystem::path& path) {
  const auto err_path = temp_path("interrupted.err");
  std::filesystem::remove(path);
  const std::vector<std::string> args = {MESHPLAN_BINARY, "sweep", "--model", "gpt3-175b,llama3-405b,llama2-70b,llama3-70b",
                                         "--gpus", "1024,2048,4096", "--global-batch", "1536,3072", "--axes",
                                         "dp,fsdp,tp,pp,cp", "--out", path.string()};
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t child = ::fork();
  EXPECT_GE(child, 0);
  if (child < 0) return {};
  if (child == 0) {
    std::FILE* err = std::freopen(err_path.c_str(), "w", stderr);
    std::FILE* out = std::freopen("/dev/null", "w", stdout);
    if (err && out) ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  // The handler is installed before the file is opened: wait for the first
  // bytes (a gzip file gets them once zlib's buffer fills), then let it run a little.
  for (int i = 0; i < 200 && (!std::filesystem::exists(path) || std::filesystem::file_size(path) == 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(::kill(child, SIGINT), 0);
  int raw = 0;
  EXPECT_EQ(::waitpid(child, &raw, 0), child);
  const std::string err = read_text(err_path);
  EXPECT_TRUE(WIFEXITED(raw)) << "killed by signal " << WTERMSIG(raw);
  EXPECT_EQ(WEXITSTATUS(raw), 130) << "the sweep finished before it was interrupted; make it bigger\n" << err;
  return err;
}

// The CSV text of an interrupted sweep holds exactly the rows it reports, each complete.
void expect_whole_rows(const std::string& text, const std::string& err) {
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  const Csv csv = parse_csv(text);
  EXPECT_TRUE(csv.complete);
  ASSERT_FALSE(csv.records.empty());
  EXPECT_EQ(csv.records.front(), kSweepColumns);
  for (std::size_t i = 1; i < csv.records.size(); ++i) ASSERT_EQ(csv.records[i].size(), kSweepColumns.size()) << "row " << i;
  const std::string kept = "interrupted; kept " + std::to_string(csv.records.size() - 1) + " rows";
  EXPECT_NE(err.find(kept), std::string::npos) << err;
}

TEST(CliSweep, CtrlCKeepsEveryRowWritten) {
  const auto csv_path = temp_path("interrupted.csv");
  const std::string err = interrupted_sweep(csv_path);
  if (HasFailure()) return;
  expect_whole_rows(read_text(csv_path), err);
  std::filesystem::remove(csv_path);
}

// Stopped with Ctrl-C, a .gz sweep is still one whole gzip stream (the
// trailer written on the way out) of whole rows.
TEST(CliSweep, CtrlCLeavesAWholeGzipStream) {
  const auto gz_path = temp_path("interrupted.csv.gz");
  const std::string err = interrupted_sweep(gz_path);
  if (HasFailure()) return;
  const auto text = gunzip(gz_path);
  ASSERT_TRUE(text.has_value()) << gz_path << " is not a whole gzip stream after Ctrl-C";
  expect_whole_rows(*text, err);
  std::filesystem::remove(gz_path);
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

// simulate --trace says how large the file it wrote is (a step of many
// micro-batches writes hundreds of MB, past what chrome://tracing loads).
TEST(CliSimulate, TraceLineGivesTheFilesSize) {
  const auto trace = temp_path("size-check-trace.json");
  std::filesystem::remove(trace);
  const CliRun r = run({"simulate", "--model", "gpt2-124m", "--cluster", "dgx-a100", "--gpus", "8", "--mesh", "pp=2,dp=4",
                        "--global-batch", "32", "--trace", trace.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto bytes = std::filesystem::file_size(trace);
  EXPECT_GT(bytes, 1000u);
  const std::string lead = "trace           " + trace.string() + " (";
  const auto at = r.out.find(lead);
  ASSERT_NE(at, std::string::npos) << r.out;
  std::istringstream shown(r.out.substr(at + lead.size()));
  double size = 0;
  std::string unit;
  shown >> size >> unit;
  ASSERT_TRUE(unit == "KiB;" || unit == "MiB;") << r.out;
  const double shown_bytes = size * (unit == "KiB;" ? 1024.0 : 1024.0 * 1024.0);
  EXPECT_NEAR(shown_bytes, static_cast<double>(bytes), 0.01 * static_cast<double>(bytes)) << r.out;
  EXPECT_NE(r.out.find("; open in ui.perfetto.dev or chrome://tracing)\n", at), std::string::npos) << r.out;
}
