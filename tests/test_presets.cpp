// Every shipped preset loads cleanly, and each model's parameter count, as
// the layer graph counts it, matches the count its authors published.
#include <gtest/gtest.h>

#include <cmath>

#include "model/cluster_spec.hpp"
#include "model/device_spec.hpp"
#include "model/layer_graph.hpp"
#include "model/model_spec.hpp"
#include "model/presets.hpp"
#include "test_support.hpp"

namespace meshplan {
namespace {

using testing_support::messages;

TEST(Presets, AllRequiredPresetsExist) {
  const std::vector<std::string> models = {
      "mlp-seed",  "mlp-fashion", "resnet50",   "gpt2-124m",   "gpt2-350m",  "gpt2-774m", "gpt2-1.5b",
      "gpt3-175b", "llama2-7b",   "llama2-13b", "llama2-70b",  "llama3-8b",  "llama3-70b", "llama3-405b",
      "gemma3-1b", "gemma3-4b",   "megatron-1t", "llama3.2-1b", "llama3.2-3b"};
  const auto listed = list_presets(PresetKind::model);
  for (const auto& name : models) {
    EXPECT_NE(std::find(listed.begin(), listed.end(), name), listed.end()) << name;
  }
  for (const auto& name : {"v100-32g", "a100-40g", "a100-80g", "h100-sxm", "h200", "tpu-v5p"}) {
    EXPECT_TRUE(load_device(name).ok()) << name;
  }
  for (const auto& name : {"dgx-a100", "dgx-h100", "dgx-h200", "dgx-h800", "pcie-a100", "ethernet-10g"}) {
    EXPECT_TRUE(load_cluster(name).ok()) << name;
  }
}

TEST(Presets, EveryPresetLoadsAndNameMatchesFile) {
  for (const auto& name : list_presets(PresetKind::model)) {
    auto model = load_model(name);
    ASSERT_TRUE(model.ok()) << messages(model.problems);
    EXPECT_EQ(model.value.name, name);
    EXPECT_FALSE(model.value.source.empty()) << name;
  }
  for (const auto& name : list_presets(PresetKind::device)) {
    auto device = load_device(name);
    ASSERT_TRUE(device.ok()) << messages(device.problems);
    EXPECT_EQ(device.value.name, name);
    EXPECT_GT(device.value.memory_bytes, 0);
  }
  for (const auto& name : list_presets(PresetKind::cluster)) {
    auto cluster = load_cluster(name);
    ASSERT_TRUE(cluster.ok()) << messages(cluster.problems);
    EXPECT_EQ(cluster.value.name, name);
  }
}

// `kind` decides which backend `train --backend auto` picks (cli/train_backend.hpp).
TEST(Presets, EveryDeviceSaysWhatKindItIs) {
  for (const auto& name : {"v100-32g", "a100-40g", "a100-80g", "h100-sxm", "h200"})
    EXPECT_EQ(load_device(name).value.kind, DeviceKind::nvidia_gpu) << name;
  EXPECT_EQ(load_device("local-cpu").value.kind, DeviceKind::cpu);
  EXPECT_EQ(load_device("tpu-v5p").value.kind, DeviceKind::tpu);
  const std::string base = "name: dev\nsource: test\npeak_tflops:\n  fp32: 1\nmemory_gib: 8\nmemory_bandwidth_gb_per_s: 100\n";
  EXPECT_EQ(load_device_text(base, "dev.yaml").value.kind, DeviceKind::unspecified);  // optional
  const auto bad = load_device_text(base + "kind: gpu\n", "dev.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(messages(bad.problems).find("kind"), std::string::npos) << messages(bad.problems);
  EXPECT_NE(messages(bad.problems).find("nvidia-gpu"), std::string::npos) << messages(bad.problems);
}

// achievable.fp8_gemm_fraction is a fraction of the fp8 peak: in (0, 1], and only beside peak_tflops.fp8.
TEST(Presets, Fp8GemmFractionNeedsTheFp8Peak) {
  const std::string head = "name: dev\nsource: test\npeak_tflops:\n  bf16: 100\n";
  const std::string tail = "memory_gib: 8\nmemory_bandwidth_gb_per_s: 100\nachievable:\n  fp8_gemm_fraction: 0.6\n";
  const auto good = load_device_text(head + "  fp8: 200\n" + tail, "dev.yaml");
  ASSERT_TRUE(good.ok()) << messages(good.problems);
  EXPECT_DOUBLE_EQ(good.value.fp8_gemm_efficiency, 0.6);
  EXPECT_EQ(load_device("h100-sxm").value.fp8_gemm_efficiency, 0.0);  // not measured: bf16's fraction prices fp8
  const auto no_peak = load_device_text(head + tail, "dev.yaml");
  ASSERT_FALSE(no_peak.ok());
  EXPECT_NE(messages(no_peak.problems).find("fp8_gemm_fraction"), std::string::npos) << messages(no_peak.problems);
  EXPECT_NE(messages(no_peak.problems).find("peak_tflops has no fp8"), std::string::npos) << messages(no_peak.problems);
  const auto too_big = load_device_text(head + "  fp8: 200\n" + "memory_gib: 8\nmemory_bandwidth_gb_per_s: 100\nachievable:\n  fp8_gemm_fraction: 1.5\n",
                                        "dev.yaml");
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(messages(too_big.problems).find("fp8_gemm_fraction"), std::string::npos) << messages(too_big.problems);
}

TEST(Presets, InterconnectFiguresOfTheSeedGuides) {
  // NVLink A100/H100 600/900 GB/s counting both directions, PCIe 4.0 64 GB/s,
  // 8 x 200 Gb/s HDR = 200 GB/s per DGX A100 node, 10 GbE = 1.25 GB/s.
  EXPECT_DOUBLE_EQ(load_cluster("dgx-a100").value.intra_node.bandwidth_bytes_per_s * 2, 600e9);
  EXPECT_DOUBLE_EQ(load_cluster("dgx-h100").value.intra_node.bandwidth_bytes_per_s * 2, 900e9);
  EXPECT_DOUBLE_EQ(load_cluster("pcie-a100").value.intra_node.bandwidth_bytes_per_s * 2, 64e9);
  const auto dgx = load_cluster("dgx-a100").value;
  EXPECT_DOUBLE_EQ(dgx.inter_node.bandwidth_bytes_per_s * static_cast<double>(dgx.inter_node.nics_per_node), 200e9);
  const auto eth = load_cluster("ethernet-10g").value;
  EXPECT_DOUBLE_EQ(eth.inter_node.bandwidth_bytes_per_s * static_cast<double>(eth.inter_node.nics_per_node), 1.25e9);
}

struct PublishedCount {
  const char* model;
  double parameters;
  double relative_tolerance;
  const char* source;
};

class ParameterCount : public ::testing::TestWithParam<PublishedCount> {};

TEST_P(ParameterCount, MatchesPublished) {
  const auto& expected = GetParam();
  auto model = load_model(expected.model);
  ASSERT_TRUE(model.ok()) << messages(model.problems);
  const double counted = build_layer_graph(model.value, model.value.default_seq_len()).parameter_count();
  EXPECT_NEAR(counted, expected.parameters, expected.parameters * expected.relative_tolerance)
      << expected.model << " (" << expected.source << ")";
}

INSTANTIATE_TEST_SUITE_P(
    Published, ParameterCount,
    ::testing::Values(
        // Hugging Face model cards / safetensors metadata of the official checkpoints.
        PublishedCount{"gpt2-124m", 124'439'808, 0, "HF gpt2"},
        PublishedCount{"gpt2-350m", 354'823'168, 0, "HF gpt2-medium"},
        PublishedCount{"gpt2-774m", 774'030'080, 0, "HF gpt2-large"},
        PublishedCount{"gpt2-1.5b", 1'557'611'200, 0, "HF gpt2-xl"},
        PublishedCount{"llama2-7b", 6'738'415'616, 0, "HF meta-llama/Llama-2-7b-hf"},
        PublishedCount{"llama2-13b", 13'015'864'320, 0, "HF meta-llama/Llama-2-13b-hf"},
        PublishedCount{"llama2-70b", 68'976'648'192, 0, "HF meta-llama/Llama-2-70b-hf"},
        PublishedCount{"llama3-8b", 8'030'261'248, 0, "HF meta-llama/Meta-Llama-3-8B"},
        PublishedCount{"llama3-70b", 70'553'706'496, 0, "HF meta-llama/Meta-Llama-3-70B"},
        PublishedCount{"llama3-405b", 405'853'388'800, 0, "HF meta-llama/Llama-3.1-405B"},
        // "1.24B" / "3.21B" on the model cards; the exact counts are those of the
        // architecture built in PyTorch (scripts/gpu/measure_steps.py, tests/data/h200-steps.jsonl 'params').
        PublishedCount{"llama3.2-1b", 1'235'814'400, 0, "HF meta-llama/Llama-3.2-1B"},
        PublishedCount{"llama3.2-3b", 3'212'749'824, 0, "HF meta-llama/Llama-3.2-3B"},
        // Gemma 3 has QK-norm and four norms per layer; the schema models two (docs/presets.md).
        PublishedCount{"gemma3-1b", 999'885'952, 1e-4, "Keras Hub gemma3_1b"},
        PublishedCount{"gemma3-4b", 3'880'099'328, 1e-4, "Keras Hub gemma3_4b text"},
        PublishedCount{"gpt3-175b", 175.0e9, 0.005, "Brown et al. 2020, Table 2.1 (rounded)"},
        PublishedCount{"megatron-1t", 1008e9, 0.001, "Narayanan et al. 2021, Table 1 (1008B)"},
        PublishedCount{"deepseek-v3", 671e9, 0.001, "DeepSeek-V3 README_WEIGHTS.md: 671B in the main model (MTP excluded)"},
        PublishedCount{"resnet50", 25'557'032, 0, "torchvision resnet50"},
        PublishedCount{"mlp-fashion", 784 * 256 + 256 + 256 * 10 + 10, 0, "layer sizes 784-256-10"},
        PublishedCount{"mlp-seed", 140'746'762, 0, "layer sizes 784-8192-8192-8192-10"}));

TEST(Presets, UnknownPresetListsKnownNames) {
  auto model = load_model("gpt5");
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.problems[0].message.find("known: deepseek-v3, gemma3-1b, "), std::string::npos) << model.problems[0].message;
}

TEST(Presets, FilePathWorksWhereANameDoes) {
  auto model = load_model(std::string(MESHPLAN_TEST_DATA) + "/zero-7.5b.yaml");
  ASSERT_TRUE(model.ok()) << messages(model.problems);
  EXPECT_EQ(model.value.name, "zero-7.5b");
  EXPECT_FALSE(load_model("./no/such/file.yaml").ok());
}

TEST(Presets, ClusterWithBadDeviceNamesBoth) {
  auto cluster = load_cluster(std::string(MESHPLAN_TEST_DATA) + "/bad-device-cluster.yaml");
  ASSERT_FALSE(cluster.ok());
  const std::string text = messages(cluster.problems);
  EXPECT_NE(text.find("key 'device' -> a200"), std::string::npos) << text;
}

}  // namespace
}  // namespace meshplan
