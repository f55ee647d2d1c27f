// The executor's GPT-2, as one rank of a dp x fsdp x tp x pp mesh holds and
// runs it. The math is the reference GPT's (tests/reference/reference_gpt.hpp,
// llm.c's train_gpt2.c), op for op, on the same kernels; what changes is which slice of each tensor this rank holds and
// the collectives between ops:
//
//   tp   Megatron-LM (Shoeybi et al. 2019, Sec. 3): qkv and fc column-parallel,
//        attn_out and fc_out row-parallel (their partial outputs summed over
//        tp), heads split over tp, vocabulary-parallel embedding and
//        cross-entropy (shard_layout.hpp). With sequence parallelism
//        (Korthikanti et al. 2022, Sec. 4.2.2) the residual stream, the norms
//        and the biases of the row-parallel linears work on this rank's
//        1/tp of the B x T rows: an all-gather enters each tp region and a
//        reduce-scatter leaves it, where plain tp has identity / all-reduce.
//   pp   this rank holds the chunks of its stage (stage_partition.hpp):
//        layer units, plus wte and wpe with chunk 0 and ln_f and the tied
//        output layer (a copy of wte) with the last chunk. forward/backward
//        run one (chunk, micro-batch) pass, as the schedule's instructions say;
//        zero-bubble schedules run the backward as two halves (BackwardPart).
//   fsdp parameters live as 1/fsdp shards of each unit; a unit's weights are
//        all-gathered before a pass uses them and freed right after, and its
//        gradient is reduce-scattered after every backward use. The gather of
//        the next layer unit (forward order in a forward pass, reverse in a
//        backward) is started with iall_gather before the current one
//        computes and waited for before use, so at most two layer units are
//        gathered at a time. ZeRO stage 3 on dp is run the same way over dp.
//   dp   replicated units (ZeRO 0/1/2); reductions and the optimizer are in
//        parallel_trainer.hpp.
//
// Initialisation: every rank builds the full single-rank parameters with
// make_parameters(spec, seed) and keeps its slices, so every plan starts
// from exactly the single-device weights (memory is the full model once,
// at start-up; fine at the sizes a CPU trains).
//
// Device: the model is built on one Backend (the CPU's default_backend()
// unless create is given another) and computes only through that backend's
// GptOps (gpt_ops.hpp): every buffer (unit values, gradients, shards, AdamW
// moments, activation slots, scratch, communication buffers) is a
// DeviceVector of the backend, so its ledger measures the rank by category,
// and no host code reads or writes one (tokens and targets are copied to it;
// full tensors for files and tests are copied back). Under fsdp a unit's
// gathered values and full gradient are freed after use.
//
// Activations of a (chunk, micro-batch) live in a slot from its forward to
// its backward (or to release_pass(), after a forward-only evaluation pass);
// slots are reused, so a stage holds as many as its schedule keeps in
// flight (peak_in_flight in schedule.hpp).
//
// A plan of one device is the case dp = fsdp = tp = pp = 1: every group is
// the group of one, every collective a no-op, and the passes compute what
// the reference GPT of tests/reference/ computes. `meshplan train` runs GPT
// plans of one rank this way too, so there is one GPT executor.
//
// Precision: the linear layers' GEMMs are fp32, or bf16 operands with fp32
// accumulation and fp32 master weights (GptOps::set_matmul_precision).
//
// defines: Floats, floats, ShardMode, Unit, LossScratch, plan_problems, ParallelGpt
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "executor/backend/device_vector.hpp"
#include "executor/backend/tracked_allocator.hpp"
#include "executor/comm/mesh_comms.hpp"
#include "executor/model/parameters.hpp"
#include "executor/parallel/gpt_ops.hpp"
#include "executor/parallel/shard_layout.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"
#include "model/precision.hpp"
#include "model/problem.hpp"

namespace meshplan::exec::parallel {

// How the data-parallel ranks hold a unit: replicated (ZeRO-0), optimizer
// state sharded (ZeRO-1), gradients too (ZeRO-2), or everything (FSDP / ZeRO-3).
enum class ShardMode : std::uint8_t { replicated, zero1, zero2, fsdp };

// A whole backward, or its two halves for zero-bubble schedules (Qi et al.
// 2023): `input` computes the input gradient (and the cheap bias and norm
// gradients) and keeps the output gradients of the four linears of each
// layer and of the output layer; `weight` computes those linears' weight
// gradients from them and frees the pass's activations.
enum class BackwardPart : std::uint8_t { whole, input, weight };

// A float buffer of the model's backend, recorded in its memory ledger under `category`.
using Floats = DeviceVector<float>;
inline Floats floats(MemoryCategory category, Backend& backend = default_backend()) {
  return Floats(category, backend);
}

// One unit's storage on this rank. Offsets are in the padded unit buffer
// (elements rounded up to a multiple of the sharding group's size).
struct Unit {
  explicit Unit(Backend& backend = default_backend())
      : values(MemoryCategory::parameters, backend), grads(MemoryCategory::gradients, backend),
        shard_values(MemoryCategory::parameters, backend), shard_grads(MemoryCategory::gradients, backend),
        adam_m(MemoryCategory::optimizer, backend), adam_v(MemoryCategory::optimizer, backend) {}
  UnitLayout layout;
  std::vector<std::int64_t> offsets;  // a layer unit's tensors by kind (parallel_gpt.cpp's LayerTensor), -1: absent
  std::int64_t padded = 0;
  std::int64_t shard_begin = 0;       // this rank's shard: optimizer state, fsdp values, zero2 gradients
  std::int64_t shard_size = 0;
  std::int64_t optimizer_begin = 0;   // the range this rank updates (whole unit when replicated)
  std::int64_t optimizer_end = 0;
  bool counts_in_norm = true;         // false for the last stage's copy of the tied wte
  Floats values;        // padded; under fsdp only while a pass uses it
  Floats grads;         // padded; under fsdp only during a backward use
  Floats shard_values;  // fsdp
  Floats shard_grads;   // ZeRO 1/2, fsdp: this rank's reduced shard
  Floats adam_m, adam_v;  // the optimizer range
};

// The vocabulary-parallel loss's per-row buffers, kept between passes so a
// step allocates nothing after the first.
struct LossScratch {
  explicit LossScratch(Backend& backend = default_backend())
      : row_max(MemoryCategory::workspace, backend), row_loss(MemoryCategory::workspace, backend),
        correct(MemoryCategory::workspace, backend), sums(MemoryCategory::communication, backend) {}
  Floats row_max, row_loss, correct;
  Floats sums;  // [sum of exp | target logit], reduced over tp
};

// What ParallelGpt cannot run of a GPT plan, naming the model and plan fields:
// the features check_supported refuses, mesh.cp and mesh.ep, mesh.tp against
// the heads and ffn, global_batch, seq_len, sequence_parallel, zero with fsdp,
// the schedule. Use exec::trainable (executor/train/trainable.hpp), which asks
// this for every transformer plan.
Problems plan_problems(const ModelSpec& spec, const Plan& plan, std::int64_t seq_len);

class ParallelGpt {
 public:
  ~ParallelGpt();
  ParallelGpt(const ParallelGpt&) = delete;
  ParallelGpt& operator=(const ParallelGpt&) = delete;

  // Problems name plan fields (mesh.tp, sequence_parallel, schedule, zero, ...)
  // for what this runtime cannot run. `groups` must outlive the model. The
  // model lives on `backend` (which must outlive it) and computes with `ops`,
  // which must be that backend's (null: make_cpu_gpt_ops(backend), for a
  // host-accessible backend); `groups` must take that backend's pointers.
  static Loaded<std::unique_ptr<ParallelGpt>> create(const ModelSpec& spec, const Plan& plan,
                                                      comm::MeshCommunicators& groups, std::uint64_t seed,
                                                      std::int64_t seq_len, Backend& backend = default_backend(),
                                                      std::unique_ptr<GptOps> ops = nullptr);

  // Where the activation entering `chunk` for micro-batch `mb` is received
  // ([rows_local, C], backend memory); takes the pass's activation slot.
  float* forward_input(std::int64_t chunk, std::int64_t mb);
  // Runs the chunk; tokens/targets are the micro-batch's [B, T] in host memory (all ranks have them).
  // Returns the micro-batch's mean loss on the last chunk, 0 otherwise. A
  // negative target marks a padding row (evaluation only: no backward may
  // follow), left out of the loss and of correct_predictions().
  double forward(std::int64_t chunk, std::int64_t mb, const std::int32_t* tokens, const std::int32_t* targets);
  // The activation leaving `chunk` ([rows_local, C]).
  const float* forward_output(std::int64_t chunk, std::int64_t mb) const;
  // The last chunk's softmax probabilities of pass (chunk, mb), [B x T, Vp]
  // with this rank's vocabulary shard (padding columns 0); valid from its
  // forward until its backward, which overwrites them with the logits'
  // gradient (tests and reference dumps read them).
  const Floats& probabilities(std::int64_t chunk, std::int64_t mb) const;
  // Frees the activations of a pass that will have no backward (evaluation).
  void release_pass(std::int64_t chunk, std::int64_t mb);
  // Of the last forward of the last chunk: the rows whose target is in this
  // rank's vocabulary shard and whose target logit is the row's maximum over
  // the whole vocabulary (the arg-max prediction; a tie counts as correct).
  // Summed over tp, the micro-batch's correct next-token predictions.
  std::int64_t correct_predictions() const { return correct_; }
  // How the ops compute attention at the present matmul precision (GptOps::attention).
  Attention attention() const { return ops_->attention(shape_); }
  // fp32 (default) or bf16 GEMMs; problems name "--precision" (MatmulRunner).
  Problems set_matmul_precision(Precision precision) { return ops_->set_matmul_precision(precision); }
  Precision matmul_precision() const { return ops_->matmul_precision(); }
  // The backend the model's buffers live on, and its ops (the trainer's reductions and update use them too).
  Backend& backend() const { return *backend_; }
  GptOps& ops() { return *ops_; }
  // Where the gradient of the chunk's output is received before backward (not on the last chunk).
  float* backward_input() { return dstream_recv_.data(); }
  // Backward of a pass (frees its slot). `dloss` scales the loss (1 / micro-batches
  // of the whole step); `final_pass`: this is the step's last gradient pass of the
  // chunk, so on_unit_final is called for each unit whose gradient is then complete.
  void backward(std::int64_t chunk, std::int64_t mb, float dloss, bool final_pass,
                const std::function<void(Unit&)>& on_unit_final, BackwardPart part = BackwardPart::whole);
  // The gradient of the chunk's input ([rows_local, C]), to send to the previous stage.
  const float* backward_output() const { return dstream_.data(); }

  std::int64_t rows_local() const { return rows_local_; }
  std::int64_t channels() const { return shape_.channels; }
  std::int64_t chunk_count() const { return chunk_count_; }
  std::int64_t micro_batch() const { return batch_; }
  std::int64_t seq_len() const { return seq_len_; }
  ShardMode mode() const { return mode_; }
  bool sequence_parallel() const { return sequence_parallel_; }
  const TpShape& shape() const { return shape_; }
  std::vector<Unit>& units() { return units_; }
  Unit* wte() { return wte_ < 0 ? nullptr : &units_[static_cast<std::size_t>(wte_)]; }
  // Whether the output layer is wte (tied): the first and last stage then both hold it.
  bool tied() const { return shape_.tied(); }
  // The group a unit is sharded over (fsdp, or dp under ZeRO), and the one its shards are replicated over.
  comm::Communicator& shard_group() { return *shard_group_; }
  comm::Communicator& replica_group() { return *replica_group_; }
  comm::MeshCommunicators& groups() { return groups_; }
  const ModelSpec& spec() const { return spec_; }

  // The full parameters in parameter_layout(spec) order, on every rank
  // (collective over the world: each tensor block comes from one owning rank).
  // `which` 0: values, 1: AdamW m, 2: AdamW v. A host copy, for files and tests.
  std::vector<float> gather_full(int which);
  // Replaces this rank's slices from full tensors in parameter_layout order (values or moments).
  void scatter_full(int which, std::span<const float> full);

 private:
  struct LayerActs;
  struct Slot;
  ParallelGpt(comm::MeshCommunicators& groups, Backend& backend, std::unique_ptr<GptOps> ops);
  void allocate(const Parameters<float>& full);

  Slot& slot_of(std::int64_t chunk, std::int64_t mb);
  const Slot& slot_of(std::int64_t chunk, std::int64_t mb) const;
  void use_values(Unit& unit);
  void done_values(Unit& unit);
  // fsdp: starts gathering units_[index]'s values (a no-op otherwise, or when
  // it is already gathered); the next use_values of that unit waits for it.
  void prefetch_values(int index);
  void use_grads(Unit& unit);
  void done_grads(Unit& unit);
  // tp region boundaries on [rows, C] row blocks (rows_local_ vs batch rows).
  const float* enter_region(const float* local, float* full);     // identity | all-gather
  void leave_region(float* partial_full, float* out_local);       // all-reduce | reduce-scatter
  void layer_forward(Unit& unit, LayerActs& a, const float* x);
  void layer_backward(Unit& unit, LayerActs& a, const float* x, BackwardPart part);
  void layer_weight_gradients(Unit& unit, LayerActs& a, const float* x);
  double head_forward(Slot& slot, const float* x);
  void head_backward(Slot& slot, const float* x, float dloss, BackwardPart part);
  void head_weight_gradients(Slot& slot);
  const std::int32_t* tokens_of(const Slot& slot) const;
  const std::int32_t* targets_of(const Slot& slot) const;
  void embedding_forward(Slot& slot);
  void embedding_backward(Slot& slot);
  comm::MeshCommunicators& groups_;
  comm::Communicator* tp_ = nullptr;
  comm::Communicator* shard_group_ = nullptr;
  comm::Communicator* replica_group_ = nullptr;
  std::unique_ptr<comm::Communicator> self_;  // the group of one for axes that do not shard
  ModelSpec spec_;
  TpShape shape_;
  ShardMode mode_ = ShardMode::replicated;
  bool sequence_parallel_ = false;
  std::int64_t batch_ = 0, seq_len_ = 0, rows_ = 0, rows_local_ = 0, row_offset_ = 0;
  std::int64_t stages_ = 1, stage_ = 0, chunk_count_ = 1;

  std::vector<Unit> units_;
  int wte_ = -1, wpe_ = -1, lnf_ = -1;
  int head_ = -1;  // the output layer's unit on the last stage: wte (or its copy) when tied, lm_head otherwise
  std::unique_ptr<comm::Request> prefetch_;  // fsdp: the gather in flight, of units_[prefetch_unit_]
  int prefetch_unit_ = -1;
  std::vector<std::vector<int>> chunk_units_;  // by local chunk (chunk / stages): layer unit indices
  std::vector<std::vector<Slot>> slots_;       // by local chunk

  Backend* backend_;
  std::unique_ptr<GptOps> ops_;
  LossScratch loss_scratch_;
  std::int64_t correct_ = 0;

  // Scratch shared by passes.
  Floats full_a_, full_b_, dqkv_, datty_, dfch_, dgelu_, dlocal_, dstream_;  // workspace
  Floats dstream_recv_;   // communication
  Floats reduced_shard_;  // communication; fsdp: a gradient shard's reduce-scatter
};

}  // namespace meshplan::exec::parallel
