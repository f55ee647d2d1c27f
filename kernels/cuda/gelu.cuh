// GPT-2's GELU on the GPU, value and derivative, for the elementwise kernels
// (elementwise.cu) and GeGLU (gated_mlp.cu): the CPU kernel's tanh form
// (kernels/cpu/activation.hpp's constants) written with sigmoids, so that no
// 1 + tanh u cancels.
//
// defines: gelu_value, gelu_derivative
#pragma once

#include "kernels/cpu/activation.hpp"

namespace meshplan::kernels::cuda {

// 0.5 x (1 + tanh u) = x sigmoid(2u), u = k (x + a x^3): for x below about -2,
// 1 + tanh u cancels (tanh u near -1) and loses up to 1e-4 of the result's
// relative precision in fp32; 1 / (1 + exp(-2u)) keeps it.
__device__ __forceinline__ float gelu_sigmoid_2u(float u) { return 1.0f / (1.0f + expf(-2.0f * u)); }

__device__ __forceinline__ float gelu_u(float x) {
  return kernels::kGeluScale<float> * (x + kernels::kGeluCubic<float> * x * x * x);
}

__device__ __forceinline__ float gelu_value(float x) { return x * gelu_sigmoid_2u(gelu_u(x)); }

// d/dx: 0.5 (1 + tanh u) = s and 0.5 (1 - tanh^2 u) = 2 s (1 - s), with 1 - s
// taken as sigmoid(-2u), again without the cancellation.
__device__ __forceinline__ float gelu_derivative(float x) {
  const float u = gelu_u(x);
  const float s = gelu_sigmoid_2u(u), s_minus = gelu_sigmoid_2u(-u);
  const float du_dx = kernels::kGeluScale<float> * (1.0f + 3.0f * kernels::kGeluCubic<float> * x * x);
  return s + 2.0f * x * s * s_minus * du_dx;
}

}  // namespace meshplan::kernels::cuda
