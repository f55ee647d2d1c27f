// The simulator with contention off against the evaluator, over random plans:
// both read the same cost record (model/stage_cost.hpp). Where the event
// engine and the analytical model are the same model (one pipeline stage,
// weights sharded or not) the steps are equal; everywhere, the simulator's
// work is the record, block for block.
//
// Plans are drawn with a fixed seed over model presets (dense, grouped-query,
// a mixture of experts, latent attention with shared experts, an MLP), meshes, micro-batch, recompute, schedule,
// sequence parallelism, ZeRO stage, attention and the overlap switches;
// draws that validate_plan rejects are skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "model/validate.hpp"
#include "simulator/simulate.hpp"
#include "test_support.hpp"

namespace meshplan::sim {
namespace {
using namespace testing_support;

// A small mixture of experts (no preset has one): 8 experts, top-2.
constexpr const char* kMoe = R"(name: moe-test
kind: transformer
source: "test model"
layers: 8
hidden: 1024
heads: 16
kv_heads: 4
ffn: 2816
vocab: 32000
seq_len: 2048
mlp: swiglu
norm: rmsnorm
positions: rotary
tied_embeddings: false
experts: 8
top_k: 2
)";

// DeepSeek-V3's shape, small: multi-head latent attention, shared experts, a dense first layer.
constexpr const char* kLatent = R"(name: mla-test
kind: transformer
source: "test model"
layers: 8
hidden: 1024
heads: 16
q_lora_rank: 384
kv_lora_rank: 256
qk_nope_head_dim: 64
qk_rope_head_dim: 32
v_head_dim: 64
ffn: 512
experts: 8
top_k: 2
shared_expert_ffn: 512
dense_layers: [0]
dense_ffn: 2816
vocab: 32000
seq_len: 2048
mlp: swiglu
norm: rmsnorm
positions: rotary
bias: false
tied_embeddings: false
)";

template <typename T, std::size_t N>
const T& pick(std::mt19937_64& rng, const T (&options)[N]) {
  return options[std::uniform_int_distribution<std::size_t>(0, N - 1)(rng)];
}

struct PlanSetup {
  ModelSpec model;
  ClusterSpec cluster;
  std::int64_t world = 1;
  std::unique_ptr<Evaluator> evaluator;
};

std::vector<PlanSetup> make_setups() {
  std::vector<PlanSetup> setups;
  const std::pair<const char*, const char*> kSetups[] = {
      {"gpt2-124m", "dgx-a100"},     {"llama2-7b", "dgx-h100"}, {"gemma3-1b", "pcie-a100"},
      {"gpt2-350m", "ethernet-10g"}, {"moe", "dgx-h100"},       {"mlp-seed", "dgx-a100"},
      {"gpt-byte-10m", "local-cpu"}, {"mla", "dgx-h100"}};
  for (auto [model_name, cluster_name] : kSetups) {
    for (std::int64_t world : {4, 8, 16, 32}) {
      PlanSetup s;
      const std::string name = model_name;
      s.model = name == "moe" ? must(load_model_text(kMoe, "moe"))
                : name == "mla" ? must(load_model_text(kLatent, "mla"))
                                : must(load_model(model_name));
      s.cluster = must(load_cluster(cluster_name));
      s.world = world;
      s.evaluator = std::make_unique<Evaluator>(s.model, s.cluster, world, s.model.default_seq_len());
      setups.push_back(std::move(s));
    }
  }
  return setups;
}

// A random plan for `s`: the world split into powers of two over `axes` in a
// random order, and every other choice drawn too.
Plan draw_plan(const PlanSetup& s, std::mt19937_64& rng, std::vector<Axis> axes) {
  std::shuffle(axes.begin(), axes.end(), rng);
  std::int64_t sizes[6] = {1, 1, 1, 1, 1, 1};
  for (std::int64_t left = s.world; left > 1; left /= 2) {
    sizes[static_cast<int>(axes[std::uniform_int_distribution<std::size_t>(0, axes.size() - 1)(rng)])] *= 2;
  }
  Plan plan;
  for (Axis axis : axes) {
    if (sizes[static_cast<int>(axis)] > 1) plan.mesh.axes.push_back({axis, sizes[static_cast<int>(axis)]});
  }
  const std::int64_t kMicroBatches[] = {1, 2, 4};
  const Recompute kRecompute[] = {Recompute::none, Recompute::selective, Recompute::full, Recompute::selective_op};
  const char* kSchedules[] = {"1f1b", "gpipe", "interleaved:2", "zb-h1"};
  plan.micro_batch = pick(rng, kMicroBatches);
  plan.global_batch = plan.micro_batch * plan.mesh.data_parallel_size() * std::uniform_int_distribution<std::int64_t>(1, 12)(rng);
  plan.recompute = pick(rng, kRecompute);
  plan.schedule = *parse_schedule(pick(rng, kSchedules));
  plan.sequence_parallel = rng() % 2 == 0;
  plan.zero_stage = static_cast<int>(rng() % 4);
  plan.attention = rng() % 2 == 0 ? Attention::fused : Attention::unfused;
  plan.cp_comm = static_cast<CpComm>(rng() % 3);
  plan.fp32_gradients = rng() % 2 == 0;
  plan.precision = s.cluster.name == "local-cpu" ? Precision::fp32 : Precision::bf16;
  plan.overlap_tensor_parallel = rng() % 2 == 0;
  plan.overlap_gradient_reduction = rng() % 4 != 0;
  plan.overlap_parameter_gather = rng() % 4 != 0;
  if (rng() % 3 == 0) plan.gradient_bucket_bytes = 1024.0 * 1024;
  // Megatron-Core's recompute modules beside the attention core, where the model has them.
  if (plan.recompute == Recompute::selective && s.model.kind == ModelKind::transformer && rng() % 2 == 0) {
    const TransformerDims& t = s.model.transformer;
    plan.recompute_modules |= module_bit(RecomputeModule::layernorm);
    if (t.experts > 0 && rng() % 2 == 0) plan.recompute_modules |= module_bit(RecomputeModule::moe_act);
    if (t.latent_attention() && rng() % 2 == 0) plan.recompute_modules |= module_bit(RecomputeModule::mla_up_proj);
    // Whole-module checkpoints, where the model has the module (their reductions run again in the backward).
    if ((t.experts == 0 || !t.dense_layers.empty()) && rng() % 2 == 0) plan.recompute_modules |= module_bit(RecomputeModule::mlp);
    if (t.shared_expert_ffn > 0 && rng() % 2 == 0) plan.recompute_modules |= module_bit(RecomputeModule::shared_experts);
  }
  // Experts out of tp (valid with sequence parallelism and ep directly outside tp).
  if (s.model.kind == ModelKind::transformer && s.model.transformer.experts > 0) {
    plan.expert_tensor_parallel = rng() % 2;
    plan.ep_dispatch = rng() % 2 == 0 ? EpDispatch::deduplicated : EpDispatch::all_to_all;
    // Combined 1F1B where the schedule and recompute allow it.
    if (expert_overlap_problem(plan).empty()) plan.overlap_expert_parallel = rng() % 2 == 0;
  }
  // FP8 where the device has it: the layers' weight GEMMs and their casts (gemm_in_fp8).
  if (s.cluster.device.peak_for(Dtype::fp8) && rng() % 3 == 0) plan.precision = Precision::fp8;
  // Transformer Engine's chunked tp overlap, where sequence parallelism runs (validate.cpp refuses it elsewhere).
  if (plan.sequence_parallel && rng() % 2 == 0) plan.tp_comm_overlap = true;
  // ZeRO-1/2's gather of the updated weights under the next forward (validate.cpp refuses it without
  // the gradients' reduction overlapped).
  if ((plan.zero_stage == 1 || plan.zero_stage == 2) && plan.overlap_gradient_reduction && rng() % 2 == 0) {
    plan.overlap_zero_gather = true;
  }
  return plan;
}

bool valid(const PlanSetup& s, const Plan& plan) {
  for (const Problem& p : validate_plan(s.model, s.evaluator->graph(), s.cluster, {s.world, 0}, plan)) {
    if (p.severity == Severity::error) return false;
  }
  return true;
}

std::string describe(const PlanSetup& s, const Plan& plan) {
  return s.model.name + " " + s.cluster.name + " " + plan.mesh.to_string() + " b=" + std::to_string(plan.micro_batch) +
         " m=" + std::to_string(plan.micro_batches()) + " " + to_string(plan.schedule) + " " +
         to_string(plan.recompute) +
         (plan.recompute_modules != kDefaultRecomputeModules ? "(" + recompute_modules_text(plan.recompute_modules) + ")" : "") +
         " sp=" + std::to_string(plan.sequence_parallel) +
         " zero=" + std::to_string(plan.zero_stage) + " " + to_string(plan.attention) +
         " overlap-tp=" + std::to_string(plan.overlap_tensor_parallel) +
         " overlap-ep=" + std::to_string(plan.overlap_expert_parallel) +
         " tp-comm-overlap=" + std::to_string(plan.tp_comm_overlap) +
         " zero-gather-overlap=" + std::to_string(plan.overlap_zero_gather) + " " + to_string(plan.precision);
}

// One pipeline stage (meshes over dp, fsdp, tp, cp and ep, ZeRO 0-3), every
// switch: the event engine and the analytical model are then the same model,
// read from the same record, so the steps must be equal: m micro-batches of
// the stage's forward and backward, each with its blocks' collectives
// (backward tp collectives hidden under the W GEMMs block by block, as much
// as the record says, and not at all beside ZB-H1's B pass); with sharded
// weights, each block's gather prefetched and its reduce-scatter after it on
// one stream (model/sharded_replay.hpp); the gradient buckets filling during
// the last gradient pass and reduced one after another, then the optimizer
// and ZeRO-1/2's gather. Relative 1e-12, not ==: the engine adds the m passes one event
// after another where the evaluator multiplies m by one pass, and the two
// sums round differently in the last bits (ulps of the step).
TEST(SimulatedStepExactly, OneStageEqualsTheEvaluator) {
  std::vector<PlanSetup> setups = make_setups();
  std::mt19937_64 rng(20261125);
  int checked = 0, reduced = 0, hidden = 0, sharded = 0, hybrid = 0, experts_out_of_tp = 0, deduplicated = 0;
  int paired = 0, paired_sharded = 0, chunked = 0, gather_overlapped = 0;
  for (int tried = 0; checked < 400 && tried < 40000; ++tried) {
    const PlanSetup& s = setups[std::uniform_int_distribution<std::size_t>(0, setups.size() - 1)(rng)];
    Plan plan = draw_plan(s, rng, {Axis::dp, Axis::fsdp, Axis::tp, Axis::cp, Axis::ep});
    if (!valid(s, plan)) continue;
    const auto sim = simulate_plan(*s.evaluator, plan, {false, false});
    ASSERT_TRUE(sim.ok()) << describe(s, plan) << "\n" << messages(sim.problems);
    ++checked;
    const double simulated = sim.value.summary.step_s, analytical = sim.value.analytical.step_s;
    EXPECT_NEAR(simulated, analytical, 1e-12 * analytical) << describe(s, plan);
    const bool weights_sharded = plan.mesh.size(Axis::fsdp) > 1 || (plan.zero_stage == 3 && plan.mesh.size(Axis::dp) * plan.mesh.size(Axis::ep) > 1);
    if (plan.mesh.size(Axis::dp) * plan.mesh.size(Axis::ep) > 1 && plan.zero_stage < 3) ++reduced;
    if (plan.overlap_tensor_parallel && plan.mesh.size(Axis::tp) > 1) ++hidden;
    // Chunked tp overlap that hides something: the engine's exposed parts against the evaluator's.
    if (tp_comm_overlap_applies(plan) && sim.value.analytical.axis_exposed_s[static_cast<std::size_t>(Axis::tp)] <
                                             sim.value.analytical.axis_communication_s[static_cast<std::size_t>(Axis::tp)]) {
      ++chunked;
    }
    if (weights_sharded) ++sharded;
    // ZeRO's gather of the updated weights under the next forward: the engine replays the part the record exposes.
    if (zero_gather_overlap_applies(plan)) ++gather_overlapped;
    if (weights_sharded && plan.mesh.size(Axis::fsdp) > 1 && plan.zero_stage < 3 && plan.mesh.size(Axis::dp) > 1) ++hybrid;
    if (expert_split(plan).tokens > 1) ++experts_out_of_tp;
    if (plan.ep_dispatch == EpDispatch::deduplicated && expert_split(plan).ep > 1) ++deduplicated;
    // Combined 1F1B that hides something: the engine's paired passes against the evaluator's count of them.
    if (plan.overlap_expert_parallel && plan.micro_batches() > 1 &&
        sim.value.analytical.axis_exposed_s[static_cast<std::size_t>(Axis::ep)] <
            sim.value.analytical.axis_communication_s[static_cast<std::size_t>(Axis::ep)]) {
      ++paired;
      if (weights_sharded) ++paired_sharded;
    }
  }
  EXPECT_EQ(checked, 400);
  EXPECT_GT(paired, 5);
  EXPECT_GT(paired_sharded, 2);
  EXPECT_GT(experts_out_of_tp, 3);
  EXPECT_GT(deduplicated, 3);
  // The draw must reach the cases this test is about.
  EXPECT_GT(reduced, 100);
  EXPECT_GT(hidden, 50);
  EXPECT_GT(chunked, 20);
  EXPECT_GT(gather_overlapped, 20);
  EXPECT_GT(sharded, 100);
  EXPECT_GT(hybrid, 20);
  std::printf("[ exact    ] 400 one-stage plans: %d with a data-parallel reduction, %d hiding tp under W, %d with sharded "
              "weights (%d HSDP), %d with experts out of tp, %d with the deduplicated dispatch, %d pairing all-to-alls "
              "(%d of them sharded), %d chunking tp beside the GEMMs, %d gathering ZeRO's weights under the forward\n",
              reduced, hidden, sharded, hybrid, experts_out_of_tp, deduplicated, paired, paired_sharded, chunked,
              gather_overlapped);
}

// Over every axis, schedule and switch: the work the simulator replays is the
// cost record, block by block (compute, and each collective priced alone),
// so the simulated step's only departures from the analytical one are the
// event model's own (docs/simulator.md, "Where the simulator and the
// evaluator differ"): pipeline fill and drain of unequal stages, transfers
// that overlap compute, gradient buckets, and prefetched weight gathers.
TEST(SimulatedStepExactly, StepWorkIsTheCostRecordOnRandomPlans) {
  std::vector<PlanSetup> setups = make_setups();
  std::mt19937_64 rng(14);
  int checked = 0;
  double widest_gap = 0;
  for (int tried = 0; checked < 200 && tried < 20000; ++tried) {
    const PlanSetup& s = setups[std::uniform_int_distribution<std::size_t>(0, setups.size() - 1)(rng)];
    const Plan plan = draw_plan(s, rng, {Axis::dp, Axis::fsdp, Axis::tp, Axis::pp, Axis::cp, Axis::ep});
    if (!valid(s, plan)) continue;
    const auto work = build_step_work(*s.evaluator, plan, {});
    ASSERT_TRUE(work.ok()) << describe(s, plan) << "\n" << messages(work.problems);
    ++checked;
    const auto placements = place_axes(s.evaluator->topology(), plan.mesh);
    const std::vector<BlockCost> costs = s.evaluator->block_costs(plan, placements);
    const ModelProfile& prof = s.evaluator->profile();
    const bool tp_hides = work.value.overlap_tensor_parallel;
    const bool zb = plan.schedule.kind == ScheduleKind::zb_h1;
    double record_forward = 0, record_backward = 0;
    for (int kind : prof.block_kind) {
      const BlockCost& c = costs[static_cast<std::size_t>(kind)];
      record_forward += c.forward_compute_s + c.tp_forward_s + c.cp_forward_exposed_s + c.ep_s / 2;
      // The engine runs hidden tp collectives beside the W pass itself: it gets them whole; so does
      // ZB-H1's B pass, which has no W GEMMs beside it.
      record_backward += c.backward_compute_s + (tp_hides || zb ? c.tp_backward_total_s : c.tp_backward_s) +
                         c.cp_backward_exposed_s + c.ep_s / 2;
    }
    double forward = 0, backward = 0;
    for (const StageWork& stage : work.value.stage_work) {
      for (const ChunkWork& chunk : stage.chunks) {
        for (const SegmentWork& segment : chunk.segments) {
          forward += segment.forward_s;
          backward += segment.backward_s;
          for (const CommWork& c : segment.forward_comm) forward += c.uncontended_s();
          for (const CommWork& c : segment.backward_comm) backward += c.uncontended_s();
        }
      }
    }
    EXPECT_NEAR(forward, record_forward, 1e-12 * record_forward) << describe(s, plan);
    EXPECT_NEAR(backward, record_backward, 1e-12 * record_backward) << describe(s, plan);
    const auto sim = simulate_plan(*s.evaluator, plan, {false, false});
    ASSERT_TRUE(sim.ok());
    widest_gap = std::max(widest_gap, std::abs(sim.value.summary.step_s / sim.value.analytical.step_s - 1));
  }
  EXPECT_EQ(checked, 200);
  std::printf("[ record   ] 200 random plans; widest step gap from the event model's own rules: %.1f%%\n",
              100 * widest_gap);
}

// explain's "compute by kind" (ComputePart, stage_cost.hpp): every second the
// cost record adds to a block's compute is added to one part, so over random
// plans of every axis and switch the parts of the slowest stage sum to its
// compute, none is negative, and each is where the plan puts work.
TEST(ComputeParts, SumToTheComputeOfEveryRandomPlan) {
  std::vector<PlanSetup> setups = make_setups();
  std::mt19937_64 rng(20261128);
  int checked = 0, floored = 0;
  for (int tried = 0; checked < 600 && tried < 60000; ++tried) {
    const PlanSetup& s = setups[std::uniform_int_distribution<std::size_t>(0, setups.size() - 1)(rng)];
    const Plan plan = draw_plan(s, rng, {Axis::dp, Axis::fsdp, Axis::tp, Axis::pp, Axis::cp, Axis::ep});
    if (!valid(s, plan)) continue;
    ++checked;
    const auto placements = place_axes(s.evaluator->topology(), plan.mesh);
    const auto costs = s.evaluator->block_costs(plan, placements);
    const TimeEstimate t = s.evaluator->evaluate(plan, placements, costs).time;
    const auto parts = s.evaluator->compute_parts(plan, costs, t.slowest_stage);
    const auto at = [&](ComputePart p) { return parts[static_cast<std::size_t>(p)]; };
    double sum = 0;
    for (std::size_t i = 0; i < kComputeParts; ++i) {
      EXPECT_GE(parts[i], -1e-15 * t.compute_s) << to_string(static_cast<ComputePart>(i)) << " " << describe(s, plan);
      sum += parts[i];
    }
    EXPECT_NEAR(sum, t.compute_s, 1e-12 * t.compute_s) << describe(s, plan);
    EXPECT_GT(at(ComputePart::matmul_forward), 0) << describe(s, plan);
    EXPECT_GT(at(ComputePart::matmul_backward), 0) << describe(s, plan);
    const bool transformer = s.model.kind == ModelKind::transformer;
    EXPECT_EQ(at(ComputePart::attention_forward) > 0, transformer) << describe(s, plan);
    // Selective repeats the attention core under unfused attention, and any other module it names.
    const bool repeats = plan.recompute == Recompute::full ||
                         (transformer && (plan.recompute == Recompute::selective_op ||
                                          (plan.recompute == Recompute::selective && !recompute_repeats_nothing(plan))));
    EXPECT_EQ(at(ComputePart::recompute) > 0, repeats) << describe(s, plan);
    if (at(ComputePart::launch_overhead) > 0) ++floored;
  }
  EXPECT_EQ(checked, 600);
  std::printf("[ parts    ] 600 random plans; %d with a launch floor above their kernels\n", floored);
}

}  // namespace
}  // namespace meshplan::sim
