// Fully connected layer, the op that carries almost all of a transformer's
// FLOPs, so it is the one op that goes through BLAS (cblas_sgemm/dgemm).
// The weight is stored [OC, C] (out-features major, as PyTorch's nn.Linear and
// llm.c), so the forward is inp . weight^T. Backward accumulates (+=) into
// every gradient buffer, because gradient accumulation over micro-batches adds
// into the same buffers. kernels/cpu/reference.hpp has the triple-loop
// version these are tested against.
//
// Defines: matmul_forward, matmul_backward.
#pragma once

#include <cstdint>

namespace meshplan::kernels {

// out[N, OC] = inp[N, C] . weight[OC, C]^T + bias[OC].
// N is the number of rows (B * T for a sequence model). bias may be null.
// Row-major, contiguous; out must not alias inp or weight.
template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, std::int64_t N, std::int64_t C,
                    std::int64_t OC);

// Given dout[N, OC], accumulates:
//   dinp[N, C]     += dout . weight            (skipped if dinp is null)
//   dweight[OC, C] += dout^T . inp             (skipped if dweight is null)
//   dbias[OC]      += sum over rows of dout    (skipped if dbias is null)
template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, std::int64_t N,
                     std::int64_t C, std::int64_t OC);

}  // namespace meshplan::kernels
