// Fully connected layer, the op that carries almost all of a transformer's
// FLOPs, so it is the one op that goes through BLAS (cblas_sgemm/dgemm).
// The weight is stored [OC, C] (out-features major, as PyTorch's nn.Linear and
// llm.c), so the forward is inp . weight^T. Backward accumulates (+=) into
// every gradient buffer, because gradient accumulation over micro-batches adds
// into the same buffers. kernels/cpu/reference.hpp has the triple-loop
// version these are tested against.
//
// bf16 variants (mixed precision, Micikevicius et al. 2018): the float inputs
// of each GEMM are rounded to bfloat16 (kernels/cpu/bf16.hpp, nearest-even)
// into a caller-owned workspace, multiplied with fp32 accumulation and fp32
// outputs; the bias add and the bias gradient stay fp32, and so do the master
// weights the caller keeps. The GEMM is oneDNN's matmul (brgemm on AVX512-BF16
// or AMX), because Debian's OpenBLAS 0.3.21 is built without cblas_sbgemm.
// Run them only where bf16_matmul_support() says so.
//
// Defines: matmul_forward, matmul_backward, bias_backward, Bf16Support, bf16_matmul_support,
// matmul_bf16_workspace_elements, matmul_forward_bf16, matmul_backward_bf16.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cpu/bf16.hpp"

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

// dbias[OC] += sum over the N rows of dout[N, OC] (matmul_backward's bias
// term alone, for a bias added outside the GEMM: a row-parallel linear's).
template <typename T>
void bias_backward(T* dbias, const T* dout, std::int64_t N, std::int64_t OC);

struct Bf16Support {
  bool supported = false;
  std::string reason;  // why not, for a message: no oneDNN in this build, or the CPU lacks AVX512-BF16/AMX-BF16
};

// Whether this build has the bf16 GEMM (oneDNN) and this CPU runs bf16
// natively (the avx512_bf16 or amx_bf16 flag, from cpuid through
// __builtin_cpu_supports). Computed once.
const Bf16Support& bf16_matmul_support();

// bf16 elements the workspace of one matmul_forward_bf16 / matmul_backward_bf16
// call needs: N*C + OC*C + N*OC (rounded copies of inp, weight, dout).
std::int64_t matmul_bf16_workspace_elements(std::int64_t N, std::int64_t C, std::int64_t OC);

// As matmul_forward / matmul_backward in float, with the GEMM operands rounded
// to bf16 (inp and weight; dout and weight for dinp; dout and inp for dweight).
// `workspace` holds at least matmul_bf16_workspace_elements(N, C, OC) elements.
void matmul_forward_bf16(float* out, const float* inp, const float* weight, const float* bias, std::int64_t N,
                         std::int64_t C, std::int64_t OC, Bf16Bits* workspace);
void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, std::int64_t N, std::int64_t C, std::int64_t OC, Bf16Bits* workspace);

}  // namespace meshplan::kernels
