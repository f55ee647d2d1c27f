// LayerNorm of kernels.hpp: the CPU kernel's formulas (kernels/cpu/
// layernorm.cpp: two-pass statistics, dinp = rstd (g - mean(g) - xhat
// mean(g xhat)) with g = dout weight), one block per row; the weight and bias
// gradients by one thread per channel, summing the rows in order.
#include "kernels/cpu/layernorm.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/kernels.hpp"

namespace meshplan::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// The block's sum of `value` (every thread gets it), in a fixed order.
__device__ float block_sum(float value, float* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  const float sum = shared[0];
  __syncthreads();
  return sum;
}

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

__global__ void layernorm_backward_params_kernel(float* dweight, float* dbias, const float* dout, const float* inp,
                                                 const float* mean, const float* rstd, std::int64_t N, std::int64_t C) {
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  float dw = 0, db = 0;
  for (std::int64_t row = 0; row < N; ++row) {
    const float dy = dout[row * C + c];
    db += dy;
    dw += dy * (inp[row * C + c] - mean[row]) * rstd[row];
  }
  dweight[c] += dw;
  dbias[c] += db;
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
  const unsigned blocks = static_cast<unsigned>((C + kThreads - 1) / kThreads);
  layernorm_backward_params_kernel<<<blocks, kThreads, 0, stream>>>(dweight, dbias, dout, inp, mean, rstd, N, C);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace meshplan::kernels::cuda
