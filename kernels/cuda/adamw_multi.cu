// The multi-tensor AdamW step and the global gradient norm of kernels.hpp.
// A model has hundreds of parameter tensors, many of them small (biases,
// norm weights); one launch per tensor would cost a launch each and leave
// the GPU idle between them. Here one launch covers all: block b works on
// chunk b of the list's chunk table (adamw_multi_chunks.hpp), built on the
// host and copied to the device once, when the AdamWTensorList is made.
//
// The norm sums g^2 in double per chunk (each thread a strided partial sum,
// then a fixed tree in shared memory), and one block adds the chunk sums in
// a fixed order: no atomics, so the same bits on every run. llm.c's
// global_norm.cuh avoids atomics the same way (per-block sums, one block
// adding them), but sizes its grid by the GPU's SM count; a grid of chunks
// makes the bits independent of the GPU too, as the CPU norm's fixed lanes
// make them independent of the thread count (kernels/cpu/adamw.cpp).
//
// defines: AdamWTensorList, adamw_update_multi, global_squared_norm
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/adamw_multi_chunks.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/kernels.hpp"

namespace meshplan::kernels::cuda {
namespace {

constexpr int kThreads = 256;  // a power of two, for the reduction trees

__global__ void adamw_multi_kernel(const AdamWTensor* tensors, const TensorChunk* chunks, AdamWStepScalars s) {
  const TensorChunk chunk = chunks[blockIdx.x];
  const AdamWTensor t = tensors[chunk.tensor];
  for (std::int64_t i = chunk.begin + threadIdx.x; i < chunk.end; i += kThreads)
    adamw_element(t.params[i], t.m[i], t.v[i], t.grads[i], s);
}

// Sums `sums[0 .. kThreads)` into sums[0] in a fixed tree.
__device__ void block_tree_sum(double* sums) {
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) sums[threadIdx.x] += sums[threadIdx.x + stride];
    __syncthreads();
  }
}

__global__ void chunk_squares_kernel(const AdamWTensor* tensors, const TensorChunk* chunks, double* partial) {
  __shared__ double sums[kThreads];
  const TensorChunk chunk = chunks[blockIdx.x];
  const float* g = tensors[chunk.tensor].grads;
  double sum = 0;
  for (std::int64_t i = chunk.begin + threadIdx.x; i < chunk.end; i += kThreads) {
    const double gi = g[i];
    sum += gi * gi;
  }
  sums[threadIdx.x] = sum;
  block_tree_sum(sums);
  if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
}

// One block: thread t adds partial sums t, t + kThreads, ... in order, then the tree.
__global__ void sum_partials_kernel(const double* partial, std::int64_t count, double* total) {
  __shared__ double sums[kThreads];
  double sum = 0;
  for (std::int64_t c = threadIdx.x; c < count; c += kThreads) sum += partial[c];
  sums[threadIdx.x] = sum;
  block_tree_sum(sums);
  if (threadIdx.x == 0) *total = sums[0];
}

// A grid of one block per chunk: CUDA allows 2^31 - 1 blocks in x.
unsigned int chunk_grid(const AdamWTensorList& list) {
  if (list.chunk_count() > 2147483647LL)
    throw std::invalid_argument("multi-tensor AdamW: " + std::to_string(list.chunk_count()) +
                                " chunks, more than one launch's grid holds");
  return static_cast<unsigned int>(list.chunk_count());
}

}  // namespace

AdamWTensorList::AdamWTensorList(const std::vector<AdamWTensor>& tensors) {
  std::vector<std::int64_t> sizes;
  sizes.reserve(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const AdamWTensor& t = tensors[i];
    if (t.n > 0 && (t.params == nullptr || t.grads == nullptr || t.m == nullptr || t.v == nullptr))
      throw std::invalid_argument("AdamWTensorList: tensor " + std::to_string(i) + " has " + std::to_string(t.n) +
                                  " elements and a null buffer");
    sizes.push_back(t.n);
    element_count_ += t.n > 0 ? t.n : 0;
  }
  const std::vector<TensorChunk> chunks = tensor_chunks(sizes);  // throws on a negative n
  tensor_count_ = static_cast<std::int64_t>(tensors.size());
  chunk_count_ = static_cast<std::int64_t>(chunks.size());
  try {
    MESHPLAN_CUDA_CHECK(cudaMalloc(&tensors_, std::max<std::size_t>(tensors.size(), 1) * sizeof(AdamWTensor)));
    MESHPLAN_CUDA_CHECK(cudaMalloc(&chunks_, std::max<std::size_t>(chunks.size(), 1) * sizeof(TensorChunk)));
    MESHPLAN_CUDA_CHECK(cudaMalloc(&partial_sums_, (chunks.size() + 1) * sizeof(double)));
    if (!tensors.empty())
      MESHPLAN_CUDA_CHECK(cudaMemcpy(tensors_, tensors.data(), tensors.size() * sizeof(AdamWTensor), cudaMemcpyHostToDevice));
    if (!chunks.empty())
      MESHPLAN_CUDA_CHECK(cudaMemcpy(chunks_, chunks.data(), chunks.size() * sizeof(TensorChunk), cudaMemcpyHostToDevice));
  } catch (...) {
    cudaFree(tensors_);
    cudaFree(chunks_);
    cudaFree(partial_sums_);
    throw;
  }
}

AdamWTensorList::~AdamWTensorList() {
  cudaFree(tensors_);
  cudaFree(chunks_);
  cudaFree(partial_sums_);
}

AdamWTensorList::AdamWTensorList(AdamWTensorList&& other) noexcept
    : tensors_(other.tensors_),
      chunks_(other.chunks_),
      partial_sums_(other.partial_sums_),
      tensor_count_(other.tensor_count_),
      chunk_count_(other.chunk_count_),
      element_count_(other.element_count_) {
  other.tensors_ = nullptr;
  other.chunks_ = nullptr;
  other.partial_sums_ = nullptr;
  other.tensor_count_ = other.chunk_count_ = other.element_count_ = 0;
}

void adamw_update_multi(const AdamWTensorList& list, std::int64_t step, const AdamWHyperparameters& hp,
                        float grad_scale, cudaStream_t stream) {
  const AdamWStepScalars s = adamw_step_scalars(step, hp, grad_scale);
  if (list.chunk_count() == 0) return;  // nothing to update; a grid of 0 blocks is an error
  adamw_multi_kernel<<<chunk_grid(list), kThreads, 0, stream>>>(list.device_tensors(), list.device_chunks(), s);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
}

double global_squared_norm(const AdamWTensorList& list, cudaStream_t stream) {
  if (list.chunk_count() == 0) return 0.0;
  double* partial = list.device_partial_sums();
  chunk_squares_kernel<<<chunk_grid(list), kThreads, 0, stream>>>(list.device_tensors(), list.device_chunks(), partial);
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
  sum_partials_kernel<<<1, kThreads, 0, stream>>>(partial, list.chunk_count(), partial + list.chunk_count());
  MESHPLAN_CUDA_CHECK(cudaGetLastError());
  double total = 0;
  MESHPLAN_CUDA_CHECK(
      cudaMemcpyAsync(&total, partial + list.chunk_count(), sizeof total, cudaMemcpyDeviceToHost, stream));
  MESHPLAN_CUDA_CHECK(cudaStreamSynchronize(stream));
  return total;
}

}  // namespace meshplan::kernels::cuda
