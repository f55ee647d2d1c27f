// The GPU `meshplan train --backend cuda` trains on (meshplan-train-cuda
// only): this rank's CUDA device (the MPI launcher's local rank modulo the
// devices the process sees; rank 0 on one device without a launcher), a
// CudaBackend on it and the GPT executor's ops for it
// (executor/parallel/cuda_gpt_ops.hpp).
//
// defines: open_cuda_training_device, cuda_cannot_train
#pragma once

#include <optional>
#include <string>

#include "executor/train/session.hpp"
#include "model/problem.hpp"

namespace meshplan::cli {

// Problems (field --backend) when no device can be used, saying why.
Loaded<exec::TrainingDevice> open_cuda_training_device();

// For --backend auto (train_backend.hpp): why no GPU here trains the plan's
// transformer (none usable), or nullopt.
std::optional<std::string> cuda_cannot_train();

}  // namespace meshplan::cli
