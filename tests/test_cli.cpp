// The meshplan command as a user meets it: exit statuses, messages that name
// the file, line, key or flag, JSON keys, and no crash on any input.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string_view>

namespace {

using namespace meshplan::testing_support;

const std::string data = MESHPLAN_TEST_DATA;

// scripts/quickstart.sh's flags: GPT-3 175B on 1024 A100s, dp=16,pp=8,tp=8.
// Whether explain's JSON warns with a message starting with `start`.
bool warns(const nlohmann::json& j, std::string_view start) {
  for (const auto& w : j["warnings"]) {
    if (w.get<std::string>().starts_with(start)) return true;
  }
  return false;
}

const std::vector<std::string> kQuickStart = {"explain", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--gpus", "1024",
                                              "--mesh", "dp=16,pp=8,tp=8", "--global-batch", "1536"};

TEST(Cli, QuickStartExplainsGpt3) {
  const CliRun r = run(kQuickStart);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("gpt3-175b on 1024 x a100-80g"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mesh dp=16,pp=8,tp=8"), std::string::npos);
  EXPECT_NE(r.out.find("verdict: fits"), std::string::npos);
  for (const char* row : {"parameters", "gradients", "optimizer state", "activations", "communication buffers", "total",
                          "compute by kind", "matmuls", "attention", "memory-bound ops", "recomputation", "launch overhead"}) {
    EXPECT_NE(r.out.find(row), std::string::npos) << row;
  }
  EXPECT_EQ(r.out.find("fp8 casts"), std::string::npos);  // bf16: no cast row
  const CliRun fp8 = run({"explain", "--model", "gpt2-350m", "--cluster", "dgx-h100", "--gpus", "8", "--mesh", "dp=8",
                          "--micro-batch", "8", "--global-batch", "64", "--precision", "fp8"});
  EXPECT_EQ(fp8.status, 0) << fp8.err;
  EXPECT_NE(fp8.out.find("\n  fp8 casts "), std::string::npos) << fp8.out;
  EXPECT_NE(fp8.out.find("fp8 GEMMs at h100-sxm's bf16 fraction of peak (0.804) x the fp8 peak: no fp8 GEMM measured"),
            std::string::npos)
      << fp8.out;
}

// explain names what priced the step beyond the roofline: a link that hides
// no communication (local-cpu's shared memory), and measured device curves
// (only calibrated presets have them; the built-in ones do not).
TEST(Cli, ExplainSaysWhenCommunicationCannotHide) {
  const CliRun cpu = run({"explain", "--model", "gpt-byte-10m", "--cluster", "local-cpu", "--gpus", "2", "--mesh", "dp=2",
                          "--micro-batch", "4", "--global-batch", "8", "--precision", "fp32"});
  EXPECT_EQ(cpu.status, 0) << cpu.err;
  EXPECT_NE(cpu.out.find("intra-node communication cannot overlap compute on local-cpu"), std::string::npos) << cpu.out;
  const CliRun gpu = run({"explain"});
  EXPECT_EQ(gpu.out.find("cannot overlap compute"), std::string::npos) << gpu.out;
  EXPECT_EQ(gpu.out.find("priced with"), std::string::npos) << gpu.out;
}

TEST(Cli, JsonHasTheDocumentedKeys) {
  std::vector<std::string> args = kQuickStart;
  args.push_back("--json");
  const CliRun r = run(args);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j["parameters"].get<double>(), 174.6e9, 0.1e9);
  EXPECT_TRUE(j["feasible"].get<bool>());
  EXPECT_TRUE(j["problems"].is_array());
  for (const char* key : {"parameters", "gradients", "optimizer", "activations", "buffers", "total"}) {
    ASSERT_TRUE(j["memory_bytes"].contains(key)) << key;
    EXPECT_GE(j["memory_bytes"][key].get<double>(), 0) << key;
  }
  const auto& m = j["memory_bytes"];
  // The peak: steady states, the larger of the two transients (they do not
  // coexist), workspaces, then what lies outside the allocator.
  const double steady = m["parameters"].get<double>() + m["gradients"].get<double>() + m["optimizer"].get<double>() +
                        m["activations"].get<double>() + m["buffers"].get<double>();
  const double allocated = steady + std::max(m["loss_transient"].get<double>(), m["activation_gradients"].get<double>()) +
                           m["workspaces"].get<double>();
  EXPECT_NEAR(m["allocated_peak"].get<double>(), allocated, 1.0);
  EXPECT_NEAR(m["total"].get<double>(), allocated + m["runtime_context"].get<double>() + m["allocator_reserve"].get<double>(),
              1.0);
  EXPECT_EQ(j["plan"]["mesh"]["tp"], 8);
  EXPECT_EQ(j["plan"]["schedule"], "1f1b");
  EXPECT_EQ(j["stages"].size(), 8u);
  EXPECT_EQ(j["device"]["stage"], 0);
  // The time model's keys (planner issue).
  for (const char* key : {"compute", "communication", "communication_exposed", "bubble", "step"}) {
    ASSERT_TRUE(j["time_s"].contains(key)) << key;
    EXPECT_GE(j["time_s"][key].get<double>(), 0) << key;
  }
  EXPECT_GT(j["time_s"]["step"].get<double>(), j["time_s"]["compute"].get<double>() * 0.5);
  double by_kind = 0;
  for (const char* key : {"matmul_forward", "matmul_backward", "attention_forward", "attention_backward", "memory_bound_forward",
                          "memory_bound_backward", "fp8_cast_forward", "fp8_cast_backward", "recompute", "launch_overhead"}) {
    ASSERT_TRUE(j["compute_s_by_kind"].contains(key)) << key;
    by_kind += j["compute_s_by_kind"][key].get<double>();
  }
  EXPECT_EQ(j["compute_s_by_kind"].size(), 10u);
  EXPECT_NEAR(by_kind, j["time_s"]["compute"].get<double>(), 1e-9 * j["time_s"]["compute"].get<double>());
  // The quick start's default selective recompute repeats nothing under fused attention.
  EXPECT_EQ(j["compute_s_by_kind"]["recompute"].get<double>(), 0);
  EXPECT_GT(j["compute_s_by_kind"]["attention_backward"].get<double>(), j["compute_s_by_kind"]["attention_forward"].get<double>());
  EXPECT_NEAR(j["tokens_per_s"].get<double>(), 1536.0 * 2048 / j["time_s"]["step"].get<double>(), 1.0);
  EXPECT_GT(j["mfu"].get<double>(), 0.1);
  // Fused attention runs the causal half of the scores, which model FLOPs count whole, and the
  // default recompute repeats nothing under fused attention: fewer hardware FLOPs than model FLOPs.
  EXPECT_LT(j["hfu"].get<double>(), j["mfu"].get<double>());
  EXPECT_LT(j["hardware_flops_per_step"].get<double>(), j["model_flops_per_step"].get<double>());
  EXPECT_GT(j["model_flops_per_step"].get<double>(), 3e18);
  EXPECT_EQ(j["scaling"]["axes"].size(), 2u);  // dp and tp (pp has no roofline rule)
}

TEST(Cli, ZeroPaperFiguresThroughExplainJson) {
  const double expected_gb[] = {120, 31.4, 16.6, 1.88};
  for (int stage = 0; stage <= 3; ++stage) {
    const CliRun r = run({"explain", "--json", "--model", data + "/zero-7.5b.yaml", "--cluster", "dgx-a100", "--gpus", "64",
                       "--mesh", "dp=64", "--micro-batch", "1", "--global-batch", "64", "--zero", std::to_string(stage)});
    // Stage 0 needs 120 GB of model states: valid, but it does not fit (exit 1).
    EXPECT_EQ(r.status, stage == 0 ? 1 : 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    const auto& m = j["memory_bytes"];
    const double states_gb =
        (m["parameters"].get<double>() + m["gradients"].get<double>() + m["optimizer"].get<double>()) / 1e9;
    EXPECT_NEAR(states_gb, expected_gb[stage], 0.0051 * expected_gb[stage]) << "stage " << stage;
    EXPECT_EQ(j["feasible"].get<bool>(), stage != 0);
  }
}

TEST(Cli, MeshShapeSpellingGivesTheSameAnswer) {
  const CliRun a = run({"explain", "--json", "--model", "llama2-7b", "--gpus", "8", "--mesh", "fsdp=4,tp=2",
                     "--global-batch", "8"});
  const CliRun b = run({"explain", "--json", "--model", "llama2-7b", "--gpus", "8", "--mesh-shape", "[[4,2],[\"fsdp\",\"tp\"]]",
                     "--global-batch", "8"});
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
}

struct BadInput {
  const char* name;
  std::vector<std::string> args;
  std::vector<std::string> fragments;  // all must appear on stderr
};

class CliBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(CliBadInput, ExitsTwoWithAPreciseMessage) {
  const CliRun r = run(GetParam().args);
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  for (const auto& fragment : GetParam().fragments) EXPECT_NE(r.err.find(fragment), std::string::npos) << fragment << "\n" << r.err;
  expect_no_crash_text(r);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CliBadInput,
    ::testing::Values(
        BadInput{"unknown_model", {"explain", "--model", "gpt5"}, {"--model gpt5", "unknown model preset", "gpt3-175b"}},
        BadInput{"unknown_cluster", {"explain", "--cluster", "dgx-z"}, {"--cluster dgx-z", "unknown cluster preset"}},
        BadInput{"device_for_cluster", {"explain", "--cluster", "h100-sxm"},
                 {"--cluster h100-sxm", "h100-sxm is a device preset", "the clusters of h100-sxm are dgx-h100"}},
        BadInput{"malformed_yaml", {"explain", "--model", data + "/malformed.yaml"}, {"malformed.yaml:", "malformed YAML"}},
        BadInput{"wrong_type", {"explain", "--model", data + "/wrong-type.yaml"}, {"wrong-type.yaml:7 key 'heads'", "expected a whole number"}},
        BadInput{"unknown_key", {"explain", "--model", data + "/unknown-key.yaml"}, {"unknown-key.yaml:13 key 'kv_haeds'", "unknown key"}},
        BadInput{"missing_file", {"explain", "--model", "no/such.yaml"}, {"no/such.yaml", "no such file"}},
        BadInput{"world_size", {"explain", "--mesh", "dp=16,pp=8,tp=16"}, {"--mesh", "must equal the world size (1024"}},
        BadInput{"tp_heads", {"explain", "--gpus", "64", "--mesh", "tp=64", "--global-batch", "1"}, {"--mesh", "attention heads (96)"}},
        BadInput{"unknown_axis", {"explain", "--mesh", "dp=16,pp=8,qq=8"}, {"--mesh", "unknown mesh axis 'qq'"}},
        BadInput{"schedule", {"explain", "--schedule", "interleaved"}, {"--schedule", "interleaved:<v>"}},
        BadInput{"global_batch", {"explain", "--mesh", "dp=16,pp=8,tp=8", "--global-batch", "1000"}, {"--global-batch", "not a multiple"}},
        BadInput{"global_batch_searched", {"explain", "--global-batch", "7"}, {"--mesh", "not given", "--global-batch"}},
        BadInput{"stage_layers_searched", {"explain", "--stage-layers", "12,12"}, {"--stage-layers", "needs --mesh"}},
        // An empty entry was dropped ("they sum to 3"), not named.
        BadInput{"stage_layers_empty_entry", {"explain", "--mesh", "pp=2,dp=512", "--stage-layers", "1,,2"},
                 {"--stage-layers", "empty item in '1,,2'"}},
        BadInput{"precision", {"explain", "--precision", "fp8"}, {"--precision", "no fp8 support"}},
        BadInput{"gpus_not_number", {"explain", "--gpus", "abc"}, {"--gpus"}},
        // More devices than meshplan models (model/mesh.hpp, kMaxMeshDevices): refused at once,
        // not after gigabytes of topology graph (a billion once ended in std::bad_alloc).
        BadInput{"gpus_too_many", {"explain", "--gpus", "1048577"}, {"--gpus", "between 1 and 1048576"}},
        BadInput{"gpus_billion", {"simulate", "--gpus", "1000000000"}, {"--gpus", "between 1 and 1048576"}},
        BadInput{"simulate_micro_batches", {"simulate", "--gpus", "768", "--mesh", "pp=96,tp=8", "--global-batch", "10000000"},
                 {"--global-batch", "10000000 micro-batches on 96 pipeline stages", "at most 2097152"}},
        // explain took 2^62 ("fits", 5.8e17 micro-batches) and wrote a plan file its own reader refused.
        BadInput{"global_batch_2_62", {"explain", "--mesh", "dp=1024", "--global-batch", "4611686018427387904"},
                 {"--global-batch", "must be at most 2^40 = 1099511627776 sequences"}},
        // Without --mesh the search ran first, on that batch, and printed its pick.
        BadInput{"simulate_searched_global_batch_past_2_40", {"simulate", "--gpus", "8", "--global-batch", "1099511627777"},
                 {"--global-batch", "must be at most 2^40"}},
        BadInput{"simulate_global_batch_2_62",
                 {"simulate", "--gpus", "8", "--mesh", "pp=8", "--schedule", "interleaved:4", "--global-batch", "4611686018427387904"},
                 {"--global-batch", "must be at most 2^40"}},
        // --gpus 08 was refused and --mesh dp=08 read as 8.
        BadInput{"mesh_leading_zero", {"explain", "--mesh", "dp=08"}, {"--mesh", "'08': write sizes in decimal digits"}},
        // simulate replays every stage; its --rank took any value and changed nothing.
        BadInput{"simulate_rank", {"simulate", "--gpus", "8", "--mesh", "dp=8", "--rank", "-5"}, {"--rank"}},
        BadInput{"unknown_flag", {"explain", "--meshh", "dp=2"}, {"--meshh"}},
        BadInput{"mesh_shape", {"explain", "--mesh-shape", "[[4],[\"dp\",\"tp\"]]"}, {"--mesh-shape", "1 sizes but 2 axis names"}},
        BadInput{"rank", {"explain", "--rank", "5000"}, {"--rank", "must be in [0, world size 1024)"}},
        // 0 was the "model's length" sentinel, so a typed --seq 0 was taken silently.
        BadInput{"seq_zero", {"explain", "--seq", "0"}, {"--seq", "0 is not a sequence length", "from 1 to 2^40"}},
        BadInput{"seq_zero_plan", {"plan", "--seq", "0"}, {"--seq", "0 is not a sequence length"}},
        BadInput{"seq_huge", {"explain", "--seq", "2000000000000"}, {"--seq", "2000000000000 is not a sequence length"}},
        // A negative rank was the "worst device" sentinel, so a typed one was taken silently.
        BadInput{"rank_negative", {"explain", "--rank", "-5"}, {"--rank", "rank -5 must be in [0, world size 1024)"}},
        // CLI11 read integers past int64 as its end (9223372036854775807), and the
        // command ran on a number nobody typed: refused, naming what was typed.
        BadInput{"integer_past_int64", {"explain", "--micro-batch", "99999999999999999999"},
                 {"--micro-batch: '99999999999999999999' is out of range"}},
        BadInput{"integer_past_int64_equals", {"explain", "--mesh", "dp=1024", "--seq=-99999999999999999999"},
                 {"--seq: '-99999999999999999999' is out of range"}},
        BadInput{"integer_past_int64_train", {"train", "--plan", "x.json", "--steps", "123456789012345678901234"},
                 {"--steps: '123456789012345678901234' is out of range"}},
        BadInput{"unknown_command", {"frobnicate"}, {"frobnicate"}},
        BadInput{"no_command", {}, {"subcommand"}}),
    [](const auto& test_info) { return std::string(test_info.param.name); });

TEST(Cli, HelpEverywhere) {
  for (const auto& args : std::vector<std::vector<std::string>>{{"--help"}, {"explain", "--help"}, {"presets", "--help"}}) {
    const CliRun r = run(args);
    EXPECT_EQ(r.status, 0);
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << r.out;
  }
  EXPECT_NE(run({"explain", "--help"}).out.find("--mesh-shape"), std::string::npos);
}

TEST(Cli, PresetsListsEveryKind) {
  const CliRun r = run({"presets"});
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* name : {"gpt3-175b", "llama3-405b", "resnet50", "h100-sxm", "tpu-v5p", "dgx-h100", "ethernet-10g"}) {
    EXPECT_NE(r.out.find(name), std::string::npos) << name;
  }
  EXPECT_EQ(run({"presets", "gadgets"}).status, 2);
}

// --fp32-gradients reaches the plan: explain's plan line and JSON say it, the
// gradients take 4 bytes per parameter, and plan's search line carries it to
// every candidate.
TEST(Cli, Fp32GradientsFlagReachesThePlan) {
  auto with = [](std::vector<std::string> args, const std::vector<std::string>& more) {
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  const std::vector<std::string> job = {"explain", "--model", "gpt2-350m", "--cluster", "dgx-h100", "--gpus", "8",
                                        "--mesh", "fsdp=8", "--global-batch", "16", "--seq", "1024"};
  const CliRun text = run(with(job, {"--fp32-gradients"}));
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find(", fp32 gradients"), std::string::npos) << text.out;
  const CliRun half = run(with(job, {"--json"}));
  const CliRun full = run(with(job, {"--json", "--fp32-gradients"}));
  ASSERT_EQ(half.status, 0) << half.err;
  ASSERT_EQ(full.status, 0) << full.err;
  const auto h = nlohmann::json::parse(half.out), f = nlohmann::json::parse(full.out);
  EXPECT_FALSE(h["plan"]["fp32_gradients"].get<bool>());
  EXPECT_TRUE(f["plan"]["fp32_gradients"].get<bool>());
  EXPECT_DOUBLE_EQ(f["memory_bytes"]["gradients"].get<double>(), 2 * h["memory_bytes"]["gradients"].get<double>());

  const CliRun planned = run({"plan", "--model", "gpt2-350m", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch",
                              "16", "--seq", "1024", "--json", "--top", "2", "--fp32-gradients"});
  ASSERT_EQ(planned.status, 0) << planned.err;
  const auto plans = nlohmann::json::parse(planned.out);
  ASSERT_FALSE(plans.empty());
  for (const auto& p : plans) EXPECT_TRUE(p["plan"]["fp32_gradients"].get<bool>()) << p.dump();

  // --bf16-moments: Adam's moments in bf16, 8 of the 12 optimizer bytes per parameter, on explain and plan.
  const CliRun moments = run(with(job, {"--json", "--bf16-moments"}));
  ASSERT_EQ(moments.status, 0) << moments.err;
  const auto m = nlohmann::json::parse(moments.out);
  EXPECT_TRUE(m["plan"]["bf16_moments"].get<bool>());
  EXPECT_FALSE(h["plan"].contains("bf16_moments"));
  EXPECT_NEAR(m["memory_bytes"]["optimizer"].get<double>(), h["memory_bytes"]["optimizer"].get<double>() * 8 / 12,
              1e-9 * h["memory_bytes"]["optimizer"].get<double>());
  const CliRun searched = run({"plan", "--model", "gpt2-350m", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch",
                               "16", "--seq", "1024", "--top", "2", "--bf16-moments"});
  ASSERT_EQ(searched.status, 0) << searched.err;
  EXPECT_NE(searched.out.find("; bf16 moments"), std::string::npos) << searched.out;
}

// --overlap-ep (Megatron-Core's combined 1F1B): with one stage and m micro-batches, the first forward and
// the last backward have no partner, so when the compute hides the rest 1/m of the all-to-alls stays
// exposed and the step is shorter by the rest; the search sets it where it applies; refused on a dense
// model and with a schedule it cannot pair.
TEST(Cli, OverlapExpertParallelHidesThePairedAllToAlls) {
  const std::vector<std::string> job = {"explain", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100", "--gpus", "16",
                                        "--mesh", "dp=2,ep=8", "--global-batch", "64", "--seq", "4096", "--json"};
  auto with = [&](const std::vector<std::string>& more) {
    std::vector<std::string> args = job;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  const CliRun plain = run(job), paired = run(with({"--overlap-ep"}));
  ASSERT_EQ(plain.status, 0) << plain.err;
  ASSERT_EQ(paired.status, 0) << paired.err;
  const auto a = nlohmann::json::parse(plain.out), b = nlohmann::json::parse(paired.out);
  EXPECT_FALSE(a["plan"].contains("overlap_expert_parallel"));
  EXPECT_TRUE(b["plan"]["overlap_expert_parallel"].get<bool>());
  const double total = a["communication_s_by_axis"]["ep"]["total"].get<double>();
  ASSERT_GT(total, 0);
  EXPECT_DOUBLE_EQ(a["communication_s_by_axis"]["ep"]["exposed"].get<double>(), total);
  EXPECT_DOUBLE_EQ(b["communication_s_by_axis"]["ep"]["total"].get<double>(), total);
  EXPECT_NEAR(b["communication_s_by_axis"]["ep"]["exposed"].get<double>(), total / 4, 1e-12 * total);  // m = 4
  EXPECT_LT(b["time_s"]["step"].get<double>(), a["time_s"]["step"].get<double>() - total / 2);
  // explain says so where the plan could pair its passes and does not.
  auto mentions_overlap = [](const nlohmann::json& j) { return warns(j, "overlap_expert_parallel: hiding the expert all-to-alls"); };
  EXPECT_TRUE(mentions_overlap(a)) << a["warnings"].dump();
  EXPECT_FALSE(mentions_overlap(b)) << b["warnings"].dump();
  // Refused where nothing pairs or nothing is routed.
  std::vector<std::string> pipelined = with({"--overlap-ep"});
  pipelined[std::find(pipelined.begin(), pipelined.end(), "dp=2,ep=8") - pipelined.begin()] = "pp=2,ep=8";
  const CliRun staged = run(pipelined);
  EXPECT_EQ(staged.status, 2);
  EXPECT_NE(staged.err.find("--overlap-ep"), std::string::npos) << staged.err;
  EXPECT_NE(staged.err.find("interleaved"), std::string::npos) << staged.err;
  const CliRun full = run(with({"--overlap-ep", "--recompute", "full"}));
  EXPECT_EQ(full.status, 2);
  EXPECT_NE(full.err.find("full recompute"), std::string::npos) << full.err;
  const CliRun dense = run({"explain", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--mesh", "dp=8",
                            "--global-batch", "16", "--overlap-ep"});
  EXPECT_EQ(dense.status, 2);
  EXPECT_NE(dense.err.find("no experts"), std::string::npos) << dense.err;
  // The search: every candidate that can pair its passes does, the others run without.
  const CliRun searched = run({"plan", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100", "--gpus", "16",
                               "--global-batch", "64", "--seq", "4096", "--json", "--top", "40", "--overlap-ep"});
  ASSERT_EQ(searched.status, 0) << searched.err;
  int overlapped = 0;
  for (const auto& p : nlohmann::json::parse(searched.out)) {
    const auto& plan = p["plan"];
    const bool has = plan.contains("overlap_expert_parallel") && plan["overlap_expert_parallel"].get<bool>();
    const auto& mesh = plan["mesh"];
    // Routed over ep ranks: the mesh's, or the tp ranks the experts leave (expert_tensor_parallel 1).
    const bool routed = (mesh.contains("ep") && mesh["ep"].get<int>() > 1) ||
                        (plan.contains("expert_tensor_parallel") && plan["expert_tensor_parallel"].get<int>() == 1);
    if (has) ++overlapped;
    if (!routed) {
      EXPECT_FALSE(has) << p.dump();
    }
  }
  EXPECT_GT(overlapped, 0);
}

// --tp-comm-overlap (Transformer Engine's userbuffers, Megatron-Core's flag): the layers' tp
// collectives run in chunks beside their GEMMs, so less of the same total is exposed and the step is
// shorter; the search sets it on candidates with tp > 1 and sequence parallelism only; refused without
// sequence parallelism (as Megatron-LM refuses it) and on a model without layers; a warning with tp 1.
TEST(Cli, TpCommOverlapHidesTensorParallelCollectivesBesideTheirGemms) {
  const std::vector<std::string> job = {"explain", "--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "64",
                                        "--mesh", "dp=2,pp=8,tp=4", "--schedule", "interleaved:5", "--global-batch",
                                        "128", "--seq", "8192", "--recompute", "none", "--zero", "1", "--json"};
  auto with = [&](const std::vector<std::string>& more) {
    std::vector<std::string> args = job;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  const CliRun plain = run(job), chunked = run(with({"--tp-comm-overlap"}));
  ASSERT_EQ(plain.status, 0) << plain.err;
  ASSERT_EQ(chunked.status, 0) << chunked.err;
  const auto a = nlohmann::json::parse(plain.out), b = nlohmann::json::parse(chunked.out);
  EXPECT_FALSE(a["plan"].contains("tp_comm_overlap"));
  EXPECT_TRUE(b["plan"]["tp_comm_overlap"].get<bool>());
  const double total = a["communication_s_by_axis"]["tp"]["total"].get<double>();
  const double exposed = b["communication_s_by_axis"]["tp"]["exposed"].get<double>();
  ASSERT_GT(total, 0);
  EXPECT_DOUBLE_EQ(a["communication_s_by_axis"]["tp"]["exposed"].get<double>(), total);
  EXPECT_DOUBLE_EQ(b["communication_s_by_axis"]["tp"]["total"].get<double>(), total);
  EXPECT_GT(exposed, 0);            // attention's narrow GEMMs do not hide theirs
  EXPECT_LT(exposed, total / 2);    // the MLP's do
  EXPECT_LT(b["time_s"]["step"].get<double>(), a["time_s"]["step"].get<double>());
  // explain says so where the plan could chunk its tp collectives and does not.
  auto mentions_overlap = [](const nlohmann::json& j) { return warns(j, "tp_comm_overlap: running the tp collectives in chunks"); };
  EXPECT_TRUE(mentions_overlap(a)) << a["warnings"].dump();
  EXPECT_FALSE(mentions_overlap(b)) << b["warnings"].dump();
  std::vector<std::string> table = job;
  table.back() = "--tp-comm-overlap";  // in place of --json
  const CliRun human = run(table);
  ASSERT_EQ(human.status, 0) << human.err;
  EXPECT_NE(human.out.find("tp collectives chunked beside their GEMMs"), std::string::npos) << human.out;
  // Refused without sequence parallelism and without layers; no effect with tp 1.
  const CliRun no_sp = run(with({"--tp-comm-overlap", "--no-sequence-parallel"}));
  EXPECT_EQ(no_sp.status, 2);
  EXPECT_NE(no_sp.err.find("--tp-comm-overlap"), std::string::npos) << no_sp.err;
  EXPECT_NE(no_sp.err.find("sequence parallelism"), std::string::npos) << no_sp.err;
  const CliRun mlp = run({"explain", "--model", "mlp-fashion", "--cluster", "dgx-h100", "--gpus", "2", "--mesh", "tp=2",
                          "--global-batch", "16", "--tp-comm-overlap"});
  EXPECT_EQ(mlp.status, 2);
  EXPECT_NE(mlp.err.find("transformer layers"), std::string::npos) << mlp.err;
  const CliRun one = run({"explain", "--model", "gpt2-124m", "--cluster", "dgx-h100", "--gpus", "8", "--mesh", "dp=8",
                          "--global-batch", "16", "--tp-comm-overlap", "--json"});
  ASSERT_EQ(one.status, 0) << one.err;
  EXPECT_NE(one.out.find("tp_comm_overlap: overlaps tensor-parallel collectives, and there are none here"),
            std::string::npos) << one.out;
  // The search: candidates with tp > 1 and sequence parallelism carry it, the others do not.
  const CliRun searched = run({"plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--global-batch",
                               "64", "--seq", "4096", "--json", "--top", "60", "--tp-comm-overlap"});
  ASSERT_EQ(searched.status, 0) << searched.err;
  int with_flag = 0;
  for (const auto& p : nlohmann::json::parse(searched.out)) {
    const auto& plan = p["plan"];
    const bool has = plan.contains("tp_comm_overlap") && plan["tp_comm_overlap"].get<bool>();
    const bool applies = plan["mesh"].contains("tp") && plan["mesh"]["tp"].get<int>() > 1 &&
                         plan["sequence_parallel"].get<bool>();
    EXPECT_EQ(has, applies) << p.dump();
    if (has) ++with_flag;
  }
  EXPECT_GT(with_flag, 0);
}

// --overlap-p2p (Megatron-Core's --overlap-p2p-communication): the same pipeline transfers, the fill's and
// drain's alone exposed, so the step is shorter; refused without the interleaved schedule (as NeMo runs it
// only there), a warning with pp 1; the search sets it on interleaved candidates only; Megatron's export
// writes the flag.
TEST(Cli, OverlapP2pHidesTheSteadyStatesPipelineTransfers) {
  const std::vector<std::string> job = {"explain", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8",
                                        "--mesh", "pp=4,tp=2", "--schedule", "interleaved:2", "--global-batch", "16",
                                        "--seq", "4096", "--json"};
  auto with = [&](const std::vector<std::string>& more) {
    std::vector<std::string> args = job;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  const CliRun plain = run(job), overlapped = run(with({"--overlap-p2p"}));
  ASSERT_EQ(plain.status, 0) << plain.err;
  ASSERT_EQ(overlapped.status, 0) << overlapped.err;
  const auto a = nlohmann::json::parse(plain.out), b = nlohmann::json::parse(overlapped.out);
  EXPECT_FALSE(a["plan"].contains("overlap_p2p_comm"));
  EXPECT_TRUE(b["plan"]["overlap_p2p_comm"].get<bool>());
  const double total = a["communication_s_by_axis"]["pp"]["total"].get<double>();
  ASSERT_GT(total, 0);
  EXPECT_DOUBLE_EQ(b["communication_s_by_axis"]["pp"]["total"].get<double>(), total);
  // 16 micro-batches, 4 stages, 2 chunks: 2 x 3 of the 2 x 16 x 2 chunk transfers exposed.
  EXPECT_NEAR(b["communication_s_by_axis"]["pp"]["exposed"].get<double>(), total * 6 / 64, 1e-9 * total);
  EXPECT_LT(b["time_s"]["step"].get<double>(), a["time_s"]["step"].get<double>());
  std::vector<std::string> one_f_one_b = with({"--overlap-p2p"});
  one_f_one_b[std::find(one_f_one_b.begin(), one_f_one_b.end(), "interleaved:2") - one_f_one_b.begin()] = "1f1b";
  const CliRun refused = run(one_f_one_b);
  EXPECT_EQ(refused.status, 2);
  EXPECT_NE(refused.err.find("--overlap-p2p"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("interleaved"), std::string::npos) << refused.err;
  const CliRun flat = run({"explain", "--model", "gpt2-124m", "--cluster", "dgx-h100", "--gpus", "8", "--mesh", "dp=8",
                           "--global-batch", "16", "--overlap-p2p", "--json"});
  ASSERT_EQ(flat.status, 0) << flat.err;
  EXPECT_NE(flat.out.find("overlap_p2p_comm: overlaps pipeline transfers, and there are none here"), std::string::npos)
      << flat.out;
  const CliRun searched = run({"plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--global-batch",
                               "64", "--seq", "4096", "--json", "--top", "80", "--overlap-p2p"});
  ASSERT_EQ(searched.status, 0) << searched.err;
  for (const auto& p : nlohmann::json::parse(searched.out)) {
    const auto& plan = p["plan"];
    const bool has = plan.contains("overlap_p2p_comm") && plan["overlap_p2p_comm"].get<bool>();
    const bool applies = plan["mesh"].contains("pp") && plan["mesh"]["pp"].get<int>() > 1 &&
                         plan["schedule"].get<std::string>().starts_with("interleaved");
    EXPECT_EQ(has, applies) << p.dump();
  }
}

// --overlap-zero-gather (Megatron-Core's --overlap-param-gather): ZeRO-1's gather of the updated weights
// under the next forward, on explain (JSON: the key, dp's exposed time and the step shorter by the
// same), a warning where there is nothing to gather, and the search setting it where ZeRO is 1 or 2
// over data-parallel ranks.
TEST(Cli, OverlapZeroGatherHidesTheUpdatedWeightsGatherUnderTheForward) {
  const std::vector<std::string> job = {"explain", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16",
                                        "--mesh", "dp=16", "--zero", "1", "--global-batch", "16",
                                        "--seq", "4096", "--json"};
  std::vector<std::string> with = job;
  with.push_back("--overlap-zero-gather");
  const CliRun plain = run(job), overlapped = run(with);
  ASSERT_EQ(plain.status, 0) << plain.err;
  ASSERT_EQ(overlapped.status, 0) << overlapped.err;
  const auto a = nlohmann::json::parse(plain.out), b = nlohmann::json::parse(overlapped.out);
  EXPECT_FALSE(a["plan"].contains("overlap_zero_gather"));
  EXPECT_TRUE(b["plan"]["overlap_zero_gather"].get<bool>());
  const double hidden = a["communication_s_by_axis"]["dp"]["exposed"].get<double>() -
                        b["communication_s_by_axis"]["dp"]["exposed"].get<double>();
  EXPECT_GT(hidden, 0.001);
  EXPECT_NEAR(a["time_s"]["step"].get<double>() - b["time_s"]["step"].get<double>(), hidden, 1e-9);
  // explain says so where the plan could overlap the gather and does not (here 10% of the step).
  auto mentions_overlap = [](const nlohmann::json& j) { return warns(j, "overlap_zero_gather: gathering ZeRO's updated weights"); };
  EXPECT_TRUE(mentions_overlap(a)) << a["warnings"].dump();
  EXPECT_FALSE(mentions_overlap(b)) << b["warnings"].dump();
  std::vector<std::string> zero0 = with;
  zero0[std::find(zero0.begin(), zero0.end(), "--zero") - zero0.begin() + 1] = "0";
  const CliRun none = run(zero0);
  ASSERT_EQ(none.status, 1) << none.err;  // valid (a warning), and 16 GB of gradients more: does not fit
  EXPECT_NE(none.out.find("overlap_zero_gather: overlaps ZeRO-1/2's gather of the updated weights, and this plan has "
                          "ZeRO 0"),
            std::string::npos)
      << none.out;
  const CliRun searched = run({"plan", "--model", "gpt2-350m", "--cluster", "dgx-h100", "--gpus", "16", "--global-batch",
                               "64", "--json", "--top", "60", "--overlap-zero-gather"});
  ASSERT_EQ(searched.status, 0) << searched.err;
  int set = 0;
  for (const auto& p : nlohmann::json::parse(searched.out)) {
    const auto& plan = p["plan"];
    const bool has = plan.contains("overlap_zero_gather") && plan["overlap_zero_gather"].get<bool>();
    const int zero = plan["zero"].get<int>();
    const int dp = plan["mesh"].contains("dp") ? plan["mesh"]["dp"].get<int>() : 1;
    EXPECT_EQ(has, (zero == 1 || zero == 2) && dp > 1) << p.dump();
    set += has;
  }
  EXPECT_GT(set, 0);
}

// --recompute-modules (Megatron-Core's): selective recompute of the named parts, on explain (where it
// implies --recompute selective) and plan; refused with a name it does not know, with another
// recompute mode, and with a module the model lacks.
TEST(Cli, RecomputeModulesFlagReachesThePlan) {
  const std::vector<std::string> job = {"explain", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100", "--gpus", "8",
                                        "--mesh", "ep=4,tp=2", "--global-batch", "4", "--seq", "4096"};
  auto with = [&](const std::vector<std::string>& more) {
    std::vector<std::string> args = job;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  const CliRun text = run(with({"--recompute-modules", "layernorm,moe_act"}));
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("recompute selective (layernorm,moe_act)"), std::string::npos) << text.out;
  const CliRun plain = run(with({"--json", "--recompute", "selective"}));
  const CliRun modules = run(with({"--json", "--recompute-modules", "layernorm,moe_act"}));
  ASSERT_EQ(plain.status, 0) << plain.err;
  ASSERT_EQ(modules.status, 0) << modules.err;
  const auto p = nlohmann::json::parse(plain.out), m = nlohmann::json::parse(modules.out);
  EXPECT_FALSE(p["plan"].contains("recompute_modules"));
  EXPECT_EQ(m["plan"]["recompute_modules"].get<std::string>(), "layernorm,moe_act");
  EXPECT_LT(m["memory_bytes"]["activations"].get<double>(), p["memory_bytes"]["activations"].get<double>());
  EXPECT_GT(m["time_s"]["step"].get<double>(), p["time_s"]["step"].get<double>());

  const CliRun unknown = run(with({"--recompute-modules", "layernorm,attn"}));
  EXPECT_EQ(unknown.status, 2);
  EXPECT_NE(unknown.err.find("--recompute-modules: 'attn' is not a recompute module"), std::string::npos) << unknown.err;
  const CliRun full = run(with({"--recompute", "full", "--recompute-modules", "layernorm"}));
  EXPECT_EQ(full.status, 2);
  EXPECT_NE(full.err.find("--recompute is full"), std::string::npos) << full.err;
  const CliRun lacking = run(with({"--recompute-modules", "mla_up_proj"}));
  EXPECT_EQ(lacking.status, 2);
  EXPECT_NE(lacking.err.find("latent attention"), std::string::npos) << lacking.err;
  // Whole-module checkpoints: Qwen3-30B-A3B has experts in every layer and no shared experts.
  const CliRun no_dense = run(with({"--recompute-modules", "mlp"}));
  EXPECT_EQ(no_dense.status, 2);
  EXPECT_NE(no_dense.err.find("every layer of this model has experts"), std::string::npos) << no_dense.err;
  const CliRun no_shared = run(with({"--recompute-modules", "shared_experts"}));
  EXPECT_EQ(no_shared.status, 2);
  EXPECT_NE(no_shared.err.find("this model has none"), std::string::npos) << no_shared.err;
  const CliRun dense_mlp = run({"explain", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--mesh",
                                "dp=4,tp=2", "--global-batch", "4", "--recompute-modules", "mlp,layernorm"});
  ASSERT_EQ(dense_mlp.status, 0) << dense_mlp.err;
  EXPECT_NE(dense_mlp.out.find("recompute selective (layernorm,mlp)"), std::string::npos) << dense_mlp.out;

  const CliRun planned = run({"plan", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch",
                              "8", "--seq", "4096", "--top", "2", "--recompute-modules", "moe_act"});
  ASSERT_EQ(planned.status, 0) << planned.err;
  EXPECT_NE(planned.out.find("selective (moe_act)"), std::string::npos) << planned.out;
  // A search for a model without the module refuses before it searches.
  const CliRun dense = run({"plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch", "8",
                            "--recompute-modules", "moe_act"});
  EXPECT_EQ(dense.status, 2);
  EXPECT_NE(dense.err.find("--recompute-modules: moe_act recomputes the routed experts' activation"), std::string::npos)
      << dense.err;
}

// A Hugging Face config.json as --model hf:FILE (model/hf_config.hpp): explain
// plans it and names what the schema cannot state; `presets --from-hf`
// prints it as a preset with the keys each field came from, which explain
// reads back as the same model.
TEST(Cli, HuggingFaceConfigsAsModels) {
  const std::string mistral = std::string(MESHPLAN_TEST_DATA) + "/hf/mistral-7b.json";
  CliRun r = run({"explain", "--model", "hf:" + mistral, "--cluster", "dgx-h100", "--gpus", "8", "--mesh", "tp=8",
                  "--global-batch", "8", "--seq", "4096", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["model"], "Mistral-7B-v0.1");
  EXPECT_EQ(j["parameters"].get<double>(), 7241732096.0);
  EXPECT_NE(j["warnings"].dump().find("sliding-window attention (window 4096) is not modelled"), std::string::npos)
      << j["warnings"].dump();

  r = run({"presets", "--from-hf", mistral});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("kv_heads: 8   # num_key_value_heads"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# 7.24 B parameters"), std::string::npos) << r.out;
  const std::filesystem::path preset = std::filesystem::temp_directory_path() / "meshplan-mistral-from-hf.yaml";
  std::ofstream(preset) << r.out;
  const CliRun back = run({"explain", "--model", preset.string(), "--cluster", "dgx-h100", "--gpus", "8", "--mesh", "tp=8",
                           "--global-batch", "8", "--seq", "4096", "--json"});
  ASSERT_EQ(back.status, 0) << back.err;
  EXPECT_EQ(nlohmann::json::parse(back.out)["time_s"]["step"], j["time_s"]["step"]);
  std::filesystem::remove(preset);

  r = run({"explain", "--model", "hf:/no/such/config.json", "--cluster", "dgx-h100", "--gpus", "8"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("no such file"), std::string::npos) << r.err;
  EXPECT_EQ(run({"presets", "--from-hf", "/no/such/config.json"}).status, 2);
}

// `meshplan export` (model/export.hpp): a plan file as Megatron-LM arguments
// on stdout, as a torchtitan TOML in a file; a plan the framework cannot
// express (tp in a DeepSpeed JSON, pp in JAX) is refused naming the field,
// and nothing is written.
TEST(Cli, ExportWritesAFrameworksConfig) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "meshplan-cli-export";
  std::filesystem::create_directories(dir);
  const std::string plan = (dir / "llama.json").string();
  CliRun r = run({"explain", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--mesh", "dp=2,pp=2,tp=4",
                  "--zero", "2", "--global-batch", "64", "--emit-plan", plan});
  ASSERT_EQ(r.status, 0) << r.err;
  r = run({"export", "--plan", plan, "--to", "megatron"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("--tensor-model-parallel-size 4 \\\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--num-query-groups 8"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("zero: Megatron-LM's distributed optimizer"), std::string::npos) << "the ZeRO-2 approximation: " << r.err;
  // Megatron-LM's --rotary-base is type=int: written whole (it was 500000 here, 1e+06 for Mixtral).
  EXPECT_NE(r.out.find("--rotary-base 500000 \\\n"), std::string::npos) << r.out;
  const std::string mixtral = (dir / "mixtral.json").string();
  ASSERT_EQ(run({"explain", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "64", "--mesh", "pp=2,dp=4,ep=8",
                 "--global-batch", "64", "--recompute", "full", "--emit-plan", mixtral}).status, 0);
  r = run({"export", "--plan", mixtral, "--to", "megatron", "-o", "-"});  // -: the standard output, not a file named -
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("--rotary-base 1000000 \\\n"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists("-"));
  // An output naming the input it is made from would replace it.
  r = run({"export", "--plan", plan, "--to", "megatron", "-o", plan});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("meshplan export: --out " + plan + " is the file --plan reads"), std::string::npos) << r.err;

  const std::string toml = (dir / "llama.toml").string();
  r = run({"export", "--plan", plan, "--to", "torchtitan", "-o", toml});
  ASSERT_EQ(r.status, 0) << r.err;
  std::ifstream in(toml);
  const std::string written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(written.find("data_parallel_shard_degree = 2\n"), std::string::npos) << written;
  EXPECT_NE(written.find("pipeline_parallel_degree = 2\n"), std::string::npos) << written;

  const std::string refused = (dir / "ds.json").string();
  r = run({"export", "--plan", plan, "--to", "deepspeed", "-o", refused});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("cannot export to deepspeed: mesh.tp:"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(refused));
  r = run({"export", "--plan", plan, "--to", "jax"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("cannot export to jax: mesh.pp:"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  r = run({"export", "--plan", plan, "--to", "megatorn"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("did you mean megatron"), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}

// A plan that does not fit: the memory error under "problems:", speed advice under "warnings:" (it was
// listed among the problems).
TEST(Cli, ExplainKeepsWarningsOutOfTheProblems) {
  const CliRun r = run({"explain", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--gpus", "8", "--mesh", "dp=8",
                        "--global-batch", "8"});
  EXPECT_EQ(r.status, 1) << r.err;
  const auto problems = r.out.find("\nproblems:\n  - memory: pipeline stage 0 needs");
  const auto warnings = r.out.find("\nwarnings:\n  - --overlap-zero-gather:");
  ASSERT_NE(problems, std::string::npos) << r.out;
  ASSERT_NE(warnings, std::string::npos) << r.out;
  EXPECT_LT(problems, warnings);
  EXPECT_EQ(r.out.substr(problems, warnings - problems).find("overlap"), std::string::npos) << r.out;
}

// --attention is part of the plan: it reaches the JSON, changes activations
// (no s x s scores when fused), and a bad word is bad input naming the flag.
TEST(Cli, ExplainAttentionFlag) {
  const std::vector<std::string> base = {"explain", "--model", "gpt2-124m", "--cluster", "dgx-h100", "--gpus", "1",
                                         "--mesh", "dp=1", "--micro-batch", "8", "--global-batch", "8", "--recompute", "none", "--json"};
  auto with = [&](const std::string& attention) {
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--attention", attention});
    return run(args);
  };
  const CliRun fused = run(base), unfused = with("unfused");
  ASSERT_EQ(fused.status, 0) << fused.err;
  ASSERT_EQ(unfused.status, 0) << unfused.err;
  const auto f = nlohmann::json::parse(fused.out), u = nlohmann::json::parse(unfused.out);
  EXPECT_EQ(f["plan"]["attention"], "fused");
  EXPECT_EQ(u["plan"]["attention"], "unfused");
  EXPECT_LT(f["memory_bytes"]["activations"].get<double>(), u["memory_bytes"]["activations"].get<double>());
  for (const char* row : {"loss_transient", "activation_gradients", "workspaces", "runtime_context", "allocated_peak"}) {
    EXPECT_GT(f["memory_bytes"][row].get<double>(), 0) << row;
  }
  const CliRun bad = with("flash");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("--attention"), std::string::npos) << bad.err;
  std::vector<std::string> text = base;
  text.pop_back();
  const CliRun table = run(text);
  ASSERT_EQ(table.status, 0) << table.err;
  for (const char* row : {"attention fused", "loss logits + gradients", "activation gradients", "CUDA context", "library workspaces"}) {
    EXPECT_NE(table.out.find(row), std::string::npos) << row << "\n" << table.out;
  }
  EXPECT_EQ(table.out.find("nothing to repeat"), std::string::npos) << table.out;  // --recompute none
  // Selective recompute drops the s x s tensors fused attention never keeps: the plan line says so.
  std::vector<std::string> selective = text;
  selective[selective.size() - 1] = "selective";
  const CliRun said = run(selective);
  ASSERT_EQ(said.status, 0) << said.err;
  EXPECT_NE(said.out.find("recompute selective (nothing to repeat under fused attention)"), std::string::npos) << said.out;
  selective.insert(selective.end(), {"--attention", "unfused"});
  const CliRun unfused_selective = run(selective);
  ASSERT_EQ(unfused_selective.status, 0) << unfused_selective.err;
  EXPECT_EQ(unfused_selective.out.find("nothing to repeat"), std::string::npos) << unfused_selective.out;
}

TEST(Cli, FuzzedArgumentListsNeverCrash) {
  // Random combinations of real flags with good and bad values.
  const std::vector<std::vector<std::string>> flags = {
      {"--model", "gpt2-124m", "llama2-70b", "mlp-fashion", "resnet50", "nope", "", data + "/malformed.yaml"},
      {"--cluster", "dgx-a100", "dgx-h100", "ethernet-10g", "x"},
      {"--gpus", "1", "8", "64", "0", "-3", "1e9", "x", "99999999999999999999"},
      {"--mesh", "dp=8", "tp=8", "dp=2,tp=4", "pp=2,fsdp=4", "dp=0", "dp=-1", ",,", "dp=8,dp=8", "="},
      {"--micro-batch", "1", "2", "0", "-1", "x"},
      {"--global-batch", "8", "64", "0", "7"},
      {"--seq", "1024", "0", "-5", "99999999"},
      {"--zero", "0", "3", "4", "auto", "z"},
      {"--recompute", "none", "full", "x"},
      {"--attention", "fused", "unfused", "x"},
      {"--schedule", "gpipe", "interleaved:2", "interleaved:0", "zb-h1", ""},
      {"--precision", "fp32", "fp8", "int4"},
      {"--stage-layers", "6,6", "1,,2", "x", "-1,13"},
      {"--headroom", "0.1", "1", "-0.5", "nan"},
      {"--rank", "0", "7", "100"},
      {"--sequence-parallel"},
      {"--json"}};
  std::mt19937 rng(5);
  for (int i = 0; i < 120; ++i) {
    std::vector<std::string> args = {"explain"};
    for (const auto& flag : flags) {
      if (rng() % 3 != 0) continue;
      args.push_back(flag[0]);
      if (flag.size() > 1) args.push_back(flag[1 + rng() % (flag.size() - 1)]);
    }
    const CliRun r = run(args);
    std::string line;
    for (const auto& a : args) line += a + " ";
    EXPECT_TRUE(r.status == 0 || r.status == 1 || r.status == 2) << r.status << ": " << line << "\n" << r.err;
    expect_no_crash_text(r);
    if (r.status == 2) {
      EXPECT_FALSE(r.err.empty()) << line;
    }
  }
}

}  // namespace
