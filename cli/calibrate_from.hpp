// `meshplan calibrate --from FILE`: a device preset from measurements made
// elsewhere (model/measured_device.hpp), or, with --nccl-tests, a cluster
// preset whose link is fitted to nccl-tests output (model/nccl_tests.hpp).
// This file reads the flags and the file, and writes the YAML; the figures
// are the library's.
#pragma once

#include <string>

#include "model/problem.hpp"

namespace meshplan::cli {

struct CalibrateFromFlags {
  std::string file;                 // --from
  bool nccl_tests = false;          // --nccl-tests
  std::string collective;           // --collective (nccl-tests whose text names no program)
  std::string name;                 // --name
  std::string output;               // -o, --output; empty: stdout
  std::string base;                 // --base: a device (or, with --nccl-tests, cluster) preset
  std::string peak_tflops;          // --peak-tflops bf16=989.4,fp32=67
  double memory_bandwidth_gb_per_s = 0;  // --memory-bandwidth-gb-per-s
  double memory_gib = 0;            // --memory-gib
  std::string source;               // --source
};

int run_calibrate_from(const CalibrateFromFlags& flags);

// The device preset's YAML from measurement rows (`text`, named `flags.file`
// in messages and the header) with the flags' base, peaks and name: what
// --from writes, and what `calibrate --backend cuda` writes from the rows it
// measured. `command`: how the preset was made, for its header. Warnings and
// errors in the problems; the YAML only when there is no error.
Loaded<std::string> device_preset_yaml(const CalibrateFromFlags& flags, const std::string& text, const std::string& command);

}  // namespace meshplan::cli
