// The host side and the arithmetic of the multi-tensor AdamW and global
// gradient norm (adamw_multi.cu), written once for the CUDA kernels and the
// host, where tests/test_adamw_multi_chunks.cpp checks them without a GPU.
//
// One launch updates every parameter tensor of a model: the tensors are cut
// into chunks of at most kChunkElements elements, a chunk never spanning two
// tensors, and one thread block works on one chunk. This is the scheme of
// apex's and PyTorch's multi_tensor_apply (ATen/native/cuda/
// MultiTensorApply.cuh, a chunk of 65536 elements there too), with the
// chunk table built once on the host and kept on the device instead of
// packed into each launch's arguments. A chunk is also the unit of the
// gradient norm's partial sums, so the sum does not depend on the grid
// size or the GPU: fixed chunks, fixed order (deterministic).
//
// adamw_element is kernels/cpu/adamw.cpp's update of one element, in float,
// in the same order of operations, after the gradient is multiplied by the
// clipping factor as the trainers do (executor/train/trainer.cpp: grads *=
// clip, then the step). On the host it gives the CPU step's bits
// (the test checks this); nvcc may fuse a multiply and an add into one FMA
// (its default --fmad=true), so the GPU's results may differ in the last bits.
//
// defines: kChunkElements, TensorChunk, tensor_chunks, AdamWStepScalars,
// adamw_step_scalars, adamw_element
#pragma once

#include <math.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/adamw_hyperparameters.hpp"
#include "kernels/cuda/host_device.hpp"

namespace meshplan::kernels::cuda {

// Elements per chunk: PyTorch's kChunkSize for its multi-tensor optimizers.
// At 256 threads a block each thread updates 256 elements of its chunk.
inline constexpr std::int64_t kChunkElements = 65536;

// Elements [begin, end) of tensor `tensor` of the list; end - begin is in
// [1, chunk size].
struct TensorChunk {
  std::int64_t tensor = 0;
  std::int64_t begin = 0;
  std::int64_t end = 0;
};

// The chunks of tensors of `sizes[i]` elements, tensor by tensor, in order:
// ceil(size / chunk_elements) chunks per tensor, none for an empty one.
// Throws std::invalid_argument on a negative size or chunk size.
inline std::vector<TensorChunk> tensor_chunks(const std::vector<std::int64_t>& sizes,
                                              std::int64_t chunk_elements = kChunkElements) {
  if (chunk_elements < 1) throw std::invalid_argument("tensor_chunks: chunk_elements must be >= 1");
  std::vector<TensorChunk> chunks;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    if (sizes[t] < 0)
      throw std::invalid_argument("tensor_chunks: tensor " + std::to_string(t) + " has " + std::to_string(sizes[t]) +
                                  " elements");
    for (std::int64_t begin = 0; begin < sizes[t]; begin += chunk_elements)
      chunks.push_back({static_cast<std::int64_t>(t), begin, begin + std::min(chunk_elements, sizes[t] - begin)});
  }
  return chunks;
}

// One step's constants in float, as kernels/cpu/adamw.cpp converts them: the
// bias corrections 1 - beta^step in double (std::pow), then rounded.
struct AdamWStepScalars {
  // 1 - beta is taken in double, then rounded: 1 - float(0.999) is 1.3e-5
  // away from 0.001, which moves every second moment by as much.
  float beta1, beta2, one_minus_beta1, one_minus_beta2, bias_correction1, bias_correction2, lr, eps, weight_decay;
  float grad_scale;  // every gradient is multiplied by this first (clipping: min(1, max_norm / norm))
};

inline AdamWStepScalars adamw_step_scalars(std::int64_t step, const AdamWHyperparameters& hp, float grad_scale) {
  if (step < 1) throw std::invalid_argument("AdamW steps count from 1");
  const double step_d = static_cast<double>(step);
  return {static_cast<float>(hp.beta1),
          static_cast<float>(hp.beta2),
          static_cast<float>(1.0 - hp.beta1),
          static_cast<float>(1.0 - hp.beta2),
          static_cast<float>(1.0 - std::pow(hp.beta1, step_d)),
          static_cast<float>(1.0 - std::pow(hp.beta2, step_d)),
          static_cast<float>(hp.learning_rate),
          static_cast<float>(hp.eps),
          static_cast<float>(hp.weight_decay),
          grad_scale};
}

// kernels/cpu/adamw.hpp's step for one element (m, v and param in place):
//   g = grad grad_scale
//   m = beta1 m + (1 - beta1) g          v = beta2 v + (1 - beta2) g^2
//   param -= lr (m / bc1 / (sqrt(v / bc2) + eps) + weight_decay param)
MESHPLAN_HD inline void adamw_element(float& param, float& m, float& v, float grad, const AdamWStepScalars& s) {
  const float g = grad * s.grad_scale;
  const float m_new = s.beta1 * m + s.one_minus_beta1 * g;
  const float v_new = s.beta2 * v + s.one_minus_beta2 * g * g;
  m = m_new;
  v = v_new;
  const float m_hat = m_new / s.bias_correction1;
  const float v_hat = v_new / s.bias_correction2;
  param -= s.lr * (m_hat / (sqrtf(v_hat) + s.eps) + s.weight_decay * param);
}

}  // namespace meshplan::kernels::cuda
