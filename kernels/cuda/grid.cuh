// What the CUDA kernels share about their launch: the block size of the
// one-thread-per-element kernels and their grid (a grid-stride loop covers
// the rest), the block-wide sum and maximum with every thread getting
// the result, in a fixed tree order (the same bits every run), and the
// column sums' lanes and tree.
//
// defines: kThreads, blocks_for, MESHPLAN_GRID_STRIDE, block_sum, block_max, kColumnLanes, kRowLanes,
// ColumnParts, column_lanes_tree, column_blocks
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

// Column sums over rows (a bias or a norm weight's gradient), deterministic and without atomics: one
// block of kColumnLanes x kRowLanes threads per kColumnLanes columns; lane x of each warp reads column x
// (32 floats of a row are one 128-byte line), warp y sums rows y, y + kRowLanes, ... in order into
// part[y][x], then column_lanes_tree adds the kRowLanes partial sums of each column in a fixed tree,
// leaving them in part[0][x].
constexpr int kColumnLanes = 32, kRowLanes = 32;
using ColumnParts = float[kRowLanes][kColumnLanes + 1];  // + 1: no shared-memory bank conflicts
__device__ inline void column_lanes_tree(ColumnParts& part) {
  __syncthreads();
  for (int stride = kRowLanes / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.y) < stride) part[threadIdx.y][threadIdx.x] += part[threadIdx.y + stride][threadIdx.x];
    __syncthreads();
  }
}
inline unsigned column_blocks(std::int64_t C) { return static_cast<unsigned>((C + kColumnLanes - 1) / kColumnLanes); }

}  // namespace meshplan::kernels::cuda
