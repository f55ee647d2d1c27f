// Forward keeps both the pre- and post-activation of every hidden layer,
// because ReLU's and GELU's backward need the pre-activation and the next
// linear layer's weight gradient needs the post-activation.
#include "executor/model/mlp.hpp"

#include <algorithm>
#include <cassert>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/cross_entropy.hpp"
#include "kernels/cpu/matmul.hpp"

namespace meshplan::exec {

template <typename T>
Mlp<T>::Mlp(const ModelSpec& spec, Parameters<T> parameters, std::int64_t max_batch)
    : sizes_(spec.mlp.layer_sizes),
      gelu_(spec.mlp.activation == "gelu"),
      params_(std::move(parameters)),
      max_batch_(max_batch),
      matmul_(params_.values.get_allocator().backend()) {
  assert(max_batch > 0 && sizes_.size() >= 2);
  const auto B = static_cast<std::size_t>(max_batch);
  Backend& backend = params_.values.get_allocator().backend();
  const TrackedAllocator<T> activations(MemoryCategory::activations, backend);
  const TrackedAllocator<T> workspace(MemoryCategory::workspace, backend);
  inputs_ = TrackedVector<T>(B * static_cast<std::size_t>(sizes_[0]), T(0), activations);
  for (std::int64_t i = 0; i < linear_count(); ++i) {
    const std::string name = "linear" + std::to_string(i);
    weight_offsets_.push_back(params_.layout.at(name + ".weight").offset);
    bias_offsets_.push_back(params_.layout.at(name + ".bias").offset);
    const std::size_t width = B * static_cast<std::size_t>(sizes_[static_cast<std::size_t>(i) + 1]);
    const std::size_t hidden_width = i + 1 < linear_count() ? width : 0;
    pre_.emplace_back(width, T(0), activations);
    dpre_.emplace_back(width, T(0), workspace);
    post_.emplace_back(hidden_width, T(0), activations);
    dpost_.emplace_back(hidden_width, T(0), workspace);
  }
  probs_ = TrackedVector<T>(B * static_cast<std::size_t>(sizes_.back()), T(0), activations);
}

template <typename T>
Problems Mlp<T>::check_data(const data::BatchShape& shape) const {
  Problems problems;
  const auto mismatch = [&](const std::string& what) { problems.push_back({Severity::error, "--data", what}); };
  if (shape.inputs_per_sample != sizes_.front())
    mismatch("the data has " + std::to_string(shape.inputs_per_sample) + " inputs per sample but the MLP's input size is " +
             std::to_string(sizes_.front()));
  if (shape.target_values_per_sample > 0) {
    if (shape.target_values_per_sample != sizes_.back())
      mismatch("the data has " + std::to_string(shape.target_values_per_sample) +
               " target values per sample but the MLP has " + std::to_string(sizes_.back()) + " outputs");
  } else if (shape.classes > 0) {
    if (shape.classes != sizes_.back() || shape.targets_per_sample != 1)
      mismatch("the data has " + std::to_string(shape.classes) + " classes but the MLP has " +
               std::to_string(sizes_.back()) + " outputs");
  } else {
    mismatch("the data has neither class labels nor target values");
  }
  return problems;
}

template <typename T>
T Mlp<T>::forward(const data::Batch& batch) {
  const std::int64_t B = batch.samples;
  assert(B >= 1 && B <= max_batch_);
  batch_ = B;
  std::transform(batch.inputs.begin(), batch.inputs.begin() + B * sizes_[0], inputs_.begin(),
                 [](float x) { return static_cast<T>(x); });
  const T* params = params_.values.data();
  const T* inp = inputs_.data();
  for (std::int64_t i = 0; i < linear_count(); ++i) {
    const auto s = static_cast<std::size_t>(i);
    matmul_.forward(pre_[s].data(), inp, params + weight_offsets_[s], params + bias_offsets_[s], B, sizes_[s],
                            sizes_[s + 1]);
    if (i + 1 == linear_count()) break;
    if (gelu_)
      kernels::gelu_forward(post_[s].data(), pre_[s].data(), B * sizes_[s + 1]);
    else
      kernels::relu_forward(post_[s].data(), pre_[s].data(), B * sizes_[s + 1]);
    inp = post_[s].data();
  }

  const std::int64_t out = sizes_.back();
  const TrackedVector<T>& prediction = pre_.back();
  regression_ = batch.targets.empty();
  correct_ = 0;
  if (regression_) {
    target_values_.assign(batch.target_values.begin(), batch.target_values.begin() + B * out);
    double sum_sq = 0;
    for (std::int64_t k = 0; k < B * out; ++k) {
      const double diff = static_cast<double>(prediction[static_cast<std::size_t>(k)]) - target_values_[k];
      sum_sq += diff * diff;
    }
    return static_cast<T>(sum_sq / static_cast<double>(B * out));
  }
  targets_.assign(batch.targets.begin(), batch.targets.begin() + B);
  const T loss = kernels::cross_entropy_forward(probs_.data(), static_cast<T*>(nullptr), prediction.data(),
                                                targets_.data(), B, out);
  for (std::int64_t b = 0; b < B; ++b) {
    const T* row = probs_.data() + b * out;
    if (std::max_element(row, row + out) - row == targets_[static_cast<std::size_t>(b)]) ++correct_;
  }
  return loss;
}

template <typename T>
void Mlp<T>::backward(T dloss) {
  const std::int64_t B = batch_;
  assert(B > 0 && "backward needs a forward first");
  const std::int64_t out = sizes_.back();
  for (auto& d : dpre_) std::fill(d.begin(), d.end(), T(0));
  for (auto& d : dpost_) std::fill(d.begin(), d.end(), T(0));
  T* dlogits = dpre_.back().data();
  if (regression_) {
    // d/dy of mean over B*out of (y - t)^2 is 2 (y - t) / (B out).
    const T scale = dloss * T(2) / static_cast<T>(B * out);
    for (std::int64_t k = 0; k < B * out; ++k)
      dlogits[k] += scale * (pre_.back()[static_cast<std::size_t>(k)] - static_cast<T>(target_values_[k]));
  } else {
    kernels::cross_entropy_backward(dlogits, probs_.data(), targets_.data(), dloss, B, out);
  }
  const T* params = params_.values.data();
  T* grads = params_.grads.data();
  for (std::int64_t i = linear_count() - 1; i >= 0; --i) {
    const auto s = static_cast<std::size_t>(i);
    const T* inp = i == 0 ? inputs_.data() : post_[s - 1].data();
    T* dinp = i == 0 ? nullptr : dpost_[s - 1].data();
    matmul_.backward(dinp, grads + weight_offsets_[s], grads + bias_offsets_[s], dpre_[s].data(), inp,
                             params + weight_offsets_[s], B, sizes_[s], sizes_[s + 1]);
    if (i == 0) break;
    if (gelu_)
      kernels::gelu_backward(dpre_[s - 1].data(), pre_[s - 1].data(), dpost_[s - 1].data(), B * sizes_[s]);
    else
      kernels::relu_backward(dpre_[s - 1].data(), pre_[s - 1].data(), dpost_[s - 1].data(), B * sizes_[s]);
  }
}

template class Mlp<float>;
template class Mlp<double>;

}  // namespace meshplan::exec
