// The element-wise arithmetic of the GPU's GELU (elementwise.cu), SwiGLU,
// GeGLU and rotary positions (gated_mlp.cu), written once for the CUDA
// kernels and the host, where tests/test_elementwise_rows.cpp runs it over every
// element index, as the kernels' threads do, against kernels/cpu/ in double:
// the same index mapping, the same formulas.
//
//   GELU    GPT-2's tanh form 0.5 x (1 + tanh u), u = k (x + a x^3), written
//           as x sigmoid(2u): for x below about -2, 1 + tanh u cancels and
//           loses up to 1e-4 of the result's relative precision in fp32;
//           1 / (1 + exp(-2u)) keeps it. Its derivative likewise: 0.5 (1 +
//           tanh u) = s, 0.5 (1 - tanh^2 u) = 2 s (1 - s), with 1 - s taken
//           as sigmoid(-2u).
//   gated   each row of the input is [gate | up], F each (kernels/cpu/
//           swiglu.hpp); element i of the output [N, F] reads gate and up of
//           row i / F at column i % F. The backward accumulates.
//   rotary  element idx of rows x heads x D/2 is pair i = idx mod D/2 of
//           head (idx / (D/2)) mod heads of row idx / (heads D/2), at
//           position row mod seq_len; its angle p theta^(-2i/D) in double,
//           cosine and sine rounded to float, as kernels/cpu/rope.cpp's
//           table holds them.
//
// defines: gelu_value, gelu_derivative, GatedElement, swiglu_forward_at,
// swiglu_backward_at, geglu_forward_at, geglu_backward_at, rope_at
#pragma once

#include <math.h>

#include <cstdint>

#include "kernels/cpu/activation.hpp"
#include "kernels/cuda/host_device.hpp"

namespace meshplan::kernels::cuda {

MESHPLAN_HD inline float gelu_sigmoid_2u(float u) { return 1.0f / (1.0f + expf(-2.0f * u)); }
MESHPLAN_HD inline float gelu_u(float x) {
  return kernels::kGeluScale<float> * (x + kernels::kGeluCubic<float> * x * x * x);
}
MESHPLAN_HD inline float gelu_value(float x) { return x * gelu_sigmoid_2u(gelu_u(x)); }
MESHPLAN_HD inline float gelu_derivative(float x) {
  const float u = gelu_u(x);
  const float s = gelu_sigmoid_2u(u), s_minus = gelu_sigmoid_2u(-u);
  const float du_dx = kernels::kGeluScale<float> * (1.0f + 3.0f * kernels::kGeluCubic<float> * x * x);
  return s + 2.0f * x * s * s_minus * du_dx;
}

// Element i of out [N, F]: its gate and up inputs in inp [N, 2F].
struct GatedElement {
  std::int64_t gate, up;
  MESHPLAN_HD GatedElement(std::int64_t i, std::int64_t F) : gate(i / F * 2 * F + i % F), up(gate + F) {}
};

MESHPLAN_HD inline float silu_sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

MESHPLAN_HD inline void swiglu_forward_at(float* out, const float* inp, std::int64_t i, std::int64_t F) {
  const GatedElement e(i, F);
  const float g = inp[e.gate];
  out[i] = g * silu_sigmoid(g) * inp[e.up];
}

MESHPLAN_HD inline void swiglu_backward_at(float* dinp, const float* dout, const float* inp, std::int64_t i,
                                           std::int64_t F) {
  const GatedElement e(i, F);
  const float g = inp[e.gate], s = silu_sigmoid(g);
  const float silu = g * s, dsilu = s * (1.0f + g * (1.0f - s));
  dinp[e.gate] += dout[i] * inp[e.up] * dsilu;
  dinp[e.up] += dout[i] * silu;
}

MESHPLAN_HD inline void geglu_forward_at(float* out, const float* inp, std::int64_t i, std::int64_t F) {
  const GatedElement e(i, F);
  out[i] = gelu_value(inp[e.gate]) * inp[e.up];
}

MESHPLAN_HD inline void geglu_backward_at(float* dinp, const float* dout, const float* inp, std::int64_t i,
                                          std::int64_t F) {
  const GatedElement e(i, F);
  const float g = inp[e.gate];
  dinp[e.up] += dout[i] * gelu_value(g);
  dinp[e.gate] += gelu_derivative(g) * (dout[i] * inp[e.up]);
}

// `sign` -1 rotates back (the backward).
MESHPLAN_HD inline void rope_at(float* x, std::int64_t idx, std::int64_t seq_len, std::int64_t heads,
                                std::int64_t head_dim, std::int64_t row_stride, double theta, double sign) {
  const std::int64_t half = head_dim / 2;
  const std::int64_t i = idx % half, h = idx / half % heads, r = idx / (half * heads);
  const double freq = pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  const double angle = static_cast<double>(r % seq_len) * freq;
  const float c = static_cast<float>(cos(angle)), s = static_cast<float>(sign * sin(angle));
  float* lo = x + r * row_stride + h * head_dim;
  const float a = lo[i], b = lo[i + half];
  lo[i] = a * c - b * s;
  lo[i + half] = b * c + a * s;
}

}  // namespace meshplan::kernels::cuda
