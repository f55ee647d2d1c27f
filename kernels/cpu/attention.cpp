// Causal attention on BLAS: per (batch, head), the scores S = Q K^T / sqrt(HS),
// a row-wise masked softmax, and O = P V, with every product a strided GEMM
// straight out of the packed qkv buffer (row stride 3C; no copies). The
// causal mask is exploited by row blocks of `block` query positions: block
// [r0, r1) only needs key positions [0, r1), so the GEMMs cover the lower
// block-triangle (about half of T x T for long sequences) instead of all of it.
//
// Softmax rows subtract the row maximum before exp (the softmax is invariant
// to it and exp cannot overflow). Backward, with p = att and dout the output
// gradient, per (batch, head):
//   dP = dO V^T      dV += P^T dO
//   dS = P * (dP - rowsum(P * dP)) / sqrt(HS)       (softmax Jacobian, masked)
//   dQ += dS K       dK += dS^T Q
// Softmax rows are independent, so their loops run in OpenMP threads; the
// GEMMs use the BLAS's own threads. Tested against the triple-loop
// reference_attention_* in kernels/cpu/reference.hpp and finite differences.
//
// Multi-head and grouped-query attention share the per-(batch, head) work
// (causal_head_forward/backward): they differ only in where a head's q, k and
// v start in the packed row and in the row's width. GQA runs each query head
// against its group's key/value head in place, without repeating K and V
// (Hugging Face's repeat_kv copies them); in the backward, the group's query
// heads add their dK and dV into the one shared slot.
#include "kernels/cpu/attention.hpp"

#include <cblas.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/fast_math.hpp"

namespace meshplan::kernels {
namespace {

constexpr std::int64_t block = 128;  // query rows per causal block

blasint to_blas(std::int64_t n) {
  assert(n >= 0 && n <= std::numeric_limits<blasint>::max() && "dimension does not fit the BLAS integer");
  return static_cast<blasint>(n);
}

// C[M,N] = alpha op(A) op(B) + beta C, row-major with row strides ld*.
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
          const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, to_blas(M), to_blas(N), to_blas(K), alpha, A, to_blas(lda), B, to_blas(ldb),
              beta, C, to_blas(ldc));
}
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, std::int64_t M, std::int64_t N, std::int64_t K, double alpha,
          const double* A, std::int64_t lda, const double* B, std::int64_t ldb, double beta, double* C,
          std::int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, to_blas(M), to_blas(N), to_blas(K), alpha, A, to_blas(lda), B, to_blas(ldb),
              beta, C, to_blas(ldc));
}

// One (batch, head) of the forward. q, k, v hold T_len rows of HS values,
// row stride ld_qkv (the packed buffer's width); o is written with row
// stride ld_out; p[T_len, T_len] receives the probabilities.
template <typename T>
void causal_head_forward(T* o, std::int64_t ld_out, T* p, const T* q, const T* k, const T* v, std::int64_t ld_qkv,
                         std::int64_t T_len, std::int64_t HS, T scale) {
  for (std::int64_t r0 = 0; r0 < T_len; r0 += block) {
    const std::int64_t r1 = std::min(T_len, r0 + block);
    // S[r0:r1, 0:r1] = scale Q[r0:r1] K[0:r1]^T
    gemm(CblasNoTrans, CblasTrans, r1 - r0, r1, HS, scale, q + r0 * ld_qkv, ld_qkv, k, ld_qkv, T(0), p + r0 * T_len,
         T_len);
  }
#pragma omp parallel for schedule(static) if (T_len * T_len >= (1 << 17))
  for (std::int64_t t = 0; t < T_len; ++t) {
    T* row = p + t * T_len;
    T row_max = -std::numeric_limits<T>::infinity();
    for (std::int64_t t2 = 0; t2 <= t; ++t2) row_max = std::max(row_max, row[t2]);
#pragma omp simd
    for (std::int64_t t2 = 0; t2 <= t; ++t2) row[t2] = exp_of(row[t2] - row_max);
    T sum = T(0);
    for (std::int64_t t2 = 0; t2 <= t; ++t2) sum += row[t2];
    const T inv_sum = T(1) / sum;
    for (std::int64_t t2 = 0; t2 <= t; ++t2) row[t2] *= inv_sum;
    for (std::int64_t t2 = t + 1; t2 < T_len; ++t2) row[t2] = T(0);
  }
  for (std::int64_t r0 = 0; r0 < T_len; r0 += block) {
    const std::int64_t r1 = std::min(T_len, r0 + block);
    // O[r0:r1] = P[r0:r1, 0:r1] V[0:r1]
    gemm(CblasNoTrans, CblasNoTrans, r1 - r0, HS, r1, T(1), p + r0 * T_len, T_len, v, ld_qkv, T(0), o + r0 * ld_out,
         ld_out);
  }
}

// One (batch, head) of the backward, accumulating into dq, dk, dv (row
// stride ld_qkv, as q, k, v); dout_bh has row stride ld_out; ds is a
// T_len x T_len workspace.
template <typename T>
void causal_head_backward(T* dq, T* dk, T* dv, T* ds, const T* dout_bh, std::int64_t ld_out, const T* p, const T* q,
                          const T* k, const T* v, std::int64_t ld_qkv, std::int64_t T_len, std::int64_t HS, T scale) {
  for (std::int64_t r0 = 0; r0 < T_len; r0 += block) {
    const std::int64_t r1 = std::min(T_len, r0 + block);
    // dP[r0:r1, 0:r1] = dO[r0:r1] V[0:r1]^T
    gemm(CblasNoTrans, CblasTrans, r1 - r0, r1, HS, T(1), dout_bh + r0 * ld_out, ld_out, v, ld_qkv, T(0),
         ds + r0 * T_len, T_len);
    // dV[0:r1] += P[r0:r1, 0:r1]^T dO[r0:r1]
    gemm(CblasTrans, CblasNoTrans, r1, HS, r1 - r0, T(1), p + r0 * T_len, T_len, dout_bh + r0 * ld_out, ld_out, T(1),
         dv, ld_qkv);
  }
#pragma omp parallel for schedule(static) if (T_len * T_len >= (1 << 17))
  for (std::int64_t t = 0; t < T_len; ++t) {
    const T* p_row = p + t * T_len;
    T* row = ds + t * T_len;
    T p_dot_dp = T(0);
    for (std::int64_t t2 = 0; t2 <= t; ++t2) p_dot_dp += p_row[t2] * row[t2];
    for (std::int64_t t2 = 0; t2 <= t; ++t2) row[t2] = p_row[t2] * (row[t2] - p_dot_dp) * scale;
    // Entries past t stay unread: the block GEMMs below read columns < r1
    // only, and within a block the masked entries must be zero.
    for (std::int64_t t2 = t + 1; t2 < T_len; ++t2) row[t2] = T(0);
  }
  for (std::int64_t r0 = 0; r0 < T_len; r0 += block) {
    const std::int64_t r1 = std::min(T_len, r0 + block);
    // dQ[r0:r1] += dS[r0:r1, 0:r1] K[0:r1]
    gemm(CblasNoTrans, CblasNoTrans, r1 - r0, HS, r1, T(1), ds + r0 * T_len, T_len, k, ld_qkv, T(1),
         dq + r0 * ld_qkv, ld_qkv);
    // dK[0:r1] += dS[r0:r1, 0:r1]^T Q[r0:r1]
    gemm(CblasTrans, CblasNoTrans, r1, HS, r1 - r0, T(1), ds + r0 * T_len, T_len, q + r0 * ld_qkv, ld_qkv, T(1), dk,
         ld_qkv);
  }
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* att, const T* qkv, std::int64_t B, std::int64_t T_len, std::int64_t C,
                       std::int64_t NH) {
  assert(NH > 0 && C % NH == 0 && "heads must divide channels");
  const std::int64_t HS = C / NH;
  const std::int64_t C3 = 3 * C;
  const T scale = T(1) / std::sqrt(static_cast<T>(HS));
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < NH; ++h) {
      const T* q = qkv + b * T_len * C3 + h * HS;
      causal_head_forward(out + b * T_len * C + h * HS, C, att + (b * NH + h) * T_len * T_len, q, q + C, q + 2 * C,
                          C3, T_len, HS, scale);
    }
  }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, std::int64_t B, std::int64_t T_len,
                        std::int64_t C, std::int64_t NH) {
  assert(NH > 0 && C % NH == 0 && "heads must divide channels");
  const std::int64_t HS = C / NH;
  const std::int64_t C3 = 3 * C;
  const T scale = T(1) / std::sqrt(static_cast<T>(HS));
  std::vector<T> ds(static_cast<std::size_t>(T_len * T_len));
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < NH; ++h) {
      const T* q = qkv + b * T_len * C3 + h * HS;
      T* dq = dqkv + b * T_len * C3 + h * HS;
      causal_head_backward(dq, dq + C, dq + 2 * C, ds.data(), dout + b * T_len * C + h * HS, C,
                           att + (b * NH + h) * T_len * T_len, q, q + C, q + 2 * C, C3, T_len, HS, scale);
    }
  }
}

template <typename T>
void gqa_attention_forward(T* out, T* att, const T* qkv, std::int64_t B, std::int64_t T_len, std::int64_t NH,
                           std::int64_t KVH, std::int64_t D, std::int64_t group, std::int64_t head_offset) {
  if (group == 0) group = NH / KVH;
  assert(KVH > 0 && group > 0 && (head_offset + NH - 1) / group < KVH && "every query head needs its key/value head");
  const std::int64_t W = (NH + 2 * KVH) * D;
  const std::int64_t out_width = NH * D;
  const T scale = T(1) / std::sqrt(static_cast<T>(D));
  for (std::int64_t b = 0; b < B; ++b) {
    const T* row0 = qkv + b * T_len * W;
    for (std::int64_t h = 0; h < NH; ++h) {
      const std::int64_t kv = (head_offset + h) / group;
      causal_head_forward(out + b * T_len * out_width + h * D, out_width, att + (b * NH + h) * T_len * T_len,
                          row0 + h * D, row0 + (NH + kv) * D, row0 + (NH + KVH + kv) * D, W, T_len, D, scale);
    }
  }
}

template <typename T>
void gqa_attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, std::int64_t B, std::int64_t T_len,
                            std::int64_t NH, std::int64_t KVH, std::int64_t D, std::int64_t group,
                            std::int64_t head_offset) {
  if (group == 0) group = NH / KVH;
  assert(KVH > 0 && group > 0 && (head_offset + NH - 1) / group < KVH && "every query head needs its key/value head");
  const std::int64_t W = (NH + 2 * KVH) * D;
  const std::int64_t out_width = NH * D;
  const T scale = T(1) / std::sqrt(static_cast<T>(D));
  std::vector<T> ds(static_cast<std::size_t>(T_len * T_len));
  for (std::int64_t b = 0; b < B; ++b) {
    const T* row0 = qkv + b * T_len * W;
    T* drow0 = dqkv + b * T_len * W;
    for (std::int64_t h = 0; h < NH; ++h) {
      // The query heads of a group run one after another, so their dK and dV
      // GEMMs (beta = 1) sum into the shared key/value head's gradient.
      const std::int64_t kv = (head_offset + h) / group;
      causal_head_backward(drow0 + h * D, drow0 + (NH + kv) * D, drow0 + (NH + KVH + kv) * D, ds.data(),
                           dout + b * T_len * out_width + h * D, out_width, att + (b * NH + h) * T_len * T_len,
                           row0 + h * D, row0 + (NH + kv) * D, row0 + (NH + KVH + kv) * D, W, T_len, D, scale);
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, std::int64_t, std::int64_t, std::int64_t,
                                       std::int64_t);
template void attention_forward<double>(double*, double*, const double*, std::int64_t, std::int64_t, std::int64_t,
                                        std::int64_t);
template void attention_backward<float>(float*, const float*, const float*, const float*, std::int64_t,
                                        std::int64_t, std::int64_t, std::int64_t);
template void attention_backward<double>(double*, const double*, const double*, const double*, std::int64_t,
                                         std::int64_t, std::int64_t, std::int64_t);
template void gqa_attention_forward<float>(float*, float*, const float*, std::int64_t, std::int64_t, std::int64_t,
                                           std::int64_t, std::int64_t, std::int64_t, std::int64_t);
template void gqa_attention_forward<double>(double*, double*, const double*, std::int64_t, std::int64_t,
                                            std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t);
template void gqa_attention_backward<float>(float*, const float*, const float*, const float*, std::int64_t,
                                            std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                            std::int64_t);
template void gqa_attention_backward<double>(double*, const double*, const double*, const double*, std::int64_t,
                                             std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                             std::int64_t);

}  // namespace meshplan::kernels
