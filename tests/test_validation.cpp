// Validation: each rule fires with the field it concerns, and a plan with
// many faults gets all of them reported at once.
#include <gtest/gtest.h>

#include <optional>

#include <cmath>

#include "model/explain.hpp"
#include "model/report_json.hpp"
#include "test_support.hpp"

namespace meshplan {
namespace {
using namespace testing_support;

struct RuleCase {
  const char* name;
  const char* model;
  const char* cluster;
  std::int64_t world;
  const char* mesh;
  std::int64_t micro_batch, global_batch;
  const char* field;     // the problem's `where`
  const char* fragment;  // part of its message
  void (*tweak)(Plan&) = nullptr;
};

class Rule : public ::testing::TestWithParam<RuleCase> {};

TEST_P(Rule, Fires) {
  const auto c = GetParam();
  const auto model = must(load_model(c.model));
  const auto cluster = must(load_cluster(c.cluster));
  Plan plan = plan_with(c.mesh, c.micro_batch, c.global_batch);
  if (c.tweak) c.tweak(plan);
  const auto ex = explain_plan(model, cluster, {c.world, 0}, plan);
  EXPECT_FALSE(ex.valid);
  bool found = false;
  for (const auto& p : ex.problems) {
    found = found || (p.where == c.field && p.message.find(c.fragment) != std::string::npos);
  }
  EXPECT_TRUE(found) << c.name << ": expected " << c.field << " / " << c.fragment << "\n" << messages(ex.problems);
}

// meshplan holds every device of the job in its topology graph: a world
// above kMaxMeshDevices is refused by the validator (the CLI, the studio and
// plan files all ask it) before anything is built for it.
TEST(Validation, RefusesMoreDevicesThanItModels) {
  const ModelSpec model = must(load_model("gpt2-124m"));
  const ClusterSpec cluster = must(load_cluster("dgx-a100"));
  const LayerGraph graph = build_layer_graph(model, model.default_seq_len());
  const std::int64_t world = kMaxMeshDevices * 2;
  Plan plan;
  plan.mesh.axes = {{Axis::dp, world}};
  plan.global_batch = world;
  const Problems problems = validate_plan(model, graph, cluster, Deployment{world, 0}, plan);
  ASSERT_FALSE(problems.empty());
  EXPECT_EQ(problems.front().where, "world_size");
  EXPECT_NE(problems.front().message.find("at most 1048576"), std::string::npos) << messages(problems);
  plan.mesh.axes = {{Axis::dp, kMaxMeshDevices}};
  plan.global_batch = kMaxMeshDevices;
  for (const Problem& p : validate_plan(model, graph, cluster, Deployment{kMaxMeshDevices, 0}, plan)) {
    EXPECT_NE(p.where, "world_size") << p.message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Rules, Rule,
    ::testing::Values(
        RuleCase{"product", "gpt2-124m", "dgx-a100", 16, "dp=4,tp=2", 1, 4, "mesh", "must equal the world size (16"},
        RuleCase{"whole_nodes", "gpt2-124m", "dgx-a100", 12, "dp=12", 1, 12, "world_size", "not a whole number of dgx-a100 nodes"},
        RuleCase{"tp_heads", "gpt3-175b", "dgx-a100", 64, "dp=1,tp=64", 1, 1, "mesh.tp", "must divide the attention heads (96)"},
        RuleCase{"tp_ffn", MESHPLAN_TEST_DATA "/odd-ffn.yaml", "dgx-a100", 8, "tp=8", 1, 1, "mesh.tp",
                 "must divide the feed-forward size (100)"},
        RuleCase{"pp_layers", "gpt2-124m", "dgx-a100", 8, "pp=8", 1, 8, "mesh.pp", "do not divide evenly"},
        RuleCase{"pp_too_many", "gpt2-124m", "dgx-a100", 16, "pp=16", 1, 16, "mesh.pp", "only 12 layers"},
        RuleCase{"batch", "gpt2-124m", "dgx-a100", 8, "dp=8", 2, 12, "global_batch", "not a multiple of micro-batch 2"},
        RuleCase{"micro_batch", "gpt2-124m", "dgx-a100", 8, "dp=8", 0, 8, "micro_batch", "at least 1"},
        RuleCase{"interleaved_m", "gpt2-124m", "dgx-a100", 4, "pp=4", 1, 6, "schedule", "multiple of pp (4)",
                 [](Plan& p) { p.schedule = {ScheduleKind::interleaved, 3}; }},
        RuleCase{"interleaved_layers", "gpt2-124m", "dgx-a100", 4, "pp=4", 1, 8, "schedule", "pp x v = 20",
                 [](Plan& p) { p.schedule = {ScheduleKind::interleaved, 5}; }},
        RuleCase{"stage_layers", "gpt2-124m", "dgx-a100", 2, "pp=2", 1, 8, "stage_layers", "sum to the model's 12",
                 [](Plan& p) { p.stage_layers = {5, 6}; }},
        RuleCase{"fp8_on_a100", "gpt2-124m", "dgx-a100", 1, "dp=1", 1, 1, "precision", "no fp8 support",
                 [](Plan& p) { p.precision = Precision::fp8; }},
        RuleCase{"cp_seq", "llama2-7b", "dgx-a100", 3, "cp=3", 1, 1, "mesh.cp", "must divide the sequence length (4096)"},
        RuleCase{"ep_dense", "llama2-7b", "dgx-a100", 2, "ep=2", 1, 2, "mesh.ep", "mixture-of-experts"},
        // Sequence parallelism splits the sequence over tp: Megatron-LM asserts tp divides it.
        RuleCase{"sp_seq", "gpt2-124m", "dgx-a100", 4, "tp=4", 1, 1, "sequence_parallel",
                 "splits each sequence of 1022 tokens over tp (4), which must divide it; use a sequence length that is a "
                 "multiple of 4",
                 [](Plan& p) {
                   p.sequence_parallel = true;
                   p.seq_len = 1022;
                 }},
        RuleCase{"sp_seq_cp", "llama2-7b", "dgx-a100", 8, "cp=2,tp=4", 1, 1, "sequence_parallel",
                 "splits each cp rank's sequence of 1026 tokens over tp (4)", [](Plan& p) {
                   p.sequence_parallel = true;
                   p.seq_len = 2052;
                 }},
        RuleCase{"expert_tp_dense", "llama2-7b", "dgx-a100", 2, "tp=2", 1, 1, "expert_tensor_parallel",
                 "needs a mixture-of-experts model", [](Plan& p) { p.expert_tensor_parallel = 1; }},
        RuleCase{"expert_tp_value", "mixtral-8x7b", "dgx-h100", 4, "tp=4", 1, 1, "expert_tensor_parallel",
                 "must be 1 (experts whole, their tp ranks join ep) or tp (4, the default), got 2",
                 [](Plan& p) { p.expert_tensor_parallel = 2; }},
        RuleCase{"expert_tp_without_sp", "mixtral-8x7b", "dgx-h100", 4, "ep=2,tp=2", 1, 2, "expert_tensor_parallel",
                 "turn it on", [](Plan& p) { p.expert_tensor_parallel = 1; }},
        RuleCase{"expert_tp_order", "mixtral-8x7b", "dgx-h100", 8, "ep=2,cp=2,tp=2", 1, 2, "expert_tensor_parallel",
                 "ep must sit directly outside tp in the mesh order (e.g. cp=2,ep=2,tp=2), got ep=2,cp=2,tp=2",
                 [](Plan& p) {
                   p.expert_tensor_parallel = 1;
                   p.sequence_parallel = true;
                 }},
        RuleCase{"expert_tp_experts", "mixtral-8x7b", "dgx-h100", 16, "ep=4,tp=4", 1, 4, "mesh.ep",
                 "ep x tp (16) must divide the experts (8)", [](Plan& p) {
                   p.expert_tensor_parallel = 1;
                   p.sequence_parallel = true;
                 }},
        RuleCase{"cnn_tp", "resnet50", "dgx-a100", 2, "tp=2", 1, 1, "mesh.tp", "not supported for cnn"},
        RuleCase{"mlp_tp", "mlp-fashion", "dgx-a100", 3, "tp=3", 1, 1, "mesh.tp", "must divide the output size (256)"},
        RuleCase{"mlp_sp", "mlp-fashion", "dgx-a100", 2, "tp=2", 1, 1, "sequence_parallel", "have none",
                 [](Plan& p) { p.sequence_parallel = true; }},
        RuleCase{"learned_positions", "gpt2-124m", "dgx-a100", 1, "dp=1", 1, 1, "seq_len", "1024 learned positions",
                 [](Plan& p) { p.seq_len = 2048; }},
        RuleCase{"zero_stage", "gpt2-124m", "dgx-a100", 2, "dp=2", 1, 2, "zero", "must be 0, 1, 2 or 3",
                 [](Plan& p) { p.zero_stage = 4; }}),
    [](const auto& test_info) { return std::string(test_info.param.name); });

// Each MLP width over the tp that splits it: the routed experts' over 1 when
// they leave tp; the shared experts' and the dense layers' always over tp.
TEST(Validation, MixtureOfExpertsWidthsSplitOverTheirOwnTp) {
  ModelSpec model = must(load_model("mixtral-8x7b"));
  const auto cluster = must(load_cluster("dgx-h100"));
  model.transformer.ffn = 14337;  // no tp > 1 divides it
  Plan plan = plan_with("ep=4,tp=2", 1, 4);
  plan.sequence_parallel = true;
  auto errors_on_tp = [&](const ModelSpec& m, const Plan& p) {
    std::string found;
    for (const auto& problem : explain_plan(m, cluster, {8, 0}, p).problems) {
      if (problem.severity == Severity::error && problem.where == "mesh.tp") found += problem.message + "\n";
    }
    return found;
  };
  EXPECT_NE(errors_on_tp(model, plan).find("feed-forward size (14337)"), std::string::npos);
  plan.expert_tensor_parallel = 1;
  EXPECT_EQ(errors_on_tp(model, plan), "");
  model.transformer.shared_expert_ffn = 1001;
  EXPECT_NE(errors_on_tp(model, plan).find("shared experts' width (1001)"), std::string::npos);
  model.transformer.shared_expert_ffn = 0;
  model.transformer.dense_layers = {0};
  model.transformer.dense_ffn = 1001;
  EXPECT_NE(errors_on_tp(model, plan).find("dense layers' feed-forward size (1001)"), std::string::npos);
}

TEST(Validation, RankOutsideWorld) {
  const auto model = must(load_model("gpt2-124m"));
  const auto cluster = must(load_cluster("dgx-a100"));
  const auto ex = explain_plan(model, cluster, {8, 8}, plan_with("dp=8", 1, 8));
  ASSERT_FALSE(ex.valid);
  EXPECT_EQ(ex.problems[0].where, "rank");
}

// An fp8 plan prices its LM head and attention core at bf16 (gemm_in_fp8): a device without a bf16 figure is refused.
TEST(Validation, Fp8NeedsTheDevicesBf16Peak) {
  const auto model = must(load_model("gpt2-124m"));
  auto cluster = must(load_cluster("dgx-h100"));
  Plan plan = plan_with("dp=8", 1, 8);
  plan.precision = Precision::fp8;
  EXPECT_TRUE(explain_plan(model, cluster, {8, 0}, plan).valid);
  cluster.device.peak_flops_per_s.erase(Dtype::bf16);
  const auto ex = explain_plan(model, cluster, {8, 0}, plan);
  ASSERT_FALSE(ex.valid);
  EXPECT_NE(messages(ex.problems).find("fp8 runs the LM head and the attention core in bf16: h100-sxm has no bf16 support"),
            std::string::npos)
      << messages(ex.problems);
}

TEST(Validation, ReportsEveryProblemAtOnce) {
  const auto model = must(load_model("gpt3-175b"));
  const auto cluster = must(load_cluster("dgx-a100"));
  Plan plan = plan_with("dp=3,tp=64,pp=5", 7, 100);
  plan.precision = Precision::fp8;
  const auto ex = explain_plan(model, cluster, {1024, 0}, plan);
  std::set<std::string> fields;
  for (const auto& p : ex.problems) {
    if (p.severity == Severity::error) fields.insert(p.where);
  }
  for (const char* field : {"mesh", "global_batch", "mesh.tp", "mesh.pp", "precision"}) {
    EXPECT_TRUE(fields.contains(field)) << field << "\n" << messages(ex.problems);
  }
}

TEST(Validation, WarningsDoNotInvalidate) {
  const auto model = must(load_model("gpt2-124m"));
  const auto cluster = must(load_cluster("dgx-a100"));
  Plan plan = plan_with("dp=1,tp=1", 1, 1);
  plan.zero_stage = 2;              // no dp to shard over
  plan.sequence_parallel = true;    // no tp to work within
  plan.cp_comm = CpComm::all_gather;  // no cp to exchange over
  plan.precision = Precision::fp32;
  plan.fp32_gradients = true;       // fp32 already
  const auto ex = explain_plan(model, cluster, {1, 0}, plan);
  EXPECT_TRUE(ex.valid) << messages(ex.problems);
  std::set<std::string> warned;
  for (const auto& p : ex.problems) {
    if (p.severity == Severity::warning && p.message.find("no effect") != std::string::npos) warned.insert(p.where);
  }
  for (const char* field : {"zero", "sequence_parallel", "cp_comm", "fp32_gradients"}) {
    EXPECT_TRUE(warned.contains(field)) << field << "\n" << messages(ex.problems);
  }
}

// tp that does not divide the key/value heads replicates them over tp
// (kv_tp_split): a warning that says so, not an error. Llama 3 8B's 8 kv
// heads on tp = 16 (its 32 query heads split) is a valid plan on two nodes.
TEST(Validation, KeyValueHeadsTpDoesNotDivideAreReplicatedWithAWarning) {
  const auto model = must(load_model("llama3-8b"));
  const auto cluster = must(load_cluster("dgx-a100"));
  const auto ex = explain_plan(model, cluster, {16, 0}, plan_with("tp=16", 1, 1));
  EXPECT_TRUE(ex.valid) << messages(ex.problems);
  bool warned = false;
  for (const auto& p : ex.problems) {
    EXPECT_FALSE(p.severity == Severity::error && p.where == "mesh.tp") << p.message;
    warned = warned || (p.severity == Severity::warning && p.where == "mesh.tp" &&
                        p.message.find("does not divide the 8 key/value heads") != std::string::npos);
  }
  EXPECT_TRUE(warned) << messages(ex.problems);
}

TEST(Validation, ValidPlansOfTheScalingGuides) {
  // tp x pp <= world size, tp inside a node, the 2-D FSDP x TP mesh of "How to Scale Your Model".
  const auto model = must(load_model("llama3-70b"));
  const auto cluster = must(load_cluster("dgx-h100"));
  const Plan plan = plan_with("fsdp=8,tp=8", 1, 64);
  const auto ex = explain_plan(model, cluster, {64, 0}, plan);
  EXPECT_TRUE(ex.valid) << messages(ex.problems);
}

// micro_batch x data-parallel degree past int64 is an error, not a wrapped
// product (found with fuzz/fuzz_plan_file.cpp and UBSan, where a wrapped
// product divided the global batch and the plan passed; the largest world,
// 2^20 devices, times a micro-batch of 2^43 + 1 wraps too). A micro-batch
// is now at most 2^40, which keeps the product (at most 2^60) from wrapping:
// that bound is what names it.
TEST(Validation, MicroBatchTimesDataParallelPastInt64) {
  const auto model = must(load_model("gpt2-124m"));
  const auto cluster = must(load_cluster("dgx-a100"));
  const Plan plan = plan_with("dp=1024,fsdp=1024", (std::int64_t{1} << 43) + 1, std::int64_t{1} << 20);
  const auto ex = explain_plan(model, cluster, {std::int64_t{1} << 20, 0}, plan);
  EXPECT_FALSE(ex.valid);
  bool found = false;
  for (const auto& p : ex.problems) found = found || (p.where == "micro_batch" && p.message.find("must be at most 2^40") != std::string::npos);
  EXPECT_TRUE(found) << messages(ex.problems);
}

// explain says when an fp8 plan is predicted no faster than the same plan in bf16: gpt2-124m at
// micro-batch 1 on H100s is bound by the host's launches, which the casts add to (0.01507 s a step
// against 0.01132 s when written); at micro-batch 8 fp8 is faster and nothing is said.
TEST(Validation, Fp8NoFasterThanBf16IsNamed) {
  const auto model = must(load_model("gpt2-124m"));
  const auto cluster = must(load_cluster("dgx-h100"));
  const auto note_of = [&](std::int64_t micro_batch) -> std::optional<Problem> {
    Plan plan = plan_with("dp=8", micro_batch, 8 * micro_batch);
    plan.precision = Precision::fp8;
    const auto ex = explain_plan(model, cluster, {8, 0}, plan);
    EXPECT_TRUE(ex.valid) << messages(ex.problems);
    for (const auto& p : ex.problems) {
      if (p.where == "precision") return p;
    }
    return std::nullopt;
  };
  const auto small = note_of(1);
  ASSERT_TRUE(small.has_value());
  EXPECT_EQ(small->severity, Severity::warning);
  EXPECT_NE(small->message.find("fp8 is predicted no faster than bf16 for this plan"), std::string::npos) << small->message;
  EXPECT_NE(small->message.find("against bf16's"), std::string::npos) << small->message;
  EXPECT_FALSE(note_of(8).has_value());
}

// Issue 15, item 1: explain says when dropout masks are a large share of
// the activations, and the JSON carries their bytes. GPT-2 with unfused
// attention keeps the a s^2 attention-dropout mask (about a third of its
// activations); the same model with dropout 0 keeps no masks at all.
TEST(Validation, DropoutMasksOverATenthOfActivationsAreNamed) {
  auto model = must(load_model("gpt2-124m"));
  const auto cluster = must(load_cluster("dgx-h100"));
  Plan plan = plan_with("dp=1", 4, 4);
  plan.attention = Attention::unfused;
  const auto find_note = [](const Explanation& ex) -> const Problem* {
    for (const auto& p : ex.problems) {
      if (p.where == "dropout") return &p;
    }
    return nullptr;
  };
  const auto with_dropout = explain_plan(model, cluster, {1, 0}, plan);
  ASSERT_TRUE(with_dropout.memory);
  const MemoryBreakdown& m = with_dropout.memory->worst().memory;
  ASSERT_GT(m.dropout_mask_bytes, 0.10 * m.activations_bytes);
  const Problem* note = find_note(with_dropout);
  ASSERT_NE(note, nullptr) << messages(with_dropout.problems);
  EXPECT_EQ(note->severity, Severity::warning);
  const int share = static_cast<int>(std::lround(100 * m.dropout_mask_bytes / m.activations_bytes));
  EXPECT_NE(note->message.find(std::to_string(share) + "% of the activations"), std::string::npos) << note->message;
  EXPECT_NE(note->message.find("`dropout: 0`"), std::string::npos) << note->message;
  EXPECT_TRUE(with_dropout.valid);

  const auto json = explanation_to_json(model, cluster, plan, with_dropout);
  EXPECT_DOUBLE_EQ(json["memory_bytes"]["dropout_masks"].get<double>(), m.dropout_mask_bytes);

  model.transformer.dropout = 0;
  const auto without = explain_plan(model, cluster, {1, 0}, plan);
  EXPECT_EQ(find_note(without), nullptr) << messages(without.problems);
  EXPECT_EQ(without.memory->worst().memory.dropout_mask_bytes, 0);
  EXPECT_EQ(explanation_to_json(model, cluster, plan, without)["memory_bytes"]["dropout_masks"].get<double>(), 0);
}

// Below a tenth there is no line: the masks of full recompute are regenerated, not kept.
TEST(Validation, NoDropoutNoteUnderATenth) {
  StageMemory stage;
  stage.memory.activations_bytes = 100;
  stage.memory.dropout_mask_bytes = 10;
  EXPECT_FALSE(dropout_mask_note(stage));
  stage.memory.dropout_mask_bytes = 11;
  EXPECT_TRUE(dropout_mask_note(stage));
}

}  // namespace
}  // namespace meshplan
