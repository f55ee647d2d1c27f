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

template <int D>
__global__ void __launch_bounds__(kQueryTile) forward_kernel(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, Shape s) {
  __shared__ float k_tile[kKeyTile * D];
  __shared__ float v_tile[kKeyTile * D];
  const QueryRows<D> r(s);
  const int b = r.b, h = r.h, g = r.g, row = r.row, last_row = r.last_row;
  const long long width = r.width, row_base = r.row_base;
  const float scale = r.scale;
  float q[D], acc[D];
  float m = -INFINITY, l = 0;
  for (int d = 0; d < D; ++d) acc[d] = 0;
  if (row < s.T) load_row<D>(q, qkv, (row_base + row) * width + static_cast<long long>(h) * D);
  for (int first_key = 0; first_key <= last_row; first_key += kKeyTile) {
    const int n_tile = min(kKeyTile, s.T - first_key);
    load_key_value_tile<D>(k_tile, v_tile, qkv, row_base, first_key, n_tile, s, g);
    __syncthreads();
    if (row < s.T) flash::forward_tile<D, kKeyTile>(m, l, acc, q, k_tile, v_tile, min(n_tile, row - first_key + 1), scale);
    __syncthreads();
  }
  if (row < s.T) {
    float o[D];
    float row_lse = 0;
    flash::forward_finish<D>(o, row_lse, m, l, acc);
    store_row<D>(out, (row_base + row) * s.NH * D + static_cast<long long>(h) * D, o);
    lse[(static_cast<long long>(b) * s.NH + h) * s.T + row] = row_lse;
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

Shape checked_shape(std::int64_t B, std::int64_t T, std::int64_t NH, std::int64_t KVH, std::int64_t D) {
  if (D != 64 && D != 128) throw std::invalid_argument("flash attention: head dimension " + std::to_string(D) + " (64 or 128)");
  if (B < 1 || T < 1 || NH < 1 || KVH < 1 || NH % KVH != 0) {
    throw std::invalid_argument("flash attention: B, T, NH, KVH must be positive and KVH must divide NH");
  }
  if (B * NH > 65535 || T > (1LL << 30)) throw std::invalid_argument("flash attention: B x NH over 65535 or T too long");
  return {static_cast<int>(T), static_cast<int>(NH), static_cast<int>(KVH)};
}

int blocks(std::int64_t n, int per_block) { return static_cast<int>((n + per_block - 1) / per_block); }

}  // namespace

void flash_attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, std::int64_t B, std::int64_t T,
                             std::int64_t NH, std::int64_t KVH, std::int64_t D, cudaStream_t stream) {
  const Shape s = checked_shape(B, T, NH, KVH, D);
  const dim3 grid(blocks(T, kQueryTile), static_cast<unsigned>(B * NH));
  if (D == 64) forward_kernel<64><<<grid, kQueryTile, 0, stream>>>(out, lse, qkv, s);
  else forward_kernel<128><<<grid, kQueryTile, 0, stream>>>(out, lse, qkv, s);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void flash_attention_backward(__nv_bfloat16* dqkv, float* delta, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                              const __nv_bfloat16* out, const float* lse, std::int64_t B, std::int64_t T, std::int64_t NH,
                              std::int64_t KVH, std::int64_t D, cudaStream_t stream) {
  const Shape s = checked_shape(B, T, NH, KVH, D);
  const long long rows = B * NH * T;
  constexpr int kDeltaThreads = 256;
  const dim3 key_grid(blocks(T, kBackwardKeyTile), static_cast<unsigned>(B * KVH));
  const dim3 query_grid(blocks(T, kQueryTile), static_cast<unsigned>(B * NH));
  if (D == 64) {
    delta_kernel<64><<<blocks(rows, kDeltaThreads), kDeltaThreads, 0, stream>>>(delta, dout, out, rows, s);
    MESHPLAN_CUDA_CHECK(cudaGetLastError());
    key_backward_kernel<64><<<key_grid, kBackwardKeyTile, 0, stream>>>(dqkv, dout, qkv, lse, delta, s);
    MESHPLAN_CUDA_CHECK(cudaGetLastError());
    query_backward_kernel<64><<<query_grid, kQueryTile, 0, stream>>>(dqkv, dout, qkv, lse, delta, s);
  } else {
    delta_kernel<128><<<blocks(rows, kDeltaThreads), kDeltaThreads, 0, stream>>>(delta, dout, out, rows, s);
    MESHPLAN_CUDA_CHECK(cudaGetLastError());
    key_backward_kernel<128><<<key_grid, kBackwardKeyTile, 0, stream>>>(dqkv, dout, qkv, lse, delta, s);
    MESHPLAN_CUDA_CHECK(cudaGetLastError());
    query_backward_kernel<128><<<query_grid, kQueryTile, 0, stream>>>(dqkv, dout, qkv, lse, delta, s);
  }
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace meshplan::kernels::cuda
