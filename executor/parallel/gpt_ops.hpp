// The math of the GPT executor on one backend's memory: every op ParallelGpt
// and its trainer run on a tensor, so that they name no device and hold no
// host pointer into a buffer. ParallelGpt keeps the order of the ops, the
// shapes, the collectives and which buffer is which; a GptOps only computes.
// make_cpu_gpt_ops gives the CPU's: the kernels of kernels/cpu/ (what the
// executor always ran, so the numerics are unchanged bit for bit). A GPU's
// come from the library that has its kernels, which the executor does not
// link; whoever builds a model on a GPU backend hands them to
// ParallelGpt::create.
//
// Pointers are the backend's memory (from DeviceVector / Backend::allocate),
// including tokens and targets. Ops run in order on the backend's default
// context; the ones that return a number to the host (l2_norm, loss_summary)
// wait for it. The tensor-parallel shape (TpShape, shard_layout.hpp) says
// which norm, activation, attention and positions the model has and this
// rank's share of the heads.
//
// Accumulating ops add into their outputs (the gradients: `+=`), as the
// kernels of kernels/cpu/ do; the rest overwrite.
//
// defines: GptOps, LossSummary, summarize_loss_rows, attention_probability_elements, make_cpu_gpt_ops
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "executor/backend/backend.hpp"
#include "executor/parallel/shard_layout.hpp"
#include "kernels/cpu/adamw_hyperparameters.hpp"
#include "model/plan.hpp"
#include "model/precision.hpp"
#include "model/problem.hpp"

namespace meshplan::exec::parallel {

// Of a micro-batch's loss rows (vocab-parallel cross-entropy): the sum of
// row losses over rows with a target (target >= 0), in row order in double,
// how many such rows, and how many of them this rank predicted correctly.
struct LossSummary {
  double loss_sum = 0;
  std::int64_t counted = 0;
  std::int64_t correct = 0;
};

// LossSummary of host rows: the losses of the rows whose target is not
// negative summed in row order in double, their count, and how many are
// correct (correct[n] > 0). Every GptOps::loss_summary ends here.
inline LossSummary summarize_loss_rows(const float* row_loss, const float* correct, const std::int32_t* targets,
                                       std::int64_t N) {
  LossSummary summary;
  for (std::int64_t n = 0; n < N; ++n) {
    if (targets[n] < 0) continue;
    summary.loss_sum += static_cast<double>(row_loss[n]);
    summary.correct += correct[n] > 0 ? 1 : 0;
    ++summary.counted;
  }
  return summary;
}

// The causal attention's probabilities [B, heads, T, T] of this rank's heads:
// what the attention kernels that keep them (the CPU's, the GPU's fp32 ones)
// save for the backward.
inline std::int64_t attention_probability_elements(const TpShape& s, std::int64_t B, std::int64_t T) {
  return B * s.heads_local() * T * T;
}

class GptOps {
 public:
  virtual ~GptOps() = default;

  // What these ops cannot run of a model with this rank's shape, naming the
  // model's fields (a GPU's ops may cover fewer layer kinds than the CPU's);
  // ParallelGpt::create refuses the model then. None by default.
  virtual Problems model_problems(const TpShape& shape) const {
    (void)shape;
    return {};
  }

  // The linear layers' GEMMs: fp32 (default) or bf16 operands with fp32
  // accumulation; problems name "--precision".
  virtual Problems set_matmul_precision(Precision precision) = 0;
  virtual Precision matmul_precision() const = 0;

  // ---- elementwise on n floats
  virtual void copy(float* destination, const float* source, std::int64_t n) = 0;
  virtual void add(float* destination, const float* source, std::int64_t n) = 0;  // destination += source
  virtual void scale(float* x, float factor, std::int64_t n) = 0;

  // ---- layers ([rows, C] row-major)
  // out[N, OC] = inp[N, C] weight[OC, C]^T (+ bias[OC], when not null).
  virtual void linear_forward(float* out, const float* inp, const float* weight, const float* bias, std::int64_t N,
                              std::int64_t C, std::int64_t OC) = 0;
  // Accumulates dinp, dweight and dbias (each skipped when null).
  virtual void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* weight, std::int64_t N, std::int64_t C, std::int64_t OC) = 0;
  // out = x + (y + bias) row by row (bias null: out = x + y).
  virtual void residual_bias(float* out, const float* x, const float* y, const float* bias, std::int64_t rows,
                             std::int64_t C) = 0;
  // dbias[C] += the column sums of dout[rows, C].
  virtual void bias_backward(float* dbias, const float* dout, std::int64_t rows, std::int64_t C) = 0;
  // The model's norm: layer norm (weight, bias; mean and rstd saved) or RMSNorm (weight; rstd saved, mean unused).
  virtual void norm_forward(const TpShape& s, float* out, float* mean, float* rstd, const float* x, const float* weight,
                            const float* bias, std::int64_t rows, std::int64_t C) = 0;
  // Accumulates dx, dweight, dbias (dbias null under RMSNorm).
  virtual void norm_backward(const TpShape& s, float* dx, float* dweight, float* dbias, const float* dout,
                             const float* x, const float* weight, const float* mean, const float* rstd,
                             std::int64_t rows, std::int64_t C) = 0;
  // The MLP's activation, fc's output [rows, fc_local] -> [rows, ffn_local] (F = ffn_local).
  virtual void mlp_activation_forward(const TpShape& s, float* out, const float* in, std::int64_t rows,
                                      std::int64_t F) = 0;
  // Accumulates din.
  virtual void mlp_activation_backward(const TpShape& s, float* din, const float* dout, const float* in,
                                       std::int64_t rows, std::int64_t F) = 0;
  // Rotary positions on the query and key heads of qkv [rows, qkv_local]
  // (inverse: their gradients rotated back); nothing without rotary positions.
  virtual void rotate_qk(const TpShape& s, float* qkv, std::int64_t rows, std::int64_t seq_len, bool inverse) = 0;
  // Causal attention of this rank's heads: what the forward keeps for the
  // backward (`state`) is the op's own (the CPU keeps the probabilities
  // [B, heads, T, T]); attention_state_elements says how many floats.
  virtual std::int64_t attention_state_elements(const TpShape& s, std::int64_t B, std::int64_t T) const = 0;
  // How that attention computes, as the cost model names it (plan.hpp):
  // unfused keeps the s x s probabilities, fused (flash) O(s) per row. The
  // run report prices the step with it.
  virtual Attention attention(const TpShape&) const { return Attention::unfused; }
  virtual void attention_forward(const TpShape& s, float* out, float* state, const float* qkv, std::int64_t B,
                                 std::int64_t T) = 0;
  // Accumulates dqkv.
  virtual void attention_backward(const TpShape& s, float* dqkv, const float* dout, const float* qkv,
                                  const float* out, const float* state, std::int64_t B, std::int64_t T) = 0;

  // ---- embeddings (vocabulary-parallel: this rank holds rows [vocab_begin, vocab_begin + vocab_real))
  // out[n] = wte[tokens[n] - vocab_begin] for tokens in the shard, 0 elsewhere.
  virtual void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, std::int64_t vocab_begin,
                                 std::int64_t vocab_real, std::int64_t rows, std::int64_t C) = 0;
  // dwte[tokens[n] - vocab_begin] += dout[n] for the shard's tokens, rows in order.
  virtual void embedding_backward(float* dwte, const float* dout, const std::int32_t* tokens,
                                  std::int64_t vocab_begin, std::int64_t vocab_real, std::int64_t rows,
                                  std::int64_t C) = 0;
  // x[r] += wpe[(row_offset + r) % seq_len] (learned positions).
  virtual void positions_forward(float* x, const float* wpe, std::int64_t rows, std::int64_t row_offset,
                                 std::int64_t seq_len, std::int64_t C) = 0;
  // dwpe[(row_offset + r) % seq_len] += dx[r], rows in order.
  virtual void positions_backward(float* dwpe, const float* dx, std::int64_t rows, std::int64_t row_offset,
                                  std::int64_t seq_len, std::int64_t C) = 0;

  // ---- vocabulary-parallel softmax cross-entropy (parallel_gpt.cpp runs
  // the phases with the tp reductions between them); logits [N, Vp], of
  // which the first vocab_real columns are real.
  // row_max[n] = the row's largest real logit (-inf when vocab_real is 0), written.
  virtual void loss_row_max(float* row_max, const float* logits, std::int64_t N, std::int64_t Vp,
                            std::int64_t vocab_real) = 0;
  // logits become exp(z - row_max) (padding columns 0); sums [2N] gets
  // [sum of exp | target logit (0 when the target is not in the shard)];
  // correct[n] 1 where the target is in the shard and its logit is the row's maximum.
  virtual void loss_exponentials(float* logits, float* sums, float* correct, const float* row_max,
                                 const std::int32_t* targets, std::int64_t vocab_begin, std::int64_t N,
                                 std::int64_t Vp, std::int64_t vocab_real) = 0;
  // With the sums reduced over tp: logits become probabilities, row_loss[n] = log(sum) - (target logit - max).
  virtual void loss_normalize(float* probabilities, float* row_loss, const float* sums, const float* row_max,
                              std::int64_t N, std::int64_t Vp, std::int64_t vocab_real) = 0;
  // The rows' loss and correct predictions, rows in order (waits).
  virtual LossSummary loss_summary(const float* row_loss, const float* correct, const std::int32_t* targets,
                                   std::int64_t N) = 0;
  // dlogits[n] = scale (p[n] - onehot(target in this shard)), written;
  // dlogits may be `probabilities` (ParallelGpt computes it in place).
  virtual void loss_backward(float* dlogits, const float* probabilities, const std::int32_t* targets,
                             std::int64_t vocab_begin, std::int64_t vocab_real, float scale, std::int64_t N,
                             std::int64_t Vp) = 0;

  // ---- optimizer
  // kernels/cpu/adamw.hpp's step on n elements (step counts from 1).
  virtual void adamw_update(float* params, const float* grads, float* m, float* v, std::int64_t n, std::int64_t step,
                            const kernels::AdamWHyperparameters& hp) = 0;
  // One part of a tensor that a rank's optimizer step updates; `decays`: with hp's weight decay (else 0).
  struct AdamWSpan {
    float* params;
    const float* grads;
    float* m;
    float* v;
    std::int64_t n;
    bool decays;
  };
  // The step over every span of a rank, in one call: span by span here; the GPU's is one multi-tensor
  // launch per weight-decay setting.
  virtual void adamw_update_all(const std::vector<AdamWSpan>& spans, std::int64_t step,
                                const kernels::AdamWHyperparameters& hp) {
    kernels::AdamWHyperparameters no_decay = hp;
    no_decay.weight_decay = 0;
    for (const AdamWSpan& s : spans) adamw_update(s.params, s.grads, s.m, s.v, s.n, step, s.decays ? hp : no_decay);
  }
  // The L2 norm of the concatenation of the spans (waits).
  virtual double l2_norm(const std::vector<std::span<const float>>& spans) = 0;
};

// The CPU's ops on a host-accessible backend (the bf16 workspace of the
// GEMMs is allocated from it); throws std::invalid_argument on another.
std::unique_ptr<GptOps> make_cpu_gpt_ops(Backend& backend);

}  // namespace meshplan::exec::parallel
