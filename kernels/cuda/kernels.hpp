// The CUDA kernels of the GPU executor (issue 16), the ops of kernels/cpu/
// on device buffers: each has the same contract as its CPU namesake (the
// CPU kernel, instantiated in double, is the reference the tests compare
// with), takes device pointers and a stream, and launches asynchronously on
// it. Every CUDA call is checked (cuda_check.hpp). fp32, except flash
// attention and the cross-entropy (bf16 tensors, fp32 arithmetic). The
// GEMMs (bf16 with fp32 accumulation, fp32, TF32; bias and GELU epilogues)
// go through cuBLASLt in gemm_lt.hpp, not here.
//
//   gelu_forward, gelu_backward      GPT-2's tanh GELU, as x sigmoid(2u)
//                                    (no cancellation); backward accumulates
//   residual_forward, _backward      out = a + b; backward accumulates both
//   layernorm_forward                one block per row: mean and variance in
//                                    two passes over the row (as the CPU
//                                    kernel), rstd = 1 / sqrt(var + 1e-5)
//   layernorm_backward               dinp per row (one block per row);
//                                    dweight and dbias by a block per 32
//                                    channels, rows summed in a fixed order:
//                                    deterministic, no float atomics
//   rmsnorm_forward, _backward       the same for RMSNorm (no mean, no bias)
//   swiglu_*, geglu_*                gated MLP activations of [gate | up]
//                                    rows (gated_mlp.cu); backward accumulates
//   rope_apply                       rotary positions on heads, in place
//   adamw_update                     kernels/cpu/adamw.hpp's step, elementwise
//   squared_norm                     sum of squares in double: a fixed grid of
//                                    per-block partial sums, then one block
//                                    adds them in order (deterministic)
//   AdamWTensorList,                 the same step over every tensor of a
//   adamw_update_multi               list in one launch, a block per chunk of
//                                    at most 64Ki elements of one tensor
//                                    (adamw_multi.cu, adamw_multi_chunks.hpp);
//                                    gradients scaled first (clipping)
//   global_squared_norm              sum of squares of all the list's
//                                    gradients in double: one partial sum per
//                                    chunk, added in chunk order by one
//                                    block (deterministic, no atomics)
//   embedding_forward, _backward     token + position embedding; backward
//                                    sums each distinct token's rows in
//                                    position order (embedding_groups.hpp):
//                                    deterministic, no float atomics
//   softmax_cross_entropy            the loss over the vocabulary and its
//                                    gradient in one kernel, a block per row,
//                                    from bf16 logits, no fp32 copy of them
//                                    (cross_entropy.cu, cross_entropy_rows.hpp)
//   flash_attention_forward,         causal grouped-query attention from the
//   flash_attention_backward         packed qkv of kernels/cpu/attention.hpp's
//                                    gqa_attention_*, FlashAttention-2's
//                                    algorithm on tensor cores (mma.sync,
//                                    bf16; compute capability 8.0 and later;
//                                    flash_attention.cu)
//
// defines: gelu_forward, gelu_backward, residual_forward, residual_backward,
// layernorm_forward, layernorm_backward, rmsnorm_forward, rmsnorm_backward,
// swiglu_forward, swiglu_backward, geglu_forward, geglu_backward, rope_apply, adamw_update, squared_norm,
// squared_norm_into, AdamWTensor, AdamWTensorList, adamw_update_multi, global_squared_norm,
// embedding_forward, embedding_backward, DeviceEmbeddingGroups,
// softmax_cross_entropy, flash_attention_forward, flash_attention_backward
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/cpu/adamw_hyperparameters.hpp"

namespace meshplan::kernels::cuda {

void gelu_forward(float* out, const float* inp, std::int64_t n, cudaStream_t stream);
void gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t n, cudaStream_t stream);
void residual_forward(float* out, const float* a, const float* b, std::int64_t n, cudaStream_t stream);
void residual_backward(float* da, float* db, const float* dout, std::int64_t n, cudaStream_t stream);

// inp, out [N, C]; mean, rstd [N]; weight, bias [C].
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       std::int64_t N, std::int64_t C, cudaStream_t stream);
// Accumulates dinp [N, C], dweight, dbias [C].
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, std::int64_t N, std::int64_t C,
                        cudaStream_t stream);

// kernels/cpu/rmsnorm.hpp's contract: out [N, C] and rstd [N] written (eps
// inside the root); the backward accumulates dinp [N, C] and dweight [C].
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, std::int64_t N, std::int64_t C,
                     double eps, cudaStream_t stream);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, std::int64_t N, std::int64_t C, cudaStream_t stream);

// kernels/cpu/swiglu.hpp's contract: inp [N, 2F] (each row [gate | up]), out
// [N, F] written; the backward accumulates dinp [N, 2F].
void swiglu_forward(float* out, const float* inp, std::int64_t N, std::int64_t F, cudaStream_t stream);
void swiglu_backward(float* dinp, const float* dout, const float* inp, std::int64_t N, std::int64_t F,
                     cudaStream_t stream);
void geglu_forward(float* out, const float* inp, std::int64_t N, std::int64_t F, cudaStream_t stream);
void geglu_backward(float* dinp, const float* dout, const float* inp, std::int64_t N, std::int64_t F,
                    cudaStream_t stream);

// kernels/cpu/rope.hpp's contract: rotates `heads` heads of head_dim at the
// start of each of `rows` rows (row_stride floats apart; row r at position r
// mod seq_len) in place; `inverse` rotates back (the backward).
void rope_apply(float* x, std::int64_t rows, std::int64_t seq_len, std::int64_t heads, std::int64_t head_dim,
                std::int64_t row_stride, double theta, bool inverse, cudaStream_t stream);

void adamw_update(float* params, const float* grads, float* m, float* v, std::int64_t n, std::int64_t step,
                  const AdamWHyperparameters& hp, cudaStream_t stream);

// sum of x^2 over n elements, accumulated in double; `scratch` holds
// squared_norm_scratch_doubles() doubles of device memory. Synchronises the stream.
constexpr int kNormBlocks = 256;
constexpr std::int64_t squared_norm_scratch_doubles() { return kNormBlocks + 1; }
double squared_norm(const float* x, std::int64_t n, double* scratch, cudaStream_t stream);
// The same sum left in device memory at *total, without waiting: several
// norms queue on one stream and come back in one copy. `scratch` holds
// kNormBlocks doubles and may be reused by the next call on the stream.
void squared_norm_into(const float* x, std::int64_t n, double* scratch, double* total, cudaStream_t stream);

// One tensor of a multi-tensor AdamW step: n floats each of parameters,
// gradients and the two moments in device memory, the four not overlapping.
struct AdamWTensor {
  float* params = nullptr;
  const float* grads = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  std::int64_t n = 0;
};
struct TensorChunk;  // adamw_multi_chunks.hpp

// The tensors one optimizer steps (a model's parameters, or a rank's shard
// of them) and their chunk table (adamw_multi_chunks.hpp), copied to the
// device once, when the list is built (synchronously): the list owns that
// copy and the norm's per-chunk partial sums, and frees them when it goes;
// the tensors stay the caller's. Build one per set of buffers and reuse it
// every step, with no copy per step. Calls on one list must not overlap on
// two streams (they share the partial sums). Throws std::invalid_argument on
// a negative n or a null pointer with n > 0.
class AdamWTensorList {
 public:
  explicit AdamWTensorList(const std::vector<AdamWTensor>& tensors);
  ~AdamWTensorList();
  AdamWTensorList(const AdamWTensorList&) = delete;
  AdamWTensorList& operator=(const AdamWTensorList&) = delete;
  AdamWTensorList(AdamWTensorList&& other) noexcept;
  AdamWTensorList& operator=(AdamWTensorList&&) = delete;

  std::int64_t tensor_count() const { return tensor_count_; }
  std::int64_t chunk_count() const { return chunk_count_; }
  std::int64_t element_count() const { return element_count_; }
  // Device memory: tensors [tensor_count], chunks [chunk_count], partial
  // sums [chunk_count + 1] (one per chunk, then the total).
  const AdamWTensor* device_tensors() const { return tensors_; }
  const TensorChunk* device_chunks() const { return chunks_; }
  double* device_partial_sums() const { return partial_sums_; }

 private:
  AdamWTensor* tensors_ = nullptr;
  TensorChunk* chunks_ = nullptr;
  double* partial_sums_ = nullptr;
  std::int64_t tensor_count_ = 0;
  std::int64_t chunk_count_ = 0;
  std::int64_t element_count_ = 0;
};

// adamw_update over every tensor of the list in one launch, each gradient
// multiplied by grad_scale first (1: no clipping; min(1, max_norm / norm) to
// clip, as kernels/cpu/adamw.hpp's clip_scale). Gradients are only read.
void adamw_update_multi(const AdamWTensorList& list, std::int64_t step, const AdamWHyperparameters& hp,
                        float grad_scale, cudaStream_t stream);
// Sum over every gradient tensor of the list of g^2, in double, the same
// bits on every run and GPU for the same list and values. Synchronises the
// stream (the clipping factor is needed on the host).
double global_squared_norm(const AdamWTensorList& list, cudaStream_t stream);

// tokens [B, T] in [0, V), wte [V, C], wpe [maxT, C] or null: out [B, T, C]
// = wte[token] + wpe[t], written.
void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, std::int64_t B,
                       std::int64_t T, std::int64_t C, cudaStream_t stream);
// The batch's EmbeddingGroups (embedding_groups.hpp) copied to the device:
// `count` distinct tokens, starts [count + 1], positions [B T].
struct DeviceEmbeddingGroups {
  const std::int32_t* tokens = nullptr;
  const std::int32_t* starts = nullptr;
  const std::int32_t* positions = nullptr;
  std::int64_t count = 0;
};
// Accumulates dwte[token] += the token's dout rows (in position order) and,
// when dwpe is not null, dwpe[t] += sum over the batch of dout[b, t].
void embedding_backward(float* dwte, float* dwpe, const float* dout, const DeviceEmbeddingGroups& groups, std::int64_t B,
                        std::int64_t T, std::int64_t C, cudaStream_t stream);

// logits [N, V] bf16, targets [N] in [0, V): losses [N] = -log softmax at the
// target (fp32) and dlogits [N, V] = dloss / N (softmax - onehot(target)) in
// bf16, both written; dlogits may be logits itself (the gradient replaces
// the logits in place).
void softmax_cross_entropy(__nv_bfloat16* dlogits, float* losses, const __nv_bfloat16* logits, const std::int32_t* targets,
                           std::int64_t N, std::int64_t V, float dloss, cudaStream_t stream);

// Causal attention, scale 1 / sqrt(D), D 64 or 128, KVH dividing NH (query
// head h reads key/value head h / (NH / KVH)). qkv [B, T, (NH + 2 KVH) D] in
// gqa_attention_forward's layout; out [B, T, NH D] and lse [B, NH, T] (each
// row's log-sum-exp of its scaled scores, all the backward keeps) written.
// Needs compute capability 8.0 or later, qkv and dout 16-byte aligned, out
// and dqkv 4-byte aligned; throws std::invalid_argument otherwise.
void flash_attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, std::int64_t B, std::int64_t T,
                             std::int64_t NH, std::int64_t KVH, std::int64_t D, cudaStream_t stream);
// Given dout [B, T, NH D] and the forward's qkv, out and lse, writes dqkv
// [B, T, (NH + 2 KVH) D] (a key/value head's gradient sums its group's query
// heads); delta [B, NH, T] is scratch. Throws std::invalid_argument on
// shapes it does not run.
void flash_attention_backward(__nv_bfloat16* dqkv, float* delta, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                              const __nv_bfloat16* out, const float* lse, std::int64_t B, std::int64_t T, std::int64_t NH,
                              std::int64_t KVH, std::int64_t D, cudaStream_t stream);

}  // namespace meshplan::kernels::cuda
