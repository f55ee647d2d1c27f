// LayerNorm and RMSNorm of kernels.hpp: the CPU kernels' formulas
// (kernels/cpu/layernorm.cpp: two-pass statistics, dinp = rstd (g - mean(g)
// - xhat mean(g xhat)) with g = dout weight; kernels/cpu/rmsnorm.cpp: the
// same without the mean and mean(g) terms, eps inside the root), one block
// per row; the weight (and bias) gradients by one block per 32 channels, in
// a fixed order (below).
#include "kernels/cpu/layernorm.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/kernels.hpp"

namespace meshplan::kernels::cuda {
namespace {


__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                         const float* bias, std::int64_t C) {
  __shared__ float shared[kThreads];
  const std::int64_t row = blockIdx.x;
  const float* x = inp + row * C;
  float sum = 0;
  for (std::int64_t c = threadIdx.x; c < C; c += kThreads) sum += x[c];
  const float m = block_sum(sum, shared) / static_cast<float>(C);
  float sum_sq = 0;
  for (std::int64_t c = threadIdx.x; c < C; c += kThreads) sum_sq += (x[c] - m) * (x[c] - m);
  const float s = rsqrtf(block_sum(sum_sq, shared) / static_cast<float>(C) + static_cast<float>(kLayerNormEps));
  float* y = out + row * C;
  for (std::int64_t c = threadIdx.x; c < C; c += kThreads) y[c] = (x[c] - m) * s * weight[c] + bias[c];
  if (threadIdx.x == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

__global__ void layernorm_backward_input_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                                const float* mean, const float* rstd, std::int64_t C) {
  __shared__ float shared[kThreads];
  const std::int64_t row = blockIdx.x;
  const float* x = inp + row * C;
  const float* dy = dout + row * C;
  const float m = mean[row], s = rstd[row];
  float g_sum = 0, g_xhat_sum = 0;
  for (std::int64_t c = threadIdx.x; c < C; c += kThreads) {
    const float g = dy[c] * weight[c];
    g_sum += g;
    g_xhat_sum += g * (x[c] - m) * s;
  }
  const float mean_g = block_sum(g_sum, shared) / static_cast<float>(C);
  const float mean_g_xhat = block_sum(g_xhat_sum, shared) / static_cast<float>(C);
  float* dx = dinp + row * C;
  for (std::int64_t c = threadIdx.x; c < C; c += kThreads) {
    const float xhat = (x[c] - m) * s;
    dx[c] += s * (dy[c] * weight[c] - mean_g - xhat * mean_g_xhat);
  }
}

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp, const float* weight, std::int64_t C,
                                       float eps) {
  __shared__ float shared[kThreads];
  const std::int64_t row = blockIdx.x;
  const float* x = inp + row * C;
  float sum_sq = 0;
  for (std::int64_t c = threadIdx.x; c < C; c += kThreads) sum_sq += x[c] * x[c];
  const float s = 1.0f / sqrtf(block_sum(sum_sq, shared) * (1.0f / static_cast<float>(C)) + eps);
  float* y = out + row * C;
  for (std::int64_t c = threadIdx.x; c < C; c += kThreads) y[c] = x[c] * s * weight[c];
  if (threadIdx.x == 0) rstd[row] = s;
}

__global__ void rmsnorm_backward_input_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                              const float* rstd, std::int64_t C) {
  __shared__ float shared[kThreads];
  const std::int64_t row = blockIdx.x;
  const float* x = inp + row * C;
  const float* dy = dout + row * C;
  const float s = rstd[row];
  float g_xhat_sum = 0;
  for (std::int64_t c = threadIdx.x; c < C; c += kThreads) g_xhat_sum += dy[c] * weight[c] * x[c] * s;
  const float mean_g_xhat = block_sum(g_xhat_sum, shared) * (1.0f / static_cast<float>(C));
  float* dx = dinp + row * C;
  for (std::int64_t c = threadIdx.x; c < C; c += kThreads) {
    const float xhat = x[c] * s;
    dx[c] += s * (dy[c] * weight[c] - xhat * mean_g_xhat);
  }
}

// The weight (and bias) gradients as column sums (grid.cuh: one block per
// 32 channels, rows in order per lane, a fixed tree): deterministic, no
// atomics, and every row read once. LayerNorm (kCentered): xhat =
// (x - mean) rstd and a bias gradient; RMSNorm: xhat = x rstd, no bias
// (mean and dbias unused).
template <bool kCentered>
__global__ void __launch_bounds__(kColumnLanes * kRowLanes)
    norm_backward_params_kernel(float* dweight, float* dbias, const float* dout, const float* inp, const float* mean,
                                const float* rstd, std::int64_t N, std::int64_t C) {
  __shared__ ColumnParts dw_part, db_part;
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(kColumnLanes) + threadIdx.x;
  float dw = 0, db = 0;
  if (c < C) {
    for (std::int64_t row = threadIdx.y; row < N; row += kRowLanes) {
      const float dy = dout[row * C + c];
      db += dy;
      dw += dy * (kCentered ? inp[row * C + c] - mean[row] : inp[row * C + c]) * rstd[row];
    }
  }
  dw_part[threadIdx.y][threadIdx.x] = dw;
  db_part[threadIdx.y][threadIdx.x] = db;
  column_lanes_tree(dw_part);
  if (kCentered) column_lanes_tree(db_part);
  if (threadIdx.y == 0 && c < C) {
    dweight[c] += dw_part[0][threadIdx.x];
    if (kCentered) dbias[c] += db_part[0][threadIdx.x];
  }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       std::int64_t N, std::int64_t C, cudaStream_t stream) {
  if (N <= 0) return;
  layernorm_forward_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream>>>(out, mean, rstd, inp, weight, bias, C);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, std::int64_t N, std::int64_t C,
                        cudaStream_t stream) {
  if (N <= 0) return;
  layernorm_backward_input_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream>>>(dinp, dout, inp, weight, mean,
                                                                                     rstd, C);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
  norm_backward_params_kernel<true><<<column_blocks(C), dim3(kColumnLanes, kRowLanes), 0, stream>>>(
      dweight, dbias, dout, inp, mean, rstd, N, C);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, std::int64_t N, std::int64_t C,
                     double eps, cudaStream_t stream) {
  if (N <= 0) return;
  rmsnorm_forward_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream>>>(out, rstd, inp, weight, C,
                                                                            static_cast<float>(eps));
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, std::int64_t N, std::int64_t C, cudaStream_t stream) {
  if (N <= 0) return;
  rmsnorm_backward_input_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream>>>(dinp, dout, inp, weight, rstd, C);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
  norm_backward_params_kernel<false><<<column_blocks(C), dim3(kColumnLanes, kRowLanes), 0, stream>>>(
      dweight, nullptr, dout, inp, nullptr, rstd, N, C);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace meshplan::kernels::cuda
