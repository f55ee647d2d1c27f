// Fuzz target: a device preset (YAML), including what `meshplan calibrate`
// writes (the measured `achievable.gemm_curve`, `op_bandwidth_gb_per_s` and
// `threaded` rates of local-cpu) and reads back on every later run.
// Accepted devices must have the positive rates the cost model divides by;
// rejected ones must name "fuzz-device.yaml".
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_common.hpp"
#include "model/device_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto device = load_device_text(text, "fuzz-device.yaml");
  fuzz::check_loaded(device, "fuzz-device.yaml");
  if (!device.ok()) return 0;
  const DeviceSpec& d = device.value;
  fuzz::require(!d.peak_flops_per_s.empty(), "at least one peak");
  for (const auto& [dtype, peak] : d.peak_flops_per_s) fuzz::require(std::isfinite(peak) && peak > 0, "peaks > 0");
  fuzz::require(std::isfinite(d.memory_bytes) && d.memory_bytes > 0, "memory > 0");
  fuzz::require(std::isfinite(d.memory_bandwidth_bytes_per_s) && d.memory_bandwidth_bytes_per_s > 0, "bandwidth > 0");
  fuzz::require(d.gemm_efficiency > 0 && d.gemm_efficiency <= 1 && d.memory_efficiency > 0 && d.memory_efficiency <= 1,
                "efficiencies in (0, 1]");
  fuzz::require(gemm_curve_problem(d.gemm_curve).empty(), "the GEMM curve passes its own check");
  if (d.threaded) {
    fuzz::require(d.threaded->threads >= 2, "threaded rates are for 2 or more threads");
    fuzz::require(gemm_curve_problem(d.threaded->gemm_curve).empty(), "the threaded GEMM curve passes its own check");
  }
  for (const double rate : d.op_bandwidth_bytes_per_s) fuzz::require(std::isfinite(rate) && rate >= 0, "op rates >= 0");
  return 0;
}
