// The passes of parallel_gpt.hpp. Each op is the reference GPT's, on this rank's
// slice: matrices of [rows, C] are the residual stream (rows_local_ rows:
// all B x T of the micro-batch, or this rank's 1/tp of them under sequence
// parallelism), matrices of [B x T, *] are inside a tensor-parallel region.
// Collectives on the tp group of one (tp = 1) are no-ops, so the code has no
// tp = 1 special case and then computes exactly what the reference computes.
// Every op on a buffer is a call of ops_ (gpt_ops.hpp); this file holds no
// arithmetic on tensors, only which op runs on which buffer, and the collectives.
#include "executor/parallel/parallel_gpt.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "executor/comm/staged_communicator.hpp"
#include "executor/model/parameters.hpp"
#include "executor/train/trainable.hpp"
#include "model/layer_graph.hpp"
#include "model/schedule.hpp"
#include "model/stage_partition.hpp"

namespace meshplan::exec::parallel {

using comm::DataType;
using comm::ReduceOp;

struct ParallelGpt::LayerActs {
  explicit LayerActs(Backend& b)
      : ln1(act, b), ln1_mean(act, b), ln1_rstd(act, b), qkv(act, b), atty(act, b), att(act, b),
        res2(act, b), ln2(act, b), ln2_mean(act, b), ln2_rstd(act, b), fch(act, b),
        fch_gelu(act, b), res3(act, b), d_fcproj(MemoryCategory::workspace, b), d_fch(MemoryCategory::workspace, b),
        d_attproj(MemoryCategory::workspace, b), d_qkv(MemoryCategory::workspace, b) {}
  static constexpr MemoryCategory act = MemoryCategory::activations;
  // Under sequence parallelism the norm outputs are kept as this rank's
  // shard of the sequence and gathered again where a weight gradient reads
  // them (Korthikanti et al. 2022, Sec. 4.2.2; what the cost model prices).
  Floats ln1, ln1_mean, ln1_rstd;
  Floats qkv, atty, att, res2;  // att: the attention op's state (GptOps::attention_state_elements)
  Floats ln2, ln2_mean, ln2_rstd;
  Floats fch, fch_gelu, res3;
  // Kept from an input-gradient pass for the weight pass (workspace, as the gradients they are copied from).
  Floats d_fcproj, d_fch, d_attproj, d_qkv;
};

struct ParallelGpt::Slot {
  explicit Slot(Backend& b)
      : input(act, b), lnf(act, b), lnf_mean(act, b), lnf_rstd(act, b), probs(act, b),
        device_tokens(act, b), device_targets(act, b) {}
  static constexpr MemoryCategory act = MemoryCategory::activations;
  std::int64_t micro_batch = -1;  // -1: free
  Floats input;  // [rows_local, C]: the chunk's input (chunk 0: the embedding output)
  std::vector<LayerActs> layers;
  // Last chunk. `probs`: the softmax probabilities from the forward; the
  // backward overwrites them with the logits' gradient, which an
  // input-gradient pass leaves there for the weight pass.
  Floats lnf, lnf_mean, lnf_rstd, probs;  // lnf: this rank's sequence shard under sequence parallelism
  std::vector<std::int32_t> tokens, targets;        // host
  // Their copies in device memory, on a backend that is not host memory (on the CPU the ops read `tokens`).
  DeviceVector<std::int32_t> device_tokens, device_targets;
};

namespace {

// A layer unit's tensors by kind; Unit::offsets holds each one's offset, -1
// when the model has none (norm biases under RMSNorm, linear biases).
enum LayerTensor { ln1w, ln1b, qkvw, qkvb, attw, attb, ln2w, ln2b, fcw, fcb, fcow, fcob, layer_tensor_count };
constexpr const char* kLayerTensorSuffix[layer_tensor_count] = {
    ".ln1.w", ".ln1.b", ".qkv.w", ".qkv.b", ".attn_out.w", ".attn_out.b",
    ".ln2.w", ".ln2.b", ".fc.w",  ".fc.b",  ".fc_out.w",   ".fc_out.b"};

std::vector<std::int64_t> layer_offsets(const UnitLayout& layout) {
  std::vector<std::int64_t> offsets(layer_tensor_count, -1);
  for (const LocalTensor& t : layout.tensors)
    for (int k = 0; k < layer_tensor_count; ++k)
      if (t.name.ends_with(kLayerTensorSuffix[k])) offsets[static_cast<std::size_t>(k)] = t.offset;
  return offsets;
}

std::int64_t off(const Unit& unit, int tensor) { return unit.offsets[static_cast<std::size_t>(tensor)]; }
// The tensor in `base` (values or gradients of the unit), or null when the model has none.
template <typename P>
P* at(P* base, const Unit& unit, int tensor) {
  const std::int64_t o = off(unit, tensor);
  return o < 0 ? nullptr : base + o;
}

void fit(Floats& buffer, std::int64_t n) { buffer.resize(static_cast<std::size_t>(n)); }

// ln_f's bias in its unit's buffer (after the weight), or null under RMSNorm.
float* final_norm_bias(const TpShape& s, Floats& unit) { return s.rms() ? nullptr : unit.data() + s.channels; }

// Softmax cross-entropy over a vocabulary split by rows of wte across tp
// (Megatron-LM's vocab_parallel_cross_entropy): the row maximum and the sum
// of exponentials are reduced over tp, and the target's logit comes from the
// rank whose shard holds it. Only the first `vocab_real` columns are real;
// padding columns are masked out of the maximum and the sum and get
// probability 0. Overwrites logits[N, Vp] with this shard's probabilities.
// The arithmetic is the ops' (GptOps::loss_*; on the CPU
// kernels::cross_entropy_forward's, so with tp = 1 the two agree bit for
// bit). Rows whose target is negative (padding of a last evaluation batch)
// are left out of the loss and the count. `device_targets` are in the
// backend's memory (ParallelGpt::targets_of).
struct VocabLoss {
  double mean = 0;           // over the rows with a target
  std::int64_t correct = 0;  // rows whose target is in this shard and has the row's largest logit
};

VocabLoss vocab_parallel_cross_entropy(GptOps& ops, float* logits, const std::int32_t* device_targets, std::int64_t N,
                                       std::int64_t Vp, std::int64_t vocab_real, std::int64_t vocab_begin,
                                       comm::Communicator& tp, LossScratch& scratch) {
  const auto n_rows = static_cast<std::size_t>(N);
  scratch.row_max.resize(n_rows);
  ops.loss_row_max(scratch.row_max.data(), logits, N, Vp, vocab_real);
  tp.all_reduce(scratch.row_max.data(), N, DataType::f32, ReduceOp::max);
  scratch.sums.resize(2 * n_rows);  // [sum of exp | target logit], reduced over tp in one call
  scratch.correct.resize(n_rows);   // 1 or 0 by row
  ops.loss_exponentials(logits, scratch.sums.data(), scratch.correct.data(), scratch.row_max.data(), device_targets,
                        vocab_begin, N, Vp, vocab_real);
  tp.all_reduce(scratch.sums.data(), 2 * N, DataType::f32, ReduceOp::sum);
  scratch.row_loss.resize(n_rows);
  ops.loss_normalize(logits, scratch.row_loss.data(), scratch.sums.data(), scratch.row_max.data(), N, Vp, vocab_real);
  const LossSummary summary = ops.loss_summary(scratch.row_loss.data(), scratch.correct.data(), device_targets, N);
  VocabLoss result;
  result.correct = summary.correct;
  result.mean = summary.counted > 0 ? summary.loss_sum / static_cast<double>(summary.counted) : 0.0;
  return result;
}

Problem error(const std::string& field, const std::string& message) { return {Severity::error, field, message}; }

}  // namespace

// What this runtime cannot run of the plan, naming its fields.
Problems plan_problems(const ModelSpec& spec, const Plan& plan, std::int64_t seq_len) {
  Problems problems = check_supported(spec);
  const Mesh& mesh = plan.mesh;
  const TransformerDims& t = spec.transformer;
  const std::int64_t tp = mesh.size(Axis::tp), pp = mesh.size(Axis::pp);
  for (const Axis axis : {Axis::cp, Axis::ep})
    if (mesh.size(axis) > 1)
      problems.push_back(error("mesh." + to_string(axis), to_string(axis) + " > 1 is not run by the executor yet"));
  if (t.heads % tp != 0)
    problems.push_back(error("mesh.tp", "tp " + std::to_string(tp) + " must divide the heads (" +
                                            std::to_string(t.heads) + ") to split them"));
  if (t.ffn % tp != 0)
    problems.push_back(error("mesh.tp", "tp " + std::to_string(tp) + " must divide ffn (" + std::to_string(t.ffn) +
                                            ") for the column-parallel fc"));
  const std::int64_t micro_batches = plan.micro_batches();
  if (micro_batches <= 0)
    problems.push_back(error("global_batch", std::to_string(plan.global_batch) + " is not a multiple of micro_batch x dp x fsdp (" +
                                                 std::to_string(plan.micro_batch * mesh.data_parallel_size()) + ")"));
  if (seq_len <= 0 || seq_len > t.seq_len)
    problems.push_back(error("seq_len", "must be between 1 and the model's seq_len " + std::to_string(t.seq_len)));
  if (plan.sequence_parallel && (plan.micro_batch * seq_len) % tp != 0)
    problems.push_back(error("sequence_parallel", "micro_batch x seq_len (" + std::to_string(plan.micro_batch * seq_len) +
                                                      " rows) must be a multiple of tp " + std::to_string(tp)));
  const Problems sharding = data_sharding_problems(plan);
  problems.insert(problems.end(), sharding.begin(), sharding.end());
  const Problems schedule = schedule_problems(plan.schedule, pp, std::max<std::int64_t>(micro_batches, 1));
  problems.insert(problems.end(), schedule.begin(), schedule.end());
  return problems;
}

ParallelGpt::ParallelGpt(comm::MeshCommunicators& groups, Backend& backend, std::unique_ptr<GptOps> ops)
    : groups_(groups),
      backend_(&backend),
      ops_(std::move(ops)),
      loss_scratch_(backend),
      full_a_(MemoryCategory::workspace, backend),
      full_b_(MemoryCategory::workspace, backend),
      dqkv_(MemoryCategory::workspace, backend),
      datty_(MemoryCategory::workspace, backend),
      dfch_(MemoryCategory::workspace, backend),
      dgelu_(MemoryCategory::workspace, backend),
      dlocal_(MemoryCategory::workspace, backend),
      dstream_(MemoryCategory::workspace, backend),
      dstream_recv_(MemoryCategory::communication, backend),
      reduced_shard_(MemoryCategory::communication, backend) {}
ParallelGpt::~ParallelGpt() = default;

Loaded<std::unique_ptr<ParallelGpt>> ParallelGpt::create(const ModelSpec& spec, const Plan& plan,
                                                          comm::MeshCommunicators& groups, std::uint64_t seed,
                                                          std::int64_t seq_len, Backend& backend,
                                                          std::unique_ptr<GptOps> ops) {
  Loaded<std::unique_ptr<ParallelGpt>> result;
  Problems& problems = result.problems;
  if (spec.kind != ModelKind::transformer) {
    problems.push_back(error("model.kind", "ParallelGpt trains transformers; an MLP trains on one rank or under "
                                           "DataParallelTrainer (executor/train/data_parallel.hpp)"));
    return result;
  }
  problems = trainable(spec, plan, seq_len);
  if (has_errors(problems)) return result;
  const std::int64_t tp = plan.mesh.size(Axis::tp), pp = plan.mesh.size(Axis::pp);
  const LayerGraph graph = build_layer_graph(spec, seq_len);
  Loaded<StagePartition> partition =
      partition_stages(graph, pp, plan.schedule.virtual_stages, plan.stage_layers);
  problems.insert(problems.end(), partition.problems.begin(), partition.problems.end());
  Loaded<Parameters<float>> full = make_parameters<float>(spec, seed);
  problems.insert(problems.end(), full.problems.begin(), full.problems.end());
  if (has_errors(problems)) return result;

  if (ops == nullptr) {
    if (!backend.host_accessible()) {
      problems.push_back(error("--backend", "a model on " + std::string(backend.name()) +
                                                " needs that device's ops (the CPU's run on host memory only)"));
      return result;
    }
    ops = make_cpu_gpt_ops(backend);
  }
  std::unique_ptr<ParallelGpt> model(new ParallelGpt(groups, backend, std::move(ops)));
  ParallelGpt& m = *model;
  m.spec_ = spec;
  // The group of one copies in its gathers: on device memory, through the backend.
  m.self_ = backend.host_accessible()
                ? comm::make_self_communicator("self")
                : std::make_unique<comm::StagedCommunicator>(comm::make_self_communicator("self"), backend);
  m.tp_ = &groups.group(Axis::tp);
  m.shape_ = tp_shape(spec.transformer, tp, groups.coordinate(Axis::tp));
  const Problems unsupported = m.ops_->model_problems(m.shape_);
  problems.insert(problems.end(), unsupported.begin(), unsupported.end());
  if (has_errors(problems)) return result;
  const DataSharding data = data_sharding(plan);
  if (data.parameters) {
    m.mode_ = ShardMode::fsdp;
    m.shard_group_ = &groups.group(data.axis);
    m.replica_group_ = data.axis == Axis::fsdp ? &groups.group(Axis::dp) : m.self_.get();
  } else {
    m.mode_ = data.gradients ? ShardMode::zero2 : data.optimizer ? ShardMode::zero1 : ShardMode::replicated;
    m.shard_group_ = m.mode_ == ShardMode::replicated ? m.self_.get() : &groups.group(data.axis);
    m.replica_group_ = m.mode_ == ShardMode::replicated ? &groups.group(Axis::dp) : m.self_.get();
  }
  m.sequence_parallel_ = plan.sequence_parallel && tp > 1;
  m.batch_ = plan.micro_batch;
  m.seq_len_ = seq_len;
  m.rows_ = m.batch_ * seq_len;
  m.rows_local_ = m.sequence_parallel_ ? m.rows_ / tp : m.rows_;
  m.row_offset_ = m.sequence_parallel_ ? m.shape_.tp_rank * m.rows_local_ : 0;
  m.stages_ = pp;
  m.stage_ = groups.coordinate(Axis::pp);
  m.chunk_count_ = partition.value.chunk_count();

  // Units of this stage: wte, wpe with chunk 0; the layers of its chunks; the tied wte copy and ln_f with the last.
  const std::vector<int> layer_blocks = graph.layer_blocks();
  auto add_unit = [&](UnitLayout layout, bool counts_in_norm) {
    Unit unit(backend);
    unit.layout = std::move(layout);
    unit.counts_in_norm = counts_in_norm;
    m.units_.push_back(std::move(unit));
    return static_cast<int>(m.units_.size() - 1);
  };
  const bool first = m.stage_ == 0, last = m.stage_ == pp - 1;
  if (first) {
    m.wte_ = add_unit(wte_unit(m.shape_), true);
    if (m.shape_.learned_positions()) m.wpe_ = add_unit(wpe_unit(m.shape_), true);
  }
  for (std::int64_t c = m.stage_; c < m.chunk_count_; c += pp) {
    std::vector<int> units;
    for (const int block : partition.value.chunk_blocks[static_cast<std::size_t>(c)]) {
      const auto layer = std::find(layer_blocks.begin(), layer_blocks.end(), block) - layer_blocks.begin();
      const int index = add_unit(layer_unit(m.shape_, layer), true);
      m.units_[static_cast<std::size_t>(index)].offsets = layer_offsets(m.units_[static_cast<std::size_t>(index)].layout);
      units.push_back(index);
    }
    m.chunk_units_.push_back(std::move(units));
  }
  if (last) {
    if (m.shape_.tied() && !first) m.wte_ = add_unit(wte_unit(m.shape_), false);  // the tied copy, counted on stage 0
    m.lnf_ = add_unit(lnf_unit(m.shape_), true);
    m.head_ = m.shape_.tied() ? m.wte_ : add_unit(head_unit(m.shape_), true);
  }
  m.slots_.resize(m.chunk_units_.size());

  m.allocate(full.value);
  result.value = std::move(model);
  return result;
}

// Each unit's padded values (this rank's slices of `full`), shards, gradients
// and moments by shard mode, and the passes' scratch.
void ParallelGpt::allocate(const Parameters<float>& full) {
  const std::int64_t S = shard_group_->size(), shard_rank = shard_group_->rank();
  std::vector<float> host;  // a unit's padded values, cut on the host and copied to the backend
  for (Unit& u : units_) {
    u.padded = (u.layout.elements + S - 1) / S * S;
    u.shard_size = u.padded / S;
    u.shard_begin = shard_rank * u.shard_size;
    const bool whole = mode_ == ShardMode::replicated;
    u.optimizer_begin = whole ? 0 : u.shard_begin;
    u.optimizer_end = whole ? u.layout.elements : std::min(u.shard_begin + u.shard_size, u.layout.elements);
    u.optimizer_end = std::max(u.optimizer_end, u.optimizer_begin);
    u.adam_m.assign_zero(static_cast<std::size_t>(u.optimizer_end - u.optimizer_begin));
    u.adam_v.assign_zero(static_cast<std::size_t>(u.optimizer_end - u.optimizer_begin));
    host.assign(static_cast<std::size_t>(u.padded), 0.0f);
    for (const LocalTensor& tensor : u.layout.tensors)
      extract_shard(tensor, shape_, full.values.data() + full.layout.at(tensor.name).offset,
                    host.data() + tensor.offset);
    if (mode_ == ShardMode::fsdp) {
      u.shard_values.assign_host(host.data() + u.shard_begin, static_cast<std::size_t>(u.shard_size));
    } else {
      u.values.assign_host(host.data(), host.size());
      u.grads.assign_zero(static_cast<std::size_t>(u.padded));
    }
    if (mode_ != ShardMode::replicated) u.shard_grads.assign_zero(static_cast<std::size_t>(u.shard_size));
  }

  const std::int64_t C = shape_.channels, BT = rows_;
  fit(full_a_, BT * C);
  fit(full_b_, BT * C);
  fit(dqkv_, BT * shape_.qkv_local());
  fit(datty_, BT * shape_.q_local());
  fit(dfch_, BT * shape_.fc_local());
  fit(dgelu_, BT * shape_.ffn_local());
  fit(dlocal_, rows_local_ * C);
  fit(dstream_, rows_local_ * C);
  fit(dstream_recv_, rows_local_ * C);
}

// ---- fsdp: gather before use, free after; gradients reduce-scattered after each use.

// A prefetched unit's gather was started by prefetch_values; every rank of
// the shard group runs the same passes, so the gathers start in the same
// order on all of them (as MPI requires of non-blocking collectives).
void ParallelGpt::use_values(Unit& u) {
  if (mode_ != ShardMode::fsdp) return;
  if (prefetch_ != nullptr && &units_[static_cast<std::size_t>(prefetch_unit_)] == &u) {
    prefetch_->wait();
    prefetch_.reset();
    prefetch_unit_ = -1;
    return;
  }
  // Another unit's prefetch may stay in flight meanwhile (the head's and the
  // embedding's units while the first layer to run is gathered).
  fit(u.values, u.padded);
  shard_group_->all_gather(u.shard_values.data(), u.values.data(), u.shard_size, DataType::f32);
}

void ParallelGpt::prefetch_values(int index) {
  if (mode_ != ShardMode::fsdp || prefetch_ != nullptr) return;
  Unit& u = units_[static_cast<std::size_t>(index)];
  if (!u.values.empty()) return;
  fit(u.values, u.padded);
  prefetch_ = shard_group_->iall_gather(u.shard_values.data(), u.values.data(), u.shard_size, DataType::f32);
  prefetch_unit_ = index;
}

void ParallelGpt::done_values(Unit& u) {
  if (mode_ == ShardMode::fsdp) u.values.release();
}

void ParallelGpt::use_grads(Unit& u) {
  if (mode_ == ShardMode::fsdp) u.grads.assign_zero(static_cast<std::size_t>(u.padded));
}

void ParallelGpt::done_grads(Unit& u) {
  if (mode_ != ShardMode::fsdp) return;
  fit(reduced_shard_, u.shard_size);
  shard_group_->reduce_scatter(u.grads.data(), reduced_shard_.data(), u.shard_size, DataType::f32, ReduceOp::sum);
  ops_->add(u.shard_grads.data(), reduced_shard_.data(), u.shard_size);
  u.grads.release();
}

// ---- tensor-parallel region boundaries

const float* ParallelGpt::enter_region(const float* local, float* full) {
  if (!sequence_parallel_) return local;
  tp_->all_gather(local, full, rows_local_ * shape_.channels, DataType::f32);
  return full;
}

void ParallelGpt::leave_region(float* partial_full, float* out_local) {
  const std::int64_t C = shape_.channels;
  if (sequence_parallel_) {
    tp_->reduce_scatter(partial_full, out_local, rows_local_ * C, DataType::f32, ReduceOp::sum);
  } else {
    tp_->all_reduce(partial_full, rows_ * C, DataType::f32, ReduceOp::sum);
    if (out_local != partial_full) ops_->copy(out_local, partial_full, rows_ * C);
  }
}

// ---- slots

ParallelGpt::Slot& ParallelGpt::slot_of(std::int64_t chunk, std::int64_t mb) {
  for (Slot& s : slots_[static_cast<std::size_t>(chunk / stages_)])
    if (s.micro_batch == mb) return s;
  assert(false && "no activations for this (chunk, micro-batch): backward before forward");
  std::abort();
}

const ParallelGpt::Slot& ParallelGpt::slot_of(std::int64_t chunk, std::int64_t mb) const {
  return const_cast<ParallelGpt*>(this)->slot_of(chunk, mb);
}

float* ParallelGpt::forward_input(std::int64_t chunk, std::int64_t mb) {
  std::vector<Slot>& slots = slots_[static_cast<std::size_t>(chunk / stages_)];
  Slot* slot = nullptr;
  for (Slot& s : slots)
    if (s.micro_batch == mb) slot = &s;
  for (Slot& s : slots)
    if (slot == nullptr && s.micro_batch < 0) slot = &s;
  if (slot == nullptr) slot = &slots.emplace_back(*backend_);
  slot->micro_batch = mb;
  fit(slot->input, rows_local_ * shape_.channels);
  return slot->input.data();
}

const float* ParallelGpt::forward_output(std::int64_t chunk, std::int64_t mb) const {
  const Slot& s = slot_of(chunk, mb);
  return s.layers.empty() ? s.input.data() : s.layers.back().res3.data();
}

// ---- passes

double ParallelGpt::forward(std::int64_t chunk, std::int64_t mb, const std::int32_t* tokens,
                            const std::int32_t* targets) {
  forward_input(chunk, mb);
  Slot& s = slot_of(chunk, mb);
  s.tokens.assign(tokens, tokens + rows_);
  s.targets.assign(targets, targets + rows_);
  if (!backend_->host_accessible()) {
    s.device_tokens.assign_host(tokens, static_cast<std::size_t>(rows_));
    s.device_targets.assign_host(targets, static_cast<std::size_t>(rows_));
  }
  const std::vector<int>& units = chunk_units_[static_cast<std::size_t>(chunk / stages_)];
  if (!units.empty()) prefetch_values(units.front());  // overlaps the embedding, or the pass's set-up
  if (chunk == 0) embedding_forward(s);
  while (s.layers.size() < units.size()) s.layers.emplace_back(*backend_);
  const float* x = s.input.data();
  for (std::size_t i = 0; i < units.size(); ++i) {
    Unit& u = units_[static_cast<std::size_t>(units[i])];
    use_values(u);
    if (i + 1 < units.size()) prefetch_values(units[i + 1]);
    layer_forward(u, s.layers[i], x);
    done_values(u);
    x = s.layers[i].res3.data();
  }
  return chunk == chunk_count_ - 1 ? head_forward(s, x) : 0.0;
}

void ParallelGpt::release_pass(std::int64_t chunk, std::int64_t mb) { slot_of(chunk, mb).micro_batch = -1; }

const Floats& ParallelGpt::probabilities(std::int64_t chunk, std::int64_t mb) const { return slot_of(chunk, mb).probs; }

void ParallelGpt::backward(std::int64_t chunk, std::int64_t mb, float dloss, bool final_pass,
                           const std::function<void(Unit&)>& on_unit_final, BackwardPart part) {
  Slot& s = slot_of(chunk, mb);
  const std::vector<int>& units = chunk_units_[static_cast<std::size_t>(chunk / stages_)];
  const float* out = s.layers.empty() ? s.input.data() : s.layers.back().res3.data();
  const bool last = chunk == chunk_count_ - 1;
  if (!units.empty()) prefetch_values(units.back());  // overlaps the head's backward
  if (part == BackwardPart::weight) {
    if (last) head_weight_gradients(s);
    for (std::size_t i = units.size(); i-- > 0;) {
      Unit& u = units_[static_cast<std::size_t>(units[i])];
      use_values(u);
      if (i > 0) prefetch_values(units[i - 1]);
      use_grads(u);
      layer_weight_gradients(u, s.layers[i], i == 0 ? s.input.data() : s.layers[i - 1].res3.data());
      done_grads(u);
      done_values(u);
    }
  } else {
    if (last) head_backward(s, out, dloss, part);
    else ops_->copy(dstream_.data(), dstream_recv_.data(), std::ssize(dstream_));
    for (std::size_t i = units.size(); i-- > 0;) {
      Unit& u = units_[static_cast<std::size_t>(units[i])];
      use_values(u);
      if (i > 0) prefetch_values(units[i - 1]);
      use_grads(u);
      layer_backward(u, s.layers[i], i == 0 ? s.input.data() : s.layers[i - 1].res3.data(), part);
      done_grads(u);
      done_values(u);
    }
    if (chunk == 0) embedding_backward(s);
  }
  if (part == BackwardPart::input) return;  // the weight pass completes it
  if (final_pass) {
    if (last) {
      on_unit_final(units_[static_cast<std::size_t>(lnf_)]);
      // An untied lm_head is final here; a tied wte is when stage 0 is another stage (stage 0 uses its own later).
      if (!tied() || stages_ > 1) on_unit_final(units_[static_cast<std::size_t>(head_)]);
    }
    for (std::size_t i = units.size(); i-- > 0;) on_unit_final(units_[static_cast<std::size_t>(units[i])]);
    if (chunk == 0) {
      if (wpe_ >= 0) on_unit_final(units_[static_cast<std::size_t>(wpe_)]);
      on_unit_final(units_[static_cast<std::size_t>(wte_)]);
    }
  }
  s.micro_batch = -1;
}

void ParallelGpt::layer_forward(Unit& u, LayerActs& a, const float* x) {
  const TpShape& sh = shape_;
  const std::int64_t C = sh.channels, Q = sh.q_local(), QKV = sh.qkv_local(), Ft = sh.ffn_local(), FC = sh.fc_local();
  const std::int64_t R = rows_local_, BT = rows_;
  const float* p = u.values.data();
  fit(a.ln1, R * C), fit(a.ln1_mean, sh.rms() ? 0 : R), fit(a.ln1_rstd, R), fit(a.qkv, BT * QKV), fit(a.atty, BT * Q);
  fit(a.att, ops_->attention_state_elements(sh, batch_, seq_len_)), fit(a.res2, R * C), fit(a.ln2, R * C), fit(a.ln2_mean, sh.rms() ? 0 : R);
  fit(a.ln2_rstd, R), fit(a.fch, BT * FC), fit(a.fch_gelu, BT * Ft), fit(a.res3, R * C);

  ops_->norm_forward(sh, a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, p + off(u, ln1w), at(p, u, ln1b), R, C);
  const float* ln1 = enter_region(a.ln1.data(), full_a_.data());
  ops_->linear_forward(a.qkv.data(), ln1, p + off(u, qkvw), at(p, u, qkvb), BT, C, QKV);
  ops_->rotate_qk(sh, a.qkv.data(), BT, seq_len_, false);
  ops_->attention_forward(sh, a.atty.data(), a.att.data(), a.qkv.data(), batch_, seq_len_);
  ops_->linear_forward(full_a_.data(), a.atty.data(), p + off(u, attw), static_cast<const float*>(nullptr), BT, Q, C);
  leave_region(full_a_.data(), dlocal_.data());
  ops_->residual_bias(a.res2.data(), x, dlocal_.data(), at(p, u, attb), R, C);

  ops_->norm_forward(sh, a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(), p + off(u, ln2w), at(p, u, ln2b),
               R, C);
  const float* ln2 = enter_region(a.ln2.data(), full_a_.data());
  ops_->linear_forward(a.fch.data(), ln2, p + off(u, fcw), at(p, u, fcb), BT, C, FC);
  ops_->mlp_activation_forward(sh, a.fch_gelu.data(), a.fch.data(), BT, Ft);
  ops_->linear_forward(full_a_.data(), a.fch_gelu.data(), p + off(u, fcow), static_cast<const float*>(nullptr), BT, Ft, C);
  leave_region(full_a_.data(), dlocal_.data());
  ops_->residual_bias(a.res3.data(), a.res2.data(), dlocal_.data(), at(p, u, fcob), R, C);
}

void ParallelGpt::layer_backward(Unit& u, LayerActs& a, const float* x, BackwardPart part) {
  // dstream_ holds d(res3) on entry and d(x) on return. An input pass leaves
  // the linears' weight gradients to layer_weight_gradients and keeps their output gradients.
  const bool weights = part == BackwardPart::whole, keep = part == BackwardPart::input;
  const auto weight_grad = [&](int tensor) { return weights ? u.grads.data() + off(u, tensor) : nullptr; };
  const TpShape& sh = shape_;
  const std::int64_t C = sh.channels, Q = sh.q_local(), QKV = sh.qkv_local(), Ft = sh.ffn_local(), FC = sh.fc_local();
  const std::int64_t R = rows_local_, BT = rows_;
  const float* p = u.values.data();
  float* g = u.grads.data();

  if (float* dbias = at(g, u, fcob)) ops_->bias_backward(dbias, dstream_.data(), R, C);
  const float* dfcproj = enter_region(dstream_.data(), full_a_.data());
  dgelu_.zero();
  if (keep) a.d_fcproj.assign_device(dfcproj, static_cast<std::size_t>(BT * C));
  ops_->linear_backward(dgelu_.data(), weight_grad(fcow), static_cast<float*>(nullptr), dfcproj, a.fch_gelu.data(),
                   p + off(u, fcow), BT, Ft, C);
  dfch_.zero();
  ops_->mlp_activation_backward(sh, dfch_.data(), dgelu_.data(), a.fch.data(), BT, Ft);
  if (keep) a.d_fch.assign(dfch_);
  full_b_.zero();
  // The norm output only feeds the weight gradient: gathered again only for it (full_a_ is free again here).
  const float* ln2 = weights ? enter_region(a.ln2.data(), full_a_.data()) : a.ln2.data();
  ops_->linear_backward(full_b_.data(), weight_grad(fcw), at(g, u, fcb), dfch_.data(), ln2, p + off(u, fcw), BT, C, FC);
  leave_region(full_b_.data(), dlocal_.data());
  ops_->norm_backward(sh, dstream_.data(), g + off(u, ln2w), at(g, u, ln2b), dlocal_.data(), a.res2.data(), p + off(u, ln2w),
                a.ln2_mean.data(), a.ln2_rstd.data(), R, C);

  if (float* dbias = at(g, u, attb)) ops_->bias_backward(dbias, dstream_.data(), R, C);
  const float* dattproj = enter_region(dstream_.data(), full_a_.data());
  datty_.zero();
  if (keep) a.d_attproj.assign_device(dattproj, static_cast<std::size_t>(BT * C));
  ops_->linear_backward(datty_.data(), weight_grad(attw), static_cast<float*>(nullptr), dattproj, a.atty.data(),
                   p + off(u, attw), BT, Q, C);
  dqkv_.zero();
  ops_->attention_backward(sh, dqkv_.data(), datty_.data(), a.qkv.data(), a.atty.data(), a.att.data(), batch_, seq_len_);
  ops_->rotate_qk(sh, dqkv_.data(), BT, seq_len_, true);  // d(rotated q, k) -> d(q, k)
  if (keep) a.d_qkv.assign(dqkv_);
  full_b_.zero();
  const float* ln1 = weights ? enter_region(a.ln1.data(), full_a_.data()) : a.ln1.data();
  ops_->linear_backward(full_b_.data(), weight_grad(qkvw), at(g, u, qkvb), dqkv_.data(), ln1, p + off(u, qkvw), BT, C, QKV);
  leave_region(full_b_.data(), dlocal_.data());
  ops_->norm_backward(sh, dstream_.data(), g + off(u, ln1w), at(g, u, ln1b), dlocal_.data(), x, p + off(u, ln1w),
                a.ln1_mean.data(), a.ln1_rstd.data(), R, C);
}

void ParallelGpt::layer_weight_gradients(Unit& u, LayerActs& a, const float*) {
  const TpShape& sh = shape_;
  const std::int64_t C = sh.channels, Q = sh.q_local(), QKV = sh.qkv_local(), Ft = sh.ffn_local(), FC = sh.fc_local();
  const std::int64_t BT = rows_;
  const float* p = u.values.data();
  float* g = u.grads.data();
  float* none = nullptr;
  ops_->linear_backward(none, g + off(u, fcow), none, a.d_fcproj.data(), a.fch_gelu.data(), p + off(u, fcow), BT, Ft, C);
  ops_->linear_backward(none, g + off(u, fcw), none, a.d_fch.data(), enter_region(a.ln2.data(), full_a_.data()),
                        p + off(u, fcw), BT, C, FC);
  ops_->linear_backward(none, g + off(u, attw), none, a.d_attproj.data(), a.atty.data(), p + off(u, attw), BT, Q, C);
  ops_->linear_backward(none, g + off(u, qkvw), none, a.d_qkv.data(), enter_region(a.ln1.data(), full_a_.data()),
                        p + off(u, qkvw), BT, C, QKV);
}

// The micro-batch's tokens and targets where the ops read them: the host
// copies on a host-memory backend, the device copies otherwise.
const std::int32_t* ParallelGpt::tokens_of(const Slot& s) const {
  return backend_->host_accessible() ? s.tokens.data() : s.device_tokens.data();
}
const std::int32_t* ParallelGpt::targets_of(const Slot& s) const {
  return backend_->host_accessible() ? s.targets.data() : s.device_targets.data();
}

void ParallelGpt::embedding_forward(Slot& s) {
  Unit& wte = units_[static_cast<std::size_t>(wte_)];
  use_values(wte);
  const std::int64_t C = shape_.channels;
  ops_->embedding_forward(full_a_.data(), tokens_of(s), wte.values.data(), shape_.vocab_begin(), shape_.vocab_real(),
                          rows_, C);
  leave_region(full_a_.data(), s.input.data());  // each token's row comes from the one rank holding it
  done_values(wte);
  if (wpe_ < 0) return;  // rotary or no positions: nothing added to the stream
  Unit& wpe = units_[static_cast<std::size_t>(wpe_)];
  use_values(wpe);
  ops_->positions_forward(s.input.data(), wpe.values.data(), rows_local_, row_offset_, seq_len_, C);
  done_values(wpe);
}

void ParallelGpt::embedding_backward(Slot& s) {
  Unit& wte = units_[static_cast<std::size_t>(wte_)];
  const std::int64_t C = shape_.channels;
  if (wpe_ >= 0) {
    Unit& wpe = units_[static_cast<std::size_t>(wpe_)];
    use_grads(wpe);
    ops_->positions_backward(wpe.grads.data(), dstream_.data(), rows_local_, row_offset_, seq_len_, C);
    done_grads(wpe);
  }
  const float* d = enter_region(dstream_.data(), full_a_.data());
  use_grads(wte);
  ops_->embedding_backward(wte.grads.data(), d, tokens_of(s), shape_.vocab_begin(), shape_.vocab_real(), rows_, C);
  done_grads(wte);
}

double ParallelGpt::head_forward(Slot& s, const float* x) {
  Unit& head = units_[static_cast<std::size_t>(head_)];
  Unit& lnf = units_[static_cast<std::size_t>(lnf_)];
  const std::int64_t C = shape_.channels, R = rows_local_, Vp = shape_.vocab_local;
  use_values(lnf);
  use_values(head);
  fit(s.lnf, R * C), fit(s.lnf_mean, shape_.rms() ? 0 : R), fit(s.lnf_rstd, R), fit(s.probs, rows_ * Vp);
  ops_->norm_forward(shape_, s.lnf.data(), s.lnf_mean.data(), s.lnf_rstd.data(), x, lnf.values.data(), final_norm_bias(shape_, lnf.values), R,
               C);
  const float* h = enter_region(s.lnf.data(), full_a_.data());
  ops_->linear_forward(s.probs.data(), h, head.values.data(), static_cast<const float*>(nullptr), rows_, C, Vp);
  const VocabLoss loss = vocab_parallel_cross_entropy(*ops_, s.probs.data(), targets_of(s), rows_, Vp,
                                                      shape_.vocab_real(), shape_.vocab_begin(), *tp_, loss_scratch_);
  correct_ = loss.correct;
  done_values(head);
  done_values(lnf);
  return loss.mean;
}

void ParallelGpt::head_weight_gradients(Slot& s) {
  Unit& head = units_[static_cast<std::size_t>(head_)];
  use_values(head);
  use_grads(head);
  const float* h = enter_region(s.lnf.data(), full_a_.data());
  float* none = nullptr;
  ops_->linear_backward(none, head.grads.data(), none, s.probs.data(), h, head.values.data(), rows_, shape_.channels,
                   shape_.vocab_local);
  done_grads(head);
  done_values(head);
}

void ParallelGpt::head_backward(Slot& s, const float* x, float dloss, BackwardPart part) {
  Unit& head = units_[static_cast<std::size_t>(head_)];
  Unit& lnf = units_[static_cast<std::size_t>(lnf_)];
  const std::int64_t C = shape_.channels, R = rows_local_, Vp = shape_.vocab_local;
  use_values(lnf);
  use_values(head);
  use_grads(lnf);
  use_grads(head);
  const float scale = dloss / static_cast<float>(rows_);
  // In place: no second [rows, Vp] buffer (for GPT-2 at 8 x 1024 tokens, 1.6 GB in fp32).
  float* dlogits = s.probs.data();
  ops_->loss_backward(dlogits, dlogits, targets_of(s), shape_.vocab_begin(), shape_.vocab_real(), scale, rows_, Vp);
  const bool weights = part == BackwardPart::whole;
  const float* h = weights ? enter_region(s.lnf.data(), full_a_.data()) : s.lnf.data();
  full_b_.zero();
  ops_->linear_backward(full_b_.data(), weights ? head.grads.data() : nullptr,
                   static_cast<float*>(nullptr), dlogits, h, head.values.data(), rows_, C, Vp);
  leave_region(full_b_.data(), dlocal_.data());
  dstream_.zero();
  ops_->norm_backward(shape_, dstream_.data(), lnf.grads.data(), final_norm_bias(shape_, lnf.grads), dlocal_.data(), x, lnf.values.data(),
                s.lnf_mean.data(), s.lnf_rstd.data(), R, C);
  done_grads(head);
  done_grads(lnf);
  done_values(head);
  done_values(lnf);
}

// ---- full tensors

// Full tensors are cut and joined on the host (insert_shard, extract_shard);
// the collectives run on the backend's memory.
std::vector<float> ParallelGpt::gather_full(int which) {
  const ParameterLayout layout = parameter_layout(spec_).value;
  std::vector<float> full(static_cast<std::size_t>(layout.total_elements), 0.0f);
  const bool owner = groups_.coordinate(Axis::dp) == 0 && groups_.coordinate(Axis::fsdp) == 0;
  Floats buffer = floats(MemoryCategory::communication, *backend_);
  Floats shard = floats(MemoryCategory::communication, *backend_);
  for (Unit& u : units_) {
    buffer.assign_zero(static_cast<std::size_t>(u.padded));
    if (which == 0) {
      use_values(u);
      ops_->copy(buffer.data(), u.values.data(), u.padded);
      done_values(u);
    } else {
      const Floats& moment = which == 1 ? u.adam_m : u.adam_v;
      if (mode_ == ShardMode::replicated) {
        ops_->copy(buffer.data(), moment.data(), std::ssize(moment));
      } else {
        shard.assign_zero(static_cast<std::size_t>(u.shard_size));
        ops_->copy(shard.data(), moment.data(), std::ssize(moment));
        shard_group_->all_gather(shard.data(), buffer.data(), u.shard_size, DataType::f32);
      }
    }
    if (!owner || !u.counts_in_norm) continue;
    const std::vector<float> host = buffer.to_host();
    for (const LocalTensor& t : u.layout.tensors) {
      if (t.split == TpSplit::none && shape_.tp_rank != 0) continue;
      insert_shard(t, shape_, host.data() + t.offset, full.data() + layout.at(t.name).offset, shape_.tp_rank == 0);
    }
  }
  buffer.assign_host(full.data(), full.size());
  groups_.world().all_reduce(buffer.data(), std::ssize(buffer), DataType::f32, ReduceOp::sum);
  return buffer.to_host();
}

void ParallelGpt::scatter_full(int which, std::span<const float> full) {
  const ParameterLayout layout = parameter_layout(spec_).value;
  std::vector<float> host;
  const auto to_device = [&](Floats& destination, std::int64_t begin, std::int64_t end) {
    if (end > begin)
      backend_->copy_host_to_device(destination.data(), host.data() + begin,
                                    static_cast<std::size_t>(end - begin) * sizeof(float), backend_->default_context());
  };
  for (Unit& u : units_) {
    host.assign(static_cast<std::size_t>(u.padded), 0.0f);
    for (const LocalTensor& t : u.layout.tensors)
      extract_shard(t, shape_, full.data() + layout.at(t.name).offset, host.data() + t.offset);
    if (which == 0) {
      if (mode_ == ShardMode::fsdp) to_device(u.shard_values, u.shard_begin, u.shard_begin + u.shard_size);
      else to_device(u.values, 0, u.padded);
    } else {
      to_device(which == 1 ? u.adam_m : u.adam_v, u.optimizer_begin, u.optimizer_end);
    }
    backend_->default_context().synchronize();  // `host` is refilled next
  }
}

}  // namespace meshplan::exec::parallel
