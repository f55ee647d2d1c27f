// Plans written as a JAX module, Megatron-LM arguments, a torchtitan TOML and
// a DeepSpeed JSON (model/export.hpp): the fields a plan sets, in each framework's names,
// batch sizes that multiply back to the plan's global batch, and a refusal
// naming the plan field for every plan a framework cannot express.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "model/export.hpp"
#include "model/layer_graph.hpp"
#include "model/model_spec.hpp"
#include "test_support.hpp"

namespace meshplan {
namespace {
using namespace testing_support;

PlanFile plan_file(const std::string& model, const std::string& mesh, std::int64_t micro_batch, std::int64_t global_batch) {
  PlanFile file;
  file.model = must(load_model(model));
  file.cluster = must(load_cluster("dgx-h100"));  // export warns of a plan that does not fit its devices
  file.plan = plan_with(mesh, micro_batch, global_batch);
  file.world_size = file.plan.mesh.world_size();
  return file;
}

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos || ("\n" + text).find("\n" + line + " \\\n") != std::string::npos;
}

const Problem* problem_on(const Problems& problems, const std::string& field, Severity severity) {
  for (const Problem& p : problems)
    if (p.severity == severity && p.where == field) return &p;
  return nullptr;
}
const Problem* error_on(const Problems& problems, const std::string& field) {
  return problem_on(problems, field, Severity::error);
}
const Problem* warning_on(const Problems& problems, const std::string& field) {
  return problem_on(problems, field, Severity::warning);
}

TEST(Export, MegatronArgumentsForALlamaPlan) {
  PlanFile file = plan_file("llama3-8b", "dp=2,pp=2,tp=4", 1, 64);
  file.plan.schedule = Schedule{ScheduleKind::interleaved, 2};
  file.plan.sequence_parallel = true;
  file.plan.zero_stage = 1;
  file.plan.recompute = Recompute::selective;
  file.plan.precision = Precision::bf16;
  const Loaded<std::string> out = export_plan(file, ExportTarget::megatron);
  ASSERT_TRUE(out.ok()) << messages(out.problems);
  for (const char* line :
       {"--tensor-model-parallel-size 4", "--pipeline-model-parallel-size 2", "--num-layers-per-virtual-pipeline-stage 8",
        "--sequence-parallel", "--use-distributed-optimizer", "--micro-batch-size 1", "--global-batch-size 64",
        "--recompute-granularity selective", "--bf16", "--num-layers 32", "--hidden-size 4096", "--num-attention-heads 32",
        "--group-query-attention", "--num-query-groups 8", "--ffn-hidden-size 14336", "--swiglu",
        "--position-embedding-type rope", "--rotary-base 500000", "--normalization RMSNorm",
        "--untie-embeddings-and-output-weights", "--disable-bias-linear"}) {
    EXPECT_TRUE(has_line(out.value, line)) << line << "\n" << out.value;
  }
  EXPECT_EQ(out.value.find("--context-parallel-size"), std::string::npos) << "cp = 1 is Megatron's default";
}

// A mixture of experts: its expert counts, and a drop-and-pad capacity as
// Megatron-Core's capacity factor with padding; dropless writes neither.
TEST(Export, MegatronExpertCapacityIsDropAndPad) {
  PlanFile file = plan_file("llama3-8b", "dp=2,ep=8", 1, 64);
  file.model.transformer.experts = 16;
  file.model.transformer.top_k = 2;
  const Loaded<std::string> dropless = export_plan(file, ExportTarget::megatron);
  ASSERT_TRUE(dropless.ok()) << messages(dropless.problems);
  for (const char* line : {"--expert-model-parallel-size 8", "--num-experts 16", "--moe-router-topk 2"})
    EXPECT_TRUE(has_line(dropless.value, line)) << line << "\n" << dropless.value;
  EXPECT_EQ(dropless.value.find("capacity"), std::string::npos) << dropless.value;
  file.model.transformer.capacity_factor = 1.25;
  const Loaded<std::string> padded = export_plan(file, ExportTarget::megatron);
  ASSERT_TRUE(padded.ok()) << messages(padded.problems);
  for (const char* line : {"--moe-expert-capacity-factor 1.25", "--moe-pad-expert-input-to-capacity"})
    EXPECT_TRUE(has_line(padded.value, line)) << line << "\n" << padded.value;
  EXPECT_EQ(padded.value.find("shared-expert"), std::string::npos) << padded.value;
  file.model.transformer.shared_expert_ffn = 2048;  // Megatron-Core's SharedExpertMLP
  const Loaded<std::string> shared = export_plan(file, ExportTarget::megatron);
  ASSERT_TRUE(shared.ok()) << messages(shared.problems);
  EXPECT_TRUE(has_line(shared.value, "--moe-shared-expert-intermediate-size 2048")) << shared.value;
  EXPECT_TRUE(has_line(shared.value, "--ffn-hidden-size 14336")) << shared.value;
  EXPECT_EQ(shared.value.find("moe-layer-freq"), std::string::npos) << shared.value;
  // Dense first layers: the dense width as --ffn-hidden-size, the experts' as --moe-ffn-hidden-size, and a
  // 0/1 list a layer.
  file.model.transformer.dense_layers = {0, 1};
  file.model.transformer.dense_ffn = 8192;
  const Loaded<std::string> first_dense = export_plan(file, ExportTarget::megatron);
  ASSERT_TRUE(first_dense.ok()) << messages(first_dense.problems);
  EXPECT_TRUE(has_line(first_dense.value, "--ffn-hidden-size 8192")) << first_dense.value;
  EXPECT_TRUE(has_line(first_dense.value, "--moe-ffn-hidden-size 14336")) << first_dense.value;
  std::string pattern = "--moe-layer-freq \"[0,0";
  for (int layer = 2; layer < 32; ++layer) pattern += ",1";
  EXPECT_TRUE(has_line(first_dense.value, pattern + "]\"")) << first_dense.value;
}

// Experts out of tp: Megatron-Core's expert tensor parallelism 1, its expert
// parallelism ep x tp; torchtitan has no form for it here.
TEST(Export, MegatronWritesExpertTensorParallelism) {
  PlanFile file = plan_file("mixtral-8x7b", "dp=2,ep=2,tp=2", 1, 64);
  file.plan.sequence_parallel = true;
  const Loaded<std::string> in_tp = export_plan(file, ExportTarget::megatron);
  ASSERT_TRUE(in_tp.ok()) << messages(in_tp.problems);
  EXPECT_TRUE(has_line(in_tp.value, "--expert-model-parallel-size 2")) << in_tp.value;
  EXPECT_EQ(in_tp.value.find("expert-tensor-parallel"), std::string::npos) << in_tp.value;
  file.plan.expert_tensor_parallel = 1;
  const Loaded<std::string> out_of_tp = export_plan(file, ExportTarget::megatron);
  ASSERT_TRUE(out_of_tp.ok()) << messages(out_of_tp.problems);
  EXPECT_TRUE(has_line(out_of_tp.value, "--expert-model-parallel-size 4")) << out_of_tp.value;
  EXPECT_TRUE(has_line(out_of_tp.value, "--expert-tensor-parallel-size 1")) << out_of_tp.value;
  EXPECT_TRUE(has_line(out_of_tp.value, "--tensor-model-parallel-size 2")) << out_of_tp.value;
  EXPECT_TRUE(has_line(in_tp.value, "--moe-token-dispatcher-type alltoall")) << in_tp.value;
  file.plan.ep_dispatch = EpDispatch::deduplicated;
  const Loaded<std::string> deep = export_plan(file, ExportTarget::megatron);
  ASSERT_TRUE(deep.ok()) << messages(deep.problems);
  EXPECT_TRUE(has_line(deep.value, "--moe-token-dispatcher-type flex")) << deep.value;
  EXPECT_TRUE(has_line(deep.value, "--moe-enable-deepep")) << deep.value;
  PlanFile titan = plan_file("mixtral-8x7b", "fsdp=4,tp=2", 1, 64);
  titan.plan.sequence_parallel = true;
  titan.plan.expert_tensor_parallel = 1;
  EXPECT_NE(error_on(export_plan(titan, ExportTarget::torchtitan).problems, "expert_tensor_parallel"), nullptr);
}

TEST(Export, MegatronRefusesWhatItCannotRun) {
  PlanFile gpipe = plan_file("llama3-8b", "pp=4", 1, 16);
  gpipe.plan.schedule = Schedule{ScheduleKind::gpipe, 1};
  EXPECT_NE(error_on(export_plan(gpipe, ExportTarget::megatron).problems, "schedule"), nullptr);
  PlanFile fsdp = plan_file("llama3-8b", "fsdp=8", 1, 16);
  EXPECT_NE(error_on(export_plan(fsdp, ExportTarget::megatron).problems, "mesh.fsdp"), nullptr);
  PlanFile zero3 = plan_file("llama3-8b", "dp=8", 1, 16);  // ZeRO-3 on dp: the field at fault is zero
  zero3.plan.zero_stage = 3;
  EXPECT_NE(error_on(export_plan(zero3, ExportTarget::megatron).problems, "zero"), nullptr);
  const PlanFile gemma = plan_file("gemma3-1b", "tp=2", 1, 16);  // GeGLU
  EXPECT_NE(error_on(export_plan(gemma, ExportTarget::megatron).problems, "model.mlp"), nullptr);
  PlanFile uneven = plan_file("llama3-8b", "pp=3", 1, 12);  // 32 layers over 3 stages
  EXPECT_NE(error_on(export_plan(uneven, ExportTarget::megatron).problems, "mesh.pp"), nullptr);
  // Stated, the partition is Megatron-Core's pipeline layout: chunk c on rank c mod pp, the embedding
  // in the first chunk and the loss in the last, as meshplan places them.
  uneven.plan.stage_layers = {10, 11, 11};
  const Loaded<std::string> layout = export_plan(uneven, ExportTarget::megatron);
  ASSERT_TRUE(layout.ok()) << messages(layout.problems);
  EXPECT_TRUE(has_line(layout.value, "--pipeline-model-parallel-layout \"Et*10|t*11|t*11L\"")) << layout.value;
  PlanFile llama405 = plan_file("llama3-405b", "pp=16,tp=8", 1, 64);
  llama405.plan.schedule = Schedule{ScheduleKind::interleaved, 2};
  llama405.plan.stage_layers = std::vector<std::int64_t>(32, 4);
  llama405.plan.stage_layers.front() = llama405.plan.stage_layers.back() = 3;  // Llama 3's one layer less on each end
  const Loaded<std::string> interleaved = export_plan(llama405, ExportTarget::megatron);
  ASSERT_TRUE(interleaved.ok()) << messages(interleaved.problems);
  std::string expected = "Et*3";
  for (int c = 1; c < 31; ++c) expected += "|t*4";
  expected += "|t*3L";
  EXPECT_TRUE(has_line(interleaved.value, "--pipeline-model-parallel-layout \"" + expected + "\"")) << interleaved.value;
  EXPECT_EQ(interleaved.value.find("--num-layers-per-virtual-pipeline-stage"), std::string::npos);
  const PlanFile mlp = plan_file("mlp-seed", "dp=2", 16, 64);
  EXPECT_NE(error_on(export_plan(mlp, ExportTarget::megatron).problems, "model.kind"), nullptr);
  PlanFile zero2 = plan_file("llama3-8b", "dp=8", 1, 16);
  zero2.plan.zero_stage = 2;
  const Loaded<std::string> approximate = export_plan(zero2, ExportTarget::megatron);
  ASSERT_TRUE(approximate.ok());
  EXPECT_EQ(approximate.problems.size(), 1u);
  EXPECT_NE(approximate.value.find("# approximate: zero: Megatron-LM's distributed optimizer"), std::string::npos)
      << approximate.value;
}

TEST(Export, TorchtitanTomlKeepsTheBatchAndTheMesh) {
  PlanFile file = plan_file("llama3-8b", "dp=2,fsdp=4,tp=2", 2, 256);
  file.plan.sequence_parallel = true;
  file.plan.recompute = Recompute::full;
  const Loaded<std::string> out = export_plan(file, ExportTarget::torchtitan);
  ASSERT_TRUE(out.ok()) << messages(out.problems);
  for (const char* line : {"[parallelism]", "data_parallel_replicate_degree = 2", "data_parallel_shard_degree = 4",
                           "tensor_parallel_degree = 2", "pipeline_parallel_degree = 1", "[training]",
                           "local_batch_size = 2", "global_batch_size = 256", "seq_len = 8192",
                           "mixed_precision_param = \"bfloat16\"", "[activation_checkpoint]", "mode = \"full\""}) {
    EXPECT_TRUE(has_line(out.value, line)) << line << "\n" << out.value;
  }
  // global = local x data-parallel x accumulation: 256 = 2 x 8 x 16, the plan's micro-batches.
  EXPECT_EQ(file.plan.micro_batches(), 16);

  PlanFile pipelined = plan_file("llama3-8b", "pp=4,tp=2", 1, 32);
  pipelined.plan.sequence_parallel = true;
  pipelined.plan.zero_stage = 0;
  const Loaded<std::string> pp = export_plan(pipelined, ExportTarget::torchtitan);
  ASSERT_TRUE(pp.ok()) << messages(pp.problems);
  for (const char* line : {"pipeline_parallel_degree = 4", "pipeline_parallel_schedule = \"1F1B\"",
                           "pipeline_parallel_microbatch_size = 1", "pipeline_parallel_layers_per_stage = 8",
                           "local_batch_size = 32"}) {
    EXPECT_TRUE(has_line(pp.value, line)) << line << "\n" << pp.value;
  }
}

// torchtitan's selective_ac_option = "op" is meshplan's selective-op; meshplan's
// selective (the attention core) has no torchtitan form and, under SDPA, keeps
// what none keeps: it is written as none, with a note.
TEST(Export, TorchtitanCheckpointingIsThePlansRecompute) {
  PlanFile op = plan_file("llama3-8b", "fsdp=8", 1, 16);
  op.plan.recompute = Recompute::selective_op;
  const Loaded<std::string> out = export_plan(op, ExportTarget::torchtitan);
  ASSERT_TRUE(out.ok()) << messages(out.problems);
  EXPECT_TRUE(has_line(out.value, "mode = \"selective\"")) << out.value;
  EXPECT_TRUE(has_line(out.value, "selective_ac_option = \"op\"")) << out.value;
  EXPECT_EQ(out.value.find("# approximate: recompute:"), std::string::npos) << out.value;

  PlanFile core = op;
  core.plan.recompute = Recompute::selective;
  const Loaded<std::string> none = export_plan(core, ExportTarget::torchtitan);
  ASSERT_TRUE(none.ok()) << messages(none.problems);
  EXPECT_TRUE(has_line(none.value, "mode = \"none\"")) << none.value;
  EXPECT_FALSE(has_line(none.value, "selective_ac_option = \"op\"")) << none.value;
  EXPECT_NE(none.value.find("# approximate: recompute:"), std::string::npos) << none.value;

  PlanFile op_dp = plan_file("llama3-8b", "dp=8", 1, 16);
  op_dp.plan.recompute = Recompute::selective_op;
  const Loaded<std::string> megatron = export_plan(op_dp, ExportTarget::megatron);
  ASSERT_TRUE(megatron.ok()) << messages(megatron.problems);
  EXPECT_NE(megatron.value.find("--recompute-granularity selective"), std::string::npos) << megatron.value;
  bool warned = false;
  for (const Problem& p : megatron.problems) warned = warned || (p.severity == Severity::warning && p.where == "recompute");
  EXPECT_TRUE(warned) << messages(megatron.problems);
}

// Megatron-Core names each way of moving keys and values (--cp-comm-type);
// torchtitan's context parallelism is ring attention only.
TEST(Export, ContextParallelExchangeIsTheFrameworksOwn) {
  const std::pair<CpComm, const char*> kinds[] = {
      {CpComm::ring, "p2p"}, {CpComm::all_gather, "allgather"}, {CpComm::all_to_all, "a2a"}};
  for (const auto& [kind, megatron_name] : kinds) {
    PlanFile file = plan_file("llama3-8b", "cp=2,tp=4", 1, 8);
    file.plan.sequence_parallel = true;
    file.plan.cp_comm = kind;
    const Loaded<std::string> megatron = export_plan(file, ExportTarget::megatron);
    ASSERT_TRUE(megatron.ok()) << messages(megatron.problems);
    EXPECT_NE(megatron.value.find(std::string("--cp-comm-type ") + megatron_name), std::string::npos) << megatron.value;
    const Loaded<std::string> torchtitan = export_plan(file, ExportTarget::torchtitan);
    ASSERT_TRUE(torchtitan.ok()) << messages(torchtitan.problems);
    EXPECT_TRUE(has_line(torchtitan.value, "context_parallel_degree = 2")) << torchtitan.value;
    EXPECT_EQ(torchtitan.value.find("# approximate: cp_comm:") != std::string::npos, kind != CpComm::ring) << torchtitan.value;
  }
}

// Gradient precision is each framework's own switch: Megatron-LM reduces in
// fp32 for bf16 unless --grad-reduce-in-bf16 (and in fp16 for fp16 unless
// --accumulate-allreduce-grads-in-fp32); torchtitan's mixed_precision_reduce;
// DeepSpeed's grad_accum_dtype and communication_data_type.
TEST(Export, GradientPrecisionIsTheFrameworksOwnSwitch) {
  for (bool fp32 : {false, true}) {
    PlanFile file = plan_file("llama3-8b", "dp=2,tp=4", 1, 8);
    file.plan.fp32_gradients = fp32;
    const Loaded<std::string> megatron = export_plan(file, ExportTarget::megatron);
    ASSERT_TRUE(megatron.ok()) << messages(megatron.problems);
    EXPECT_EQ(megatron.value.find("--grad-reduce-in-bf16") != std::string::npos, !fp32) << megatron.value;
    EXPECT_EQ(megatron.value.find("--accumulate-allreduce-grads-in-fp32"), std::string::npos) << megatron.value;
    file.plan.precision = Precision::fp16;
    const Loaded<std::string> fp16 = export_plan(file, ExportTarget::megatron);
    ASSERT_TRUE(fp16.ok()) << messages(fp16.problems);
    EXPECT_EQ(fp16.value.find("--accumulate-allreduce-grads-in-fp32") != std::string::npos, fp32) << fp16.value;
    EXPECT_EQ(fp16.value.find("--grad-reduce-in-bf16"), std::string::npos) << fp16.value;

    PlanFile sharded = plan_file("llama3-8b", "fsdp=8", 1, 8);
    sharded.plan.fp32_gradients = fp32;
    const Loaded<std::string> torchtitan = export_plan(sharded, ExportTarget::torchtitan);
    ASSERT_TRUE(torchtitan.ok()) << messages(torchtitan.problems);
    // torchtitan reduces in float32 whatever it is told (0.1.0 takes no other
    // mixed_precision_reduce): a 16-bit plan is written with a note.
    EXPECT_EQ(has_line(torchtitan.value, "mixed_precision_reduce = \"float32\""), fp32) << torchtitan.value;
    bool noted = false;
    for (const Problem& p : torchtitan.problems) noted = noted || (p.severity == Severity::warning && p.where == "fp32_gradients");
    EXPECT_EQ(noted, !fp32) << messages(torchtitan.problems);
    const Loaded<std::string> deepspeed = export_plan(sharded, ExportTarget::deepspeed);
    ASSERT_TRUE(deepspeed.ok()) << messages(deepspeed.problems);
    const auto j = nlohmann::json::parse(deepspeed.value);
    EXPECT_EQ(j.contains("communication_data_type"), fp32) << deepspeed.value;
    if (fp32) {
      EXPECT_EQ(j["data_types"]["grad_accum_dtype"], "fp32") << deepspeed.value;
    }
    // Without ZeRO, DeepSpeed's BF16_Optimizer accumulates in fp32 unless told: a 16-bit plan says bf16.
    PlanFile replicated = plan_file("llama3.2-1b", "dp=8", 1, 8);
    replicated.plan.precision = Precision::bf16;
    replicated.plan.zero_stage = 0;
    replicated.plan.fp32_gradients = fp32;
    const auto ddp = nlohmann::json::parse(export_plan(replicated, ExportTarget::deepspeed).value);
    EXPECT_EQ(ddp["data_types"]["grad_accum_dtype"], fp32 ? "fp32" : "bf16") << ddp.dump();
    const Loaded<std::string> jax = export_plan(sharded, ExportTarget::jax);
    ASSERT_TRUE(jax.ok()) << messages(jax.problems);
    EXPECT_NE(jax.value.find(fp32 ? "GRAD_DTYPE = 'float32'" : "GRAD_DTYPE = 'bfloat16'"), std::string::npos) << jax.value;
  }
}

// The chunked tp overlap is Megatron-LM's --tp-comm-overlap and torchtitan's
// async tensor parallelism (which needs the model compiled: the export turns
// compile on, and says what that changes); JAX leaves it to XLA (a warning).
// Nothing is written where it does not apply (no sequence parallelism).
TEST(Export, TpCommOverlapIsEachFrameworksOwnSwitch) {
  for (bool overlap : {false, true}) {
    PlanFile file = plan_file("llama3-8b", "dp=2,tp=4", 1, 8);
    file.plan.sequence_parallel = true;
    file.plan.tp_comm_overlap = overlap;
    const Loaded<std::string> megatron = export_plan(file, ExportTarget::megatron);
    ASSERT_TRUE(megatron.ok()) << messages(megatron.problems);
    EXPECT_EQ(has_line(megatron.value, "--tp-comm-overlap"), overlap) << megatron.value;
    const Loaded<std::string> torchtitan = export_plan(file, ExportTarget::torchtitan);
    ASSERT_TRUE(torchtitan.ok()) << messages(torchtitan.problems);
    EXPECT_EQ(has_line(torchtitan.value, "enable_async_tensor_parallel = true"), overlap) << torchtitan.value;
    EXPECT_EQ(torchtitan.value.find("[compile]") != std::string::npos, overlap) << torchtitan.value;
    const Loaded<std::string> jax = export_plan(file, ExportTarget::jax);
    ASSERT_TRUE(jax.ok()) << messages(jax.problems);
    for (const auto* problems : {&torchtitan.problems, &jax.problems}) {
      bool noted = false;
      for (const Problem& p : *problems) noted = noted || (p.severity == Severity::warning && p.where == "tp_comm_overlap");
      EXPECT_EQ(noted, overlap) << messages(*problems);
    }
  }
  // Megatron-Core's overlapped pipeline transfers, where the plan interleaves.
  PlanFile pipelined = plan_file("llama3-8b", "pp=4", 1, 8);
  pipelined.plan.schedule = {ScheduleKind::interleaved, 2};
  EXPECT_EQ(export_plan(pipelined, ExportTarget::megatron).value.find("--overlap-p2p-communication"), std::string::npos);
  pipelined.plan.overlap_p2p_comm = true;
  const Loaded<std::string> p2p = export_plan(pipelined, ExportTarget::megatron);
  ASSERT_TRUE(p2p.ok()) << messages(p2p.problems);
  EXPECT_TRUE(has_line(p2p.value, "--overlap-p2p-communication")) << p2p.value;
  PlanFile unsequenced = plan_file("llama3-8b", "dp=2,tp=4", 1, 8);
  unsequenced.plan.sequence_parallel = false;
  unsequenced.plan.tp_comm_overlap = true;  // validation refuses it; the writers add nothing it cannot run
  const std::string args = export_plan(unsequenced, ExportTarget::megatron).value;
  EXPECT_EQ(args.find("--tp-comm-overlap"), std::string::npos) << args;
}

// The data-parallel overlaps the plan prices are each framework's own switch:
// Megatron-LM reduces after the backward and gathers ZeRO's updated weights
// after the step unless told (--overlap-grad-reduce, --overlap-param-gather);
// DeepSpeed overlaps the reduction from ZeRO-2 up (overlap_comm); DeepSpeed
// and torchtitan say where they cannot run what the plan prices.
TEST(Export, DataParallelOverlapsAreEachFrameworksOwnSwitch) {
  auto warned = [](const Problems& problems, const char* where) {
    bool noted = false;
    for (const Problem& p : problems) noted = noted || (p.severity == Severity::warning && p.where == where);
    return noted;
  };
  for (bool reduce_overlapped : {false, true}) {
    for (bool gather_overlapped : {false, true}) {
      SCOPED_TRACE(std::to_string(reduce_overlapped) + std::to_string(gather_overlapped));
      PlanFile file = plan_file("gpt2-124m", "dp=4", 1, 8);
      file.plan.zero_stage = 1;
      file.plan.overlap_gradient_reduction = reduce_overlapped;
      file.plan.overlap_zero_gather = gather_overlapped;  // validation refuses it without the reduction overlapped
      const bool gathered = reduce_overlapped && gather_overlapped;
      const Loaded<std::string> megatron = export_plan(file, ExportTarget::megatron);
      ASSERT_TRUE(megatron.ok()) << messages(megatron.problems);
      EXPECT_EQ(has_line(megatron.value, "--overlap-grad-reduce"), reduce_overlapped) << megatron.value;
      EXPECT_EQ(has_line(megatron.value, "--overlap-param-gather"), gathered) << megatron.value;
      const Loaded<std::string> deepspeed = export_plan(file, ExportTarget::deepspeed);
      ASSERT_TRUE(deepspeed.ok()) << messages(deepspeed.problems);
      EXPECT_EQ(warned(deepspeed.problems, "overlap_gradient_reduction"), reduce_overlapped) << messages(deepspeed.problems);
      EXPECT_EQ(warned(deepspeed.problems, "overlap_zero_gather"), gathered) << messages(deepspeed.problems);
      file.plan.zero_stage = 2;
      const Loaded<std::string> stage2 = export_plan(file, ExportTarget::deepspeed);
      ASSERT_TRUE(stage2.ok()) << messages(stage2.problems);
      EXPECT_EQ(nlohmann::json::parse(stage2.value)["zero_optimization"]["overlap_comm"].get<bool>(), reduce_overlapped);
      EXPECT_FALSE(warned(stage2.problems, "overlap_gradient_reduction")) << messages(stage2.problems);
    }
    // torchtitan's FSDP2 (ZeRO-2 on dp) reduces during the backward whatever the plan says, and in every
    // micro-batch (here 2 a step), gathering the weights again each time.
    PlanFile titan = plan_file("llama3-8b", "dp=4", 1, 8);
    titan.plan.zero_stage = 2;
    titan.plan.overlap_gradient_reduction = reduce_overlapped;
    const Loaded<std::string> torchtitan = export_plan(titan, ExportTarget::torchtitan);
    ASSERT_TRUE(torchtitan.ok()) << messages(torchtitan.problems);
    EXPECT_EQ(warned(torchtitan.problems, "overlap_gradient_reduction"), !reduce_overlapped)
        << messages(torchtitan.problems);
    EXPECT_NE(messages(torchtitan.problems).find("in every micro-batch's backward (2 a step) and gathers the weights "
                                                 "again in every forward"),
              std::string::npos)
        << messages(torchtitan.problems);
  }
  PlanFile one_micro_batch = plan_file("llama3-8b", "dp=4", 1, 4);
  one_micro_batch.plan.zero_stage = 2;
  EXPECT_EQ(messages(export_plan(one_micro_batch, ExportTarget::torchtitan).problems).find("every micro-batch"),
            std::string::npos);
  // One data-parallel rank reduces nothing: no switch.
  const std::string single = export_plan(plan_file("gpt2-124m", "tp=4", 1, 8), ExportTarget::megatron).value;
  EXPECT_FALSE(has_line(single, "--overlap-grad-reduce")) << single;
}

// The fused loss is Megatron-LM's --cross-entropy-loss-fusion; torchtitan and
// DeepSpeed have no switch for it, and say so.
TEST(Export, FusedLossIsMegatronsLossFusionAndANoteElsewhere) {
  for (Loss loss : {Loss::eager, Loss::fused}) {
    PlanFile file = plan_file("llama3-8b", "dp=2,tp=4", 1, 8);
    file.plan.loss = loss;
    const Loaded<std::string> megatron = export_plan(file, ExportTarget::megatron);
    ASSERT_TRUE(megatron.ok()) << messages(megatron.problems);
    EXPECT_EQ(megatron.value.find("--cross-entropy-loss-fusion") != std::string::npos, loss == Loss::fused) << megatron.value;
    PlanFile sharded = plan_file("llama3-8b", "fsdp=8", 1, 8);
    sharded.plan.loss = loss;
    for (ExportTarget target : {ExportTarget::torchtitan, ExportTarget::deepspeed}) {
      const Loaded<std::string> out = export_plan(sharded, target);
      ASSERT_TRUE(out.ok()) << messages(out.problems);
      bool noted = false;
      for (const Problem& p : out.problems) noted = noted || (p.severity == Severity::warning && p.where == "loss");
      EXPECT_EQ(noted, loss == Loss::fused) << messages(out.problems);
    }
  }
}

TEST(Export, TorchtitanRefusesOrApproximatesWhatItCannotExpress) {
  PlanFile zero1 = plan_file("llama3-8b", "dp=8", 1, 16);
  zero1.plan.zero_stage = 1;
  EXPECT_NE(error_on(export_plan(zero1, ExportTarget::torchtitan).problems, "zero"), nullptr);
  PlanFile zb = plan_file("llama3-8b", "pp=4", 1, 16);
  zb.plan.schedule = Schedule{ScheduleKind::zb_h1, 1};
  EXPECT_NE(error_on(export_plan(zb, ExportTarget::torchtitan).problems, "schedule"), nullptr);
  PlanFile no_sp = plan_file("llama3-8b", "tp=8", 1, 16);
  no_sp.plan.sequence_parallel = false;
  const Loaded<std::string> warned = export_plan(no_sp, ExportTarget::torchtitan);
  ASSERT_TRUE(warned.ok());
  EXPECT_NE(warned.value.find("# approximate: sequence_parallel:"), std::string::npos) << warned.value;
  PlanFile zero2 = plan_file("llama3-8b", "dp=8", 1, 16);
  zero2.plan.zero_stage = 2;
  const Loaded<std::string> sharded = export_plan(zero2, ExportTarget::torchtitan);
  ASSERT_TRUE(sharded.ok());
  EXPECT_TRUE(has_line(sharded.value, "data_parallel_shard_degree = 8")) << sharded.value;
  EXPECT_TRUE(has_line(sharded.value, "fsdp_reshard_after_forward = \"never\"")) << sharded.value;
}

TEST(Export, DeepSpeedJsonForDataParallelPlans) {
  PlanFile file = plan_file("gpt2-124m", "dp=8", 4, 256);
  file.plan.zero_stage = 2;
  file.plan.precision = Precision::bf16;
  const Loaded<std::string> out = export_plan(file, ExportTarget::deepspeed);
  ASSERT_TRUE(out.ok()) << messages(out.problems);
  const auto j = nlohmann::json::parse(out.value);
  EXPECT_EQ(j["train_batch_size"], 256);
  EXPECT_EQ(j["train_micro_batch_size_per_gpu"], 4);
  EXPECT_EQ(j["gradient_accumulation_steps"], 8);
  EXPECT_EQ(j["train_batch_size"].get<int>(),
            j["train_micro_batch_size_per_gpu"].get<int>() * j["gradient_accumulation_steps"].get<int>() * 8);
  EXPECT_EQ(j["zero_optimization"]["stage"], 2);
  EXPECT_EQ(j["bf16"]["enabled"], true);
  EXPECT_EQ(j["gradient_clipping"], 1.0);

  const PlanFile fsdp = plan_file("gpt2-124m", "fsdp=8", 4, 256);
  const Loaded<std::string> stage3 = export_plan(fsdp, ExportTarget::deepspeed);
  ASSERT_TRUE(stage3.ok());
  EXPECT_EQ(nlohmann::json::parse(stage3.value)["zero_optimization"]["stage"], 3);

  for (const char* mesh : {"dp=2,tp=4", "dp=2,pp=4", "dp=4,fsdp=2"}) {
    const PlanFile refused = plan_file("gpt2-124m", mesh, 1, 64);
    const Loaded<std::string> r = export_plan(refused, ExportTarget::deepspeed);
    EXPECT_FALSE(r.ok()) << mesh;
    EXPECT_TRUE(r.value.empty()) << mesh << ": nothing is written for a plan it cannot express";
  }
  EXPECT_EQ(parse_export_target("jax"), ExportTarget::jax);
  EXPECT_EQ(parse_export_target("flax"), std::nullopt);
}

const ExportedArray* array_named(const std::vector<ExportedArray>& arrays, const std::string& name) {
  for (const ExportedArray& a : arrays)
    if (a.name == name) return &a;
  return nullptr;
}

// The module's PartitionSpecs are the ShardingSpec's; fused tensors become
// two arrays with the pair's split; the batch is split like the residual
// stream, less sequence parallelism's tp. (tests/export/jax_check.sh runs
// the module under JAX itself.)
TEST(Export, JaxModuleHasEveryWeightWithItsShardingSpec) {
  PlanFile file = plan_file("llama3-8b", "fsdp=4,tp=2", 1, 16);
  file.plan.sequence_parallel = true;
  file.plan.recompute = Recompute::full;
  const Loaded<std::string> out = export_plan(file, ExportTarget::jax);
  ASSERT_TRUE(out.ok()) << messages(out.problems);
  EXPECT_TRUE(out.problems.empty()) << messages(out.problems);
  for (const char* line : {"MESH_AXES = ('fsdp', 'tp')", "MESH_SHAPE = (4, 2)", "GLOBAL_BATCH = 16",
                           "ACCUMULATION_STEPS = 4  # steps of ACTIVATIONS['batch'] per optimizer update",
                           "REMAT_POLICY = jax.checkpoint_policies.nothing_saveable",
                           "    'layer31.attn.k': ((4096, 1024), P('fsdp', 'tp')),",
                           "    'layer0.mlp.w_gate': ((4096, 14336), P('fsdp', 'tp')),",
                           "    'layer0.mlp.w_out': ((14336, 4096), P('tp', 'fsdp')),",
                           "    'head.output': ((4096, 128256), P('fsdp', 'tp')),",  // [in, out], a Dense kernel
                           "    'batch': ((4, 8192), P('fsdp', None)),", "    ('ffn', 'tp'),"}) {
    EXPECT_TRUE(has_line(out.value, line)) << line << "\n" << out.value.substr(0, 3000);
  }
  const auto params = exported_weights(file, TensorRole::parameters);
  ASSERT_TRUE(params.ok());
  // 32 layers of ln1, q, k, v, out, ln2, w_gate, w_up, w_out; the embedding, the final norm and the output layer.
  EXPECT_EQ(params.value.size(), 32u * 9 + 3);
  const ExportedArray* up = array_named(params.value, "layer5.mlp.w_up");
  ASSERT_NE(up, nullptr);
  const ShardingSpec fused = must(sharding_spec(file.model, file.plan, "layer5.mlp.w_in", TensorRole::parameters));
  EXPECT_EQ(up->spec.partition_text(), fused.partition_text());
  EXPECT_EQ(up->shape, (std::vector<std::int64_t>{4096, 14336}));
  const auto activations = exported_activations(file);
  const ExportedArray* residual = array_named(activations.value, "residual");
  ASSERT_NE(residual, nullptr);
  EXPECT_EQ(residual->spec.partition_text(), "P('fsdp', 'tp', None)") << "sequence parallelism splits the sequence";
}

// DeepSeek-V3 (multi-head latent attention): Megatron-Core's MLA arguments
// (--qk-head-dim is the part without rotation) and no --kv-channels; in JAX,
// the latent down-projections whole on every tp rank and the up-projections
// split over tp, and every weight the cost model counts listed.
TEST(Export, LatentAttentionInMegatronAndJax) {
  PlanFile file = plan_file("deepseek-v3", "ep=8,tp=2", 1, 8);
  file.plan.sequence_parallel = true;
  const Loaded<std::string> megatron = export_plan(file, ExportTarget::megatron);
  ASSERT_TRUE(megatron.ok()) << messages(megatron.problems);
  for (const char* line : {"--multi-latent-attention", "--q-lora-rank 1536", "--kv-lora-rank 512", "--qk-head-dim 128",
                           "--qk-pos-emb-head-dim 64", "--v-head-dim 128", "--num-attention-heads 128",
                           "--moe-shared-expert-intermediate-size 2048", "--moe-ffn-hidden-size 2048",
                           "--moe-router-num-groups 8", "--moe-router-group-topk 4"}) {
    EXPECT_TRUE(has_line(megatron.value, line)) << line << "\n" << megatron.value;
  }
  EXPECT_EQ(megatron.value.find("--kv-channels"), std::string::npos);
  EXPECT_EQ(megatron.value.find("--use-precision-aware-optimizer"), std::string::npos);
  file.plan.bf16_moments = true;  // DeepSeek-V3's bf16 moments: Megatron-Core's precision-aware optimizer
  const Loaded<std::string> moments = export_plan(file, ExportTarget::megatron);
  ASSERT_TRUE(moments.ok()) << messages(moments.problems);
  for (const char* line : {"--use-precision-aware-optimizer", "--exp-avg-dtype bf16", "--exp-avg-sq-dtype bf16"}) {
    EXPECT_TRUE(has_line(moments.value, line)) << line << "\n" << moments.value;
  }
  file.plan.bf16_moments = false;
  // Combined 1F1B: Megatron-Core's flag; torchtitan's all-to-alls stay on the critical path (a warning).
  EXPECT_EQ(megatron.value.find("--overlap-moe-expert-parallel-comm"), std::string::npos);
  file.plan.overlap_expert_parallel = true;
  const Loaded<std::string> overlapped = export_plan(file, ExportTarget::megatron);
  ASSERT_TRUE(overlapped.ok()) << messages(overlapped.problems);
  EXPECT_TRUE(has_line(overlapped.value, "--overlap-moe-expert-parallel-comm")) << overlapped.value;
  bool warned = false;
  for (const Problem& p : export_plan(file, ExportTarget::torchtitan).problems) {
    warned = warned || (p.where == "overlap_expert_parallel" && p.severity == Severity::warning);
  }
  EXPECT_TRUE(warned);
  file.plan.overlap_expert_parallel = false;
  // Megatron-Core's module-level recompute, space-separated as its parser takes it; torchtitan has none.
  file.plan.recompute = Recompute::selective;
  file.plan.recompute_modules = module_bit(RecomputeModule::mla_up_proj) | module_bit(RecomputeModule::moe_act);
  const Loaded<std::string> modules = export_plan(file, ExportTarget::megatron);
  ASSERT_TRUE(modules.ok()) << messages(modules.problems);
  EXPECT_TRUE(has_line(modules.value, "--recompute-modules mla_up_proj moe_act")) << modules.value;
  // The whole-module checkpoints by the same names (DeepSeek-V3's dense layers and shared experts).
  file.plan.recompute_modules = module_bit(RecomputeModule::mlp) | module_bit(RecomputeModule::shared_experts);
  const Loaded<std::string> whole = export_plan(file, ExportTarget::megatron);
  ASSERT_TRUE(whole.ok()) << messages(whole.problems);
  EXPECT_TRUE(has_line(whole.value, "--recompute-modules mlp shared_experts")) << whole.value;
  file.plan.recompute_modules = module_bit(RecomputeModule::mla_up_proj) | module_bit(RecomputeModule::moe_act);
  EXPECT_TRUE(has_line(modules.value, "--recompute-granularity selective")) << modules.value;
  EXPECT_NE(error_on(export_plan(file, ExportTarget::torchtitan).problems, "recompute_modules"), nullptr);
  file.plan.recompute = Recompute::none;
  file.plan.recompute_modules = kDefaultRecomputeModules;
  EXPECT_EQ(megatron.value.find("--group-query-attention"), std::string::npos);

  file.plan.recompute = Recompute::full;
  const Loaded<std::string> jax = export_plan(file, ExportTarget::jax);
  ASSERT_TRUE(jax.ok()) << messages(jax.problems);
  for (const char* line : {"    'layer3.attn.q_down': ((7168, 1536), P(None, None)),",
                           "    'layer3.attn.q_up': ((1536, 24576), P(None, 'tp')),",
                           "    'layer3.attn.kv_down': ((7168, 576), P(None, None)),",
                           "    'layer3.attn.kv_up': ((512, 32768), P(None, 'tp')),",
                           "    'layer3.attn.out': ((16384, 7168), P('tp', None)),"}) {
    EXPECT_TRUE(has_line(jax.value, line)) << line << "\n" << jax.value.substr(0, 3000);
  }
  const auto params = exported_weights(file, TensorRole::parameters);
  ASSERT_TRUE(params.ok()) << messages(params.problems);
  double listed = 0;
  for (const ExportedArray& a : params.value) {
    double elements = 1;
    for (std::int64_t d : a.shape) elements *= static_cast<double>(d);
    listed += elements;
  }
  EXPECT_DOUBLE_EQ(listed, build_layer_graph(file.model, 4096).parameter_count());
}

TEST(Export, JaxPadsTheVocabularyAndRefusesOtherUnevenSplitsAndPipelines) {
  PlanFile gpt = plan_file("gpt2-124m", "tp=4", 1, 8);  // vocabulary 50257
  const Loaded<std::string> padded = export_plan(gpt, ExportTarget::jax);
  ASSERT_TRUE(padded.ok()) << messages(padded.problems);
  ASSERT_EQ(padded.problems.size(), 1u) << messages(padded.problems) << "(said once, not per role)";
  EXPECT_NE(padded.problems[0].message.find("from 50257 to 50260"), std::string::npos) << padded.problems[0].message;
  EXPECT_TRUE(has_line(padded.value, "    'embedding.tokens': ((50260, 768), P('tp', None)),")) << padded.value.substr(0, 3000);

  PlanFile odd = plan_file("gpt2-124m", "fsdp=7", 1, 7);  // hidden 768 over 7
  const Loaded<std::string> refused = export_plan(odd, ExportTarget::jax);
  EXPECT_FALSE(refused.ok());
  ASSERT_NE(error_on(refused.problems, "tensor"), nullptr);
  EXPECT_NE(error_on(refused.problems, "tensor")->message.find("'hidden' (768)"), std::string::npos);

  EXPECT_NE(error_on(export_plan(plan_file("gpt2-124m", "pp=2", 1, 8), ExportTarget::jax).problems, "mesh.pp"), nullptr);
  EXPECT_NE(error_on(export_plan(plan_file("resnet50", "dp=2", 1, 8), ExportTarget::jax).problems, "model.kind"), nullptr);
}


// What every target shares: a plan predicted not to fit is written with a
// warning (it was written with nothing said); context parallelism in
// Megatron-Core and torchtitan needs the sequence in 2 x cp chunks (seq 4098
// at cp 2 was exported, and their load-balanced split cannot cut it).
TEST(Export, EveryTargetWarnsOfAPlanThatDoesNotFitAndCpNeedsTwoChunksPerRank) {
  PlanFile big = plan_file("llama3-70b", "dp=8", 1, 8);
  for (ExportTarget target : {ExportTarget::megatron, ExportTarget::torchtitan, ExportTarget::deepspeed, ExportTarget::jax}) {
    const auto out = export_plan(big, target);
    const Problem* memory = warning_on(out.problems, "memory");
    ASSERT_NE(memory, nullptr) << messages(out.problems);
    EXPECT_NE(memory->message.find("the plan is predicted not to fit: pipeline stage 0 needs"), std::string::npos);
  }
  PlanFile small = plan_file("llama3.2-1b", "dp=8", 1, 8);
  EXPECT_EQ(warning_on(export_plan(small, ExportTarget::megatron).problems, "memory"), nullptr);

  PlanFile cp = plan_file("llama3.2-1b", "dp=2,cp=2", 1, 2);
  cp.plan.zero_stage = 1;
  cp.plan.seq_len = 4098;
  for (ExportTarget target : {ExportTarget::megatron, ExportTarget::torchtitan}) {
    const auto out = export_plan(cp, target);
    const Problem* split = error_on(out.problems, "mesh.cp");
    ASSERT_NE(split, nullptr);
    EXPECT_NE(split->message.find("sequence 4098 does not split into 2 x cp = 4 chunks"), std::string::npos) << split->message;
  }
  cp.plan.seq_len = 4096;
  EXPECT_EQ(error_on(export_plan(cp, ExportTarget::megatron).problems, "mesh.cp"), nullptr);
}

// torchtitan: DDP beside tp, pp or cp stops some releases; cp shards the
// weights over the cp ranks with FSDP2 whatever the plan says. JAX: fp8 is the
// model code's, and the module says so. One cause refusing every tensor is
// said a few times and counted (1,137 lines).
TEST(Export, TorchtitanDdpBesideOtherAxesJaxFp8AndOneCauseCounted) {
  PlanFile ddp = plan_file("llama3.2-1b", "dp=4,tp=2", 1, 8);
  const auto titan = export_plan(ddp, ExportTarget::torchtitan);
  ASSERT_TRUE(titan.ok()) << messages(titan.problems);
  const Problem* guard = warning_on(titan.problems, "mesh.dp");
  ASSERT_NE(guard, nullptr) << messages(titan.problems);
  EXPECT_NE(guard->message.find("DDP has not supported > 1D parallelism"), std::string::npos);
  PlanFile cp = plan_file("llama3.2-1b", "dp=2,cp=2", 1, 2);
  EXPECT_NE(warning_on(export_plan(cp, ExportTarget::torchtitan).problems, "mesh.cp"), nullptr);
  PlanFile sharded = plan_file("llama3.2-1b", "fsdp=4,tp=2", 1, 8);
  sharded.plan.zero_stage = 3;
  EXPECT_EQ(warning_on(export_plan(sharded, ExportTarget::torchtitan).problems, "mesh.dp"), nullptr);

  PlanFile fp8 = plan_file("llama3-8b", "fsdp=8", 1, 8);
  fp8.plan.precision = Precision::fp8;
  const auto jax = export_plan(fp8, ExportTarget::jax);
  ASSERT_TRUE(jax.ok()) << messages(jax.problems);
  EXPECT_NE(warning_on(jax.problems, "precision"), nullptr) << messages(jax.problems);

  PlanFile wide = plan_file("llama3-405b", "fsdp=131072,tp=8", 1, 131072);
  const auto refused = export_plan(wide, ExportTarget::jax);
  EXPECT_FALSE(refused.ok());
  EXPECT_LT(refused.problems.size(), 30u) << messages(refused.problems);
  EXPECT_NE(messages(refused.problems).find("more the same way"), std::string::npos) << messages(refused.problems);
}

}  // namespace
}  // namespace meshplan
