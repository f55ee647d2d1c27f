// What the CUDA kernels share about their launch: the block size of the
// one-thread-per-element kernels and their grid (a grid-stride loop covers
// the rest), and the block-wide sum and maximum with every thread getting
// the result, in a fixed tree order (the same bits every run).
//
// defines: kThreads, blocks_for, MESHPLAN_GRID_STRIDE, block_sum, block_max
#pragma once

#include <cstdint>

namespace meshplan::kernels::cuda {

constexpr int kThreads = 256;

// Blocks of kThreads for n elements, at most 65535 (grid-stride loops do the rest).
inline int blocks_for(std::int64_t n) {
  const std::int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

// The grid-stride loop over [0, n) of a one-thread-per-element kernel.
#define MESHPLAN_GRID_STRIDE(i, n)                                                                   \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

// `shared` holds blockDim.x floats; blockDim.x is a power of two; every thread of the block calls it.
__device__ inline float block_sum(float value, float* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  const float sum = shared[0];
  __syncthreads();
  return sum;
}

__device__ inline float block_max(float value, float* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
  const float result = shared[0];
  __syncthreads();
  return result;
}

}  // namespace meshplan::kernels::cuda
