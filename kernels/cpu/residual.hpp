// The residual connection x + f(x) of a pre-norm transformer block (He et al.
// 2016; GPT-2). Its own op so the executor's layer code reads as the model
// does, and so the backward (the gradient flows unchanged to both branches)
// accumulates like every other op.
//
// Defines: residual_forward, residual_backward.
#pragma once

#include <cstdint>

namespace meshplan::kernels {

// out[i] = inp1[i] + inp2[i], i < N (N = total element count). out may alias either input.
template <typename T>
void residual_forward(T* out, const T* inp1, const T* inp2, std::int64_t N);

// dinp1[i] += dout[i]; dinp2[i] += dout[i].
template <typename T>
void residual_backward(T* dinp1, T* dinp2, const T* dout, std::int64_t N);

}  // namespace meshplan::kernels
