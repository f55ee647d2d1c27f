// The token and position embedding of kernels.hpp (kernels/cpu/embedding.hpp's
// contract, fp32). Forward: a thread per output element. Backward: a thread
// per (distinct token, channel) sums the token's rows in position order, from
// the grouping of embedding_groups.hpp, and a thread per (position, channel)
// sums the batch for the position embedding: no float atomics, so the same
// batch gives the same bits.
#include <algorithm>
#include <stdexcept>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/kernels.hpp"

namespace meshplan::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void embedding_forward_kernel(float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                                         long long T, long long C, long long n) {
  const long long index = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;  // (b, t, c)
  if (index >= n) return;
  const long long c = index % C, bt = index / C, t = bt % T;
  float value = wte[static_cast<long long>(tokens[bt]) * C + c];
  if (wpe != nullptr) value += wpe[t * C + c];
  out[index] = value;
}

// blockIdx.y: a distinct token; threads over its channels.
__global__ void token_backward_kernel(float* dwte, const float* dout, const std::int32_t* tokens, const std::int32_t* starts,
                                      const std::int32_t* positions, long long C) {
  const long long c = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int group = blockIdx.y;
  float sum = 0;
  for (int i = starts[group]; i < starts[group + 1]; ++i) sum += dout[static_cast<long long>(positions[i]) * C + c];
  dwte[static_cast<long long>(tokens[group]) * C + c] += sum;
}

// blockIdx.y: a position t; threads over channels; the batch summed in order.
__global__ void position_backward_kernel(float* dwpe, const float* dout, long long B, long long T, long long C) {
  const long long c = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const long long t = blockIdx.y;
  float sum = 0;
  for (long long b = 0; b < B; ++b) sum += dout[(b * T + t) * C + c];
  dwpe[t * C + c] += sum;
}

unsigned blocks(long long n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, std::int64_t B,
                       std::int64_t T, std::int64_t C, cudaStream_t stream) {
  const long long n = B * T * C;
  if (n == 0) return;
  embedding_forward_kernel<<<blocks(n), kThreads, 0, stream>>>(out, tokens, wte, wpe, T, C, n);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const DeviceEmbeddingGroups& groups, std::int64_t B,
                        std::int64_t T, std::int64_t C, cudaStream_t stream) {
  if (groups.count > 65535 * 1024LL) throw std::invalid_argument("embedding_backward: too many distinct tokens");
  if (groups.count > 0) {
    // gridDim.y is at most 65535: distinct tokens beyond it go in further launches.
    for (long long first = 0; first < groups.count; first += 65535) {
      const long long count = std::min<long long>(65535, groups.count - first);
      token_backward_kernel<<<dim3(blocks(C), static_cast<unsigned>(count)), kThreads, 0, stream>>>(
          dwte, dout, groups.tokens + first, groups.starts + first, groups.positions, C);
      MESHPLAN_CUDA_CHECK(cudaGetLastError());
    }
  }
  if (dwpe != nullptr && T > 0) {
    if (T > 65535) throw std::invalid_argument("embedding_backward: sequences over 65535 positions");
    position_backward_kernel<<<dim3(blocks(C), static_cast<unsigned>(T)), kThreads, 0, stream>>>(dwpe, dout, B, T, C);
    MESHPLAN_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace meshplan::kernels::cuda
