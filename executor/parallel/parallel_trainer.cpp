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
  GradientBuckets(comm::Communicator& group, double cap_bytes, GptOps& ops, Backend& backend)
      : group_(group), cap_bytes_(cap_bytes), ops_(ops), backend_(backend) {}

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
        ops_.copy(unit->grads.data(), bucket.staging.data() + at, unit->layout.elements);
        at += unit->layout.elements;
      }
    }
    // Keep the staging buffers for the next step: the same buckets recur every
    // step, and fresh ones cost a page fault per 4 KiB (~5% of a dp=2 step).
    while (spare_.size() < buckets_.size()) spare_.emplace_back(MemoryCategory::communication, backend_);
    for (std::size_t i = 0; i < buckets_.size(); ++i) spare_[i] = std::move(buckets_[i].staging);
    buckets_.clear();
  }

 private:
  struct Bucket {
    explicit Bucket(Backend& backend) : staging(MemoryCategory::communication, backend) {}
    std::vector<Unit*> units;
    Floats staging;
    std::unique_ptr<comm::Request> request;
  };
  void launch() {
    Bucket bucket(backend_);
    bucket.units = std::move(pending_);
    if (buckets_.size() < spare_.size()) bucket.staging = std::move(spare_[buckets_.size()]);
    bucket.staging.resize(static_cast<std::size_t>(pending_elements_));
    std::int64_t at = 0;
    for (Unit* unit : bucket.units) {
      ops_.copy(bucket.staging.data() + at, unit->grads.data(), unit->layout.elements);
      at += unit->layout.elements;
    }
    bucket.request = group_.iall_reduce(bucket.staging.data(), std::ssize(bucket.staging), DataType::f32, ReduceOp::sum);
    buckets_.push_back(std::move(bucket));
    pending_.clear();
    pending_elements_ = 0;
  }

  comm::Communicator& group_;
  double cap_bytes_;
  GptOps& ops_;
  Backend& backend_;
  std::vector<Unit*> pending_;
  std::int64_t pending_elements_ = 0;
  std::vector<Bucket> buckets_;
  std::vector<Floats> spare_;  // staging buffers of the previous step, by bucket index
};

// The gradient this rank holds for a unit at the step end: the whole padded
// unit (ZeRO 0/1) or its shard (ZeRO 2, fsdp), indexed in unit coordinates
// (backend memory: at() is a pointer, never read here).
struct GradView {
  float* data = nullptr;  // element `begin` of the unit
  std::int64_t begin = 0, end = 0;
  float* at(std::int64_t i) const { return data + (i - begin); }
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

// A sum over `group` of `n` host doubles (the step's loss and norm): through
// the model's backend memory when the group works on device memory (a
// staged or NCCL group takes device pointers only), else in place.
void all_reduce_host_sums(ParallelGpt& model, comm::Communicator& group, double* values, int n) {
  Backend& backend = model.backend();
  if (backend.host_accessible()) {
    group.all_reduce(values, n, DataType::f64, ReduceOp::sum);
    return;
  }
  DeviceVector<double> device(MemoryCategory::communication, backend);
  device.assign_host(values, static_cast<std::size_t>(n));
  group.all_reduce(device.data(), n, DataType::f64, ReduceOp::sum);
  const std::vector<double> summed = device.to_host();
  std::copy(summed.begin(), summed.end(), values);
}

// Problems with the options and the data that no step could run with.
Problems check_options(ParallelGpt& model, data::DataLoader& loader, const TrainOptions& options) {
  Problems problems;
  const std::int64_t M = options.micro_batches, T = model.seq_len();
  if (options.micro_batch != model.micro_batch())
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
  return problems;
}

// For each instruction of a stage's program: whether it is the last pass
// producing weight gradients (backward, or zero-bubble W) of its chunk.
std::vector<bool> final_weight_passes(const std::vector<Instruction>& program) {
  const auto weight_pass = [](const Instruction& in) {
    return in.kind == Instruction::backward || in.kind == Instruction::backward_weight;
  };
  std::vector<bool> final_pass(program.size(), false);
  for (std::size_t i = 0; i < program.size(); ++i) {
    if (!weight_pass(program[i])) continue;
    final_pass[i] = std::none_of(program.begin() + static_cast<std::ptrdiff_t>(i) + 1, program.end(),
                                 [&](const Instruction& in) { return weight_pass(in) && in.chunk == program[i].chunk; });
  }
  return final_pass;
}

// One rank's step, phase by phase (parallel_trainer.hpp): the stage's
// program, the gradient synchronisation, the norm, the update.
class ParallelStep {
 public:
  ParallelStep(ParallelGpt& model, const Plan& plan, const TrainOptions& options)
      : model_(model),
        groups_(model.groups()),
        pp_(groups_.group(Axis::pp)),
        tp_(groups_.group(Axis::tp)),
        M_(options.micro_batches),
        B_(options.micro_batch),
        T_(model.seq_len()),
        D_(plan.mesh.data_parallel_size()),
        stages_(plan.mesh.size(Axis::pp)),
        stage_(groups_.coordinate(Axis::pp)),
        program_(pipeline_schedule(plan.schedule, stages_, M_)[static_cast<std::size_t>(stage_)]),
        final_pass_(final_weight_passes(program_)),
        mode_(model.mode()),
        // ZeRO 0 all-reduces in buckets during the last backward. ZeRO 1 and 2
        // reduce-scatter each unit at the step end instead: each rank updates only
        // its shard, so the other shards' reduced gradients would be thrown away
        // (an all-reduce moves 2x the bytes of the reduce-scatter the cost model
        // and the ZeRO paper's P_os price; a dp=2 ZeRO-1 step of gpt-byte-10m
        // went from 0.389 s to 0.376 s).
        bucketed_(mode_ == ShardMode::replicated),
        buckets_(groups_.group(Axis::dp), plan.gradient_bucket_bytes, model.ops(), model.backend()),
        dloss_(1.0f / static_cast<float>(M_ * D_)) {}

  // This rank's micro-batches of the step's global batch (data-parallel rank d takes [d M, (d + 1) M)).
  void take_batch(data::DataLoader& loader) {
    const std::int64_t d_index =
        groups_.coordinate(Axis::dp) * groups_.mesh().size(Axis::fsdp) + groups_.coordinate(Axis::fsdp);
    tokens_.resize(static_cast<std::size_t>(M_ * B_ * T_));
    targets_.resize(tokens_.size());
    const data::Batch batch = loader.next_batch(B_ * M_ * D_);
    const std::int64_t first = d_index * M_ * B_ * T_;
    for (std::size_t i = 0; i < tokens_.size(); ++i) {
      tokens_[i] = static_cast<std::int32_t>(batch.inputs[static_cast<std::size_t>(first) + i]);
      targets_[i] = batch.targets[static_cast<std::size_t>(first) + i];
    }
  }

  // Runs the stage's instruction list; returns this rank's sum of micro-batch losses.
  double run_program() {
    for (Unit& u : model_.units()) {
      u.grads.zero();
      u.shard_grads.zero();
    }
    const auto on_final = [&](Unit& unit) {
      if (bucketed_) buckets_.add(unit);
    };
    const std::int64_t rows = model_.rows_local() * model_.channels(), chunks = model_.chunk_count();
    double loss_sum = 0;
    std::vector<std::pair<Floats, std::unique_ptr<comm::Request>>> sends;
    const auto send = [&](const float* out, int peer, int tag) {
      auto& sent = sends.emplace_back(floats(MemoryCategory::communication, model_.backend()), nullptr);
      sent.first.assign_device(out, static_cast<std::size_t>(rows));
      sent.second = pp_.isend(sent.first.data(), rows, DataType::f32, peer, tag);
    };
    for (std::size_t i = 0; i < program_.size(); ++i) {
      const Instruction& in = program_[i];
      const std::int64_t mb = in.micro_batch, c = in.chunk;
      const int peer = static_cast<int>(in.peer_stage);
      switch (in.kind) {
        case Instruction::receive_activation:
          pp_.recv(model_.forward_input(c, mb), rows, DataType::f32, peer, transfer_tag(c - 1, mb, chunks, false));
          break;
        case Instruction::forward:
          loss_sum += model_.forward(c, mb, tokens_.data() + mb * B_ * T_, targets_.data() + mb * B_ * T_);
          break;
        case Instruction::send_activation:
          send(model_.forward_output(c, mb), peer, transfer_tag(c, mb, chunks, false));
          break;
        case Instruction::receive_gradient:
          pp_.recv(model_.backward_input(), rows, DataType::f32, peer, transfer_tag(c + 1, mb, chunks, true));
          break;
        case Instruction::backward: model_.backward(c, mb, dloss_, final_pass_[i], on_final); break;
        case Instruction::send_gradient: send(model_.backward_output(), peer, transfer_tag(c, mb, chunks, true)); break;
        case Instruction::reduce_gradients:
          if (bucketed_) buckets_.flush();
          break;
        case Instruction::optimizer_step: break;
        case Instruction::backward_input:
          model_.backward(c, mb, dloss_, false, on_final, BackwardPart::input);
          break;
        case Instruction::backward_weight:
          model_.backward(c, mb, dloss_, final_pass_[i], on_final, BackwardPart::weight);
          break;
      }
    }
    for (auto& sent : sends) sent.second->wait();
    return loss_sum;
  }

  // Gradient synchronisation, in the same order on every rank.
  void synchronise_gradients() {
    if (bucketed_) buckets_.wait();
    for (Unit& u : model_.units()) {
      if (mode_ == ShardMode::zero1 || mode_ == ShardMode::zero2)
        model_.shard_group().reduce_scatter(u.grads.data(), u.shard_grads.data(), u.shard_size, DataType::f32,
                                            ReduceOp::sum);
      if (mode_ == ShardMode::fsdp && model_.replica_group().size() > 1)
        model_.replica_group().all_reduce(u.shard_grads.data(), u.shard_size, DataType::f32, ReduceOp::sum);
    }
    if (stages_ > 1 && model_.tied() && model_.wte() != nullptr) sum_tied_embedding();
    // Tensors every tp rank holds whole but each computes only part of the gradient of: the
    // tp-replicated ones under sequence parallelism (each rank saw its sequence shard), and
    // key/value heads tp does not divide (each rank's query heads read them).
    if (tp_.size() > 1) {
      for (Unit& u : model_.units()) {
        const GradView view = grad_view(u, mode_);
        const auto reduce = [&](std::int64_t begin, std::int64_t end) {
          const std::int64_t lo = std::max(begin, view.begin), hi = std::min(end, view.end);
          if (hi > lo) tp_.all_reduce(view.at(lo), hi - lo, DataType::f32, ReduceOp::sum);
        };
        for (const LocalTensor& t : u.layout.tensors) {
          if (t.split == TpSplit::none && model_.sequence_parallel()) reduce(t.offset, t.offset + t.elements());
          for (const auto& [begin, end] : t.whole_part_ranges()) reduce(begin, end);
        }
      }
    }
  }

  // This rank's share of the squared gradient norm, with the vectorised
  // kernel (a scalar running sum here cost ~4% of a dp=2 step).
  double local_norm() {
    // Which copy of its gradients this rank holds: the norm counts copy 0 only (dp ranks under
    // ZeRO 0, the dp replicas of fsdp shards; ZeRO 1/2/3 shard over dp instead, one copy).
    const std::int64_t replica = model_.replica_group().rank();
    norm_spans_.clear();
    for (Unit& u : model_.units()) {
      if (!u.counts_in_norm || replica != 0) continue;
      const GradView view = grad_view(u, mode_);
      const bool tp_copy = groups_.coordinate(Axis::tp) == 0;  // the copy of tp-whole elements the norm counts
      const auto count = [&](std::int64_t begin, std::int64_t end) {
        const std::int64_t lo = std::max(begin, u.optimizer_begin), hi = std::min(end, u.optimizer_end);
        if (hi > lo) norm_spans_.emplace_back(view.at(lo), static_cast<std::size_t>(hi - lo));
      };
      for (const LocalTensor& t : u.layout.tensors) {
        if (t.split == TpSplit::none && !tp_copy) continue;
        std::int64_t from = t.offset;  // what is left of the tensor after its whole parts (counted on tp rank 0)
        for (const auto& [begin, end] : t.whole_part_ranges()) {
          if (tp_copy) continue;
          count(from, begin);
          from = end;
        }
        count(from, t.offset + t.elements());
      }
    }
    return model_.ops().l2_norm(norm_spans_);
  }

  // Clipping and AdamW on the range this rank updates; ZeRO 1/2 all-gather the updated shards over dp.
  // The AdamW of every unit in one adamw_update_all (one launch on a GPU, not one per tensor).
  void update(float clip_scale, std::int64_t updates, const kernels::AdamWHyperparameters& hp) {
    adamw_spans_.clear();
    for (Unit& u : model_.units()) {
      const GradView view = grad_view(u, mode_);
      if (clip_scale != 1.0f && u.optimizer_end > u.optimizer_begin)
        model_.ops().scale(view.at(u.optimizer_begin), clip_scale, u.optimizer_end - u.optimizer_begin);
      float* values = mode_ == ShardMode::fsdp ? u.shard_values.data() : u.values.data();
      const std::int64_t values_base = mode_ == ShardMode::fsdp ? u.shard_begin : 0;
      for (const LocalTensor& t : u.layout.tensors) {
        const std::int64_t lo = std::max(t.offset, u.optimizer_begin), hi = std::min(t.offset + t.elements(), u.optimizer_end);
        if (hi <= lo) continue;
        const auto moment = static_cast<std::size_t>(lo - u.optimizer_begin);
        adamw_spans_.push_back({values + (lo - values_base), view.at(lo), u.adam_m.data() + moment,
                                u.adam_v.data() + moment, hi - lo, t.decays()});
      }
    }
    model_.ops().adamw_update_all(adamw_spans_, updates, hp);
    if ((mode_ == ShardMode::zero1 || mode_ == ShardMode::zero2) && model_.shard_group().size() > 1)
      for (Unit& u : model_.units())
        model_.shard_group().all_gather(u.values.data() + u.shard_begin, u.values.data(), u.shard_size, DataType::f32);
  }

  // Whether this rank computes the loss it reports: the last stage's tp rank 0.
  bool holds_loss() const { return stage_ == stages_ - 1 && groups_.coordinate(Axis::tp) == 0; }
  std::int64_t tokens_per_step() const { return B_ * M_ * D_ * T_; }
  std::int64_t micro_batches_per_step() const { return M_ * D_; }

 private:
  // wte's gradient summed between the first and last stage, which both hold it.
  void sum_tied_embedding() {
    const GradView view = grad_view(*model_.wte(), mode_);
    const std::int64_t n = view.end - view.begin;
    Floats mine = floats(MemoryCategory::communication, model_.backend());
    Floats theirs = floats(MemoryCategory::communication, model_.backend());
    mine.assign_device(view.data, static_cast<std::size_t>(n));
    theirs.assign_zero(static_cast<std::size_t>(n));
    const int peer = static_cast<int>(stage_ == 0 ? stages_ - 1 : 0);
    auto request = pp_.isend(mine.data(), n, DataType::f32, peer, tied_embedding_tag);
    pp_.recv(theirs.data(), n, DataType::f32, peer, tied_embedding_tag);
    request->wait();
    model_.ops().add(view.data, theirs.data(), n);  // mine + theirs: view.data still holds mine
  }

  ParallelGpt& model_;
  comm::MeshCommunicators& groups_;
  comm::Communicator& pp_;
  comm::Communicator& tp_;
  const std::int64_t M_, B_, T_, D_, stages_, stage_;
  const std::vector<Instruction> program_;
  const std::vector<bool> final_pass_;
  const ShardMode mode_;
  const bool bucketed_;
  GradientBuckets buckets_;
  const float dloss_;
  std::vector<std::int32_t> tokens_, targets_;
  std::vector<std::span<const float>> norm_spans_;
  std::vector<GptOps::AdamWSpan> adamw_spans_;
};

}  // namespace

TrainResult train_parallel(ParallelGpt& model, const Plan& plan, data::DataLoader& loader, const TrainOptions& options) {
  TrainResult result;
  result.problems = check_options(model, loader, options);
  if (!result.ok()) return result;
  ParallelStep work(model, plan, options);
  comm::Communicator& world = model.groups().world();
  const LrSchedule schedule{options.adamw.learning_rate, options.warmup_steps, options.steps, options.min_lr_fraction};
  std::int64_t updates = options.completed_updates;
  for (std::int64_t step = std::max<std::int64_t>(options.first_step, 0); step < options.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    world.set_step(step);
    work.take_batch(loader);
    const double loss_sum = work.run_program();
    work.synchronise_gradients();
    // The norm and the loss in one world all-reduce (in double); the loss is
    // averaged over the data-parallel replicas' last-stage tp rank 0.
    const double local_norm = work.local_norm();
    double sums[2] = {local_norm * local_norm,
                      work.holds_loss() ? loss_sum / static_cast<double>(work.micro_batches_per_step()) : 0.0};
    all_reduce_host_sums(model, world, sums, 2);
    const auto update = [&](double clip, std::int64_t n, const kernels::AdamWHyperparameters& hp) {
      work.update(static_cast<float>(clip), n, hp);
    };
    if (!finish_step(step, sums[1], std::sqrt(sums[0]), learning_rate_at(schedule, step),
                     static_cast<double>(work.tokens_per_step()), start, options.steps, options, updates, result, update))
      break;
  }
  return result;
}

EvalResult evaluate_parallel(ParallelGpt& model, data::DataLoader& loader, std::int64_t max_samples) {
  comm::MeshCommunicators& groups = model.groups();
  const Mesh& mesh = groups.mesh();
  const std::int64_t B = model.micro_batch(), T = model.seq_len(), D = mesh.data_parallel_size();
  const std::int64_t stages = mesh.size(Axis::pp), stage = groups.coordinate(Axis::pp);
  const std::int64_t chunks = model.chunk_count();
  const std::int64_t d_index = groups.coordinate(Axis::dp) * mesh.size(Axis::fsdp) + groups.coordinate(Axis::fsdp);
  std::int64_t samples = loader.samples_per_epoch();
  if (max_samples > 0) samples = std::min(samples, max_samples);
  comm::Communicator& pp = groups.group(Axis::pp);
  const std::int64_t rows = model.rows_local() * model.channels();
  // [loss x samples (tp rank 0 of the last stage), correct tokens (every tp rank of the last stage)]
  double sums[2] = {0, 0};
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(B * T)), targets(tokens.size());
  for (std::int64_t taken = 0; taken < samples; taken += B * D) {
    // Every rank draws the round's samples; a last round short of B x D is padded (target -1).
    const std::int64_t round = std::min(B * D, samples - taken);
    const data::Batch batch = loader.next_batch(round);
    const std::int64_t mine = std::clamp<std::int64_t>(round - d_index * B, 0, B);
    std::fill(tokens.begin(), tokens.end(), 0);
    std::fill(targets.begin(), targets.end(), -1);
    const auto first = static_cast<std::size_t>(d_index * B * T);
    for (std::size_t i = 0; i < static_cast<std::size_t>(mine * T); ++i) {
      tokens[i] = static_cast<std::int32_t>(batch.inputs[first + i]);
      targets[i] = batch.targets[first + i];
    }
    for (std::int64_t c = 0; c < chunks; ++c) {
      if (c % stages != stage) continue;
      const auto previous = static_cast<int>((c - 1) % stages), next = static_cast<int>((c + 1) % stages);
      if (c > 0 && previous != stage)
        pp.recv(model.forward_input(c, 0), rows, DataType::f32, previous, transfer_tag(c - 1, 0, chunks, false));
      const double loss = model.forward(c, 0, tokens.data(), targets.data());
      if (c + 1 < chunks && next == stage) {
        const float* out = model.forward_output(c, 0);
        model.ops().copy(model.forward_input(c + 1, 0), out, rows);
      } else if (c + 1 < chunks) {
        // Blocking: chunks run in one order on every rank, and the next chunk's stage receives this next.
        pp.send(model.forward_output(c, 0), rows, DataType::f32, next, transfer_tag(c, 0, chunks, false));
      } else {
        if (groups.coordinate(Axis::tp) == 0) sums[0] += loss * static_cast<double>(mine);
        sums[1] += static_cast<double>(model.correct_predictions());
      }
      model.release_pass(c, 0);
    }
  }
  all_reduce_host_sums(model, groups.world(), sums, 2);
  EvalResult result;
  result.samples = samples;
  if (samples <= 0) return result;
  result.loss = sums[0] / static_cast<double>(samples);
  result.accuracy = sums[1] / static_cast<double>(samples * T);
  return result;
}

}  // namespace meshplan::exec::parallel
