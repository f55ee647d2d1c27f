// matmul_forward / matmul_backward as three GEMMs. Row-major CBLAS with the
// transposes expressed as flags, so no transposed copies are made. The bias is
// written into out first and the GEMM adds onto it (beta = 1). The bias
// gradient, a column sum of dout, is a GEMV with a vector of ones, so it is
// vectorised and threaded by the BLAS like the rest (a plain loop ran at a
// fraction of memory bandwidth; bench/bench_kernels measured it).
#include "kernels/cpu/matmul.hpp"

#include <cblas.h>

#include <cassert>
#include <limits>
#include <vector>

namespace meshplan::kernels {
namespace {

blasint to_blas(std::int64_t n) {
  assert(n >= 0 && n <= std::numeric_limits<blasint>::max() && "dimension does not fit the BLAS integer");
  return static_cast<blasint>(n);
}

// C[M,N] = alpha * op(A) . op(B) + beta * C, row-major; ld* are row strides.
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, std::int64_t M, std::int64_t N, std::int64_t K, const float* A,
          std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, to_blas(M), to_blas(N), to_blas(K), 1.0f, A, to_blas(lda), B, to_blas(ldb),
              beta, C, to_blas(ldc));
}
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, std::int64_t M, std::int64_t N, std::int64_t K, const double* A,
          std::int64_t lda, const double* B, std::int64_t ldb, double beta, double* C, std::int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, to_blas(M), to_blas(N), to_blas(K), 1.0, A, to_blas(lda), B, to_blas(ldb), beta,
              C, to_blas(ldc));
}

// y[N] = A[M, N]^T . x[M] + y, row-major A with row stride N.
void gemv_transposed_accumulate(std::int64_t M, std::int64_t N, const float* A, const float* x, float* y) {
  cblas_sgemv(CblasRowMajor, CblasTrans, to_blas(M), to_blas(N), 1.0f, A, to_blas(N), x, 1, 1.0f, y, 1);
}
void gemv_transposed_accumulate(std::int64_t M, std::int64_t N, const double* A, const double* x, double* y) {
  cblas_dgemv(CblasRowMajor, CblasTrans, to_blas(M), to_blas(N), 1.0, A, to_blas(N), x, 1, 1.0, y, 1);
}

template <typename T>
const T* ones(std::int64_t n) {
  thread_local std::vector<T> memory;
  if (std::ssize(memory) < n) memory.assign(static_cast<std::size_t>(n), T(1));
  return memory.data();
}

}  // namespace

template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, std::int64_t N, std::int64_t C,
                    std::int64_t OC) {
  if (N == 0 || OC == 0) return;
  T beta = T(0);
  if (bias != nullptr) {
    for (std::int64_t n = 0; n < N; ++n) {
      T* out_row = out + n * OC;
      for (std::int64_t o = 0; o < OC; ++o) out_row[o] = bias[o];
    }
    beta = T(1);
  }
  if (C == 0) {
    if (bias == nullptr)
      for (std::int64_t i = 0; i < N * OC; ++i) out[i] = T(0);
    return;
  }
  gemm(CblasNoTrans, CblasTrans, N, OC, C, inp, C, weight, C, beta, out, OC);
}

template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, std::int64_t N,
                     std::int64_t C, std::int64_t OC) {
  if (N == 0 || OC == 0) return;
  if (C > 0) {
    // dinp[N, C] += dout[N, OC] . weight[OC, C]
    if (dinp != nullptr) gemm(CblasNoTrans, CblasNoTrans, N, C, OC, dout, OC, weight, C, T(1), dinp, C);
    // dweight[OC, C] += dout[N, OC]^T . inp[N, C]
    if (dweight != nullptr) gemm(CblasTrans, CblasNoTrans, OC, C, N, dout, OC, inp, C, T(1), dweight, C);
  }
  if (dbias != nullptr) bias_backward(dbias, dout, N, OC);
}

template <typename T>
void bias_backward(T* dbias, const T* dout, std::int64_t N, std::int64_t OC) {
  if (N > 0 && OC > 0) gemv_transposed_accumulate(N, OC, dout, ones<T>(N), dbias);
}

template void matmul_forward<float>(float*, const float*, const float*, const float*, std::int64_t, std::int64_t,
                                    std::int64_t);
template void matmul_forward<double>(double*, const double*, const double*, const double*, std::int64_t,
                                     std::int64_t, std::int64_t);
template void bias_backward<float>(float*, const float*, std::int64_t, std::int64_t);
template void bias_backward<double>(double*, const double*, std::int64_t, std::int64_t);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*, const float*, std::int64_t,
                                     std::int64_t, std::int64_t);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                      std::int64_t, std::int64_t, std::int64_t);

}  // namespace meshplan::kernels
