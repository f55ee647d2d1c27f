// Softmax + cross-entropy fused, the loss at the end of both the MLP and the
// GPT-2 decoder. Fused because the gradient of the mean loss with respect to
// the logits is simply (probs - onehot(target)) / N, and because the loss is
// taken from the log-softmax (logit - max - log sum exp(logit - max)), which
// stays finite when a probability underflows to 0 in float.
// Backward accumulates (+=) into dlogits.
//
// Defines: cross_entropy_forward, cross_entropy_backward.
#pragma once

#include <cstdint>

namespace meshplan::kernels {

// logits[N, V], targets[N] in [0, V). Writes probs[N, V] (the softmax of each
// row) and, if losses is not null, losses[N] = -log probs[n, targets[n]].
// Returns the mean loss over the N rows, in nats (accumulated in double).
template <typename T>
T cross_entropy_forward(T* probs, T* losses, const T* logits, const std::int32_t* targets, std::int64_t N,
                        std::int64_t V);

// dlogits[n, v] += dloss / N * (probs[n, v] - [v == targets[n]]), where dloss
// is the gradient flowing into the mean loss (1 for a plain backward; the
// micro-batch scale under gradient accumulation).
template <typename T>
void cross_entropy_backward(T* dlogits, const T* probs, const std::int32_t* targets, T dloss, std::int64_t N,
                            std::int64_t V);

}  // namespace meshplan::kernels
