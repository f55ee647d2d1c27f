// Pointwise activations: GELU for the GPT-2 MLP block and ReLU for the plain
// MLP. GELU is the tanh approximation GPT-2 was trained with (Hendrycks &
// Gimpel 2016, eq. in section 2; OpenAI gpt-2 src/model.py `gelu`), not the
// exact erf form, so trained checkpoints and losses match GPT-2's.
// Backward accumulates (+=) into dinp.
//
// Defines: kGeluScale, kGeluCubic, gelu_forward, gelu_backward, relu_forward, relu_backward.
#pragma once

#include <cstdint>

namespace meshplan::kernels {

// The tanh GELU's constants, for every implementation of it (the CUDA one too).
template <typename T>
inline constexpr T kGeluScale = static_cast<T>(0.7978845608028654);  // sqrt(2 / pi)
template <typename T>
inline constexpr T kGeluCubic = static_cast<T>(0.044715);

// out[i] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x = inp[i], i < N.
// N is the total element count (B * T * 4C for the GPT-2 MLP). out may alias inp.
template <typename T>
void gelu_forward(T* out, const T* inp, std::int64_t N);

// dinp[i] += gelu'(inp[i]) * dout[i]; inp is the forward input.
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::int64_t N);

// out[i] = max(inp[i], 0). out may alias inp.
template <typename T>
void relu_forward(T* out, const T* inp, std::int64_t N);

// dinp[i] += (inp[i] > 0 ? dout[i] : 0); the subgradient at 0 is taken as 0,
// as PyTorch does.
template <typename T>
void relu_backward(T* dinp, const T* inp, const T* dout, std::int64_t N);

}  // namespace meshplan::kernels
