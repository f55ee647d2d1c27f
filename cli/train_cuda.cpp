// open_cuda_training_device and cuda_cannot_train (train_cuda.hpp).
#include "cli/train_cuda.hpp"

#include <cstdlib>
#include <exception>
#include <string>

#include "executor/backend/cuda_backend.hpp"
#include "executor/parallel/cuda_gpt_ops.hpp"
#include "kernels/cuda/cuda_check.hpp"

namespace meshplan::cli {
namespace {

// The launcher's rank of this process on its node, or 0 without a launcher.
int launcher_local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"})
    if (const char* value = std::getenv(name)) return std::atoi(value);
  return 0;
}

}  // namespace

std::optional<std::string> cuda_cannot_train() {
  const std::string problem = kernels::cuda::cuda_device_problem();
  if (!problem.empty() || exec::CudaBackend::device_count() <= 0)
    return "no usable GPU here (" + (problem.empty() ? std::string("no CUDA device") : problem) + ")";
  return std::nullopt;
}

Loaded<exec::TrainingDevice> open_cuda_training_device() {
  Loaded<exec::TrainingDevice> result;
  if (const std::optional<std::string> why = cuda_cannot_train()) {
    result.problems.push_back(
        {Severity::error, "--backend", "cuda: " + *why + "; --backend cpu trains on this machine's cores"});
    return result;
  }
  try {
    auto backend = std::make_unique<exec::CudaBackend>(launcher_local_rank() % exec::CudaBackend::device_count());
    auto ops = exec::parallel::make_cuda_gpt_ops(*backend);
    result.value = exec::TrainingDevice(std::move(backend), std::move(ops));
  } catch (const std::exception& e) {
    result.problems.push_back({Severity::error, "--backend", std::string("cuda: the GPU could not be opened: ") + e.what()});
  }
  return result;
}

}  // namespace meshplan::cli
