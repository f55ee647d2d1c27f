// The trainer of data_parallel.hpp. The collectives run in one fixed order
// on every rank (reduce, norm and loss, update's all-gather); every reduction
// is a sum, so the order changes only fp32 rounding.
#include "executor/train/data_parallel.hpp"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <span>
#include <string>

#include "executor/parallel/parallel_checkpoint.hpp"
#include "executor/parallel/shard_layout.hpp"
#include "executor/train/lr_schedule.hpp"

namespace meshplan::exec {
namespace {

using comm::DataType;
using comm::ReduceOp;

// Samples [first, first + samples) of `global`.
data::Batch slice(const data::Batch& global, std::int64_t first, std::int64_t samples, const data::BatchShape& shape) {
  data::Batch part;
  part.samples = samples;
  const auto copy = [&](const auto& from, auto& to, std::int64_t per_sample) {
    if (per_sample <= 0 || from.empty()) return;
    to.assign(from.begin() + first * per_sample, from.begin() + (first + samples) * per_sample);
  };
  copy(global.inputs, part.inputs, shape.inputs_per_sample);
  copy(global.targets, part.targets, shape.targets_per_sample);
  copy(global.target_values, part.target_values, shape.target_values_per_sample);
  return part;
}

double sum_of_squares(const float* data, std::int64_t n) {
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(data[i]) * static_cast<double>(data[i]);
  return sum;
}

Problem error(const std::string& where, const std::string& message) { return {Severity::error, where, message}; }

}  // namespace

DataParallelTrainer::DataParallelTrainer(std::unique_ptr<Model<float>> model, const Plan& plan,
                                         comm::MeshCommunicators& groups)
    : model_(std::move(model)), groups_(groups), self_(comm::make_self_communicator("self")) {
  if (plan.mesh.size(Axis::tp) > 1) {
    tp_mlp_ = dynamic_cast<Mlp<float>*>(model_.get());
    assert(tp_mlp_ != nullptr && "tensor parallelism is run for an Mlp only (trainable)");
    comm::Communicator& tp = groups.group(Axis::tp);
    MlpTensorParallel<float> split;
    split.rank = tp.rank();
    split.size = tp.size();
    split.all_reduce = [&tp](float* data, std::int64_t n) { tp.all_reduce(data, n, DataType::f32, ReduceOp::sum); };
    split.all_gather = [&tp](const float* local, float* whole, std::int64_t n) {
      tp.all_gather(local, whole, n, DataType::f32);
    };
    tp_mlp_->split_over_tp(std::move(split));
  }
  const parallel::DataSharding sharding = parallel::data_sharding(plan);
  mode_ = sharding.parameters  ? Mode::sharded_values
          : sharding.optimizer ? Mode::sharded_optimizer
                               : Mode::replicated;
  shard_gradients_ = sharding.gradients;
  const Mesh& mesh = groups.mesh();
  data_index_ = groups.coordinate(Axis::dp) * mesh.size(Axis::fsdp) + groups.coordinate(Axis::fsdp);
  data_ranks_ = mesh.data_parallel_size();
  shard_group_ = mode_ == Mode::replicated ? self_.get() : &groups.group(sharding.axis);
  replica_group_ = mode_ != Mode::replicated && sharding.axis == Axis::fsdp ? &groups.group(Axis::dp) : self_.get();
  const std::int64_t group = shard_group_->size(), n = elements();
  shard_size_ = (n + group - 1) / group;
  padded_ = shard_size_ * group;
  shard_begin_ = shard_group_->rank() * shard_size_;
  if (mode_ == Mode::replicated) return;

  Parameters<float>& p = params();
  const auto shard_of = [&](const TrackedVector<float>& whole, TrackedAllocator<float> allocator) {
    TrackedVector<float> shard(static_cast<std::size_t>(shard_size_), 0.0f, allocator);
    std::copy(whole.begin() + shard_begin_, whole.begin() + shard_end(), shard.begin());
    return shard;
  };
  // ZeRO 1 keeps the whole gradient; its reduced shard is a communication buffer.
  shard_grads_ = TrackedVector<float>(static_cast<std::size_t>(shard_size_), 0.0f,
                                      shard_gradients_ ? p.grads.get_allocator()
                                                       : TrackedAllocator<float>(MemoryCategory::communication));
  shard_m_ = shard_of(p.adam_m, p.adam_m.get_allocator());
  shard_v_ = shard_of(p.adam_v, p.adam_v.get_allocator());
  release(p.adam_m);
  release(p.adam_v);
  if (shard_gradients_) release(p.grads);
  if (mode_ == Mode::sharded_values) {
    shard_values_ = shard_of(p.values, p.values.get_allocator());
    release(p.values);
  } else {
    p.values.resize(static_cast<std::size_t>(padded_), 0.0f);  // the all-gather of the updated shards lands in place
  }
}

std::int64_t DataParallelTrainer::shard_end() const {
  return std::max(shard_begin_, std::min(shard_begin_ + shard_size_, elements()));
}

void DataParallelTrainer::gather_values() {
  if (mode_ != Mode::sharded_values) return;
  Parameters<float>& p = params();
  p.values.resize(static_cast<std::size_t>(padded_));
  shard_group_->all_gather(shard_values_.data(), p.values.data(), shard_size_, DataType::f32);
}

void DataParallelTrainer::release_values() {
  if (mode_ == Mode::sharded_values) release(params().values);
}

double DataParallelTrainer::reduce_gradients() {
  Parameters<float>& p = params();
  if (mode_ == Mode::replicated) {
    groups_.data_parallel().all_reduce(p.grads.data(), elements(), DataType::f32, ReduceOp::sum);
    return data_index_ == 0 ? sum_of_squares(p.grads.data(), elements()) : 0.0;
  }
  shard_group_->reduce_scatter(p.grads.data(), shard_grads_.data(), shard_size_, DataType::f32, ReduceOp::sum);
  if (replica_group_->size() > 1)
    replica_group_->all_reduce(shard_grads_.data(), shard_size_, DataType::f32, ReduceOp::sum);
  if (shard_gradients_) release(p.grads);
  return replica_group_->rank() == 0 ? sum_of_squares(shard_grads_.data(), shard_end() - shard_begin_) : 0.0;
}

void DataParallelTrainer::update(float clip, std::int64_t updates, const kernels::AdamWHyperparameters& hp) {
  Parameters<float>& p = params();
  const std::int64_t begin = shard_begin_, end = mode_ == Mode::replicated ? elements() : shard_end();
  float* grads = mode_ == Mode::replicated ? p.grads.data() : shard_grads_.data();
  if (clip != 1.0f)
    for (std::int64_t i = 0; i < end - begin; ++i) grads[i] *= clip;
  if (mode_ == Mode::replicated) {
    adamw_update_range<float>(p.layout, 0, end, {p.values.data()}, {grads}, {p.adam_m.data()}, {p.adam_v.data()},
                              updates, hp);
    return;
  }
  const FlatView<float> values = mode_ == Mode::sharded_values ? FlatView<float>{shard_values_.data(), begin}
                                                                : FlatView<float>{p.values.data()};
  adamw_update_range<float>(p.layout, begin, end, values, {grads, begin}, {shard_m_.data(), begin},
                            {shard_v_.data(), begin}, updates, hp);
  if (mode_ == Mode::sharded_optimizer)
    shard_group_->all_gather(p.values.data() + begin, p.values.data(), shard_size_, DataType::f32);
}

TrainResult DataParallelTrainer::train(data::DataLoader& loader, const TrainOptions& options) {
  TrainResult result;
  const std::int64_t B = options.micro_batch, M = options.micro_batches, D = data_ranks_;
  if (B <= 0 || B > model_->max_batch())
    result.problems.push_back(error("plan.micro_batch", std::to_string(B) + " must be between 1 and the model's batch "
                                                        "capacity (" + std::to_string(model_->max_batch()) + ")"));
  if (M <= 0) result.problems.push_back(error("plan.micro_batches", "must be at least 1"));
  if (options.steps <= 0) result.problems.push_back(error("--steps", "give a positive number of steps"));
  const data::BatchShape shape = loader.shape();
  const Problems data_problems = model_->check_data(shape);
  result.problems.insert(result.problems.end(), data_problems.begin(), data_problems.end());
  if (!result.ok()) return result;

  comm::Communicator& world = groups_.world();
  const LrSchedule schedule{options.adamw.learning_rate, options.warmup_steps, options.steps, options.min_lr_fraction};
  const float dloss = 1.0f / static_cast<float>(M * D);
  std::int64_t updates = options.completed_updates;
  for (std::int64_t step = std::max<std::int64_t>(options.first_step, 0); step < options.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    world.set_step(step);
    const data::Batch global = loader.next_batch(B * M * D);
    gather_values();
    Parameters<float>& p = params();
    p.grads.assign(static_cast<std::size_t>(padded_), 0.0f);
    double loss_sum = 0;
    for (std::int64_t k = 0; k < M; ++k) {
      loss_sum += static_cast<double>(model_->forward(slice(global, (data_index_ * M + k) * B, B, shape)));
      model_->backward(dloss);
    }
    release_values();
    // The norm's squares and the global batch's mean loss in one world all-reduce (the loss
    // once per data-parallel rank: its tp ranks computed the same one).
    const bool counts_loss = groups_.coordinate(Axis::tp) == 0;
    double sums[2] = {reduce_gradients(), counts_loss ? loss_sum / static_cast<double>(M * D) : 0.0};
    world.all_reduce(sums, 2, DataType::f64, ReduceOp::sum);
    const auto step_update = [&](double clip, std::int64_t n, const kernels::AdamWHyperparameters& hp) {
      update(static_cast<float>(clip), n, hp);
    };
    if (!finish_step(step, sums[1], std::sqrt(sums[0]), learning_rate_at(schedule, step),
                     static_cast<double>(B * M * D * model_->items_per_sample()), start, options.steps, options,
                     updates, result, step_update))
      break;
  }
  return result;
}

EvalResult DataParallelTrainer::evaluate(data::DataLoader& loader, std::int64_t max_samples) {
  gather_values();
  const EvalResult result = exec::evaluate(*model_, loader, max_samples);
  release_values();
  return result;
}

std::vector<TensorBlob> DataParallelTrainer::whole_blobs(const float* values, const float* m, const float* v) {
  Parameters<float>& p = params();
  if (tp_mlp_ == nullptr) {
    const auto n = static_cast<std::size_t>(elements());
    return parallel::checkpoint_blobs(p.layout, {std::span<const float>(values, n), std::span<const float>(m, n),
                                                 std::span<const float>(v, n)});
  }
  // Each tp rank writes its blocks into zeros (the replicated biases from tp rank 0); the sum over tp is the whole.
  comm::Communicator& tp = groups_.group(Axis::tp);
  const ParameterLayout& whole = tp_mlp_->whole_layout();
  std::vector<std::vector<float>> out;
  for (const float* local : {values, m, v}) {
    std::vector<float>& w = out.emplace_back(static_cast<std::size_t>(whole.total_elements), 0.0f);
    tp_mlp_->shard_to_whole(local, w.data(), tp.rank() == 0);
    tp.all_reduce(w.data(), whole.total_elements, DataType::f32, ReduceOp::sum);
  }
  return parallel::checkpoint_blobs(whole, {std::span<const float>(out[0]), std::span<const float>(out[1]),
                                            std::span<const float>(out[2])});
}

std::vector<TensorBlob> DataParallelTrainer::checkpoint_tensors() {
  Parameters<float>& p = params();
  if (mode_ == Mode::replicated) return whole_blobs(p.values.data(), p.adam_m.data(), p.adam_v.data());
  gather_values();
  std::vector<float> m(static_cast<std::size_t>(padded_)), v(m.size());
  shard_group_->all_gather(shard_m_.data(), m.data(), shard_size_, DataType::f32);
  shard_group_->all_gather(shard_v_.data(), v.data(), shard_size_, DataType::f32);
  std::vector<TensorBlob> blobs = whole_blobs(p.values.data(), m.data(), v.data());
  release_values();
  return blobs;
}

Problems DataParallelTrainer::restore(const std::vector<TensorBlob>& blobs, const std::string& where) {
  Parameters<float>& p = params();
  const auto n = static_cast<std::size_t>(elements());
  // The whole model's tensors, then (under tp) this rank's blocks of them.
  const ParameterLayout& layout = tp_mlp_ != nullptr ? tp_mlp_->whole_layout() : p.layout;
  const auto whole_n = static_cast<std::size_t>(layout.total_elements);
  std::vector<float> values(whole_n), m(whole_n), v(whole_n);
  Problems problems =
      parallel::checkpoint_full(layout, blobs, where, {std::span<float>(values), std::span<float>(m), std::span<float>(v)});
  if (has_errors(problems)) return problems;
  if (tp_mlp_ != nullptr) {
    for (std::vector<float>* whole : {&values, &m, &v}) {
      std::vector<float> shard(n);
      tp_mlp_->whole_to_shard(whole->data(), shard.data());
      *whole = std::move(shard);
    }
  }
  if (mode_ == Mode::replicated) {
    std::copy(values.begin(), values.end(), p.values.begin());
    std::copy(m.begin(), m.end(), p.adam_m.begin());
    std::copy(v.begin(), v.end(), p.adam_v.begin());
    return problems;
  }
  if (mode_ == Mode::sharded_values) p.values.resize(static_cast<std::size_t>(padded_));
  std::copy(values.begin(), values.end(), p.values.begin());
  const auto keep_shard = [&](const float* whole, TrackedVector<float>& shard) {
    std::fill(shard.begin(), shard.end(), 0.0f);
    std::copy(whole + shard_begin_, whole + shard_end(), shard.begin());
  };
  keep_shard(m.data(), shard_m_);
  keep_shard(v.data(), shard_v_);
  if (mode_ == Mode::sharded_values) keep_shard(p.values.data(), shard_values_);
  release_values();
  return problems;
}

}  // namespace meshplan::exec
