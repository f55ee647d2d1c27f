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
      const T* k = q + C;
      const T* v = q + 2 * C;
      T* p = att + (b * NH + h) * T_len * T_len;
      T* o = out + b * T_len * C + h * HS;
      for (std::int64_t r0 = 0; r0 < T_len; r0 += block) {
        const std::int64_t r1 = std::min(T_len, r0 + block);
        // S[r0:r1, 0:r1] = scale Q[r0:r1] K[0:r1]^T
        gemm(CblasNoTrans, CblasTrans, r1 - r0, r1, HS, scale, q + r0 * C3, C3, k, C3, T(0), p + r0 * T_len, T_len);
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
        gemm(CblasNoTrans, CblasNoTrans, r1 - r0, HS, r1, T(1), p + r0 * T_len, T_len, v, C3, T(0), o + r0 * C, C);
      }
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
  std::vector<T> ds_memory(static_cast<std::size_t>(T_len * T_len));
  T* ds = ds_memory.data();
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < NH; ++h) {
      const T* q = qkv + b * T_len * C3 + h * HS;
      const T* k = q + C;
      const T* v = q + 2 * C;
      T* dq = dqkv + b * T_len * C3 + h * HS;
      T* dk = dq + C;
      T* dv = dq + 2 * C;
      const T* p = att + (b * NH + h) * T_len * T_len;
      const T* dout_bh = dout + b * T_len * C + h * HS;
      for (std::int64_t r0 = 0; r0 < T_len; r0 += block) {
        const std::int64_t r1 = std::min(T_len, r0 + block);
        // dP[r0:r1, 0:r1] = dO[r0:r1] V[0:r1]^T
        gemm(CblasNoTrans, CblasTrans, r1 - r0, r1, HS, T(1), dout_bh + r0 * C, C, v, C3, T(0), ds + r0 * T_len,
             T_len);
        // dV[0:r1] += P[r0:r1, 0:r1]^T dO[r0:r1]
        gemm(CblasTrans, CblasNoTrans, r1, HS, r1 - r0, T(1), p + r0 * T_len, T_len, dout_bh + r0 * C, C, T(1), dv,
             C3);
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
        gemm(CblasNoTrans, CblasNoTrans, r1 - r0, HS, r1, T(1), ds + r0 * T_len, T_len, k, C3, T(1), dq + r0 * C3, C3);
        // dK[0:r1] += dS[r0:r1, 0:r1]^T Q[r0:r1]
        gemm(CblasTrans, CblasNoTrans, r1, HS, r1 - r0, T(1), ds + r0 * T_len, T_len, q + r0 * C3, C3, T(1), dk, C3);
      }
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

}  // namespace meshplan::kernels
