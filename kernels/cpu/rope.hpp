// Rotary position embedding (Su et al. 2021, "RoFormer", section 3.4.2), as
// Llama applies it to queries and keys, in the Hugging Face convention
// (transformers' modeling_llama.py `rotate_half` / `apply_rotary_pos_emb`):
// within each head of head_dim D (even), element i < D/2 is paired with
// element i + D/2 (not with its neighbour 2i + 1, Meta's complex-number
// layout; the two differ by a fixed permutation of the projection weights).
// Pair i has frequency theta^(-2i / D); at position p its angle is p * freq_i:
//   x'[i]       = x[i] cos - x[i + D/2] sin
//   x'[i + D/2] = x[i + D/2] cos + x[i] sin
// theta is Llama's rope_theta (10000 in Llama 1 and 2, 500000 in Llama 3).
//
// The op is a rotation, so it is applied in place and its backward is its
// inverse (the transpose of an orthogonal map): the same function with
// inverse = true turns a gradient with respect to the rotated values into one
// with respect to the unrotated values, in place. No accumulation: the
// gradient buffer is rewritten, as the values are by the forward.
//
// Defines: rope_apply.
#pragma once

#include <cstdint>

namespace meshplan::kernels {

// x points at the first head of row 0; row r (r in [0, rows)) starts at
// x + r * row_stride and holds `heads` consecutive heads of head_dim values
// each (so a packed qkv buffer's q part is rotated with x = qkv, row_stride
// = its row width, and its k part with x = qkv + NH * head_dim). Row r is at
// position r % seq_len (rows = B * seq_len, sequences back to back).
// inverse = false rotates by +angle (the forward); inverse = true by -angle,
// which is the backward (d(x) = R^T d(x')), applied to a gradient buffer laid
// out like x. Angles are computed in double; cos and sin are tabulated once
// per call for the positions used, then rounded to T.
template <typename T>
void rope_apply(T* x, std::int64_t rows, std::int64_t seq_len, std::int64_t heads, std::int64_t head_dim,
                std::int64_t row_stride, double theta, bool inverse);

}  // namespace meshplan::kernels
