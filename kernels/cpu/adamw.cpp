// The bias corrections 1 - beta^step are computed once per call in double
// (std::pow), then each element is updated with the closed form in adamw.hpp.
#include "kernels/cpu/adamw.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace meshplan::kernels {

template <typename T>
void adamw_update(T* params, const T* grads, T* m, T* v, std::int64_t n, std::int64_t step,
                  const AdamWHyperparameters& hp) {
  assert(step >= 1 && "AdamW steps count from 1");
  const double step_d = static_cast<double>(step);
  const T beta1 = static_cast<T>(hp.beta1);
  const T beta2 = static_cast<T>(hp.beta2);
  // 1 - beta in double, then rounded: in float, 1 - T(0.999) is 1.3e-5 away
  // from 0.001, and every second moment with it.
  const T one_minus_beta1 = static_cast<T>(1.0 - hp.beta1);
  const T one_minus_beta2 = static_cast<T>(1.0 - hp.beta2);
  const T bias_correction1 = static_cast<T>(1.0 - std::pow(hp.beta1, step_d));
  const T bias_correction2 = static_cast<T>(1.0 - std::pow(hp.beta2, step_d));
  const T lr = static_cast<T>(hp.learning_rate);
  const T eps = static_cast<T>(hp.eps);
  const T weight_decay = static_cast<T>(hp.weight_decay);
  // The four buffers are distinct (adamw.hpp), so the elements are independent.
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const T g = grads[i];
    m[i] = beta1 * m[i] + one_minus_beta1 * g;
    v[i] = beta2 * v[i] + one_minus_beta2 * g * g;
    const T m_hat = m[i] / bias_correction1;
    const T v_hat = v[i] / bias_correction2;
    params[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + weight_decay * params[i]);
  }
}

// Squares summed in double into kLanes independent partial sums (element i
// of a buffer into lane i mod kLanes), then the lanes in order: the same
// result on every run and thread count, and loops the compiler vectorises,
// where one running sum is a serial chain of dependent additions.
template <typename T>
double global_l2_norm(std::span<const std::span<const T>> buffers) {
  constexpr std::size_t kLanes = 8;
  double lanes[kLanes] = {};
  for (const std::span<const T> buffer : buffers) {
    const std::size_t whole = buffer.size() - buffer.size() % kLanes;
    for (std::size_t i = 0; i < whole; i += kLanes)
      for (std::size_t k = 0; k < kLanes; ++k)
        lanes[k] += static_cast<double>(buffer[i + k]) * static_cast<double>(buffer[i + k]);
    for (std::size_t i = whole; i < buffer.size(); ++i)
      lanes[i - whole] += static_cast<double>(buffer[i]) * static_cast<double>(buffer[i]);
  }
  double sum_sq = 0.0;
  for (const double lane : lanes) sum_sq += lane;
  return std::sqrt(sum_sq);
}

double clip_scale(double norm, double max_norm) {
  if (max_norm <= 0.0 || norm <= max_norm) return 1.0;
  return std::min(1.0, max_norm / norm);
}

template void adamw_update<float>(float*, const float*, float*, float*, std::int64_t, std::int64_t,
                                  const AdamWHyperparameters&);
template void adamw_update<double>(double*, const double*, double*, double*, std::int64_t, std::int64_t,
                                   const AdamWHyperparameters&);
template double global_l2_norm<float>(std::span<const std::span<const float>>);
template double global_l2_norm<double>(std::span<const std::span<const double>>);

}  // namespace meshplan::kernels
