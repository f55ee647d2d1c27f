// Plan files: what is written reads back as the same model, cluster, device
// and plan (field by field, not through the serialiser that wrote them), and
// a damaged file is refused with a problem naming the file and the JSON key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "model/explain.hpp"
#include "model/plan_file.hpp"
#include "test_support.hpp"

namespace meshplan {
namespace {

using testing_support::messages;
using testing_support::must;
using Json = nlohmann::ordered_json;

void expect_same_model(const ModelSpec& a, const ModelSpec& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.kind, b.kind);
  const TransformerDims &t = a.transformer, &u = b.transformer;
  if (a.kind == ModelKind::transformer) {
    EXPECT_EQ(t.layers, u.layers);
    EXPECT_EQ(t.hidden, u.hidden);
    EXPECT_EQ(t.heads, u.heads);
    EXPECT_EQ(t.kv_heads, u.kv_heads);
    EXPECT_EQ(t.head_dim, u.head_dim);
    EXPECT_EQ(t.ffn, u.ffn);
    EXPECT_EQ(t.vocab, u.vocab);
    EXPECT_EQ(t.seq_len, u.seq_len);
    EXPECT_EQ(t.feed_forward, u.feed_forward);
    EXPECT_EQ(t.norm, u.norm);
    EXPECT_EQ(t.positions, u.positions);
    EXPECT_EQ(t.bias, u.bias);
    EXPECT_EQ(t.tied_embeddings, u.tied_embeddings);
    EXPECT_EQ(t.dropout, u.dropout);
    EXPECT_EQ(t.experts, u.experts);
    EXPECT_EQ(t.top_k, u.top_k);
    EXPECT_EQ(t.capacity_factor, u.capacity_factor);
    EXPECT_EQ(t.shared_expert_ffn, u.shared_expert_ffn);
    EXPECT_EQ(t.expert_groups, u.expert_groups);
    EXPECT_EQ(t.group_top_k, u.group_top_k);
    EXPECT_EQ(t.dense_layers, u.dense_layers);
    EXPECT_EQ(t.dense_ffn, u.dense_ffn);
    EXPECT_EQ(t.q_lora_rank, u.q_lora_rank);
    EXPECT_EQ(t.kv_lora_rank, u.kv_lora_rank);
    EXPECT_EQ(t.qk_rope_head_dim, u.qk_rope_head_dim);
    EXPECT_EQ(t.v_head_dim, u.v_head_dim);
  }
  EXPECT_EQ(a.mlp.layer_sizes, b.mlp.layer_sizes);
  if (a.kind == ModelKind::mlp) {
    EXPECT_EQ(a.mlp.activation, b.mlp.activation);
  }
  if (a.kind == ModelKind::cnn) {
    EXPECT_EQ(a.cnn.image_size, b.cnn.image_size);
    EXPECT_EQ(a.cnn.channels, b.cnn.channels);
    EXPECT_EQ(a.cnn.stem_channels, b.cnn.stem_channels);
    EXPECT_EQ(a.cnn.stage_blocks, b.cnn.stage_blocks);
    EXPECT_EQ(a.cnn.stage_channels, b.cnn.stage_channels);
    EXPECT_EQ(a.cnn.expansion, b.cnn.expansion);
    EXPECT_EQ(a.cnn.classes, b.cnn.classes);
  }
}

void expect_same_link(const LinkSpec& a, const LinkSpec& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.bandwidth_bytes_per_s, b.bandwidth_bytes_per_s);
  EXPECT_EQ(a.latency_s, b.latency_s);
  EXPECT_EQ(a.nics_per_node, b.nics_per_node);
  EXPECT_EQ(a.achievable_fraction, b.achievable_fraction);
  EXPECT_EQ(a.overlaps_compute, b.overlaps_compute);
}

void expect_same_cluster(const ClusterSpec& a, const ClusterSpec& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.devices_per_node, b.devices_per_node);
  EXPECT_EQ(a.max_nodes, b.max_nodes);
  expect_same_link(a.intra_node, b.intra_node);
  expect_same_link(a.inter_node, b.inter_node);
  const DeviceSpec &d = a.device, &e = b.device;
  EXPECT_EQ(d.name, e.name);
  EXPECT_EQ(d.source, e.source);
  EXPECT_EQ(d.peak_flops_per_s, e.peak_flops_per_s);
  EXPECT_EQ(d.memory_bytes, e.memory_bytes);
  EXPECT_EQ(d.memory_bandwidth_bytes_per_s, e.memory_bandwidth_bytes_per_s);
  EXPECT_EQ(d.gemm_efficiency, e.gemm_efficiency);
  EXPECT_EQ(d.fp8_gemm_efficiency, e.fp8_gemm_efficiency);
  EXPECT_EQ(d.memory_efficiency, e.memory_efficiency);
  EXPECT_EQ(d.compute_units, e.compute_units);
  EXPECT_EQ(d.l2_bandwidth_bytes_per_s, e.l2_bandwidth_bytes_per_s);
  ASSERT_EQ(d.gemm_curve.size(), e.gemm_curve.size());
  for (std::size_t i = 0; i < d.gemm_curve.size(); ++i) {
    EXPECT_EQ(d.gemm_curve[i].intensity, e.gemm_curve[i].intensity);
    EXPECT_EQ(d.gemm_curve[i].fraction, e.gemm_curve[i].fraction);
  }
  EXPECT_EQ(d.op_bandwidth_bytes_per_s, e.op_bandwidth_bytes_per_s);
  ASSERT_EQ(d.attention_forward_curve.size(), e.attention_forward_curve.size());
  ASSERT_EQ(d.attention_backward_curve.size(), e.attention_backward_curve.size());
  for (std::size_t i = 0; i < d.attention_forward_curve.size(); ++i) {
    EXPECT_EQ(d.attention_forward_curve[i].forward_flops, e.attention_forward_curve[i].forward_flops);
    EXPECT_EQ(d.attention_forward_curve[i].flops_per_s, e.attention_forward_curve[i].flops_per_s);
  }
  for (std::size_t i = 0; i < d.attention_backward_curve.size(); ++i) {
    EXPECT_EQ(d.attention_backward_curve[i].flops_per_s, e.attention_backward_curve[i].flops_per_s);
  }
  EXPECT_EQ(d.launch_overhead_s, e.launch_overhead_s);
  EXPECT_EQ(d.context_bytes, e.context_bytes);
  EXPECT_EQ(d.workspace_bytes, e.workspace_bytes);
  EXPECT_EQ(d.allocator_reserve_fraction, e.allocator_reserve_fraction);
  ASSERT_EQ(d.threaded.has_value(), e.threaded.has_value());
  if (d.threaded) {
    EXPECT_EQ(d.threaded->threads, e.threaded->threads);
    ASSERT_EQ(d.threaded->gemm_curve.size(), e.threaded->gemm_curve.size());
    for (std::size_t i = 0; i < d.threaded->gemm_curve.size(); ++i) {
      EXPECT_EQ(d.threaded->gemm_curve[i].fraction, e.threaded->gemm_curve[i].fraction);
    }
    EXPECT_EQ(d.threaded->op_bandwidth_bytes_per_s, e.threaded->op_bandwidth_bytes_per_s);
  }
}

void expect_same_plan(const Plan& a, const Plan& b) {
  EXPECT_EQ(a.mesh.to_string(), b.mesh.to_string());
  EXPECT_EQ(a.micro_batch, b.micro_batch);
  EXPECT_EQ(a.global_batch, b.global_batch);
  EXPECT_EQ(a.seq_len, b.seq_len);
  EXPECT_EQ(a.zero_stage, b.zero_stage);
  EXPECT_EQ(a.recompute, b.recompute);
  EXPECT_EQ(a.sequence_parallel, b.sequence_parallel);
  EXPECT_EQ(a.attention, b.attention);
  EXPECT_EQ(a.cp_comm, b.cp_comm);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.fp32_gradients, b.fp32_gradients);
  EXPECT_EQ(a.bf16_moments, b.bf16_moments);
  EXPECT_EQ(a.overlap_expert_parallel, b.overlap_expert_parallel);
  EXPECT_EQ(a.recompute_modules, b.recompute_modules);
  EXPECT_EQ(a.expert_tensor_parallel, b.expert_tensor_parallel);
  EXPECT_EQ(a.ep_dispatch, b.ep_dispatch);
  EXPECT_EQ(a.schedule.kind, b.schedule.kind);
  EXPECT_EQ(a.schedule.virtual_stages, b.schedule.virtual_stages);
  EXPECT_EQ(a.precision, b.precision);
  EXPECT_EQ(a.stage_layers, b.stage_layers);
  EXPECT_EQ(a.gradient_bucket_bytes, b.gradient_bucket_bytes);
  EXPECT_EQ(a.memory_headroom, b.memory_headroom);
  EXPECT_EQ(a.overlap_gradient_reduction, b.overlap_gradient_reduction);
  EXPECT_EQ(a.overlap_parameter_gather, b.overlap_parameter_gather);
  EXPECT_EQ(a.overlap_tensor_parallel, b.overlap_tensor_parallel);
  EXPECT_EQ(a.tp_comm_overlap, b.tp_comm_overlap);
  EXPECT_EQ(a.overlap_p2p_comm, b.overlap_p2p_comm);
  EXPECT_EQ(a.overlap_zero_gather, b.overlap_zero_gather);
}

struct Case {
  std::string model, cluster, mesh;
  std::int64_t world_size, micro_batch, global_batch;
};

struct Made {
  PlanFile file;
  Explanation explanation;
};

Made make(const Case& c, void (*adjust)(Plan&) = nullptr) {
  Made made;
  made.file.model = must(load_model(c.model));
  made.file.cluster = must(load_cluster(c.cluster));
  made.file.world_size = c.world_size;
  Plan& plan = made.file.plan;
  plan = testing_support::plan_with(c.mesh, c.micro_batch, c.global_batch);
  if (adjust) adjust(plan);
  made.explanation = explain_plan(made.file.model, made.file.cluster, Deployment{c.world_size, 0}, plan);
  EXPECT_TRUE(made.explanation.valid) << messages(made.explanation.problems);
  made.file.prediction = prediction_from(made.explanation);
  return made;
}

Loaded<PlanFile> reread(const PlanFile& file) { return parse_plan_file(plan_file_to_json(file).dump(2), "plan.json"); }

void expect_round_trip(const PlanFile& file) {
  const auto back = reread(file);
  ASSERT_TRUE(back.ok()) << messages(back.problems);
  EXPECT_EQ(back.value.version, plan_file_version);
  expect_same_model(file.model, back.value.model);
  expect_same_cluster(file.cluster, back.value.cluster);
  EXPECT_EQ(back.value.world_size, file.world_size);
  expect_same_plan(file.plan, back.value.plan);
  const PlanPrediction &p = file.prediction, &q = back.value.prediction;
  EXPECT_EQ(p.fits_memory, q.fits_memory);
  EXPECT_EQ(p.parameters, q.parameters);
  EXPECT_EQ(p.worst_stage, q.worst_stage);
  EXPECT_EQ(p.memory.total_bytes(), q.memory.total_bytes());
  EXPECT_EQ(p.memory.activations_bytes, q.memory.activations_bytes);
  EXPECT_EQ(p.usable_bytes, q.usable_bytes);
  ASSERT_EQ(p.time.has_value(), q.time.has_value());
  if (p.time) {
    EXPECT_EQ(p.time->step_s, q.time->step_s);
    EXPECT_EQ(p.time->bubble_s, q.time->bubble_s);
    EXPECT_EQ(p.time->mfu, q.time->mfu);
    EXPECT_EQ(p.time->axis_communication_s, q.time->axis_communication_s);
    EXPECT_EQ(p.time->axis_exposed_s, q.time->axis_exposed_s);
  }
  // Writing what was read gives the same text: nothing is lost or reordered.
  EXPECT_EQ(plan_file_to_json(file).dump(), plan_file_to_json(back.value).dump());
}

TEST(PlanFile, RoundTripGpt3OnDgxA100) {
  Made made = make({"gpt3-175b", "dgx-a100", "dp=16,pp=8,tp=8", 1024, 1, 1536}, [](Plan& p) {
    p.recompute = Recompute::selective;
    p.sequence_parallel = true;
    p.zero_stage = 1;
    p.schedule = {ScheduleKind::interleaved, 3};
  });
  ASSERT_TRUE(made.file.prediction.time.has_value());
  EXPECT_TRUE(made.file.prediction.fits_memory);
  expect_round_trip(made.file);
}

TEST(PlanFile, RoundTripOtherModelKindsAndKnobs) {
  expect_round_trip(make({"llama3-70b", "dgx-h100", "fsdp=8,tp=8", 64, 1, 512}, [](Plan& p) {
                      p.seq_len = 4096;
                      p.overlap_tensor_parallel = true;
                      p.sequence_parallel = p.tp_comm_overlap = true;
                      p.memory_headroom = 0.1;
                    }).file);
  expect_round_trip(make({"mlp-seed", "pcie-a100", "dp=2,tp=4", 8, 4, 64}).file);
  expect_round_trip(make({"resnet50", "ethernet-10g", "fsdp=4", 4, 32, 256}).file);
  expect_round_trip(make({"gpt2-124m", "dgx-a100", "pp=4", 4, 2, 16}, [](Plan& p) {
                      p.stage_layers = {4, 2, 3, 3};
                      p.schedule = {ScheduleKind::gpipe, 1};
                      p.precision = Precision::fp32;
                    }).file);
  expect_round_trip(make({"gpt2-124m", "dgx-h100", "pp=4", 4, 1, 16}, [](Plan& p) {
                      p.schedule = {ScheduleKind::interleaved, 3};
                      p.overlap_p2p_comm = true;
                    }).file);
  expect_round_trip(make({"gpt2-124m", "dgx-h100", "dp=4", 4, 1, 16}, [](Plan& p) {
                      p.zero_stage = 2;
                      p.overlap_zero_gather = true;
                    }).file);
}

// A mixture of experts with a drop-and-pad capacity and shared experts keeps
// them through a plan file (the prediction depends on them); one without
// writes no field.
TEST(PlanFile, ExpertCapacityRoundTrips) {
  Made made = make({"llama3-8b", "dgx-h100", "dp=8", 8, 1, 8});  // made dense, then given experts
  made.file.model.transformer.experts = 8;
  made.file.model.transformer.top_k = 2;
  made.file.plan.mesh = must(parse_mesh("ep=8", "mesh"));
  const auto dropless = plan_file_to_json(made.file).dump();
  EXPECT_EQ(dropless.find("capacity_factor"), std::string::npos);
  EXPECT_EQ(dropless.find("shared_expert_ffn"), std::string::npos);
  EXPECT_EQ(dropless.find("dense_layers"), std::string::npos);
  made.file.model.transformer.capacity_factor = 1.25;
  made.file.model.transformer.shared_expert_ffn = 2048;
  made.file.model.transformer.dense_layers = {0, 5};
  made.file.model.transformer.dense_ffn = 8192;
  made.explanation = explain_plan(made.file.model, made.file.cluster, Deployment{8, 0}, made.file.plan);
  ASSERT_TRUE(made.explanation.valid) << messages(made.explanation.problems);
  made.file.prediction = prediction_from(made.explanation);
  expect_round_trip(made.file);
}

// Multi-head latent attention keeps its sizes through a plan file (written as
// the preset's fields, head_dim being their sum), with the prediction.
TEST(PlanFile, LatentAttentionRoundTrips) {
  Made made = make({"deepseek-v3", "dgx-h100", "pp=8,dp=4,ep=8,tp=4", 1024, 1, 512}, [](Plan& p) {
    p.sequence_parallel = true;
    p.zero_stage = 1;
    p.recompute = Recompute::full;
    p.stage_layers = {8, 8, 8, 8, 8, 8, 8, 5};
  });
  const std::string text = plan_file_to_json(made.file).dump();
  EXPECT_NE(text.find("\"qk_nope_head_dim\":128"), std::string::npos) << text.substr(0, 800);
  EXPECT_EQ(text.find("\"head_dim\""), std::string::npos);
  EXPECT_NE(text.find("\"expert_groups\":8"), std::string::npos);  // DeepSeek-V3's node-limited routing
  EXPECT_EQ(text.find("bf16_moments"), std::string::npos);  // written only when set
  expect_round_trip(made.file);
  made.file.plan.bf16_moments = true;  // as DeepSeek-V3 trained
  made.explanation = explain_plan(made.file.model, made.file.cluster, Deployment{1024, 0}, made.file.plan);
  made.file.prediction = prediction_from(made.explanation);
  expect_round_trip(made.file);
  EXPECT_EQ(plan_file_to_json(made.file).dump().find("overlap_expert_parallel"), std::string::npos);  // written only when set
  // Combined 1F1B needs an interleaved schedule with pipeline stages and no full recompute.
  made.file.plan.overlap_expert_parallel = true;
  made.file.plan.recompute = Recompute::selective;
  made.file.plan.schedule = {ScheduleKind::interleaved, 2};
  made.file.plan.stage_layers = {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 1};
  made.explanation = explain_plan(made.file.model, made.file.cluster, Deployment{1024, 0}, made.file.plan);
  ASSERT_TRUE(made.explanation.valid) << messages(made.explanation.problems);
  made.file.prediction = prediction_from(made.explanation);
  EXPECT_NE(plan_file_to_json(made.file).dump().find("\"overlap_expert_parallel\":true"), std::string::npos);
  expect_round_trip(made.file);
  made.file.plan.overlap_expert_parallel = false;
  made.file.plan.schedule = {};
  made.file.plan.stage_layers = {8, 8, 8, 8, 8, 8, 8, 5};
  made.file.plan.recompute = Recompute::full;
  // Megatron-Core's DeepSeek-V3 recipe recomputes the up-projections (and, here, the norms and experts' activation).
  made.file.plan.recompute = Recompute::selective;
  made.file.plan.recompute_modules = module_bit(RecomputeModule::mla_up_proj) | module_bit(RecomputeModule::layernorm) |
                                     module_bit(RecomputeModule::moe_act);
  made.explanation = explain_plan(made.file.model, made.file.cluster, Deployment{1024, 0}, made.file.plan);
  ASSERT_TRUE(made.explanation.valid) << messages(made.explanation.problems);
  made.file.prediction = prediction_from(made.explanation);
  EXPECT_NE(plan_file_to_json(made.file).dump().find("\"recompute_modules\":\"layernorm,mla_up_proj,moe_act\""),
            std::string::npos);
  expect_round_trip(made.file);
  Json bad = plan_file_to_json(made.file);
  bad["plan"]["recompute_modules"] = "layernorm,attn";
  const auto refused = parse_plan_file(bad.dump(2), "bad.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(messages(refused.problems).find("'attn' is not a recompute module"), std::string::npos) << messages(refused.problems);
}

// Attention is part of the plan; a file from before it was reads as the
// unfused attention its prediction was computed with. The H100's measured
// curves and runtime figures travel with the device.
TEST(PlanFile, AttentionAndMeasuredH100RoundTripAndOlderFilesReadUnfused) {
  Made made = make({"gpt2-350m", "dgx-h100", "dp=8", 8, 4, 32});
  EXPECT_EQ(made.file.plan.attention, Attention::fused);
  EXPECT_FALSE(made.file.cluster.device.attention_forward_curve.empty());
  EXPECT_GT(made.file.cluster.device.context_bytes, 0);
  expect_round_trip(made.file);
  made.file.plan.attention = Attention::unfused;
  expect_round_trip(made.file);

  Json old = plan_file_to_json(make({"gpt2-350m", "dgx-h100", "dp=8", 8, 4, 32}).file);
  old["plan"].erase("attention");
  old["cluster"]["device"].erase("attention_forward_curve");
  old["cluster"]["device"].erase("attention_backward_curve");
  old["cluster"]["device"].erase("runtime");
  for (const char* row : {"loss_transient", "activation_gradients", "workspaces", "runtime_context", "allocator_reserve"}) {
    old["prediction"]["memory_bytes"].erase(row);
  }
  const auto back = parse_plan_file(old.dump(2), "old.json");
  ASSERT_TRUE(back.ok()) << messages(back.problems);
  EXPECT_EQ(back.value.plan.attention, Attention::unfused);
  EXPECT_TRUE(back.value.cluster.device.attention_forward_curve.empty());
  EXPECT_EQ(back.value.cluster.device.context_bytes, 0);

  Json bad = plan_file_to_json(made.file);
  bad["plan"]["attention"] = "flash";
  const auto refused = parse_plan_file(bad.dump(2), "bad.json");
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(messages(refused.problems).find("plan.attention"), std::string::npos) << messages(refused.problems);
}

TEST(PlanFile, ContextParallelExchangeRoundTripsAndOlderFilesReadRing) {
  Made made = make({"llama3-8b", "dgx-h100", "cp=2,tp=4", 8, 1, 8});
  for (CpComm kind : {CpComm::ring, CpComm::all_gather, CpComm::all_to_all}) {
    made.file.plan.cp_comm = kind;
    expect_round_trip(made.file);
  }
  Json old = plan_file_to_json(made.file);
  ASSERT_TRUE(old["plan"].contains("cp_comm"));
  old["plan"].erase("cp_comm");
  const auto back = parse_plan_file(old.dump(2), "old.json");
  ASSERT_TRUE(back.ok()) << messages(back.problems);
  EXPECT_EQ(back.value.plan.cp_comm, CpComm::ring);
}

TEST(PlanFile, LossRoundTripsAndOlderFilesReadEager) {
  Made made = make({"llama3-8b", "dgx-h100", "fsdp=8", 8, 1, 8});
  for (Loss loss : {Loss::eager, Loss::fused}) {
    made.file.plan.loss = loss;
    expect_round_trip(made.file);
  }
  Json old = plan_file_to_json(made.file);
  ASSERT_EQ(old["plan"]["loss"], "fused");
  old["plan"].erase("loss");
  const auto back = parse_plan_file(old.dump(2), "old.json");
  ASSERT_TRUE(back.ok()) << messages(back.problems);
  EXPECT_EQ(back.value.plan.loss, Loss::eager);
}

TEST(PlanFile, Fp32GradientsRoundTripAndOlderFilesReadSixteenBit) {
  Made made = make({"llama3-8b", "dgx-h100", "fsdp=8", 8, 1, 8});
  made.file.plan.fp32_gradients = true;
  expect_round_trip(made.file);
  Json old = plan_file_to_json(made.file);
  ASSERT_TRUE(old["plan"].contains("fp32_gradients"));
  EXPECT_TRUE(old["plan"]["fp32_gradients"].get<bool>());
  old["plan"].erase("fp32_gradients");
  const auto back = parse_plan_file(old.dump(2), "old.json");
  ASSERT_TRUE(back.ok()) << messages(back.problems);
  EXPECT_FALSE(back.value.plan.fp32_gradients);
}

// Experts out of tp: written when set, read back; files without the key
// split the experts over tp (what they were computed with).
TEST(PlanFile, ExpertTensorParallelRoundTripsAndIsAbsentByDefault) {
  Made made = make({"mixtral-8x7b", "dgx-h100", "ep=4,tp=2", 8, 1, 4});
  Json in_tp = plan_file_to_json(made.file);
  EXPECT_FALSE(in_tp["plan"].contains("expert_tensor_parallel"));
  made.file.plan.sequence_parallel = true;
  made.file.plan.expert_tensor_parallel = 1;
  expect_round_trip(made.file);
  Json j = plan_file_to_json(made.file);
  ASSERT_TRUE(j["plan"].contains("expert_tensor_parallel"));
  EXPECT_EQ(j["plan"]["expert_tensor_parallel"].get<int>(), 1);
  j["plan"].erase("expert_tensor_parallel");
  const auto back = parse_plan_file(j.dump(2), "old.json");
  ASSERT_TRUE(back.ok()) << messages(back.problems);
  EXPECT_EQ(back.value.plan.expert_tensor_parallel, 0);
  j["plan"]["expert_tensor_parallel"] = -1;
  EXPECT_FALSE(parse_plan_file(j.dump(2), "bad.json").ok());
  // The dispatch likewise: written when deduplicated, absent is all-to-all.
  EXPECT_FALSE(in_tp["plan"].contains("ep_dispatch"));
  made.file.plan.ep_dispatch = EpDispatch::deduplicated;
  expect_round_trip(made.file);
  Json deep = plan_file_to_json(made.file);
  EXPECT_EQ(deep["plan"]["ep_dispatch"], "deduplicated");
  deep["plan"]["ep_dispatch"] = "deepep";
  EXPECT_FALSE(parse_plan_file(deep.dump(2), "bad.json").ok());
}

// Each memory row is bounded on its own (1e30 bytes); the recomputed sums
// (allocated peak, total) of rows at that bound exceed it, and a file the
// reader accepted must read back after it is written again (found by
// fuzz_plan_file).
TEST(PlanFile, MemoryRowsAtTheirBoundReadBackAfterWriting) {
  Json j = plan_file_to_json(make({"gpt2-124m", "dgx-a100", "dp=8", 8, 1, 8}).file);
  for (auto& [key, value] : j["prediction"]["memory_bytes"].items()) {
    if (key != "allocated_peak" && key != "total") value = 1e30;
  }
  const auto first = parse_plan_file(j.dump(2), "big.json");
  ASSERT_TRUE(first.ok()) << messages(first.problems);
  EXPECT_GT(first.value.prediction.memory.total_bytes(), 1e30);
  const auto again = parse_plan_file(plan_file_to_json(first.value).dump(2), "big-again.json");
  EXPECT_TRUE(again.ok()) << messages(again.problems);

  j["prediction"]["memory_bytes"]["parameters"] = 2e30;
  const auto refused = parse_plan_file(j.dump(2), "bigger.json");
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(messages(refused.problems).find("prediction.memory_bytes.parameters"), std::string::npos)
      << messages(refused.problems);
}

// A parameter count past the int64 range (the reader takes counts up to
// 1e30) was rounded into an int64 when written back, wrapped to
// -9223372036854775808, and refused on reading (found by fuzz_plan_file in
// CI): it is written as the number it is.
TEST(PlanFile, CountsPastInt64ReadBackAfterWriting) {
  Json j = plan_file_to_json(make({"gpt2-124m", "dgx-a100", "dp=8", 8, 1, 8}).file);
  EXPECT_TRUE(j["prediction"]["parameters"].is_number_integer());  // a whole count stays an integer
  j["prediction"]["parameters_per_device"] = 9.2233720368547758e25;
  j["prediction"]["parameters"] = 1e30;
  const auto first = parse_plan_file(j.dump(2), "count.json");
  ASSERT_TRUE(first.ok()) << messages(first.problems);
  const Json written = plan_file_to_json(first.value);
  EXPECT_DOUBLE_EQ(written["prediction"]["parameters_per_device"].get<double>(), 9.2233720368547758e25);
  const auto again = parse_plan_file(written.dump(2), "count-again.json");
  EXPECT_TRUE(again.ok()) << messages(again.problems);
}

TEST(PlanFile, ClusterWithNodeLimitRoundTrips) {
  Made made = make({"gpt2-124m", "dgx-a100", "dp=8", 8, 1, 8});
  made.file.cluster.max_nodes = 4;
  expect_round_trip(made.file);
  made.file.cluster.max_nodes.reset();
  expect_round_trip(made.file);
}

// A calibrated local-cpu carries the measured refinements (GEMM curve, op-class
// rates, threaded figures, a link that hides nothing); the plan file keeps them,
// so the embedded prediction can be remade from the file alone. A file written
// before they existed reads with none of them.
TEST(PlanFile, MeasuredRefinementsRoundTripAndOlderFilesReadWithout) {
  Made made = make({"gpt-byte-10m", "local-cpu", "dp=2", 2, 4, 8}, [](Plan& p) { p.precision = Precision::fp32; });
  ClusterSpec& cluster = made.file.cluster;
  EXPECT_FALSE(cluster.intra_node.overlaps_compute);
  cluster.device.gemm_curve = {{10.6667, 0.109715}, {85.3333, 0.430421}, {1365.33, 0.963068}};
  cluster.device.op_bandwidth_bytes_per_s[static_cast<std::size_t>(StreamOp::activation)] = 3.48e9;
  cluster.device.op_bandwidth_bytes_per_s[static_cast<std::size_t>(StreamOp::optimizer)] = 9.66e9;
  ThreadedRates threaded;
  threaded.threads = 2;
  threaded.gemm_curve = {{10.6667, 0.0523}, {1365.33, 0.955}};
  threaded.op_bandwidth_bytes_per_s[static_cast<std::size_t>(StreamOp::norm)] = 2.39e9;
  cluster.device.threaded = threaded;
  cluster.device.l2_bandwidth_bytes_per_s = 4.958e12;
  cluster.device.fp8_gemm_efficiency = 0.7;
  expect_round_trip(made.file);

  Json old = plan_file_to_json(made.file);
  old["cluster"]["device"].erase("gemm_curve");
  old["cluster"]["device"].erase("op_bandwidth_bytes_per_s");
  old["cluster"]["device"].erase("threaded");
  old["cluster"]["device"].erase("l2_bandwidth_bytes_per_s");
  old["cluster"]["device"].erase("fp8_gemm_efficiency");
  old["cluster"]["intra_node"].erase("overlaps_compute");
  const auto back = parse_plan_file(old.dump(2), "old.json");
  ASSERT_TRUE(back.ok()) << messages(back.problems);
  EXPECT_TRUE(back.value.cluster.device.gemm_curve.empty());
  EXPECT_EQ(back.value.cluster.device.op_bandwidth_bytes_per_s, (std::array<double, kStreamOps>{}));
  EXPECT_FALSE(back.value.cluster.device.threaded.has_value());
  EXPECT_EQ(back.value.cluster.device.l2_bandwidth_bytes_per_s, 0);
  EXPECT_EQ(back.value.cluster.device.fp8_gemm_efficiency, 0);
  EXPECT_TRUE(back.value.cluster.intra_node.overlaps_compute);

  Json bad = plan_file_to_json(made.file);
  bad["cluster"]["device"]["gemm_curve"] = Json::array({Json::array({100, 0.5}), Json::array({10, 0.6})});
  const auto refused = parse_plan_file(bad.dump(2), "bad.json");
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(messages(refused.problems).find("cluster.device.gemm_curve"), std::string::npos) << messages(refused.problems);
}

TEST(PlanFile, WriteThenReadFromDisk) {
  const Made made = make({"llama2-7b", "dgx-a100", "fsdp=4,tp=2", 8, 1, 8});
  const auto dir = std::filesystem::temp_directory_path() / ("meshplan-plan-file-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "plan.json").string();
  const Problems written = write_plan_file(path, made.file.model, made.file.cluster, made.file.world_size, made.file.plan,
                                           made.explanation);
  ASSERT_FALSE(has_errors(written)) << messages(written);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  const auto back = read_plan_file(path);
  ASSERT_TRUE(back.ok()) << messages(back.problems);
  expect_same_plan(made.file.plan, back.value.plan);
  expect_same_model(made.file.model, back.value.model);

  // Nowhere to write: a problem naming the path, no exception.
  const std::string nowhere = (dir / "missing-dir" / "plan.json").string();
  const Problems failed = write_plan_file(nowhere, made.file.model, made.file.cluster, 8, made.file.plan, made.explanation);
  ASSERT_TRUE(has_errors(failed));
  EXPECT_NE(failed.front().where.find(nowhere), std::string::npos);
  // A folder given as the file: said so (it was "cannot rename 'DIR.tmp' into place").
  const Problems into_folder = write_plan_file(dir.string(), made.file.model, made.file.cluster, 8, made.file.plan, made.explanation);
  ASSERT_TRUE(has_errors(into_folder));
  EXPECT_EQ(into_folder.front().message, "is a folder; give a file name in it");

  // An invalid plan is not written.
  Explanation invalid = made.explanation;
  invalid.valid = false;
  EXPECT_TRUE(has_errors(write_plan_file(path, made.file.model, made.file.cluster, 8, made.file.plan, invalid)));

  const auto missing = read_plan_file((dir / "nope.json").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.problems.front().message.find("no such file"), std::string::npos);
  const auto folder = read_plan_file(dir.string());
  ASSERT_FALSE(folder.ok());
  EXPECT_EQ(folder.problems.front().message, "is a folder, not a file");
  std::filesystem::remove_all(dir);
}

struct BadFile {
  const char* name;
  void (*damage)(Json&);
  std::vector<std::string> fragments;  // in one problem's "where: message"
};

void PrintTo(const BadFile& file, std::ostream* out) { *out << file.name; }

class PlanFileBad : public ::testing::TestWithParam<BadFile> {};

TEST_P(PlanFileBad, NamesTheFileAndKey) {
  static const Made made = make({"gpt3-175b", "dgx-a100", "dp=16,pp=8,tp=8", 1024, 1, 1536});
  Json j = plan_file_to_json(made.file);
  GetParam().damage(j);
  const auto loaded = parse_plan_file(j.dump(2), "runs/plan.json");
  ASSERT_FALSE(loaded.ok()) << GetParam().name;
  bool found = false;
  for (const auto& p : loaded.problems) {
    const std::string text = describe(p);
    bool all = text.starts_with("runs/plan.json");
    for (const auto& f : GetParam().fragments) all = all && text.find(f) != std::string::npos;
    found = found || all;
  }
  EXPECT_TRUE(found) << messages(loaded.problems);
  if (std::string(GetParam().name) != "micro_batches") {
    EXPECT_EQ(messages(loaded.problems).find("plan.micro_batches"), std::string::npos) << messages(loaded.problems);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PlanFileBad,
    ::testing::Values(
        BadFile{"wrong_version", [](Json& j) { j["version"] = 2; }, {"key 'version'", "version 2 is not supported", "version 1"}},
        BadFile{"version_text", [](Json& j) { j["version"] = "1"; }, {"key 'version'", "expected a whole number"}},
        BadFile{"missing_version", [](Json& j) { j.erase("version"); }, {"key 'version'", "missing"}},
        BadFile{"missing_plan", [](Json& j) { j.erase("plan"); }, {"key 'plan'", "missing"}},
        BadFile{"missing_cluster_device", [](Json& j) { j["cluster"].erase("device"); }, {"key 'cluster.device'", "missing"}},
        BadFile{"world_size_text", [](Json& j) { j["world_size"] = "1024"; }, {"key 'world_size'", "expected a whole number"}},
        BadFile{"world_size_mismatch", [](Json& j) { j["world_size"] = 512; }, {"key 'plan.mesh'", "world size (512"}},
        BadFile{"mesh_size_text", [](Json& j) { j["plan"]["mesh"]["tp"] = "8"; }, {"key 'plan.mesh.tp'", "expected a whole number"}},
        BadFile{"mesh_axis_unknown", [](Json& j) { j["plan"]["mesh"]["qq"] = 1; }, {"key 'plan.mesh.qq'", "unknown mesh axis"}},
        BadFile{"mesh_empty", [](Json& j) { j["plan"]["mesh"] = Json::object(); }, {"key 'plan.mesh'", "empty"}},
        BadFile{"tp_heads", [](Json& j) {
                  j["plan"]["mesh"] = {{"dp", 16}, {"pp", 8}, {"tp", 8}};
                  j["model"]["heads"] = 100;
                  j["model"]["kv_heads"] = 100;
                }, {"key 'plan.mesh.tp'", "attention heads (100)"}},
        BadFile{"schedule", [](Json& j) { j["plan"]["schedule"] = "interleaved"; }, {"key 'plan.schedule'", "interleaved:<v>"}},
        BadFile{"recompute", [](Json& j) { j["plan"]["recompute"] = "some"; }, {"key 'plan.recompute'", "none, selective, full, selective-op"}},
        BadFile{"cp_comm", [](Json& j) { j["plan"]["cp_comm"] = "p2p"; }, {"key 'plan.cp_comm'", "ring, all-gather, all-to-all"}},
        BadFile{"loss", [](Json& j) { j["plan"]["loss"] = "liger"; }, {"key 'plan.loss'", "eager, fused"}},
        BadFile{"fp32_gradients_text", [](Json& j) { j["plan"]["fp32_gradients"] = "yes"; }, {"key 'plan.fp32_gradients'", "expected true or false"}},
        BadFile{"micro_batches", [](Json& j) { j["plan"]["micro_batches"] = 7; }, {"key 'plan.micro_batches'", "does not match"}},
        // A batch that does not split, or a mesh that is not the world: said as such, not as "micro_batches ... = 0".
        BadFile{"batch_not_split", [](Json& j) { j["plan"]["global_batch"] = 1535; },
                {"key 'plan.global_batch'", "not a multiple"}},
        BadFile{"mesh_not_world", [](Json& j) { j["plan"]["mesh"] = {{"dp", 4}, {"pp", 8}, {"tp", 8}}; },
                {"key 'plan.mesh'", "world size (1024"}},
        BadFile{"headroom", [](Json& j) { j["plan"]["memory_headroom"] = 1.0; }, {"key 'plan.memory_headroom'", "[0, 1)"}},
        BadFile{"model_heads_text", [](Json& j) { j["model"]["heads"] = "many"; }, {"key 'model.heads'", "whole number"}},
        BadFile{"model_unknown_key", [](Json& j) { j["model"]["kv_haeds"] = 8; }, {"key 'model.kv_haeds'", "unknown key"}},
        BadFile{"model_not_object", [](Json& j) { j["model"] = "gpt3-175b"; }, {"key 'model'", "expected an object"}},
        BadFile{"model_missing_layers", [](Json& j) { j["model"].erase("layers"); }, {"key 'model'", "layers"}},
        BadFile{"cluster_unknown_key", [](Json& j) { j["cluster"]["gpus"] = 8; }, {"key 'cluster.gpus'", "unknown key"}},
        BadFile{"link_kind", [](Json& j) { j["cluster"]["inter_node"]["kind"] = "carrier-pigeon"; },
                {"key 'cluster.inter_node.kind'", "infiniband, ethernet, ici"}},
        BadFile{"device_memory_negative", [](Json& j) { j["cluster"]["device"]["memory_bytes"] = -1; },
                {"key 'cluster.device.memory_bytes'", "must be in"}},
        BadFile{"peak_unknown_dtype", [](Json& j) { j["cluster"]["device"]["peak_flops_per_s"]["int4"] = 1e15; },
                {"key 'cluster.device.peak_flops_per_s.int4'", "unknown key"}},
        BadFile{"prediction_type", [](Json& j) { j["prediction"]["mfu"] = "high"; }, {"key 'prediction.mfu'", "expected a number"}},
        BadFile{"unknown_top_level", [](Json& j) { j["comment"] = "hi"; }, {"key 'comment'", "unknown key"}}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(PlanFile, NotJsonOrNotAnObject) {
  auto malformed = parse_plan_file("{\n  \"version\": 1,\n  \"model\": {\n}", "plan.json");
  ASSERT_FALSE(malformed.ok());
  EXPECT_EQ(malformed.problems.front().where, "plan.json:4");
  EXPECT_NE(malformed.problems.front().message.find("malformed JSON"), std::string::npos);
  EXPECT_NE(malformed.problems.front().message.find("unexpected end of input"), std::string::npos)
      << malformed.problems.front().message;
  EXPECT_EQ(malformed.problems.front().message.find("json.exception"), std::string::npos);

  auto array = parse_plan_file("[1, 2]", "plan.json");
  ASSERT_FALSE(array.ok());
  EXPECT_NE(array.problems.front().message.find("expected a JSON object"), std::string::npos);
}

TEST(PlanFile, DamagedTextNeverThrows) {
  const Made made = make({"gpt2-124m", "dgx-a100", "dp=2,tp=4", 8, 1, 8});
  const std::string text = plan_file_to_json(made.file).dump(2);
  std::mt19937 rng(11);
  for (int i = 0; i < 300; ++i) {
    std::string damaged = text;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng() % damaged.size();
      switch (rng() % 3) {
        case 0: damaged.erase(at, 1 + rng() % 8); break;
        case 1: damaged[at] = "{}[]\",:0-9eaz\n"[rng() % 15]; break;
        default: damaged.resize(at); break;
      }
      if (damaged.empty()) damaged = "{";
    }
    EXPECT_NO_THROW({
      const auto loaded = parse_plan_file(damaged, "plan.json");
      for (const auto& p : loaded.problems) EXPECT_FALSE(p.where.empty());
    });
  }
}

// Found with fuzz/fuzz_plan_file.cpp (UBSan): axes of up to 2^30 each were
// accepted, and their product overflowed int64 in micro_batches() and the
// plan's validation. Regression input:
// fuzz/corpus/fuzz_plan_file/regression-mesh-product-overflow.json.
// The 1-based line of the first line of `text` holding `fragment`.
int line_of(const std::string& text, const std::string& fragment) {
  const auto at = text.find(fragment);
  return at == std::string::npos ? 0 : 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
}

// A plan file is long (its model, cluster and device are in it): a problem
// names the key's line, as a preset's does, including keys of the model (read
// through the preset loader), of the device, unknown keys, and a key under an
// unknown one (the nearest key in the text).
TEST(PlanFile, ProblemsNameTheKeysLine) {
  const Made made = make({"gpt2-124m", "dgx-a100", "dp=2,tp=4", 8, 1, 8});
  Json j = plan_file_to_json(made.file);
  j["plan"]["micro_batch"] = -3;
  j["model"]["layers"] = 0;
  j["cluster"]["device"]["memory_bandwidth_bytes_per_s"] = "fast";
  j["plan"]["speling"] = 1;
  const std::string text = j.dump(2);
  const auto loaded = parse_plan_file(text, "p.json");
  ASSERT_FALSE(loaded.ok());
  const std::string all = messages(loaded.problems);
  for (const auto& [fragment, key] : std::vector<std::pair<std::string, std::string>>{
           {"\"micro_batch\": -3", "plan.micro_batch"},
           {"\"layers\": 0", "model.layers"},
           {"\"memory_bandwidth_bytes_per_s\": \"fast\"", "cluster.device.memory_bandwidth_bytes_per_s"},
           {"\"speling\": 1", "plan.speling"}}) {
    EXPECT_NE(all.find("p.json:" + std::to_string(line_of(text, fragment)) + " key '" + key + "'"), std::string::npos)
        << key << "\n" << all;
  }
}

TEST(PlanFile, MeshWhoseProductIsTooLarge) {
  const Made made = make({"gpt2-124m", "dgx-a100", "dp=2,tp=4", 8, 1, 8});
  Json j = plan_file_to_json(made.file);
  j["plan"]["mesh"] = {{"dp", 1 << 20}, {"fsdp", 1 << 20}, {"ep", 1 << 20}};
  const std::string text = j.dump(2);
  const auto loaded = parse_plan_file(text, "runs/plan.json");
  ASSERT_FALSE(loaded.ok());
  ASSERT_FALSE(loaded.problems.empty());
  EXPECT_EQ(loaded.problems.front().where, "runs/plan.json:" + std::to_string(line_of(text, "\"fsdp\": 1048576")) +
                                               " key 'plan.mesh.fsdp'");
  EXPECT_NE(loaded.problems.front().message.find("a mesh has at most 1048576"), std::string::npos)
      << messages(loaded.problems);
}

}  // namespace
}  // namespace meshplan
