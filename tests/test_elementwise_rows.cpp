// The element-wise arithmetic of the CUDA kernels (kernels/cuda/
// elementwise_rows.hpp: GELU, SwiGLU, GeGLU, rotary positions) on the host,
// with no GPU: every element index run as the kernels' threads run it,
// against kernels/cpu/ in double on the same float inputs. What this holds
// on every machine is the index mapping and the formulas; what only a GPU
// checks (tests/cuda/test_cuda_kernels.cpp) is the device's own arithmetic
// (expf, pow, cos and sin in CUDA's math library).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/rope.hpp"
#include "kernels/cpu/swiglu.hpp"
#include "kernels/cuda/elementwise_rows.hpp"
#include "float_error.hpp"

namespace meshplan::kernels::cuda {
namespace {

std::vector<float> random_floats(std::size_t n, std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

using testing_support::relative_error;

constexpr double kFloatRounding = 2e-6;  // a few float roundings per element, relative to the 2-norm

TEST(ElementwiseRows, GeluValueAndDerivativeMatchTheCpuInDouble) {
  std::mt19937_64 rng(1);
  const std::vector<float> x = random_floats(20001, rng, -9, 9);
  const auto n = static_cast<std::int64_t>(x.size());
  std::vector<double> value(x.size()), derivative(x.size(), 0.0);
  const std::vector<double> xd = widen(x), ones(x.size(), 1.0);
  kernels::gelu_forward(value.data(), xd.data(), n);
  kernels::gelu_backward(derivative.data(), xd.data(), ones.data(), n);
  std::vector<float> v(x.size()), d(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    v[i] = gelu_value(x[i]);
    d[i] = gelu_derivative(x[i]);
  }
  EXPECT_LE(relative_error(v, value), kFloatRounding);
  EXPECT_LE(relative_error(d, derivative), kFloatRounding);
  // Below x = -2 the tanh form cancels in float; the sigmoid form keeps each element near double.
  for (std::size_t i = 0; i < x.size(); ++i)
    if (x[i] < -2 && x[i] > -6) {
      EXPECT_NEAR(v[i], value[i], 1e-5 * std::abs(value[i])) << "x " << x[i];
    }
}

TEST(ElementwiseRows, GatedActivationsMatchTheCpuInDouble) {
  std::mt19937_64 rng(2);
  for (const bool swiglu : {true, false}) {
    for (const auto& [N, F] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {3, 7}, {33, 176}}) {
      const auto NF = static_cast<std::size_t>(N * F);
      const std::vector<float> inp = random_floats(2 * NF, rng, -6, 6), dout = random_floats(NF, rng, -1, 1);
      const std::vector<float> start = random_floats(2 * NF, rng, -1, 1);
      const std::vector<double> inp_d = widen(inp), dout_d = widen(dout);
      std::vector<double> out_d(NF), dinp_d = widen(start);
      if (swiglu) {
        kernels::swiglu_forward(out_d.data(), inp_d.data(), N, F);
        kernels::swiglu_backward(dinp_d.data(), dout_d.data(), inp_d.data(), N, F);
      } else {
        kernels::geglu_forward(out_d.data(), inp_d.data(), N, F);
        kernels::geglu_backward(dinp_d.data(), dout_d.data(), inp_d.data(), N, F);
      }
      std::vector<float> out(NF, NAN), dinp = start;
      for (std::int64_t i = 0; i < N * F; ++i) {
        if (swiglu) {
          swiglu_forward_at(out.data(), inp.data(), i, F);
          swiglu_backward_at(dinp.data(), dout.data(), inp.data(), i, F);
        } else {
          geglu_forward_at(out.data(), inp.data(), i, F);
          geglu_backward_at(dinp.data(), dout.data(), inp.data(), i, F);
        }
      }
      const char* what = swiglu ? "swiglu" : "geglu";
      EXPECT_LE(relative_error(out, out_d), kFloatRounding) << what << " N " << N << " F " << F;
      EXPECT_LE(relative_error(dinp, dinp_d), kFloatRounding) << what << " backward, N " << N << " F " << F;
    }
  }
}

TEST(ElementwiseRows, RotaryPositionsMatchTheCpuInDoubleAndUndo) {
  std::mt19937_64 rng(3);
  struct Shape {
    std::int64_t rows, seq_len, heads, head_dim, stride;
    double theta;
  };
  for (const Shape s : {Shape{1, 1, 1, 2, 2, 10000}, Shape{24, 8, 3, 16, 80, 10000}, Shape{300, 128, 4, 64, 640, 500000}}) {
    const auto n = static_cast<std::size_t>(s.rows * s.stride);
    const std::vector<float> x = random_floats(n, rng, -1, 1);
    std::vector<double> rotated_d = widen(x);
    kernels::rope_apply(rotated_d.data(), s.rows, s.seq_len, s.heads, s.head_dim, s.stride, s.theta, false);
    std::vector<float> rotated = x;
    const std::int64_t pairs = s.rows * s.heads * (s.head_dim / 2);
    for (std::int64_t idx = 0; idx < pairs; ++idx)
      rope_at(rotated.data(), idx, s.seq_len, s.heads, s.head_dim, s.stride, s.theta, 1.0);
    EXPECT_LE(relative_error(rotated, rotated_d), kFloatRounding) << "rows " << s.rows << " heads " << s.heads;
    for (std::int64_t idx = 0; idx < pairs; ++idx)
      rope_at(rotated.data(), idx, s.seq_len, s.heads, s.head_dim, s.stride, s.theta, -1.0);
    EXPECT_LE(relative_error(rotated, widen(x)), kFloatRounding) << "inverse, rows " << s.rows;
  }
}

}  // namespace
}  // namespace meshplan::kernels::cuda
