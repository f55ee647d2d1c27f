// One accelerator (or CPU) as the cost model sees it: peak FLOP/s per numeric
// format, memory capacity and bandwidth. Loaded from presets/devices/*.yaml,
// whose every figure cites its datasheet.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "model/precision.hpp"
#include "model/problem.hpp"

namespace meshplan {

struct DeviceSpec {
  std::string name;
  std::string source;
  std::map<Dtype, double> peak_flops_per_s;  // dense peak; absent = unsupported
  double memory_bytes = 0;                   // capacity
  double memory_bandwidth_bytes_per_s = 0;
  // Achievable rates (compute_model.hpp): the fraction of dense peak a large
  // GEMM reaches, the fraction of memory bandwidth a streaming kernel reaches,
  // and the number of parallel compute units (SMs) for wave quantization
  // (0 = not modelled).
  double gemm_efficiency = 0.8;
  double memory_efficiency = 0.85;
  std::int64_t compute_units = 0;

  std::optional<double> peak_for(Dtype dtype) const;
};

// `name_or_path` as in find_preset().
Loaded<DeviceSpec> load_device(const std::string& name_or_path);

}  // namespace meshplan
