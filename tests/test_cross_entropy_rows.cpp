// The arithmetic of the CUDA softmax cross-entropy (kernels/cuda/cross_entropy_rows.hpp)
// on the host, with no GPU: a twin of cross_entropy_kernel (cross_entropy.cu)
// folds each row's logits into ce::kThreads per-thread (max, sum) pairs,
// merges them in the kernel's tree and forms losses and gradients, in place
// as the kernel does. Compared with kernels/cpu/cross_entropy in double on the
// same bf16-representable logits: vocabularies smaller than, equal to and
// much larger than the thread count, a target at either end, logits large
// enough to overflow a plain exp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/cpu/cross_entropy.hpp"
#include "kernels/cuda/cross_entropy_rows.hpp"
#include "float_error.hpp"

namespace meshplan::kernels::ce {
namespace {

// Twin of cross_entropy_kernel over every row: logits are replaced by their gradients.
void twin(std::vector<float>& logits, std::vector<float>& losses, const std::vector<std::int32_t>& targets, int N, int V,
          float dloss) {
  const float scale = dloss / static_cast<float>(N);
  for (int row = 0; row < N; ++row) {
    float* x = &logits[static_cast<std::size_t>(row) * V];
    MaxSum partial[kThreads];
    for (int t = 0; t < kThreads; ++t) {
      partial[t] = empty();
      for (int j = t; j < V; j += kThreads) add(partial[t], x[j]);
    }
    for (int stride = kThreads / 2; stride > 0; stride /= 2)
      for (int t = 0; t < stride; ++t) partial[t] = merge(partial[t], partial[t + stride]);
    const float lse = logsumexp(partial[0]);
    losses[row] = lse - x[targets[row]];
    for (int j = 0; j < V; ++j) x[j] = gradient(x[j], lse, j == targets[row], scale);
  }
}

using testing_support::relative_error;

TEST(CrossEntropyRows, MatchTheCpuCrossEntropyInDouble) {
  std::mt19937_64 rng(7);
  struct Case {
    int N, V;
    float spread;  // logits in [-spread, spread]
  };
  for (const Case c : {Case{3, 17, 4}, Case{4, 256, 4}, Case{5, 50257, 8}, Case{2, 1000, 200}}) {
    std::vector<float> logits(static_cast<std::size_t>(c.N) * c.V);
    std::uniform_real_distribution<float> dist(-c.spread, c.spread);
    for (float& x : logits) x = std::ldexp(std::round(std::ldexp(dist(rng), 4)), -4);  // few significant bits, as bf16
    std::vector<std::int32_t> targets(c.N);
    for (int n = 0; n < c.N; ++n) targets[n] = n == 0 ? 0 : n == 1 ? c.V - 1 : static_cast<std::int32_t>(rng() % c.V);
    const std::vector<double> logits_d(logits.begin(), logits.end());
    std::vector<double> probs(logits.size()), losses_d(c.N), dlogits_d(logits.size(), 0.0);
    cross_entropy_forward<double>(probs.data(), losses_d.data(), logits_d.data(), targets.data(), c.N, c.V);
    cross_entropy_backward<double>(dlogits_d.data(), probs.data(), targets.data(), 1.0, c.N, c.V);
    std::vector<float> losses(c.N);
    twin(logits, losses, targets, c.N, c.V, 1.0f);
    const double e_loss = relative_error(losses, losses_d), e_grad = relative_error(logits, dlogits_d);
    std::printf("[ ce       ] N=%d V=%d spread %.0f: loss %.2e, gradient %.2e (relative 2-norm)\n", c.N, c.V, c.spread,
                e_loss, e_grad);
    EXPECT_LT(e_loss, 1e-6) << c.V;
    EXPECT_LT(e_grad, 1e-5) << c.V;
  }
}

TEST(CrossEntropyRows, MergeIsTheLogSumExpOfBothHalves) {
  MaxSum a = empty(), b = empty();
  for (float x : {1.0f, 3.0f, -2.0f}) add(a, x);
  for (float x : {100.0f, 99.0f}) add(b, x);
  const double want = 100.0 + std::log(1.0 + std::exp(-1.0) + std::exp(-97.0) + std::exp(-99.0) + std::exp(-102.0));
  EXPECT_NEAR(logsumexp(merge(a, b)), want, 1e-5);
  EXPECT_NEAR(logsumexp(merge(b, a)), want, 1e-5);
  EXPECT_EQ(merge(empty(), a).max, a.max);
  EXPECT_EQ(merge(a, empty()).sum, a.sum);
}

}  // namespace
}  // namespace meshplan::kernels::ce
