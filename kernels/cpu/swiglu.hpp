// SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer", section 2:
// Swish_1(x W) * x V), Llama's MLP activation (Meta's llama/model.py
// FeedForward: w2(silu(w1(x)) * w3(x))).
// The gate (w1) and up (w3) projections are one fused matmul whose output
// row holds the gate half then the up half, so this op reads [N, 2F] and
// writes [N, F]. silu(g) = g sigmoid(g) = Swish_1 (Elfwing et al. 2018).
// GeGLU (same paper, section 2: GELU(x W) * x V) is the same gated product
// with GELU (the tanh approximation of activation.hpp, Gemma's
// gelu_pytorch_tanh) in place of silu.
// Backward accumulates (+=) into dinp.
//
// Defines: swiglu_forward, swiglu_backward, geglu_forward, geglu_backward.
#pragma once

#include <cstdint>

namespace meshplan::kernels {

// inp[N, 2F]: row n holds the gate projection in columns [0, F) and the up
// projection in [F, 2F). out[N, F] = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
// out is written and must not alias inp.
template <typename T>
void swiglu_forward(T* out, const T* inp, std::int64_t N, std::int64_t F);

// Given dout[N, F], accumulates dinp[N, 2F]:
//   dgate += dout * up * silu'(gate),  silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g)))
//   dup   += dout * silu(gate)
template <typename T>
void swiglu_backward(T* dinp, const T* dout, const T* inp, std::int64_t N, std::int64_t F);

// As swiglu_forward / swiglu_backward with gelu (kernels/cpu/activation.hpp) for silu:
// out = gelu(gate) * up; dgate += dout * up * gelu'(gate), dup += dout * gelu(gate).
template <typename T>
void geglu_forward(T* out, const T* inp, std::int64_t N, std::int64_t F);
template <typename T>
void geglu_backward(T* dinp, const T* dout, const T* inp, std::int64_t N, std::int64_t F);

}  // namespace meshplan::kernels
