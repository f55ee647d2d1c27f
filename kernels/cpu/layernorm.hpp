// Layer normalisation over the last dimension (Ba, Kiros & Hinton 2016), as
// GPT-2 uses it before attention and MLP. The forward saves the per-row mean
// and reciprocal standard deviation so the backward needs no second pass over
// the statistics (llm.c's layernorm_forward/backward do the same). Backward
// accumulates (+=) into dinp, dweight and dbias.
//
// Defines: kLayerNormEps, layernorm_forward, layernorm_backward.
#pragma once

#include <cstdint>

namespace meshplan::kernels {

// Added to the variance before the square root; PyTorch's and GPT-2's default.
inline constexpr double kLayerNormEps = 1e-5;

// For each of the N rows of inp[N, C]:
//   mean[n] = sum_c inp / C,  rstd[n] = 1 / sqrt(var + eps)  (biased variance)
//   out[n, c] = (inp[n, c] - mean[n]) * rstd[n] * weight[c] + bias[c]
// out[N, C], mean[N], rstd[N] are written; weight[C], bias[C].
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, std::int64_t N,
                       std::int64_t C);

// Given dout[N, C] and the saved mean[N], rstd[N], accumulates dinp[N, C],
// dweight[C], dbias[C].
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, std::int64_t N, std::int64_t C);

}  // namespace meshplan::kernels
