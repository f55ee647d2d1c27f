// Fuzz target: `meshplan calibrate --from FILE` (parse_device_measurements,
// derive_device_figures, model/measured_device.hpp). A rejected file names
// the file (and line and key); from an accepted one, on h100-sxm as the base
// (as with --base h100-sxm), the device preset written loads back as a
// device preset: every figure derived from measurements is one the device
// schema accepts.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_common.hpp"
#include "model/device_spec.hpp"
#include "model/measured_device.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string file = "fuzz-measured.jsonl";
  const auto measured = parse_device_measurements(text, file);
  fuzz::check_loaded(measured, file);
  if (!measured.ok()) return 0;
  static const DeviceSpec base = fuzz::must_load(load_device("h100-sxm"));
  const auto figures = derive_device_figures(measured.value, base);
  fuzz::check_loaded(figures, file);
  if (!figures.ok()) return 0;
  const DeviceSpec device = apply_measured_figures(base, figures.value, measured.value);
  const std::string yaml = measured_device_yaml(device, figures.value, measured.value, "--base h100-sxm", "fuzz");
  fuzz::require_no_errors(load_device_text(yaml, "written preset").problems,
                          "the device preset written from an accepted file does not load");
  return 0;
}
