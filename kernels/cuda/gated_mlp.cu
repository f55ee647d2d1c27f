// The Llama family's element-wise layers of kernels.hpp: SwiGLU, GeGLU and
// rotary positions, one thread per element in a grid-stride loop, each
// element's arithmetic elementwise_rows.hpp's (which the host tests run too).
#include <cmath>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/kernels.hpp"
#include "kernels/cuda/elementwise_rows.hpp"

namespace meshplan::kernels::cuda {
namespace {

__global__ void swiglu_forward_kernel(float* out, const float* inp, std::int64_t n, std::int64_t F) {
  MESHPLAN_GRID_STRIDE(i, n) swiglu_forward_at(out, inp, i, F);
}

__global__ void swiglu_backward_kernel(float* dinp, const float* dout, const float* inp, std::int64_t n,
                                       std::int64_t F) {
  MESHPLAN_GRID_STRIDE(i, n) swiglu_backward_at(dinp, dout, inp, i, F);
}

__global__ void geglu_forward_kernel(float* out, const float* inp, std::int64_t n, std::int64_t F) {
  MESHPLAN_GRID_STRIDE(i, n) geglu_forward_at(out, inp, i, F);
}

__global__ void geglu_backward_kernel(float* dinp, const float* dout, const float* inp, std::int64_t n,
                                      std::int64_t F) {
  MESHPLAN_GRID_STRIDE(i, n) geglu_backward_at(dinp, dout, inp, i, F);
}

__global__ void rope_kernel(float* x, std::int64_t n, std::int64_t seq_len, std::int64_t heads, std::int64_t head_dim,
                            std::int64_t row_stride, double theta, double sign) {
  MESHPLAN_GRID_STRIDE(idx, n) rope_at(x, idx, seq_len, heads, head_dim, row_stride, theta, sign);
}

}  // namespace

void swiglu_forward(float* out, const float* inp, std::int64_t N, std::int64_t F, cudaStream_t stream) {
  if (N * F <= 0) return;
  swiglu_forward_kernel<<<blocks_for(N * F), kThreads, 0, stream>>>(out, inp, N * F, F);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void swiglu_backward(float* dinp, const float* dout, const float* inp, std::int64_t N, std::int64_t F,
                     cudaStream_t stream) {
  if (N * F <= 0) return;
  swiglu_backward_kernel<<<blocks_for(N * F), kThreads, 0, stream>>>(dinp, dout, inp, N * F, F);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void geglu_forward(float* out, const float* inp, std::int64_t N, std::int64_t F, cudaStream_t stream) {
  if (N * F <= 0) return;
  geglu_forward_kernel<<<blocks_for(N * F), kThreads, 0, stream>>>(out, inp, N * F, F);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void geglu_backward(float* dinp, const float* dout, const float* inp, std::int64_t N, std::int64_t F,
                    cudaStream_t stream) {
  if (N * F <= 0) return;
  geglu_backward_kernel<<<blocks_for(N * F), kThreads, 0, stream>>>(dinp, dout, inp, N * F, F);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void rope_apply(float* x, std::int64_t rows, std::int64_t seq_len, std::int64_t heads, std::int64_t head_dim,
                std::int64_t row_stride, double theta, bool inverse, cudaStream_t stream) {
  const std::int64_t n = rows * heads * (head_dim / 2);
  if (n <= 0) return;
  rope_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, seq_len, heads, head_dim, row_stride, theta,
                                                      inverse ? -1.0 : 1.0);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace meshplan::kernels::cuda
