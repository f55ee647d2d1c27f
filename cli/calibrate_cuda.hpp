// `meshplan calibrate --backend cuda`: measures one GPU with meshplan's own
// CUDA kernels (executor/calibrate/cuda_measure.hpp), keeps the rows as JSON
// Lines, and writes the device preset from them by the derivation of
// `calibrate --from` (calibrate_from.hpp). Without a CUDA build, or without
// a GPU, it measures nothing: exit 2 and why, pointing to
// scripts/gpu/measure_device.py and `calibrate --from` instead.
#pragma once

#include <string>

namespace meshplan::cli {

struct CalibrateCudaFlags {
  int device = 0;       // --device N
  bool quick = false;   // --quick: fewer shapes
  std::string out;      // --out DIR: presets folder (default: the user presets folder)
  std::string name;     // --name: the preset's name (default local-cuda)
  std::string base;     // --base DEVICE: datasheet figures (default: by the GPU's name)
  std::string jsonl;    // --jsonl FILE: where the rows go (default DIR/measured/NAME.jsonl)
};

inline constexpr const char* kDefaultCudaPresetName = "local-cuda";

int run_calibrate_cuda(const CalibrateCudaFlags& flags);

}  // namespace meshplan::cli
