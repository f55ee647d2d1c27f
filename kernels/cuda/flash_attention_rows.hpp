// The arithmetic of causal flash attention (Dao 2023, "FlashAttention-2",
// Algorithms 1 and 2) for one query row or one key row against one tile of
// the other side, written once for the CUDA kernels (flash_attention.cu: a
// thread owns a row, the tile sits in shared memory) and for the host, where
// tests/test_flash_attention_rows.cpp runs the same functions in the same
// tile order as the kernels and compares the result with the CPU attention
// kernels in double. So the online softmax, the row statistics the backward
// reads and the causal mask at tile edges are tested on any machine; only the
// CUDA indexing and shared-memory loads need a GPU.
//
// Conventions: fp32 arithmetic; a tile holds `n` rows of D floats (row
// stride D); `scale` is 1 / sqrt(D); row and key indices are positions in the
// sequence, and a query row i sees keys j <= i.
//
//   forward_tile      folds n keys into a query row's running (max, sum, acc)
//   forward_finish    out = acc / sum, lse = max + log(sum)
//   row_delta         D_i = dout_i . out_i (Algorithm 2, line 4)
//   key_backward_tile one key row's dK and dV over a tile of query rows
//   query_backward_tile one query row's dQ over a tile of key rows
//
// The backward is split into a pass per key row (dK, dV: summed over query
// rows and, under grouped-query attention, over the group's query heads) and
// a pass per query row (dQ), each summing in a fixed order: deterministic,
// no float atomics, at the price of computing each probability twice.
//
// defines: flash::kQueryTile, kKeyTile, kBackwardKeyTile,
// kBackwardQueryTile, flash::to_float, flash::load_rows, flash::forward_tile, flash::forward_finish,
// flash::row_delta, flash::key_backward_tile, flash::query_backward_tile
#pragma once

#include <math.h>

#include "kernels/cuda/host_device.hpp"

namespace meshplan::kernels::flash {

// Tile shapes of the kernels (and of the host twin in the test): the forward
// and the dQ pass give each query row a thread, kQueryTile rows per block,
// and stream keys through shared memory kKeyTile rows at a time; the dK/dV
// pass gives each key row a thread, kBackwardKeyTile per block, and streams
// query rows kBackwardQueryTile at a time. Two tiles of 32 rows of 128 floats
// are 32 KiB of shared memory.
inline constexpr int kQueryTile = 64;
inline constexpr int kKeyTile = 32;
inline constexpr int kBackwardKeyTile = 32;
inline constexpr int kBackwardQueryTile = 32;

MESHPLAN_HD inline float to_float(float x) { return x; }

// Rows [first, first + n) of one head of a packed [B, T, width] tensor (the
// head's D values start at column `column`) into tile[n][D] as floats; the
// loads of a block are spread over its threads (thread, threads). Rows past
// `rows` (the sequence's end) are left as they were.
template <int D, typename T>
MESHPLAN_HD inline void load_rows(float* tile, const T* packed, long long row_base, int first, int n, int rows,
                                  long long width, long long column, int thread, int threads) {
  for (int e = thread; e < n * D; e += threads) {
    const int r = e / D, d = e % D;
    if (first + r < rows) tile[e] = to_float(packed[(row_base + first + r) * width + column + d]);
  }
}

template <int D>
MESHPLAN_HD inline float dot(const float* a, const float* b) {
  float s = 0;
  for (int d = 0; d < D; ++d) s += a[d] * b[d];
  return s;
}

// Folds keys [0, n) of the tile (k, v: n rows of D) into one query row's
// state: m the largest scaled score so far (-inf before the first key), l the
// sum of exp(score - m), acc the sum of exp(score - m) v. Bc bounds n.
template <int D, int Bc>
MESHPLAN_HD inline void forward_tile(float& m, float& l, float* acc, const float* q, const float* k, const float* v, int n,
                                     float scale) {
  if (n <= 0) return;
  float s[Bc];
  float tile_max = m;
  for (int j = 0; j < n; ++j) {
    s[j] = scale * dot<D>(q, k + j * D);
    tile_max = fmaxf(tile_max, s[j]);
  }
  const float correction = expf(m - tile_max);  // 0 before the first key (m = -inf)
  l *= correction;
  for (int d = 0; d < D; ++d) acc[d] *= correction;
  for (int j = 0; j < n; ++j) {
    const float p = expf(s[j] - tile_max);
    l += p;
    for (int d = 0; d < D; ++d) acc[d] += p * v[j * D + d];
  }
  m = tile_max;
}

// The row's output and its log-sum-exp, the one statistic the backward keeps.
template <int D>
MESHPLAN_HD inline void forward_finish(float* out, float& lse, float m, float l, const float* acc) {
  const float inverse = 1.0f / l;
  for (int d = 0; d < D; ++d) out[d] = acc[d] * inverse;
  lse = m + logf(l);
}

template <int D>
MESHPLAN_HD inline float row_delta(const float* dout, const float* out) {
  return dot<D>(dout, out);
}

// Key row `key` (k, v its rows) against query rows first_query .. first_query
// + n - 1 of the tile (q, dout: n rows of D; lse, delta: n values), adding
// dV += P^T dO and dK += scale dS^T Q for the rows that see this key.
template <int D>
MESHPLAN_HD inline void key_backward_tile(float* dk, float* dv, const float* k, const float* v, int key, const float* q,
                                          const float* dout, const float* lse, const float* delta, int first_query, int n,
                                          float scale) {
  for (int r = 0; r < n; ++r) {
    if (first_query + r < key) continue;  // causal: row i sees key j only when j <= i
    const float* q_r = q + r * D;
    const float* dout_r = dout + r * D;
    const float p = expf(scale * dot<D>(q_r, k) - lse[r]);
    const float ds = p * (dot<D>(dout_r, v) - delta[r]);
    for (int d = 0; d < D; ++d) {
      dv[d] += p * dout_r[d];
      dk[d] += ds * scale * q_r[d];
    }
  }
}

// Query row `query` (q, dout its rows; lse, delta its statistics) against key
// rows first_key .. first_key + n - 1 of the tile (k, v: n rows of D), adding
// dQ += scale dS K.
template <int D>
MESHPLAN_HD inline void query_backward_tile(float* dq, const float* q, const float* dout, float lse, float delta, int query,
                                            const float* k, const float* v, int first_key, int n, float scale) {
  for (int c = 0; c < n && first_key + c <= query; ++c) {
    const float* k_c = k + c * D;
    const float p = expf(scale * dot<D>(q, k_c) - lse);
    const float ds = p * (dot<D>(dout, v + c * D) - delta);
    for (int d = 0; d < D; ++d) dq[d] += ds * scale * k_c[d];
  }
}

}  // namespace meshplan::kernels::flash
