// The kernels of gpt_kernels.hpp. Formulas are the CPU ops' (executor/
// parallel/cpu_gpt_ops.cpp, kernels/cpu/attention.cpp) in float, with expf
// and logf for the CPU's exp_of and std::log; block sums in a fixed tree order.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/gpt_kernels.hpp"
#include "kernels/cuda/grid.cuh"

namespace meshplan::kernels::cuda {
namespace {

__global__ void scale_kernel(float* x, float factor, std::int64_t n) {
  MESHPLAN_GRID_STRIDE(i, n) x[i] *= factor;
}

__global__ void add_kernel(float* destination, const float* source, std::int64_t n) {
  MESHPLAN_GRID_STRIDE(i, n) destination[i] += source[i];
}

__global__ void residual_bias_kernel(float* out, const float* x, const float* y, const float* bias, std::int64_t n,
                                     std::int64_t C) {
  MESHPLAN_GRID_STRIDE(i, n) out[i] = bias == nullptr ? x[i] + y[i] : x[i] + (y[i] + bias[i % C]);
}

// The column sums of grid.cuh (a block per 32 columns, 32 row lanes, a fixed tree). It was a thread per
// column over all rows: C / 256 blocks, about 0.94 ms a call on an H200 at 8192 rows whatever C, a third
// of a GPT-2 step (MESHPLAN_CUDA_OP_TIMES, 2026-11-28).
__global__ void __launch_bounds__(kColumnLanes * kRowLanes)
    bias_backward_kernel(float* dbias, const float* dout, std::int64_t rows, std::int64_t C) {
  __shared__ ColumnParts part;
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(kColumnLanes) + threadIdx.x;
  float sum = 0;
  if (c < C)
    for (std::int64_t r = threadIdx.y; r < rows; r += kRowLanes) sum += dout[r * C + c];
  part[threadIdx.y][threadIdx.x] = sum;
  column_lanes_tree(part);
  if (threadIdx.y == 0 && c < C) dbias[c] += part[0][threadIdx.x];
}

__global__ void round_to_bf16_kernel(__nv_bfloat16* out, const float* in, std::int64_t n) {
  MESHPLAN_GRID_STRIDE(i, n) out[i] = __float2bfloat16_rn(in[i]);
}

// Four floats a thread: one 16-byte load and one 8-byte store instead of four 4-byte loads and four
// 2-byte stores. The one-a-thread kernel moved 1.5 TB/s on an H200 (52 us for 13M elements, 14% of a
// GPT-2 1.5B step with MESHPLAN_CUDA_OP_TIMES); the card copies at 4.3.
__global__ void round_to_bf16_x4_kernel(uint2* out, const float4* in, std::int64_t groups) {
  MESHPLAN_GRID_STRIDE(i, groups) {
    const float4 v = in[i];
    const __nv_bfloat162 low = __floats2bfloat162_rn(v.x, v.y), high = __floats2bfloat162_rn(v.z, v.w);
    uint2 packed;
    memcpy(&packed.x, &low, sizeof low);
    memcpy(&packed.y, &high, sizeof high);
    out[i] = packed;
  }
}

__global__ void widen_bf16_kernel(float* out, const __nv_bfloat16* in, std::int64_t n, bool accumulate) {
  MESHPLAN_GRID_STRIDE(i, n) out[i] = accumulate ? out[i] + __bfloat162float(in[i]) : __bfloat162float(in[i]);
}

__global__ void vocab_embedding_forward_kernel(float* out, const std::int32_t* tokens, const float* wte,
                                               std::int64_t begin, std::int64_t real, std::int64_t n,
                                               std::int64_t C) {
  MESHPLAN_GRID_STRIDE(i, n) {
    const std::int64_t row = tokens[i / C] - begin;
    out[i] = row >= 0 && row < real ? wte[row * C + i % C] : 0.0f;
  }
}

// A thread per channel: rows in order, so each element sums as the CPU's loop does.
__global__ void vocab_embedding_backward_kernel(float* dwte, const float* dout, const std::int32_t* tokens,
                                                std::int64_t begin, std::int64_t real, std::int64_t rows,
                                                std::int64_t C) {
  MESHPLAN_GRID_STRIDE(c, C) {
    for (std::int64_t n = 0; n < rows; ++n) {
      const std::int64_t row = tokens[n] - begin;
      if (row >= 0 && row < real) dwte[row * C + c] += dout[n * C + c];
    }
  }
}

__global__ void positions_forward_kernel(float* x, const float* wpe, std::int64_t offset, std::int64_t T,
                                         std::int64_t n, std::int64_t C) {
  MESHPLAN_GRID_STRIDE(i, n) {
    const std::int64_t r = i / C;
    x[i] += wpe[((offset + r) % T) * C + i % C];
  }
}

// A thread per (position, channel): the rows at that position, in order.
__global__ void positions_backward_kernel(float* dwpe, const float* dx, std::int64_t rows, std::int64_t offset,
                                          std::int64_t T, std::int64_t C) {
  MESHPLAN_GRID_STRIDE(i, T * C) {
    const std::int64_t p = i / C, c = i % C;
    const std::int64_t first = ((p - offset) % T + T) % T;  // the first row r with (offset + r) % T == p
    float sum = 0;
    bool any = false;
    for (std::int64_t r = first; r < rows; r += T) {
      sum += dx[r * C + c];
      any = true;
    }
    if (any) dwpe[i] += sum;
  }
}

__global__ void loss_row_max_kernel(float* row_max, const float* logits, std::int64_t Vp, std::int64_t real) {
  __shared__ float shared[kThreads];
  const float* z = logits + blockIdx.x * Vp;
  float m = -INFINITY;
  for (std::int64_t v = threadIdx.x; v < real; v += blockDim.x) m = fmaxf(m, z[v]);
  m = block_max(m, shared);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

__global__ void loss_exponentials_kernel(float* logits, float* sums, float* correct, const float* row_max,
                                         const std::int32_t* targets, std::int64_t begin, std::int64_t N,
                                         std::int64_t Vp, std::int64_t real) {
  __shared__ float shared[kThreads];
  const std::int64_t n = blockIdx.x;
  float* z = logits + n * Vp;
  const float m = row_max[n];
  if (threadIdx.x == 0) {
    const std::int64_t target = targets[n] - begin;
    const bool mine = target >= 0 && target < real;
    sums[N + n] = mine ? z[target] : 0.0f;
    correct[n] = mine && z[target] == m ? 1.0f : 0.0f;
  }
  __syncthreads();  // the target logit is read before the row is overwritten
  float sum = 0;
  for (std::int64_t v = threadIdx.x; v < Vp; v += blockDim.x) {
    const float e = v < real ? expf(z[v] - m) : 0.0f;
    z[v] = e;
    sum += e;
  }
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) sums[n] = sum;
}

__global__ void loss_normalize_kernel(float* probabilities, float* row_loss, const float* sums, const float* row_max,
                                      std::int64_t N, std::int64_t Vp, std::int64_t real) {
  const std::int64_t n = blockIdx.x;
  float* p = probabilities + n * Vp;
  const float sum = sums[n];
  const float inv_sum = 1.0f / sum;
  for (std::int64_t v = threadIdx.x; v < real; v += blockDim.x) p[v] *= inv_sum;
  if (threadIdx.x == 0) row_loss[n] = logf(sum) - (sums[N + n] - row_max[n]);
}

__global__ void loss_backward_kernel(float* dlogits, const float* probabilities, const std::int32_t* targets,
                                     std::int64_t begin, std::int64_t real, float scale, std::int64_t n,
                                     std::int64_t Vp) {
  MESHPLAN_GRID_STRIDE(i, n) {
    const std::int64_t row = i / Vp, v = i % Vp;
    const std::int64_t target = targets[row] - begin;
    float d = scale * probabilities[i];
    if (target >= 0 && target < real && v == target) d -= scale;
    dlogits[i] = d;
  }
}

// ---- attention. A row of the packed qkv is W = (NH + 2 KVH) D floats: query
// head h at h D, key head j at (NH + j) D, value head j at (NH + KVH + j) D.
struct AttentionShape {
  std::int64_t B, T, NH, KVH, D, group, head_offset;
  float scale;
  __device__ std::int64_t width() const { return (NH + 2 * KVH) * D; }
  __device__ std::int64_t kv_of(std::int64_t h) const { return (head_offset + h) / group; }
};

// The query row a block of the row kernels works on (block index = (b NH + h) T + t), its key/value head,
// batch b's packed qkv, and the block's dynamic shared memory as attention_shared_bytes sizes it: a vector
// of D, a row of T, a reduction of blockDim.x.
struct QueryRow {
  std::int64_t t, bh, h, b, kv;
  const float* row0;
  float *vec, *row, *shared;
  __device__ QueryRow(float* smem, const float* qkv, const AttentionShape& s)
      : t(blockIdx.x % s.T), bh(blockIdx.x / s.T), h(bh % s.NH), b(bh / s.NH), kv(s.kv_of(h)),
        row0(qkv + b * s.T * s.width()), vec(smem), row(smem + s.D), shared(smem + s.D + s.T) {}
};

// A block per (b, h, t): the query row in `vec`, the row's scores in `row`.
__global__ void attention_forward_kernel(float* out, float* att, const float* qkv, AttentionShape s) {
  extern __shared__ float smem[];
  const QueryRow r(smem, qkv, s);
  float* q = r.vec;
  float* p = r.row;
  float* shared = r.shared;
  const std::int64_t t = r.t, bh = r.bh, h = r.h, b = r.b, kv = r.kv, W = s.width();
  const float* row0 = r.row0;
  for (std::int64_t d = threadIdx.x; d < s.D; d += blockDim.x) q[d] = row0[t * W + h * s.D + d];
  __syncthreads();
  float m = -INFINITY;
  for (std::int64_t t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) {
    const float* k = row0 + t2 * W + (s.NH + kv) * s.D;
    float dot = 0;
    for (std::int64_t d = 0; d < s.D; ++d) dot += q[d] * k[d];
    p[t2] = s.scale * dot;
    m = fmaxf(m, p[t2]);
  }
  m = block_max(m, shared);
  float sum = 0;
  for (std::int64_t t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) {
    p[t2] = expf(p[t2] - m);
    sum += p[t2];
  }
  const float inv_sum = 1.0f / block_sum(sum, shared);
  float* att_row = att + (bh * s.T + t) * s.T;
  for (std::int64_t t2 = threadIdx.x; t2 < s.T; t2 += blockDim.x) {
    const float value = t2 <= t ? p[t2] * inv_sum : 0.0f;
    if (t2 <= t) p[t2] = value;
    att_row[t2] = value;
  }
  __syncthreads();
  float* o = out + (b * s.T + t) * s.NH * s.D + h * s.D;
  for (std::int64_t d = threadIdx.x; d < s.D; d += blockDim.x) {
    float acc = 0;
    for (std::int64_t t2 = 0; t2 <= t; ++t2) acc += p[t2] * row0[t2 * W + (s.NH + s.KVH + kv) * s.D + d];
    o[d] = acc;
  }
}

// A block per (b, h, t): dP[t2] = dout[t] . v[t2], ds = P (dP - sum(P dP)) scale
// (written to `ds`), dq[t] += ds K. The dout row in `vec`, the row's dP / ds in `row`.
__global__ void attention_backward_query_kernel(float* dqkv, float* ds, const float* dout, const float* qkv,
                                                const float* att, AttentionShape s) {
  extern __shared__ float smem[];
  const QueryRow r(smem, qkv, s);
  float* g = r.vec;
  float* dp = r.row;
  float* shared = r.shared;
  const std::int64_t t = r.t, bh = r.bh, h = r.h, b = r.b, kv = r.kv, W = s.width();
  const float* row0 = r.row0;
  const float* p = att + (bh * s.T + t) * s.T;
  for (std::int64_t d = threadIdx.x; d < s.D; d += blockDim.x) g[d] = dout[(b * s.T + t) * s.NH * s.D + h * s.D + d];
  __syncthreads();
  float partial = 0;
  for (std::int64_t t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) {
    const float* v = row0 + t2 * W + (s.NH + s.KVH + kv) * s.D;
    float dot = 0;
    for (std::int64_t d = 0; d < s.D; ++d) dot += g[d] * v[d];
    dp[t2] = dot;
    partial += p[t2] * dot;
  }
  const float p_dot_dp = block_sum(partial, shared);
  float* ds_row = ds + (bh * s.T + t) * s.T;
  for (std::int64_t t2 = threadIdx.x; t2 < s.T; t2 += blockDim.x) {
    const float value = t2 <= t ? p[t2] * (dp[t2] - p_dot_dp) * s.scale : 0.0f;
    if (t2 <= t) dp[t2] = value;
    ds_row[t2] = value;
  }
  __syncthreads();
  float* dq = dqkv + (b * s.T + t) * W + h * s.D;
  for (std::int64_t d = threadIdx.x; d < s.D; d += blockDim.x) {
    float acc = 0;
    for (std::int64_t t2 = 0; t2 <= t; ++t2) acc += dp[t2] * row0[t2 * W + (s.NH + kv) * s.D + d];
    dq[d] += acc;
  }
}

// A block per (b, key/value head j, key row t2), a thread per channel: dk[t2]
// += sum over the group's query heads h and rows t >= t2 of ds[h, t, t2] q[h, t];
// dv[t2] += P[h, t, t2] dout[h, t]; heads, then rows, in order.
__global__ void attention_backward_key_kernel(float* dqkv, const float* ds, const float* dout, const float* qkv,
                                              const float* att, AttentionShape s) {
  const std::int64_t t2 = blockIdx.x % s.T, bj = blockIdx.x / s.T, j = bj % s.KVH, b = bj / s.KVH;
  const std::int64_t W = s.width();
  const float* row0 = qkv + b * s.T * W;
  for (std::int64_t d = threadIdx.x; d < s.D; d += blockDim.x) {
    float dk = 0, dv = 0;
    for (std::int64_t h = 0; h < s.NH; ++h) {
      if (s.kv_of(h) != j) continue;
      const std::int64_t bh = b * s.NH + h;
      for (std::int64_t t = t2; t < s.T; ++t) {
        const std::int64_t at = (bh * s.T + t) * s.T + t2;
        dk += ds[at] * row0[t * W + h * s.D + d];
        dv += att[at] * dout[(b * s.T + t) * s.NH * s.D + h * s.D + d];
      }
    }
    float* row = dqkv + (b * s.T + t2) * W;
    row[(s.NH + j) * s.D + d] += dk;
    row[(s.NH + s.KVH + j) * s.D + d] += dv;
  }
}

constexpr int kAttentionThreads = 128;

AttentionShape attention_shape(std::int64_t B, std::int64_t T, std::int64_t NH, std::int64_t KVH, std::int64_t D,
                               std::int64_t group, std::int64_t head_offset) {
  if (B <= 0 || T <= 0 || NH <= 0 || KVH <= 0 || D <= 0 || group <= 0 || (head_offset + NH - 1) / group >= KVH)
    throw std::invalid_argument("attention_*_fp32: every query head needs its key/value head, and sizes must be positive");
  return {B, T, NH, KVH, D, group, head_offset, 1.0f / std::sqrt(static_cast<float>(D))};
}

std::size_t attention_shared_bytes(const AttentionShape& s) {
  const std::size_t bytes = static_cast<std::size_t>(s.D + s.T + kAttentionThreads) * sizeof(float);
  if (bytes > 48 * 1024) throw std::invalid_argument("attention_*_fp32: head_dim + seq_len too large for one block");
  return bytes;
}

}  // namespace

void scale(float* x, float factor, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  scale_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, factor, n);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void add(float* destination, const float* source, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(destination, source, n);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void residual_bias(float* out, const float* x, const float* y, const float* bias, std::int64_t rows, std::int64_t C,
                   cudaStream_t stream) {
  if (rows * C <= 0) return;
  residual_bias_kernel<<<blocks_for(rows * C), kThreads, 0, stream>>>(out, x, y, bias, rows * C, C);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void bias_backward(float* dbias, const float* dout, std::int64_t rows, std::int64_t C, cudaStream_t stream) {
  if (C <= 0) return;
  bias_backward_kernel<<<column_blocks(C), dim3(kColumnLanes, kRowLanes), 0, stream>>>(dbias, dout, rows, C);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void round_to_bf16(__nv_bfloat16* out, const float* in, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  std::int64_t done = 0;
  if (reinterpret_cast<std::uintptr_t>(in) % alignof(float4) == 0 && reinterpret_cast<std::uintptr_t>(out) % alignof(uint2) == 0) {
    const std::int64_t groups = n / 4;
    if (groups > 0) {
      round_to_bf16_x4_kernel<<<blocks_for(groups), kThreads, 0, stream>>>(reinterpret_cast<uint2*>(out),
                                                                          reinterpret_cast<const float4*>(in), groups);
      MESHPLAN_CUDA_CHECK(cudaGetLastError());
      done = 4 * groups;
    }
  }
  if (done == n) return;
  round_to_bf16_kernel<<<blocks_for(n - done), kThreads, 0, stream>>>(out + done, in + done, n - done);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void widen_bf16(float* out, const __nv_bfloat16* in, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  widen_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, in, n, false);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void add_bf16(float* out, const __nv_bfloat16* in, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  widen_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, in, n, true);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void vocab_embedding_forward(float* out, const std::int32_t* tokens, const float* wte, std::int64_t vocab_begin,
                             std::int64_t vocab_real, std::int64_t rows, std::int64_t C, cudaStream_t stream) {
  if (rows * C <= 0) return;
  vocab_embedding_forward_kernel<<<blocks_for(rows * C), kThreads, 0, stream>>>(out, tokens, wte, vocab_begin,
                                                                                 vocab_real, rows * C, C);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void vocab_embedding_backward(float* dwte, const float* dout, const std::int32_t* tokens, std::int64_t vocab_begin,
                              std::int64_t vocab_real, std::int64_t rows, std::int64_t C, cudaStream_t stream) {
  if (rows <= 0 || C <= 0) return;
  vocab_embedding_backward_kernel<<<blocks_for(C), kThreads, 0, stream>>>(dwte, dout, tokens, vocab_begin, vocab_real,
                                                                           rows, C);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void positions_forward(float* x, const float* wpe, std::int64_t rows, std::int64_t row_offset, std::int64_t seq_len,
                       std::int64_t C, cudaStream_t stream) {
  if (rows * C <= 0) return;
  positions_forward_kernel<<<blocks_for(rows * C), kThreads, 0, stream>>>(x, wpe, row_offset, seq_len, rows * C, C);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void positions_backward(float* dwpe, const float* dx, std::int64_t rows, std::int64_t row_offset,
                        std::int64_t seq_len, std::int64_t C, cudaStream_t stream) {
  if (rows <= 0 || seq_len * C <= 0) return;
  positions_backward_kernel<<<blocks_for(seq_len * C), kThreads, 0, stream>>>(dwpe, dx, rows, row_offset, seq_len, C);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void loss_row_max(float* row_max, const float* logits, std::int64_t N, std::int64_t Vp, std::int64_t vocab_real,
                  cudaStream_t stream) {
  if (N <= 0) return;
  loss_row_max_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream>>>(row_max, logits, Vp, vocab_real);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void loss_exponentials(float* logits, float* sums, float* correct, const float* row_max, const std::int32_t* targets,
                       std::int64_t vocab_begin, std::int64_t N, std::int64_t Vp, std::int64_t vocab_real,
                       cudaStream_t stream) {
  if (N <= 0) return;
  loss_exponentials_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream>>>(logits, sums, correct, row_max, targets,
                                                                               vocab_begin, N, Vp, vocab_real);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void loss_normalize(float* probabilities, float* row_loss, const float* sums, const float* row_max, std::int64_t N,
                    std::int64_t Vp, std::int64_t vocab_real, cudaStream_t stream) {
  if (N <= 0) return;
  loss_normalize_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream>>>(probabilities, row_loss, sums, row_max, N,
                                                                           Vp, vocab_real);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void loss_backward(float* dlogits, const float* probabilities, const std::int32_t* targets, std::int64_t vocab_begin,
                   std::int64_t vocab_real, float scale, std::int64_t N, std::int64_t Vp, cudaStream_t stream) {
  if (N * Vp <= 0) return;
  loss_backward_kernel<<<blocks_for(N * Vp), kThreads, 0, stream>>>(dlogits, probabilities, targets, vocab_begin,
                                                                     vocab_real, scale, N * Vp, Vp);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void attention_forward_fp32(float* out, float* att, const float* qkv, std::int64_t B, std::int64_t T, std::int64_t NH,
                            std::int64_t KVH, std::int64_t D, std::int64_t group, std::int64_t head_offset,
                            cudaStream_t stream) {
  const AttentionShape s = attention_shape(B, T, NH, KVH, D, group, head_offset);
  attention_forward_kernel<<<static_cast<unsigned>(B * NH * T), kAttentionThreads, attention_shared_bytes(s), stream>>>(
      out, att, qkv, s);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void attention_backward_fp32(float* dqkv, float* ds, const float* dout, const float* qkv, const float* att,
                             std::int64_t B, std::int64_t T, std::int64_t NH, std::int64_t KVH, std::int64_t D,
                             std::int64_t group, std::int64_t head_offset, cudaStream_t stream) {
  const AttentionShape s = attention_shape(B, T, NH, KVH, D, group, head_offset);
  attention_backward_query_kernel<<<static_cast<unsigned>(B * NH * T), kAttentionThreads, attention_shared_bytes(s),
                                    stream>>>(dqkv, ds, dout, qkv, att, s);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
  attention_backward_key_kernel<<<static_cast<unsigned>(B * KVH * T), kAttentionThreads, 0, stream>>>(dqkv, ds, dout,
                                                                                                      qkv, att, s);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace meshplan::kernels::cuda
