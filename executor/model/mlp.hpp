// A multi-layer perceptron: linear -> activation -> ... -> linear, then
// softmax cross-entropy (classification) or mean squared error (regression).
// The seed material's first model and the smallest thing the executor can
// train end to end on real data (Fashion-MNIST), written like llm.c's GPT-2
// (and the reference GPT of tests/reference/): saved activations in one buffer, a forward that fills them,
// a backward that walks them in reverse with the kernels of kernels/cpu/.
// No dropout. Memory (executor/backend/): saved activations (input copy,
// pre- and post-activations, probabilities) are recorded as activations,
// their gradients as workspace.
//
// defines: Mlp
#pragma once

#include <cstdint>
#include <vector>

#include "executor/backend/tracked_allocator.hpp"
#include "executor/model/matmul_runner.hpp"
#include "executor/model/model.hpp"

namespace meshplan::exec {

template <typename T>
class Mlp final : public Model<T> {
 public:
  // `spec` must pass check_supported (make_model checks); parameters come
  // from make_parameters(spec, seed).
  Mlp(const ModelSpec& spec, Parameters<T> parameters, std::int64_t max_batch);

  Parameters<T>& parameters() override { return params_; }
  const Parameters<T>& parameters() const override { return params_; }
  std::int64_t max_batch() const override { return max_batch_; }
  std::int64_t items_per_sample() const override { return 1; }
  Problems check_data(const data::BatchShape& shape) const override;
  T forward(const data::Batch& batch) override;
  void backward(T dloss) override;
  std::int64_t correct_predictions() const override { return correct_; }
  Problems set_matmul_precision(Precision precision) override { return matmul_.set_precision(precision); }
  Precision matmul_precision() const override { return matmul_.precision(); }

 private:
  std::int64_t linear_count() const { return static_cast<std::int64_t>(sizes_.size()) - 1; }

  std::vector<std::int64_t> sizes_;  // input, hidden..., output
  bool gelu_ = false;                // else relu
  Parameters<T> params_;
  std::int64_t max_batch_;
  std::vector<std::int64_t> weight_offsets_, bias_offsets_;  // per linear layer

  // Saved activations, [B, width] per layer: inputs_ = x; pre_[i] = linear i's
  // output; post_[i] = activation(pre_[i]) for hidden layers (i < n-1).
  TrackedVector<T> inputs_;
  std::vector<TrackedVector<T>> pre_, post_;
  TrackedVector<T> probs_;  // classification
  // Gradients of the activations, same shapes.
  std::vector<TrackedVector<T>> dpre_, dpost_;
  MatmulRunner<T> matmul_;

  std::int64_t batch_ = 0;  // samples of the last forward
  bool regression_ = false;
  std::vector<std::int32_t> targets_;
  std::vector<T> target_values_;
  std::int64_t correct_ = 0;
};

}  // namespace meshplan::exec
