// Row by row: subtract the row maximum, exponentiate, normalise. The loss is
// log(sum) - (logit[target] - max), never -log(prob), so it is finite even for
// logits far apart. Rows run in OpenMP threads; the mean over rows is then
// summed in row order in double, so the loss does not depend on the thread count.
#include "kernels/cpu/cross_entropy.hpp"

#include <cassert>
#include <cmath>
#include <vector>

#include "kernels/cpu/fast_math.hpp"

namespace meshplan::kernels {

template <typename T>
T cross_entropy_forward(T* probs, T* losses, const T* logits, const std::int32_t* targets, std::int64_t N,
                        std::int64_t V) {
  std::vector<T> row_losses(static_cast<std::size_t>(N));
#pragma omp parallel for schedule(static) if (N * V >= (1 << 17))
  for (std::int64_t n = 0; n < N; ++n) {
    const T* z = logits + n * V;
    T* p = probs + n * V;
    const std::int64_t target = targets[n];
    assert(target >= 0 && target < V && "target outside the vocabulary");
    T row_max = z[0];
    for (std::int64_t v = 1; v < V; ++v)
      if (z[v] > row_max) row_max = z[v];
#pragma omp simd
    for (std::int64_t v = 0; v < V; ++v) p[v] = exp_of(z[v] - row_max);
    T sum = T(0);
    for (std::int64_t v = 0; v < V; ++v) sum += p[v];
    const T inv_sum = T(1) / sum;
    for (std::int64_t v = 0; v < V; ++v) p[v] *= inv_sum;
    const T loss = std::log(sum) - (z[target] - row_max);
    row_losses[static_cast<std::size_t>(n)] = loss;
  }
  double loss_sum = 0.0;
  for (std::int64_t n = 0; n < N; ++n) {
    const T loss = row_losses[static_cast<std::size_t>(n)];
    if (losses != nullptr) losses[n] = loss;
    loss_sum += static_cast<double>(loss);
  }
  return N > 0 ? static_cast<T>(loss_sum / static_cast<double>(N)) : T(0);
}

template <typename T>
void cross_entropy_backward(T* dlogits, const T* probs, const std::int32_t* targets, T dloss, std::int64_t N,
                            std::int64_t V) {
  if (N == 0) return;
  const T scale = dloss / static_cast<T>(N);
#pragma omp parallel for schedule(static) if (N * V >= (1 << 17))
  for (std::int64_t n = 0; n < N; ++n) {
    const T* p = probs + n * V;
    T* dz = dlogits + n * V;
    for (std::int64_t v = 0; v < V; ++v) dz[v] += scale * p[v];
    dz[targets[n]] -= scale;
  }
}

template float cross_entropy_forward<float>(float*, float*, const float*, const std::int32_t*, std::int64_t,
                                            std::int64_t);
template double cross_entropy_forward<double>(double*, double*, const double*, const std::int32_t*, std::int64_t,
                                              std::int64_t);
template void cross_entropy_backward<float>(float*, const float*, const std::int32_t*, float, std::int64_t,
                                            std::int64_t);
template void cross_entropy_backward<double>(double*, const double*, const std::int32_t*, double, std::int64_t,
                                             std::int64_t);

}  // namespace meshplan::kernels
