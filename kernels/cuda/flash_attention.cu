// Causal flash attention of kernels.hpp on tensor cores: FlashAttention-2's
// algorithm (Dao 2023, Algorithms 1 and 2) with mma.sync.m16n8k16 (bf16
// operands, fp32 accumulators; compute capability 8.0 and later). The forward
// keeps only each row's log-sum-exp; the backward recomputes the
// probabilities from it. Deterministic: every sum runs in a fixed order and
// no float atomics are used (dQ has its own pass instead of FA2's atomic
// adds).
//
// Each warp owns 16 rows (query rows in the forward and the dQ pass, key rows
// in the dK/dV pass) and the other side streams through shared memory in
// tiles of kTile rows, loaded with 16-byte loads. Products chain in
// registers: the fp32 accumulators of one product are laid out as the bf16 A
// operand of the next (FlashAttention-2's register reuse), so probabilities
// and their gradients never leave registers.
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"): lane =
// 4 g + t; A (16 x 16, row-major) holds rows g and g + 8, columns 2t, 2t + 1
// and 2t + 8, 2t + 9; B (16 x 8) column g, rows 2t, 2t + 1 and 2t + 8,
// 2t + 9; C (16 x 8, fp32) rows g and g + 8, columns 2t and 2t + 1. A B
// operand whose k pairs lie along a tile's rows (K in Q K^T, dO in dO V^T) is
// read with 32-bit loads; one whose pairs lie down its columns (V in P V, dO
// in P^T dO, Q in dS^T Q, K in dS K) with ldmatrix .trans. Tile rows are
// padded by 8 bf16, which puts a warp's loads in 32 different banks.
#include <cuda_bf16.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/kernels.hpp"

namespace meshplan::kernels::cuda {
namespace {

// The packed tensors' layout: qkv [B, T, (NH + 2 KVH) D] (query heads, then key
// heads, then value heads), out and dout [B, T, NH D].
struct Shape {
  int T, NH, KVH;
  __host__ __device__ long long qkv_width() const { return static_cast<long long>(NH + 2 * KVH); }
};

constexpr int kTile = 64;           // rows of a streamed tile
constexpr int kPad = 8;             // bf16 of padding per tile row
constexpr int kForwardWarps = 8;    // the forward: 128 query rows a block, so each tile feeds 8 warps
constexpr int kBackwardWarps = 4;   // the backward passes: 64 rows a block (kTile)
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kBackwardWarps * 16 == kTile, "a backward block's rows are one tile");

template <int D>
constexpr int kRowStride = D + kPad;

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
  __trap();  // the host launches these kernels on compute capability 8.0 and later only
#endif
}

// The B fragments of two n-tiles (columns n0 .. n0 + 15) for the k-step at
// rows k0 .. k0 + 15 of a row-major [k][n] tile: ldmatrix .x4 .trans, lane l
// giving row l % 8 of 8 x 8 matrix l / 8 (matrices: k0 and k0 + 8 at n0, then
// the same at n0 + 8). b[0], b[1] are the first tile's (k 2t, 2t + 1 and
// 2t + 8, 2t + 9 of column g), b[2], b[3] the second's.
__device__ __forceinline__ void load_b_transposed(std::uint32_t (&b)[4], const __nv_bfloat16* rows, int stride, int k0,
                                                  int n0, int lane) {
  const int matrix = lane / 8, row = lane % 8;
  const __nv_bfloat16* p = rows + (k0 + (matrix & 1) * 8 + row) * stride + n0 + (matrix >> 1) * 8;
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  const auto address = static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
               : "r"(address));
#else
  (void)p;
  __trap();
#endif
}

// The A fragments (k-step ks) of 16 rows of a row-major tile.
__device__ __forceinline__ void load_a(std::uint32_t (&a)[4], const __nv_bfloat16* rows, int stride, int ks, int g, int t) {
  a[0] = load_pair(rows + g * stride + ks * 16 + 2 * t);
  a[1] = load_pair(rows + (g + 8) * stride + ks * 16 + 2 * t);
  a[2] = load_pair(rows + g * stride + ks * 16 + 2 * t + 8);
  a[3] = load_pair(rows + (g + 8) * stride + ks * 16 + 2 * t + 8);
}

// acc (N8 tiles of 16 x 8) += A B^T-stored: A (16 x K) in fragments a, and
// B's column j stored as row j of `b` (Q K^T, dO V^T), k pairs contiguous.
template <int K, int N8>
__device__ __forceinline__ void mma_b_rows(float (&acc)[N8][4], const std::uint32_t (&a)[K / 16][4], const __nv_bfloat16* b,
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

// The same with A read from 16 rows of a row-major tile, a k-step at a time.
template <int K, int N8>
__device__ __forceinline__ void mma_a_shared_b_rows(float (&acc)[N8][4], const __nv_bfloat16* a_rows, int a_stride,
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

// acc (N8 tiles) += A B with B row-major [k][n] in `b` (P V, P^T dO, dS^T Q,
// dS K): its fragments through ldmatrix .trans, two n-tiles at a time.
template <int K, int N8>
__device__ __forceinline__ void mma_b_transposed(float (&acc)[N8][4], const std::uint32_t (&a)[K / 16][4],
                                                 const __nv_bfloat16* b, int stride, int lane) {
  static_assert(N8 % 2 == 0, "n-tiles come in pairs");
#pragma unroll
  for (int ks = 0; ks < K / 16; ++ks) {
#pragma unroll
    for (int n = 0; n < N8; n += 2) {
      std::uint32_t frag[4];
      load_b_transposed(frag, b, stride, ks * 16, n * 8, lane);
      mma_bf16(acc[n], a[ks], frag[0], frag[1]);
      mma_bf16(acc[n + 1], a[ks], frag[2], frag[3]);
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

template <int N, int M>
__device__ __forceinline__ void zero(float (&x)[N][M]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int j = 0; j < M; ++j) x[i][j] = 0.f;
  }
}

// Rows first .. first + kTile - 1 of the head whose D values start at
// `column` of the packed [B, T, width] tensor into tile[row][D + kPad], in
// 16-byte pieces spread over the block; rows past the sequence's end are
// zeros (a masked probability is 0, and 0 times a stale NaN would not be).
template <int D>
__device__ void load_tile(__nv_bfloat16* tile, const __nv_bfloat16* packed, long long row_base, int first, int T,
                          long long width, long long column) {
  constexpr int kChunks = D / 8;
  for (int e = threadIdx.x; e < kTile * kChunks; e += blockDim.x) {
    const int r = e / kChunks, d = (e % kChunks) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (first + r < T) v = *reinterpret_cast<const uint4*>(packed + (row_base + first + r) * width + column + d);
    *reinterpret_cast<uint4*>(tile + r * kRowStride<D> + d) = v;
  }
}

// The A fragments of one 16-row slice of a packed tensor, straight from
// global memory (read once per block); rows past the end are zeros.
template <int D>
__device__ void load_a_global(std::uint32_t (&a)[D / 16][4], const __nv_bfloat16* packed, long long row_base, int first,
                              int T, long long width, long long column, int g, int t) {
  const int rows[2] = {first + g, first + g + 8};
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = rows[i % 2];
      const int d = ks * 16 + 2 * t + (i / 2) * 8;
      a[ks][i] = row < T ? load_pair(packed + (row_base + row) * width + column + d) : 0u;
    }
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

// The forward: a block of kForwardWarps warps takes 16 query rows a warp of
// one head, and streams the keys and values of its key head through shared
// memory. A warp folds each tile's 16 x 64 scores into its rows' running
// maximum and sum (fp32, in registers; the four lanes of a row combine by
// shuffles), rescales its output accumulators, and adds P V with P rounded
// to bf16 (as FlashAttention-2 does); the row sums, and so the log-sum-exp
// the backward reads, add the fp32 probabilities.
template <int D>
__global__ void __launch_bounds__(kForwardWarps * 32)
    forward_kernel(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, Shape s) {
  __shared__ __align__(16) __nv_bfloat16 k_tile[kTile * kRowStride<D>];
  __shared__ __align__(16) __nv_bfloat16 v_tile[kTile * kRowStride<D>];
  const int b = blockIdx.y / s.NH, h = blockIdx.y % s.NH, g_kv = h / (s.NH / s.KVH);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const long long width = s.qkv_width() * D, row_base = static_cast<long long>(b) * s.T;
  const int first_row = blockIdx.x * kForwardWarps * 16, last_row = min(first_row + kForwardWarps * 16, s.T) - 1;
  const int warp_first_row = first_row + warp * 16;
  const int rows[2] = {warp_first_row + g, warp_first_row + g + 8};
  // Scores in log2 units: exp(x - m) = exp2(x log2(e) - m log2(e)).
  const float scale_log2 = rsqrtf(static_cast<float>(D)) * kLog2e;
  const long long k_column = static_cast<long long>(s.NH + g_kv) * D, v_column = static_cast<long long>(s.NH + s.KVH + g_kv) * D;

  std::uint32_t q[D / 16][4];
  load_a_global<D>(q, qkv, row_base, warp_first_row, s.T, width, static_cast<long long>(h) * D, g, t);
  float o[D / 8][4];
  zero(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  for (int first_key = 0; first_key <= last_row; first_key += kTile) {
    __syncthreads();  // the last tile's readers are done
    load_tile<D>(k_tile, qkv, row_base, first_key, s.T, width, k_column);
    load_tile<D>(v_tile, qkv, row_base, first_key, s.T, width, v_column);
    __syncthreads();
    if (first_key > warp_first_row + 15) continue;  // every key of the tile is after this warp's rows
    float sc[kTile / 8][4];
    zero(sc);
    mma_b_rows<D, kTile / 8>(sc, q, k_tile, kRowStride<D>, g, t);  // Q K^T
    // Scale, mask (a key after the row, or past the sequence), and the tile's row maxima.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = first_key + n * 8 + 2 * t + (i & 1);
        const float x = key <= rows[i / 2] && key < s.T ? sc[n][i] * scale_log2 : -INFINITY;
        sc[n][i] = x;
        tile_max[i / 2] = fmaxf(tile_max[i / 2], x);
      }
    }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float m_new = fmaxf(m[r], tile_max[r]);  // finite: key 0 precedes every row
      alpha[r] = exp2f(m[r] - m_new);                // 0 on the first tile
      m[r] = m_new;
    }
    float row_sum[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        sc[n][i] = exp2f(sc[n][i] - m[i / 2]);
        row_sum[i / 2] += sc[n][i];
      }
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
    }
    std::uint32_t p[kTile / 16][4];
    to_a_fragments<kTile / 8>(p, sc);
    mma_b_transposed<kTile, D / 8>(o, p, v_tile, kRowStride<D>, lane);  // P V
  }

  const float ln2 = 0.6931471805599453f;
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

// The backward, in two passes that each sum in a fixed order: the key pass
// gives each warp 16 key rows and accumulates their dK and dV over the query
// tiles that see them (and over a key head's group of query heads); the
// query pass gives each warp 16 query rows and accumulates dQ over the key
// tiles they see. Both recompute P = exp(scale Q K^T - lse); dS = P (dP -
// delta) with dP = dO V^T; dK = scale dS^T Q, dQ = scale dS K, dV = P^T dO.

template <int D>
constexpr int key_pass_shared_bytes() {
  return 4 * kTile * kRowStride<D> * 2 + 2 * kTile * 4;
}

template <int D>
__global__ void __launch_bounds__(kBackwardWarps * 32)
    key_backward_kernel(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                        const float* delta, Shape s) {
  extern __shared__ __align__(16) unsigned char shared[];
  __nv_bfloat16* k_rows = reinterpret_cast<__nv_bfloat16*>(shared);  // this block's keys, [key][d]
  __nv_bfloat16* v_rows = k_rows + kTile * kRowStride<D>;
  __nv_bfloat16* q_rows = v_rows + kTile * kRowStride<D>;  // the query tile, [query][d]
  __nv_bfloat16* dout_rows = q_rows + kTile * kRowStride<D>;
  float* lse_tile = reinterpret_cast<float*>(dout_rows + kTile * kRowStride<D>);  // log2 units
  float* delta_tile = lse_tile + kTile;
  const int b = blockIdx.y / s.KVH, g_kv = blockIdx.y % s.KVH, group = s.NH / s.KVH;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const long long width = s.qkv_width() * D, out_width = static_cast<long long>(s.NH) * D;
  const long long row_base = static_cast<long long>(b) * s.T;
  const long long k_column = static_cast<long long>(s.NH + g_kv) * D, v_column = static_cast<long long>(s.NH + s.KVH + g_kv) * D;
  const int first_key = blockIdx.x * kTile, warp_first_key = first_key + warp * 16;
  const int keys[2] = {warp_first_key + g, warp_first_key + g + 8};
  const float scale = rsqrtf(static_cast<float>(D)), scale_log2 = scale * kLog2e;
  load_tile<D>(k_rows, qkv, row_base, first_key, s.T, width, k_column);
  load_tile<D>(v_rows, qkv, row_base, first_key, s.T, width, v_column);
  const __nv_bfloat16* warp_k = k_rows + warp * 16 * kRowStride<D>;
  const __nv_bfloat16* warp_v = v_rows + warp * 16 * kRowStride<D>;

  float dk[D / 8][4], dv[D / 8][4];
  zero(dk);
  zero(dv);
  for (int h = g_kv * group; h < (g_kv + 1) * group; ++h) {
    const long long stats = (static_cast<long long>(b) * s.NH + h) * s.T;
    for (int first_query = first_key; first_query < s.T; first_query += kTile) {
      __syncthreads();  // the last tile's readers are done
      load_tile<D>(q_rows, qkv, row_base, first_query, s.T, width, static_cast<long long>(h) * D);
      load_tile<D>(dout_rows, dout, row_base, first_query, s.T, out_width, static_cast<long long>(h) * D);
      for (int r = threadIdx.x; r < kTile; r += blockDim.x) {
        const bool inside = first_query + r < s.T;
        lse_tile[r] = inside ? lse[stats + first_query + r] * kLog2e : 0.f;
        delta_tile[r] = inside ? delta[stats + first_query + r] : 0.f;
      }
      __syncthreads();
      if (first_query + kTile - 1 < warp_first_key) continue;  // every query of the tile precedes this warp's keys

      // P^T (16 keys x 64 queries), masked to 0.
      float pt[kTile / 8][4];
      zero(pt);
      mma_a_shared_b_rows<D, kTile / 8>(pt, warp_k, kRowStride<D>, q_rows, kRowStride<D>, g, t);  // K Q^T
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int column = n * 8 + 2 * t + (i & 1), query = first_query + column, key = keys[i / 2];
          pt[n][i] = query >= key && query < s.T && key < s.T ? exp2f(pt[n][i] * scale_log2 - lse_tile[column]) : 0.f;
        }
      }
      {
        std::uint32_t a[kTile / 16][4];
        to_a_fragments<kTile / 8>(a, pt);
        mma_b_transposed<kTile, D / 8>(dv, a, dout_rows, kRowStride<D>, lane);  // dV += P^T dO
      }
      float dst[kTile / 8][4];
      zero(dst);
      mma_a_shared_b_rows<D, kTile / 8>(dst, warp_v, kRowStride<D>, dout_rows, kRowStride<D>, g, t);  // V dO^T
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) dst[n][i] = pt[n][i] * (dst[n][i] - delta_tile[n * 8 + 2 * t + (i & 1)]);
      }
      std::uint32_t a[kTile / 16][4];
      to_a_fragments<kTile / 8>(a, dst);
      mma_b_transposed<kTile, D / 8>(dk, a, q_rows, kRowStride<D>, lane);  // dK += dS^T Q (scaled below)
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
__global__ void __launch_bounds__(kBackwardWarps * 32)
    query_backward_kernel(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                          const float* delta, Shape s) {
  __shared__ __align__(16) __nv_bfloat16 k_rows[kTile * kRowStride<D>];
  __shared__ __align__(16) __nv_bfloat16 v_rows[kTile * kRowStride<D>];
  const int b = blockIdx.y / s.NH, h = blockIdx.y % s.NH, g_kv = h / (s.NH / s.KVH);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const long long width = s.qkv_width() * D, out_width = static_cast<long long>(s.NH) * D;
  const long long row_base = static_cast<long long>(b) * s.T;
  const long long k_column = static_cast<long long>(s.NH + g_kv) * D, v_column = static_cast<long long>(s.NH + s.KVH + g_kv) * D;
  const int first_row = blockIdx.x * kTile, last_row = min(first_row + kTile, s.T) - 1;
  const int warp_first_row = first_row + warp * 16;
  const int rows[2] = {warp_first_row + g, warp_first_row + g + 8};
  const float scale = rsqrtf(static_cast<float>(D)), scale_log2 = scale * kLog2e;
  const long long stats = (static_cast<long long>(b) * s.NH + h) * s.T;
  float row_lse[2], row_delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_lse[r] = rows[r] < s.T ? lse[stats + rows[r]] * kLog2e : 0.f;
    row_delta[r] = rows[r] < s.T ? delta[stats + rows[r]] : 0.f;
  }
  std::uint32_t q[D / 16][4], dout_a[D / 16][4];
  load_a_global<D>(q, qkv, row_base, warp_first_row, s.T, width, static_cast<long long>(h) * D, g, t);
  load_a_global<D>(dout_a, dout, row_base, warp_first_row, s.T, out_width, static_cast<long long>(h) * D, g, t);
  float dq[D / 8][4];
  zero(dq);

  for (int first_key = 0; first_key <= last_row; first_key += kTile) {
    __syncthreads();  // the last tile's readers are done
    load_tile<D>(k_rows, qkv, row_base, first_key, s.T, width, k_column);
    load_tile<D>(v_rows, qkv, row_base, first_key, s.T, width, v_column);
    __syncthreads();
    if (first_key > warp_first_row + 15) continue;  // every key of the tile is after this warp's rows
    float p[kTile / 8][4], ds[kTile / 8][4];
    zero(p);
    zero(ds);
    mma_b_rows<D, kTile / 8>(p, q, k_rows, kRowStride<D>, g, t);        // Q K^T
    mma_b_rows<D, kTile / 8>(ds, dout_a, v_rows, kRowStride<D>, g, t);  // dO V^T
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = first_key + n * 8 + 2 * t + (i & 1), row = rows[i / 2];
        const float prob = key <= row && key < s.T && row < s.T ? exp2f(p[n][i] * scale_log2 - row_lse[i / 2]) : 0.f;
        ds[n][i] = prob * (ds[n][i] - row_delta[i / 2]);
      }
    }
    std::uint32_t a[kTile / 16][4];
    to_a_fragments<kTile / 8>(a, ds);
    mma_b_transposed<kTile, D / 8>(dq, a, k_rows, kRowStride<D>, lane);  // dQ += dS K (scaled below)
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

int blocks(std::int64_t n, int per_block) { return static_cast<int>((n + per_block - 1) / per_block); }

template <int D>
void launch_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, std::int64_t B, const Shape& s,
                    cudaStream_t stream) {
  const dim3 grid(blocks(s.T, kForwardWarps * 16), static_cast<unsigned>(B * s.NH));
  forward_kernel<D><<<grid, kForwardWarps * 32, 0, stream>>>(out, lse, qkv, s);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

template <int D>
void launch_backward(__nv_bfloat16* dqkv, float* delta, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                     const __nv_bfloat16* out, const float* lse, std::int64_t B, const Shape& s, cudaStream_t stream) {
  const long long rows = B * s.NH * static_cast<long long>(s.T);
  constexpr int kDeltaThreads = 256;
  delta_kernel<D><<<blocks(rows, kDeltaThreads), kDeltaThreads, 0, stream>>>(delta, dout, out, rows, s);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
  constexpr int key_bytes = key_pass_shared_bytes<D>();  // over the 48 KiB of static shared memory at D = 128
  MESHPLAN_CUDA_CHECK(cudaFuncSetAttribute(key_backward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, key_bytes));
  const dim3 key_grid(blocks(s.T, kTile), static_cast<unsigned>(B * s.KVH));
  key_backward_kernel<D><<<key_grid, kBackwardWarps * 32, key_bytes, stream>>>(dqkv, dout, qkv, lse, delta, s);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
  const dim3 query_grid(blocks(s.T, kTile), static_cast<unsigned>(B * s.NH));
  query_backward_kernel<D><<<query_grid, kBackwardWarps * 32, 0, stream>>>(dqkv, dout, qkv, lse, delta, s);
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
  if (D == 64) launch_forward<64>(out, lse, qkv, B, s, stream);
  else launch_forward<128>(out, lse, qkv, B, s, stream);
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
