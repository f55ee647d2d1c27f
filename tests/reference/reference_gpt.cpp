// The forward and backward below are llm.c's gpt2_forward and gpt2_backward
// (train_gpt2.c) op for op, on this project's kernels and without vocabulary
// padding. Layer slices use the allocated B and T as strides, so a smaller
// last batch (evaluation) reuses the same buffers.
#include "reference/reference_gpt.hpp"

#include <algorithm>
#include <array>
#include <cassert>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/cross_entropy.hpp"
#include "kernels/cpu/embedding.hpp"
#include "kernels/cpu/layernorm.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/residual.hpp"

namespace meshplan::exec {

namespace {

// Sizes of GptActivations' fields, in declaration order; in a gradient
// layout the fields the backward never accumulates into have size 0.
template <typename T>
std::array<std::int64_t, 22> activation_sizes(const GptDims& d, std::int64_t B, std::int64_t T_len,
                                              typename GptActivations<T>::Role role) {
  const std::int64_t BT = B * T_len, L = d.layers, C = d.channels, F = d.ffn, V = d.vocab;
  const std::int64_t g = role == GptActivations<T>::Role::gradients ? 0 : 1;  // 0: not in a gradient layout
  return {BT * C,     L * BT * C,     g * L * BT, g * L * BT, L * BT * 3 * C, L * BT * C,
          g * L * B * d.heads * T_len * T_len,    L * BT * C, L * BT * C, L * BT * C,
          g * L * BT, g * L * BT,     L * BT * F, L * BT * F, L * BT * C, L * BT * C,
          BT * C,     g * BT,         g * BT,     BT * V,     g * BT * V, g * BT};
}

}  // namespace

template <typename T>
std::int64_t GptActivations<T>::elements(const GptDims& d, std::int64_t B, std::int64_t T_len, Role role) {
  std::int64_t total = 0;
  for (const std::int64_t size : activation_sizes<T>(d, B, T_len, role)) total += size;
  return total;
}

template <typename T>
void GptActivations<T>::allocate(TrackedVector<T>& memory, const GptDims& d, std::int64_t B, std::int64_t T_len,
                                 Role role) {
  T** fields[] = {&encoded, &ln1,       &ln1_mean, &ln1_rstd, &qkv,       &atty,     &att,      &attproj,
                  &residual2, &ln2,     &ln2_mean, &ln2_rstd, &fch,       &fch_gelu, &fcproj,   &residual3,
                  &lnf,     &lnf_mean,  &lnf_rstd, &logits,   &probs,     &losses};
  const auto sizes = activation_sizes<T>(d, B, T_len, role);
  static_assert(std::size(fields) == std::tuple_size_v<decltype(sizes)>);
  memory.assign(static_cast<std::size_t>(elements(d, B, T_len, role)), T(0));
  T* next = memory.data();
  for (std::size_t i = 0; i < std::size(fields); ++i) {
    *fields[i] = sizes[i] > 0 ? next : nullptr;
    next += sizes[i];
  }
}

template <typename T>
Gpt<T>::Gpt(const ModelSpec& spec, Parameters<T> parameters, std::int64_t max_batch, std::int64_t seq_len)
    : params_(std::move(parameters)),
      max_batch_(max_batch),
      seq_len_(seq_len),
      acts_memory_(TrackedAllocator<T>(MemoryCategory::activations, params_.values.get_allocator().backend())),
      grad_acts_memory_(TrackedAllocator<T>(MemoryCategory::workspace, params_.values.get_allocator().backend())),
      matmul_(params_.values.get_allocator().backend()) {
  const TransformerDims& t = spec.transformer;
  dims_ = {t.vocab, t.seq_len, t.layers, t.heads, t.hidden, t.ffn};
  assert(max_batch > 0 && seq_len > 0 && seq_len <= dims_.max_seq_len);
  const ParameterLayout& layout = params_.layout;
  wte_ = layout.at("wte").offset;
  wpe_ = layout.at("wpe").offset;
  lnfw_ = layout.at("ln_f.w").offset;
  lnfb_ = layout.at("ln_f.b").offset;
  for (std::int64_t l = 0; l < dims_.layers; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    const auto at = [&](const char* name) { return layout.at(p + name).offset; };
    layers_.push_back({at("ln1.w"), at("ln1.b"), at("qkv.w"), at("qkv.b"), at("attn_out.w"), at("attn_out.b"),
                       at("ln2.w"), at("ln2.b"), at("fc.w"), at("fc.b"), at("fc_out.w"), at("fc_out.b")});
  }
  acts_.allocate(acts_memory_, dims_, max_batch_, seq_len_);
  grad_acts_.allocate(grad_acts_memory_, dims_, max_batch_, seq_len_, GptActivations<T>::Role::gradients);
}

template <typename T>
Problems Gpt<T>::check_data(const data::BatchShape& shape) const {
  Problems problems;
  if (shape.inputs_per_sample != seq_len_ || shape.targets_per_sample != seq_len_)
    problems.push_back({Severity::error, "--data",
                        "the data has windows of " + std::to_string(shape.inputs_per_sample) +
                            " tokens but the model is set up for sequences of " + std::to_string(seq_len_)});
  if (shape.classes <= 0 || shape.classes > dims_.vocab)
    problems.push_back({Severity::error, "--data",
                        "the data's vocabulary (" + std::to_string(shape.classes) +
                            " tokens) does not fit the model's vocab (" + std::to_string(dims_.vocab) + ")"});
  return problems;
}

template <typename T>
T Gpt<T>::forward(const data::Batch& batch) {
  const std::int64_t B = batch.samples, T_len = seq_len_, BT = B * T_len;
  const std::int64_t C = dims_.channels, F = dims_.ffn, V = dims_.vocab, NH = dims_.heads;
  assert(B >= 1 && B <= max_batch_ && std::ssize(batch.inputs) >= BT && std::ssize(batch.targets) >= BT);
  batch_ = B;
  tokens_.resize(static_cast<std::size_t>(BT));
  std::transform(batch.inputs.begin(), batch.inputs.begin() + BT, tokens_.begin(),
                 [](float x) { return static_cast<std::int32_t>(x); });
  targets_.assign(batch.targets.begin(), batch.targets.begin() + BT);

  // Layer strides use the allocated batch, so slices do not move with B.
  const std::int64_t stride = max_batch_ * T_len;
  const T* p = params_.values.data();
  GptActivations<T>& a = acts_;
  kernels::embedding_forward(a.encoded, tokens_.data(), p + wte_, p + wpe_, B, T_len, C);
  for (std::int64_t l = 0; l < dims_.layers; ++l) {
    const LayerOffsets& w = layers_[static_cast<std::size_t>(l)];
    const T* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * stride * C;
    T* l_ln1 = a.ln1 + l * stride * C;
    T* l_ln1_mean = a.ln1_mean + l * stride;
    T* l_ln1_rstd = a.ln1_rstd + l * stride;
    T* l_qkv = a.qkv + l * stride * 3 * C;
    T* l_atty = a.atty + l * stride * C;
    T* l_att = a.att + l * max_batch_ * NH * T_len * T_len;
    T* l_attproj = a.attproj + l * stride * C;
    T* l_residual2 = a.residual2 + l * stride * C;
    T* l_ln2 = a.ln2 + l * stride * C;
    T* l_ln2_mean = a.ln2_mean + l * stride;
    T* l_ln2_rstd = a.ln2_rstd + l * stride;
    T* l_fch = a.fch + l * stride * F;
    T* l_fch_gelu = a.fch_gelu + l * stride * F;
    T* l_fcproj = a.fcproj + l * stride * C;
    T* l_residual3 = a.residual3 + l * stride * C;

    kernels::layernorm_forward(l_ln1, l_ln1_mean, l_ln1_rstd, residual, p + w.ln1w, p + w.ln1b, BT, C);
    matmul_.forward(l_qkv, l_ln1, p + w.qkvw, p + w.qkvb, BT, C, 3 * C);
    kernels::attention_forward(l_atty, l_att, l_qkv, B, T_len, C, NH);
    matmul_.forward(l_attproj, l_atty, p + w.attprojw, p + w.attprojb, BT, C, C);
    kernels::residual_forward(l_residual2, residual, l_attproj, BT * C);
    kernels::layernorm_forward(l_ln2, l_ln2_mean, l_ln2_rstd, l_residual2, p + w.ln2w, p + w.ln2b, BT, C);
    matmul_.forward(l_fch, l_ln2, p + w.fcw, p + w.fcb, BT, C, F);
    kernels::gelu_forward(l_fch_gelu, l_fch, BT * F);
    matmul_.forward(l_fcproj, l_fch_gelu, p + w.fcprojw, p + w.fcprojb, BT, F, C);
    kernels::residual_forward(l_residual3, l_residual2, l_fcproj, BT * C);
  }
  const T* last = a.residual3 + (dims_.layers - 1) * stride * C;
  kernels::layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, last, p + lnfw_, p + lnfb_, BT, C);
  matmul_.forward(a.logits, a.lnf, p + wte_, static_cast<const T*>(nullptr), BT, C, V);
  const T loss = kernels::cross_entropy_forward(a.probs, a.losses, a.logits, targets_.data(), BT, V);

  correct_ = 0;
  for (std::int64_t n = 0; n < BT; ++n) {
    const T* row = a.probs + n * V;
    if (std::max_element(row, row + V) - row == targets_[static_cast<std::size_t>(n)]) ++correct_;
  }
  return loss;
}

template <typename T>
void Gpt<T>::backward(T dloss) {
  const std::int64_t B = batch_, T_len = seq_len_, BT = B * T_len;
  const std::int64_t C = dims_.channels, F = dims_.ffn, V = dims_.vocab, NH = dims_.heads;
  assert(B > 0 && "backward needs a forward first");
  std::fill(grad_acts_memory_.begin(), grad_acts_memory_.end(), T(0));

  const std::int64_t stride = max_batch_ * T_len;
  const T* p = params_.values.data();
  T* g = params_.grads.data();
  const GptActivations<T>& a = acts_;
  GptActivations<T>& d = grad_acts_;

  kernels::cross_entropy_backward(d.logits, a.probs, targets_.data(), dloss, BT, V);
  matmul_.backward(d.lnf, g + wte_, static_cast<T*>(nullptr), d.logits, a.lnf, p + wte_, BT, C, V);
  const T* last = a.residual3 + (dims_.layers - 1) * stride * C;
  T* dlast = d.residual3 + (dims_.layers - 1) * stride * C;
  kernels::layernorm_backward(dlast, g + lnfw_, g + lnfb_, d.lnf, last, p + lnfw_, a.lnf_mean, a.lnf_rstd, BT, C);

  for (std::int64_t l = dims_.layers - 1; l >= 0; --l) {
    const LayerOffsets& w = layers_[static_cast<std::size_t>(l)];
    const T* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * stride * C;
    T* dresidual = l == 0 ? d.encoded : d.residual3 + (l - 1) * stride * C;
    const std::int64_t c_off = l * stride * C, f_off = l * stride * F, n_off = l * stride;
    const std::int64_t att_off = l * max_batch_ * NH * T_len * T_len;

    kernels::residual_backward(d.residual2 + c_off, d.fcproj + c_off, d.residual3 + c_off, BT * C);
    matmul_.backward(d.fch_gelu + f_off, g + w.fcprojw, g + w.fcprojb, d.fcproj + c_off, a.fch_gelu + f_off,
                             p + w.fcprojw, BT, F, C);
    kernels::gelu_backward(d.fch + f_off, a.fch + f_off, d.fch_gelu + f_off, BT * F);
    matmul_.backward(d.ln2 + c_off, g + w.fcw, g + w.fcb, d.fch + f_off, a.ln2 + c_off, p + w.fcw, BT, C, F);
    kernels::layernorm_backward(d.residual2 + c_off, g + w.ln2w, g + w.ln2b, d.ln2 + c_off, a.residual2 + c_off,
                                p + w.ln2w, a.ln2_mean + n_off, a.ln2_rstd + n_off, BT, C);
    kernels::residual_backward(dresidual, d.attproj + c_off, d.residual2 + c_off, BT * C);
    matmul_.backward(d.atty + c_off, g + w.attprojw, g + w.attprojb, d.attproj + c_off, a.atty + c_off,
                             p + w.attprojw, BT, C, C);
    kernels::attention_backward(d.qkv + 3 * c_off, d.atty + c_off, a.qkv + 3 * c_off, a.att + att_off, B, T_len, C,
                                NH);
    matmul_.backward(d.ln1 + c_off, g + w.qkvw, g + w.qkvb, d.qkv + 3 * c_off, a.ln1 + c_off, p + w.qkvw, BT,
                             C, 3 * C);
    kernels::layernorm_backward(dresidual, g + w.ln1w, g + w.ln1b, d.ln1 + c_off, residual, p + w.ln1w,
                                a.ln1_mean + n_off, a.ln1_rstd + n_off, BT, C);
  }
  kernels::embedding_backward(g + wte_, g + wpe_, d.encoded, tokens_.data(), B, T_len, C);
}

template <typename T>
Loaded<std::unique_ptr<Model<T>>> make_reference_model(const ModelSpec& spec, std::uint64_t seed,
                                                       std::int64_t max_batch, std::int64_t seq_len,
                                                       Backend& backend) {
  if (spec.kind != ModelKind::transformer) return make_model<T>(spec, seed, max_batch, seq_len, backend);
  Loaded<std::unique_ptr<Model<T>>> result;
  const TransformerDims& t = spec.transformer;
  // The reference is GPT-2 only; the executor's other features are checked op by op (tests/test_kernels.cpp).
  const std::pair<bool, const char*> gpt2_features[] = {
      {t.feed_forward == FeedForward::gelu, "model.feed_forward"}, {t.norm == Norm::layernorm, "model.norm"},
      {t.positions == Positions::learned, "model.positions"},    {t.key_value_heads() == t.heads, "model.kv_heads"},
      {t.tied_embeddings, "model.tied_embeddings"},               {t.bias, "model.bias"},
      {t.head_size() * t.heads == t.hidden, "model.head_dim"}};
  for (const auto& [has, field] : gpt2_features)
    if (!has) result.problems.push_back({Severity::error, field, "the reference GPT is GPT-2's architecture only"});
  if (max_batch <= 0) result.problems.push_back({Severity::error, "plan.micro_batch", "must be at least 1"});
  if (seq_len == 0) seq_len = spec.transformer.seq_len;
  if (seq_len <= 0 || seq_len > spec.transformer.seq_len)
    result.problems.push_back({Severity::error, "plan.seq_len",
                               std::to_string(seq_len) + " must be between 1 and the model's learned positions (" +
                                   std::to_string(spec.transformer.seq_len) + ")"});
  Loaded<Parameters<T>> parameters = make_parameters<T>(spec, seed, backend);
  result.problems.insert(result.problems.end(), parameters.problems.begin(), parameters.problems.end());
  if (!result.ok()) return result;
  result.value = std::make_unique<Gpt<T>>(spec, std::move(parameters.value), max_batch, seq_len);
  return result;
}

template Loaded<std::unique_ptr<Model<float>>> make_reference_model<float>(const ModelSpec&, std::uint64_t,
                                                                           std::int64_t, std::int64_t, Backend&);
template Loaded<std::unique_ptr<Model<double>>> make_reference_model<double>(const ModelSpec&, std::uint64_t,
                                                                             std::int64_t, std::int64_t, Backend&);
template struct GptActivations<float>;
template struct GptActivations<double>;
template class Gpt<float>;
template class Gpt<double>;

}  // namespace meshplan::exec
