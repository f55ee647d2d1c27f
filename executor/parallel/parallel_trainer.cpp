// The step of parallel_trainer.hpp: run the stage's instruction list, then
// the gradient synchronisation in a fixed order every rank follows (bucket
// waits, ZeRO-2 / HSDP reductions, tied embedding, sequence-parallel
// replicas, norm), then the update. Every reduction is a sum, so the order of
// the sums changes only fp32 rounding, never the result's meaning.
#include "executor/parallel/parallel_trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "executor/train/lr_schedule.hpp"
#include "kernels/cpu/adamw.hpp"
#include "model/schedule.hpp"

namespace meshplan::exec::parallel {
namespace {

using comm::DataType;
using comm::ReduceOp;

// Data-parallel gradient buckets (ZeRO 0/1): units join when their gradient
// is final; a full bucket is copied to a staging buffer and all-reduced
// without blocking; wait() completes them all and copies the sums back.
class GradientBuckets {
 public:
  GradientBuckets(comm::Communicator& group, double cap_bytes) : group_(group), cap_bytes_(cap_bytes) {}

  void add(Unit& unit) {
    if (group_.size() == 1) return;
    pending_.push_back(&unit);
    pending_elements_ += unit.layout.elements;
    if (static_cast<double>(pending_elements_) * sizeof(float) >= cap_bytes_) launch();
  }
  void flush() {
    if (!pending_.empty()) launch();
  }
  void wait() {
    flush();
    for (Bucket& bucket : buckets_) {
      bucket.request->wait();
      std::int64_t at = 0;
      for (Unit* unit : bucket.units) {
        std::copy(bucket.staging.begin() + at, bucket.staging.begin() + at + unit->layout.elements, unit->grads.begin());
        at += unit->layout.elements;
      }
    }
    // Keep the staging buffers for the next step: the same buckets recur every
    // step, and fresh ones cost a page fault per 4 KiB (~5% of a dp=2 step).
    if (spare_.size() < buckets_.size()) spare_.resize(buckets_.size());
    for (std::size_t i = 0; i < buckets_.size(); ++i) spare_[i] = std::move(buckets_[i].staging);
    buckets_.clear();
  }

 private:
  struct Bucket {
    std::vector<Unit*> units;
    std::vector<float> staging;
    std::unique_ptr<comm::Request> request;
  };
  void launch() {
    Bucket bucket;
    bucket.units = std::move(pending_);
    if (buckets_.size() < spare_.size()) bucket.staging = std::move(spare_[buckets_.size()]);
    bucket.staging.clear();
    bucket.staging.reserve(static_cast<std::size_t>(pending_elements_));
    for (Unit* unit : bucket.units)
      bucket.staging.insert(bucket.staging.end(), unit->grads.begin(), unit->grads.begin() + unit->layout.elements);
    bucket.request = group_.iall_reduce(bucket.staging.data(), std::ssize(bucket.staging), DataType::f32, ReduceOp::sum);
    buckets_.push_back(std::move(bucket));
    pending_.clear();
    pending_elements_ = 0;
  }

  comm::Communicator& group_;
  double cap_bytes_;
  std::vector<Unit*> pending_;
  std::int64_t pending_elements_ = 0;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<float>> spare_;  // staging buffers of the previous step, by bucket index
};

// The gradient this rank holds for a unit at the step end: the whole padded
// unit (ZeRO 0/1) or its shard (ZeRO 2, fsdp), indexed in unit coordinates.
struct GradView {
  float* data = nullptr;  // element `begin` of the unit
  std::int64_t begin = 0, end = 0;
  float& at(std::int64_t i) const { return data[i - begin]; }
};

GradView grad_view(Unit& u, ShardMode mode) {
  if (mode != ShardMode::replicated) return {u.shard_grads.data(), u.shard_begin, u.shard_begin + u.shard_size};
  return {u.grads.data(), 0, u.padded};
}

// Tags of point-to-point transfers: (producing chunk, micro-batch, activation or
// gradient), unique within a step. MPI promises tags up to 32767 at least.
constexpr std::int64_t transfer_tags = 32000;
int transfer_tag(std::int64_t chunk, std::int64_t micro_batch, std::int64_t chunks, bool gradient) {
  return static_cast<int>((micro_batch * chunks + chunk) * 2 + (gradient ? 1 : 0));
}
constexpr int tied_embedding_tag = 32001;

}  // namespace

TrainResult train_parallel(ParallelGpt& model, const Plan& plan, data::DataLoader& loader, const TrainOptions& options) {
  TrainResult result;
  Problems& problems = result.problems;
  comm::MeshCommunicators& groups = model.groups();
  comm::Communicator& world = groups.world();
  comm::Communicator& pp = groups.group(Axis::pp);
  comm::Communicator& tp = groups.group(Axis::tp);
  const std::int64_t M = options.micro_batches, B = options.micro_batch, T = model.seq_len();
  const std::int64_t D = plan.mesh.data_parallel_size();
  const std::int64_t d_index =
      groups.coordinate(Axis::dp) * plan.mesh.size(Axis::fsdp) + groups.coordinate(Axis::fsdp);
  const std::int64_t stages = plan.mesh.size(Axis::pp), stage = groups.coordinate(Axis::pp);
  if (B != model.micro_batch())
    problems.push_back({Severity::error, "plan.micro_batch", "the model was built for micro-batches of " +
                                                                 std::to_string(model.micro_batch())});
  if (M <= 0) problems.push_back({Severity::error, "plan.micro_batches", "must be at least 1"});
  if (options.steps <= 0) problems.push_back({Severity::error, "--steps", "give a positive number of steps"});
  if (M * model.chunk_count() * 2 > transfer_tags)
    problems.push_back({Severity::error, "global_batch", std::to_string(M) + " micro-batches x " +
                                                             std::to_string(model.chunk_count()) +
                                                             " pipeline chunks is more transfers per step than the "
                                                             "message tags can tell apart; use fewer micro-batches"});
  const data::BatchShape shape = loader.shape();
  if (shape.inputs_per_sample != T || shape.targets_per_sample != T || shape.classes <= 0 ||
      shape.classes > model.shape().vocab)
    problems.push_back({Severity::error, "--data", "the data's windows or vocabulary do not fit the model (sequences of " +
                                                       std::to_string(T) + " tokens, vocab " +
                                                       std::to_string(model.shape().vocab) + ")"});
  if (!result.ok()) return result;

  const std::vector<Instruction> program = pipeline_schedule(plan.schedule, stages, M)[static_cast<std::size_t>(stage)];
  // A pass that produces weight gradients (backward, or zero-bubble W) is final for its
  // chunk when no later one of that chunk follows.
  const auto weight_pass = [](const Instruction& in) {
    return in.kind == Instruction::backward || in.kind == Instruction::backward_weight;
  };
  std::vector<bool> final_pass(program.size(), false);
  for (std::size_t i = 0; i < program.size(); ++i) {
    if (!weight_pass(program[i])) continue;
    final_pass[i] = std::none_of(program.begin() + static_cast<std::ptrdiff_t>(i) + 1, program.end(),
                                 [&](const Instruction& in) { return weight_pass(in) && in.chunk == program[i].chunk; });
  }

  const ShardMode mode = model.mode();
  // ZeRO 0 all-reduces in buckets during the last backward. ZeRO 1 and 2
  // reduce-scatter each unit at the step end instead: each rank updates only
  // its shard, so the other shards' reduced gradients would be thrown away
  // (an all-reduce moves 2x the bytes of the reduce-scatter the cost model
  // and the ZeRO paper's P_os price; a dp=2 ZeRO-1 step of gpt-byte-10m
  // went from 0.389 s to 0.376 s).
  const bool bucketed = mode == ShardMode::replicated;
  GradientBuckets buckets(groups.group(Axis::dp), plan.gradient_bucket_bytes);
  const auto on_final = [&](Unit& unit) {
    if (bucketed) buckets.add(unit);
  };
  const std::int64_t rows = model.rows_local() * model.channels();
  const std::int64_t chunks = model.chunk_count();
  const bool holds_loss = stage == stages - 1 && groups.coordinate(Axis::tp) == 0;
  const float dloss = 1.0f / static_cast<float>(M * D);
  // Which copy of its gradients this rank holds: the norm counts copy 0 only (dp ranks under
  // ZeRO 0, the dp replicas of fsdp shards; ZeRO 1/2/3 shard over dp instead, one copy).
  const std::int64_t replica = model.replica_group().rank();

  const LrSchedule schedule{options.adamw.learning_rate, options.warmup_steps, options.steps, options.min_lr_fraction};
  std::int64_t updates = options.completed_updates;
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(M * B * T)), targets(tokens.size());
  std::vector<std::span<const float>> norm_spans;
  for (std::int64_t step = std::max<std::int64_t>(options.first_step, 0); step < options.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    world.set_step(step);
    for (Unit& u : model.units()) {
      std::fill(u.grads.begin(), u.grads.end(), 0.0f);
      std::fill(u.shard_grads.begin(), u.shard_grads.end(), 0.0f);
    }
    const data::Batch batch = loader.next_batch(B * M * D);
    const std::int64_t first = d_index * M * B * T;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<std::int32_t>(batch.inputs[static_cast<std::size_t>(first) + i]);
      targets[i] = batch.targets[static_cast<std::size_t>(first) + i];
    }

    // The stage's program.
    double loss_sum = 0;
    std::vector<std::pair<std::vector<float>, std::unique_ptr<comm::Request>>> sends;
    for (std::size_t i = 0; i < program.size(); ++i) {
      const Instruction& in = program[i];
      const std::int64_t mb = in.micro_batch, c = in.chunk;
      const int peer = static_cast<int>(in.peer_stage);
      switch (in.kind) {
        case Instruction::receive_activation:
          pp.recv(model.forward_input(c, mb), rows, DataType::f32, peer, transfer_tag(c - 1, mb, chunks, false));
          break;
        case Instruction::forward:
          loss_sum += model.forward(c, mb, tokens.data() + mb * B * T, targets.data() + mb * B * T);
          break;
        case Instruction::send_activation: {
          const float* out = model.forward_output(c, mb);
          auto& send = sends.emplace_back(std::vector<float>(out, out + rows), nullptr);
          send.second = pp.isend(send.first.data(), rows, DataType::f32, peer, transfer_tag(c, mb, chunks, false));
          break;
        }
        case Instruction::receive_gradient:
          pp.recv(model.backward_input(), rows, DataType::f32, peer, transfer_tag(c + 1, mb, chunks, true));
          break;
        case Instruction::backward: model.backward(c, mb, dloss, final_pass[i], on_final); break;
        case Instruction::send_gradient: {
          const float* out = model.backward_output();
          auto& send = sends.emplace_back(std::vector<float>(out, out + rows), nullptr);
          send.second = pp.isend(send.first.data(), rows, DataType::f32, peer, transfer_tag(c, mb, chunks, true));
          break;
        }
        case Instruction::reduce_gradients:
          if (bucketed) buckets.flush();
          break;
        case Instruction::optimizer_step: break;
        case Instruction::backward_input:
          model.backward(c, mb, dloss, false, on_final, BackwardPart::input);
          break;
        case Instruction::backward_weight:
          model.backward(c, mb, dloss, final_pass[i], on_final, BackwardPart::weight);
          break;
      }
    }
    for (auto& send : sends) send.second->wait();

    // Gradient synchronisation, in the same order on every rank.
    if (bucketed) buckets.wait();
    for (Unit& u : model.units()) {
      if (mode == ShardMode::zero1 || mode == ShardMode::zero2)
        model.shard_group().reduce_scatter(u.grads.data(), u.shard_grads.data(), u.shard_size, DataType::f32,
                                           ReduceOp::sum);
      if (mode == ShardMode::fsdp && model.replica_group().size() > 1)
        model.replica_group().all_reduce(u.shard_grads.data(), u.shard_size, DataType::f32, ReduceOp::sum);
    }
    if (stages > 1 && model.wte() != nullptr) {
      const GradView view = grad_view(*model.wte(), mode);
      const std::int64_t n = view.end - view.begin;
      std::vector<float> mine(view.data, view.data + n), theirs(static_cast<std::size_t>(n));
      const int peer = static_cast<int>(stage == 0 ? stages - 1 : 0);
      auto request = pp.isend(mine.data(), n, DataType::f32, peer, tied_embedding_tag);
      pp.recv(theirs.data(), n, DataType::f32, peer, tied_embedding_tag);
      request->wait();
      for (std::int64_t k = 0; k < n; ++k) view.data[k] = mine[static_cast<std::size_t>(k)] + theirs[static_cast<std::size_t>(k)];
    }
    if (model.sequence_parallel()) {
      for (Unit& u : model.units()) {
        const GradView view = grad_view(u, mode);
        for (const LocalTensor& t : u.layout.tensors) {
          if (t.split != TpSplit::none) continue;
          const std::int64_t lo = std::max(t.offset, view.begin), hi = std::min(t.offset + t.elements(), view.end);
          if (hi > lo) tp.all_reduce(&view.at(lo), hi - lo, DataType::f32, ReduceOp::sum);
        }
      }
    }
    // This rank's share of the squared gradient norm, with the vectorised
    // kernel (a scalar running sum here cost ~4% of a dp=2 step).
    norm_spans.clear();
    for (Unit& u : model.units()) {
      if (!u.counts_in_norm || replica != 0) continue;
      const GradView view = grad_view(u, mode);
      for (const LocalTensor& t : u.layout.tensors) {
        if (t.split == TpSplit::none && groups.coordinate(Axis::tp) != 0) continue;
        const std::int64_t lo = std::max(t.offset, u.optimizer_begin), hi = std::min(t.offset + t.elements(), u.optimizer_end);
        if (hi > lo) norm_spans.emplace_back(&view.at(lo), static_cast<std::size_t>(hi - lo));
      }
    }
    const double local_norm = kernels::global_l2_norm<float>(norm_spans);
    double sums[2] = {local_norm * local_norm, holds_loss ? loss_sum / static_cast<double>(M * D) : 0.0};
    world.all_reduce(sums, 2, DataType::f64, ReduceOp::sum);
    const double norm = std::sqrt(sums[0]), loss = sums[1];
    const double lr = learning_rate_at(schedule, step);
    StepReport report{step, loss, lr, norm, 0, 0, false};
    ++result.steps;
    result.last_loss = loss;

    const StepVerdict verdict = judge_step(step, loss, norm, lr, options.on_non_finite, result);
    if (verdict == StepVerdict::stop) return result;
    if (verdict == StepVerdict::skip) {
      report.skipped = true;
    } else {
      const float scale = static_cast<float>(kernels::clip_scale(norm, options.max_grad_norm));
      ++updates;
      kernels::AdamWHyperparameters hp = options.adamw;
      hp.learning_rate = lr;
      for (Unit& u : model.units()) {
        const GradView view = grad_view(u, mode);
        if (scale != 1.0f && u.optimizer_end > u.optimizer_begin) {
          float* g = &view.at(u.optimizer_begin);
          const std::int64_t n = u.optimizer_end - u.optimizer_begin;
          for (std::int64_t k = 0; k < n; ++k) g[k] *= scale;
        }
        float* values = mode == ShardMode::fsdp ? u.shard_values.data() : u.values.data();
        const std::int64_t values_base = mode == ShardMode::fsdp ? u.shard_begin : 0;
        for (const LocalTensor& t : u.layout.tensors) {
          const std::int64_t lo = std::max(t.offset, u.optimizer_begin), hi = std::min(t.offset + t.elements(), u.optimizer_end);
          if (hi <= lo) continue;
          kernels::AdamWHyperparameters tensor_hp = hp;
          if (!t.decays()) tensor_hp.weight_decay = 0;
          const auto moment = static_cast<std::size_t>(lo - u.optimizer_begin);
          kernels::adamw_update(values + (lo - values_base), &view.at(lo), u.adam_m.data() + moment,
                                u.adam_v.data() + moment, hi - lo, updates, tensor_hp);
        }
        if ((mode == ShardMode::zero1 || mode == ShardMode::zero2) && model.shard_group().size() > 1)
          model.shard_group().all_gather(u.values.data() + u.shard_begin, u.values.data(), u.shard_size, DataType::f32);
      }
    }
    report.step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report.items_per_s = report.step_s > 0 ? static_cast<double>(B * M * D * T) / report.step_s : 0;
    if (options.on_step) options.on_step(report);
    if (options.stop_requested && options.stop_requested()) {
      result.stopped_early = step + 1 < options.steps;
      break;
    }
  }
  return result;
}

}  // namespace meshplan::exec::parallel
