// Which backend `meshplan train` trains on (docs/executor.md, "Which backend
// trains"). --backend cpu and cuda are taken as given; --backend auto (the
// default) picks cuda when the plan's device preset is an NVIDIA GPU
// (DeviceSpec::kind), the model is a transformer, and a GPU here can run it;
// otherwise cpu, with a note saying why when the plan was made for a GPU.
// Whether a GPU can run it is asked twice: by `meshplan`, which does not load
// the CUDA runtime, from the device files (nvidia_gpu_visible), and then by
// meshplan-train-cuda, which asks the CUDA runtime for a usable device.
//
// defines: BackendChoice, choose_backend, cpu_instead, nvidia_gpu_visible
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "model/plan_file.hpp"

namespace meshplan::cli {

struct BackendChoice {
  std::string backend;  // "cpu" or "cuda"
  std::string note;     // auto chose cpu for a plan made for a GPU: why (empty otherwise)
};

// `requested`: "auto", "cpu" or "cuda". `gpu_cannot_run`: for auto, why no GPU
// here can train the plan, or nullopt when one can; asked only when the
// plan's device is an NVIDIA GPU and its model a transformer.
BackendChoice choose_backend(const std::string& requested, const PlanFile& plan_file,
                             const std::function<std::optional<std::string>()>& gpu_cannot_run);

// auto's choice when a plan made for an NVIDIA GPU trains on the CPU: cpu, and `why` in its note.
BackendChoice cpu_instead(const PlanFile& plan_file, const std::string& why);

// Whether this process can see an NVIDIA GPU, without loading the CUDA
// runtime: CUDA_VISIBLE_DEVICES does not hide them all (empty, "-1" or
// "NoDevFiles"), and the driver lists one (/proc/driver/nvidia/gpus/*) or a
// device file /dev/nvidiaN exists. Returns why not, or nullopt.
std::optional<std::string> nvidia_gpu_visible();

}  // namespace meshplan::cli
