// CPU kernels (kernels/cpu/): the ladder's first rung, "ops match a reference".
//  1. Every fast op against its reference, in float and double, with a stated
//     tolerance: BLAS matmul and row-wise attention against the naive loops
//     in reference.hpp; the other ops' float path against their own double
//     instantiation.
//  2. Every backward against central finite differences in double. The loss
//     is L = sum(out * w) for a fixed random w, so dout = w. Gradient buffers
//     start at kPrefill rather than 0, which checks that backward accumulates.
//  3. AdamW against its closed form; the global gradient norm.
//  4. Cross-entropy edge cases: uniform logits give log V; huge logits stay finite.
//  5. bf16 matmuls: rounding, and the GEMMs on rounded operands.
//  6. The Llama ops (RMSNorm, RoPE, SwiGLU, grouped-query attention): forwards
//     against their references, backwards by finite differences, GQA with as
//     many key/value heads as query heads against attention_*, RoPE's
//     identities and a known value, and that every backward accumulates.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/adamw.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/fast_math.hpp"
#include "kernels/cpu/cross_entropy.hpp"
#include "kernels/cpu/embedding.hpp"
#include "kernels/cpu/layernorm.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/reference.hpp"
#include "kernels/cpu/residual.hpp"
#include "kernels/cpu/rmsnorm.hpp"
#include "kernels/cpu/rope.hpp"
#include "kernels/cpu/swiglu.hpp"

namespace meshplan::kernels {
namespace {

using Vec = std::vector<double>;

std::size_t sz(std::int64_t n) { return static_cast<std::size_t>(n); }

// |actual - expected| <= abs + rel * |expected|.
struct Tolerance {
  double abs;
  double rel;
};

// Fast op vs reference. Double: only summation order differs. Float: inputs
// in [-1, 1], reductions of length <= 128, so the error is a few hundred
// float ulps of the result's scale at most.
template <typename T>
constexpr Tolerance kReferenceTolerance = {1e-12, 1e-12};
template <>
constexpr Tolerance kReferenceTolerance<float> = {2e-5, 2e-5};

// Central differences in double: truncation error ~ eps^2 f''' ~ 1e-12,
// rounding ~ 1e-16 |L| / eps ~ 1e-9 for |L| ~ 10, so an absolute floor of
// 1e-8 plus a 1e-6 relative tolerance.
constexpr double kFdStep = 1e-6;
constexpr Tolerance kFdTolerance = {1e-8, 1e-6};
constexpr double kPrefill = 0.25;

Vec random_vector(std::size_t n, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

template <typename T>
std::vector<T> cast_to(const Vec& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<T>(v[i]);
  return out;
}

template <typename T>
void expect_close(const std::vector<T>& actual, const Vec& expected, Tolerance tol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int failures = 0;
  for (std::size_t i = 0; i < actual.size() && failures < 5; ++i) {
    const double a = static_cast<double>(actual[i]);
    const double allowed = tol.abs + tol.rel * std::abs(expected[i]);
    if (!(std::abs(a - expected[i]) <= allowed)) {
      ADD_FAILURE() << what << "[" << i << "]: " << a << " vs expected " << expected[i] << " (allowed "
                    << allowed << ")";
      ++failures;
    }
  }
}

double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

Vec prefilled(std::size_t n) { return Vec(n, kPrefill); }

// Compares the accumulated analytic gradient (grad_with_prefill - kPrefill)
// with central differences of loss() with respect to every element of x.
void expect_gradient_matches_fd(Vec& x, const Vec& grad_with_prefill, const std::function<double()>& loss,
                                const std::string& what) {
  ASSERT_EQ(x.size(), grad_with_prefill.size()) << what;
  Vec numeric(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + kFdStep;
    const double up = loss();
    x[i] = saved - kFdStep;
    const double down = loss();
    x[i] = saved;
    numeric[i] = (up - down) / (2.0 * kFdStep);
  }
  Vec analytic(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) analytic[i] = grad_with_prefill[i] - kPrefill;
  expect_close(analytic, numeric, kFdTolerance, what + " gradient");
}

// ---------------------------------------------------------------- (1) fast vs reference

template <typename T>
class KernelsVsReference : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(KernelsVsReference, Scalars);

struct MatmulShape {
  std::int64_t N, C, OC;
};
constexpr MatmulShape kMatmulShapes[] = {{1, 1, 1}, {7, 33, 19}, {64, 128, 96}};

TYPED_TEST(KernelsVsReference, MatmulForward) {
  using T = TypeParam;
  std::mt19937_64 rng(1);
  for (const MatmulShape s : kMatmulShapes) {
    for (const bool with_bias : {true, false}) {
      const Vec inp = random_vector(static_cast<std::size_t>(s.N * s.C), rng);
      const Vec weight = random_vector(static_cast<std::size_t>(s.OC * s.C), rng);
      const Vec bias = random_vector(static_cast<std::size_t>(s.OC), rng);
      Vec expected(static_cast<std::size_t>(s.N * s.OC));
      reference_matmul_forward(expected.data(), inp.data(), weight.data(), with_bias ? bias.data() : nullptr, s.N,
                               s.C, s.OC);
      const auto inp_t = cast_to<T>(inp), weight_t = cast_to<T>(weight), bias_t = cast_to<T>(bias);
      std::vector<T> out(expected.size(), T(7));  // garbage: forward must overwrite
      matmul_forward(out.data(), inp_t.data(), weight_t.data(), with_bias ? bias_t.data() : nullptr, s.N, s.C, s.OC);
      expect_close(out, expected, kReferenceTolerance<T>,
                   "matmul out N=" + std::to_string(s.N) + " bias=" + std::to_string(with_bias));
    }
  }
}

TYPED_TEST(KernelsVsReference, MatmulBackward) {
  using T = TypeParam;
  std::mt19937_64 rng(2);
  for (const MatmulShape s : kMatmulShapes) {
    const Vec inp = random_vector(static_cast<std::size_t>(s.N * s.C), rng);
    const Vec weight = random_vector(static_cast<std::size_t>(s.OC * s.C), rng);
    const Vec dout = random_vector(static_cast<std::size_t>(s.N * s.OC), rng);
    Vec dinp = prefilled(inp.size()), dweight = prefilled(weight.size()), dbias = prefilled(sz(s.OC));
    reference_matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(), s.N,
                              s.C, s.OC);
    const auto inp_t = cast_to<T>(inp), weight_t = cast_to<T>(weight), dout_t = cast_to<T>(dout);
    auto dinp_t = cast_to<T>(prefilled(inp.size()));
    auto dweight_t = cast_to<T>(prefilled(weight.size()));
    auto dbias_t = cast_to<T>(prefilled(sz(s.OC)));
    matmul_backward(dinp_t.data(), dweight_t.data(), dbias_t.data(), dout_t.data(), inp_t.data(), weight_t.data(),
                    s.N, s.C, s.OC);
    const std::string shape = " N=" + std::to_string(s.N);
    expect_close(dinp_t, dinp, kReferenceTolerance<T>, "matmul dinp" + shape);
    expect_close(dweight_t, dweight, kReferenceTolerance<T>, "matmul dweight" + shape);
    expect_close(dbias_t, dbias, kReferenceTolerance<T>, "matmul dbias" + shape);
  }
}

// Shapes with one causal row block and with several (the kernel blocks query
// rows by 128; 261 = two full blocks and a partial one).
struct AttentionShape {
  std::int64_t B, T_len, C, NH;
};
constexpr AttentionShape kAttentionShapes[] = {{2, 9, 12, 3}, {1, 261, 8, 2}};

TYPED_TEST(KernelsVsReference, AttentionForward) {
  using T = TypeParam;
  std::mt19937_64 rng(3);
  for (const auto [B, T_len, C, NH] : kAttentionShapes) {
    const Vec qkv = random_vector(static_cast<std::size_t>(B * T_len * 3 * C), rng, -2.0, 2.0);
    Vec out(static_cast<std::size_t>(B * T_len * C)), att(static_cast<std::size_t>(B * NH * T_len * T_len));
    reference_attention_forward(out.data(), att.data(), qkv.data(), B, T_len, C, NH);
    const auto qkv_t = cast_to<T>(qkv);
    std::vector<T> out_t(out.size(), T(7)), att_t(att.size(), T(7));
    attention_forward(out_t.data(), att_t.data(), qkv_t.data(), B, T_len, C, NH);
    const std::string shape = " T=" + std::to_string(T_len);
    expect_close(out_t, out, kReferenceTolerance<T>, "attention out" + shape);
    expect_close(att_t, att, kReferenceTolerance<T>, "attention att" + shape);
  }
}

TYPED_TEST(KernelsVsReference, AttentionBackward) {
  using T = TypeParam;
  std::mt19937_64 rng(13);
  for (const auto [B, T_len, C, NH] : kAttentionShapes) {
    const Vec qkv = random_vector(static_cast<std::size_t>(B * T_len * 3 * C), rng, -2.0, 2.0);
    const Vec dout = random_vector(static_cast<std::size_t>(B * T_len * C), rng);
    Vec out(static_cast<std::size_t>(B * T_len * C)), att(static_cast<std::size_t>(B * NH * T_len * T_len));
    reference_attention_forward(out.data(), att.data(), qkv.data(), B, T_len, C, NH);
    Vec dqkv = prefilled(qkv.size());
    reference_attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T_len, C, NH);
    const auto qkv_t = cast_to<T>(qkv), dout_t = cast_to<T>(dout), att_t = cast_to<T>(att);
    auto dqkv_t = cast_to<T>(prefilled(qkv.size()));
    attention_backward(dqkv_t.data(), dout_t.data(), qkv_t.data(), att_t.data(), B, T_len, C, NH);
    expect_close(dqkv_t, dqkv, kReferenceTolerance<T>, "attention dqkv T=" + std::to_string(T_len));
  }
}

// Ops without a separate fast path: the float instantiation against the
// double one, so the float code is held to the same formulas.
TYPED_TEST(KernelsVsReference, PointwiseAndRowOpsFloatMatchDouble) {
  using T = TypeParam;
  std::mt19937_64 rng(4);
  const std::int64_t N = 6, C = 40;
  const std::size_t NC = static_cast<std::size_t>(N * C);
  const Vec x = random_vector(NC, rng, -3.0, 3.0);
  const Vec weight = random_vector(sz(C), rng), bias = random_vector(sz(C), rng);
  const auto x_t = cast_to<T>(x), weight_t = cast_to<T>(weight), bias_t = cast_to<T>(bias);

  Vec ln(NC), mean(sz(N)), rstd(sz(N));
  layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), weight.data(), bias.data(), N, C);
  std::vector<T> ln_t(NC), mean_t(sz(N)), rstd_t(sz(N));
  layernorm_forward(ln_t.data(), mean_t.data(), rstd_t.data(), x_t.data(), weight_t.data(), bias_t.data(), N, C);
  expect_close(ln_t, ln, kReferenceTolerance<T>, "layernorm out");
  expect_close(rstd_t, rstd, kReferenceTolerance<T>, "layernorm rstd");

  Vec gelu(NC), relu(NC);
  gelu_forward(gelu.data(), x.data(), std::int64_t(NC));
  relu_forward(relu.data(), x.data(), std::int64_t(NC));
  std::vector<T> gelu_t(NC), relu_t(NC);
  gelu_forward(gelu_t.data(), x_t.data(), std::int64_t(NC));
  relu_forward(relu_t.data(), x_t.data(), std::int64_t(NC));
  expect_close(gelu_t, gelu, kReferenceTolerance<T>, "gelu");
  expect_close(relu_t, relu, kReferenceTolerance<T>, "relu");

  const std::vector<std::int32_t> targets = {0, 39, 5, 5, 17, 22};
  Vec probs(NC);
  const double loss = cross_entropy_forward(probs.data(), static_cast<double*>(nullptr), x.data(), targets.data(), N, C);
  std::vector<T> probs_t(NC);
  const T loss_t = cross_entropy_forward(probs_t.data(), static_cast<T*>(nullptr), x_t.data(), targets.data(), N, C);
  expect_close(probs_t, probs, kReferenceTolerance<T>, "cross-entropy probs");
  expect_close(std::vector<T>{loss_t}, Vec{loss}, kReferenceTolerance<T>, "cross-entropy loss");
}

// The vectorisable float exp and tanh against the double-precision std:: ones
// on a dense grid: exp within 3 float ulps (relative 3.6e-7) over the range
// softmax uses, 0 below -87; tanh within 2.5e-7 absolute everywhere.
TEST(FastMath, ExpAndTanhAgreeWithStd) {
  double worst_exp = 0.0, worst_tanh = 0.0;
  for (int i = -870000; i <= 880000; ++i) {
    const float x = static_cast<float>(i) * 1e-4f;
    const double exact = std::exp(static_cast<double>(x));
    worst_exp = std::max(worst_exp, std::abs(static_cast<double>(exp_approx(x)) - exact) / exact);
  }
  EXPECT_LT(worst_exp, 3.6e-7);
  EXPECT_EQ(exp_approx(-87.5f), 0.0f);
  EXPECT_EQ(exp_approx(-1000.0f), 0.0f);
  EXPECT_EQ(exp_approx(0.0f), 1.0f);
  for (int i = -200000; i <= 200000; ++i) {
    const float u = static_cast<float>(i) * 1e-4f;
    worst_tanh = std::max(worst_tanh, std::abs(static_cast<double>(tanh_approx(u)) - std::tanh(static_cast<double>(u))));
  }
  EXPECT_LT(worst_tanh, 2.5e-7);
  EXPECT_EQ(tanh_approx(30.0f), 1.0f);
  EXPECT_EQ(tanh_approx(-30.0f), -1.0f);
  std::printf("fast_math: exp worst relative error %.3g, tanh worst absolute error %.3g\n", worst_exp, worst_tanh);
}

// GELU is GPT-2's tanh approximation, not the erf form (values from the formula
// evaluated in Python float64).
TEST(Activation, GeluIsTheTanhApproximation) {
  const Vec x = {0.0, 1.0, -1.0, 2.5};
  Vec out(x.size());
  gelu_forward(out.data(), x.data(), std::int64_t(x.size()));
  expect_close(out, Vec{0.0, 0.8411919906082768, -0.15880800939172324, 2.484915733910001}, {1e-15, 1e-14},
               "gelu");
}

TEST(Attention, IsCausalAndRowsAreDistributions) {
  std::mt19937_64 rng(5);
  const std::int64_t B = 1, T_len = 6, C = 4, NH = 2;
  Vec qkv = random_vector(static_cast<std::size_t>(B * T_len * 3 * C), rng, -2.0, 2.0);
  Vec out(static_cast<std::size_t>(B * T_len * C)), att(static_cast<std::size_t>(B * NH * T_len * T_len));
  attention_forward(out.data(), att.data(), qkv.data(), B, T_len, C, NH);
  for (std::int64_t row = 0; row < NH * T_len; ++row) {
    const std::int64_t t = row % T_len;
    double sum = 0.0;
    for (std::int64_t t2 = 0; t2 < T_len; ++t2) {
      const double p = att[static_cast<std::size_t>(row * T_len + t2)];
      if (t2 > t) {
        EXPECT_EQ(p, 0.0) << "row " << row << " attends to the future position " << t2;
      }
      sum += p;
    }
    EXPECT_NEAR(sum, 1.0, 1e-14) << "row " << row;
  }
  // Changing the last position's q, k, v must not change any earlier output.
  const Vec before = out;
  for (std::int64_t i = 0; i < 3 * C; ++i) qkv[static_cast<std::size_t>((T_len - 1) * 3 * C + i)] += 1.0;
  attention_forward(out.data(), att.data(), qkv.data(), B, T_len, C, NH);
  for (std::int64_t i = 0; i < (T_len - 1) * C; ++i)
    EXPECT_EQ(out[static_cast<std::size_t>(i)], before[static_cast<std::size_t>(i)]) << "output " << i;
}

// ---------------------------------------------------------------- (2) finite differences

TEST(FiniteDifferences, Matmul) {
  std::mt19937_64 rng(10);
  const std::int64_t N = 3, C = 4, OC = 5;
  Vec inp = random_vector(sz(N * C), rng), weight = random_vector(sz(OC * C), rng);
  Vec bias = random_vector(sz(OC), rng);
  const Vec w = random_vector(sz(N * OC), rng);
  Vec out(w.size());
  auto loss = [&] {
    matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
    return dot(out, w);
  };
  Vec dinp = prefilled(inp.size()), dweight = prefilled(weight.size()), dbias = prefilled(bias.size());
  loss();
  matmul_backward(dinp.data(), dweight.data(), dbias.data(), w.data(), inp.data(), weight.data(), N, C, OC);
  expect_gradient_matches_fd(inp, dinp, loss, "matmul inp");
  expect_gradient_matches_fd(weight, dweight, loss, "matmul weight");
  expect_gradient_matches_fd(bias, dbias, loss, "matmul bias");
}

TEST(FiniteDifferences, LayerNorm) {
  std::mt19937_64 rng(11);
  const std::int64_t N = 3, C = 8;
  Vec inp = random_vector(sz(N * C), rng, -2.0, 2.0);
  Vec weight = random_vector(sz(C), rng), bias = random_vector(sz(C), rng);
  const Vec w = random_vector(inp.size(), rng);
  Vec out(inp.size()), mean(sz(N)), rstd(sz(N));
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
    return dot(out, w);
  };
  loss();
  Vec dinp = prefilled(inp.size()), dweight = prefilled(weight.size()), dbias = prefilled(bias.size());
  layernorm_backward(dinp.data(), dweight.data(), dbias.data(), w.data(), inp.data(), weight.data(), mean.data(),
                     rstd.data(), N, C);
  expect_gradient_matches_fd(inp, dinp, loss, "layernorm inp");
  expect_gradient_matches_fd(weight, dweight, loss, "layernorm weight");
  expect_gradient_matches_fd(bias, dbias, loss, "layernorm bias");
}

TEST(FiniteDifferences, Gelu) {
  std::mt19937_64 rng(12);
  Vec inp = random_vector(50, rng, -4.0, 4.0);
  const Vec w = random_vector(inp.size(), rng);
  Vec out(inp.size());
  const auto n = std::int64_t(inp.size());
  auto loss = [&] {
    gelu_forward(out.data(), inp.data(), n);
    return dot(out, w);
  };
  Vec dinp = prefilled(inp.size());
  gelu_backward(dinp.data(), inp.data(), w.data(), n);
  expect_gradient_matches_fd(inp, dinp, loss, "gelu inp");
}

TEST(FiniteDifferences, Relu) {
  std::mt19937_64 rng(13);
  Vec inp = random_vector(50, rng);
  for (double& x : inp)
    if (std::abs(x) < 1e-3) x = 0.5;  // keep away from the kink at 0
  const Vec w = random_vector(inp.size(), rng);
  Vec out(inp.size());
  const auto n = std::int64_t(inp.size());
  auto loss = [&] {
    relu_forward(out.data(), inp.data(), n);
    return dot(out, w);
  };
  Vec dinp = prefilled(inp.size());
  relu_backward(dinp.data(), inp.data(), w.data(), n);
  expect_gradient_matches_fd(inp, dinp, loss, "relu inp");
}

TEST(FiniteDifferences, Attention) {
  std::mt19937_64 rng(14);
  const std::int64_t B = 2, T_len = 5, C = 6, NH = 2;
  Vec qkv = random_vector(static_cast<std::size_t>(B * T_len * 3 * C), rng, -1.5, 1.5);
  const Vec w = random_vector(static_cast<std::size_t>(B * T_len * C), rng);
  Vec out(w.size()), att(static_cast<std::size_t>(B * NH * T_len * T_len));
  auto loss = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), B, T_len, C, NH);
    return dot(out, w);
  };
  loss();
  Vec dqkv = prefilled(qkv.size());
  attention_backward(dqkv.data(), w.data(), qkv.data(), att.data(), B, T_len, C, NH);
  expect_gradient_matches_fd(qkv, dqkv, loss, "attention qkv");
}

TEST(FiniteDifferences, CrossEntropy) {
  std::mt19937_64 rng(15);
  const std::int64_t N = 4, V = 7;
  Vec logits = random_vector(sz(N * V), rng, -2.0, 2.0);
  const std::vector<std::int32_t> targets = {3, 0, 6, 3};
  const double dloss = 1.7;  // as if the loss were scaled for gradient accumulation
  Vec probs(logits.size());
  auto loss = [&] {
    return dloss * cross_entropy_forward(probs.data(), static_cast<double*>(nullptr), logits.data(), targets.data(),
                                         N, V);
  };
  loss();
  Vec dlogits = prefilled(logits.size());
  cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), dloss, N, V);
  expect_gradient_matches_fd(logits, dlogits, loss, "cross-entropy logits");
}

TEST(FiniteDifferences, Embedding) {
  std::mt19937_64 rng(16);
  const std::int64_t B = 2, T_len = 4, C = 3, V = 5, max_T = 6;
  const std::vector<std::int32_t> tokens = {1, 3, 1, 1, 4, 3, 0, 1};  // repeats; token 2 unused
  Vec wte = random_vector(sz(V * C), rng), wpe = random_vector(sz(max_T * C), rng);
  const Vec w = random_vector(sz(B * T_len * C), rng);
  Vec out(w.size());
  auto loss = [&] {
    embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T_len, C);
    return dot(out, w);
  };
  Vec dwte = prefilled(wte.size()), dwpe = prefilled(wpe.size());
  embedding_backward(dwte.data(), dwpe.data(), w.data(), tokens.data(), B, T_len, C);
  expect_gradient_matches_fd(wte, dwte, loss, "embedding wte");
  expect_gradient_matches_fd(wpe, dwpe, loss, "embedding wpe");
}

TEST(FiniteDifferences, Residual) {
  std::mt19937_64 rng(17);
  Vec a = random_vector(20, rng), b = random_vector(20, rng);
  const Vec w = random_vector(20, rng);
  Vec out(w.size());
  auto loss = [&] {
    residual_forward(out.data(), a.data(), b.data(), std::int64_t(out.size()));
    return dot(out, w);
  };
  Vec da = prefilled(a.size()), db = prefilled(b.size());
  residual_backward(da.data(), db.data(), w.data(), std::int64_t(w.size()));
  expect_gradient_matches_fd(a, da, loss, "residual inp1");
  expect_gradient_matches_fd(b, db, loss, "residual inp2");
}

// ---------------------------------------------------------------- (3) AdamW

constexpr AdamWHyperparameters kAdamW = {.learning_rate = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                         .weight_decay = 0.1};

TEST(AdamW, FirstStepIsSignLikeUpdatePlusDecoupledDecay) {
  // Step 1 from zero moments: m_hat = g, v_hat = g^2, so the update is
  // lr * (g / (|g| + eps) + wd * p).
  const Vec p0 = {0.5, -1.0, 2.0, 0.0}, g = {0.3, -2e-3, 0.0, -7.0};
  Vec p = p0, m(4, 0.0), v(4, 0.0);
  adamw_update(p.data(), g.data(), m.data(), v.data(), 4, 1, kAdamW);
  Vec expected(4);
  for (std::size_t i = 0; i < 4; ++i)
    expected[i] = p0[i] - kAdamW.learning_rate * (g[i] / (std::abs(g[i]) + kAdamW.eps) + kAdamW.weight_decay * p0[i]);
  expect_close(p, expected, {1e-15, 1e-13}, "params after step 1");
  expect_close(m, Vec{0.03, -2e-4, 0.0, -0.7}, {1e-17, 1e-14}, "m after step 1");
  expect_close(v, Vec{0.3 * 0.3 * 1e-3, 4e-9, 0.0, 0.049}, {1e-20, 1e-12}, "v after step 1");
}

TEST(AdamW, SecondStepAppliesBiasCorrection) {
  const double g1 = 0.4, g2 = -0.1, p0 = 1.5;
  double p = p0, m = 0.0, v = 0.0;
  adamw_update(&p, &g1, &m, &v, 1, 1, kAdamW);
  const double p1 = p;
  adamw_update(&p, &g2, &m, &v, 1, 2, kAdamW);
  const double m2 = 0.9 * (0.1 * g1) + 0.1 * g2;
  const double v2 = 0.999 * (0.001 * g1 * g1) + 0.001 * g2 * g2;
  const double m_hat = m2 / (1.0 - 0.9 * 0.9), v_hat = v2 / (1.0 - 0.999 * 0.999);
  const double expected = p1 - 1e-2 * (m_hat / (std::sqrt(v_hat) + 1e-8) + 0.1 * p1);
  EXPECT_NEAR(p, expected, 1e-14);
  EXPECT_NEAR(m, m2, 1e-16);
  EXPECT_NEAR(v, v2, 1e-18);
}

TEST(AdamW, WeightDecayIsDecoupledFromTheAdaptiveScale) {
  // Zero gradient: Adam with L2 would move p by lr * sign(p) (the decay passes
  // through g / sqrt(v)); AdamW multiplies p by exactly (1 - lr * wd).
  std::vector<float> p = {3.0f, -0.25f}, m(2, 0.0f), v(2, 0.0f);
  const std::vector<float> g(2, 0.0f);
  adamw_update(p.data(), g.data(), m.data(), v.data(), 2, 5, kAdamW);
  expect_close(p, Vec{3.0 * (1 - 1e-3), -0.25 * (1 - 1e-3)}, {0.0, 1e-6}, "params");
}

TEST(GradientNorm, IsTheL2NormOverAllBuffers) {
  const std::vector<double> a = {3.0, 4.0}, b = {12.0}, empty;
  const std::span<const double> buffers[] = {a, b, empty};
  EXPECT_DOUBLE_EQ(global_l2_norm<double>(buffers), 13.0);
  // Float gradients whose squares overflow float are accumulated in double.
  const std::vector<float> big = {1e20f, -1e20f};
  const std::span<const float> big_buffers[] = {big};
  EXPECT_NEAR(global_l2_norm<float>(big_buffers), std::sqrt(2.0) * 1e20, 1e14);
}

TEST(GradientNorm, ClipScale) {
  EXPECT_DOUBLE_EQ(clip_scale(2.0, 1.0), 0.5);
  EXPECT_DOUBLE_EQ(clip_scale(0.5, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(clip_scale(0.0, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(clip_scale(5.0, 0.0), 1.0);  // clipping off
}

// ---------------------------------------------------------------- (4) cross-entropy edges

TYPED_TEST(KernelsVsReference, CrossEntropyOfUniformLogitsIsLogV) {
  using T = TypeParam;
  const std::int64_t N = 3, V = 50;
  const std::vector<T> logits(sz(N * V), T(3.7));
  const std::vector<std::int32_t> targets = {0, 17, 49};
  std::vector<T> probs(logits.size()), losses(sz(N));
  const T loss = cross_entropy_forward(probs.data(), losses.data(), logits.data(), targets.data(), N, V);
  const Tolerance tol = kReferenceTolerance<T>;
  expect_close(std::vector<T>{loss}, Vec{std::log(50.0)}, tol, "mean loss");
  expect_close(losses, Vec(sz(N), std::log(50.0)), tol, "per-row losses");
  expect_close(probs, Vec(probs.size(), 1.0 / 50.0), tol, "probs");
}

TEST(CrossEntropy, LargeLogitsStayFiniteInFloat) {
  // exp(1e4) overflows float; only the max-subtracted form gets these right.
  const std::int64_t N = 2, V = 4;
  const std::vector<float> logits = {1e4f, 0.0f, -1e4f, 5e3f, 1e4f, 0.0f, -1e4f, 5e3f};
  const std::vector<std::int32_t> targets = {0, 1};
  std::vector<float> probs(logits.size()), losses(sz(N));
  const float loss = cross_entropy_forward(probs.data(), losses.data(), logits.data(), targets.data(), N, V);
  EXPECT_EQ(losses[0], 0.0f);
  EXPECT_EQ(losses[1], 1e4f);
  EXPECT_EQ(loss, 5e3f);
  for (const float p : probs) EXPECT_TRUE(std::isfinite(p));
  EXPECT_EQ(probs[0], 1.0f);
  std::vector<float> dlogits(logits.size(), 0.0f);
  cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), 1.0f, N, V);
  for (const float d : dlogits) EXPECT_TRUE(std::isfinite(d));
  EXPECT_EQ(dlogits[0], 0.0f);       // (1 - 1) / 2
  EXPECT_EQ(dlogits[5], -0.5f);      // (0 - 1) / 2
}

// ---------------------------------------------------------------- (5) bf16 matmuls
// Rounding: the bit-trick rounding (bf16.hpp) against the distance-measuring
// reference on chosen ties and edge values and on random bit patterns.
// GEMMs: the oneDNN bf16 path against the double reference computed on the
// same rounded operands. bf16 x bf16 products are exact in fp32, so only the
// fp32 accumulation differs: the float tolerance applies. And against the
// unrounded reference the error is far larger, which shows the rounding happens.

TEST(Bf16, RoundingIsNearestEvenWithEdgeCases) {
  const auto bits_of = [](float x) { return std::bit_cast<std::uint32_t>(x); };
  EXPECT_EQ(bf16_bits_to_float(round_to_bf16_bits(1.0f + 0x1p-8f)), 1.0f);              // tie, 1 is even
  EXPECT_EQ(bf16_bits_to_float(round_to_bf16_bits(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);  // tie, up to even
  EXPECT_EQ(bf16_bits_to_float(round_to_bf16_bits(-(1.0f + 0x1p-8f + 0x1p-20f))), -(1.0f + 0x1p-7f));
  EXPECT_TRUE(std::isinf(bf16_bits_to_float(round_to_bf16_bits(std::numeric_limits<float>::max()))));
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(round_to_bf16_bits(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(reference_round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  for (const float x : {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(), 0x1.00ff8p-130f,
                        1e-40f, 0.1f, -2.7182817f, 65504.0f}) {
    EXPECT_EQ(bits_of(bf16_bits_to_float(round_to_bf16_bits(x))), bits_of(reference_round_to_bf16(x))) << x;
  }
  std::mt19937_64 rng(21);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  int compared = 0;
  for (int i = 0; i < 200000; ++i) {
    const float x = std::bit_cast<float>(any_bits(rng));
    if (std::isnan(x)) continue;
    ASSERT_EQ(bits_of(bf16_bits_to_float(round_to_bf16_bits(x))), bits_of(reference_round_to_bf16(x))) << x;
    ++compared;
  }
  EXPECT_GT(compared, 199000);
}

double max_abs_difference(const std::vector<float>& a, const Vec& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

TEST(Bf16, MatmulForwardMatchesReferenceOnRoundedInputs) {
  if (!bf16_matmul_support().supported) GTEST_SKIP() << bf16_matmul_support().reason;
  std::mt19937_64 rng(22);
  for (const MatmulShape s : kMatmulShapes) {
    for (const bool with_bias : {true, false}) {
      const auto inp = cast_to<float>(random_vector(sz(s.N * s.C), rng));
      const auto weight = cast_to<float>(random_vector(sz(s.OC * s.C), rng));
      const auto bias = cast_to<float>(random_vector(sz(s.OC), rng));
      const float* bias_or_null = with_bias ? bias.data() : nullptr;
      Vec expected(sz(s.N * s.OC)), unrounded(sz(s.N * s.OC));
      reference_matmul_forward_bf16(expected.data(), inp.data(), weight.data(), bias_or_null, s.N, s.C, s.OC);
      std::vector<Bf16Bits> workspace(sz(matmul_bf16_workspace_elements(s.N, s.C, s.OC)));
      std::vector<float> out(expected.size(), 7.0f);  // garbage: forward must overwrite
      matmul_forward_bf16(out.data(), inp.data(), weight.data(), bias_or_null, s.N, s.C, s.OC, workspace.data());
      const std::string what = "bf16 matmul out N=" + std::to_string(s.N) + " bias=" + std::to_string(with_bias);
      expect_close(out, expected, kReferenceTolerance<float>, what);
      if (s.C >= 33) {
        const Vec inp64(inp.begin(), inp.end()), weight64(weight.begin(), weight.end()), bias64(bias.begin(), bias.end());
        reference_matmul_forward(unrounded.data(), inp64.data(), weight64.data(), with_bias ? bias64.data() : nullptr,
                                 s.N, s.C, s.OC);
        EXPECT_GT(max_abs_difference(out, unrounded), 50 * kReferenceTolerance<float>.abs) << what << ": not rounded?";
      }
    }
  }
}

TEST(Bf16, MatmulBackwardMatchesReferenceOnRoundedInputs) {
  if (!bf16_matmul_support().supported) GTEST_SKIP() << bf16_matmul_support().reason;
  std::mt19937_64 rng(23);
  for (const MatmulShape s : kMatmulShapes) {
    const auto inp = cast_to<float>(random_vector(sz(s.N * s.C), rng));
    const auto weight = cast_to<float>(random_vector(sz(s.OC * s.C), rng));
    const auto dout = cast_to<float>(random_vector(sz(s.N * s.OC), rng));
    Vec dinp = prefilled(inp.size()), dweight = prefilled(weight.size()), dbias = prefilled(sz(s.OC));
    reference_matmul_backward_bf16(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
                                   s.N, s.C, s.OC);
    auto dinp_t = cast_to<float>(prefilled(inp.size()));
    auto dweight_t = cast_to<float>(prefilled(weight.size()));
    auto dbias_t = cast_to<float>(prefilled(sz(s.OC)));
    std::vector<Bf16Bits> workspace(sz(matmul_bf16_workspace_elements(s.N, s.C, s.OC)));
    matmul_backward_bf16(dinp_t.data(), dweight_t.data(), dbias_t.data(), dout.data(), inp.data(), weight.data(), s.N,
                         s.C, s.OC, workspace.data());
    const std::string shape = " N=" + std::to_string(s.N);
    expect_close(dinp_t, dinp, kReferenceTolerance<float>, "bf16 matmul dinp" + shape);
    expect_close(dweight_t, dweight, kReferenceTolerance<float>, "bf16 matmul dweight" + shape);
    expect_close(dbias_t, dbias, kReferenceTolerance<float>, "bf16 matmul dbias" + shape);
  }
}

// ---------------------------------------------------------------- (6) Llama ops

constexpr double kRmsNormEps = 1e-5;  // Llama 2's norm_eps

// RMSNorm: (N, C, eps, input range). In the second case eps is about a third
// of the mean square, so where eps enters the formula shows far above rounding.
struct RmsNormCase {
  std::int64_t N, C;
  double eps, input_range;
};
constexpr RmsNormCase kRmsNormCases[] = {{7, 13, kRmsNormEps, 2.0}, {3, 8, 0.1, 0.5}, {1, 1, 1e-6, 1.0}};

TYPED_TEST(KernelsVsReference, RmsNormForward) {
  using T = TypeParam;
  std::mt19937_64 rng(31);
  for (const auto [N, C, eps, range] : kRmsNormCases) {
    const Vec inp = random_vector(sz(N * C), rng, -range, range), weight = random_vector(sz(C), rng);
    Vec out(inp.size()), rstd(sz(N));
    reference_rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C, eps);
    const auto inp_t = cast_to<T>(inp), weight_t = cast_to<T>(weight);
    std::vector<T> out_t(out.size(), T(7)), rstd_t(rstd.size(), T(7));  // garbage: forward must overwrite
    rmsnorm_forward(out_t.data(), rstd_t.data(), inp_t.data(), weight_t.data(), N, C, eps);
    const std::string shape = " C=" + std::to_string(C);
    expect_close(out_t, out, kReferenceTolerance<T>, "rmsnorm out" + shape);
    expect_close(rstd_t, rstd, kReferenceTolerance<T>, "rmsnorm rstd" + shape);
  }
}

TYPED_TEST(KernelsVsReference, RmsNormBackward) {
  using T = TypeParam;
  std::mt19937_64 rng(32);
  for (const auto [N, C, eps, range] : kRmsNormCases) {
    const Vec inp = random_vector(sz(N * C), rng, -range, range), weight = random_vector(sz(C), rng);
    const Vec dout = random_vector(inp.size(), rng);
    Vec dinp = prefilled(inp.size()), dweight = prefilled(sz(C));
    reference_rmsnorm_backward(dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(), N, C, eps);
    const auto inp_t = cast_to<T>(inp), weight_t = cast_to<T>(weight), dout_t = cast_to<T>(dout);
    std::vector<T> out_t(inp.size()), rstd_t(sz(N));
    rmsnorm_forward(out_t.data(), rstd_t.data(), inp_t.data(), weight_t.data(), N, C, eps);
    auto dinp_t = cast_to<T>(prefilled(inp.size())), dweight_t = cast_to<T>(prefilled(sz(C)));
    rmsnorm_backward(dinp_t.data(), dweight_t.data(), dout_t.data(), inp_t.data(), weight_t.data(), rstd_t.data(), N,
                     C);
    const std::string shape = " C=" + std::to_string(C);
    expect_close(dinp_t, dinp, kReferenceTolerance<T>, "rmsnorm dinp" + shape);
    expect_close(dweight_t, dweight, kReferenceTolerance<T>, "rmsnorm dweight" + shape);
  }
}

// A packed Llama qkv buffer [B, seq_len, (NH + 2 KVH) * D], the layout
// rope_apply's strided view exists for.
struct PackedQkv {
  std::int64_t B, seq_len, NH, KVH, D;
  double theta;
  std::int64_t rows() const { return B * seq_len; }
  std::int64_t width() const { return (NH + 2 * KVH) * D; }
  std::size_t size() const { return sz(rows() * width()); }
};
// The second: Llama 3's theta, positions up to 299 (angles of hundreds of radians).
constexpr PackedQkv kRopeShapes[] = {{2, 5, 4, 2, 6, 1e4}, {1, 300, 2, 1, 8, 5e5}};

// Rotates the q and the k part of a packed qkv buffer, leaving v alone.
template <typename T, typename Rope>
void rope_q_and_k(T* qkv, const PackedQkv& s, bool inverse, Rope rope) {
  rope(qkv, s.rows(), s.seq_len, s.NH, s.D, s.width(), s.theta, inverse);
  rope(qkv + s.NH * s.D, s.rows(), s.seq_len, s.KVH, s.D, s.width(), s.theta, inverse);
}

TYPED_TEST(KernelsVsReference, RopeForwardAndInverse) {
  using T = TypeParam;
  std::mt19937_64 rng(33);
  for (const PackedQkv& s : kRopeShapes) {
    for (const bool inverse : {false, true}) {
      const Vec qkv = random_vector(s.size(), rng);
      Vec expected = qkv;
      rope_q_and_k(expected.data(), s, inverse, reference_rope_apply);
      auto qkv_t = cast_to<T>(qkv);
      rope_q_and_k(qkv_t.data(), s, inverse, rope_apply<T>);
      expect_close(qkv_t, expected, kReferenceTolerance<T>,
                   "rope seq_len=" + std::to_string(s.seq_len) + " inverse=" + std::to_string(inverse));
    }
  }
}

struct SwigluShape {
  std::int64_t N, F;
};
constexpr SwigluShape kSwigluShapes[] = {{7, 11}, {1, 1}, {3, 64}};

TYPED_TEST(KernelsVsReference, SwigluForward) {
  using T = TypeParam;
  std::mt19937_64 rng(34);
  for (const auto [N, F] : kSwigluShapes) {
    const Vec inp = random_vector(sz(N * 2 * F), rng, -6.0, 6.0);
    Vec out(sz(N * F));
    reference_swiglu_forward(out.data(), inp.data(), N, F);
    const auto inp_t = cast_to<T>(inp);
    std::vector<T> out_t(out.size(), T(7));  // garbage: forward must overwrite
    swiglu_forward(out_t.data(), inp_t.data(), N, F);
    expect_close(out_t, out, kReferenceTolerance<T>, "swiglu out F=" + std::to_string(F));
  }
}

TYPED_TEST(KernelsVsReference, GegluForward) {
  using T = TypeParam;
  std::mt19937_64 rng(37);
  for (const auto [N, F] : kSwigluShapes) {
    const Vec inp = random_vector(sz(N * 2 * F), rng, -6.0, 6.0);
    Vec out(sz(N * F));
    reference_geglu_forward(out.data(), inp.data(), N, F);
    const auto inp_t = cast_to<T>(inp);
    std::vector<T> out_t(out.size(), T(7));  // garbage: forward must overwrite
    geglu_forward(out_t.data(), inp_t.data(), N, F);
    expect_close(out_t, out, kReferenceTolerance<T>, "geglu out F=" + std::to_string(F));
  }
}

// SwiGLU's backward is the plain chain rule (no separate reference): the float
// instantiation against the double one, which FiniteDifferences.Swiglu checks.
TYPED_TEST(KernelsVsReference, SwigluBackwardFloatMatchesDouble) {
  using T = TypeParam;
  std::mt19937_64 rng(35);
  const std::int64_t N = 7, F = 11;
  const Vec inp = random_vector(sz(N * 2 * F), rng, -6.0, 6.0), dout = random_vector(sz(N * F), rng);
  Vec dinp = prefilled(inp.size());
  swiglu_backward(dinp.data(), dout.data(), inp.data(), N, F);
  const auto inp_t = cast_to<T>(inp), dout_t = cast_to<T>(dout);
  auto dinp_t = cast_to<T>(prefilled(inp.size()));
  swiglu_backward(dinp_t.data(), dout_t.data(), inp_t.data(), N, F);
  expect_close(dinp_t, dinp, kReferenceTolerance<T>, "swiglu dinp");
}

struct GqaShape {
  std::int64_t B, T_len, NH, KVH, D;
};
// Multi-query (KVH = 1), grouped (KVH = 2) and multi-head (KVH = NH); one
// shape with several causal row blocks (the kernel blocks query rows by 128).
constexpr GqaShape kGqaShapes[] = {
    {2, 5, 4, 1, 6}, {2, 5, 4, 2, 6}, {2, 5, 4, 4, 6}, {1, 7, 4, 2, 8}, {1, 261, 4, 2, 8}};

std::string gqa_name(const GqaShape& s) {
  return " T=" + std::to_string(s.T_len) + " NH=" + std::to_string(s.NH) + " KVH=" + std::to_string(s.KVH) +
         " D=" + std::to_string(s.D);
}

TYPED_TEST(KernelsVsReference, GqaAttentionForward) {
  using T = TypeParam;
  std::mt19937_64 rng(36);
  for (const GqaShape& s : kGqaShapes) {
    const Vec qkv = random_vector(sz(s.B * s.T_len * (s.NH + 2 * s.KVH) * s.D), rng, -2.0, 2.0);
    Vec out(sz(s.B * s.T_len * s.NH * s.D)), att(sz(s.B * s.NH * s.T_len * s.T_len));
    reference_gqa_attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T_len, s.NH, s.KVH, s.D);
    const auto qkv_t = cast_to<T>(qkv);
    std::vector<T> out_t(out.size(), T(7)), att_t(att.size(), T(7));
    gqa_attention_forward(out_t.data(), att_t.data(), qkv_t.data(), s.B, s.T_len, s.NH, s.KVH, s.D);
    expect_close(out_t, out, kReferenceTolerance<T>, "gqa out" + gqa_name(s));
    expect_close(att_t, att, kReferenceTolerance<T>, "gqa att" + gqa_name(s));
  }
}

TYPED_TEST(KernelsVsReference, GqaAttentionBackward) {
  using T = TypeParam;
  std::mt19937_64 rng(37);
  for (const GqaShape& s : kGqaShapes) {
    const Vec qkv = random_vector(sz(s.B * s.T_len * (s.NH + 2 * s.KVH) * s.D), rng, -2.0, 2.0);
    const Vec dout = random_vector(sz(s.B * s.T_len * s.NH * s.D), rng);
    Vec out(dout.size()), att(sz(s.B * s.NH * s.T_len * s.T_len));
    reference_gqa_attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T_len, s.NH, s.KVH, s.D);
    Vec dqkv = prefilled(qkv.size());
    reference_gqa_attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), s.B, s.T_len, s.NH, s.KVH,
                                     s.D);
    const auto qkv_t = cast_to<T>(qkv), dout_t = cast_to<T>(dout), att_t = cast_to<T>(att);
    auto dqkv_t = cast_to<T>(prefilled(qkv.size()));
    gqa_attention_backward(dqkv_t.data(), dout_t.data(), qkv_t.data(), att_t.data(), s.B, s.T_len, s.NH, s.KVH, s.D);
    expect_close(dqkv_t, dqkv, kReferenceTolerance<T>, "gqa dqkv" + gqa_name(s));
  }
}

// With KVH == NH the packed layout [q heads | k heads | v heads] is
// attention_forward's [q C | k C | v C] with C = NH * D, so both kernels
// must compute the same out, att and dqkv.
TYPED_TEST(KernelsVsReference, GqaWithAllKeyValueHeadsIsMultiHeadAttention) {
  using T = TypeParam;
  std::mt19937_64 rng(38);
  for (const auto [B, T_len, C, NH] : kAttentionShapes) {
    const std::int64_t D = C / NH;
    const auto qkv = cast_to<T>(random_vector(sz(B * T_len * 3 * C), rng, -2.0, 2.0));
    const auto dout = cast_to<T>(random_vector(sz(B * T_len * C), rng));
    std::vector<T> out(dout.size()), att(sz(B * NH * T_len * T_len)), dqkv(qkv.size(), T(kPrefill));
    attention_forward(out.data(), att.data(), qkv.data(), B, T_len, C, NH);
    attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T_len, C, NH);
    std::vector<T> gqa_out(out.size(), T(7)), gqa_att(att.size(), T(7)), gqa_dqkv(qkv.size(), T(kPrefill));
    gqa_attention_forward(gqa_out.data(), gqa_att.data(), qkv.data(), B, T_len, NH, NH, D);
    gqa_attention_backward(gqa_dqkv.data(), dout.data(), qkv.data(), gqa_att.data(), B, T_len, NH, NH, D);
    const auto as_double = [](const std::vector<T>& v) { return Vec(v.begin(), v.end()); };
    const std::string shape = " T=" + std::to_string(T_len);
    expect_close(gqa_out, as_double(out), kReferenceTolerance<T>, "gqa vs mha out" + shape);
    expect_close(gqa_att, as_double(att), kReferenceTolerance<T>, "gqa vs mha att" + shape);
    expect_close(gqa_dqkv, as_double(dqkv), kReferenceTolerance<T>, "gqa vs mha dqkv" + shape);
  }
}

// A tensor-parallel rank whose tp does not divide the key/value heads holds
// its own query heads and every key/value head (replicated). Run on that
// slice with the model's group size and its first query head's index, the
// kernel must give the whole model's output and probabilities for those heads,
// the whole model's query gradients, and key/value gradients that sum over the
// ranks to the whole model's. Shapes: kv heads dividing tp (MQA, 8 heads in 2
// groups over tp 4) and neither dividing the other (12 heads, 3 kv heads, tp 2).
TYPED_TEST(KernelsVsReference, GqaOnReplicatedKeyValueHeadsIsTheWholeModelsSlice) {
  using T = TypeParam;
  std::mt19937_64 rng(40);
  struct Case {
    std::int64_t NH, KVH, tp;
  };
  for (const Case c : {Case{8, 1, 2}, Case{8, 2, 4}, Case{12, 3, 2}}) {
    const std::int64_t B = 2, T_len = 5, D = 4, W = (c.NH + 2 * c.KVH) * D, KV = c.KVH * D;
    const Vec qkv = random_vector(sz(B * T_len * W), rng, -2.0, 2.0);
    const Vec dout = random_vector(sz(B * T_len * c.NH * D), rng);
    Vec out(dout.size()), att(sz(B * c.NH * T_len * T_len)), dqkv(qkv.size(), 0.0);
    reference_gqa_attention_forward(out.data(), att.data(), qkv.data(), B, T_len, c.NH, c.KVH, D);
    reference_gqa_attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T_len, c.NH, c.KVH, D);
    const std::int64_t NHl = c.NH / c.tp, Wl = (NHl + 2 * c.KVH) * D, Q = c.NH * D, Ql = NHl * D;
    Vec dkv_sum(sz(B * T_len * 2 * KV), 0.0);
    for (std::int64_t r = 0; r < c.tp; ++r) {
      // The rank's slice: its query heads, then every key and value head.
      std::vector<T> local(sz(B * T_len * Wl)), local_dout(sz(B * T_len * Ql));
      for (std::int64_t row = 0; row < B * T_len; ++row) {
        for (std::int64_t j = 0; j < Ql; ++j) {
          local[sz(row * Wl + j)] = static_cast<T>(qkv[sz(row * W + r * Ql + j)]);
          local_dout[sz(row * Ql + j)] = static_cast<T>(dout[sz(row * c.NH * D + r * Ql + j)]);
        }
        for (std::int64_t j = 0; j < 2 * KV; ++j) local[sz(row * Wl + Ql + j)] = static_cast<T>(qkv[sz(row * W + Q + j)]);
      }
      std::vector<T> o(local_dout.size(), T(7)), a(sz(B * NHl * T_len * T_len), T(7)), d(local.size(), T(0));
      gqa_attention_forward(o.data(), a.data(), local.data(), B, T_len, NHl, c.KVH, D, c.NH / c.KVH, r * NHl);
      gqa_attention_backward(d.data(), local_dout.data(), local.data(), a.data(), B, T_len, NHl, c.KVH, D,
                             c.NH / c.KVH, r * NHl);
      Vec want_o, want_a, want_dq, got_dq;
      for (std::int64_t row = 0; row < B * T_len; ++row) {
        for (std::int64_t j = 0; j < Ql; ++j) {
          want_o.push_back(out[sz(row * c.NH * D + r * Ql + j)]);
          want_dq.push_back(dqkv[sz(row * W + r * Ql + j)]);
          got_dq.push_back(static_cast<double>(d[sz(row * Wl + j)]));
        }
        for (std::int64_t j = 0; j < 2 * KV; ++j) dkv_sum[sz(row * 2 * KV + j)] += static_cast<double>(d[sz(row * Wl + Ql + j)]);
      }
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < NHl; ++h)
          for (std::int64_t k = 0; k < T_len * T_len; ++k) want_a.push_back(att[sz((b * c.NH + r * NHl + h) * T_len * T_len + k)]);
      const std::string name = " NH=" + std::to_string(c.NH) + " KVH=" + std::to_string(c.KVH) + " rank " + std::to_string(r);
      expect_close(std::vector<T>(o.begin(), o.end()), want_o, kReferenceTolerance<T>, "replicated kv out" + name);
      expect_close(std::vector<T>(a.begin(), a.end()), want_a, kReferenceTolerance<T>, "replicated kv att" + name);
      expect_close(std::vector<T>(got_dq.begin(), got_dq.end()), want_dq, kReferenceTolerance<T>, "replicated kv dq" + name);
    }
    Vec want_dkv;
    for (std::int64_t row = 0; row < B * T_len; ++row)
      for (std::int64_t j = 0; j < 2 * KV; ++j) want_dkv.push_back(dqkv[sz(row * W + Q + j)]);
    expect_close(std::vector<T>(dkv_sum.begin(), dkv_sum.end()), want_dkv, kReferenceTolerance<T>,
                 "replicated kv dk, dv summed over ranks NH=" + std::to_string(c.NH));
  }
}

// RoPE's identities, in float and double.
template <typename T>
class RopeIdentities : public ::testing::Test {};
TYPED_TEST_SUITE(RopeIdentities, Scalars);

TYPED_TEST(RopeIdentities, PositionZeroIsTheIdentity) {
  using T = TypeParam;
  std::mt19937_64 rng(39);
  const PackedQkv s = {3, 4, 4, 2, 6, 1e4};
  const auto before = cast_to<T>(random_vector(s.size(), rng));
  auto after = before;
  rope_q_and_k(after.data(), s, false, rope_apply<T>);
  for (std::int64_t r = 0; r < s.rows(); ++r) {
    const bool at_position_zero = r % s.seq_len == 0;
    std::int64_t changed = 0;
    for (std::int64_t i = 0; i < s.width(); ++i) {
      const std::size_t at = sz(r * s.width() + i);
      changed += after[at] != before[at];
      if (at_position_zero) {
        EXPECT_EQ(after[at], before[at]) << "row " << r << " element " << i;
      }
    }
    // Positions > 0 rotate every q and k value (the v part, D * KVH per row, never).
    if (!at_position_zero) {
      EXPECT_EQ(changed, (s.NH + s.KVH) * s.D) << "row " << r;
    }
  }
}

TYPED_TEST(RopeIdentities, InverseUndoesForward) {
  using T = TypeParam;
  std::mt19937_64 rng(40);
  for (const PackedQkv& s : kRopeShapes) {
    const Vec qkv = random_vector(s.size(), rng);
    auto x = cast_to<T>(qkv);
    rope_q_and_k(x.data(), s, false, rope_apply<T>);
    rope_q_and_k(x.data(), s, true, rope_apply<T>);
    expect_close(x, qkv, kReferenceTolerance<T>, "rope inverse after forward seq_len=" + std::to_string(s.seq_len));
  }
}

// Hand-computed values: D = 2, theta = 10000, position 1 turns (1, 0) into
// (cos 1, sin 1). D = 4: pair 1 is elements (1, 3) (rotate_half, not the
// neighbours (2, 3)), with frequency 10000^(-2/4) = 0.01.
TEST(Rope, KnownValues) {
  Vec two = {1.0, 0.0, 1.0, 0.0};  // positions 0 and 1
  rope_apply(two.data(), 2, 2, 1, 2, 2, 1e4, false);
  expect_close(two, Vec{1.0, 0.0, std::cos(1.0), std::sin(1.0)}, {1e-15, 1e-15}, "rope D=2");
  Vec four = {0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0};
  rope_apply(four.data(), 2, 2, 1, 4, 4, 1e4, false);
  expect_close(four, Vec{0.0, 0.0, 0.0, 0.0, 0.0, std::cos(0.01), 0.0, std::sin(0.01)}, {1e-15, 1e-15}, "rope D=4");
}

TEST(Swiglu, SaturatesWithoutNaNs) {
  // silu(g) -> 0 for g << 0 and -> g for g >> 0; exp(-g) overflows double for g < -710.
  const std::vector<float> inp_f = {-1000.0f, -100.0f, 100.0f, 1000.0f, 2.0f, 2.0f, 2.0f, 2.0f};
  const Vec inp(inp_f.begin(), inp_f.end());
  std::vector<float> out_f(4), dinp_f(8, 0.0f);
  Vec out(4), dinp(8, 0.0);
  swiglu_forward(out_f.data(), inp_f.data(), 1, 4);
  swiglu_forward(out.data(), inp.data(), 1, 4);
  swiglu_backward(dinp_f.data(), std::vector<float>(4, 1.0f).data(), inp_f.data(), 1, 4);
  swiglu_backward(dinp.data(), Vec(4, 1.0).data(), inp.data(), 1, 4);
  expect_close(out_f, Vec{0.0, 0.0, 200.0, 2000.0}, {1e-30, 1e-7}, "swiglu float out");
  expect_close(out, Vec{0.0, 0.0, 200.0, 2000.0}, {1e-30, 1e-15}, "swiglu double out");
  expect_close(dinp_f, Vec{0.0, 0.0, 2.0, 2.0, 0.0, 0.0, 100.0, 1000.0}, {1e-30, 1e-7}, "swiglu float dinp");
  expect_close(dinp, Vec{0.0, 0.0, 2.0, 2.0, 0.0, 0.0, 100.0, 1000.0}, {1e-30, 1e-15}, "swiglu double dinp");
}

TEST(FiniteDifferences, RmsNorm) {
  std::mt19937_64 rng(41);
  const std::int64_t N = 7, C = 13;
  Vec inp = random_vector(sz(N * C), rng, -2.0, 2.0), weight = random_vector(sz(C), rng);
  const Vec w = random_vector(inp.size(), rng);
  Vec out(inp.size()), rstd(sz(N));
  auto loss = [&] {
    rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C, kRmsNormEps);
    return dot(out, w);
  };
  loss();
  Vec dinp = prefilled(inp.size()), dweight = prefilled(weight.size());
  rmsnorm_backward(dinp.data(), dweight.data(), w.data(), inp.data(), weight.data(), rstd.data(), N, C);
  expect_gradient_matches_fd(inp, dinp, loss, "rmsnorm inp");
  expect_gradient_matches_fd(weight, dweight, loss, "rmsnorm weight");
}

// L = sum(w * rope(x)) is linear in x with gradient R^T w, which is what the
// inverse application computes from w. The loss rotates the q and k parts of
// a packed buffer, so the v part's gradient is w itself, untouched.
TEST(FiniteDifferences, Rope) {
  std::mt19937_64 rng(42);
  const PackedQkv s = {2, 5, 4, 2, 6, 1e4};
  Vec qkv = random_vector(s.size(), rng);
  const Vec w = random_vector(qkv.size(), rng);
  Vec rotated(qkv.size());
  auto loss = [&] {
    rotated = qkv;
    rope_q_and_k(rotated.data(), s, false, rope_apply<double>);
    return dot(rotated, w);
  };
  Vec grad = w;
  rope_q_and_k(grad.data(), s, true, rope_apply<double>);
  // rope_apply rewrites its buffer rather than accumulating; add the prefill the helper subtracts.
  for (double& g : grad) g += kPrefill;
  expect_gradient_matches_fd(qkv, grad, loss, "rope qkv");
}

TEST(FiniteDifferences, Swiglu) {
  std::mt19937_64 rng(43);
  const std::int64_t N = 7, F = 11;
  Vec inp = random_vector(sz(N * 2 * F), rng, -4.0, 4.0);
  const Vec w = random_vector(sz(N * F), rng);
  Vec out(w.size());
  auto loss = [&] {
    swiglu_forward(out.data(), inp.data(), N, F);
    return dot(out, w);
  };
  Vec dinp = prefilled(inp.size());
  swiglu_backward(dinp.data(), w.data(), inp.data(), N, F);
  expect_gradient_matches_fd(inp, dinp, loss, "swiglu inp");
}

TEST(FiniteDifferences, Geglu) {
  std::mt19937_64 rng(45);
  const std::int64_t N = 7, F = 11;
  Vec inp = random_vector(sz(N * 2 * F), rng, -4.0, 4.0);
  const Vec w = random_vector(sz(N * F), rng);
  Vec out(w.size());
  auto loss = [&] {
    geglu_forward(out.data(), inp.data(), N, F);
    return dot(out, w);
  };
  Vec dinp = prefilled(inp.size());
  geglu_backward(dinp.data(), w.data(), inp.data(), N, F);
  expect_gradient_matches_fd(inp, dinp, loss, "geglu inp");
}

TEST(FiniteDifferences, GqaAttention) {
  std::mt19937_64 rng(44);
  for (const std::int64_t KVH : {2, 1}) {
    const std::int64_t B = 2, T_len = 5, NH = 4, D = 6;
    Vec qkv = random_vector(sz(B * T_len * (NH + 2 * KVH) * D), rng, -1.5, 1.5);
    const Vec w = random_vector(sz(B * T_len * NH * D), rng);
    Vec out(w.size()), att(sz(B * NH * T_len * T_len));
    auto loss = [&] {
      gqa_attention_forward(out.data(), att.data(), qkv.data(), B, T_len, NH, KVH, D);
      return dot(out, w);
    };
    loss();
    Vec dqkv = prefilled(qkv.size());
    gqa_attention_backward(dqkv.data(), w.data(), qkv.data(), att.data(), B, T_len, NH, KVH, D);
    expect_gradient_matches_fd(qkv, dqkv, loss, "gqa qkv KVH=" + std::to_string(KVH));
  }
}

// Every Llama backward adds into its gradient buffers (micro-batch gradient
// accumulation relies on it): from a buffer holding kPoison it must give
// kPoison + the gradient from zero, in float too (the float and double code
// are one template, but each instantiation is checked).
template <typename T>
class LlamaBackward : public ::testing::Test {};
TYPED_TEST_SUITE(LlamaBackward, Scalars);

constexpr double kPoison = 3.0;

// Runs backward(buffers...) once on zeroed and once on poisoned buffers and
// compares them element by element.
template <typename T, typename Backward>
void expect_accumulates(std::vector<std::vector<T>*> buffers, Backward backward, const std::string& what) {
  for (auto* buffer : buffers) std::fill(buffer->begin(), buffer->end(), T(0));
  backward();
  std::vector<std::vector<T>> from_zero;
  for (auto* buffer : buffers) from_zero.push_back(*buffer);
  for (auto* buffer : buffers) std::fill(buffer->begin(), buffer->end(), T(kPoison));
  backward();
  for (std::size_t b = 0; b < buffers.size(); ++b) {
    Vec expected(from_zero[b].size());
    for (std::size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<double>(from_zero[b][i]) + kPoison;
    expect_close(*buffers[b], expected, kReferenceTolerance<T>, what + " buffer " + std::to_string(b));
  }
}

TYPED_TEST(LlamaBackward, AddsIntoTheGradientBuffers) {
  using T = TypeParam;
  std::mt19937_64 rng(45);
  const std::int64_t N = 7, C = 13;
  const auto x = cast_to<T>(random_vector(sz(N * C), rng, -2.0, 2.0));
  const auto weight = cast_to<T>(random_vector(sz(C), rng));
  const auto dout = cast_to<T>(random_vector(sz(N * C), rng));
  std::vector<T> out(x.size()), rstd(sz(N)), dinp(x.size()), dweight(sz(C));
  rmsnorm_forward(out.data(), rstd.data(), x.data(), weight.data(), N, C, kRmsNormEps);
  const auto rmsnorm = [&] {
    rmsnorm_backward(dinp.data(), dweight.data(), dout.data(), x.data(), weight.data(), rstd.data(), N, C);
  };
  expect_accumulates<T>({&dinp, &dweight}, rmsnorm, "rmsnorm");

  const std::int64_t F = 11;
  const auto gate_up = cast_to<T>(random_vector(sz(N * 2 * F), rng, -4.0, 4.0));
  const auto dact = cast_to<T>(random_vector(sz(N * F), rng));
  std::vector<T> dgate_up(gate_up.size());
  const auto swiglu = [&] { swiglu_backward(dgate_up.data(), dact.data(), gate_up.data(), N, F); };
  expect_accumulates<T>({&dgate_up}, swiglu, "swiglu");
  const auto geglu = [&] { geglu_backward(dgate_up.data(), dact.data(), gate_up.data(), N, F); };
  expect_accumulates<T>({&dgate_up}, geglu, "geglu");

  const std::int64_t B = 2, T_len = 5, NH = 4, KVH = 2, D = 6;
  const auto qkv = cast_to<T>(random_vector(sz(B * T_len * (NH + 2 * KVH) * D), rng, -2.0, 2.0));
  const auto datt_out = cast_to<T>(random_vector(sz(B * T_len * NH * D), rng));
  std::vector<T> att_out(datt_out.size()), att(sz(B * NH * T_len * T_len)), dqkv(qkv.size());
  gqa_attention_forward(att_out.data(), att.data(), qkv.data(), B, T_len, NH, KVH, D);
  const auto gqa = [&] {
    gqa_attention_backward(dqkv.data(), datt_out.data(), qkv.data(), att.data(), B, T_len, NH, KVH, D);
  };
  expect_accumulates<T>({&dqkv}, gqa, "gqa attention");
}

}  // namespace
}  // namespace meshplan::kernels
