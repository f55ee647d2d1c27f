// A device preset from measurements made elsewhere (model/measured_device.hpp):
// the rows of one H100 SXM (tests/data/h100-measured.jsonl, a copy of the
// team's reference measurements; h100-measured.md describes each row) give
// back every measured figure of presets/devices/h100-sxm.yaml, number by
// number, from the datasheet peak and bandwidth alone; bad lines are
// problems with their line number, and garbage does not crash the parser.
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>

#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "model/compute_model.hpp"
#include "model/measured_device.hpp"
#include "model/presets.hpp"
#include "read_text.hpp"
#include "test_support.hpp"

namespace meshplan {
namespace {

using testing_support::messages;
using testing_support::read_text;

const std::string kFile = std::string(MESHPLAN_TEST_DATA) + "/h100-measured.jsonl";

// Only what the file does not give: the H100 whitepaper's dense bf16 peak and the datasheet's HBM3 bandwidth.
DeviceSpec datasheet() {
  DeviceSpec d;
  d.name = "h100-sxm";
  d.source = "test";
  d.peak_flops_per_s[Dtype::bf16] = 989.4e12;
  d.memory_bandwidth_bytes_per_s = 3350e9;
  return d;
}

TEST(MeasuredDevice, ReproducesTheH100PresetFromItsRows) {
  const auto measured = parse_device_measurements(read_text(kFile), "h100-measured.jsonl");
  ASSERT_TRUE(measured.ok()) << (measured.problems.empty() ? "" : describe(measured.problems.front()));
  EXPECT_EQ(measured.value.gemms.size(), 125u);
  const auto figures = derive_device_figures(measured.value, datasheet());
  ASSERT_TRUE(figures.ok());
  const DeviceSpec got = apply_measured_figures(datasheet(), figures.value, measured.value);
  const auto preset = load_device("h100-sxm");
  ASSERT_TRUE(preset.ok());
  const DeviceSpec& want = preset.value;

  EXPECT_DOUBLE_EQ(got.memory_bytes, want.memory_bytes);
  EXPECT_EQ(got.compute_units, want.compute_units);
  EXPECT_DOUBLE_EQ(got.gemm_efficiency, want.gemm_efficiency);
  EXPECT_DOUBLE_EQ(got.memory_efficiency, want.memory_efficiency);
  EXPECT_DOUBLE_EQ(got.launch_overhead_s, want.launch_overhead_s);
  EXPECT_EQ(figures.value.gemm_curve_measured, 107);
  ASSERT_EQ(got.gemm_curve.size(), want.gemm_curve.size());
  for (std::size_t i = 0; i < want.gemm_curve.size(); ++i) {
    EXPECT_DOUBLE_EQ(got.gemm_curve[i].intensity, want.gemm_curve[i].intensity) << "gemm_curve " << i;
    EXPECT_DOUBLE_EQ(got.gemm_curve[i].fraction, want.gemm_curve[i].fraction) << "gemm_curve " << i;
  }
  for (const auto& [g, w] : {std::pair{&got.attention_forward_curve, &want.attention_forward_curve},
                             std::pair{&got.attention_backward_curve, &want.attention_backward_curve}}) {
    ASSERT_EQ(g->size(), w->size());
    for (std::size_t i = 0; i < w->size(); ++i) {
      EXPECT_NEAR((*g)[i].forward_flops, (*w)[i].forward_flops, 1) << "attention " << i;
      EXPECT_NEAR((*g)[i].flops_per_s, (*w)[i].flops_per_s, 1) << "attention " << i;
    }
  }
  for (std::size_t i = 0; i < kStreamOps; ++i) {
    EXPECT_NEAR(got.op_bandwidth_bytes_per_s[i], want.op_bandwidth_bytes_per_s[i], 1)
        << to_string(static_cast<StreamOp>(i));
  }
}

// h200 is the same compute die with HBM3e: it carries h100-sxm's measured
// curves unchanged (its header says so), so a regenerated h100-sxm must not
// leave it behind.
TEST(MeasuredDevice, AttentionDropoutRowsGiveTheMedianSlowdowns) {
  // Three calls: forward ratios 1.5, 2, 3 and backward-only ratios 1.2, 1.8, 1.4.
  const std::string text =
      R"({"section": "attention_dropout", "B": 1, "H": 8, "T": 1024, "D": 64, "dropout": 0.1, "fwd_s": 1.0, "fwd_bwd_s": 3.0, "dropout_fwd_s": 1.5, "dropout_fwd_bwd_s": 3.9})"
      "\n"
      R"({"section": "attention_dropout", "B": 2, "H": 8, "T": 1024, "D": 64, "dropout": 0.1, "fwd_s": 1.0, "fwd_bwd_s": 2.0, "dropout_fwd_s": 2.0, "dropout_fwd_bwd_s": 3.8})"
      "\n"
      R"({"section": "attention_dropout", "B": 4, "H": 8, "T": 1024, "D": 64, "dropout": 0.1, "fwd_s": 1.0, "fwd_bwd_s": 2.0, "dropout_fwd_s": 3.0, "dropout_fwd_bwd_s": 4.4})"
      "\n";
  const auto measured = parse_device_measurements(text, "dropout.jsonl");
  ASSERT_TRUE(measured.ok()) << describe(measured.problems.front());
  ASSERT_EQ(measured.value.attention_dropout.size(), 3u);
  const auto figures = derive_device_figures(measured.value, datasheet());
  ASSERT_TRUE(figures.ok());
  ASSERT_TRUE(figures.value.attention_dropout_slowdown.has_value());
  EXPECT_DOUBLE_EQ((*figures.value.attention_dropout_slowdown)[0], 2.0);
  EXPECT_DOUBLE_EQ((*figures.value.attention_dropout_slowdown)[1], 1.4);
  const DeviceSpec device = apply_measured_figures(datasheet(), figures.value, measured.value);
  EXPECT_DOUBLE_EQ(device.attention_dropout_slowdown[0], 2.0);
  // A row whose backward is not longer than its forward is an error naming the line.
  const auto bad = parse_device_measurements(
      R"({"section": "attention_dropout", "B": 1, "H": 8, "T": 1024, "D": 64, "dropout": 0.1, "fwd_s": 1.0, "fwd_bwd_s": 3.0, "dropout_fwd_s": 1.5, "dropout_fwd_bwd_s": 1.2})",
      "bad.jsonl");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(describe(bad.problems.front()).find("bad.jsonl:1"), std::string::npos) << describe(bad.problems.front());
}

// An fp8 8192^3 ceiling (scripts/gpu/measure_device.py: torch._scaled_mm, e4m3) is a fraction of the
// base's fp8 peak: 1385.2 of 1978.9 TFLOP/s is 0.7000. It prices the fp8 plans' GEMMs (rates_for), is written
// into the preset, which loads with it, and is a warning, not used, where the base has no fp8 peak.
TEST(MeasuredDevice, TheFp8CeilingIsAFractionOfTheFp8Peak) {
  const std::string text =
      R"({"section": "ceiling", "what": "bf16_gemm_8192", "tflops_med": 795.2})"
      "\n"
      R"({"section": "ceiling", "what": "fp8_gemm_8192", "tflops_med": 1385.23})"
      "\n";
  const auto measured = parse_device_measurements(text, "fp8.jsonl");
  ASSERT_TRUE(measured.ok()) << messages(measured.problems);
  EXPECT_TRUE(measured.problems.empty()) << messages(measured.problems);
  DeviceSpec base = datasheet();
  base.peak_flops_per_s[Dtype::fp8] = 1978.9e12;
  base.memory_bytes = 80.0 * 1024 * 1024 * 1024;  // the file has no device row; a preset needs a capacity
  const auto figures = derive_device_figures(measured.value, base);
  ASSERT_TRUE(figures.ok()) << messages(figures.problems);
  ASSERT_TRUE(figures.value.fp8_gemm_fraction.has_value());
  EXPECT_DOUBLE_EQ(*figures.value.fp8_gemm_fraction, 0.7);
  const DeviceSpec device = apply_measured_figures(base, figures.value, measured.value);
  EXPECT_DOUBLE_EQ(device.fp8_gemm_efficiency, 0.7);
  EXPECT_DOUBLE_EQ(rates_for(device, Precision::fp8).gemm_efficiency, 0.7);
  EXPECT_DOUBLE_EQ(rates_for(device, Precision::bf16).gemm_efficiency, device.gemm_efficiency);
  const std::string yaml = measured_device_yaml(device, figures.value, measured.value, "flags", "meshplan calibrate --from x");
  const auto loaded = load_device_text(yaml, "written.yaml");
  ASSERT_TRUE(loaded.ok()) << (loaded.problems.empty() ? yaml : describe(loaded.problems.front()) + "\n" + yaml);
  EXPECT_DOUBLE_EQ(loaded.value.fp8_gemm_efficiency, 0.7);
  EXPECT_NE(yaml.find("fp8 (e4m3) 8192^3 GEMM, median 1385.2 TFLOP/s"), std::string::npos) << yaml;
  // Without an fp8 peak the row is not used, and says why.
  const auto no_peak = derive_device_figures(measured.value, datasheet());
  ASSERT_TRUE(no_peak.ok());
  EXPECT_FALSE(no_peak.value.fp8_gemm_fraction.has_value());
  EXPECT_NE(messages(no_peak.problems).find("the fp8_gemm_8192 ceiling is not used: h100-sxm has no fp8 support"),
            std::string::npos)
      << messages(no_peak.problems);
}

TEST(MeasuredDevice, TheLossRateComesFromTheFusedLossAndTheEagerOneIsAWarning) {
  // 1000 x 1000 logits: the fused loss counts 4 bytes per logit forward, 3x that
  // forward + backward: 12e6 bytes over 1e-3 s = 12 GB/s. The eager row, 4x
  // slower, must not move it.
  const std::string text =
      R"({"section": "op", "op": "cross_entropy_compiled", "tokens": 1000, "vocab": 1000, "fwd_s": 0.0004, "fwd_bwd_s": 0.001})"
      "\n"
      R"({"section": "op", "op": "cross_entropy_fp32", "tokens": 1000, "vocab": 1000, "fwd_s": 0.002, "fwd_bwd_s": 0.004})"
      "\n";
  const auto measured = parse_device_measurements(text, "loss.jsonl");
  ASSERT_TRUE(measured.ok());
  ASSERT_EQ(measured.problems.size(), 1u);
  EXPECT_NE(describe(measured.problems.front()).find("loss.jsonl:2"), std::string::npos);
  EXPECT_NE(describe(measured.problems.front()).find("the eager loss"), std::string::npos);
  const auto figures = derive_device_figures(measured.value, datasheet());
  ASSERT_TRUE(figures.ok());
  const DeviceSpec device = apply_measured_figures(datasheet(), figures.value, measured.value);
  EXPECT_DOUBLE_EQ(device.op_bandwidth_bytes_per_s[static_cast<std::size_t>(StreamOp::cross_entropy)], 12e9);
  // Eager rows alone leave the class unmeasured (the copy bandwidth prices it).
  const auto eager_only = parse_device_measurements(
      R"({"section": "op", "op": "cross_entropy_fp32", "tokens": 1000, "vocab": 1000, "fwd_s": 0.002, "fwd_bwd_s": 0.004})", "e.jsonl");
  const auto eager_figures = derive_device_figures(eager_only.value, datasheet());
  ASSERT_TRUE(eager_figures.ok());
  EXPECT_EQ(apply_measured_figures(datasheet(), eager_figures.value, eager_only.value)
                .op_bandwidth_bytes_per_s[static_cast<std::size_t>(StreamOp::cross_entropy)],
            datasheet().op_bandwidth_bytes_per_s[static_cast<std::size_t>(StreamOp::cross_entropy)]);
}

TEST(MeasuredDevice, TheWrittenPresetLoadsWithTheSameFigures) {
  const auto measured = parse_device_measurements(read_text(kFile), "h100-measured.jsonl");
  const auto figures = derive_device_figures(measured.value, datasheet());
  ASSERT_TRUE(figures.ok());
  const DeviceSpec device = apply_measured_figures(datasheet(), figures.value, measured.value);
  const std::string yaml = measured_device_yaml(device, figures.value, measured.value, "flags", "meshplan calibrate --from x");
  const auto loaded = load_device_text(yaml, "written.yaml");
  ASSERT_TRUE(loaded.ok()) << (loaded.problems.empty() ? yaml : describe(loaded.problems.front()) + "\n" + yaml);
  EXPECT_DOUBLE_EQ(loaded.value.gemm_efficiency, device.gemm_efficiency);
  EXPECT_EQ(loaded.value.gemm_curve.size(), device.gemm_curve.size());
  EXPECT_NEAR(loaded.value.launch_overhead_s, device.launch_overhead_s, 1e-12);
  EXPECT_NE(yaml.find("l2_bandwidth_gb_per_s omitted"), std::string::npos);
  EXPECT_NE(yaml.find("50 MiB"), std::string::npos);  // the L2 capacity the file states, and why no bandwidth
}

// The device row's figures become preset keys with bounds of their own
// (memory_gib, compute_units): a file outside them is refused where it says
// so, not accepted into a preset that does not load (a fuzz finding:
// mem_bytes 1.5e15, 1.4 million GiB).
TEST(MeasuredDevice, DeviceRowFiguresOutsideThePresetsBoundsAreRefused) {
  const std::string rest =
      "{\"section\": \"op\", \"op\": \"layernorm\", \"tokens\": 8192, \"d\": 768, \"fwd_s\": 3.7e-05, "
      "\"fwd_bwd_s\": 0.00017}\n";
  auto device_row = [](const std::string& sms, const std::string& mem_bytes) {
    return "{\"section\": \"device\", \"name\": \"X\", \"sms\": " + sms + ", \"mem_bytes\": " + mem_bytes + "}\n";
  };
  const auto written_preset_loads = [&](const std::string& text) {
    const auto measured = parse_device_measurements(text, "m.jsonl");
    if (!measured.ok()) return false;
    const auto figures = derive_device_figures(measured.value, datasheet());
    if (!figures.ok()) return false;
    const DeviceSpec device = apply_measured_figures(datasheet(), figures.value, measured.value);
    return load_device_text(measured_device_yaml(device, figures.value, measured.value, "f", "c"), "w.yaml").ok();
  };
  EXPECT_TRUE(written_preset_loads(device_row("132", "150109880320") + rest));
  for (const auto& [sms, mem_bytes, key] : {std::tuple{"132", "1501799304580712", "mem_bytes"},
                                             std::tuple{"132", "1000", "mem_bytes"},
                                             std::tuple{"2097152", "150109880320", "sms"}}) {
    const auto parsed = parse_device_measurements(device_row(sms, mem_bytes) + rest, "m.jsonl");
    ASSERT_FALSE(parsed.ok()) << key;
    EXPECT_NE(describe(parsed.problems.front()).find(std::string("m.jsonl:1 key '") + key + "'"), std::string::npos)
        << describe(parsed.problems.front());
    EXPECT_NE(describe(parsed.problems.front()).find("must be between"), std::string::npos);
  }
}

// The dropout slowdown is a ratio of two timings: one a preset would refuse
// (over 10 x) is refused when derived, with the rows named, not written into a
// preset that does not load (fuzz finding: fwd_s 0.68e-05 for 7.68e-05).
TEST(MeasuredDevice, DropoutSlowdownOutsideThePresetsBoundsIsRefused) {
  const auto rows = [](const std::string& plain_fwd_s) {
    return "{\"section\": \"device\", \"name\": \"X\", \"sms\": 132, \"mem_bytes\": 150109880320}\n"
           "{\"section\": \"attention_dropout\", \"B\": 8, \"H\": 12, \"T\": 1024, \"D\": 64, \"dropout\": 0.1, "
           "\"fwd_s\": " + plain_fwd_s + ", \"fwd_bwd_s\": 0.00027974, \"dropout_fwd_s\": 0.00012256, "
           "\"dropout_fwd_bwd_s\": 0.00041782}\n";
  };
  const auto derived = [&](const std::string& plain_fwd_s) {
    const auto measured = parse_device_measurements(rows(plain_fwd_s), "m.jsonl");
    EXPECT_TRUE(measured.ok()) << messages(measured.problems);
    return derive_device_figures(measured.value, datasheet());
  };
  const auto plausible = derived("7.68e-05");  // 1.6 x forward, 1.4 x backward
  ASSERT_TRUE(plausible.ok()) << messages(plausible.problems);
  const auto measured = parse_device_measurements(rows("7.68e-05"), "m.jsonl");
  const DeviceSpec device = apply_measured_figures(datasheet(), plausible.value, measured.value);
  const auto written = load_device_text(measured_device_yaml(device, plausible.value, measured.value, "f", "c"), "w.yaml");
  EXPECT_TRUE(written.ok()) << messages(written.problems);

  const auto refused = derived("0.68e-05");  // 18 x forward
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(messages(refused.problems).find("'attention_dropout' rows make the fused attention 18 x (forward)"),
            std::string::npos)
      << messages(refused.problems);
}

// Every figure derived from the rows is checked against what the device schema
// holds before a preset is written (found by hand after the fuzz finding
// above): a GEMM ceiling under 1% of the peak, an op class faster than
// 1e6 GB/s, and a launch floor over 1 s each gave a preset that did not load.
TEST(MeasuredDevice, DerivedFiguresOutsideThePresetsBoundsAreRefused) {
  const std::string device = "{\"section\": \"device\", \"name\": \"X\", \"sms\": 132, \"mem_bytes\": 150109880320}\n";
  const auto op = [](const std::string& tokens, const std::string& fwd_s, const std::string& fwd_bwd_s) {
    return "{\"section\": \"op\", \"op\": \"layernorm\", \"tokens\": " + tokens + ", \"d\": 8192, \"fwd_s\": " + fwd_s +
           ", \"fwd_bwd_s\": " + fwd_bwd_s + "}\n";
  };
  const auto refusal = [&](const std::string& rows) {
    const auto measured = parse_device_measurements(device + rows, "m.jsonl");
    EXPECT_TRUE(measured.ok()) << messages(measured.problems);
    const auto figures = derive_device_figures(measured.value, datasheet());
    if (figures.ok()) {  // then what it writes must load
      const DeviceSpec d = apply_measured_figures(datasheet(), figures.value, measured.value);
      const auto written = load_device_text(measured_device_yaml(d, figures.value, measured.value, "f", "c"), "w.yaml");
      EXPECT_TRUE(written.ok()) << messages(written.problems);
    }
    return messages(figures.problems);
  };
  EXPECT_EQ(refusal(op("16384", "0.000149", "0.000651")), "");  // the H100's own rmsnorm-sized row
  EXPECT_NE(refusal("{\"section\": \"ceiling\", \"what\": \"bf16_gemm_8192\", \"tflops_med\": 0.5}\n")
                .find("the bf16_gemm_8192 ceiling is 0.0005 x the dense bf16 peak; it must be in [0.01, 1]"),
            std::string::npos);
  EXPECT_NE(refusal(op("400000000", "0.000001", "0.000009")).find("more than a device preset holds (1e+06)"),
            std::string::npos);
  EXPECT_NE(refusal(op("400000000", "2.0", "9.0")).find("gives a launch floor of 2 s, more than a device preset holds"),
            std::string::npos);
}

// A GEMM row whose rate is not its FLOPs over its time names its line; one above the peak (or an
// attention call's forward above it) is refused, not written into the curve.
TEST(MeasuredDevice, RowsFasterThanThePeakOrInconsistentAreRefused) {
  const std::string rows = read_text(kFile);
  const auto parsed = [&](const std::string& extra) { return parse_device_measurements(rows + extra, "m.jsonl"); };
  const auto lines = std::count(rows.begin(), rows.end(), '\n');
  const auto mismatch =
      parsed("{\"section\": \"gemm\", \"m\": 8192, \"k\": 8192, \"n\": 8192, \"s_med\": 1e-300, \"tflops_med\": 1e300}\n");
  ASSERT_FALSE(mismatch.ok());
  const auto error = std::find_if(mismatch.problems.begin(), mismatch.problems.end(),
                                  [](const Problem& p) { return p.severity == Severity::error; });
  ASSERT_NE(error, mismatch.problems.end());
  EXPECT_EQ(error->where, "m.jsonl:" + std::to_string(lines + 1) + " key 'tflops_med'");
  EXPECT_NE(error->message.find("is not 2 m n k / s_med"), std::string::npos) << error->message;
  // 2 x 8192^3 FLOPs in 1 ms: 1100 TFLOP/s, consistent but above the H100's 989.4.
  const auto fast = parsed("{\"section\": \"gemm\", \"m\": 8192, \"k\": 8192, \"n\": 8192, \"s_med\": 0.001, \"tflops_med\": 1099.5}\n");
  ASSERT_TRUE(fast.ok()) << messages(fast.problems);
  const auto figures = derive_device_figures(fast.value, datasheet());
  ASSERT_FALSE(figures.ok());
  EXPECT_NE(messages(figures.problems).find("8192x8192x8192 ran at 1100 TFLOP/s, above the device's dense bf16 peak of 989.4"),
            std::string::npos)
      << messages(figures.problems);
  // A forward of 1 x 64 x 8192 x 128 (2 B H T^2 D = 1099.5 GFLOP) in 1 ms.
  const auto attention = parsed(
      "{\"section\": \"attention\", \"B\": 1, \"H\": 64, \"T\": 8192, \"D\": 128, \"fwd_s\": 0.001, \"fwd_bwd_s\": 0.005}\n");
  ASSERT_TRUE(attention.ok()) << messages(attention.problems);
  EXPECT_NE(messages(derive_device_figures(attention.value, datasheet()).problems).find("ran its forward at 1100 TFLOP/s"),
            std::string::npos);
  EXPECT_TRUE(derive_device_figures(parsed("").value, datasheet()).ok());  // the measured rows themselves pass
  // A second device row (two files concatenated) replaced the first's memory and SMs silently.
  const auto two = parsed("{\"section\": \"device\", \"name\": \"X\", \"sms\": 7, \"mem_bytes\": 1000000000}\n");
  ASSERT_FALSE(two.ok());
  EXPECT_NE(messages(two.problems).find("a second 'device' row (the first is on line 1)"), std::string::npos)
      << messages(two.problems);
}

// An op row whose rate and time disagree (times written in ms: the norm class
// came out at 1 GB/s), a class faster than 4x the memory bandwidth (one row
// 50x too fast gave 30505 GB/s), a ceiling measured twice (the second replaced
// the first) and a GEMM shape measured twice (counted twice) are refused.
TEST(MeasuredDevice, OpRowsInOtherUnitsAndRowsMeasuredTwiceAreRefused) {
  const std::string rows = read_text(kFile);
  const auto lines = std::count(rows.begin(), rows.end(), '\n');
  const auto parsed = [&](const std::string& extra) { return parse_device_measurements(rows + extra, "m.jsonl"); };
  // 8192 x 768 bf16 is 12.58 MB: 2 x that in 44 us is 572 GB/s; the same rate with the time in ms is not.
  const auto in_ms = parsed("{\"section\": \"op\", \"op\": \"layernorm\", \"tokens\": 8192, \"d\": 768, "
                            "\"fwd_s\": 0.044, \"fwd_bwd_s\": 0.194, \"fwd_gb_per_s\": 572, \"fwd_bwd_gb_per_s\": 324}\n");
  ASSERT_FALSE(in_ms.ok());
  EXPECT_NE(messages(in_ms.problems).find("m.jsonl:" + std::to_string(lines + 1) +
                                          " key 'fwd_gb_per_s': 572 GB/s is not the counted bytes over the time"),
            std::string::npos)
      << messages(in_ms.problems);
  EXPECT_TRUE(parsed("{\"section\": \"op\", \"op\": \"layernorm\", \"tokens\": 8192, \"d\": 768, \"fwd_s\": 4.4e-05, "
                     "\"fwd_bwd_s\": 0.000194, \"fwd_gb_per_s\": 572, \"fwd_bwd_gb_per_s\": 324}\n")
                  .ok());

  std::string fast_norms;
  for (const char* op : {"layernorm", "rmsnorm"}) {
    for (int d : {768, 1024, 2048, 4096, 8192}) {
      fast_norms += std::string("{\"section\": \"op\", \"op\": \"") + op + "\", \"tokens\": 8192, \"d\": " +
                    std::to_string(d) + ", \"fwd_s\": 1e-07, \"fwd_bwd_s\": 3e-07}\n";
    }
  }
  std::string without_norms;
  std::istringstream in(rows);
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"layernorm\"") == std::string::npos && line.find("\"rmsnorm\"") == std::string::npos) without_norms += line + "\n";
  }
  const auto fast = parse_device_measurements(without_norms + fast_norms, "m.jsonl");
  ASSERT_TRUE(fast.ok()) << messages(fast.problems);
  const auto figures = derive_device_figures(fast.value, datasheet());
  EXPECT_NE(messages(figures.problems).find("the norm rows give"), std::string::npos) << messages(figures.problems);
  EXPECT_NE(messages(figures.problems).find("over 4 x the memory bandwidth (3350 GB/s)"), std::string::npos)
      << messages(figures.problems);

  const auto ceiling = parsed("{\"section\": \"ceiling\", \"what\": \"bf16_gemm_8192\", \"tflops_med\": 100}\n");
  ASSERT_FALSE(ceiling.ok());
  EXPECT_NE(messages(ceiling.problems).find("ceiling 'bf16_gemm_8192' is measured twice (first on line"), std::string::npos)
      << messages(ceiling.problems);
  std::string gemm_line;
  std::istringstream again(rows);
  for (std::string line; std::getline(again, line);) {
    if (line.find("\"section\": \"gemm\"") != std::string::npos) {
      gemm_line = line;
      break;
    }
  }
  ASSERT_FALSE(gemm_line.empty());
  const auto twice = parsed(gemm_line + "\n");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(messages(twice.problems).find("is measured twice (first on line"), std::string::npos) << messages(twice.problems);
}

TEST(MeasuredDevice, NeedsThePeakAndBandwidthItCannotMeasure) {
  const auto measured = parse_device_measurements(read_text(kFile), "h100-measured.jsonl");
  DeviceSpec bare;
  bare.name = "x";
  const auto figures = derive_device_figures(measured.value, bare);
  ASSERT_FALSE(figures.ok());
  ASSERT_EQ(figures.problems.size(), 2u);
  EXPECT_EQ(figures.problems[0].where, "--peak-tflops");
  EXPECT_EQ(figures.problems[1].where, "--memory-bandwidth-gb-per-s");
}

TEST(MeasuredDevice, BadLinesNameTheirLineAndField) {
  const std::string text =
      "{\"section\": \"device\", \"sms\": 132}\n"
      "\n"
      "not json\n"
      "{\"section\": \"gemm\", \"m\": 1024, \"k\": 768, \"s_med\": 1e-5, \"tflops_med\": 40}\n"
      "{\"section\": \"gemm\", \"m\": -3, \"n\": 8, \"k\": 8, \"s_med\": 1e-5, \"tflops_med\": 40}\n"
      "{\"section\": \"tpu\"}\n"
      "[1, 2]\n"
      "{\"no_section\": 1}\n";
  const auto parsed = parse_device_measurements(text, "m.jsonl");
  EXPECT_FALSE(parsed.ok());
  std::vector<std::string> where;
  for (const auto& p : parsed.problems) where.push_back(describe(p));
  ASSERT_EQ(where.size(), 6u) << ::testing::PrintToString(where);
  EXPECT_NE(where[0].find("m.jsonl:3"), std::string::npos);
  EXPECT_NE(where[1].find("m.jsonl:4 key 'n'"), std::string::npos);
  EXPECT_NE(where[1].find("missing"), std::string::npos);
  EXPECT_NE(where[2].find("m.jsonl:5 key 'm'"), std::string::npos);
  EXPECT_NE(where[3].find("m.jsonl:6"), std::string::npos);  // unknown section: a warning
  EXPECT_EQ(parsed.problems[3].severity, Severity::warning);
  EXPECT_NE(where[4].find("m.jsonl:7"), std::string::npos);
  EXPECT_NE(where[5].find("m.jsonl:8 key 'section'"), std::string::npos);
  EXPECT_TRUE(parsed.value.gemms.empty());
}

TEST(MeasuredDevice, GarbageIsRefusedWithoutACrash) {
  const std::string original = read_text(kFile);
  std::mt19937 rng(15);
  int refused = 0;
  for (int i = 0; i < 300; ++i) {
    std::string text = original;
    for (int e = 0; e < 1 + static_cast<int>(rng() % 8); ++e) {
      const std::size_t at = rng() % text.size();
      switch (rng() % 3) {
        case 0: text[at] = static_cast<char>(rng() % 256); break;
        case 1: text.erase(at, rng() % 40); break;
        default: text.insert(at, std::string(1 + rng() % 5, static_cast<char>("{}\":,-0e\n"[rng() % 9])));
      }
    }
    Loaded<DeviceMeasurements> parsed;
    ASSERT_NO_THROW(parsed = parse_device_measurements(text, "fuzz.jsonl"));
    if (!parsed.ok()) {
      ++refused;
      for (const auto& p : parsed.problems) EXPECT_EQ(p.where.rfind("fuzz.jsonl", 0), 0u) << p.where;
      continue;
    }
    Loaded<MeasuredDeviceFigures> figures;
    ASSERT_NO_THROW(figures = derive_device_figures(parsed.value, datasheet()));
    if (!figures.ok()) continue;
    const DeviceSpec device = apply_measured_figures(datasheet(), figures.value, parsed.value);
    EXPECT_EQ(gemm_curve_problem(device.gemm_curve), "");
    EXPECT_EQ(attention_curve_problem(device.attention_forward_curve), "");
    EXPECT_EQ(attention_curve_problem(device.attention_backward_curve), "");
  }
  EXPECT_GT(refused, 100);
  std::string binary(4096, '\0');
  for (auto& c : binary) c = static_cast<char>(rng() % 256);
  EXPECT_NO_THROW(parse_device_measurements(binary, "random.bin"));
}

}  // namespace
}  // namespace meshplan
