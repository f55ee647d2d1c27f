// GptOps on one GPU (cuda_gpt_ops.hpp). Every op enqueues on the backend's
// default stream, the one DeviceVector's copies and fills and the staged
// communicator's copies use, so ops, copies and collectives run in call
// order without events. Ops that return a number to the host (the loss
// summary, the norm) wait for the stream.
#include "executor/parallel/cuda_gpt_ops.hpp"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "executor/backend/device_vector.hpp"
#include "executor/parallel/cuda_op_times.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/cuda/gpt_kernels.hpp"
#include "kernels/cuda/kernels.hpp"

namespace meshplan::exec::parallel {
namespace {

namespace cu = kernels::cuda;

class CudaGptOps final : public GptOps {
 public:
  explicit CudaGptOps(CudaBackend& backend)
      : stream_((MESHPLAN_CUDA_CHECK(cudaSetDevice(backend.device())), backend.cuda_default_context().stream())),
        bf16_a_(MemoryCategory::workspace, backend),
        bf16_b_(MemoryCategory::workspace, backend),
        bf16_c_(MemoryCategory::workspace, backend),
        flash_dqkv_(MemoryCategory::workspace, backend),
        scores_(MemoryCategory::workspace, backend),
        norm_scratch_(MemoryCategory::workspace, backend),
        norm_totals_(MemoryCategory::workspace, backend),
        times_(stream_) {
    norm_scratch_.resize(static_cast<std::size_t>(cu::squared_norm_scratch_doubles()));
    int major = 0;
    MESHPLAN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, backend.device()));
    tensor_cores_ = major >= 8;
  }


  Problems set_matmul_precision(Precision precision) override {
    if (precision != Precision::fp32 && precision != Precision::bf16)
      return {{Severity::error, "--precision", "the GPU executor computes in fp32 or bf16, not " + to_string(precision)}};
    precision_ = precision;
    return {};
  }
  Precision matmul_precision() const override { return precision_; }

  void copy(float* destination, const float* source, std::int64_t n) override {
    if (n > 0)
      times_.time("copy", [&] {
        MESHPLAN_CUDA_CHECK(cudaMemcpyAsync(destination, source, static_cast<std::size_t>(n) * sizeof(float),
                                            cudaMemcpyDeviceToDevice, stream_));
      });
  }
  void add(float* destination, const float* source, std::int64_t n) override {
    times_.time("add", [&] { cu::add(destination, source, n, stream_); });
  }
  void scale(float* x, float factor, std::int64_t n) override {
    times_.time("scale", [&] { cu::scale(x, factor, n, stream_); });
  }

  void linear_forward(float* out, const float* inp, const float* weight, const float* bias, std::int64_t N,
                      std::int64_t C, std::int64_t OC) override {
    if (precision_ == Precision::bf16) {
      const auto* a = rounded(bf16_a_, inp, N * C);
      const auto* w = rounded(bf16_b_, weight, OC * C);
      times_.time("gemm forward", [&] {
        gemm_.run(cu::linear_forward(cu::GemmType::kBf16ToFp32, out, a, w, bias, N, C, OC), stream_);
      });
      return;
    }
    times_.time("gemm forward",
                [&] { gemm_.run(cu::linear_forward(cu::GemmType::kFp32, out, inp, weight, bias, N, C, OC), stream_); });
  }
  void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, std::int64_t N, std::int64_t C, std::int64_t OC) override {
    if (dbias != nullptr) times_.time("bias backward", [&] { cu::bias_backward(dbias, dout, N, OC, stream_); });
    const bool bf16 = precision_ == Precision::bf16;
    const cu::GemmType type = bf16 ? cu::GemmType::kBf16ToFp32 : cu::GemmType::kFp32;
    const void* g = bf16 ? static_cast<const void*>(rounded(bf16_c_, dout, N * OC)) : dout;
    if (dinp != nullptr) {
      const void* w = bf16 ? static_cast<const void*>(rounded(bf16_b_, weight, OC * C)) : weight;
      times_.time("gemm backward (input)",
                  [&] { gemm_.run(cu::linear_backward_input(type, dinp, g, w, N, C, OC), stream_); });
    }
    if (dweight != nullptr) {
      const void* a = bf16 ? static_cast<const void*>(rounded(bf16_a_, inp, N * C)) : inp;
      times_.time("gemm backward (weight)",
                  [&] { gemm_.run(cu::linear_backward_weight(type, dweight, g, a, N, C, OC), stream_); });
    }
  }
  void residual_bias(float* out, const float* x, const float* y, const float* bias, std::int64_t rows,
                     std::int64_t C) override {
    times_.time("residual + bias", [&] { cu::residual_bias(out, x, y, bias, rows, C, stream_); });
  }
  void bias_backward(float* dbias, const float* dout, std::int64_t rows, std::int64_t C) override {
    times_.time("bias backward", [&] { cu::bias_backward(dbias, dout, rows, C, stream_); });
  }
  void norm_forward(const TpShape& s, float* out, float* mean, float* rstd, const float* x, const float* weight,
                    const float* bias, std::int64_t rows, std::int64_t C) override {
    times_.time("norm forward", [&] {
      if (s.rms()) cu::rmsnorm_forward(out, rstd, x, weight, rows, C, s.dims.norm_eps, stream_);
      else cu::layernorm_forward(out, mean, rstd, x, weight, bias, rows, C, stream_);
    });
  }
  void norm_backward(const TpShape& s, float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                     const float* weight, const float* mean, const float* rstd, std::int64_t rows,
                     std::int64_t C) override {
    times_.time("norm backward", [&] {
      if (s.rms()) cu::rmsnorm_backward(dx, dweight, dout, x, weight, rstd, rows, C, stream_);
      else cu::layernorm_backward(dx, dweight, dbias, dout, x, weight, mean, rstd, rows, C, stream_);
    });
  }
  void mlp_activation_forward(const TpShape& s, float* out, const float* in, std::int64_t rows, std::int64_t F) override {
    times_.time("mlp activation forward", [&] {
      switch (s.dims.feed_forward) {
        case FeedForward::gelu: cu::gelu_forward(out, in, rows * F, stream_); return;
        case FeedForward::swiglu: cu::swiglu_forward(out, in, rows, F, stream_); return;
        case FeedForward::geglu: cu::geglu_forward(out, in, rows, F, stream_); return;
      }
    });
  }
  void mlp_activation_backward(const TpShape& s, float* din, const float* dout, const float* in, std::int64_t rows,
                               std::int64_t F) override {
    times_.time("mlp activation backward", [&] {
      switch (s.dims.feed_forward) {
        case FeedForward::gelu: cu::gelu_backward(din, in, dout, rows * F, stream_); return;
        case FeedForward::swiglu: cu::swiglu_backward(din, dout, in, rows, F, stream_); return;
        case FeedForward::geglu: cu::geglu_backward(din, dout, in, rows, F, stream_); return;
      }
    });
  }
  void rotate_qk(const TpShape& s, float* qkv, std::int64_t rows, std::int64_t seq_len, bool inverse) override {
    if (!s.rotary()) return;
    const std::int64_t D = s.head_dim, stride = s.qkv_local();
    times_.time("rotary positions", [&] {
      cu::rope_apply(qkv, rows, seq_len, s.heads_local(), D, stride, s.dims.rope_theta, inverse, stream_);
      cu::rope_apply(qkv + s.q_local(), rows, seq_len, s.kv_heads_local(), D, stride, s.dims.rope_theta, inverse,
                     stream_);
    });
  }
  // fp32 attention keeps the probabilities [B, heads, T, T]; bf16 flash attention keeps [lse | qkv | out]
  // (FlashState below), O(T) per row instead of O(T^2).
  Attention attention(const TpShape& s) const override { return flash(s) ? Attention::fused : Attention::unfused; }
  std::int64_t attention_state_elements(const TpShape& s, std::int64_t B, std::int64_t T) const override {
    if (flash(s)) return FlashState::floats(s, B, T);
    return attention_probability_elements(s, B, T);
  }
  void attention_forward(const TpShape& s, float* out, float* state, const float* qkv, std::int64_t B,
                         std::int64_t T) override {
    if (flash(s)) {
      const FlashState f(state, s, B, T);
      times_.time("bf16 rounding", [&] { cu::round_to_bf16(f.qkv, qkv, B * T * s.qkv_local(), stream_); });
      times_.time("flash attention forward", [&] {
        cu::flash_attention_forward(f.out, f.lse, f.qkv, B, T, s.heads_local(), s.kv_heads_local(), s.head_dim,
                                    stream_);
      });
      times_.time("bf16 widening", [&] { cu::widen_bf16(out, f.out, B * T * s.q_local(), stream_); });
      return;
    }
    times_.time("attention forward (fp32)", [&] {
      cu::attention_forward_fp32(out, state, qkv, B, T, s.heads_local(), s.kv_heads_local(), s.head_dim, s.kv_group(),
                                 s.kv_head_offset(), stream_);
    });
  }
  void attention_backward(const TpShape& s, float* dqkv, const float* dout, const float* qkv, const float*,
                          const float* state, std::int64_t B, std::int64_t T) override {
    if (flash(s)) {
      const FlashState f(const_cast<float*>(state), s, B, T);
      const __nv_bfloat16* g = rounded(bf16_c_, dout, B * T * s.q_local());
      const std::int64_t n = B * T * s.qkv_local();
      if (flash_dqkv_.size() < static_cast<std::size_t>(n)) flash_dqkv_.resize(static_cast<std::size_t>(n));
      scores_.resize(static_cast<std::size_t>(B * s.heads_local() * T));  // the backward's delta rows
      auto* dqkv16 = reinterpret_cast<__nv_bfloat16*>(flash_dqkv_.data());
      times_.time("flash attention backward", [&] {
        cu::flash_attention_backward(dqkv16, scores_.data(), g, f.qkv, f.out, f.lse, B, T, s.heads_local(),
                                     s.kv_heads_local(), s.head_dim, stream_);
      });
      times_.time("add (bf16 into fp32)", [&] { cu::add_bf16(dqkv, dqkv16, n, stream_); });
      return;
    }
    scores_.resize(static_cast<std::size_t>(attention_probability_elements(s, B, T)));
    times_.time("attention backward (fp32)", [&] {
      cu::attention_backward_fp32(dqkv, scores_.data(), dout, qkv, state, B, T, s.heads_local(), s.kv_heads_local(),
                                  s.head_dim, s.kv_group(), s.kv_head_offset(), stream_);
    });
  }

  void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, std::int64_t begin,
                         std::int64_t real, std::int64_t rows, std::int64_t C) override {
    times_.time("embedding forward", [&] { cu::vocab_embedding_forward(out, tokens, wte, begin, real, rows, C, stream_); });
  }
  void embedding_backward(float* dwte, const float* dout, const std::int32_t* tokens, std::int64_t begin,
                          std::int64_t real, std::int64_t rows, std::int64_t C) override {
    times_.time("embedding backward",
                [&] { cu::vocab_embedding_backward(dwte, dout, tokens, begin, real, rows, C, stream_); });
  }
  void positions_forward(float* x, const float* wpe, std::int64_t rows, std::int64_t offset, std::int64_t T,
                         std::int64_t C) override {
    times_.time("positions forward", [&] { cu::positions_forward(x, wpe, rows, offset, T, C, stream_); });
  }
  void positions_backward(float* dwpe, const float* dx, std::int64_t rows, std::int64_t offset, std::int64_t T,
                          std::int64_t C) override {
    times_.time("positions backward", [&] { cu::positions_backward(dwpe, dx, rows, offset, T, C, stream_); });
  }

  void loss_row_max(float* row_max, const float* logits, std::int64_t N, std::int64_t Vp,
                    std::int64_t real) override {
    times_.time("loss: row max", [&] { cu::loss_row_max(row_max, logits, N, Vp, real, stream_); });
  }
  void loss_exponentials(float* logits, float* sums, float* correct, const float* row_max, const std::int32_t* targets,
                         std::int64_t begin, std::int64_t N, std::int64_t Vp, std::int64_t real) override {
    times_.time("loss: exponentials",
                [&] { cu::loss_exponentials(logits, sums, correct, row_max, targets, begin, N, Vp, real, stream_); });
  }
  void loss_normalize(float* p, float* row_loss, const float* sums, const float* row_max, std::int64_t N,
                      std::int64_t Vp, std::int64_t real) override {
    times_.time("loss: normalize", [&] { cu::loss_normalize(p, row_loss, sums, row_max, N, Vp, real, stream_); });
  }
  LossSummary loss_summary(const float* row_loss, const float* correct, const std::int32_t* targets,
                           std::int64_t N) override {
    const auto n = static_cast<std::size_t>(N);
    host_loss_.resize(n);
    host_correct_.resize(n);
    host_targets_.resize(n);
    if (N > 0) {
      times_.time("loss summary to host", [&] {
        MESHPLAN_CUDA_CHECK(
            cudaMemcpyAsync(host_loss_.data(), row_loss, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
        MESHPLAN_CUDA_CHECK(
            cudaMemcpyAsync(host_correct_.data(), correct, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
        MESHPLAN_CUDA_CHECK(cudaMemcpyAsync(host_targets_.data(), targets, n * sizeof(std::int32_t),
                                            cudaMemcpyDeviceToHost, stream_));
      });
      MESHPLAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    return summarize_loss_rows(host_loss_.data(), host_correct_.data(), host_targets_.data(), N);
  }
  void loss_backward(float* dlogits, const float* p, const std::int32_t* targets, std::int64_t begin,
                     std::int64_t real, float scale, std::int64_t N, std::int64_t Vp) override {
    times_.time("loss backward", [&] { cu::loss_backward(dlogits, p, targets, begin, real, scale, N, Vp, stream_); });
  }

  void adamw_update(float* params, const float* grads, float* m, float* v, std::int64_t n, std::int64_t step,
                    const kernels::AdamWHyperparameters& hp) override {
    times_.time("adamw", [&] { cu::adamw_update(params, grads, m, v, n, step, hp, stream_); });
  }
  // One multi-tensor launch for the spans with weight decay and one for those without (kernels.hpp:
  // adamw_update_multi, the per-tensor kernel's arithmetic); each list's table is copied to the device
  // when its spans change (the first step), not every step.
  void adamw_update_all(const std::vector<AdamWSpan>& spans, std::int64_t step,
                        const kernels::AdamWHyperparameters& hp) override {
    for (const bool decays : {true, false}) {
      std::vector<cu::AdamWTensor> tensors;
      for (const AdamWSpan& s : spans)
        if (s.decays == decays && s.n > 0) tensors.push_back({s.params, s.grads, s.m, s.v, s.n});
      if (tensors.empty()) continue;
      AdamWList& list = decays ? decaying_list_ : non_decaying_list_;
      if (!list.list || !same_tensors(list.tensors, tensors)) {
        list.list.reset();  // frees the old table first (cudaFree waits for the launches that read it)
        list.list = std::make_unique<cu::AdamWTensorList>(tensors);
        list.tensors = std::move(tensors);
      }
      kernels::AdamWHyperparameters list_hp = hp;
      if (!decays) list_hp.weight_decay = 0;
      times_.time("adamw (multi-tensor)", [&] { cu::adamw_update_multi(*list.list, step, list_hp, 1.0f, stream_); });
    }
  }
  // Each span's square in double (the same kernels and bits as one squared_norm a span), queued into its
  // own slot and read back in one copy, then added in span order: one wait, not one a span.
  double l2_norm(const std::vector<std::span<const float>>& spans) override {
    if (spans.empty()) return 0.0;
    if (norm_totals_.size() < spans.size()) norm_totals_.resize(spans.size());
    times_.time("squared norms", [&] {
      for (std::size_t i = 0; i < spans.size(); ++i)
        cu::squared_norm_into(spans[i].data(), static_cast<std::int64_t>(spans[i].size()), norm_scratch_.data(),
                              norm_totals_.data() + i, stream_);
    });
    host_totals_.resize(spans.size());
    MESHPLAN_CUDA_CHECK(cudaMemcpyAsync(host_totals_.data(), norm_totals_.data(), spans.size() * sizeof(double),
                                        cudaMemcpyDeviceToHost, stream_));
    MESHPLAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    double sum = 0;
    for (const double total : host_totals_) sum += total;
    return std::sqrt(sum);
  }

 private:

  // Whether this layer's attention runs as bf16 flash attention: with bf16 GEMMs, on tensor cores (compute
  // capability 8.0 on), head dim 64 or 128, and each query head's key/value head local (tp replicating kv
  // heads shifts the mapping, which the flash kernels do not take).
  bool flash(const TpShape& s) const {
    return precision_ == Precision::bf16 && tensor_cores_ && (s.head_dim == 64 || s.head_dim == 128) &&
           s.kv_head_offset() == 0 && s.heads_local() % s.kv_heads_local() == 0;
  }
  // The flash attention's saved state inside the float buffer the model keeps for it: the rows'
  // log-sum-exp [B, heads, T] (fp32), then qkv [B, T, qkv_local] and the output [B, T, q_local] in bf16,
  // each part starting on a 16-byte boundary (the kernels' alignment).
  struct FlashState {
    static std::int64_t aligned(std::int64_t floats) { return (floats + 3) / 4 * 4; }
    static std::int64_t floats(const TpShape& s, std::int64_t B, std::int64_t T) {
      return aligned(B * s.heads_local() * T) + aligned((B * T * s.qkv_local() + 1) / 2) +
             aligned((B * T * s.q_local() + 1) / 2);
    }
    FlashState(float* state, const TpShape& s, std::int64_t B, std::int64_t T)
        : lse(state),
          qkv(reinterpret_cast<__nv_bfloat16*>(state + aligned(B * s.heads_local() * T))),
          out(reinterpret_cast<__nv_bfloat16*>(state + aligned(B * s.heads_local() * T) +
                                               aligned((B * T * s.qkv_local() + 1) / 2))) {}
    float* lse;
    __nv_bfloat16* qkv;
    __nv_bfloat16* out;
  };

  // A multi-tensor AdamW table and the tensors it was built from.
  struct AdamWList {
    std::vector<cu::AdamWTensor> tensors;
    std::unique_ptr<cu::AdamWTensorList> list;
  };
  static bool same_tensors(const std::vector<cu::AdamWTensor>& a, const std::vector<cu::AdamWTensor>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const cu::AdamWTensor& x, const cu::AdamWTensor& y) {
      return x.params == y.params && x.grads == y.grads && x.m == y.m && x.v == y.v && x.n == y.n;
    });
  }

  // `source` rounded to bf16 in `workspace` (grown to n).
  const __nv_bfloat16* rounded(DeviceVector<std::uint16_t>& workspace, const float* source, std::int64_t n) {
    if (workspace.size() < static_cast<std::size_t>(n)) workspace.resize(static_cast<std::size_t>(n));
    auto* out = reinterpret_cast<__nv_bfloat16*>(workspace.data());
    times_.time("bf16 rounding", [&] { cu::round_to_bf16(out, source, n, stream_); });
    return out;
  }

  cudaStream_t stream_;
  cu::GemmLt gemm_;
  Precision precision_ = Precision::fp32;
  bool tensor_cores_ = false;                             // compute capability 8.0 or later (bf16 mma.sync)
  DeviceVector<std::uint16_t> bf16_a_, bf16_b_, bf16_c_;  // bf16 operands (workspace)
  DeviceVector<std::uint16_t> flash_dqkv_;                // the flash backward's bf16 dqkv (workspace)
  DeviceVector<float> scores_;  // the attention backward's score gradients (fp32), or flash's delta rows
  DeviceVector<double> norm_scratch_;
  DeviceVector<double> norm_totals_;  // l2_norm's per-span sums of squares
  std::vector<double> host_totals_;
  AdamWList decaying_list_, non_decaying_list_;  // adamw_update_all's tables, by weight decay
  std::vector<float> host_loss_, host_correct_;
  std::vector<std::int32_t> host_targets_;
  OpTimes times_;  // MESHPLAN_CUDA_OP_TIMES=1: a table of each op's GPU time, when the ops go
};

}  // namespace

std::unique_ptr<GptOps> make_cuda_gpt_ops(CudaBackend& backend) { return std::make_unique<CudaGptOps>(backend); }

}  // namespace meshplan::exec::parallel
