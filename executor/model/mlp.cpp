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
      whole_sizes_(spec.mlp.layer_sizes),
      gelu_(spec.mlp.activation == "gelu"),
      params_(std::move(parameters)),
      max_batch_(max_batch),
      matmul_(params_.values.get_allocator().backend()) {
  assert(max_batch > 0 && sizes_.size() >= 2);
  allocate_activations();
}

// Offsets of each linear in the parameters, and the saved activations and
// their gradients at sizes_ (the whole model's or this tp rank's widths).
template <typename T>
void Mlp<T>::allocate_activations() {
  const auto B = static_cast<std::size_t>(max_batch_);
  Backend& backend = params_.values.get_allocator().backend();
  const TrackedAllocator<T> activations(MemoryCategory::activations, backend);
  const TrackedAllocator<T> workspace(MemoryCategory::workspace, backend);
  inputs_ = TrackedVector<T>(B * static_cast<std::size_t>(sizes_[0]), T(0), activations);
  weight_offsets_.clear();
  bias_offsets_.clear();
  pre_.clear();
  dpre_.clear();
  post_.clear();
  dpost_.clear();
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
  const std::size_t outputs = B * static_cast<std::size_t>(whole_sizes_.back());
  probs_ = TrackedVector<T>(outputs, T(0), activations);
  if (gather_outputs_) {
    gathered_ = TrackedVector<T>(outputs, T(0), TrackedAllocator<T>(MemoryCategory::communication, backend));
    outputs_ = TrackedVector<T>(outputs, T(0), activations);
    doutputs_ = TrackedVector<T>(outputs, T(0), workspace);
  }
}

template <typename T>
void Mlp<T>::copy_blocks(const ParameterLayout& shard_layout, T* whole, T* shard, bool to_whole, bool replicated) const {
  const std::int64_t r = tp_.rank;
  const auto move = [&](std::int64_t w, std::int64_t s) {
    if (to_whole)
      whole[w] = shard[s];
    else
      shard[s] = whole[w];
  };
  for (std::int64_t i = 0; i + 1 < static_cast<std::int64_t>(whole_sizes_.size()); ++i) {
    const auto u = static_cast<std::size_t>(i);
    const std::int64_t in = whole_sizes_[u], out = whole_sizes_[u + 1];
    const std::string name = "linear" + std::to_string(i);
    const std::int64_t w_whole = whole_layout().at(name + ".weight").offset, b_whole = whole_layout().at(name + ".bias").offset;
    const std::int64_t w_shard = shard_layout.at(name + ".weight").offset, b_shard = shard_layout.at(name + ".bias").offset;
    if (i % 2 == 0) {  // column-parallel: output rows [r o, (r + 1) o) of the weight and the bias
      const std::int64_t o = out / tp_.size;
      for (std::int64_t row = 0; row < o; ++row) {
        for (std::int64_t col = 0; col < in; ++col) move(w_whole + (r * o + row) * in + col, w_shard + row * in + col);
        move(b_whole + r * o + row, b_shard + row);
      }
    } else {  // row-parallel: input columns [r k, (r + 1) k) of the weight; the bias whole
      const std::int64_t k = in / tp_.size;
      for (std::int64_t row = 0; row < out; ++row) {
        for (std::int64_t col = 0; col < k; ++col) move(w_whole + row * in + r * k + col, w_shard + row * k + col);
        if (!to_whole || replicated) move(b_whole + row, b_shard + row);
      }
    }
  }
}

template <typename T>
void Mlp<T>::shard_to_whole(const T* shard, T* whole, bool replicated) const {
  if (tp_.size == 1) {
    std::copy(shard, shard + params_.layout.total_elements, whole);
    return;
  }
  copy_blocks(params_.layout, whole, const_cast<T*>(shard), true, replicated);
}

template <typename T>
void Mlp<T>::whole_to_shard(const T* whole, T* shard) const {
  if (tp_.size == 1) {
    std::copy(whole, whole + params_.layout.total_elements, shard);
    return;
  }
  copy_blocks(params_.layout, const_cast<T*>(whole), shard, false, true);
}

template <typename T>
void Mlp<T>::split_over_tp(MlpTensorParallel<T> tp) {
  assert(tp_.size == 1 && tp.size > 1 && tp.rank >= 0 && tp.rank < tp.size && tp.all_reduce && tp.all_gather);
  std::vector<std::int64_t> local = whole_sizes_;
  for (std::size_t i = 0; i + 1 < local.size(); i += 2) {
    assert(local[i + 1] % tp.size == 0 && "tp must divide the output size of every column-parallel linear");
    local[i + 1] /= tp.size;
  }
  ModelSpec spec;
  spec.kind = ModelKind::mlp;
  spec.mlp.layer_sizes = local;
  spec.mlp.activation = gelu_ ? "gelu" : "relu";
  Loaded<ParameterLayout> layout = parameter_layout(spec);
  assert(layout.ok());
  Parameters<T> shard = zero_parameters<T>(std::move(layout.value), params_.values.get_allocator().backend());
  tp_ = std::move(tp);
  whole_layout_ = params_.layout;
  copy_blocks(shard.layout, params_.values.data(), shard.values.data(), false, true);
  params_ = std::move(shard);
  sizes_ = std::move(local);
  gather_outputs_ = (linear_count() - 1) % 2 == 0;
  allocate_activations();
}

template <typename T>
Problems Mlp<T>::check_data(const data::BatchShape& shape) const {
  Problems problems;
  const auto mismatch = [&](const std::string& what) { problems.push_back({Severity::error, "--data", what}); };
  if (shape.inputs_per_sample != whole_sizes_.front())
    mismatch("the data has " + std::to_string(shape.inputs_per_sample) + " inputs per sample but the MLP's input size is " +
             std::to_string(whole_sizes_.front()));
  if (shape.target_values_per_sample > 0) {
    if (shape.target_values_per_sample != whole_sizes_.back())
      mismatch("the data has " + std::to_string(shape.target_values_per_sample) +
               " target values per sample but the MLP has " + std::to_string(whole_sizes_.back()) + " outputs");
  } else if (shape.classes > 0) {
    if (shape.classes != whole_sizes_.back() || shape.targets_per_sample != 1)
      mismatch("the data has " + std::to_string(shape.classes) + " classes but the MLP has " +
               std::to_string(whole_sizes_.back()) + " outputs");
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
    // A row-parallel linear's output is a partial sum: tp rank 0 alone adds the bias, then the sum over tp.
    const T* bias = row_parallel(i) && tp_.rank != 0 ? nullptr : params + bias_offsets_[s];
    matmul_.forward(pre_[s].data(), inp, params + weight_offsets_[s], bias, B, sizes_[s], sizes_[s + 1]);
    if (row_parallel(i)) tp_.all_reduce(pre_[s].data(), B * sizes_[s + 1]);
    if (i + 1 == linear_count()) break;
    if (gelu_)
      kernels::gelu_forward(post_[s].data(), pre_[s].data(), B * sizes_[s + 1]);
    else
      kernels::relu_forward(post_[s].data(), pre_[s].data(), B * sizes_[s + 1]);
    inp = post_[s].data();
  }

  const std::int64_t out = whole_sizes_.back();
  if (gather_outputs_) {
    // [B, out / tp] per rank, gathered rank after rank, into [B, out].
    const std::int64_t local = sizes_.back();
    tp_.all_gather(pre_.back().data(), gathered_.data(), B * local);
    for (std::int64_t r = 0; r < tp_.size; ++r)
      for (std::int64_t b = 0; b < B; ++b)
        std::copy_n(gathered_.data() + (r * B + b) * local, local, outputs_.data() + b * out + r * local);
  }
  const TrackedVector<T>& prediction = gather_outputs_ ? outputs_ : pre_.back();
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
  const std::int64_t out = whole_sizes_.back();
  for (auto& d : dpre_) std::fill(d.begin(), d.end(), T(0));
  for (auto& d : dpost_) std::fill(d.begin(), d.end(), T(0));
  if (gather_outputs_) std::fill(doutputs_.begin(), doutputs_.end(), T(0));
  // Every tp rank computes the whole output gradient; a column-parallel last linear takes its block.
  T* dlogits = gather_outputs_ ? doutputs_.data() : dpre_.back().data();
  const TrackedVector<T>& prediction = gather_outputs_ ? outputs_ : pre_.back();
  if (regression_) {
    // d/dy of mean over B*out of (y - t)^2 is 2 (y - t) / (B out).
    const T scale = dloss * T(2) / static_cast<T>(B * out);
    for (std::int64_t k = 0; k < B * out; ++k)
      dlogits[k] += scale * (prediction[static_cast<std::size_t>(k)] - static_cast<T>(target_values_[k]));
  } else {
    kernels::cross_entropy_backward(dlogits, probs_.data(), targets_.data(), dloss, B, out);
  }
  if (gather_outputs_) {
    const std::int64_t local = sizes_.back();
    for (std::int64_t b = 0; b < B; ++b)
      std::copy_n(doutputs_.data() + b * out + tp_.rank * local, local, dpre_.back().data() + b * local);
  }
  const T* params = params_.values.data();
  T* grads = params_.grads.data();
  for (std::int64_t i = linear_count() - 1; i >= 0; --i) {
    const auto s = static_cast<std::size_t>(i);
    const T* inp = i == 0 ? inputs_.data() : post_[s - 1].data();
    T* dinp = i == 0 ? nullptr : dpost_[s - 1].data();
    T* dbias = row_parallel(i) && tp_.rank != 0 ? nullptr : grads + bias_offsets_[s];
    matmul_.backward(dinp, grads + weight_offsets_[s], dbias, dpre_[s].data(), inp, params + weight_offsets_[s], B,
                     sizes_[s], sizes_[s + 1]);
    if (i == 0) break;
    // A column-parallel linear's input gradient is a partial sum over tp.
    if (tp_.size > 1 && !row_parallel(i)) tp_.all_reduce(dpost_[s - 1].data(), B * sizes_[s]);
    if (gelu_)
      kernels::gelu_backward(dpre_[s - 1].data(), pre_[s - 1].data(), dpost_[s - 1].data(), B * sizes_[s]);
    else
      kernels::relu_backward(dpre_[s - 1].data(), pre_[s - 1].data(), dpost_[s - 1].data(), B * sizes_[s]);
  }
}

template class Mlp<float>;
template class Mlp<double>;

}  // namespace meshplan::exec
