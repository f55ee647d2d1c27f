// The obviously-right versions of ops whose fast path is written differently:
// matmul (the fast path is BLAS) and attention (the fast path computes the
// causal softmax row by row; the reference builds the full score matrix,
// masks with -infinity and softmaxes each row). Plain loops in double, no
// BLAS, no saved intermediates shared with the fast path, so a bug in one is
// not repeated in the other. The tests compare every fast
// or CUDA variant against these. Slow by design; never used for training.
// The Llama ops: RMSNorm (backward through the full Jacobian, not the
// fast path's reduced formula), RoPE (an explicit D x D rotation matrix per
// position), SwiGLU's forward, and grouped-query attention (each query head
// reads its key/value head by index; the backward element by element).
//
// Defines: reference_matmul_forward, reference_matmul_backward,
// reference_attention_forward, reference_attention_backward,
// reference_rmsnorm_forward, reference_rmsnorm_backward, reference_rope_apply,
// reference_swiglu_forward, reference_geglu_forward, reference_gqa_attention_forward,
// reference_gqa_attention_backward, reference_round_to_bf16,
// reference_matmul_forward_bf16, reference_matmul_backward_bf16.
#pragma once

#include <cstdint>

namespace meshplan::kernels {

// Same contract as matmul_forward (kernels/cpu/matmul.hpp):
// out[N, OC] = inp[N, C] . weight[OC, C]^T + bias[OC]; bias may be null.
void reference_matmul_forward(double* out, const double* inp, const double* weight, const double* bias,
                              std::int64_t N, std::int64_t C, std::int64_t OC);

// Same contract as matmul_backward: accumulates dinp[N, C], dweight[OC, C],
// dbias[OC] (each skipped when null).
void reference_matmul_backward(double* dinp, double* dweight, double* dbias, const double* dout, const double* inp,
                               const double* weight, std::int64_t N, std::int64_t C, std::int64_t OC);

// Same contract as attention_forward (kernels/cpu/attention.hpp): writes
// out[B, T, C] and att[B, NH, T, T] from qkv[B, T, 3C].
void reference_attention_forward(double* out, double* att, const double* qkv, std::int64_t B, std::int64_t T_len,
                                 std::int64_t C, std::int64_t NH);

// Same contract as attention_backward: accumulates dqkv from dout and the
// saved att, by the chain rule written out element by element (no blocking).
void reference_attention_backward(double* dqkv, const double* dout, const double* qkv, const double* att,
                                  std::int64_t B, std::int64_t T_len, std::int64_t C, std::int64_t NH);

// Same contract as rmsnorm_forward (kernels/cpu/rmsnorm.hpp): writes
// out[N, C] and rstd[N].
void reference_rmsnorm_forward(double* out, double* rstd, const double* inp, const double* weight, std::int64_t N,
                               std::int64_t C, double eps);

// Accumulates dinp[N, C] and dweight[C] as rmsnorm_backward does, but from
// eps rather than a saved rstd: dinp[j] += sum_c dout[c] d out[c] / d inp[j]
// with the Jacobian written out entry by entry.
void reference_rmsnorm_backward(double* dinp, double* dweight, const double* dout, const double* inp,
                                const double* weight, std::int64_t N, std::int64_t C, double eps);

// Same contract as rope_apply (kernels/cpu/rope.hpp), in place: each head of
// each row is multiplied by the head_dim x head_dim rotation matrix R of its
// position (R^T when inverse).
void reference_rope_apply(double* x, std::int64_t rows, std::int64_t seq_len, std::int64_t heads,
                          std::int64_t head_dim, std::int64_t row_stride, double theta, bool inverse);

// Same contract as swiglu_forward (kernels/cpu/swiglu.hpp): out[N, F] from inp[N, 2F].
void reference_swiglu_forward(double* out, const double* inp, std::int64_t N, std::int64_t F);

// Same contract as geglu_forward: gelu written out (tanh form, GPT-2's
// constants sqrt(2/pi) and 0.044715) times up.
void reference_geglu_forward(double* out, const double* inp, std::int64_t N, std::int64_t F);

// Same contract as gqa_attention_forward (kernels/cpu/attention.hpp): writes
// out[B, T, NH * D] and att[B, NH, T, T] from qkv[B, T, (NH + 2 KVH) * D].
void reference_gqa_attention_forward(double* out, double* att, const double* qkv, std::int64_t B, std::int64_t T_len,
                                     std::int64_t NH, std::int64_t KVH, std::int64_t D);

// Same contract as gqa_attention_backward: accumulates dqkv from dout and the
// saved att, element by element.
void reference_gqa_attention_backward(double* dqkv, const double* dout, const double* qkv, const double* att,
                                      std::int64_t B, std::int64_t T_len, std::int64_t NH, std::int64_t KVH,
                                      std::int64_t D);

// `value` rounded to the nearest bfloat16, ties to the even one, found by
// measuring the distance (in double) to the two bf16 neighbours rather than
// by bit arithmetic (kernels/cpu/bf16.hpp does that). Overflow past the
// largest bf16 gives infinity (IEEE round-to-nearest); NaN and infinities pass.
float reference_round_to_bf16(float value);

// The contracts of matmul_forward_bf16 / matmul_backward_bf16 (matmul.hpp):
// the GEMM operands rounded by reference_round_to_bf16, then the double
// reference above; the bias (and the bias gradient's input) is not rounded.
void reference_matmul_forward_bf16(double* out, const float* inp, const float* weight, const float* bias,
                                   std::int64_t N, std::int64_t C, std::int64_t OC);
void reference_matmul_backward_bf16(double* dinp, double* dweight, double* dbias, const float* dout, const float* inp,
                                    const float* weight, std::int64_t N, std::int64_t C, std::int64_t OC);

}  // namespace meshplan::kernels
