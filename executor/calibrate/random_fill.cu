// Random operands on the device (random_fill.hpp): splitmix64 of seed + index,
// its top 24 bits as a uniform in [-1, 1). A grid-stride loop, so any n runs
// on a fixed grid.
#include "executor/calibrate/random_fill.hpp"

#include "kernels/cuda/cuda_check.hpp"

namespace meshplan::exec::cuda_calibrate {
namespace {

__device__ float uniform(std::uint64_t seed, std::int64_t i) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(i + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

template <typename T>
__global__ void fill_kernel(T* out, std::int64_t n, std::uint64_t seed) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = static_cast<T>(uniform(seed, i));
  }
}

template <typename T>
void fill(T* out, std::int64_t n, std::uint64_t seed, cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  const std::int64_t blocks = (n + kThreads - 1) / kThreads;
  fill_kernel<T><<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), kThreads, 0, stream>>>(out, n, seed);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void fill_uniform_bf16(__nv_bfloat16* out, std::int64_t n, std::uint64_t seed, cudaStream_t stream) {
  fill(out, n, seed, stream);
}
void fill_uniform_f32(float* out, std::int64_t n, std::uint64_t seed, cudaStream_t stream) { fill(out, n, seed, stream); }

}  // namespace meshplan::exec::cuda_calibrate
