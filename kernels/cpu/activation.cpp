// tanh is tanh_of (kernels/cpu/fast_math.hpp): vectorisable for float, std::tanh for double.
// GELU's derivative is written out analytically (the product rule on
// 0.5 x (1 + tanh(u)), u = k (x + a x^3)), as llm.c's gelu_backward; it is
// checked against central finite differences in tests/test_kernels.cpp.
#include "kernels/cpu/activation.hpp"

#include <cmath>

#include "kernels/cpu/fast_math.hpp"

namespace meshplan::kernels {

// Elementwise and tanh-bound: split over OpenMP threads only when each thread
// gets tens of microseconds of work; a team's fork and join costs several
// microseconds idle, and far more when the cores are oversubscribed.
constexpr std::int64_t kParallelElements = 1 << 17;

template <typename T>
void gelu_forward(T* out, const T* inp, std::int64_t N) {
#pragma omp parallel for simd schedule(static) if (N >= kParallelElements)
  for (std::int64_t i = 0; i < N; ++i) {
    const T x = inp[i];
    const T u = kGeluScale<T> * (x + kGeluCubic<T> * x * x * x);
    out[i] = T(0.5) * x * (T(1) + tanh_of(u));
  }
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::int64_t N) {
#pragma omp parallel for simd schedule(static) if (N >= kParallelElements)
  for (std::int64_t i = 0; i < N; ++i) {
    const T x = inp[i];
    const T u = kGeluScale<T> * (x + kGeluCubic<T> * x * x * x);
    const T tanh_u = tanh_of(u);
    const T sech2_u = T(1) - tanh_u * tanh_u;
    const T du_dx = kGeluScale<T> * (T(1) + T(3) * kGeluCubic<T> * x * x);
    const T local_grad = T(0.5) * (T(1) + tanh_u) + T(0.5) * x * sech2_u * du_dx;
    dinp[i] += local_grad * dout[i];
  }
}

template <typename T>
void relu_forward(T* out, const T* inp, std::int64_t N) {
  for (std::int64_t i = 0; i < N; ++i) out[i] = inp[i] > T(0) ? inp[i] : T(0);
}

template <typename T>
void relu_backward(T* dinp, const T* inp, const T* dout, std::int64_t N) {
  for (std::int64_t i = 0; i < N; ++i)
    if (inp[i] > T(0)) dinp[i] += dout[i];
}

template void gelu_forward<float>(float*, const float*, std::int64_t);
template void gelu_forward<double>(double*, const double*, std::int64_t);
template void gelu_backward<float>(float*, const float*, const float*, std::int64_t);
template void gelu_backward<double>(double*, const double*, const double*, std::int64_t);
template void relu_forward<float>(float*, const float*, std::int64_t);
template void relu_forward<double>(double*, const double*, std::int64_t);
template void relu_backward<float>(float*, const float*, const float*, std::int64_t);
template void relu_backward<double>(double*, const double*, const double*, std::int64_t);

}  // namespace meshplan::kernels
