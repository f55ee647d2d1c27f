// The rows `calibrate --backend cuda` writes (executor/calibrate/measurement_rows.hpp),
// on every machine: their JSON Lines text, line by line; read back by
// `calibrate --from`'s parser (model/measured_device.hpp) without a problem,
// extra fields ("dtype", "kernel", "stack") included; and derived into a
// device whose figures follow from the synthetic times by the formulas of
// docs/cost-model.md, "Measured device curves" (gemm_fraction = ceiling /
// peak, and so on). The base preset a GPU's name picks is checked too.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "executor/calibrate/measurement_rows.hpp"
#include "model/measured_device.hpp"

namespace meshplan::exec {
namespace {

constexpr double kPeak = 1000e12;          // the base's dense bf16 peak
constexpr double kBandwidth = 3000e9;      // the base's memory bandwidth
constexpr double kCeiling = 800e12;        // the 8192^3 GEMM's rate: gemm_fraction 0.8
constexpr double kCopy = 2400e9;           // the copy's read + written rate: memory_bandwidth_fraction 0.8
constexpr double kGib = 1024.0 * 1024 * 1024;

double gemm_s(double m, double k, double n, double rate) { return 2 * m * k * n / rate; }

// One synthetic, plausible GPU: every kind of row the CUDA measurement makes.
std::vector<MeasurementRow> synthetic_rows() {
  std::vector<MeasurementRow> rows;
  rows.push_back(device_row("Synthetic GPU 80GB", 100, static_cast<std::int64_t>(80 * kGib), 50 << 20,
                            "meshplan CUDA kernels and cuBLASLt, CUDA runtime 12.8, driver 12.8"));
  const double ceiling_s = gemm_s(8192, 8192, 8192, kCeiling);
  rows.push_back(gemm_ceiling_row(ceiling_s, ceiling_s * 0.98));
  const double copy_s = 2 * kGib / kCopy;
  rows.push_back(copy_ceiling_row(static_cast<std::int64_t>(kGib), copy_s, copy_s * 0.99));
  for (const std::int64_t m : {4096, 8192}) {
    for (const auto& [k, n] : {std::pair<std::int64_t, std::int64_t>{4096, 4096}, {8192, 8192}, {8192, 28672}}) {
      const double s = gemm_s(static_cast<double>(m), static_cast<double>(k), static_cast<double>(n), 600e12);
      rows.push_back(gemm_row(m, k, n, s, s * 0.95));
    }
  }
  // 2 B H T^2 D = 34.36 GFLOP forward at 200 TFLOP/s; backward-only 2.5x that at 100 TFLOP/s.
  const double attention_flops = 2.0 * 4 * 16 * 2048.0 * 2048 * 64;
  rows.push_back(attention_row(4, 16, 2048, 64, attention_flops / 200e12,
                               attention_flops / 200e12 + 2.5 * attention_flops / 100e12));
  rows.push_back(token_op_row("layernorm", 8192, 768, 50e-6, 200e-6, "fp32"));
  rows.push_back(token_op_row("gelu_tanh", 8192, 768, 40e-6, 120e-6, "fp32"));
  rows.push_back(token_op_row("residual_add", 8192, 768, 40e-6, 100e-6, "fp32"));
  rows.push_back(cross_entropy_row(8192, 50257, 5e-3, 5e-3, "one kernel: loss and gradient"));
  rows.push_back(adamw_row(124'000'000, 13, 1.5e-3));
  return rows;
}

DeviceSpec base() {
  DeviceSpec d;
  d.name = "synthetic";
  d.source = "test";
  d.peak_flops_per_s[Dtype::bf16] = kPeak;
  d.memory_bandwidth_bytes_per_s = kBandwidth;
  return d;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(MeasurementRows, OneJsonObjectPerLineInTheFormatOfTheReferenceFile) {
  const std::vector<MeasurementRow> rows = synthetic_rows();
  const std::string text = to_jsonl(rows);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  const std::vector<std::string> lines = lines_of(text);
  ASSERT_EQ(lines.size(), rows.size());
  // Key order and number text as h100-measured.jsonl has them (section first).
  EXPECT_EQ(lines[0].rfind(R"({"section":"device","name":"Synthetic GPU 80GB","sms":100,)", 0), 0u) << lines[0];
  EXPECT_EQ(to_jsonl({token_op_row("layernorm", 8192, 768, 5e-05, 0.0002, "fp32")}),
            R"({"section":"op","op":"layernorm","tokens":8192,"d":768,"fwd_s":5e-05,"fwd_bwd_s":0.0002,"dtype":"fp32"})"
            "\n");
  // Rates derived from the times with the formulas of measure_device.py.
  const auto gemm = nlohmann::json::parse(to_jsonl({gemm_row(1024, 768, 3072, 2e-5, 1e-5)}));
  EXPECT_NEAR(gemm["tflops_med"].get<double>(), 2.0 * 1024 * 768 * 3072 / 2e-5 / 1e12, 1e-9);
  EXPECT_NEAR(gemm["tflops_best"].get<double>(), 2.0 * 1024 * 768 * 3072 / 1e-5 / 1e12, 1e-9);
  // Attention: 2 B H T^2 D forward, 3.5x that forward and backward, as measure_device.py.
  const auto attention = nlohmann::json::parse(to_jsonl({attention_row(8, 12, 1024, 64, 1e-4, 4e-4)}));
  EXPECT_NEAR(attention["fwd_tflops"].get<double>(), 2.0 * 8 * 12 * 1024 * 1024 * 64 / 1e-4 / 1e12, 1e-9);
  EXPECT_NEAR(attention["fwd_bwd_tflops"].get<double>(), 3.5 * 2.0 * 8 * 12 * 1024 * 1024 * 64 / 4e-4 / 1e12, 1e-9);
  const auto copy = nlohmann::json::parse(to_jsonl({copy_ceiling_row(1 << 30, 1e-3, 1e-3)}));
  EXPECT_EQ(copy["what"], "d2d_copy_1GiB");
  EXPECT_NEAR(copy["gb_per_s_med"].get<double>(), 2.0 * kGib / 1e-3 / 1e9, 1e-9);  // read + written
}

TEST(MeasurementRows, ReadBackByTheFromParserWithoutAProblem) {
  const auto measured = parse_device_measurements(to_jsonl(synthetic_rows()), "synthetic.jsonl");
  for (const auto& p : measured.problems) ADD_FAILURE() << describe(p);  // not even a warning: extra fields are ignored
  const DeviceMeasurements& m = measured.value;
  EXPECT_EQ(m.device_name, "Synthetic GPU 80GB");
  EXPECT_EQ(m.software, "meshplan CUDA kernels and cuBLASLt, CUDA runtime 12.8, driver 12.8");
  EXPECT_EQ(m.compute_units, 100);
  EXPECT_DOUBLE_EQ(m.memory_bytes, 80 * kGib);
  EXPECT_DOUBLE_EQ(m.l2_bytes, 50.0 * 1024 * 1024);
  EXPECT_NEAR(m.gemm_ceiling_flops_per_s, kCeiling, kCeiling * 1e-12);
  EXPECT_NEAR(m.copy_bytes_per_s, kCopy, kCopy * 1e-12);
  EXPECT_EQ(m.gemms.size(), 6u);
  ASSERT_EQ(m.attention.size(), 1u);
  EXPECT_EQ(m.attention[0].head_dim, 64);
  EXPECT_EQ(m.ops.size(), 5u);
}

TEST(MeasurementRows, DeriveTheFiguresTheTimesImply) {
  const auto measured = parse_device_measurements(to_jsonl(synthetic_rows()), "synthetic.jsonl");
  ASSERT_TRUE(measured.ok());
  const auto derived = derive_device_figures(measured.value, base());
  for (const auto& p : derived.problems) ADD_FAILURE() << describe(p);
  const MeasuredDeviceFigures& f = derived.value;
  ASSERT_TRUE(f.gemm_fraction.has_value());
  EXPECT_DOUBLE_EQ(*f.gemm_fraction, kCeiling / kPeak);  // 0.8: ceiling / peak
  ASSERT_TRUE(f.memory_bandwidth_fraction.has_value());
  EXPECT_DOUBLE_EQ(*f.memory_bandwidth_fraction, kCopy / kBandwidth);  // 0.8: copy / bandwidth
  EXPECT_EQ(f.compute_units, 100);
  EXPECT_NEAR(f.launch_overhead_s, 40e-6, 1e-12);  // the shortest call: gelu_tanh / residual_add forward
  EXPECT_EQ(f.gemm_curve_measured, 6);             // every GEMM is above twice that floor
  EXPECT_FALSE(f.gemm_curve.empty());
  ASSERT_EQ(f.attention_forward_curve.size(), 1u);
  EXPECT_DOUBLE_EQ(f.attention_forward_curve[0].flops_per_s, 200e12);
  EXPECT_DOUBLE_EQ(f.attention_backward_curve[0].flops_per_s, 100e12);
  std::map<StreamOp, double> rates;
  for (const auto& c : f.op_classes) rates[c.op_class] = c.bytes_per_s;
  // The traffic the cost model counts (bf16 passes, 3x forward for forward + backward) over fwd_bwd_s.
  EXPECT_DOUBLE_EQ(rates.at(StreamOp::norm), std::round(3 * 2 * 2 * 8192.0 * 768 / 200e-6 / 1e9) * 1e9);
  EXPECT_DOUBLE_EQ(rates.at(StreamOp::activation), std::round(3 * 2 * 2 * 8192.0 * 768 / 120e-6 / 1e9) * 1e9);
  EXPECT_DOUBLE_EQ(rates.at(StreamOp::elementwise), std::round(3 * 3 * 2 * 8192.0 * 768 / 100e-6 / 1e9) * 1e9);
  EXPECT_DOUBLE_EQ(rates.at(StreamOp::cross_entropy), std::round(3 * 4 * 8192.0 * 50257 / 5e-3 / 1e9) * 1e9);
  EXPECT_DOUBLE_EQ(rates.at(StreamOp::optimizer), std::round(28 * 124e6 / 1.5e-3 / 1e9) * 1e9);
  // And the preset text the CLI writes from them.
  const DeviceSpec device = apply_measured_figures(base(), f, measured.value);
  const std::string yaml = measured_device_yaml(device, f, measured.value, "flags", "meshplan calibrate --backend cuda");
  EXPECT_NE(yaml.find("gemm_fraction: 0.8 "), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("meshplan CUDA kernels and cuBLASLt"), std::string::npos) << yaml;
}

TEST(MeasurementRows, BasePresetByTheGpuName) {
  EXPECT_EQ(base_preset_for_gpu("NVIDIA H100 80GB HBM3", static_cast<std::int64_t>(80 * kGib)), "h100-sxm");
  EXPECT_EQ(base_preset_for_gpu("NVIDIA H100 PCIe", static_cast<std::int64_t>(80 * kGib)), "");
  EXPECT_EQ(base_preset_for_gpu("NVIDIA H100 NVL", static_cast<std::int64_t>(94 * kGib)), "");
  EXPECT_EQ(base_preset_for_gpu("NVIDIA H200", static_cast<std::int64_t>(141 * kGib)), "h200");
  EXPECT_EQ(base_preset_for_gpu("NVIDIA A100-SXM4-80GB", static_cast<std::int64_t>(80 * kGib)), "a100-80g");
  EXPECT_EQ(base_preset_for_gpu("NVIDIA A100-SXM4-40GB", static_cast<std::int64_t>(40 * kGib)), "a100-40g");
  EXPECT_EQ(base_preset_for_gpu("Tesla V100-SXM2-32GB", static_cast<std::int64_t>(32 * kGib)), "v100-32g");
  EXPECT_EQ(base_preset_for_gpu("NVIDIA GeForce RTX 4090", static_cast<std::int64_t>(24 * kGib)), "");
}

}  // namespace
}  // namespace meshplan::exec
