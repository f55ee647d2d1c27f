// Two-pass statistics (mean, then variance about the mean) rather than
// E[x^2] - E[x]^2, which cancels catastrophically in float when |mean| >> std.
// With xhat = (x - mean) * rstd and g = dout * weight, the input gradient is
//   dinp = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)).
// The forward's rows run in OpenMP threads; the backward accumulates dweight
// and dbias over rows, so it stays one loop (it is a small share of a step).
#include "kernels/cpu/layernorm.hpp"

#include <cmath>

namespace meshplan::kernels {

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, std::int64_t N,
                       std::int64_t C) {
  const T inv_c = T(1) / static_cast<T>(C);
#pragma omp parallel for schedule(static) if (N * C >= (1 << 18))
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    T sum = T(0);
    for (std::int64_t c = 0; c < C; ++c) sum += x[c];
    const T m = sum * inv_c;
    T sum_sq = T(0);
    for (std::int64_t c = 0; c < C; ++c) sum_sq += (x[c] - m) * (x[c] - m);
    const T s = T(1) / std::sqrt(sum_sq * inv_c + static_cast<T>(kLayerNormEps));
    T* y = out + n * C;
    for (std::int64_t c = 0; c < C; ++c) y[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, std::int64_t N, std::int64_t C) {
  const T inv_c = T(1) / static_cast<T>(C);
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    const T* dy = dout + n * C;
    T* dx = dinp + n * C;
    const T m = mean[n];
    const T s = rstd[n];
    T mean_g = T(0);
    T mean_g_xhat = T(0);
    for (std::int64_t c = 0; c < C; ++c) {
      const T xhat = (x[c] - m) * s;
      const T g = dy[c] * weight[c];
      mean_g += g;
      mean_g_xhat += g * xhat;
    }
    mean_g *= inv_c;
    mean_g_xhat *= inv_c;
    for (std::int64_t c = 0; c < C; ++c) {
      const T xhat = (x[c] - m) * s;
      dbias[c] += dy[c];
      dweight[c] += dy[c] * xhat;
      dx[c] += s * (dy[c] * weight[c] - mean_g - xhat * mean_g_xhat);
    }
  }
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*, const float*,
                                       std::int64_t, std::int64_t);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*, const double*,
                                        std::int64_t, std::int64_t);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                        const float*, const float*, std::int64_t, std::int64_t);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         const double*, const double*, std::int64_t, std::int64_t);

}  // namespace meshplan::kernels
