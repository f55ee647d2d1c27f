// The fused softmax cross-entropy of kernels.hpp with the arithmetic of
// cross_entropy_rows.hpp: one block of ce::kThreads per row. Pass 1: each
// thread folds logits t, t + kThreads, ... into a (max, sum) pair, the block
// merges the pairs in a fixed tree, thread 0 writes the row's loss. Pass 2:
// each thread turns its logits into gradients in place. Deterministic.
#include <cuda_bf16.h>

#include <stdexcept>

#include "kernels/cuda/cross_entropy_rows.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/kernels.hpp"

namespace meshplan::kernels::cuda {
namespace {

using ce::kThreads;

__global__ void __launch_bounds__(kThreads)
    cross_entropy_kernel(__nv_bfloat16* dlogits, float* losses, const __nv_bfloat16* logits, const std::int32_t* targets,
                         long long V, float scale) {
  __shared__ ce::MaxSum partial[kThreads];
  const long long row = blockIdx.x;
  const __nv_bfloat16* x = logits + row * V;
  ce::MaxSum mine = ce::empty();
  for (long long j = threadIdx.x; j < V; j += kThreads) ce::add(mine, __bfloat162float(x[j]));
  partial[threadIdx.x] = mine;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) partial[threadIdx.x] = ce::merge(partial[threadIdx.x], partial[threadIdx.x + stride]);
    __syncthreads();
  }
  const float lse = ce::logsumexp(partial[0]);
  const std::int32_t target = targets[row];
  if (threadIdx.x == 0) losses[row] = lse - __bfloat162float(x[target]);
  __syncthreads();  // every thread has read what pass 2 overwrites when dlogits aliases logits
  __nv_bfloat16* dx = dlogits + row * V;
  for (long long j = threadIdx.x; j < V; j += kThreads) {
    dx[j] = __float2bfloat16(ce::gradient(__bfloat162float(x[j]), lse, j == target, scale));
  }
}

}  // namespace

void softmax_cross_entropy(__nv_bfloat16* dlogits, float* losses, const __nv_bfloat16* logits, const std::int32_t* targets,
                           std::int64_t N, std::int64_t V, float dloss, cudaStream_t stream) {
  if (N < 1 || V < 1 || N > 2147483647LL) throw std::invalid_argument("softmax_cross_entropy: N and V must be positive");
  cross_entropy_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream>>>(dlogits, losses, logits, targets, V,
                                                                          dloss / static_cast<float>(N));
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace meshplan::kernels::cuda
