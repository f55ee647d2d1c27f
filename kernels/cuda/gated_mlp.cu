// The Llama family's element-wise layers of kernels.hpp, one thread per
// element in a grid-stride loop, with the CPU kernels' formulas in float:
// SwiGLU and GeGLU (kernels/cpu/swiglu.cpp: each row of the input is [gate |
// up], F each; the backward's SiLU derivative written out, GeGLU's GELU the
// one of gelu.cuh) and rotary positions (kernels/cpu/rope.cpp: each head's
// two halves paired, position p's angle p theta^(-2i/D) taken in double, its
// cosine and sine rounded to float, as the CPU's table holds them).
#include <cmath>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/kernels.hpp"

namespace meshplan::kernels::cuda {
namespace {

// Element i of out [N, F]: its gate and up inputs in inp [N, 2F].
struct GatedElement {
  std::int64_t gate, up;
  __device__ GatedElement(std::int64_t i, std::int64_t F) : gate(i / F * 2 * F + i % F), up(gate + F) {}
};

__device__ __forceinline__ float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

__global__ void swiglu_forward_kernel(float* out, const float* inp, std::int64_t n, std::int64_t F) {
  MESHPLAN_GRID_STRIDE(i, n) {
    const GatedElement e(i, F);
    const float g = inp[e.gate];
    out[i] = g * sigmoid(g) * inp[e.up];
  }
}

__global__ void swiglu_backward_kernel(float* dinp, const float* dout, const float* inp, std::int64_t n,
                                       std::int64_t F) {
  MESHPLAN_GRID_STRIDE(i, n) {
    const GatedElement e(i, F);
    const float g = inp[e.gate], s = sigmoid(g);
    const float silu = g * s, dsilu = s * (1.0f + g * (1.0f - s));
    dinp[e.gate] += dout[i] * inp[e.up] * dsilu;
    dinp[e.up] += dout[i] * silu;
  }
}

__global__ void geglu_forward_kernel(float* out, const float* inp, std::int64_t n, std::int64_t F) {
  MESHPLAN_GRID_STRIDE(i, n) {
    const GatedElement e(i, F);
    out[i] = gelu_value(inp[e.gate]) * inp[e.up];
  }
}

__global__ void geglu_backward_kernel(float* dinp, const float* dout, const float* inp, std::int64_t n,
                                      std::int64_t F) {
  MESHPLAN_GRID_STRIDE(i, n) {
    const GatedElement e(i, F);
    const float g = inp[e.gate];
    dinp[e.up] += dout[i] * gelu_value(g);
    dinp[e.gate] += gelu_derivative(g) * (dout[i] * inp[e.up]);
  }
}

// Pair i of head h in row r: (x[i], x[i + D/2]) rotated by position r mod seq_len's angle for i.
__global__ void rope_kernel(float* x, std::int64_t n, std::int64_t seq_len, std::int64_t heads, std::int64_t head_dim,
                            std::int64_t row_stride, double theta, double sign) {
  const std::int64_t half = head_dim / 2;
  MESHPLAN_GRID_STRIDE(idx, n) {
    const std::int64_t i = idx % half, h = idx / half % heads, r = idx / (half * heads);
    const double freq = pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    const double angle = static_cast<double>(r % seq_len) * freq;
    const float c = static_cast<float>(cos(angle)), s = static_cast<float>(sign * sin(angle));
    float* lo = x + r * row_stride + h * head_dim;
    const float a = lo[i], b = lo[i + half];
    lo[i] = a * c - b * s;
    lo[i + half] = b * c + a * s;
  }
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
