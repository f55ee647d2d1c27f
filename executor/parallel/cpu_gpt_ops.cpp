// GptOps on the CPU (gpt_ops.hpp): the kernels of kernels/cpu/, with the
// arithmetic the executor has always had (the loss rows are
// kernels::cross_entropy_forward's max, vectorised exp, sums and formula, in
// OpenMP threads; sums in row order in double), so a one-rank model still
// computes what the reference GPT of tests/reference/ computes, bit for bit.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "executor/model/matmul_runner.hpp"
#include "executor/parallel/gpt_ops.hpp"
#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/adamw.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/fast_math.hpp"
#include "kernels/cpu/layernorm.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/rmsnorm.hpp"
#include "kernels/cpu/rope.hpp"
#include "kernels/cpu/swiglu.hpp"


namespace meshplan::exec::parallel {
namespace {

class CpuGptOps final : public GptOps {
 public:
  explicit CpuGptOps(Backend& backend) : matmul_(backend) {}

  Problems set_matmul_precision(Precision precision) override { return matmul_.set_precision(precision); }
  Precision matmul_precision() const override { return matmul_.precision(); }

  void copy(float* destination, const float* source, std::int64_t n) override {
    std::copy(source, source + n, destination);
  }
  void add(float* destination, const float* source, std::int64_t n) override {
    for (std::int64_t i = 0; i < n; ++i) destination[i] += source[i];
  }
  void scale(float* x, float factor, std::int64_t n) override {
    for (std::int64_t i = 0; i < n; ++i) x[i] *= factor;
  }

  void linear_forward(float* out, const float* inp, const float* weight, const float* bias, std::int64_t N,
                      std::int64_t C, std::int64_t OC) override {
    matmul_.forward(out, inp, weight, bias, N, C, OC);
  }
  void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, std::int64_t N, std::int64_t C, std::int64_t OC) override {
    matmul_.backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  }
  void residual_bias(float* out, const float* x, const float* y, const float* bias, std::int64_t rows,
                     std::int64_t C) override {
    if (bias == nullptr) {
      for (std::int64_t i = 0; i < rows * C; ++i) out[i] = x[i] + y[i];
      return;
    }
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < C; ++c) out[r * C + c] = x[r * C + c] + (y[r * C + c] + bias[c]);
  }
  void bias_backward(float* dbias, const float* dout, std::int64_t rows, std::int64_t C) override {
    kernels::bias_backward(dbias, dout, rows, C);
  }
  void norm_forward(const TpShape& s, float* out, float* mean, float* rstd, const float* x, const float* weight,
                    const float* bias, std::int64_t rows, std::int64_t C) override {
    if (s.rms()) kernels::rmsnorm_forward(out, rstd, x, weight, rows, C, s.dims.norm_eps);
    else kernels::layernorm_forward(out, mean, rstd, x, weight, bias, rows, C);
  }
  void norm_backward(const TpShape& s, float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                     const float* weight, const float* mean, const float* rstd, std::int64_t rows,
                     std::int64_t C) override {
    if (s.rms()) kernels::rmsnorm_backward(dx, dweight, dout, x, weight, rstd, rows, C);
    else kernels::layernorm_backward(dx, dweight, dbias, dout, x, weight, mean, rstd, rows, C);
  }
  void mlp_activation_forward(const TpShape& s, float* out, const float* in, std::int64_t rows,
                              std::int64_t F) override {
    switch (s.dims.feed_forward) {
      case FeedForward::gelu: kernels::gelu_forward(out, in, rows * F); return;
      case FeedForward::swiglu: kernels::swiglu_forward(out, in, rows, F); return;
      case FeedForward::geglu: kernels::geglu_forward(out, in, rows, F); return;
    }
  }
  void mlp_activation_backward(const TpShape& s, float* din, const float* dout, const float* in, std::int64_t rows,
                               std::int64_t F) override {
    switch (s.dims.feed_forward) {
      case FeedForward::gelu: kernels::gelu_backward(din, in, dout, rows * F); return;
      case FeedForward::swiglu: kernels::swiglu_backward(din, dout, in, rows, F); return;
      case FeedForward::geglu: kernels::geglu_backward(din, dout, in, rows, F); return;
    }
  }
  void rotate_qk(const TpShape& s, float* qkv, std::int64_t rows, std::int64_t seq_len, bool inverse) override {
    if (!s.rotary()) return;
    const std::int64_t D = s.head_dim, stride = s.qkv_local();
    kernels::rope_apply(qkv, rows, seq_len, s.heads_local(), D, stride, s.dims.rope_theta, inverse);
    kernels::rope_apply(qkv + s.q_local(), rows, seq_len, s.kv_heads_local(), D, stride, s.dims.rope_theta, inverse);
  }
  std::int64_t attention_state_elements(const TpShape& s, std::int64_t B, std::int64_t T) const override {
    return attention_probability_elements(s, B, T);
  }
  void attention_forward(const TpShape& s, float* out, float* att, const float* qkv, std::int64_t B,
                         std::int64_t T) override {
    if (s.kv_heads == s.heads)
      kernels::attention_forward(out, att, qkv, B, T, s.q_local(), s.heads_local());
    else
      kernels::gqa_attention_forward(out, att, qkv, B, T, s.heads_local(), s.kv_heads_local(), s.head_dim,
                                     s.kv_group(), s.kv_head_offset());
  }
  void attention_backward(const TpShape& s, float* dqkv, const float* dout, const float* qkv, const float*,
                          const float* att, std::int64_t B, std::int64_t T) override {
    if (s.kv_heads == s.heads)
      kernels::attention_backward(dqkv, dout, qkv, att, B, T, s.q_local(), s.heads_local());
    else
      kernels::gqa_attention_backward(dqkv, dout, qkv, att, B, T, s.heads_local(), s.kv_heads_local(), s.head_dim,
                                      s.kv_group(), s.kv_head_offset());
  }

  void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, std::int64_t vocab_begin,
                         std::int64_t vocab_real, std::int64_t rows, std::int64_t C) override {
    for (std::int64_t n = 0; n < rows; ++n) {
      const std::int64_t row = tokens[n] - vocab_begin;
      float* o = out + n * C;
      if (row >= 0 && row < vocab_real) std::copy(wte + row * C, wte + (row + 1) * C, o);
      else std::fill(o, o + C, 0.0f);
    }
  }
  void embedding_backward(float* dwte, const float* dout, const std::int32_t* tokens, std::int64_t vocab_begin,
                          std::int64_t vocab_real, std::int64_t rows, std::int64_t C) override {
    for (std::int64_t n = 0; n < rows; ++n) {
      const std::int64_t row = tokens[n] - vocab_begin;
      if (row < 0 || row >= vocab_real) continue;
      float* dw = dwte + row * C;
      for (std::int64_t c = 0; c < C; ++c) dw[c] += dout[n * C + c];
    }
  }
  void positions_forward(float* x, const float* wpe, std::int64_t rows, std::int64_t row_offset, std::int64_t seq_len,
                         std::int64_t C) override {
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t position = (row_offset + r) % seq_len;
      for (std::int64_t c = 0; c < C; ++c) x[r * C + c] += wpe[position * C + c];
    }
  }
  void positions_backward(float* dwpe, const float* dx, std::int64_t rows, std::int64_t row_offset,
                          std::int64_t seq_len, std::int64_t C) override {
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t position = (row_offset + r) % seq_len;
      for (std::int64_t c = 0; c < C; ++c) dwpe[position * C + c] += dx[r * C + c];
    }
  }

  void loss_row_max(float* row_max, const float* logits, std::int64_t N, std::int64_t Vp,
                    std::int64_t vocab_real) override {
#pragma omp parallel for schedule(static) if (threads(N, Vp))
    for (std::int64_t n = 0; n < N; ++n) {
      const float* z = logits + n * Vp;
      float m = -std::numeric_limits<float>::infinity();
      for (std::int64_t v = 0; v < vocab_real; ++v)
        if (z[v] > m) m = z[v];
      row_max[n] = m;
    }
  }
  void loss_exponentials(float* logits, float* sums, float* correct, const float* row_max, const std::int32_t* targets,
                         std::int64_t vocab_begin, std::int64_t N, std::int64_t Vp, std::int64_t vocab_real) override {
#pragma omp parallel for schedule(static) if (threads(N, Vp))
    for (std::int64_t n = 0; n < N; ++n) {
      float* z = logits + n * Vp;
      const float m = row_max[n];
      const std::int64_t target = targets[n] - vocab_begin;
      sums[N + n] = 0.0f;
      correct[n] = 0.0f;
      if (target >= 0 && target < vocab_real) {
        sums[N + n] = z[target];
        correct[n] = z[target] == m ? 1.0f : 0.0f;
      }
#pragma omp simd
      for (std::int64_t v = 0; v < vocab_real; ++v) z[v] = kernels::exp_of(z[v] - m);
      float sum = 0;
      for (std::int64_t v = 0; v < vocab_real; ++v) sum += z[v];
      for (std::int64_t v = vocab_real; v < Vp; ++v) z[v] = 0;  // padding: masked
      sums[n] = sum;
    }
  }
  void loss_normalize(float* p_all, float* row_loss, const float* sums, const float* row_max, std::int64_t N,
                      std::int64_t Vp, std::int64_t vocab_real) override {
#pragma omp parallel for schedule(static) if (threads(N, Vp))
    for (std::int64_t n = 0; n < N; ++n) {
      float* p = p_all + n * Vp;
      const float sum = sums[n];
      const float inv_sum = 1.0f / sum;
      for (std::int64_t v = 0; v < vocab_real; ++v) p[v] *= inv_sum;
      row_loss[n] = std::log(sum) - (sums[N + n] - row_max[n]);
    }
  }
  LossSummary loss_summary(const float* row_loss, const float* correct, const std::int32_t* targets,
                           std::int64_t N) override {
    return summarize_loss_rows(row_loss, correct, targets, N);
  }
  void loss_backward(float* dlogits, const float* probabilities, const std::int32_t* targets, std::int64_t vocab_begin,
                     std::int64_t vocab_real, float scale, std::int64_t N, std::int64_t Vp) override {
#pragma omp parallel for schedule(static) if (threads(N, Vp))
    for (std::int64_t n = 0; n < N; ++n) {
      const float* p = probabilities + n * Vp;
      float* dz = dlogits + n * Vp;
      for (std::int64_t v = 0; v < Vp; ++v) dz[v] = scale * p[v];
      const std::int64_t target = targets[n] - vocab_begin;
      if (target >= 0 && target < vocab_real) dz[target] -= scale;
    }
  }

  void adamw_update(float* params, const float* grads, float* m, float* v, std::int64_t n, std::int64_t step,
                    const kernels::AdamWHyperparameters& hp) override {
    kernels::adamw_update(params, grads, m, v, n, step, hp);
  }
  double l2_norm(const std::vector<std::span<const float>>& spans) override {
    return kernels::global_l2_norm<float>(spans);
  }

 private:
  // The loss's row loops run in OpenMP threads from this size on.
  static bool threads(std::int64_t N, std::int64_t Vp) { return N * Vp >= (1 << 17); }

  MatmulRunner<float> matmul_;
};

}  // namespace

std::unique_ptr<GptOps> make_cpu_gpt_ops(Backend& backend) {
  if (!backend.host_accessible())
    throw std::invalid_argument("the CPU's GPT ops need host memory, not " + std::string(backend.name()));
  return std::make_unique<CpuGptOps>(backend);
}

}  // namespace meshplan::exec::parallel
