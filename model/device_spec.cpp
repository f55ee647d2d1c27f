#include "model/device_spec.hpp"

#include "model/presets.hpp"
#include "model/text.hpp"
#include "model/yaml_reader.hpp"

namespace meshplan {

namespace {
constexpr const char* kStreamOpNames[kStreamOps] = {"activation", "norm", "softmax", "elementwise",
                                                    "cross_entropy", "embedding", "optimizer"};
// `gemm_curve` and `op_bandwidth_gb_per_s` of an `achievable` (or `achievable.threaded`) map.
void read_measured_rates(YamlMap& map, std::vector<GemmCurvePoint>& curve, std::array<double, kStreamOps>& ops) {
  if (auto pairs = map.number_pairs("gemm_curve", Need::optional)) {
    std::vector<GemmCurvePoint> read;
    for (const auto& [intensity, fraction] : *pairs) read.push_back({intensity, fraction});
    if (const std::string problem = gemm_curve_problem(read); !problem.empty()) {
      map.add_problem("gemm_curve", problem);
    } else {
      curve = std::move(read);
    }
  }
  if (auto rates = map.map("op_bandwidth_gb_per_s", Need::optional)) {
    for (std::size_t i = 0; i < kStreamOps; ++i) {
      if (auto gb = rates->number(kStreamOpNames[i], Need::optional, kOpBandwidthGbPerSMin, kOpBandwidthGbPerSMax)) {
        ops[i] = scale_decimal(*gb, 9);
      }
    }
    rates->finish();
  }
}

// `attention_forward_curve` / `attention_backward_curve`: [[GFLOP per call, TFLOP/s], ...].
void read_attention_curve(YamlMap& map, const char* key, double peak_flops_per_s, std::vector<AttentionRatePoint>& curve) {
  auto pairs = map.number_pairs(key, Need::optional);
  if (!pairs) return;
  std::vector<AttentionRatePoint> read;
  for (const auto& [gflop, tflops] : *pairs) read.push_back({gflop * 1e9, tflops * 1e12});
  if (const std::string problem = attention_curve_problem(read, peak_flops_per_s); !problem.empty()) {
    map.add_problem(key, problem);
  } else {
    curve = std::move(read);
  }
}

}  // namespace

double attention_peak_flops_per_s(const DeviceSpec& device) {
  for (Dtype dtype : {Dtype::bf16, Dtype::fp16}) {
    if (const auto it = device.peak_flops_per_s.find(dtype); it != device.peak_flops_per_s.end()) return it->second;
  }
  return 0;
}

std::string attention_curve_problem(const std::vector<AttentionRatePoint>& curve, double peak_flops_per_s) {
  if (curve.size() > kMaxGemmCurvePoints) {
    return "has " + std::to_string(curve.size()) + " points; at most " + std::to_string(kMaxGemmCurvePoints) + " are allowed";
  }
  for (std::size_t i = 0; i < curve.size(); ++i) {
    const std::string item = "item " + std::to_string(i + 1) + ": ";
    if (!(curve[i].forward_flops > 0)) return item + "GFLOP per call must be positive";
    if (!(curve[i].flops_per_s >= kPeakTflopsMin * 1e12)) {
      return item + "TFLOP/s must be at least " + format("%g", kPeakTflopsMin) + ", got " +
             format("%g", curve[i].flops_per_s / 1e12);
    }
    if (peak_flops_per_s > 0 && curve[i].flops_per_s > peak_flops_per_s) {
      return item + format("%g", curve[i].flops_per_s / 1e12) + " TFLOP/s is above the device's dense 16-bit peak, " +
             format("%g", peak_flops_per_s / 1e12) + " TFLOP/s";
    }
    if (i > 0 && curve[i].forward_flops <= curve[i - 1].forward_flops) return item + "GFLOP per call must increase strictly";
  }
  return "";
}

std::string gemm_curve_problem(const std::vector<GemmCurvePoint>& curve) {
  if (curve.size() > kMaxGemmCurvePoints) {
    return "has " + std::to_string(curve.size()) + " points; at most " + std::to_string(kMaxGemmCurvePoints) + " are allowed";
  }
  for (std::size_t i = 0; i < curve.size(); ++i) {
    const std::string item = "item " + std::to_string(i + 1) + ": ";
    if (!(curve[i].intensity > 0)) return item + "arithmetic intensity must be positive";
    if (!(curve[i].fraction >= kGemmCurveFractionMin && curve[i].fraction <= kGemmCurveFractionMax)) {
      return item + "fraction must be in [" + format("%g", kGemmCurveFractionMin) + ", " +
             format("%g", kGemmCurveFractionMax) + "], got " + format("%g", curve[i].fraction);
    }
    if (i > 0 && curve[i].intensity <= curve[i - 1].intensity) return item + "arithmetic intensities must increase strictly";
  }
  return "";
}

std::string to_string(StreamOp op) { return kStreamOpNames[static_cast<std::size_t>(op)]; }

std::optional<StreamOp> parse_stream_op(const std::string& text) {
  for (std::size_t i = 0; i < kStreamOps; ++i) {
    if (text == kStreamOpNames[i]) return static_cast<StreamOp>(i);
  }
  return std::nullopt;
}

std::optional<double> DeviceSpec::peak_for(Dtype dtype) const {
  auto it = peak_flops_per_s.find(dtype);
  if (it == peak_flops_per_s.end()) return std::nullopt;
  return it->second;
}

std::string missing_peak_message(const DeviceSpec& device, Dtype dtype) {
  std::string listed;
  for (const auto& [d, _] : device.peak_flops_per_s) listed += (listed.empty() ? "" : ", ") + to_string(d);
  const std::string name = to_string(dtype);
  if (device.name != "local-cpu" || dtype != Dtype::bf16) {
    return device.name + " has no " + name + " support (it has: " + listed + ")";
  }
  if (device.source.starts_with("meshplan calibrate")) {
    return "the local-cpu preset written by `meshplan calibrate` has no bf16 figure (peak_tflops lists: " + listed +
           "); the comments in that file say why calibrate wrote none";
  }
  return "the local-cpu preset is the built-in placeholder, which has no bf16 figure (peak_tflops lists: " + listed +
         "); `meshplan calibrate` measures this CPU's bf16 GEMM rate (oneDNN, as `meshplan train --precision bf16` "
         "runs it) and writes it";
}

DeviceSpec device_for_threads(const DeviceSpec& core, int threads, bool* used_threaded) {
  DeviceSpec d = core;
  const bool threaded = threads > 1 && core.threaded && core.threaded->threads == threads;
  if (used_threaded) *used_threaded = threaded;
  if (threads <= 1) return d;
  if (threaded) {
    if (!core.threaded->gemm_curve.empty()) d.gemm_curve = core.threaded->gemm_curve;
    for (std::size_t i = 0; i < kStreamOps; ++i) {
      if (core.threaded->op_bandwidth_bytes_per_s[i] > 0) d.op_bandwidth_bytes_per_s[i] = core.threaded->op_bandwidth_bytes_per_s[i];
    }
  }
  const double t = static_cast<double>(threads);
  for (auto& [dtype, peak] : d.peak_flops_per_s) peak *= t;
  d.memory_bandwidth_bytes_per_s *= t;
  for (double& rate : d.op_bandwidth_bytes_per_s) rate *= t;
  d.threaded.reset();
  return d;
}

std::string to_string(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::cpu: return "cpu";
    case DeviceKind::nvidia_gpu: return "nvidia-gpu";
    case DeviceKind::tpu: return "tpu";
    case DeviceKind::unspecified: break;
  }
  return "unspecified";
}

namespace {
constexpr DeviceKind kDeviceKinds[] = {DeviceKind::cpu, DeviceKind::nvidia_gpu, DeviceKind::tpu};
}  // namespace

std::optional<DeviceKind> parse_device_kind(const std::string& text) {
  for (DeviceKind k : kDeviceKinds)
    if (text == to_string(k)) return k;
  return std::nullopt;
}

std::vector<std::string> device_kind_names() {
  std::vector<std::string> names;
  for (DeviceKind k : kDeviceKinds) names.push_back(to_string(k));
  return names;
}

namespace {

Loaded<DeviceSpec> read_device(const YAML::Node& node, const std::string& display_name) {
  Loaded<DeviceSpec> result;
  Problems& problems = result.problems;
  YamlMap root(node, display_name, "", problems);
  DeviceSpec& device = result.value;
  device.name = root.text("name", Need::required).value_or("");
  device.source = root.text("source", Need::required).value_or("");
  if (auto kind = root.choice("kind", Need::optional, device_kind_names())) device.kind = *parse_device_kind(*kind);
  if (auto peaks = root.map("peak_tflops", Need::required)) {
    for (Dtype dtype : {Dtype::fp32, Dtype::tf32, Dtype::bf16, Dtype::fp16, Dtype::fp8}) {
      if (auto tflops = peaks->number(to_string(dtype), Need::optional, kPeakTflopsMin, kPeakTflopsMax)) {
        device.peak_flops_per_s[dtype] = scale_decimal(*tflops, 12);
      }
    }
    peaks->finish();
    if (device.peak_flops_per_s.empty()) {
      root.add_problem("peak_tflops", "needs at least one of fp32, tf32, bf16, fp16, fp8");
    }
  }
  device.memory_bytes = root.number("memory_gib", Need::required, kMemoryGibMin, kMemoryGibMax).value_or(0) * 1024.0 * 1024 * 1024;
  device.memory_bandwidth_bytes_per_s =
      scale_decimal(root.number("memory_bandwidth_gb_per_s", Need::required, kMemoryBandwidthGbPerSMin, kMemoryBandwidthGbPerSMax).value_or(0), 9);
  if (auto achievable = root.map("achievable", Need::optional)) {
    device.gemm_efficiency =
        achievable->number("gemm_fraction", Need::optional, kAchievableFractionMin, 1.0).value_or(device.gemm_efficiency);
    device.fp8_gemm_efficiency = achievable->number("fp8_gemm_fraction", Need::optional, kAchievableFractionMin, 1.0).value_or(0);
    if (device.fp8_gemm_efficiency > 0 && !device.peak_flops_per_s.contains(Dtype::fp8)) {
      achievable->add_problem("fp8_gemm_fraction", "is a fraction of the fp8 peak, and peak_tflops has no fp8");
    }
    device.memory_efficiency =
        achievable->number("memory_bandwidth_fraction", Need::optional, kAchievableFractionMin, 1.0).value_or(device.memory_efficiency);
    read_measured_rates(*achievable, device.gemm_curve, device.op_bandwidth_bytes_per_s);
    const double attention_peak = attention_peak_flops_per_s(device);
    read_attention_curve(*achievable, "attention_forward_curve", attention_peak, device.attention_forward_curve);
    read_attention_curve(*achievable, "attention_backward_curve", attention_peak, device.attention_backward_curve);
    if (auto slowdown = achievable->map("attention_dropout_slowdown", Need::optional)) {
      device.attention_dropout_slowdown[0] =
          slowdown->number("forward", Need::required, kDropoutSlowdownMin, kDropoutSlowdownMax).value_or(1);
      device.attention_dropout_slowdown[1] =
          slowdown->number("backward", Need::required, kDropoutSlowdownMin, kDropoutSlowdownMax).value_or(1);
      slowdown->finish();
    }
    if (auto threaded = achievable->map("threaded", Need::optional)) {
      ThreadedRates t;
      t.threads = static_cast<int>(threaded->integer("threads", Need::required, 2, 4096).value_or(0));
      read_measured_rates(*threaded, t.gemm_curve, t.op_bandwidth_bytes_per_s);
      threaded->finish();
      if (t.threads > 0) device.threaded = std::move(t);
    }
    achievable->finish();
  }
  device.compute_units = root.integer("compute_units", Need::optional, 1, kComputeUnitsMax).value_or(0);
  device.l2_bandwidth_bytes_per_s = scale_decimal(root.number("l2_bandwidth_gb_per_s", Need::optional, 1e-3, 1e6).value_or(0), 9);
  if (auto runtime = root.map("runtime", Need::optional)) {
    device.launch_overhead_s =
        scale_decimal(runtime->number("launch_overhead_us", Need::optional, 0, kLaunchOverheadUsMax).value_or(0), -6);
    device.context_bytes = runtime->number("context_mib", Need::optional, 0, 1e7).value_or(0) * 1024.0 * 1024;
    device.workspace_bytes = runtime->number("workspace_mib", Need::optional, 0, 1e7).value_or(0) * 1024.0 * 1024;
    device.allocator_reserve_fraction = runtime->number("allocator_reserve_fraction", Need::optional, 0, 1).value_or(0);
    runtime->finish();
  }
  root.finish();
  return result;
}

}  // namespace

Loaded<DeviceSpec> load_device(const std::string& name_or_path) {
  auto file = find_preset(PresetKind::device, name_or_path);
  if (!file.ok()) return {{}, file.problems};
  auto yaml = load_yaml_file(file.value.path, file.value.display_name);
  if (!yaml.ok()) return {{}, yaml.problems};
  auto loaded = read_device(yaml.value, file.value.display_name);
  if (loaded.ok()) add_name_mismatch(file.value, yaml.value, loaded.value.name, loaded.problems);
  return loaded;
}

Loaded<DeviceSpec> load_device_text(const std::string& yaml_text, const std::string& display_name) {
  auto yaml = load_yaml_text(yaml_text, display_name);
  if (!yaml.ok()) return {{}, yaml.problems};
  return read_device(yaml.value, display_name);
}

}  // namespace meshplan
