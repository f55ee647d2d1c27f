// The CUDA kernels the GPT executor's GptOps need beyond kernels.hpp
// (executor/parallel/cuda_gpt_ops.cpp): the vocabulary-parallel embedding
// and loss phases, the positions, the row-parallel linear's residual and
// bias, an fp32 causal attention that keeps the probabilities (as the CPU
// kernel does, so an fp32 GPU step can be compared with the CPU's at 1e-5),
// and the bf16 rounding of GEMM operands. Each has the contract of the CPU
// op of the same name in executor/parallel/gpt_ops.hpp; device pointers, one
// stream, launched asynchronously, every launch checked. Deterministic: no
// float atomics; every sum has a fixed order.
//
//   scale, add                      elementwise, a thread per element
//   residual_bias                   out = x + (y + bias[c])
//   bias_backward                   dbias[c] += column sums, a thread per
//                                   channel summing rows in order
//   round_to_bf16, widen_bf16,      fp32 -> bf16 (round to nearest even),
//   add_bf16                        bf16 -> fp32, and its accumulation
//   vocab_embedding_forward,        rows of this rank's vocabulary shard;
//   vocab_embedding_backward        backward: a thread per channel over the
//                                   rows in order (the CPU's order)
//   positions_forward, _backward    x[r] += wpe[(offset + r) % T]; backward
//                                   a thread per (position, channel)
//   loss_row_max, loss_exponentials,
//   loss_normalize, loss_backward   the phases of the vocabulary-parallel
//                                   cross-entropy, a block per row
//   attention_forward_fp32          causal grouped-query attention in fp32
//                                   from the packed qkv of kernels/cpu/
//                                   attention.hpp's gqa_attention_*: a block
//                                   per (batch, head, query row), probabilities
//                                   [B, NH, T, T] written (zeros past the row)
//   attention_backward_fp32         dq by a block per query row (which also
//                                   writes the row's score gradients to
//                                   `ds` [B, NH, T, T]), then dk, dv by a
//                                   block per (batch, key/value head, key
//                                   row) summing its group's query heads and
//                                   rows in order
//
// defines: scale, add, residual_bias, bias_backward, round_to_bf16, widen_bf16, add_bf16,
// vocab_embedding_forward, vocab_embedding_backward, positions_forward,
// positions_backward, loss_row_max, loss_exponentials, loss_normalize,
// loss_backward, attention_forward_fp32, attention_backward_fp32
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace meshplan::kernels::cuda {

void scale(float* x, float factor, std::int64_t n, cudaStream_t stream);
void add(float* destination, const float* source, std::int64_t n, cudaStream_t stream);
void residual_bias(float* out, const float* x, const float* y, const float* bias, std::int64_t rows, std::int64_t C,
                   cudaStream_t stream);
void bias_backward(float* dbias, const float* dout, std::int64_t rows, std::int64_t C, cudaStream_t stream);
void round_to_bf16(__nv_bfloat16* out, const float* in, std::int64_t n, cudaStream_t stream);
// out = in (bf16 -> fp32); add_bf16: out += in.
void widen_bf16(float* out, const __nv_bfloat16* in, std::int64_t n, cudaStream_t stream);
void add_bf16(float* out, const __nv_bfloat16* in, std::int64_t n, cudaStream_t stream);

void vocab_embedding_forward(float* out, const std::int32_t* tokens, const float* wte, std::int64_t vocab_begin,
                             std::int64_t vocab_real, std::int64_t rows, std::int64_t C, cudaStream_t stream);
void vocab_embedding_backward(float* dwte, const float* dout, const std::int32_t* tokens, std::int64_t vocab_begin,
                              std::int64_t vocab_real, std::int64_t rows, std::int64_t C, cudaStream_t stream);
void positions_forward(float* x, const float* wpe, std::int64_t rows, std::int64_t row_offset, std::int64_t seq_len,
                       std::int64_t C, cudaStream_t stream);
void positions_backward(float* dwpe, const float* dx, std::int64_t rows, std::int64_t row_offset,
                        std::int64_t seq_len, std::int64_t C, cudaStream_t stream);

void loss_row_max(float* row_max, const float* logits, std::int64_t N, std::int64_t Vp, std::int64_t vocab_real,
                  cudaStream_t stream);
void loss_exponentials(float* logits, float* sums, float* correct, const float* row_max, const std::int32_t* targets,
                       std::int64_t vocab_begin, std::int64_t N, std::int64_t Vp, std::int64_t vocab_real,
                       cudaStream_t stream);
void loss_normalize(float* probabilities, float* row_loss, const float* sums, const float* row_max, std::int64_t N,
                    std::int64_t Vp, std::int64_t vocab_real, cudaStream_t stream);
void loss_backward(float* dlogits, const float* probabilities, const std::int32_t* targets, std::int64_t vocab_begin,
                   std::int64_t vocab_real, float scale, std::int64_t N, std::int64_t Vp, cudaStream_t stream);

// qkv [B, T, (NH + 2 KVH) D]; query head h reads key/value head
// (head_offset + h) / group; out [B, T, NH D] and att [B, NH, T, T] written.
void attention_forward_fp32(float* out, float* att, const float* qkv, std::int64_t B, std::int64_t T, std::int64_t NH,
                            std::int64_t KVH, std::int64_t D, std::int64_t group, std::int64_t head_offset,
                            cudaStream_t stream);
// Accumulates dqkv; ds [B, NH, T, T] is scratch.
void attention_backward_fp32(float* dqkv, float* ds, const float* dout, const float* qkv, const float* att,
                             std::int64_t B, std::int64_t T, std::int64_t NH, std::int64_t KVH, std::int64_t D,
                             std::int64_t group, std::int64_t head_offset, cudaStream_t stream);

}  // namespace meshplan::kernels::cuda
