// The CPU's GptOps on FakeDevice memory (tests/fake_device.hpp): every
// pointer translated to its host address first (one that is not the
// device's aborts), so a model on the fake device computes exactly what it
// computes on the CPU, and any host access to its memory outside the ops
// and the backend's copies crashes.
//
// defines: FakeDeviceOps
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "executor/backend/cpu_backend.hpp"
#include "executor/parallel/gpt_ops.hpp"
#include "tests/fake_device.hpp"

namespace meshplan::testing_support {

using exec::parallel::GptOps;
using exec::parallel::LossSummary;
using exec::parallel::TpShape;

// A device pointer's host address; null stays null.
template <typename T>
T* host(T* device) {
  return device == nullptr ? nullptr : static_cast<T*>(FakeDevice::real(device));
}

// The CPU's ops on FakeDevice memory: every pointer translated first.
class FakeDeviceOps final : public GptOps {
 public:
  FakeDeviceOps() : cpu_(exec::parallel::make_cpu_gpt_ops(scratch_)) {}

  Problems set_matmul_precision(Precision precision) override { return cpu_->set_matmul_precision(precision); }
  Precision matmul_precision() const override { return cpu_->matmul_precision(); }
  void copy(float* d, const float* s, std::int64_t n) override { cpu_->copy(host(d), host(s), n); }
  void add(float* d, const float* s, std::int64_t n) override { cpu_->add(host(d), host(s), n); }
  void scale(float* x, float f, std::int64_t n) override { cpu_->scale(host(x), f, n); }
  void linear_forward(float* out, const float* inp, const float* w, const float* b, std::int64_t N, std::int64_t C,
                      std::int64_t OC) override {
    cpu_->linear_forward(host(out), host(inp), host(w), host(b), N, C, OC);
  }
  void linear_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                       std::int64_t N, std::int64_t C, std::int64_t OC) override {
    cpu_->linear_backward(host(dinp), host(dw), host(db), host(dout), host(inp), host(w), N, C, OC);
  }
  void residual_bias(float* out, const float* x, const float* y, const float* b, std::int64_t rows,
                     std::int64_t C) override {
    cpu_->residual_bias(host(out), host(x), host(y), host(b), rows, C);
  }
  void bias_backward(float* db, const float* dout, std::int64_t rows, std::int64_t C) override {
    cpu_->bias_backward(host(db), host(dout), rows, C);
  }
  void norm_forward(const TpShape& s, float* out, float* mean, float* rstd, const float* x, const float* w,
                    const float* b, std::int64_t rows, std::int64_t C) override {
    cpu_->norm_forward(s, host(out), host(mean), host(rstd), host(x), host(w), host(b), rows, C);
  }
  void norm_backward(const TpShape& s, float* dx, float* dw, float* db, const float* dout, const float* x,
                     const float* w, const float* mean, const float* rstd, std::int64_t rows, std::int64_t C) override {
    cpu_->norm_backward(s, host(dx), host(dw), host(db), host(dout), host(x), host(w), host(mean), host(rstd), rows, C);
  }
  void mlp_activation_forward(const TpShape& s, float* out, const float* in, std::int64_t rows,
                              std::int64_t F) override {
    cpu_->mlp_activation_forward(s, host(out), host(in), rows, F);
  }
  void mlp_activation_backward(const TpShape& s, float* din, const float* dout, const float* in, std::int64_t rows,
                               std::int64_t F) override {
    cpu_->mlp_activation_backward(s, host(din), host(dout), host(in), rows, F);
  }
  void rotate_qk(const TpShape& s, float* qkv, std::int64_t rows, std::int64_t T, bool inverse) override {
    cpu_->rotate_qk(s, host(qkv), rows, T, inverse);
  }
  std::int64_t attention_state_elements(const TpShape& s, std::int64_t B, std::int64_t T) const override {
    return cpu_->attention_state_elements(s, B, T);
  }
  void attention_forward(const TpShape& s, float* out, float* state, const float* qkv, std::int64_t B,
                         std::int64_t T) override {
    cpu_->attention_forward(s, host(out), host(state), host(qkv), B, T);
  }
  void attention_backward(const TpShape& s, float* dqkv, const float* dout, const float* qkv, const float* out,
                          const float* state, std::int64_t B, std::int64_t T) override {
    cpu_->attention_backward(s, host(dqkv), host(dout), host(qkv), host(out), host(state), B, T);
  }
  void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, std::int64_t begin,
                         std::int64_t real, std::int64_t rows, std::int64_t C) override {
    cpu_->embedding_forward(host(out), host(tokens), host(wte), begin, real, rows, C);
  }
  void embedding_backward(float* dwte, const float* dout, const std::int32_t* tokens, std::int64_t begin,
                          std::int64_t real, std::int64_t rows, std::int64_t C) override {
    cpu_->embedding_backward(host(dwte), host(dout), host(tokens), begin, real, rows, C);
  }
  void positions_forward(float* x, const float* wpe, std::int64_t rows, std::int64_t offset, std::int64_t T,
                         std::int64_t C) override {
    cpu_->positions_forward(host(x), host(wpe), rows, offset, T, C);
  }
  void positions_backward(float* dwpe, const float* dx, std::int64_t rows, std::int64_t offset, std::int64_t T,
                          std::int64_t C) override {
    cpu_->positions_backward(host(dwpe), host(dx), rows, offset, T, C);
  }
  void loss_row_max(float* row_max, const float* logits, std::int64_t N, std::int64_t Vp, std::int64_t real) override {
    cpu_->loss_row_max(host(row_max), host(logits), N, Vp, real);
  }
  void loss_exponentials(float* logits, float* sums, float* correct, const float* row_max, const std::int32_t* targets,
                         std::int64_t begin, std::int64_t N, std::int64_t Vp, std::int64_t real) override {
    cpu_->loss_exponentials(host(logits), host(sums), host(correct), host(row_max), host(targets), begin, N, Vp, real);
  }
  void loss_normalize(float* p, float* row_loss, const float* sums, const float* row_max, std::int64_t N,
                      std::int64_t Vp, std::int64_t real) override {
    cpu_->loss_normalize(host(p), host(row_loss), host(sums), host(row_max), N, Vp, real);
  }
  LossSummary loss_summary(const float* row_loss, const float* correct, const std::int32_t* targets,
                           std::int64_t N) override {
    return cpu_->loss_summary(host(row_loss), host(correct), host(targets), N);
  }
  void loss_backward(float* dlogits, const float* p, const std::int32_t* targets, std::int64_t begin,
                     std::int64_t real, float scale, std::int64_t N, std::int64_t Vp) override {
    cpu_->loss_backward(host(dlogits), host(p), host(targets), begin, real, scale, N, Vp);
  }
  void adamw_update(float* params, const float* grads, float* m, float* v, std::int64_t n, std::int64_t step,
                    const kernels::AdamWHyperparameters& hp) override {
    cpu_->adamw_update(host(params), host(grads), host(m), host(v), n, step, hp);
  }
  double l2_norm(const std::vector<std::span<const float>>& spans) override {
    std::vector<std::span<const float>> translated;
    for (const std::span<const float> s : spans) translated.emplace_back(host(s.data()), s.size());
    return cpu_->l2_norm(translated);
  }

 private:
  exec::CpuBackend scratch_{"fake-device-ops"};  // the bf16 GEMMs' workspace, were they asked for
  std::unique_ptr<GptOps> cpu_;
};

}  // namespace meshplan::testing_support
