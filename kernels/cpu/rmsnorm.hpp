// Root-mean-square layer normalisation (Zhang & Sennrich 2019, "Root Mean
// Square Layer Normalization", eq. 4), as Llama uses it before attention and
// MLP: no mean subtraction and no bias, only a learned gain. eps sits inside
// the square root, as in Meta's llama/model.py RMSNorm and Hugging Face's
// LlamaRMSNorm. The forward saves the per-row reciprocal RMS so the backward
// needs no second pass over the statistics. Backward accumulates (+=) into
// dinp and dweight.
//
// Defines: rmsnorm_forward, rmsnorm_backward.
#pragma once

#include <cstdint>

namespace meshplan::kernels {

// For each of the N rows of inp[N, C]:
//   rstd[n] = 1 / sqrt(sum_c inp[n, c]^2 / C + eps)
//   out[n, c] = inp[n, c] * rstd[n] * weight[c]
// out[N, C] and rstd[N] are written; weight[C]. eps is Llama's norm_eps
// (1e-5 in Llama 2's config, 1e-6 in Llama 1's).
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, std::int64_t N, std::int64_t C, double eps);

// Given dout[N, C] and the saved rstd[N], accumulates dinp[N, C] and dweight[C].
template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd,
                      std::int64_t N, std::int64_t C);

}  // namespace meshplan::kernels
