// Causal multi-head self-attention (Vaswani et al. 2017, section 3.2.2) as
// GPT-2 computes it, from the packed output of the fused QKV projection.
// Strided BLAS GEMMs per (batch, head) over causal row blocks, softmax rows
// in OpenMP threads (attention.cpp); checked against the triple-loop
// reference_attention_forward/backward (kernels/cpu/reference.hpp).
// The forward saves the softmax probabilities, so the backward needs no
// recomputation; that is B * NH * T * T values, fine at the sizes one CPU
// rank trains. Backward accumulates (+=) into dqkv.
//
// Grouped-query attention (Ainslie et al. 2023, "GQA", section 2.2), as
// Llama 2 (70B) and Llama 3 use it: NH query heads share KVH key/value heads
// in groups of NH / KVH consecutive query heads. KVH == NH is multi-head
// attention (and computes what attention_forward/backward do); KVH == 1 is
// multi-query attention (Shazeer 2019).
//
// Defines: attention_forward, attention_backward, gqa_attention_forward,
// gqa_attention_backward.
#pragma once

#include <cstdint>

namespace meshplan::kernels {

// T_len is the sequence length T (T itself names the scalar type).
// qkv[B, T, 3C]: for each position, C query values, then C key values, then
// C value values; head h owns channels [h * HS, (h + 1) * HS) of each, with
// HS = C / NH (NH must divide C).
// att[B, NH, T, T] (written): att[b, h, t, t2] = softmax over t2 <= t of
//   q[b, t, h] . k[b, t2, h] / sqrt(HS); entries with t2 > t are set to 0.
// out[B, T, C] (written): out[b, t, h * HS + i] = sum_t2 att[b, h, t, t2] v[b, t2, h, i].
template <typename T>
void attention_forward(T* out, T* att, const T* qkv, std::int64_t B, std::int64_t T_len, std::int64_t C,
                       std::int64_t NH);

// Given dout[B, T, C], the forward input qkv and the saved att, accumulates
// dqkv[B, T, 3C] in the same packed layout.
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, std::int64_t B, std::int64_t T_len,
                        std::int64_t C, std::int64_t NH);

// qkv[B, T, (NH + 2 KVH) * D]: for each position, NH query heads, then KVH key
// heads, then KVH value heads, D values each (KVH must divide NH); query head
// h reads key/value head (head_offset + h) / group, group = NH / KVH unless
// given. A tensor-parallel rank whose KVH key/value heads are all the model's
// (replicated because tp does not divide them) passes the model's group size
// and the global index of its first query head as head_offset. Scale
// 1 / sqrt(D), causal.
// att[B, NH, T, T] (written): the softmax probabilities, zeros above the
// diagonal, as attention_forward's.
// out[B, T, NH * D] (written): out[b, t, h * D + i] = sum_t2 att[b, h, t, t2] v[b, t2, (head_offset + h) / group, i].
template <typename T>
void gqa_attention_forward(T* out, T* att, const T* qkv, std::int64_t B, std::int64_t T_len, std::int64_t NH,
                           std::int64_t KVH, std::int64_t D, std::int64_t group = 0, std::int64_t head_offset = 0);

// Given dout[B, T, NH * D], the forward input qkv and the saved att,
// accumulates dqkv[B, T, (NH + 2 KVH) * D] in the same packed layout; the
// key and value gradients of a key/value head sum over its group's query heads
// (those of this call: a head no query head here reads gets no gradient).
template <typename T>
void gqa_attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, std::int64_t B, std::int64_t T_len,
                            std::int64_t NH, std::int64_t KVH, std::int64_t D, std::int64_t group = 0,
                            std::int64_t head_offset = 0);

}  // namespace meshplan::kernels
