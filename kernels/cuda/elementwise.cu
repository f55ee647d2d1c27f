// The elementwise kernels, AdamW and the squared norm of kernels.hpp: one
// thread per element in a grid-stride loop, the formulas of the CPU kernels
// (kernels/cpu/activation.cpp, residual.cpp) in float, GELU's from elementwise_rows.hpp; AdamW's element
// update is adamw_multi_chunks.hpp's, shared with the multi-tensor step.
#include <cmath>

#include "kernels/cpu/activation.hpp"
#include "kernels/cuda/adamw_multi_chunks.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/kernels.hpp"
#include "kernels/cuda/elementwise_rows.hpp"

namespace meshplan::kernels::cuda {
namespace {


__global__ void gelu_forward_kernel(float* out, const float* inp, std::int64_t n) {
  MESHPLAN_GRID_STRIDE(i, n) out[i] = gelu_value(inp[i]);
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, std::int64_t n) {
  MESHPLAN_GRID_STRIDE(i, n) dinp[i] += gelu_derivative(inp[i]) * dout[i];
}

__global__ void residual_forward_kernel(float* out, const float* a, const float* b, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

__global__ void residual_backward_kernel(float* da, float* db, const float* dout, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, std::int64_t n, AdamWStepScalars s) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    adamw_element(params[i], m[i], v[i], grads[i], s);
}

// Block b sums elements b, b + B, b + 2B, ... (B = kNormBlocks x kThreads
// threads in all) and reduces in shared memory in a fixed order.
__global__ void squared_norm_partial_kernel(const float* x, std::int64_t n, double* partial) {
  __shared__ double sums[kThreads];
  double sum = 0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const double xi = x[i];
    sum += xi * xi;
  }
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) sums[threadIdx.x] += sums[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
}

__global__ void squared_norm_final_kernel(const double* partial, int count, double* total) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    double sum = 0;
    for (int b = 0; b < count; ++b) sum += partial[b];
    *total = sum;
  }
}

}  // namespace

void gelu_forward(float* out, const float* inp, std::int64_t n, cudaStream_t stream) {
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, inp, n);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t n, cudaStream_t stream) {
  gelu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dinp, inp, dout, n);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void residual_forward(float* out, const float* a, const float* b, std::int64_t n, cudaStream_t stream) {
  residual_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, a, b, n);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void residual_backward(float* da, float* db, const float* dout, std::int64_t n, cudaStream_t stream) {
  residual_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(da, db, dout, n);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void adamw_update(float* params, const float* grads, float* m, float* v, std::int64_t n, std::int64_t step,
                  const AdamWHyperparameters& hp, cudaStream_t stream) {
  const AdamWStepScalars s = adamw_step_scalars(step, hp, 1.0f);  // throws unless step >= 1
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream>>>(params, grads, m, v, n, s);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void squared_norm_into(const float* x, std::int64_t n, double* scratch, double* total, cudaStream_t stream) {
  squared_norm_partial_kernel<<<kNormBlocks, kThreads, 0, stream>>>(x, n, scratch);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
  squared_norm_final_kernel<<<1, 1, 0, stream>>>(scratch, kNormBlocks, total);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

double squared_norm(const float* x, std::int64_t n, double* scratch, cudaStream_t stream) {
  squared_norm_into(x, n, scratch, scratch + kNormBlocks, stream);
  double total = 0;
  MESHPLAN_CUDA_CHECK(cudaMemcpyAsync(&total, scratch + kNormBlocks, sizeof total, cudaMemcpyDeviceToHost, stream));
  MESHPLAN_CUDA_CHECK(cudaStreamSynchronize(stream));
  return total;
}

}  // namespace meshplan::kernels::cuda
