// The measurement file's rows, the reductions to preset figures and the
// preset text (measured_device.hpp; docs/cost-model.md, "Measured device curves").
#include "model/measured_device.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/compute_model.hpp"
#include "model/layer_graph.hpp"
#include "model/text.hpp"

namespace meshplan {
namespace {

using Json = nlohmann::json;

// `value` rounded as printf's `fmt` writes it: what the preset holds.
double rounded(const char* fmt, double value) { return std::stod(format(fmt, value)); }

// %g without trailing zeros, as the presets are written.
std::string number(double value) { return format("%.6g", value); }

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  if (n == 0) return 0;
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// One row's fields, read with problems that name the line and the key.
struct Row {
  const Json& json;
  std::string where;  // "FILE:LINE"
  Problems& problems;

  std::optional<double> positive(const char* key) const {
    const auto it = json.find(key);
    if (it == json.end() || !it->is_number() || !(it->get<double>() > 0) || !std::isfinite(it->get<double>())) {
      problems.push_back({Severity::error, where + " key '" + std::string(key) + "'",
                          std::string(it == json.end() ? "missing" : "not a positive number") + " in a '" +
                              json.value("section", std::string()) + "' row"});
      return std::nullopt;
    }
    return it->get<double>();
  }
  std::int64_t count(const char* key) const {
    const auto value = positive(key);
    if (!value) return 0;
    if (*value != std::floor(*value) || *value > 1e15) {
      problems.push_back({Severity::error, where + " key '" + std::string(key) + "'", "not a whole number"});
      return 0;
    }
    return static_cast<std::int64_t>(*value);
  }
  // A positive number in [lo, hi] (what the device preset it becomes accepts), else a problem and nullopt.
  std::optional<double> within(const char* key, double lo, double hi, const std::string& unit) const {
    const auto value = positive(key);
    if (!value) return std::nullopt;
    if (*value < lo || *value > hi) {
      problems.push_back({Severity::error, where + " key '" + std::string(key) + "'",
                          "must be between " + format("%g", lo) + " and " + format("%g", hi) + unit + ", got " +
                              format("%g", *value)});
      return std::nullopt;
    }
    return value;
  }
  std::string text(const char* key) const {
    const auto it = json.find(key);
    return it != json.end() && it->is_string() ? it->get<std::string>() : std::string();
  }
};

// The [tokens, d] kernels the cost model has a class for, and the tensor
// passes of [tokens, d] it counts forward (model/layer_graph.hpp, bf16):
// a norm reads x and writes y (2); an activation reads and writes (2); the
// fused bias + dropout + residual add reads two and writes one (3).
struct CountedKernel {
  const char* op;
  StreamOp op_class;
  double forward_passes;
};
constexpr CountedKernel kCountedKernels[] = {
    {"layernorm", StreamOp::norm, 2},       {"rmsnorm", StreamOp::norm, 2},       {"gelu_tanh", StreamOp::activation, 2},
    {"silu", StreamOp::activation, 2},      {"residual_add", StreamOp::elementwise, 3},
};
constexpr double kBf16Bytes = 2;
// The fused cross-entropy the cost model prices (layer_graph.hpp,
// kLossLogitPasses): bf16 logits read that many times forward.
constexpr double kCrossEntropyBytesPerLogit = kLossLogitPasses * kBf16Bytes;
// AdamW as the cost model counts it per parameter (model/evaluate.cpp):
// fp32 master weight and two moments read and written (2 x 12), the bf16
// gradient read (2), the bf16 weight written (2). The measured fused kernel
// ran fp32 tensors: 4 read and 3 written, 28 bytes as well.
constexpr double kOptimizerBytesPerParameter = 28;
// Measurement kernels that are known and used; any other op is a warning.
constexpr const char* kCrossEntropyOp = "cross_entropy_compiled";  // the fused loss (torch.compile)
constexpr const char* kEagerCrossEntropyOp = "cross_entropy_fp32";  // read, not used for the class
constexpr const char* kOptimizerOp = "adamw_fused_fp32";
// Where the written source: text says what was measured; a base written by
// calibrate --from before keeps only what precedes it, so rewriting is idempotent.
constexpr const char* kMeasuredMark = "; measured curves: ";

const CountedKernel* counted_kernel(const std::string& op) {
  for (const auto& k : kCountedKernels) {
    if (op == k.op) return &k;
  }
  return nullptr;
}

}  // namespace

double DeviceMeasurements::Attention::forward_flops() const {
  return 2.0 * static_cast<double>(batch) * static_cast<double>(heads) * static_cast<double>(seq) *
         static_cast<double>(seq) * static_cast<double>(head_dim);
}

Loaded<DeviceMeasurements> parse_device_measurements(std::string_view text, const std::string& file) {
  Loaded<DeviceMeasurements> result;
  DeviceMeasurements& m = result.value;
  Problems& problems = result.problems;
  m.file = file;
  Lines lines(text);
  std::string_view line;
  int rows = 0;
  std::string device_line;  // the 'device' row's line number, once read
  // A ceiling or a GEMM shape measured twice: the second silently replaced the first, or was counted twice.
  std::map<std::string, std::size_t> first_line;
  while (lines.next(line)) {
    const std::string where = file + ":" + std::to_string(lines.number());
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const Json json = Json::parse(line, nullptr, false);
    if (json.is_discarded() || !json.is_object()) {
      problems.push_back({Severity::error, where, "not a JSON object (one measurement per line, as h100-measured.jsonl)"});
      continue;
    }
    const auto section_it = json.find("section");
    if (section_it == json.end() || !section_it->is_string()) {
      problems.push_back({Severity::error, where + " key 'section'", "missing: one of device, ceiling, gemm, attention, op"});
      continue;
    }
    ++rows;
    const std::string section = section_it->get<std::string>();
    const Row row{json, where, problems};
    const std::size_t before = problems.size();
    if (section == "device") {
      // One device per file: a second row (two files concatenated) would silently replace the first.
      if (!device_line.empty()) {
        problems.push_back({Severity::error, where + " key 'section'",
                            "a second 'device' row (the first is on line " + device_line +
                                "): one measured device per file"});
        continue;
      }
      device_line = std::to_string(lines.number());
      m.device_name = row.text("name");
      if (const std::string torch = row.text("torch"); !torch.empty()) m.software = "PyTorch " + torch;
      if (const std::string stack = row.text("stack"); !stack.empty()) m.software = stack;  // calibrate --backend cuda
      // Bounded as the preset written from them is read (device_spec.cpp): compute_units 1 to
      // kComputeUnitsMax, memory_gib (written with two decimals) 0.01 to kMemoryGibMax.
      if (json.contains("sms") && row.within("sms", 1, static_cast<double>(kComputeUnitsMax), " SMs")) m.compute_units = row.count("sms");
      constexpr double kGiB = 1024.0 * 1024 * 1024;
      if (json.contains("mem_bytes")) m.memory_bytes = row.within("mem_bytes", 0.01 * kGiB, kMemoryGibMax * kGiB, " bytes").value_or(0);
      if (json.contains("l2_bytes")) m.l2_bytes = row.positive("l2_bytes").value_or(0);
    } else if (section == "ceiling") {
      const std::string what = row.text("what");
      if (const auto [it, added] = first_line.emplace("ceiling " + what, lines.number()); !added) {
        problems.push_back({Severity::error, where + " key 'what'",
                            "ceiling '" + what + "' is measured twice (first on line " + std::to_string(it->second) +
                                "): keep one"});
        continue;
      }
      if (what == "bf16_gemm_8192") {
        m.gemm_ceiling_flops_per_s = row.positive("tflops_med").value_or(0) * 1e12;
      } else if (what == "fp8_gemm_8192") {
        m.fp8_gemm_ceiling_flops_per_s = row.positive("tflops_med").value_or(0) * 1e12;
      } else if (what == "d2d_copy_1GiB") {
        m.copy_bytes_per_s = row.positive("gb_per_s_med").value_or(0) * 1e9;
      } else {
        problems.push_back({Severity::warning, where,
                            "ceiling '" + what + "' is not used (bf16_gemm_8192, fp8_gemm_8192 and d2d_copy_1GiB are)"});
      }
    } else if (section == "gemm") {
      DeviceMeasurements::Gemm g{row.count("m"), row.count("n"), row.count("k"), row.positive("s_med").value_or(0),
                                 row.positive("tflops_med").value_or(0) * 1e12};
      const std::string shape = "gemm " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k);
      if (const auto [it, added] = first_line.emplace(shape, lines.number()); !added && problems.size() == before) {
        problems.push_back({Severity::error, where, "GEMM m " + std::to_string(g.m) + ", n " + std::to_string(g.n) +
                                                        ", k " + std::to_string(g.k) + " is measured twice (first on line " +
                                                        std::to_string(it->second) + "): keep one"});
        continue;
      }
      // The rate is the shape's FLOPs over the median time (measure_device.py); a row whose two
      // disagree has one of them wrong, and the curve would be built from either.
      const double implied = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k) / g.time_s;
      if (problems.size() == before && !(std::abs(implied / g.flops_per_s - 1) <= 0.1)) {
        problems.push_back({Severity::error, where + " key 'tflops_med'",
                            format("%.4g", g.flops_per_s / 1e12) + " TFLOP/s is not 2 m n k / s_med = " +
                                format("%.4g", implied / 1e12) + " TFLOP/s: one of the two is wrong"});
      }
      if (problems.size() == before) m.gemms.push_back(g);
    } else if (section == "attention") {
      DeviceMeasurements::Attention a{row.count("B"), row.count("H"), row.count("T"), row.count("D"),
                                      row.positive("fwd_s").value_or(0), row.positive("fwd_bwd_s").value_or(0)};
      if (problems.size() == before && !(a.forward_backward_s > a.forward_s)) {
        problems.push_back({Severity::error, where + " key 'fwd_bwd_s'", "must exceed fwd_s (it includes the forward)"});
      }
      if (problems.size() == before) m.attention.push_back(a);
    } else if (section == "attention_dropout") {
      DeviceMeasurements::AttentionDropout a;
      a.plain = {row.count("B"), row.count("H"), row.count("T"), row.count("D"), row.positive("fwd_s").value_or(0),
                 row.positive("fwd_bwd_s").value_or(0)};
      a.dropped = a.plain;
      a.dropped.forward_s = row.positive("dropout_fwd_s").value_or(0);
      a.dropped.forward_backward_s = row.positive("dropout_fwd_bwd_s").value_or(0);
      a.dropout = row.positive("dropout").value_or(0);
      if (problems.size() == before && !(a.plain.forward_backward_s > a.plain.forward_s &&
                                         a.dropped.forward_backward_s > a.dropped.forward_s)) {
        problems.push_back({Severity::error, where + " key 'fwd_bwd_s'", "must exceed fwd_s, with and without dropout"});
      }
      if (problems.size() == before) m.attention_dropout.push_back(a);
    } else if (section == "op") {
      DeviceMeasurements::Op op;
      op.op = row.text("op");
      if (counted_kernel(op.op)) {
        op.tokens = row.count("tokens");
        op.width = row.count("d");
        op.forward_s = row.positive("fwd_s").value_or(0);
        op.forward_backward_s = row.positive("fwd_bwd_s").value_or(0);
        // measure_device.py's rates: 2 x and 5 x the [tokens, d] tensor's bytes over the forward and the
        // forward + backward. A row whose rate and time disagree has one of them in other units.
        const double element = json.value("dtype", std::string("bf16")) == "fp32" ? 4.0 : 2.0;
        const double tensor_bytes = static_cast<double>(op.tokens) * static_cast<double>(op.width) * element;
        const std::pair<const char*, std::pair<double, double>> rates[] = {
            {"fwd_gb_per_s", {2 * tensor_bytes, op.forward_s}}, {"fwd_bwd_gb_per_s", {5 * tensor_bytes, op.forward_backward_s}}};
        for (const auto& [key, counted] : rates) {
          if (!json.contains(key) || problems.size() != before || !(counted.second > 0)) continue;
          const auto given = row.positive(key);
          const double implied = counted.first / counted.second / 1e9;
          if (given && !(std::abs(implied / *given - 1) <= 0.1)) {
            problems.push_back({Severity::error, where + " key '" + key + "'",
                                format("%.4g", *given) + " GB/s is not the counted bytes over the time, " +
                                    format("%.4g", implied) + " GB/s: one of the two is wrong (a time in ms?)"});
          }
        }
      } else if (op.op == kCrossEntropyOp || op.op == kEagerCrossEntropyOp) {
        op.tokens = row.count("tokens");
        op.vocab = row.count("vocab");
        op.forward_s = row.positive("fwd_s").value_or(0);
        op.forward_backward_s = row.positive("fwd_bwd_s").value_or(0);
        if (op.op == kEagerCrossEntropyOp) {
          problems.push_back({Severity::warning, where + " key 'op'",
                              "'" + op.op + "' is the eager loss; the cost model prices the fused one (" + kCrossEntropyOp +
                                  " rows, scripts/gpu/measure_loss.py): not used for the cross_entropy rate"});
        }
      } else if (op.op == kOptimizerOp) {
        op.parameters = row.count("params");
        op.step_s = row.positive("s").value_or(0);
      } else {
        problems.push_back({Severity::warning, where + " key 'op'", "'" + op.op + "' is not a kernel meshplan has a class for; not used"});
        continue;
      }
      if (problems.size() == before) m.ops.push_back(op);
    } else {
      problems.push_back({Severity::warning, where + " key 'section'",
                          "'" + section + "' is not one of: device, ceiling, gemm, attention, attention_dropout, op; not used"});
    }
  }
  if (rows == 0) problems.push_back({Severity::error, file, "no measurements (one JSON object per line)"});
  return result;
}

namespace {

// Launch floor: the shortest call of any kind; calls this short do not
// shrink with their size, so their time is the host's. Returns it in seconds.
double launch_floor(MeasuredDeviceFigures& f, const DeviceMeasurements& m) {
  double floor_s = 0;
  auto consider = [&](double seconds, const std::string& call) {
    if (seconds > 0 && (floor_s == 0 || seconds < floor_s)) {
      floor_s = seconds;
      f.launch_floor_call = call;
    }
  };
  for (const auto& g : m.gemms) {
    consider(g.time_s, "GEMM m x k x n = " + std::to_string(g.m) + "x" + std::to_string(g.k) + "x" + std::to_string(g.n));
  }
  for (const auto& op : m.ops) consider(op.forward_s, op.op + " forward");
  f.launch_overhead_s = rounded("%.1f", floor_s * 1e6) * 1e-6;
  if (floor_s > 0) f.launch_floor_call += ", " + format("%.1f", floor_s * 1e6) + " us median";
  return floor_s;
}

// GEMM curve: the residual after peak x gemm_fraction x the model's own
// wave quantization (compute_model.hpp, tile_efficiency; bf16 operands),
// calls above twice the launch floor, in up to 8 bins of intensity.
void fit_gemm_curve(MeasuredDeviceFigures& f, const DeviceMeasurements& m, double floor_s, double gemm_fraction) {
  ComputeRates rates;
  rates.compute_units = f.compute_units;
  std::vector<std::pair<double, double>> points;  // (intensity, residual)
  for (const auto& g : m.gemms) {
    if (g.time_s < 2 * floor_s) continue;
    const double mm = static_cast<double>(g.m), n = static_cast<double>(g.n), k = static_cast<double>(g.k);
    const double intensity = 2 * mm * n * k / (mm * k + k * n + mm * n);
    const double residual = g.flops_per_s / (f.peak_flops_per_s * gemm_fraction * tile_efficiency(mm, n, 1, kBf16Bytes, rates));
    points.push_back({intensity, residual});
  }
  std::sort(points.begin(), points.end());
  f.gemm_curve_measured = static_cast<int>(points.size());
  const std::size_t bins = std::min<std::size_t>(8, points.size());
  for (std::size_t b = 0; b < bins; ++b) {
    std::vector<double> intensities, residuals;
    for (std::size_t i = b * points.size() / bins; i < (b + 1) * points.size() / bins; ++i) {
      intensities.push_back(points[i].first);
      residuals.push_back(points[i].second);
    }
    const GemmCurvePoint point{rounded("%.0f", median(intensities)), rounded("%.3f", median(residuals))};
    if (!f.gemm_curve.empty() && point.intensity <= f.gemm_curve.back().intensity) continue;  // as written: strictly increasing
    f.gemm_curve.push_back(point);
  }
}

// Fused attention by forward FLOPs (one point per distinct FLOP count, the
// first measured), and the slowdown that dropout brings.
void fit_attention(MeasuredDeviceFigures& f, const DeviceMeasurements& m) {
  std::vector<DeviceMeasurements::Attention> attention = m.attention;
  std::stable_sort(attention.begin(), attention.end(),
                   [](const auto& a, const auto& b) { return a.forward_flops() < b.forward_flops(); });
  for (const auto& a : attention) {
    const double flops = a.forward_flops();
    const double x = rounded("%.1f", flops / 1e9) * 1e9;
    if (!f.attention_forward_curve.empty() && x <= f.attention_forward_curve.back().forward_flops) continue;
    f.attention_forward_curve.push_back({x, rounded("%.0f", flops / a.forward_s / 1e12) * 1e12});
    f.attention_backward_curve.push_back({x, rounded("%.0f", DeviceMeasurements::Attention::kBackwardFlopRatio * flops / (a.forward_backward_s - a.forward_s) / 1e12) * 1e12});
  }
  if (!m.attention_dropout.empty()) {
    std::vector<double> forward, backward;
    for (const auto& a : m.attention_dropout) {
      forward.push_back(a.dropped.forward_s / a.plain.forward_s);
      backward.push_back((a.dropped.forward_backward_s - a.dropped.forward_s) / (a.plain.forward_backward_s - a.plain.forward_s));
    }
    f.attention_dropout_slowdown = std::array<double, 2>{std::max(1.0, rounded("%.3f", median(forward))),
                                                         std::max(1.0, rounded("%.3f", median(backward)))};
  }
}

// Op classes: the counted kernels at the largest measured tokens x d (where
// the launch floor matters least), the fused loss and the fused optimizer.
std::vector<OpClassFigure> fit_op_classes(const DeviceMeasurements& m, Problems& problems) {
  double largest = 0;
  for (const auto& op : m.ops) {
    if (counted_kernel(op.op)) largest = std::max(largest, static_cast<double>(op.tokens) * static_cast<double>(op.width));
  }
  std::vector<OpClassFigure> classes;
  auto figure_for = [&](StreamOp op_class) -> OpClassFigure& {
    for (auto& c : classes) {
      if (c.op_class == op_class) return c;
    }
    classes.push_back({op_class, 0, {}, "", ""});
    return classes.back();
  };
  for (const auto& op : m.ops) {
    const CountedKernel* kernel = counted_kernel(op.op);
    if (!kernel || static_cast<double>(op.tokens) * static_cast<double>(op.width) != largest) continue;
    OpClassFigure& c = figure_for(kernel->op_class);
    const double traffic = 3 * kernel->forward_passes * kBf16Bytes * static_cast<double>(op.tokens) * static_cast<double>(op.width);
    c.rows_bytes_per_s.push_back(traffic / op.forward_backward_s);
    if (c.kernels.find(op.op) == std::string::npos) c.kernels += (c.kernels.empty() ? "" : " and ") + op.op;
    c.counted = format("%.0f", kernel->forward_passes) + " passes of [tokens, d] forward, 3x that forward + backward";
  }
  for (const auto& op : m.ops) {
    if (op.op == kCrossEntropyOp) {
      OpClassFigure& c = figure_for(StreamOp::cross_entropy);
      c.rows_bytes_per_s.push_back(3 * kCrossEntropyBytesPerLogit * static_cast<double>(op.tokens) *
                                   static_cast<double>(op.vocab) / op.forward_backward_s);
      c.kernels = "compiled (fused) fp32 cross-entropy over bf16 logits";
      c.counted = "4 bytes per logit forward (the bf16 logits read twice), 3x that forward + backward";
    }
  }
  for (const auto& op : m.ops) {
    if (op.op == kOptimizerOp) {
      OpClassFigure& c = figure_for(StreamOp::optimizer);
      c.rows_bytes_per_s.push_back(kOptimizerBytesPerParameter * static_cast<double>(op.parameters) / op.step_s);
      c.kernels = "fused AdamW";
      c.counted = "28 bytes per parameter per step (4 tensors read, 3 written)";
    }
  }
  for (auto& c : classes) {
    c.bytes_per_s = rounded("%.0f", median(c.rows_bytes_per_s) / 1e9) * 1e9;
    if (!(c.bytes_per_s > 0)) {
      problems.push_back({Severity::error, m.file, "the " + to_string(c.op_class) + " rows give a rate that rounds to 0 GB/s"});
    }
  }
  return classes;
}

// What the device schema would refuse when the preset is loaded, refused here naming the rows.
void check_figures(const MeasuredDeviceFigures& f, const DeviceMeasurements& m, Problems& problems) {
  if (const std::string p = gemm_curve_problem(f.gemm_curve); !p.empty()) {
    problems.push_back({Severity::error, m.file, "the 'gemm' rows give a gemm_curve the device schema refuses: " + p});
  }
  for (const auto* curve : {&f.attention_forward_curve, &f.attention_backward_curve}) {
    if (const std::string p = attention_curve_problem(*curve); !p.empty()) {
      problems.push_back({Severity::error, m.file, "the 'attention' rows give a curve the device schema refuses: " + p});
    }
  }
  const std::string fraction_range = "[" + format("%.3g", kAchievableFractionMin) + ", 1]";
  if (f.gemm_fraction && !(*f.gemm_fraction >= kAchievableFractionMin && *f.gemm_fraction <= 1)) {
    problems.push_back({Severity::error, m.file, "the bf16_gemm_8192 ceiling is " + format("%.3g", *f.gemm_fraction) +
                                                     " x the dense bf16 peak; it must be in " + fraction_range + ": is the peak right?"});
  }
  if (f.fp8_gemm_fraction && !(*f.fp8_gemm_fraction >= kAchievableFractionMin && *f.fp8_gemm_fraction <= 1)) {
    problems.push_back({Severity::error, m.file, "the fp8_gemm_8192 ceiling is " + format("%.3g", *f.fp8_gemm_fraction) +
                                                     " x the dense fp8 peak; it must be in " + fraction_range + ": is the peak right?"});
  }
  if (f.attention_dropout_slowdown) {
    const auto& [forward, backward] = *f.attention_dropout_slowdown;
    if (forward > kDropoutSlowdownMax || backward > kDropoutSlowdownMax) {
      problems.push_back({Severity::error, m.file,
                          "the 'attention_dropout' rows make the fused attention " + format("%.3g", forward) +
                              " x (forward) and " + format("%.3g", backward) + " x (backward) slower with dropout than "
                              "without; a device preset accepts up to " + format("%.3g", kDropoutSlowdownMax) +
                              " x: are fwd_s and dropout_fwd_s (fwd_bwd_s and dropout_fwd_bwd_s) of the same call?"});
    }
  }
  // A memory-bound class streams [tokens, d] through HBM, or at best through L2 (H100: about 1.7x HBM);
  // past 4x the memory bandwidth a row's time is in other units (ms for s), not a faster kernel.
  for (const auto& c : f.op_classes) {
    if (f.memory_bandwidth_bytes_per_s > 0 && c.bytes_per_s > 4 * f.memory_bandwidth_bytes_per_s) {
      problems.push_back({Severity::error, m.file,
                          "the " + to_string(c.op_class) + " rows give " + format("%.0f", c.bytes_per_s / 1e9) +
                              " GB/s, over 4 x the memory bandwidth (" +
                              format("%.0f", f.memory_bandwidth_bytes_per_s / 1e9) +
                              " GB/s): are fwd_s and fwd_bwd_s in seconds?"});
    }
  }
  if (f.memory_bandwidth_fraction && !(*f.memory_bandwidth_fraction >= kAchievableFractionMin && *f.memory_bandwidth_fraction <= 1)) {
    problems.push_back({Severity::error, m.file, "the d2d_copy_1GiB ceiling is " + format("%.3g", *f.memory_bandwidth_fraction) +
                                                     " x the memory bandwidth; it must be in " + fraction_range + ": is the bandwidth right?"});
  }
  for (const auto& c : f.op_classes) {
    if (c.bytes_per_s > kOpBandwidthGbPerSMax * 1e9) {
      problems.push_back({Severity::error, m.file, "the " + to_string(c.op_class) + " rows give " + format("%.3g", c.bytes_per_s / 1e9) +
                                                       " GB/s, more than a device preset holds (" + format("%.3g", kOpBandwidthGbPerSMax) +
                                                       "): are tokens, d and the times right?"});
    }
  }
  if (f.launch_overhead_s * 1e6 > kLaunchOverheadUsMax) {
    problems.push_back({Severity::error, m.file, "the quickest call measured (" + f.launch_floor_call + ") gives a launch floor of " +
                                                     format("%.3g", f.launch_overhead_s) + " s, more than a device preset holds (" +
                                                     format("%.3g", kLaunchOverheadUsMax) + " us): are the times in seconds?"});
  }
}

}  // namespace

Loaded<MeasuredDeviceFigures> derive_device_figures(const DeviceMeasurements& m, const DeviceSpec& base) {
  Loaded<MeasuredDeviceFigures> result;
  MeasuredDeviceFigures& f = result.value;
  f.peak_flops_per_s = base.peak_for(Dtype::bf16).value_or(0);
  f.memory_bandwidth_bytes_per_s = base.memory_bandwidth_bytes_per_s;
  f.compute_units = m.compute_units > 0 ? m.compute_units : base.compute_units;
  if (!(f.peak_flops_per_s > 0)) {
    result.problems.push_back({Severity::error, "--peak-tflops",
                               "the measured GEMMs are bf16: give the device's dense bf16 peak (--peak-tflops bf16=...) "
                               "or a --base device that has one"});
  }
  if (!(f.memory_bandwidth_bytes_per_s > 0)) {
    result.problems.push_back({Severity::error, "--memory-bandwidth-gb-per-s",
                               "give the device's memory bandwidth, or a --base device that has one"});
  }
  if (!result.ok()) return result;

  // Nothing runs faster than the device's peak: a row that does has the wrong shape or time, or the
  // --base device is not the one measured.
  const double peak_tflops = f.peak_flops_per_s / 1e12;
  for (const auto& g : m.gemms) {
    if (g.flops_per_s > f.peak_flops_per_s) {
      result.problems.push_back({Severity::error, m.file,
                                 "the GEMM m x k x n = " + std::to_string(g.m) + "x" + std::to_string(g.k) + "x" +
                                     std::to_string(g.n) + " ran at " + format("%.4g", g.flops_per_s / 1e12) +
                                     " TFLOP/s, above the device's dense bf16 peak of " + format("%.4g", peak_tflops) +
                                     " TFLOP/s: is the row, or the --base device, right?"});
    }
  }
  for (const auto& a : m.attention) {
    if (a.forward_flops() / a.forward_s > f.peak_flops_per_s) {
      result.problems.push_back({Severity::error, m.file,
                                 "the attention call B x H x T x D = " + std::to_string(a.batch) + "x" +
                                     std::to_string(a.heads) + "x" + std::to_string(a.seq) + "x" +
                                     std::to_string(a.head_dim) + " ran its forward at " +
                                     format("%.4g", a.forward_flops() / a.forward_s / 1e12) +
                                     " TFLOP/s, above the device's dense bf16 peak of " + format("%.4g", peak_tflops) +
                                     " TFLOP/s: is the row, or the --base device, right?"});
    }
  }
  if (!result.ok()) return result;

  const double floor_s = launch_floor(f, m);
  const double gemm_fraction = m.gemm_ceiling_flops_per_s / f.peak_flops_per_s;  // unrounded for the residuals, as measured
  if (m.gemm_ceiling_flops_per_s > 0) f.gemm_fraction = rounded("%.4f", gemm_fraction);
  if (m.copy_bytes_per_s > 0) f.memory_bandwidth_fraction = rounded("%.3f", m.copy_bytes_per_s / f.memory_bandwidth_bytes_per_s);
  if (m.fp8_gemm_ceiling_flops_per_s > 0) {
    if (const auto fp8_peak = base.peak_for(Dtype::fp8)) {
      f.fp8_gemm_fraction = rounded("%.4f", m.fp8_gemm_ceiling_flops_per_s / *fp8_peak);
    } else {
      result.problems.push_back({Severity::warning, m.file, "the fp8_gemm_8192 ceiling is not used: " +
                                                                missing_peak_message(base, Dtype::fp8) +
                                                                " (give --peak-tflops fp8=... or a --base device that has one)"});
    }
  }
  if (!m.gemms.empty()) {
    if (m.gemm_ceiling_flops_per_s <= 0) {
      result.problems.push_back({Severity::error, m.file, "GEMM rows need a 'ceiling' row 'bf16_gemm_8192' (the large-GEMM rate they are fractions of)"});
      return result;
    }
    fit_gemm_curve(f, m, floor_s, gemm_fraction);
  }
  fit_attention(f, m);
  f.op_classes = fit_op_classes(m, result.problems);
  check_figures(f, m, result.problems);
  return result;
}

DeviceSpec apply_measured_figures(const DeviceSpec& base, const MeasuredDeviceFigures& f, const DeviceMeasurements& m) {
  DeviceSpec d = base;
  // The file's rows are of a CUDA device (scripts/gpu/measure_device.py, calibrate --backend cuda).
  if (d.kind == DeviceKind::unspecified) d.kind = DeviceKind::nvidia_gpu;
  if (m.memory_bytes > 0) d.memory_bytes = rounded("%.2f", m.memory_bytes / (1024.0 * 1024 * 1024)) * 1024.0 * 1024 * 1024;
  d.compute_units = f.compute_units;
  if (f.gemm_fraction) d.gemm_efficiency = *f.gemm_fraction;
  if (f.fp8_gemm_fraction) d.fp8_gemm_efficiency = *f.fp8_gemm_fraction;
  if (f.memory_bandwidth_fraction) d.memory_efficiency = *f.memory_bandwidth_fraction;
  if (!f.gemm_curve.empty()) d.gemm_curve = f.gemm_curve;
  if (!f.attention_forward_curve.empty()) {
    d.attention_forward_curve = f.attention_forward_curve;
    d.attention_backward_curve = f.attention_backward_curve;
  }
  if (f.attention_dropout_slowdown) d.attention_dropout_slowdown = *f.attention_dropout_slowdown;
  for (const auto& c : f.op_classes) d.op_bandwidth_bytes_per_s[static_cast<std::size_t>(c.op_class)] = c.bytes_per_s;
  if (f.launch_overhead_s > 0) d.launch_overhead_s = f.launch_overhead_s;
  d.threaded.reset();  // a CPU's per-thread figures do not describe the measured device
  return d;
}

std::map<std::string, std::string> yaml_line_comments(std::string_view text) {
  std::map<std::string, std::string> comments;
  std::string parent;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    const std::size_t indent = line.find_first_not_of(' ');
    if (indent == std::string_view::npos || line[indent] == '#') continue;
    const std::size_t colon = line.find(':', indent);
    if (colon == std::string_view::npos) continue;
    const std::string key(line.substr(indent, colon - indent));
    if (indent == 0) parent = key;
    // A comment starts at a '#' after white space, outside a quoted value.
    std::size_t hash = std::string_view::npos;
    bool quoted = false;
    for (std::size_t i = colon; i < line.size(); ++i) {
      if (line[i] == '"') quoted = !quoted;
      if (!quoted && line[i] == '#' && (line[i - 1] == ' ' || line[i - 1] == '\t')) {
        hash = i;
        break;
      }
    }
    if (hash == std::string_view::npos) continue;
    const std::string comment = trim(line.substr(hash + 1));
    if (!comment.empty()) comments[indent == 0 ? key : parent + "." + key] = comment;
  }
  return comments;
}

namespace {

// The measured rates under `achievable:` (GEMM curve, fused attention and
// its dropout slowdown, op classes), each with the rows it came from.
void write_measured_rates(std::ostream& y, const DeviceSpec& d, const MeasuredDeviceFigures& f, const DeviceMeasurements& m,
                          const std::string& slowdown_comment) {
  if (!f.gemm_curve.empty()) {
    y << "  # Measured bf16 GEMM efficiency by arithmetic intensity 2mnk/(mk+kn+mn), as\n"
      << "  # a fraction of peak x gemm_fraction x the model's wave quantization\n"
      << "  # (compute_model.cpp, tile_efficiency, " << f.compute_units << " SMs): the " << f.gemm_curve_measured << " of "
      << m.gemms.size() << " measured shapes timed above\n"
      << "  # twice the launch floor, sorted by intensity, in 8 bins of equal count, the\n"
      << "  # median intensity and the median residual of each.\n"
      << "  gemm_curve: [";
    for (std::size_t i = 0; i < f.gemm_curve.size(); ++i) {
      y << (i ? ", " : "") << "[" << format("%.0f", f.gemm_curve[i].intensity) << ", " << format("%.3f", f.gemm_curve[i].fraction) << "]";
    }
    y << "]\n";
  }
  if (!f.attention_forward_curve.empty()) {
    y << "  # Measured causal fused attention, bf16, by forward GFLOP per call (2 B H T^2 D:\n"
      << "  # the causal half of Q K^T and P V): forward TFLOP/s, and backward-only TFLOP/s\n"
      << "  # (2.5x the forward FLOPs over the forward+backward time less the forward time).\n"
      << "  # Calls (B x H x T x D):";
    std::vector<DeviceMeasurements::Attention> calls = m.attention;
    std::stable_sort(calls.begin(), calls.end(), [](const auto& a, const auto& b) { return a.forward_flops() < b.forward_flops(); });
    for (std::size_t i = 0; i < calls.size(); ++i) {
      y << (i ? ", " : " ") << calls[i].batch << "x" << calls[i].heads << "x" << calls[i].seq << "x" << calls[i].head_dim;
    }
    y << ".\n";
    for (const auto* curve : {&f.attention_forward_curve, &f.attention_backward_curve}) {
      y << "  " << (curve == &f.attention_forward_curve ? "attention_forward_curve" : "attention_backward_curve") << ": [";
      for (std::size_t i = 0; i < curve->size(); ++i) {
        y << (i ? ", " : "") << "[" << format("%.1f", (*curve)[i].forward_flops / 1e9) << ", "
          << format("%.0f", (*curve)[i].flops_per_s / 1e12) << "]";
      }
      y << "]\n";
    }
  }
  const std::string slowdown_line = "  attention_dropout_slowdown: {forward: " + format("%.3f", d.attention_dropout_slowdown[0]) +
                                    ", backward: " + format("%.3f", d.attention_dropout_slowdown[1]) + "}";
  if (f.attention_dropout_slowdown) {
    double p = 0;
    for (const auto& a : m.attention_dropout) p = std::max(p, a.dropout);
    y << "  # Measured fused attention with dropout over the same call without it\n"
      << "  # (dropout " << number(p) << ", " << m.attention_dropout.size()
      << " calls): the median of the forward ratios and of the backward-only ones.\n"
      << slowdown_line << "\n";
  } else if (d.attention_dropout_slowdown[0] > 1 || d.attention_dropout_slowdown[1] > 1) {
    y << slowdown_line << "   # " << slowdown_comment << "\n";
  }
  if (!f.op_classes.empty()) {
    y << "  # Measured memory-bound op classes, bf16 [tokens, d] kernels at the largest\n"
      << "  # measured tokens x d: the traffic the cost model counts for the class, forward +\n"
      << "  # backward, over the measured forward + backward time; the median of the rows.\n"
      << "  op_bandwidth_gb_per_s:\n";
    for (const auto& c : f.op_classes) {
      std::string rows;
      for (double r : c.rows_bytes_per_s) rows += (rows.empty() ? "" : ", ") + format("%.0f", r / 1e9);
      y << "    " << to_string(c.op_class) << ": " << format("%.0f", c.bytes_per_s / 1e9) << "   # " << c.kernels << "; "
        << c.counted << ": " << rows << "\n";
    }
    std::string missing;
    for (std::size_t i = 0; i < kStreamOps; ++i) {
      const auto op = static_cast<StreamOp>(i);
      if (std::none_of(f.op_classes.begin(), f.op_classes.end(), [&](const OpClassFigure& c) { return c.op_class == op; })) {
        missing += (missing.empty() ? "" : ", ") + to_string(op);
      }
    }
    if (!missing.empty()) y << "    # not measured (memory bandwidth x memory_bandwidth_fraction): " << missing << "\n";
  }
}

}  // namespace

std::string measured_device_yaml(const DeviceSpec& d, const MeasuredDeviceFigures& f, const DeviceMeasurements& m,
                                 const std::string& base_label, const std::string& command,
                                 const std::map<std::string, std::string>& base_comments) {
  constexpr double gib = 1024.0 * 1024 * 1024;
  const std::string from_base = "from " + base_label;
  // A kept figure's comment: the base's own for that key, else where it came from.
  auto kept = [&](const std::string& key) {
    const auto it = base_comments.find(key);
    return it != base_comments.end() ? it->second : from_base;
  };
  std::ostringstream y;
  y << "# " << d.name << " as measured: " << (m.device_name.empty() ? "the device" : m.device_name)
    << (m.software.empty() ? "" : ", " + m.software) << " (" << m.file << ").\n"
    << "# Written by `" << command << "`.\n"
    << "# Measured figures are derived from the rows of that file as docs/cost-model.md,\n"
    << "# \"Measured device curves\", states; the other figures are " << from_base << ",\n"
    << "# each with the source its comment gives.\n"
    << "# No figure here was compared with or fitted to a training run.\n"
    << "name: " << d.name << "\n"
    << "source: \"" << d.source.substr(0, d.source.find(kMeasuredMark)) << kMeasuredMark << m.file
    << (m.device_name.empty() ? "" : ", " + m.device_name) << (m.software.empty() ? "" : ", " + m.software) << "\"\n"
    << "kind: " << to_string(d.kind) << "   # "
    << (base_comments.count("kind") ? kept("kind") : "the file's rows are of a CUDA device") << "\n"
    << "peak_tflops:            # " << (base_comments.count("peak_tflops") ? kept("peak_tflops") : "dense peaks, " + from_base) << "\n";
  for (const auto& [dtype, flops] : d.peak_flops_per_s) {
    y << "  " << to_string(dtype) << ": " << number(flops / 1e12) << "   # " << kept("peak_tflops." + to_string(dtype)) << "\n";
  }
  y << "memory_gib: " << number(d.memory_bytes / gib);
  if (m.memory_bytes > 0) {
    y << "       # measured: device total memory " << format("%.0f", m.memory_bytes) << " B (the file's 'device' row)\n";
  } else {
    y << "       # " << kept("memory_gib") << "\n";
  }
  y << "memory_bandwidth_gb_per_s: " << number(d.memory_bandwidth_bytes_per_s / 1e9) << " # " << kept("memory_bandwidth_gb_per_s") << "\n"
    << "achievable:\n";
  if (f.gemm_fraction) {
    y << "  gemm_fraction: " << number(*f.gemm_fraction) << "           # measured: bf16 8192^3 GEMM, median "
      << format("%.1f", m.gemm_ceiling_flops_per_s / 1e12) << " TFLOP/s / " << number(f.peak_flops_per_s / 1e12)
      << " dense peak\n";
  } else {
    y << "  gemm_fraction: " << number(d.gemm_efficiency) << "           # " << from_base << " (no bf16_gemm_8192 row)\n";
  }
  if (f.fp8_gemm_fraction) {
    y << "  fp8_gemm_fraction: " << number(*f.fp8_gemm_fraction) << "       # measured: fp8 (e4m3) 8192^3 GEMM, median "
      << format("%.1f", m.fp8_gemm_ceiling_flops_per_s / 1e12) << " TFLOP/s / " << number(*d.peak_for(Dtype::fp8) / 1e12)
      << " dense fp8 peak; the gemm_curve's shape applies to it\n";
  } else if (d.fp8_gemm_efficiency > 0) {
    y << "  fp8_gemm_fraction: " << number(d.fp8_gemm_efficiency) << "       # " << kept("achievable.fp8_gemm_fraction") << "\n";
  }
  if (f.memory_bandwidth_fraction) {
    y << "  memory_bandwidth_fraction: " << number(*f.memory_bandwidth_fraction) << " # measured: 1 GiB device-to-device copy, median "
      << format("%.0f", m.copy_bytes_per_s / 1e9) << " GB/s (read + written) / " << number(f.memory_bandwidth_bytes_per_s / 1e9) << "\n";
  } else {
    y << "  memory_bandwidth_fraction: " << number(d.memory_efficiency) << " # " << from_base << " (no d2d_copy_1GiB row)\n";
  }
  write_measured_rates(y, d, f, m, kept("achievable.attention_dropout_slowdown"));
  if (d.compute_units > 0) {
    y << "compute_units: " << d.compute_units << "       # "
      << (m.compute_units > 0 ? "measured: the file's 'device' row (SMs)" : kept("compute_units")) << "\n";
  }
  if (d.l2_bandwidth_bytes_per_s > 0) {
    y << "l2_bandwidth_gb_per_s: " << number(d.l2_bandwidth_bytes_per_s / 1e9) << "   # " << kept("l2_bandwidth_gb_per_s") << "\n";
  } else {
    y << "# l2_bandwidth_gb_per_s omitted: the measurements give the L2 capacity"
      << (m.l2_bytes > 0 ? " (" + format("%.0f", m.l2_bytes / (1024.0 * 1024)) + " MiB, the 'device' row)" : "")
      << " but no\n"
      << "# L2 -> SM bandwidth, and the measured gemm_curve already carries the L2 feed of\n"
      << "# every measured shape; a tile-traffic bound on top would count it twice\n"
      << "# (docs/cost-model.md, \"Tile traffic\").\n";
  }
  y << "runtime:                     # the software stack on the device (docs/cost-model.md, \"Peak memory\", \"Launch floor\")\n"
    << "  launch_overhead_us: " << number(d.launch_overhead_s * 1e6) << "     # ";
  if (f.launch_overhead_s > 0) {
    y << "measured: the shortest timed call of any kind (" << f.launch_floor_call
      << "); calls that short do not get shorter with size, so their time is the host's\n";
  } else {
    y << from_base << " (no timed call in the file)\n";
  }
  if (d.context_bytes > 0) y << "  context_mib: " << number(d.context_bytes / (1024.0 * 1024)) << "   # " << kept("runtime.context_mib") << "\n";
  if (d.workspace_bytes > 0) y << "  workspace_mib: " << number(d.workspace_bytes / (1024.0 * 1024)) << "   # " << kept("runtime.workspace_mib") << "\n";
  if (d.allocator_reserve_fraction > 0) {
    y << "  allocator_reserve_fraction: " << number(d.allocator_reserve_fraction) << "   # " << kept("runtime.allocator_reserve_fraction") << "\n";
  } else {
    y << "  # allocator_reserve_fraction omitted (0 = not modelled): the measurements do not give it, nor does " << base_label << "\n";
  }
  return y.str();
}

}  // namespace meshplan
