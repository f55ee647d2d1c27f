// Causal flash attention of kernels.hpp: FlashAttention-2's algorithm (Dao
// 2023, Algorithms 1 and 2) with the arithmetic of flash_attention_rows.hpp.
// One thread owns one query row (forward, dQ) or one key row (dK, dV); the
// other side streams through shared memory in tiles, converted from bf16 to
// fp32 as it is loaded. The forward keeps only each row's log-sum-exp; the
// backward recomputes the probabilities from it. Deterministic: every sum
// runs in a fixed order, and no float atomics are used (dQ has its own pass
// instead of FA2's atomic adds).
//
// A simple mapping, correct before fast: a thread keeps a whole row (up to 3 x
// 128 floats) in registers, which spill at D = 128, and the tiles are read with
// scalar loads; the tensor-core version (mma.sync over warp tiles) is to come.
#include <cuda_bf16.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/flash_attention_rows.hpp"
#include "kernels/cuda/kernels.hpp"

namespace meshplan::kernels::cuda {
namespace {

using flash::kBackwardKeyTile;
using flash::kBackwardQueryTile;
using flash::kKeyTile;
using flash::kQueryTile;

// The packed tensors' layout: qkv [B, T, (NH + 2 KVH) D] (query heads, then key
// heads, then value heads), out and dout [B, T, NH D].
struct Shape {
  int T, NH, KVH;
  __host__ __device__ long long qkv_width() const { return static_cast<long long>(NH + 2 * KVH); }
};

template <int D>
__device__ void load_row(float* row, const __nv_bfloat16* packed, long long offset) {
  for (int d = 0; d < D; ++d) row[d] = __bfloat162float(packed[offset + d]);
}

template <int D>
__device__ void store_row(__nv_bfloat16* packed, long long offset, const float* row) {
  for (int d = 0; d < D; ++d) packed[offset + d] = __float2bfloat16(row[d]);
}

// Keys and values first_key .. first_key + n - 1 of key/value head g into the
// block's shared tiles, spread over its threads.
template <int D>
__device__ void load_key_value_tile(float* k_tile, float* v_tile, const __nv_bfloat16* qkv, long long row_base,
                                    int first_key, int n, const Shape& s, int g) {
  const long long width = s.qkv_width() * D;
  flash::load_rows<D>(k_tile, qkv, row_base, first_key, n, s.T, width, static_cast<long long>(s.NH + g) * D, threadIdx.x,
                      blockDim.x);
  flash::load_rows<D>(v_tile, qkv, row_base, first_key, n, s.T, width, static_cast<long long>(s.NH + s.KVH + g) * D,
                      threadIdx.x, blockDim.x);
}

// What a forward or dQ block works on (grid: query-row tiles x B NH): head h
// of sequence b, key/value head g, its rows up to last_row, this thread's row.
template <int D>
struct QueryRows {
  int b, h, g, row, last_row;
  long long width, row_base;
  float scale;
  __device__ explicit QueryRows(const Shape& s)
      : b(blockIdx.y / s.NH),
        h(blockIdx.y % s.NH),
        g(h / (s.NH / s.KVH)),
        row(blockIdx.x * kQueryTile + threadIdx.x),
        last_row(min(static_cast<int>(blockIdx.x) * kQueryTile + kQueryTile, s.T) - 1),
        width(s.qkv_width() * D),
        row_base(static_cast<long long>(b) * s.T),
        scale(rsqrtf(static_cast<float>(D))) {}
};

// ---- The forward on tensor cores (sm_80 and later) ----
//
// A block of kMmaWarps warps takes kMmaRows query rows of one head, 16 rows a
// warp, and streams the keys and values through shared memory kMmaKeys rows
// at a time. Each warp computes its 16 x kMmaKeys scores with
// mma.sync.m16n8k16 (bf16 operands, fp32 accumulators), folds them into its
// rows' running maximum and sum in registers, and multiplies the
// probabilities, rounded to bf16, by the value tile with the same
// instruction: the score accumulators are laid out as the next product's A
// operand (FlashAttention-2's register reuse), so P never leaves registers.
// The row sums, and so the log-sum-exp the backward reads, add the fp32
// probabilities.
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"): lane =
// 4 g + t; A (16 x 16, row-major) holds rows g and g + 8, columns 2t, 2t + 1
// and 2t + 8, 2t + 9; B (16 x 8) holds column g, rows 2t, 2t + 1 and 2t + 8,
// 2t + 9; C (16 x 8, fp32) rows g and g + 8, columns 2t and 2t + 1. So a pair
// of B values is contiguous in K's rows (scores) and in V transposed (the
// value tile is stored transposed in shared memory for that reason). Rows are
// padded by 8 bf16, which puts the 32 lanes' 32-bit loads in 32 banks.
constexpr int kMmaWarps = 4;
constexpr int kMmaRows = 16 * kMmaWarps;
constexpr int kMmaKeys = 64;
constexpr int kPad = 8;

__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lo) in the low half
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

__device__ __forceinline__ std::uint32_t load_pair(const __nv_bfloat16* p) {
  return *reinterpret_cast<const std::uint32_t*>(p);
}

// d += a b for one m16n8k16 tile.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // the host launches this kernel on compute capability 8.0 and later only
#endif
}

// Rows first .. first + kMmaKeys - 1 of the head whose D values start at
// `column` of the packed [B, T, width] tensor into tile[row][D + kPad], or
// transposed into tile[d][kMmaKeys + kPad]; rows past the sequence's end are
// zeros (a masked probability is 0, and 0 times a stale NaN would not be).
// 16-byte loads, 8 bf16 each, spread over the block. The padded row strides:
template <int D>
constexpr int kRowStride = D + kPad;
constexpr int kColumnStride = kMmaKeys + kPad;

template <int D, bool kTransposed>
__device__ void load_tile(__nv_bfloat16* tile, const __nv_bfloat16* packed, long long row_base, int first, int T,
                          long long width, long long column) {
  constexpr int kChunks = D / 8;
  for (int e = threadIdx.x; e < kMmaKeys * kChunks; e += blockDim.x) {
    // Row-major: a warp's lanes write 16-byte pieces along rows. Transposed:
    // along one chunk's rows, so that a store instruction's lanes hit
    // consecutive bf16 of one tile row (one piece per row: 16 of 32 bytes of
    // each sector read, the other half by the next chunk's pass).
    const int r = kTransposed ? e % kMmaKeys : e / kChunks;
    const int d = (kTransposed ? e / kMmaKeys : e % kChunks) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (first + r < T) v = *reinterpret_cast<const uint4*>(packed + (row_base + first + r) * width + column + d);
    if constexpr (kTransposed) {
      const __nv_bfloat16* x = reinterpret_cast<const __nv_bfloat16*>(&v);
      for (int i = 0; i < 8; ++i) tile[(d + i) * (kMmaKeys + kPad) + r] = x[i];
    } else {
      *reinterpret_cast<uint4*>(tile + r * (D + kPad) + d) = v;
    }
  }
}

template <int D>
__global__ void __launch_bounds__(kMmaWarps * 32)
    forward_mma_kernel(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, Shape s) {
  __shared__ __align__(16) __nv_bfloat16 k_tile[kMmaKeys * (D + kPad)];  // also stages Q at the start
  __shared__ __align__(16) __nv_bfloat16 v_tile[D * (kMmaKeys + kPad)];  // transposed: [d][key]
  const int b = blockIdx.y / s.NH, h = blockIdx.y % s.NH, g_kv = h / (s.NH / s.KVH);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const long long width = s.qkv_width() * D, row_base = static_cast<long long>(b) * s.T;
  const int first_row = blockIdx.x * kMmaRows;
  const int last_row = min(first_row + kMmaRows, s.T) - 1;
  const int row0 = first_row + warp * 16 + g, row1 = row0 + 8;  // this thread's two rows
  // Scores in log2 units: exp(x - m) = exp2(x log2(e) - m log2(e)).
  const float scale_log2 = rsqrtf(static_cast<float>(D)) * 1.4426950408889634f;

  // This warp's 16 query rows as A fragments, through shared memory.
  load_tile<D, false>(k_tile, qkv, row_base, first_row, s.T, width, static_cast<long long>(h) * D);
  __syncthreads();
  std::uint32_t q[D / 16][4];
  const __nv_bfloat16* q_rows = k_tile + (warp * 16) * (D + kPad);
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    q[ks][0] = load_pair(q_rows + g * (D + kPad) + ks * 16 + 2 * t);
    q[ks][1] = load_pair(q_rows + (g + 8) * (D + kPad) + ks * 16 + 2 * t);
    q[ks][2] = load_pair(q_rows + g * (D + kPad) + ks * 16 + 2 * t + 8);
    q[ks][3] = load_pair(q_rows + (g + 8) * (D + kPad) + ks * 16 + 2 * t + 8);
  }
  __syncthreads();

  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  for (int first_key = 0; first_key <= last_row; first_key += kMmaKeys) {
    load_tile<D, false>(k_tile, qkv, row_base, first_key, s.T, width, static_cast<long long>(s.NH + g_kv) * D);
    load_tile<D, true>(v_tile, qkv, row_base, first_key, s.T, width, static_cast<long long>(s.NH + s.KVH + g_kv) * D);
    __syncthreads();
    if (first_key <= first_row + warp * 16 + 15) {  // else every key of the tile is after this warp's rows
      float sc[kMmaKeys / 8][4];
#pragma unroll
      for (int n = 0; n < kMmaKeys / 8; ++n) {
        sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
        const __nv_bfloat16* key_row = k_tile + (n * 8 + g) * (D + kPad);
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
          mma_bf16(sc[n], q[ks], load_pair(key_row + ks * 16 + 2 * t), load_pair(key_row + ks * 16 + 2 * t + 8));
        }
      }
      // Scale, mask (key after the row, or past the sequence), and the tile's row maxima.
      float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int n = 0; n < kMmaKeys / 8; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int key = first_key + n * 8 + 2 * t + (i & 1);
          const int row = i < 2 ? row0 : row1;
          const float x = key <= row && key < s.T ? sc[n][i] * scale_log2 : -INFINITY;
          sc[n][i] = x;
          tile_max[i / 2] = fmaxf(tile_max[i / 2], x);
        }
      }
      float alpha[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {  // the four lanes of a row hold its 64 scores
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
        const float m_new = fmaxf(m[r], tile_max[r]);  // finite: key 0 precedes every row
        alpha[r] = exp2f(m[r] - m_new);                // 0 on the first tile
        m[r] = m_new;
      }
      // Probabilities rounded to bf16, packed as the A fragments of P V.
      std::uint32_t p[kMmaKeys / 16][4];
      float row_sum[2] = {0.f, 0.f};
#pragma unroll
      for (int n = 0; n < kMmaKeys / 8; ++n) {
        const float p0 = exp2f(sc[n][0] - m[0]), p1 = exp2f(sc[n][1] - m[0]);
        const float p2 = exp2f(sc[n][2] - m[1]), p3 = exp2f(sc[n][3] - m[1]);
        const __nv_bfloat162 top = __floats2bfloat162_rn(p0, p1);
        const __nv_bfloat162 bottom = __floats2bfloat162_rn(p2, p3);
        row_sum[0] += p0 + p1;
        row_sum[1] += p2 + p3;
        // Score tile n covers keys 8n .. 8n + 7: the low (even n) or high (odd n) half of P's k-step n / 2.
        p[n / 2][(n % 2) * 2 + 0] = *reinterpret_cast<const std::uint32_t*>(&top);
        p[n / 2][(n % 2) * 2 + 1] = *reinterpret_cast<const std::uint32_t*>(&bottom);
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
        row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
        l[r] = l[r] * alpha[r] + row_sum[r];
      }
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[n][0] *= alpha[0];
        o[n][1] *= alpha[0];
        o[n][2] *= alpha[1];
        o[n][3] *= alpha[1];
        const __nv_bfloat16* value_column = v_tile + (n * 8 + g) * (kMmaKeys + kPad);
#pragma unroll
        for (int kk = 0; kk < kMmaKeys / 16; ++kk) {
          mma_bf16(o[n], p[kk], load_pair(value_column + kk * 16 + 2 * t), load_pair(value_column + kk * 16 + 2 * t + 8));
        }
      }
    }
    __syncthreads();
  }

  const float ln2 = 0.6931471805599453f;
  const int rows[2] = {row0, row1};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= s.T) continue;
    const float inverse = 1.f / l[r];
    __nv_bfloat16* out_row = out + (row_base + rows[r]) * s.NH * D + static_cast<long long>(h) * D;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<std::uint32_t*>(out_row + n * 8 + 2 * t) = pack_bf16(o[n][2 * r] * inverse, o[n][2 * r + 1] * inverse);
    }
    if (t == 0) lse[(static_cast<long long>(b) * s.NH + h) * s.T + rows[r]] = m[r] * ln2 + logf(l[r]);
  }
}

// delta[b, h, t] = dout[b, t, h] . out[b, t, h]: one thread per row.
template <int D>
__global__ void delta_kernel(float* delta, const __nv_bfloat16* dout, const __nv_bfloat16* out, long long rows, Shape s) {
  const long long index = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;  // (b, h, t)
  if (index >= rows) return;
  const long long t = index % s.T, bh = index / s.T, b = bh / s.NH, h = bh % s.NH;
  const long long offset = (b * s.T + t) * s.NH * D + h * D;
  float sum = 0;
  for (int d = 0; d < D; ++d) sum += __bfloat162float(dout[offset + d]) * __bfloat162float(out[offset + d]);
  delta[index] = sum;
}

template <int D>
__global__ void __launch_bounds__(kBackwardKeyTile)
    key_backward_kernel(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                        const float* delta, Shape s) {
  __shared__ float q_tile[kBackwardQueryTile * D];
  __shared__ float dout_tile[kBackwardQueryTile * D];
  __shared__ float lse_tile[kBackwardQueryTile];
  __shared__ float delta_tile[kBackwardQueryTile];
  const int b = blockIdx.y / s.KVH, g = blockIdx.y % s.KVH, group = s.NH / s.KVH;
  const long long width = s.qkv_width() * D, out_width = static_cast<long long>(s.NH) * D;
  const long long row_base = static_cast<long long>(b) * s.T;
  const int first_key = blockIdx.x * kBackwardKeyTile, key = first_key + threadIdx.x;
  const float scale = rsqrtf(static_cast<float>(D));
  const long long k_column = static_cast<long long>(s.NH + g) * D, v_column = static_cast<long long>(s.NH + s.KVH + g) * D;
  float k[D], v[D], dk[D], dv[D];
  for (int d = 0; d < D; ++d) dk[d] = dv[d] = 0;
  if (key < s.T) {
    load_row<D>(k, qkv, (row_base + key) * width + k_column);
    load_row<D>(v, qkv, (row_base + key) * width + v_column);
  }
  for (int h = g * group; h < (g + 1) * group; ++h) {
    const long long stats = (static_cast<long long>(b) * s.NH + h) * s.T;
    for (int first_query = first_key; first_query < s.T; first_query += kBackwardQueryTile) {
      const int n = min(kBackwardQueryTile, s.T - first_query);
      flash::load_rows<D>(q_tile, qkv, row_base, first_query, n, s.T, width, static_cast<long long>(h) * D, threadIdx.x,
                          blockDim.x);
      flash::load_rows<D>(dout_tile, dout, row_base, first_query, n, s.T, out_width, static_cast<long long>(h) * D,
                          threadIdx.x, blockDim.x);
      for (int r = threadIdx.x; r < n; r += blockDim.x) {
        lse_tile[r] = lse[stats + first_query + r];
        delta_tile[r] = delta[stats + first_query + r];
      }
      __syncthreads();
      if (key < s.T) {
        flash::key_backward_tile<D>(dk, dv, k, v, key, q_tile, dout_tile, lse_tile, delta_tile, first_query, n, scale);
      }
      __syncthreads();
    }
  }
  if (key < s.T) {
    store_row<D>(dqkv, (row_base + key) * width + k_column, dk);
    store_row<D>(dqkv, (row_base + key) * width + v_column, dv);
  }
}

template <int D>
__global__ void __launch_bounds__(kQueryTile)
    query_backward_kernel(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                          const float* delta, Shape s) {
  __shared__ float k_tile[kKeyTile * D];
  __shared__ float v_tile[kKeyTile * D];
  const QueryRows<D> r(s);
  const int b = r.b, h = r.h, g = r.g, row = r.row, last_row = r.last_row;
  const long long width = r.width, row_base = r.row_base;
  const float scale = r.scale;
  float q[D], dout_row[D], dq[D];
  float row_lse = 0, row_delta = 0;
  for (int d = 0; d < D; ++d) dq[d] = 0;
  if (row < s.T) {
    load_row<D>(q, qkv, (row_base + row) * width + static_cast<long long>(h) * D);
    load_row<D>(dout_row, dout, (row_base + row) * s.NH * D + static_cast<long long>(h) * D);
    const long long stat = (static_cast<long long>(b) * s.NH + h) * s.T + row;
    row_lse = lse[stat];
    row_delta = delta[stat];
  }
  for (int first_key = 0; first_key <= last_row; first_key += kKeyTile) {
    const int n_tile = min(kKeyTile, s.T - first_key);
    load_key_value_tile<D>(k_tile, v_tile, qkv, row_base, first_key, n_tile, s, g);
    __syncthreads();
    if (row < s.T) {
      flash::query_backward_tile<D>(dq, q, dout_row, row_lse, row_delta, row, k_tile, v_tile, first_key, n_tile, scale);
    }
    __syncthreads();
  }
  if (row < s.T) store_row<D>(dqkv, (row_base + row) * width + static_cast<long long>(h) * D, dq);
}

int blocks(std::int64_t n, int per_block) { return static_cast<int>((n + per_block - 1) / per_block); }

// ---- The backward on tensor cores (sm_80 and later) ----
//
// Two passes, each summing in a fixed order (no float atomics), as above:
// the key pass gives each warp 16 key rows and accumulates their dK and dV
// over the query tiles that see them (and over a key head's group of query
// heads); the query pass gives each warp 16 query rows and accumulates dQ
// over the key tiles they see. Both recompute the probabilities from the
// forward's log-sum-exp, with the same instruction and fragment layouts as
// the forward; an operand whose pairs must run along the other dimension is
// read from a transposed copy of its tile. Their tiles need more than 48 KiB
// of shared memory, so they are dynamic.

// The A fragments (k-step ks) of 16 rows of a row-major tile.
__device__ __forceinline__ void load_a(std::uint32_t (&a)[4], const __nv_bfloat16* rows, int stride, int ks, int g, int t) {
  a[0] = load_pair(rows + g * stride + ks * 16 + 2 * t);
  a[1] = load_pair(rows + (g + 8) * stride + ks * 16 + 2 * t);
  a[2] = load_pair(rows + g * stride + ks * 16 + 2 * t + 8);
  a[3] = load_pair(rows + (g + 8) * stride + ks * 16 + 2 * t + 8);
}

// acc (16 x 8 N8 tiles) += A B with A (16 x K) in fragments a, and B's column
// j stored as a row of b (stride apart), so that the k pairs are contiguous.
template <int K, int N8>
__device__ __forceinline__ void mma_tiles(float (&acc)[N8][4], const std::uint32_t (&a)[K / 16][4], const __nv_bfloat16* b,
                                          int stride, int g, int t) {
#pragma unroll
  for (int ks = 0; ks < K / 16; ++ks) {
#pragma unroll
    for (int n = 0; n < N8; ++n) {
      const __nv_bfloat16* column = b + (n * 8 + g) * stride + ks * 16 + 2 * t;
      mma_bf16(acc[n], a[ks], load_pair(column), load_pair(column + 8));
    }
  }
}

// The same with A read from 16 rows of a row-major tile, one k-step at a time.
template <int K, int N8>
__device__ __forceinline__ void mma_tiles_a_shared(float (&acc)[N8][4], const __nv_bfloat16* a_rows, int a_stride,
                                                   const __nv_bfloat16* b, int stride, int g, int t) {
#pragma unroll
  for (int ks = 0; ks < K / 16; ++ks) {
    std::uint32_t a[4];
    load_a(a, a_rows, a_stride, ks, g, t);
#pragma unroll
    for (int n = 0; n < N8; ++n) {
      const __nv_bfloat16* column = b + (n * 8 + g) * stride + ks * 16 + 2 * t;
      mma_bf16(acc[n], a, load_pair(column), load_pair(column + 8));
    }
  }
}

// C tiles (16 x 8 each, fp32) as the bf16 A fragments of the next product:
// tiles 2j and 2j + 1 are the two halves of k-step j.
template <int N8>
__device__ __forceinline__ void to_a_fragments(std::uint32_t (&a)[N8 / 2][4], const float (&c)[N8][4]) {
#pragma unroll
  for (int n = 0; n < N8; ++n) {
    a[n / 2][(n % 2) * 2 + 0] = pack_bf16(c[n][0], c[n][1]);
    a[n / 2][(n % 2) * 2 + 1] = pack_bf16(c[n][2], c[n][3]);
  }
}

template <int D>
constexpr int key_pass_shared_bytes() {
  return (4 * kMmaKeys * kRowStride<D> + 2 * D * kColumnStride) * 2 + 2 * kMmaKeys * 4;
}

template <int D>
constexpr int query_pass_shared_bytes() {
  return (2 * kMmaKeys * kRowStride<D> + D * kColumnStride) * 2;
}

constexpr float kLog2e = 1.4426950408889634f;

template <int D>
__global__ void __launch_bounds__(kMmaWarps * 32)
    key_backward_mma_kernel(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                            const float* delta, Shape s) {
  extern __shared__ __align__(16) unsigned char shared[];
  __nv_bfloat16* k_rows = reinterpret_cast<__nv_bfloat16*>(shared);  // this block's keys, [key][d]
  __nv_bfloat16* v_rows = k_rows + kMmaKeys * kRowStride<D>;
  __nv_bfloat16* q_rows = v_rows + kMmaKeys * kRowStride<D>;  // the query tile, [query][d]
  __nv_bfloat16* dout_rows = q_rows + kMmaKeys * kRowStride<D>;
  __nv_bfloat16* q_columns = dout_rows + kMmaKeys * kRowStride<D>;  // the same transposed, [d][query]
  __nv_bfloat16* dout_columns = q_columns + D * kColumnStride;
  float* lse_tile = reinterpret_cast<float*>(dout_columns + D * kColumnStride);  // log2 units
  float* delta_tile = lse_tile + kMmaKeys;
  const int b = blockIdx.y / s.KVH, g_kv = blockIdx.y % s.KVH, group = s.NH / s.KVH;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const long long width = s.qkv_width() * D, out_width = static_cast<long long>(s.NH) * D;
  const long long row_base = static_cast<long long>(b) * s.T;
  const long long k_column = static_cast<long long>(s.NH + g_kv) * D, v_column = static_cast<long long>(s.NH + s.KVH + g_kv) * D;
  const int first_key = blockIdx.x * kMmaKeys, warp_first_key = first_key + warp * 16;
  const int keys[2] = {warp_first_key + g, warp_first_key + g + 8};
  const float scale = rsqrtf(static_cast<float>(D)), scale_log2 = scale * kLog2e;
  load_tile<D, false>(k_rows, qkv, row_base, first_key, s.T, width, k_column);
  load_tile<D, false>(v_rows, qkv, row_base, first_key, s.T, width, v_column);
  const __nv_bfloat16* warp_k = k_rows + warp * 16 * kRowStride<D>;
  const __nv_bfloat16* warp_v = v_rows + warp * 16 * kRowStride<D>;

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) dk[n][i] = dv[n][i] = 0.f;
  }
  for (int h = g_kv * group; h < (g_kv + 1) * group; ++h) {
    const long long stats = (static_cast<long long>(b) * s.NH + h) * s.T;
    for (int first_query = first_key; first_query < s.T; first_query += kMmaKeys) {
      __syncthreads();  // the last tile's readers are done
      load_tile<D, false>(q_rows, qkv, row_base, first_query, s.T, width, static_cast<long long>(h) * D);
      load_tile<D, true>(q_columns, qkv, row_base, first_query, s.T, width, static_cast<long long>(h) * D);
      load_tile<D, false>(dout_rows, dout, row_base, first_query, s.T, out_width, static_cast<long long>(h) * D);
      load_tile<D, true>(dout_columns, dout, row_base, first_query, s.T, out_width, static_cast<long long>(h) * D);
      for (int r = threadIdx.x; r < kMmaKeys; r += blockDim.x) {
        const bool inside = first_query + r < s.T;
        lse_tile[r] = inside ? lse[stats + first_query + r] * kLog2e : 0.f;
        delta_tile[r] = inside ? delta[stats + first_query + r] : 0.f;
      }
      __syncthreads();
      if (first_query + kMmaKeys - 1 < warp_first_key) continue;  // every query of the tile precedes this warp's keys

      // P^T (16 keys x 64 queries) = exp(scale K Q^T - lse), masked to 0.
      float pt[kMmaKeys / 8][4];
#pragma unroll
      for (int n = 0; n < kMmaKeys / 8; ++n) pt[n][0] = pt[n][1] = pt[n][2] = pt[n][3] = 0.f;
      mma_tiles_a_shared<D, kMmaKeys / 8>(pt, warp_k, kRowStride<D>, q_rows, kRowStride<D>, g, t);
#pragma unroll
      for (int n = 0; n < kMmaKeys / 8; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int column = n * 8 + 2 * t + (i & 1), query = first_query + column, key = keys[i / 2];
          pt[n][i] = query >= key && query < s.T && key < s.T ? exp2f(pt[n][i] * scale_log2 - lse_tile[column]) : 0.f;
        }
      }
      {  // dV += P^T dO
        std::uint32_t a[kMmaKeys / 16][4];
        to_a_fragments<kMmaKeys / 8>(a, pt);
        mma_tiles<kMmaKeys, D / 8>(dv, a, dout_columns, kColumnStride, g, t);
      }
      // dS^T = P^T (V dO^T - delta), then dK += dS^T Q (scaled at the end).
      float dst[kMmaKeys / 8][4];
#pragma unroll
      for (int n = 0; n < kMmaKeys / 8; ++n) dst[n][0] = dst[n][1] = dst[n][2] = dst[n][3] = 0.f;
      mma_tiles_a_shared<D, kMmaKeys / 8>(dst, warp_v, kRowStride<D>, dout_rows, kRowStride<D>, g, t);
#pragma unroll
      for (int n = 0; n < kMmaKeys / 8; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) dst[n][i] = pt[n][i] * (dst[n][i] - delta_tile[n * 8 + 2 * t + (i & 1)]);
      }
      std::uint32_t a[kMmaKeys / 16][4];
      to_a_fragments<kMmaKeys / 8>(a, dst);
      mma_tiles<kMmaKeys, D / 8>(dk, a, q_columns, kColumnStride, g, t);
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (keys[r] >= s.T) continue;
    __nv_bfloat16* row = dqkv + (row_base + keys[r]) * width;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<std::uint32_t*>(row + k_column + n * 8 + 2 * t) = pack_bf16(dk[n][2 * r] * scale, dk[n][2 * r + 1] * scale);
      *reinterpret_cast<std::uint32_t*>(row + v_column + n * 8 + 2 * t) = pack_bf16(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  }
}

template <int D>
__global__ void __launch_bounds__(kMmaWarps * 32)
    query_backward_mma_kernel(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                              const float* delta, Shape s) {
  extern __shared__ __align__(16) unsigned char shared[];
  __nv_bfloat16* k_rows = reinterpret_cast<__nv_bfloat16*>(shared);  // the key tile, [key][d]; first the block's queries
  __nv_bfloat16* v_rows = k_rows + kMmaKeys * kRowStride<D>;        // the value tile; first the block's dout rows
  __nv_bfloat16* k_columns = v_rows + kMmaKeys * kRowStride<D>;     // the key tile transposed, [d][key]
  const int b = blockIdx.y / s.NH, h = blockIdx.y % s.NH, g_kv = h / (s.NH / s.KVH);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const long long width = s.qkv_width() * D, out_width = static_cast<long long>(s.NH) * D;
  const long long row_base = static_cast<long long>(b) * s.T;
  const long long k_column = static_cast<long long>(s.NH + g_kv) * D, v_column = static_cast<long long>(s.NH + s.KVH + g_kv) * D;
  const int first_row = blockIdx.x * kMmaRows, last_row = min(first_row + kMmaRows, s.T) - 1;
  const int rows[2] = {first_row + warp * 16 + g, first_row + warp * 16 + g + 8};
  const float scale = rsqrtf(static_cast<float>(D)), scale_log2 = scale * kLog2e;
  const long long stats = (static_cast<long long>(b) * s.NH + h) * s.T;
  float row_lse[2], row_delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_lse[r] = rows[r] < s.T ? lse[stats + rows[r]] * kLog2e : 0.f;
    row_delta[r] = rows[r] < s.T ? delta[stats + rows[r]] : 0.f;
  }
  // This warp's query and dout rows as A fragments, through shared memory.
  load_tile<D, false>(k_rows, qkv, row_base, first_row, s.T, width, static_cast<long long>(h) * D);
  load_tile<D, false>(v_rows, dout, row_base, first_row, s.T, out_width, static_cast<long long>(h) * D);
  __syncthreads();
  std::uint32_t q[D / 16][4], dout_a[D / 16][4];
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    load_a(q[ks], k_rows + warp * 16 * kRowStride<D>, kRowStride<D>, ks, g, t);
    load_a(dout_a[ks], v_rows + warp * 16 * kRowStride<D>, kRowStride<D>, ks, g, t);
  }
  float dq[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.f;

  for (int first_key = 0; first_key <= last_row; first_key += kMmaKeys) {
    __syncthreads();  // the last tile's (or the fragments') readers are done
    load_tile<D, false>(k_rows, qkv, row_base, first_key, s.T, width, k_column);
    load_tile<D, true>(k_columns, qkv, row_base, first_key, s.T, width, k_column);
    load_tile<D, false>(v_rows, qkv, row_base, first_key, s.T, width, v_column);
    __syncthreads();
    if (first_key > first_row + warp * 16 + 15) continue;  // every key of the tile is after this warp's rows
    float p[kMmaKeys / 8][4], ds[kMmaKeys / 8][4];
#pragma unroll
    for (int n = 0; n < kMmaKeys / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) p[n][i] = ds[n][i] = 0.f;
    }
    mma_tiles<D, kMmaKeys / 8>(p, q, k_rows, kRowStride<D>, g, t);          // Q K^T
    mma_tiles<D, kMmaKeys / 8>(ds, dout_a, v_rows, kRowStride<D>, g, t);    // dO V^T
#pragma unroll
    for (int n = 0; n < kMmaKeys / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = first_key + n * 8 + 2 * t + (i & 1), row = rows[i / 2];
        const float prob = key <= row && key < s.T && row < s.T ? exp2f(p[n][i] * scale_log2 - row_lse[i / 2]) : 0.f;
        ds[n][i] = prob * (ds[n][i] - row_delta[i / 2]);
      }
    }
    std::uint32_t a[kMmaKeys / 16][4];
    to_a_fragments<kMmaKeys / 8>(a, ds);
    mma_tiles<kMmaKeys, D / 8>(dq, a, k_columns, kColumnStride, g, t);  // dQ += dS K (scaled at the end)
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= s.T) continue;
    __nv_bfloat16* row = dqkv + (row_base + rows[r]) * width + static_cast<long long>(h) * D;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<std::uint32_t*>(row + n * 8 + 2 * t) = pack_bf16(dq[n][2 * r] * scale, dq[n][2 * r + 1] * scale);
    }
  }
}

template <int D>
void launch_backward(__nv_bfloat16* dqkv, float* delta, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                     const __nv_bfloat16* out, const float* lse, std::int64_t B, const Shape& s, cudaStream_t stream) {
  const long long rows = B * s.NH * static_cast<long long>(s.T);
  constexpr int kDeltaThreads = 256;
  delta_kernel<D><<<blocks(rows, kDeltaThreads), kDeltaThreads, 0, stream>>>(delta, dout, out, rows, s);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
  constexpr int key_bytes = key_pass_shared_bytes<D>(), query_bytes = query_pass_shared_bytes<D>();
  MESHPLAN_CUDA_CHECK(cudaFuncSetAttribute(key_backward_mma_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, key_bytes));
  MESHPLAN_CUDA_CHECK(
      cudaFuncSetAttribute(query_backward_mma_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, query_bytes));
  const dim3 key_grid(blocks(s.T, kMmaKeys), static_cast<unsigned>(B * s.KVH));
  key_backward_mma_kernel<D><<<key_grid, kMmaWarps * 32, key_bytes, stream>>>(dqkv, dout, qkv, lse, delta, s);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
  const dim3 query_grid(blocks(s.T, kMmaRows), static_cast<unsigned>(B * s.NH));
  query_backward_mma_kernel<D><<<query_grid, kMmaWarps * 32, query_bytes, stream>>>(dqkv, dout, qkv, lse, delta, s);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

// Compute capability 8.0 or later (the bf16 mma), and the alignment the
// 16-byte tile loads and the 4-byte pair stores need.
void check_device_and_alignment(std::initializer_list<const void*> aligned16, std::initializer_list<const void*> aligned4) {
  int device = 0, major = 0;
  MESHPLAN_CUDA_CHECK(cudaGetDevice(&device));
  MESHPLAN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 8) throw std::invalid_argument("flash attention: needs compute capability 8.0 or later (bf16 tensor cores)");
  for (const void* p : aligned16) {
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) throw std::invalid_argument("flash attention: qkv and dout must be 16-byte aligned");
  }
  for (const void* p : aligned4) {
    if (reinterpret_cast<std::uintptr_t>(p) % 4 != 0) throw std::invalid_argument("flash attention: out and dqkv must be 4-byte aligned");
  }
}

Shape checked_shape(std::int64_t B, std::int64_t T, std::int64_t NH, std::int64_t KVH, std::int64_t D) {
  if (D != 64 && D != 128) throw std::invalid_argument("flash attention: head dimension " + std::to_string(D) + " (64 or 128)");
  if (B < 1 || T < 1 || NH < 1 || KVH < 1 || NH % KVH != 0) {
    throw std::invalid_argument("flash attention: B, T, NH, KVH must be positive and KVH must divide NH");
  }
  if (B * NH > 65535 || T > (1LL << 30)) throw std::invalid_argument("flash attention: B x NH over 65535 or T too long");
  return {static_cast<int>(T), static_cast<int>(NH), static_cast<int>(KVH)};
}

}  // namespace

void flash_attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, std::int64_t B, std::int64_t T,
                             std::int64_t NH, std::int64_t KVH, std::int64_t D, cudaStream_t stream) {
  const Shape s = checked_shape(B, T, NH, KVH, D);
  check_device_and_alignment({qkv}, {out});
  const dim3 grid(blocks(T, kMmaRows), static_cast<unsigned>(B * NH));
  if (D == 64) forward_mma_kernel<64><<<grid, kMmaWarps * 32, 0, stream>>>(out, lse, qkv, s);
  else forward_mma_kernel<128><<<grid, kMmaWarps * 32, 0, stream>>>(out, lse, qkv, s);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void flash_attention_backward(__nv_bfloat16* dqkv, float* delta, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                              const __nv_bfloat16* out, const float* lse, std::int64_t B, std::int64_t T, std::int64_t NH,
                              std::int64_t KVH, std::int64_t D, cudaStream_t stream) {
  const Shape s = checked_shape(B, T, NH, KVH, D);
  check_device_and_alignment({qkv, dout}, {dqkv, out});
  if (D == 64) launch_backward<64>(dqkv, delta, dout, qkv, out, lse, B, s, stream);
  else launch_backward<128>(dqkv, delta, dout, qkv, out, lse, B, s, stream);
}

}  // namespace meshplan::kernels::cuda
