// Checked CUDA calls: MESHPLAN_CUDA_CHECK(call) throws std::runtime_error
// naming the call, the file and line and CUDA's own message, so no failure
// goes unnoticed (a kernel launch is checked with cudaGetLastError right
// after it). cuda_device_problem() says why no device can be used, or "".
//
// defines: MESHPLAN_CUDA_CHECK, cuda_check, cuda_device_problem
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace meshplan::kernels::cuda {

inline void cuda_check(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                             cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
  }
}

// "" when device 0 can run kernels; otherwise why not (no driver, no device).
inline std::string cuda_device_problem() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) return std::string("cudaGetDeviceCount: ") + cudaGetErrorName(status) + ": " + cudaGetErrorString(status);
  if (count == 0) return "no CUDA device on this machine";
  return "";
}

}  // namespace meshplan::kernels::cuda

#define MESHPLAN_CUDA_CHECK(call) ::meshplan::kernels::cuda::cuda_check((call), #call, __FILE__, __LINE__)
