// AdamW (Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization",
// Algorithm 2) on fp32 master weights, and the global gradient norm used for
// clipping. Weight decay is decoupled: it shrinks the parameter directly and
// never passes through the adaptive denominator sqrt(v_hat), which is the
// difference from Adam with L2 regularisation. As in PyTorch's AdamW and
// llm.c, the decay is scaled by the learning rate (the paper's schedule
// multiplier eta_t is folded into lr). Templated so tests can run it in double.
//
// Defines: adamw_update, global_l2_norm, clip_scale (AdamWHyperparameters: adamw_hyperparameters.hpp).
#pragma once

#include <cstdint>
#include <span>

#include "kernels/cpu/adamw_hyperparameters.hpp"

namespace meshplan::kernels {

// One AdamW step at step number `step` (1 for the first update) over n
// parameters. m[n] and v[n] are the first and second moment buffers (start at
// zero), updated in place; params[n] is updated in place:
//   m = beta1 m + (1 - beta1) g          v = beta2 v + (1 - beta2) g^2
//   m_hat = m / (1 - beta1^step)         v_hat = v / (1 - beta2^step)
//   params -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * params)
// The four buffers must not overlap.
template <typename T>
void adamw_update(T* params, const T* grads, T* m, T* v, std::int64_t n, std::int64_t step,
                  const AdamWHyperparameters& hp);

// sqrt(sum over every buffer and element of g^2), accumulated in double so
// that float gradients of large magnitude neither overflow nor lose the
// small buffers' contribution.
template <typename T>
double global_l2_norm(std::span<const std::span<const T>> buffers);

// The factor to multiply every gradient by so the global norm is at most
// max_norm: min(1, max_norm / norm); 1 when norm is 0 or max_norm <= 0
// (clipping off).
double clip_scale(double norm, double max_norm);

}  // namespace meshplan::kernels
