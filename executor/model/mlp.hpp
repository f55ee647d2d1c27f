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
// Tensor parallelism (split_over_tp; Megatron-LM, Shoeybi et al. 2019,
// Sec. 3, and the planner's rule, docs/cost-model.md "MLP"): linear i's
// weight is [out, in]. Even linears are column-parallel: tp rank r holds
// output rows [r out/tp, (r+1) out/tp) of the weight and the bias, and the
// activation that follows runs on that block. Odd linears are row-parallel:
// rank r holds input columns [r in/tp, (r+1) in/tp) of the weight; the bias
// is whole, and tp rank 0 alone adds it (and takes its gradient), before the
// output is all-reduced over tp. A column-parallel linear's input gradient is
// all-reduced too (Megatron's f and g). When the last linear is
// column-parallel its outputs are all-gathered before the loss, which every
// tp rank then computes whole.
//
// defines: MlpTensorParallel, Mlp
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "executor/backend/tracked_allocator.hpp"
#include "executor/model/matmul_runner.hpp"
#include "executor/model/model.hpp"

namespace meshplan::exec {

// This rank's place on the tp axis and the two collectives over its group.
template <typename T>
struct MlpTensorParallel {
  std::int64_t rank = 0, size = 1;
  std::function<void(T* data, std::int64_t n)> all_reduce;                   // sum over the group, in place
  std::function<void(const T* local, T* whole, std::int64_t n)> all_gather;  // n elements per rank, in rank order
};

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

  // Turns this whole model into tp rank `tp.rank`'s shard of it (the rule
  // above): parameters() then hold the shard, laid out as an MLP of the local
  // sizes, and every forward and backward is collective over the tp group.
  // tp.size must divide the output size of every even linear (trainable checks).
  void split_over_tp(MlpTensorParallel<T> tp);
  // The whole model's layout (parameters().layout unless split).
  const ParameterLayout& whole_layout() const { return tp_.size > 1 ? whole_layout_ : params_.layout; }
  // Writes this rank's blocks of a flat buffer laid out as parameters() into
  // one laid out as whole_layout(); the row-parallel biases, which every tp
  // rank holds, only when `replicated` (tp rank 0's copy is the model's).
  void shard_to_whole(const T* shard, T* whole, bool replicated) const;
  // The reverse: this rank's blocks of a whole buffer.
  void whole_to_shard(const T* whole, T* shard) const;

 private:
  std::int64_t linear_count() const { return static_cast<std::int64_t>(sizes_.size()) - 1; }
  void allocate_activations();
  // Copies between the whole layout and this rank's blocks (to_whole: shard -> whole).
  void copy_blocks(const ParameterLayout& shard_layout, T* whole, T* shard, bool to_whole, bool replicated) const;
  bool row_parallel(std::int64_t linear) const { return tp_.size > 1 && linear % 2 == 1; }

  std::vector<std::int64_t> sizes_;  // input, hidden..., output (this rank's widths when split over tp)
  std::vector<std::int64_t> whole_sizes_;
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
  // Tensor parallelism: the group, the whole model's layout, and when the
  // last linear is column-parallel the all-gathered outputs and their gradient.
  MlpTensorParallel<T> tp_;
  ParameterLayout whole_layout_;
  bool gather_outputs_ = false;
  TrackedVector<T> gathered_, outputs_, doutputs_;

  std::int64_t batch_ = 0;  // samples of the last forward
  bool regression_ = false;
  std::vector<std::int32_t> targets_;
  std::vector<T> target_values_;
  std::int64_t correct_ = 0;
};

}  // namespace meshplan::exec
