// Random operands for the CUDA measurements (cuda_measure.hpp), made on the
// device: gigabytes of GEMM operands from the host would take longer than
// timing them. Values are uniform in [-1, 1) from a counter-based hash of
// (seed, index), never zeros (a GPU's power, and so its clock, depends on
// the bits it multiplies; measure_device.py uses torch.randn likewise).
//
// defines: fill_uniform_bf16, fill_uniform_f32
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace meshplan::exec::cuda_calibrate {

void fill_uniform_bf16(__nv_bfloat16* out, std::int64_t n, std::uint64_t seed, cudaStream_t stream);
void fill_uniform_f32(float* out, std::int64_t n, std::uint64_t seed, cudaStream_t stream);

}  // namespace meshplan::exec::cuda_calibrate
