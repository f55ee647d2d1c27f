#include "model/device_spec.hpp"

#include "model/presets.hpp"
#include "model/yaml_reader.hpp"

namespace meshplan {

std::optional<double> DeviceSpec::peak_for(Dtype dtype) const {
  auto it = peak_flops_per_s.find(dtype);
  if (it == peak_flops_per_s.end()) return std::nullopt;
  return it->second;
}

Loaded<DeviceSpec> load_device(const std::string& name_or_path) {
  Loaded<DeviceSpec> result;
  auto file = find_preset(PresetKind::device, name_or_path);
  if (!file.ok()) return {{}, file.problems};
  auto yaml = load_yaml_file(file.value.path, file.value.display_name);
  if (!yaml.ok()) return {{}, yaml.problems};

  Problems& problems = result.problems;
  YamlMap root(yaml.value, file.value.display_name, "", problems);
  DeviceSpec& device = result.value;
  device.name = root.text("name", Need::required).value_or("");
  device.source = root.text("source", Need::required).value_or("");
  if (auto peaks = root.map("peak_tflops", Need::required)) {
    for (Dtype dtype : {Dtype::fp32, Dtype::tf32, Dtype::bf16, Dtype::fp16, Dtype::fp8}) {
      if (auto tflops = peaks->number(to_string(dtype), Need::optional, 1e-6, 1e6)) {
        device.peak_flops_per_s[dtype] = *tflops * 1e12;
      }
    }
    peaks->finish();
    if (device.peak_flops_per_s.empty()) {
      root.add_problem("peak_tflops", "needs at least one of fp32, tf32, bf16, fp16, fp8");
    }
  }
  device.memory_bytes = root.number("memory_gib", Need::required, 1e-3, 1e6).value_or(0) * 1024.0 * 1024 * 1024;
  device.memory_bandwidth_bytes_per_s =
      root.number("memory_bandwidth_gb_per_s", Need::required, 1e-3, 1e6).value_or(0) * 1e9;
  if (auto achievable = root.map("achievable", Need::optional)) {
    device.gemm_efficiency = achievable->number("gemm_fraction", Need::optional, 0.01, 1.0).value_or(device.gemm_efficiency);
    device.memory_efficiency =
        achievable->number("memory_bandwidth_fraction", Need::optional, 0.01, 1.0).value_or(device.memory_efficiency);
    achievable->finish();
  }
  device.compute_units = root.integer("compute_units", Need::optional, 1, 1 << 20).value_or(0);
  root.finish();
  return result;
}

}  // namespace meshplan
