// Elementwise loops; the compiler vectorises them.
#include "kernels/cpu/residual.hpp"

namespace meshplan::kernels {

template <typename T>
void residual_forward(T* out, const T* inp1, const T* inp2, std::int64_t N) {
  for (std::int64_t i = 0; i < N; ++i) out[i] = inp1[i] + inp2[i];
}

template <typename T>
void residual_backward(T* dinp1, T* dinp2, const T* dout, std::int64_t N) {
  for (std::int64_t i = 0; i < N; ++i) {
    dinp1[i] += dout[i];
    dinp2[i] += dout[i];
  }
}

template void residual_forward<float>(float*, const float*, const float*, std::int64_t);
template void residual_forward<double>(double*, const double*, const double*, std::int64_t);
template void residual_backward<float>(float*, float*, const float*, std::int64_t);
template void residual_backward<double>(double*, double*, const double*, std::int64_t);

}  // namespace meshplan::kernels
