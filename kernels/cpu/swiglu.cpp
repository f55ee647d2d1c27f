// exp is exp_of (kernels/cpu/fast_math.hpp): vectorisable for float, std::exp
// for double. sigmoid(g) = 1 / (1 + exp(-g)) needs no clamping: for g << 0,
// exp(-g) is huge (std::exp: infinity, giving 0; exp_approx: e^88, giving
// ~6e-39) and for g >> 0 it is 0, giving 1. The derivative is written out
// analytically, as gelu_backward's is, and checked against central finite
// differences in tests/test_kernels.cpp. Rows run in OpenMP threads once each
// thread gets tens of microseconds of work (activation.cpp's threshold).
#include "kernels/cpu/swiglu.hpp"

#include <vector>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/fast_math.hpp"

namespace meshplan::kernels {
namespace {

constexpr std::int64_t kParallelElements = 1 << 17;

}  // namespace

template <typename T>
void swiglu_forward(T* out, const T* inp, std::int64_t N, std::int64_t F) {
#pragma omp parallel for schedule(static) if (N * F >= kParallelElements)
  for (std::int64_t n = 0; n < N; ++n) {
    const T* gate = inp + n * 2 * F;
    const T* up = gate + F;
    T* y = out + n * F;
#pragma omp simd
    for (std::int64_t f = 0; f < F; ++f) {
      const T g = gate[f];
      y[f] = g / (T(1) + exp_of(-g)) * up[f];
    }
  }
}

template <typename T>
void swiglu_backward(T* dinp, const T* dout, const T* inp, std::int64_t N, std::int64_t F) {
#pragma omp parallel for schedule(static) if (N * F >= kParallelElements)
  for (std::int64_t n = 0; n < N; ++n) {
    const T* gate = inp + n * 2 * F;
    const T* up = gate + F;
    const T* dy = dout + n * F;
    T* dgate = dinp + n * 2 * F;
    T* dup = dgate + F;
#pragma omp simd
    for (std::int64_t f = 0; f < F; ++f) {
      const T g = gate[f];
      const T sigmoid = T(1) / (T(1) + exp_of(-g));
      const T silu = g * sigmoid;
      const T dsilu = sigmoid * (T(1) + g * (T(1) - sigmoid));
      dgate[f] += dy[f] * up[f] * dsilu;
      dup[f] += dy[f] * silu;
    }
  }
}

// GeGLU row by row on activation.hpp's gelu_forward / gelu_backward, so the
// gelu is the one GPT-2's MLP uses (one formula, one place).
template <typename T>
void geglu_forward(T* out, const T* inp, std::int64_t N, std::int64_t F) {
#pragma omp parallel for schedule(static) if (N * F >= kParallelElements)
  for (std::int64_t n = 0; n < N; ++n) {
    const T* gate = inp + n * 2 * F;
    const T* up = gate + F;
    T* y = out + n * F;
    gelu_forward(y, gate, F);
    for (std::int64_t f = 0; f < F; ++f) y[f] *= up[f];
  }
}

template <typename T>
void geglu_backward(T* dinp, const T* dout, const T* inp, std::int64_t N, std::int64_t F) {
#pragma omp parallel for schedule(static) if (N * F >= kParallelElements)
  for (std::int64_t n = 0; n < N; ++n) {
    thread_local std::vector<T> scratch;
    scratch.resize(static_cast<std::size_t>(2 * F));
    T* act = scratch.data();  // gelu(gate)
    T* dact = act + F;        // dout * up: the gradient reaching gelu's output
    const T* gate = inp + n * 2 * F;
    const T* up = gate + F;
    const T* dy = dout + n * F;
    T* dgate = dinp + n * 2 * F;
    T* dup = dgate + F;
    gelu_forward(act, gate, F);
    for (std::int64_t f = 0; f < F; ++f) {
      dact[f] = dy[f] * up[f];
      dup[f] += dy[f] * act[f];
    }
    gelu_backward(dgate, gate, dact, F);
  }
}

template void geglu_forward<float>(float*, const float*, std::int64_t, std::int64_t);
template void geglu_forward<double>(double*, const double*, std::int64_t, std::int64_t);
template void geglu_backward<float>(float*, const float*, const float*, std::int64_t, std::int64_t);
template void geglu_backward<double>(double*, const double*, const double*, std::int64_t, std::int64_t);
template void swiglu_forward<float>(float*, const float*, std::int64_t, std::int64_t);
template void swiglu_forward<double>(double*, const double*, std::int64_t, std::int64_t);
template void swiglu_backward<float>(float*, const float*, const float*, std::int64_t, std::int64_t);
template void swiglu_backward<double>(double*, const double*, const double*, std::int64_t, std::int64_t);

}  // namespace meshplan::kernels
