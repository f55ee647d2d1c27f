// GPT-2's input layer: a learned token embedding plus a learned absolute
// position embedding (Radford et al. 2019; gpt-2 src/model.py `wte`, `wpe`).
// Backward is a scatter-add: a token that occurs several times in the batch
// accumulates several rows into the same dwte row, and dwpe sums over the
// batch. Gradients accumulate (+=).
//
// Defines: embedding_forward, embedding_backward.
#pragma once

#include <cstdint>

namespace meshplan::kernels {

// T_len is the sequence length T (T itself names the scalar type).
// tokens[B, T] in [0, V); wte[V, C]; wpe[maxT, C] with maxT >= T.
// out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :];  out[B, T, C] is written.
template <typename T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, std::int64_t B,
                       std::int64_t T_len, std::int64_t C);

// Given dout[B, T, C]: dwte[tokens[b, t], :] += dout[b, t, :] and
// dwpe[t, :] += dout[b, t, :]. dwpe may be null (no position embedding
// gradient wanted).
template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const std::int32_t* tokens, std::int64_t B,
                        std::int64_t T_len, std::int64_t C);

}  // namespace meshplan::kernels
