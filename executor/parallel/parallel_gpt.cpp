// The passes of parallel_gpt.hpp. Each op is the reference GPT's, on this rank's
// slice: matrices of [rows, C] are the residual stream (rows_local_ rows:
// all B x T of the micro-batch, or this rank's 1/tp of them under sequence
// parallelism), matrices of [B x T, *] are inside a tensor-parallel region.
// Collectives on the tp group of one (tp = 1) are no-ops, so the code has no
// tp = 1 special case and then computes exactly what the reference computes.
#include "executor/parallel/parallel_gpt.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "executor/model/parameters.hpp"
#include "executor/train/trainable.hpp"
#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/fast_math.hpp"
#include "kernels/cpu/layernorm.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/rmsnorm.hpp"
#include "kernels/cpu/rope.hpp"
#include "kernels/cpu/swiglu.hpp"
#include "model/layer_graph.hpp"
#include "model/schedule.hpp"
#include "model/stage_partition.hpp"

namespace meshplan::exec::parallel {

using comm::DataType;
using comm::ReduceOp;

struct ParallelGpt::LayerActs {
  Floats ln1 = floats(MemoryCategory::activations), ln1_mean = floats(MemoryCategory::activations), ln1_rstd = floats(MemoryCategory::activations), ln1_full = floats(MemoryCategory::activations);
  Floats qkv = floats(MemoryCategory::activations), atty = floats(MemoryCategory::activations), att = floats(MemoryCategory::activations), res2 = floats(MemoryCategory::activations);
  Floats ln2 = floats(MemoryCategory::activations), ln2_mean = floats(MemoryCategory::activations), ln2_rstd = floats(MemoryCategory::activations), ln2_full = floats(MemoryCategory::activations);
  Floats fch = floats(MemoryCategory::activations), fch_gelu = floats(MemoryCategory::activations), res3 = floats(MemoryCategory::activations);
  // Kept from an input-gradient pass for the weight pass (workspace, as the gradients they are copied from).
  Floats d_fcproj, d_fch, d_attproj, d_qkv;
};

struct ParallelGpt::Slot {
  std::int64_t micro_batch = -1;  // -1: free
  Floats input = floats(MemoryCategory::activations);  // [rows_local, C]: the chunk's input (chunk 0: the embedding output)
  std::vector<LayerActs> layers;
  Floats lnf = floats(MemoryCategory::activations), lnf_mean = floats(MemoryCategory::activations), lnf_rstd = floats(MemoryCategory::activations), lnf_full = floats(MemoryCategory::activations), probs = floats(MemoryCategory::activations);  // last chunk
  std::vector<std::int32_t> tokens, targets;
  Floats d_logits;  // kept from an input-gradient pass for the weight pass (workspace)
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
void zero(Floats& buffer) { std::fill(buffer.begin(), buffer.end(), 0.0f); }

// out = x + (y + bias), row by row, the residual add of a row-parallel linear's
// output (bias null: out = x + y).
void add_residual_bias(float* out, const float* x, const float* y, const float* bias, std::int64_t rows,
                       std::int64_t C) {
  if (bias == nullptr) {
    for (std::int64_t i = 0; i < rows * C; ++i) out[i] = x[i] + y[i];
    return;
  }
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < C; ++c) out[r * C + c] = x[r * C + c] + (y[r * C + c] + bias[c]);
}

// The model's norm: layer norm (weight, bias; mean and rstd saved) or RMSNorm (weight; rstd saved).
void norm_forward(const TpShape& s, float* out, float* mean, float* rstd, const float* x, const float* weight,
                  const float* bias, std::int64_t rows, std::int64_t C) {
  if (s.rms()) kernels::rmsnorm_forward(out, rstd, x, weight, rows, C, s.dims.norm_eps);
  else kernels::layernorm_forward(out, mean, rstd, x, weight, bias, rows, C);
}

void norm_backward(const TpShape& s, float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                   const float* weight, const float* mean, const float* rstd, std::int64_t rows, std::int64_t C) {
  if (s.rms()) kernels::rmsnorm_backward(dx, dweight, dout, x, weight, rstd, rows, C);
  else kernels::layernorm_backward(dx, dweight, dbias, dout, x, weight, mean, rstd, rows, C);
}

// The MLP's activation on fc's output [rows, fc_local] -> [rows, ffn_local]:
// GELU, or a gated one (SwiGLU, GeGLU) over the gate and up halves.
void mlp_activation_forward(const TpShape& s, float* out, const float* in, std::int64_t rows, std::int64_t F) {
  switch (s.dims.feed_forward) {
    case FeedForward::gelu: kernels::gelu_forward(out, in, rows * F); return;
    case FeedForward::swiglu: kernels::swiglu_forward(out, in, rows, F); return;
    case FeedForward::geglu: kernels::geglu_forward(out, in, rows, F); return;
  }
}

void mlp_activation_backward(const TpShape& s, float* din, const float* dout, const float* in, std::int64_t rows,
                             std::int64_t F) {
  switch (s.dims.feed_forward) {
    case FeedForward::gelu: kernels::gelu_backward(din, in, dout, rows * F); return;
    case FeedForward::swiglu: kernels::swiglu_backward(din, dout, in, rows, F); return;
    case FeedForward::geglu: kernels::geglu_backward(din, dout, in, rows, F); return;
  }
}

// ln_f's bias in its unit's buffer (after the weight), or null under RMSNorm.
float* final_norm_bias(const TpShape& s, Floats& unit) { return s.rms() ? nullptr : unit.data() + s.channels; }

// Rotary positions on the query and key heads of a [rows, qkv_local] buffer
// (values in the forward; their gradients, rotated back, in the backward).
void rotate_qk(const TpShape& s, float* qkv, std::int64_t rows, std::int64_t seq_len, bool inverse) {
  if (!s.rotary()) return;
  const std::int64_t D = s.head_dim, stride = s.qkv_local();
  kernels::rope_apply(qkv, rows, seq_len, s.heads_local(), D, stride, s.dims.rope_theta, inverse);
  kernels::rope_apply(qkv + s.q_local(), rows, seq_len, s.kv_heads_local(), D, stride, s.dims.rope_theta, inverse);
}

void attention_forward(const TpShape& s, float* out, float* att, const float* qkv, std::int64_t B, std::int64_t T) {
  if (s.kv_heads == s.heads)
    kernels::attention_forward(out, att, qkv, B, T, s.q_local(), s.heads_local());
  else
    kernels::gqa_attention_forward(out, att, qkv, B, T, s.heads_local(), s.kv_heads_local(), s.head_dim,
                                   s.heads / s.kv_heads, s.kv_replicated() ? s.q_head_begin() : 0);
}

void attention_backward(const TpShape& s, float* dqkv, const float* dout, const float* qkv, const float* att,
                        std::int64_t B, std::int64_t T) {
  if (s.kv_heads == s.heads)
    kernels::attention_backward(dqkv, dout, qkv, att, B, T, s.q_local(), s.heads_local());
  else
    kernels::gqa_attention_backward(dqkv, dout, qkv, att, B, T, s.heads_local(), s.kv_heads_local(), s.head_dim,
                                    s.heads / s.kv_heads, s.kv_replicated() ? s.q_head_begin() : 0);
}

// Softmax cross-entropy over a vocabulary split by rows of wte across tp
// (Megatron-LM's vocab_parallel_cross_entropy): the row maximum and the sum
// of exponentials are reduced over tp, and the target's logit comes from the
// rank whose shard holds it. Only the first `vocab_real` columns are real;
// padding columns are masked out of the maximum and the sum and get
// probability 0. Overwrites logits[N, Vp] with this shard's probabilities.
// Each row is kernels::cross_entropy_forward's arithmetic (the same max,
// vectorised exp, sums and loss formula), rows in OpenMP threads, the mean
// summed in row order in double; with tp = 1 the two agree bit for bit.
// Rows whose target is negative (padding of a last evaluation batch) are
// left out of the loss and the count.
struct VocabLoss {
  double mean = 0;           // over the rows with a target
  std::int64_t correct = 0;  // rows whose target is in this shard and has the row's largest logit
};

VocabLoss vocab_parallel_cross_entropy(float* logits, const std::int32_t* targets, std::int64_t N, std::int64_t Vp,
                                       std::int64_t vocab_real, std::int64_t vocab_begin, comm::Communicator& tp,
                                       LossScratch& scratch) {
  const auto n_rows = static_cast<std::size_t>(N);
  const bool threads = N * Vp >= (1 << 17);
  Floats& row_max = scratch.row_max;
  row_max.assign(n_rows, -std::numeric_limits<float>::infinity());
#pragma omp parallel for schedule(static) if (threads)
  for (std::int64_t n = 0; n < N; ++n) {
    const float* z = logits + n * Vp;
    float m = row_max[static_cast<std::size_t>(n)];
    for (std::int64_t v = 0; v < vocab_real; ++v)
      if (z[v] > m) m = z[v];
    row_max[static_cast<std::size_t>(n)] = m;
  }
  tp.all_reduce(row_max.data(), N, DataType::f32, ReduceOp::max);
  // [sum of exp | target logit], reduced over tp in one call.
  Floats& sums = scratch.sums;
  sums.assign(2 * n_rows, 0.0f);
  Floats& correct = scratch.correct;  // 1 or 0 by row
  correct.assign(n_rows, 0.0f);
#pragma omp parallel for schedule(static) if (threads)
  for (std::int64_t n = 0; n < N; ++n) {
    float* z = logits + n * Vp;
    const float m = row_max[static_cast<std::size_t>(n)];
    const std::int64_t target = targets[n] - vocab_begin;
    if (target >= 0 && target < vocab_real) {
      sums[n_rows + static_cast<std::size_t>(n)] = z[target];
      correct[static_cast<std::size_t>(n)] = z[target] == m ? 1.0f : 0.0f;
    }
#pragma omp simd
    for (std::int64_t v = 0; v < vocab_real; ++v) z[v] = kernels::exp_of(z[v] - m);
    float sum = 0;
    for (std::int64_t v = 0; v < vocab_real; ++v) sum += z[v];
    for (std::int64_t v = vocab_real; v < Vp; ++v) z[v] = 0;  // padding: masked
    sums[static_cast<std::size_t>(n)] = sum;
  }
  tp.all_reduce(sums.data(), 2 * N, DataType::f32, ReduceOp::sum);
  Floats& row_loss = scratch.row_loss;
  row_loss.resize(n_rows);
#pragma omp parallel for schedule(static) if (threads)
  for (std::int64_t n = 0; n < N; ++n) {
    float* p = logits + n * Vp;
    const float sum = sums[static_cast<std::size_t>(n)];
    const float inv_sum = 1.0f / sum;
    for (std::int64_t v = 0; v < vocab_real; ++v) p[v] *= inv_sum;
    row_loss[static_cast<std::size_t>(n)] =
        std::log(sum) - (sums[n_rows + static_cast<std::size_t>(n)] - row_max[static_cast<std::size_t>(n)]);
  }
  VocabLoss result;
  double loss_sum = 0;
  std::int64_t counted = 0;
  for (std::size_t n = 0; n < n_rows; ++n) {
    if (targets[n] < 0) continue;
    loss_sum += static_cast<double>(row_loss[n]);
    result.correct += correct[n] > 0 ? 1 : 0;
    ++counted;
  }
  result.mean = counted > 0 ? loss_sum / static_cast<double>(counted) : 0.0;
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

ParallelGpt::ParallelGpt(comm::MeshCommunicators& groups) : groups_(groups) {}
ParallelGpt::~ParallelGpt() = default;

Loaded<std::unique_ptr<ParallelGpt>> ParallelGpt::create(const ModelSpec& spec, const Plan& plan,
                                                          comm::MeshCommunicators& groups, std::uint64_t seed,
                                                          std::int64_t seq_len) {
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

  std::unique_ptr<ParallelGpt> model(new ParallelGpt(groups));
  ParallelGpt& m = *model;
  m.spec_ = spec;
  m.self_ = comm::make_self_communicator("self");
  m.tp_ = &groups.group(Axis::tp);
  m.shape_ = tp_shape(spec.transformer, tp, groups.coordinate(Axis::tp));
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
    Unit unit;
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
  for (Unit& u : units_) {
    u.padded = (u.layout.elements + S - 1) / S * S;
    u.shard_size = u.padded / S;
    u.shard_begin = shard_rank * u.shard_size;
    const bool whole = mode_ == ShardMode::replicated;
    u.optimizer_begin = whole ? 0 : u.shard_begin;
    u.optimizer_end = whole ? u.layout.elements : std::min(u.shard_begin + u.shard_size, u.layout.elements);
    u.optimizer_end = std::max(u.optimizer_end, u.optimizer_begin);
    fit(u.adam_m, u.optimizer_end - u.optimizer_begin);
    fit(u.adam_v, u.optimizer_end - u.optimizer_begin);
    u.values.assign(static_cast<std::size_t>(u.padded), 0.0f);
    for (const LocalTensor& tensor : u.layout.tensors)
      extract_shard(tensor, shape_, full.values.data() + full.layout.at(tensor.name).offset,
                    u.values.data() + tensor.offset);
    if (mode_ == ShardMode::fsdp) {
      u.shard_values.assign(u.values.begin() + u.shard_begin, u.values.begin() + u.shard_begin + u.shard_size);
      release(u.values);
    } else {
      u.grads.assign(static_cast<std::size_t>(u.padded), 0.0f);
    }
    if (mode_ != ShardMode::replicated) u.shard_grads.assign(static_cast<std::size_t>(u.shard_size), 0.0f);
  }

  const std::int64_t C = shape_.channels, BT = rows_;
  fit(full_a_, BT * C);
  fit(full_b_, BT * C);
  fit(dqkv_, BT * shape_.qkv_local());
  fit(datty_, BT * shape_.q_local());
  fit(dfch_, BT * shape_.fc_local());
  fit(dgelu_, BT * shape_.ffn_local());
  fit(dlogits_, BT * shape_.vocab_local);
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
  if (mode_ == ShardMode::fsdp) release(u.values);
}

void ParallelGpt::use_grads(Unit& u) {
  if (mode_ == ShardMode::fsdp) u.grads.assign(static_cast<std::size_t>(u.padded), 0.0f);
}

void ParallelGpt::done_grads(Unit& u) {
  if (mode_ != ShardMode::fsdp) return;
  fit(reduced_shard_, u.shard_size);
  shard_group_->reduce_scatter(u.grads.data(), reduced_shard_.data(), u.shard_size, DataType::f32, ReduceOp::sum);
  for (std::size_t i = 0; i < static_cast<std::size_t>(u.shard_size); ++i) u.shard_grads[i] += reduced_shard_[i];
  release(u.grads);
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
    if (out_local != partial_full) std::copy(partial_full, partial_full + rows_ * C, out_local);
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
  if (slot == nullptr) slot = &slots.emplace_back();
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
  const std::vector<int>& units = chunk_units_[static_cast<std::size_t>(chunk / stages_)];
  if (!units.empty()) prefetch_values(units.front());  // overlaps the embedding, or the pass's set-up
  if (chunk == 0) embedding_forward(s);
  s.layers.resize(units.size());
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
    else std::copy(dstream_recv_.begin(), dstream_recv_.end(), dstream_.begin());
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
  const std::int64_t NHt = sh.heads_local(), R = rows_local_, BT = rows_;
  const float* p = u.values.data();
  fit(a.ln1, R * C), fit(a.ln1_mean, sh.rms() ? 0 : R), fit(a.ln1_rstd, R), fit(a.qkv, BT * QKV), fit(a.atty, BT * Q);
  fit(a.att, batch_ * NHt * seq_len_ * seq_len_), fit(a.res2, R * C), fit(a.ln2, R * C), fit(a.ln2_mean, sh.rms() ? 0 : R);
  fit(a.ln2_rstd, R), fit(a.fch, BT * FC), fit(a.fch_gelu, BT * Ft), fit(a.res3, R * C);
  if (sequence_parallel_) fit(a.ln1_full, BT * C), fit(a.ln2_full, BT * C);

  norm_forward(sh, a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, p + off(u, ln1w), at(p, u, ln1b), R, C);
  const float* ln1 = enter_region(a.ln1.data(), a.ln1_full.data());
  matmul_.forward(a.qkv.data(), ln1, p + off(u, qkvw), at(p, u, qkvb), BT, C, QKV);
  rotate_qk(sh, a.qkv.data(), BT, seq_len_, false);
  attention_forward(sh, a.atty.data(), a.att.data(), a.qkv.data(), batch_, seq_len_);
  matmul_.forward(full_a_.data(), a.atty.data(), p + off(u, attw), static_cast<const float*>(nullptr), BT, Q, C);
  leave_region(full_a_.data(), dlocal_.data());
  add_residual_bias(a.res2.data(), x, dlocal_.data(), at(p, u, attb), R, C);

  norm_forward(sh, a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(), p + off(u, ln2w), at(p, u, ln2b),
               R, C);
  const float* ln2 = enter_region(a.ln2.data(), a.ln2_full.data());
  matmul_.forward(a.fch.data(), ln2, p + off(u, fcw), at(p, u, fcb), BT, C, FC);
  mlp_activation_forward(sh, a.fch_gelu.data(), a.fch.data(), BT, Ft);
  matmul_.forward(full_a_.data(), a.fch_gelu.data(), p + off(u, fcow), static_cast<const float*>(nullptr), BT, Ft, C);
  leave_region(full_a_.data(), dlocal_.data());
  add_residual_bias(a.res3.data(), a.res2.data(), dlocal_.data(), at(p, u, fcob), R, C);
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
  const float* ln1 = sequence_parallel_ ? a.ln1_full.data() : a.ln1.data();
  const float* ln2 = sequence_parallel_ ? a.ln2_full.data() : a.ln2.data();

  if (float* dbias = at(g, u, fcob)) kernels::bias_backward(dbias, dstream_.data(), R, C);
  const float* dfcproj = enter_region(dstream_.data(), full_a_.data());
  zero(dgelu_);
  if (keep) a.d_fcproj.assign(dfcproj, dfcproj + BT * C);
  matmul_.backward(dgelu_.data(), weight_grad(fcow), static_cast<float*>(nullptr), dfcproj, a.fch_gelu.data(),
                   p + off(u, fcow), BT, Ft, C);
  zero(dfch_);
  mlp_activation_backward(sh, dfch_.data(), dgelu_.data(), a.fch.data(), BT, Ft);
  if (keep) a.d_fch = dfch_;
  zero(full_b_);
  matmul_.backward(full_b_.data(), weight_grad(fcw), at(g, u, fcb), dfch_.data(), ln2, p + off(u, fcw), BT, C, FC);
  leave_region(full_b_.data(), dlocal_.data());
  norm_backward(sh, dstream_.data(), g + off(u, ln2w), at(g, u, ln2b), dlocal_.data(), a.res2.data(), p + off(u, ln2w),
                a.ln2_mean.data(), a.ln2_rstd.data(), R, C);

  if (float* dbias = at(g, u, attb)) kernels::bias_backward(dbias, dstream_.data(), R, C);
  const float* dattproj = enter_region(dstream_.data(), full_a_.data());
  zero(datty_);
  if (keep) a.d_attproj.assign(dattproj, dattproj + BT * C);
  matmul_.backward(datty_.data(), weight_grad(attw), static_cast<float*>(nullptr), dattproj, a.atty.data(),
                   p + off(u, attw), BT, Q, C);
  zero(dqkv_);
  attention_backward(sh, dqkv_.data(), datty_.data(), a.qkv.data(), a.att.data(), batch_, seq_len_);
  rotate_qk(sh, dqkv_.data(), BT, seq_len_, true);  // d(rotated q, k) -> d(q, k)
  if (keep) a.d_qkv = dqkv_;
  zero(full_b_);
  matmul_.backward(full_b_.data(), weight_grad(qkvw), at(g, u, qkvb), dqkv_.data(), ln1, p + off(u, qkvw), BT, C, QKV);
  leave_region(full_b_.data(), dlocal_.data());
  norm_backward(sh, dstream_.data(), g + off(u, ln1w), at(g, u, ln1b), dlocal_.data(), x, p + off(u, ln1w),
                a.ln1_mean.data(), a.ln1_rstd.data(), R, C);
}

void ParallelGpt::layer_weight_gradients(Unit& u, LayerActs& a, const float*) {
  const TpShape& sh = shape_;
  const std::int64_t C = sh.channels, Q = sh.q_local(), QKV = sh.qkv_local(), Ft = sh.ffn_local(), FC = sh.fc_local();
  const std::int64_t BT = rows_;
  const float* p = u.values.data();
  float* g = u.grads.data();
  const float* ln1 = sequence_parallel_ ? a.ln1_full.data() : a.ln1.data();
  const float* ln2 = sequence_parallel_ ? a.ln2_full.data() : a.ln2.data();
  float* none = nullptr;
  matmul_.backward(none, g + off(u, fcow), none, a.d_fcproj.data(), a.fch_gelu.data(), p + off(u, fcow), BT, Ft, C);
  matmul_.backward(none, g + off(u, fcw), none, a.d_fch.data(), ln2, p + off(u, fcw), BT, C, FC);
  matmul_.backward(none, g + off(u, attw), none, a.d_attproj.data(), a.atty.data(), p + off(u, attw), BT, Q, C);
  matmul_.backward(none, g + off(u, qkvw), none, a.d_qkv.data(), ln1, p + off(u, qkvw), BT, C, QKV);
}

void ParallelGpt::embedding_forward(Slot& s) {
  Unit& wte = units_[static_cast<std::size_t>(wte_)];
  use_values(wte);
  const std::int64_t C = shape_.channels, begin = shape_.vocab_begin(), real = shape_.vocab_real();
  for (std::int64_t n = 0; n < rows_; ++n) {
    const std::int64_t row = s.tokens[static_cast<std::size_t>(n)] - begin;
    float* out = full_a_.data() + n * C;
    if (row >= 0 && row < real) std::copy(wte.values.data() + row * C, wte.values.data() + (row + 1) * C, out);
    else std::fill(out, out + C, 0.0f);
  }
  leave_region(full_a_.data(), s.input.data());  // each token's row comes from the one rank holding it
  done_values(wte);
  if (wpe_ < 0) return;  // rotary or no positions: nothing added to the stream
  Unit& wpe = units_[static_cast<std::size_t>(wpe_)];
  use_values(wpe);
  for (std::int64_t r = 0; r < rows_local_; ++r) {
    const std::int64_t position = (row_offset_ + r) % seq_len_;
    for (std::int64_t c = 0; c < C; ++c) s.input[static_cast<std::size_t>(r * C + c)] += wpe.values[static_cast<std::size_t>(position * C + c)];
  }
  done_values(wpe);
}

void ParallelGpt::embedding_backward(Slot& s) {
  Unit& wte = units_[static_cast<std::size_t>(wte_)];
  const std::int64_t C = shape_.channels, begin = shape_.vocab_begin(), real = shape_.vocab_real();
  if (wpe_ >= 0) {
    Unit& wpe = units_[static_cast<std::size_t>(wpe_)];
    use_grads(wpe);
    for (std::int64_t r = 0; r < rows_local_; ++r) {
      const std::int64_t position = (row_offset_ + r) % seq_len_;
      for (std::int64_t c = 0; c < C; ++c) wpe.grads[static_cast<std::size_t>(position * C + c)] += dstream_[static_cast<std::size_t>(r * C + c)];
    }
    done_grads(wpe);
  }
  const float* d = enter_region(dstream_.data(), full_a_.data());
  use_grads(wte);
  for (std::int64_t n = 0; n < rows_; ++n) {
    const std::int64_t row = s.tokens[static_cast<std::size_t>(n)] - begin;
    if (row < 0 || row >= real) continue;
    float* dw = wte.grads.data() + row * C;
    for (std::int64_t c = 0; c < C; ++c) dw[c] += d[n * C + c];
  }
  done_grads(wte);
}

double ParallelGpt::head_forward(Slot& s, const float* x) {
  Unit& head = units_[static_cast<std::size_t>(head_)];
  Unit& lnf = units_[static_cast<std::size_t>(lnf_)];
  const std::int64_t C = shape_.channels, R = rows_local_, Vp = shape_.vocab_local;
  use_values(lnf);
  use_values(head);
  fit(s.lnf, R * C), fit(s.lnf_mean, shape_.rms() ? 0 : R), fit(s.lnf_rstd, R), fit(s.probs, rows_ * Vp);
  if (sequence_parallel_) fit(s.lnf_full, rows_ * C);
  norm_forward(shape_, s.lnf.data(), s.lnf_mean.data(), s.lnf_rstd.data(), x, lnf.values.data(), final_norm_bias(shape_, lnf.values), R,
               C);
  const float* h = enter_region(s.lnf.data(), s.lnf_full.data());
  matmul_.forward(s.probs.data(), h, head.values.data(), static_cast<const float*>(nullptr), rows_, C, Vp);
  const VocabLoss loss = vocab_parallel_cross_entropy(s.probs.data(), s.targets.data(), rows_, Vp,
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
  const float* h = sequence_parallel_ ? s.lnf_full.data() : s.lnf.data();
  float* none = nullptr;
  matmul_.backward(none, head.grads.data(), none, s.d_logits.data(), h, head.values.data(), rows_, shape_.channels,
                   shape_.vocab_local);
  done_grads(head);
  done_values(head);
}

void ParallelGpt::head_backward(Slot& s, const float* x, float dloss, BackwardPart part) {
  Unit& head = units_[static_cast<std::size_t>(head_)];
  Unit& lnf = units_[static_cast<std::size_t>(lnf_)];
  const std::int64_t C = shape_.channels, R = rows_local_, Vp = shape_.vocab_local;
  const std::int64_t begin = shape_.vocab_begin(), real = shape_.vocab_real();
  use_values(lnf);
  use_values(head);
  use_grads(lnf);
  use_grads(head);
  const float scale = dloss / static_cast<float>(rows_);
#pragma omp parallel for schedule(static) if (rows_ * Vp >= (1 << 17))
  for (std::int64_t n = 0; n < rows_; ++n) {
    const float* p = s.probs.data() + n * Vp;
    float* dz = dlogits_.data() + n * Vp;
    for (std::int64_t v = 0; v < Vp; ++v) dz[v] = scale * p[v];
    const std::int64_t target = s.targets[static_cast<std::size_t>(n)] - begin;
    if (target >= 0 && target < real) dz[target] -= scale;
  }
  const float* h = sequence_parallel_ ? s.lnf_full.data() : s.lnf.data();
  if (part == BackwardPart::input) s.d_logits = dlogits_;
  zero(full_b_);
  matmul_.backward(full_b_.data(), part == BackwardPart::whole ? head.grads.data() : nullptr,
                   static_cast<float*>(nullptr), dlogits_.data(), h, head.values.data(), rows_, C, Vp);
  leave_region(full_b_.data(), dlocal_.data());
  zero(dstream_);
  norm_backward(shape_, dstream_.data(), lnf.grads.data(), final_norm_bias(shape_, lnf.grads), dlocal_.data(), x, lnf.values.data(),
                s.lnf_mean.data(), s.lnf_rstd.data(), R, C);
  done_grads(head);
  done_grads(lnf);
  done_values(head);
  done_values(lnf);
}

// ---- full tensors

std::vector<float> ParallelGpt::gather_full(int which) {
  const ParameterLayout layout = parameter_layout(spec_).value;
  Floats full(static_cast<std::size_t>(layout.total_elements), 0.0f, floats(MemoryCategory::communication).get_allocator());
  const bool owner = groups_.coordinate(Axis::dp) == 0 && groups_.coordinate(Axis::fsdp) == 0;
  for (Unit& u : units_) {
    Floats buffer(static_cast<std::size_t>(u.padded), 0.0f, floats(MemoryCategory::communication).get_allocator());
    if (which == 0) {
      use_values(u);
      std::copy(u.values.begin(), u.values.end(), buffer.begin());
      done_values(u);
    } else {
      const Floats& moment = which == 1 ? u.adam_m : u.adam_v;
      if (mode_ == ShardMode::replicated) {
        std::copy(moment.begin(), moment.end(), buffer.begin());
      } else {
        Floats shard(static_cast<std::size_t>(u.shard_size), 0.0f, floats(MemoryCategory::communication).get_allocator());
        std::copy(moment.begin(), moment.end(), shard.begin());
        shard_group_->all_gather(shard.data(), buffer.data(), u.shard_size, DataType::f32);
      }
    }
    if (!owner || !u.counts_in_norm) continue;
    for (const LocalTensor& t : u.layout.tensors) {
      if (t.split == TpSplit::none && shape_.tp_rank != 0) continue;
      insert_shard(t, shape_, buffer.data() + t.offset, full.data() + layout.at(t.name).offset, shape_.tp_rank == 0);
    }
  }
  groups_.world().all_reduce(full.data(), std::ssize(full), DataType::f32, ReduceOp::sum);
  return {full.begin(), full.end()};
}

void ParallelGpt::scatter_full(int which, std::span<const float> full) {
  const ParameterLayout layout = parameter_layout(spec_).value;
  for (Unit& u : units_) {
    Floats buffer(static_cast<std::size_t>(u.padded), 0.0f, floats(MemoryCategory::communication).get_allocator());
    for (const LocalTensor& t : u.layout.tensors)
      extract_shard(t, shape_, full.data() + layout.at(t.name).offset, buffer.data() + t.offset);
    if (which == 0) {
      if (mode_ == ShardMode::fsdp)
        std::copy(buffer.begin() + u.shard_begin, buffer.begin() + u.shard_begin + u.shard_size, u.shard_values.begin());
      else
        std::copy(buffer.begin(), buffer.end(), u.values.begin());
    } else {
      Floats& moment = which == 1 ? u.adam_m : u.adam_v;
      std::copy(buffer.begin() + u.optimizer_begin, buffer.begin() + u.optimizer_end, moment.begin());
    }
  }
}

}  // namespace meshplan::exec::parallel
