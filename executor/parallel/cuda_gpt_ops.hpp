// GptOps on one GPU (gpt_ops.hpp; issue 16): the GPT executor's math on a
// CudaBackend's memory and its default stream, so ParallelGpt trains on the
// GPU with the same code that trains on the CPU. Built with the CUDA toolkit
// (library meshplan_cuda_gpt); the executor itself does not link it.
//
//   linear layers   cuBLASLt (kernels/cuda/gemm_lt.hpp): fp32 operands in
//                   fp32 arithmetic (CUBLAS_COMPUTE_32F, no TF32, so an fp32
//                   step can be held to the CPU's at 1e-5), or with
//                   --precision bf16 the operands rounded to bf16 in a
//                   workspace and fp32 accumulation and output, as the
//                   CPU's bf16 GEMMs; the bias gradient a column sum
//   layer norm,     kernels/cuda/kernels.hpp (the CPU's two-pass formulas)
//   GELU, AdamW,    AdamW over a step's tensors as one multi-tensor launch
//   squared norm    per weight-decay setting (adamw_update_all); the
//                   gradient norm's per-span sums queued, one wait a step
//   attention       with bf16 GEMMs, head dim 64 or 128 and compute
//                   capability 8.0 on: the bf16 flash attention of
//                   kernels.hpp (tensor cores), which keeps the rows'
//                   log-sum-exp and bf16 copies of qkv and the output, O(T)
//                   per row; otherwise fp32, keeping the probabilities as the
//                   CPU does (gpt_kernels.hpp: attention_*_fp32), multi-head
//                   and grouped-query, the backward's score gradients in a
//                   workspace of the same size
//   Llama layers    RMSNorm, SwiGLU and GeGLU, rotary positions
//                   (kernels.hpp: rmsnorm_*, swiglu_*, geglu_*, rope_apply),
//                   the CPU kernels' formulas
//   the rest        gpt_kernels.hpp: vocabulary-parallel embedding and loss
//                   phases, positions, residual with bias
//
// The fused bf16 cross-entropy of kernels.hpp (no fp32 logits) is the next
// step: the loss keeps fp32 logits, overwritten in place by the
// probabilities and their gradient.
//
// defines: make_cuda_gpt_ops
#pragma once

#include <memory>

#include "executor/backend/cuda_backend.hpp"
#include "executor/parallel/gpt_ops.hpp"

namespace meshplan::exec::parallel {

// The ops of `backend`'s GPU (which must outlive them), on its default stream.
std::unique_ptr<GptOps> make_cuda_gpt_ops(CudaBackend& backend);

}  // namespace meshplan::exec::parallel
