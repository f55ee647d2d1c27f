// The arithmetic of the fused softmax cross-entropy over the vocabulary
// (cross_entropy.cu), written once for the CUDA kernel and the host, where
// tests/test_cross_entropy_rows.cpp runs it in the kernel's order (the same
// per-thread partial sums and the same reduction tree) against
// kernels/cpu/cross_entropy in double. A row's log-sum-exp is kept as a
// running (max, sum of exp(x - max)) pair, which one pass over the logits
// fills and which merges without overflow (Milakov and Gimelshein 2018,
// "Online normalizer calculation for softmax"). No fp32 copy of the logits
// or of the probabilities is ever stored: the kernel reads each bf16 logit
// once per pass and writes its gradient in its place.
//
// defines: ce::kThreads, ce::MaxSum, ce::add, ce::merge, ce::logsumexp,
// ce::gradient
#pragma once

#include <math.h>

#include "kernels/cuda/host_device.hpp"

namespace meshplan::kernels::ce {

// Threads per row (one block per row); a power of two for the reduction tree.
inline constexpr int kThreads = 256;

struct MaxSum {
  float max;  // -inf while empty
  float sum;  // sum of exp(x - max)
};

MESHPLAN_HD inline MaxSum empty() { return {-INFINITY, 0.0f}; }

MESHPLAN_HD inline void add(MaxSum& a, float x) {
  if (x > a.max) {
    a.sum = a.sum * expf(a.max - x) + 1.0f;  // exp(-inf) = 0 for the first value
    a.max = x;
  } else {
    a.sum += expf(x - a.max);
  }
}

MESHPLAN_HD inline MaxSum merge(MaxSum a, MaxSum b) {
  if (b.max == -INFINITY) return a;
  if (a.max == -INFINITY) return b;
  const float m = fmaxf(a.max, b.max);
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

MESHPLAN_HD inline float logsumexp(MaxSum a) { return a.max + logf(a.sum); }

// d loss / d logit for one logit of a row: scale (softmax - [is target]),
// scale being dloss / N for the mean loss over N rows.
MESHPLAN_HD inline float gradient(float logit, float row_logsumexp, bool is_target, float scale) {
  return scale * (expf(logit - row_logsumexp) - (is_target ? 1.0f : 0.0f));
}

}  // namespace meshplan::kernels::ce
