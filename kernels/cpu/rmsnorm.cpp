// With s = rstd[n], xhat = x * s and g = dout * weight, ds/dx_c = -s^3 x_c / C,
// so the input gradient is
//   dinp = s * (g - xhat * mean_c(g * xhat)),
// layer norm's formula (layernorm.cpp) without the mean_c(g) term.
// The forward's rows run in OpenMP threads; the backward accumulates dweight
// over rows, so it stays one loop, as layernorm_backward does.
#include "kernels/cpu/rmsnorm.hpp"

#include <cmath>

namespace meshplan::kernels {

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, std::int64_t N, std::int64_t C, double eps) {
  const T inv_c = T(1) / static_cast<T>(C);
  const T eps_t = static_cast<T>(eps);
#pragma omp parallel for schedule(static) if (N * C >= (1 << 18))
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    T sum_sq = T(0);
    for (std::int64_t c = 0; c < C; ++c) sum_sq += x[c] * x[c];
    const T s = T(1) / std::sqrt(sum_sq * inv_c + eps_t);
    T* y = out + n * C;
    for (std::int64_t c = 0; c < C; ++c) y[c] = x[c] * s * weight[c];
    rstd[n] = s;
  }
}

template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd,
                      std::int64_t N, std::int64_t C) {
  const T inv_c = T(1) / static_cast<T>(C);
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    const T* dy = dout + n * C;
    T* dx = dinp + n * C;
    const T s = rstd[n];
    T mean_g_xhat = T(0);
    for (std::int64_t c = 0; c < C; ++c) mean_g_xhat += dy[c] * weight[c] * x[c] * s;
    mean_g_xhat *= inv_c;
    for (std::int64_t c = 0; c < C; ++c) {
      const T xhat = x[c] * s;
      dweight[c] += dy[c] * xhat;
      dx[c] += s * (dy[c] * weight[c] - xhat * mean_g_xhat);
    }
  }
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, std::int64_t, std::int64_t, double);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, std::int64_t, std::int64_t,
                                      double);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*, const float*,
                                      std::int64_t, std::int64_t);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*, const double*, const double*,
                                       std::int64_t, std::int64_t);

}  // namespace meshplan::kernels
