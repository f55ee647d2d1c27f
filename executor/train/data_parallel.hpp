// Data parallelism for any single-rank Model<float> (the MLP): the plain
// loop of trainer.hpp on every rank of a dp and/or fsdp mesh (the mesh of
// one included: `meshplan train` runs every MLP here), with the gradient
// work between the passes and the optimizer. The GPT runtime
// (executor/parallel/) cuts its model into units and overlaps collectives
// with the backward pass; a Model<float> is one flat buffer
// (parameters.hpp), so here the whole model is one unit (FSDP with a single
// flat parameter) and every collective runs once per step, after the passes:
//
//   data     every rank builds the model from the same seed (identical
//            parameters) and draws the step's whole global batch from its
//            loader (same seed: same samples); data-parallel rank d (d = dp
//            coordinate x fsdp + fsdp coordinate, as train_parallel) takes
//            micro-batches [d M, (d + 1) M), M = plan.micro_batches().
//   passes   forward / backward of each micro-batch with dloss = 1 / (M x D),
//            D = dp x fsdp, so the summed gradient is the global batch's mean.
//   reduce   by data_sharding(plan) (zero_shards, model_states.hpp):
//              ZeRO 0      all-reduce the flat gradient over dp x fsdp; every
//                          rank updates the whole model;
//              ZeRO 1, 2   reduce-scatter the flat gradient (padded to a
//                          multiple of the group) over the sharding group;
//                          AdamW moments exist for this rank's 1/S shard only;
//                          the updated shards are all-gathered;
//              ZeRO 3, fsdp  also the values: between steps a rank holds its
//                          1/S shard; the whole buffer is all-gathered before
//                          the step's first forward and freed after the last
//                          backward. With dp > 1 and fsdp > 1 (HSDP) shards
//                          are over fsdp and the dp replicas all-reduce them.
//            ZeRO 2, 3 and fsdp free the whole gradient buffer after the
//            reduce-scatter too; it exists from the first backward to the
//            reduction (one unit: the peak holds it whole, the ledger between
//            steps does not).
//   norm     sum of squares over the elements this rank owns (each element
//            once across the world), one world all-reduce in double together
//            with the loss (the mean over the global batch, known to every rank).
//   update   clipping and AdamW as trainer.hpp (adamw_update_range: weight
//            decay per tensor also where a shard boundary cuts a tensor).
//
// Tensor parallelism (tp > 1, an Mlp only): the model is split over tp at
// construction (Mlp::split_over_tp, Megatron's column/row pairs) and its
// passes are collective over the tp group; the flat buffer above is then
// this tp rank's shard, and everything above applies to it unchanged. The tp
// ranks of one data-parallel rank see the same micro-batches and compute the
// same loss, which tp rank 0 alone counts; their gradient shards are
// disjoint (the row-parallel biases' gradients live on tp rank 0), so the
// norm counts each element once.
//
// Evaluation and checkpoints see whole tensors: fsdp gathers the values
// first, sharded moments are gathered for a save, tp shards are summed into
// the whole tensors over tp. Every rank evaluates the whole set (identical
// results, no reduction needed); checkpoints are named as the single-rank
// MLP's, so they resume under any dp/fsdp/tp mesh and on one rank.
//
// defines: DataParallelTrainer
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "executor/checkpoint/checkpoint.hpp"
#include "executor/comm/mesh_comms.hpp"
#include "executor/data/loader.hpp"
#include "executor/model/mlp.hpp"
#include "executor/model/model.hpp"
#include "executor/train/trainer.hpp"
#include "model/plan.hpp"

namespace meshplan::exec {

class DataParallelTrainer {
 public:
  // `model` built from the same seed on every rank, with max_batch >=
  // plan.micro_batch; `plan` has only dp, fsdp and (for an Mlp) tp axes
  // (trainable) and data_sharding_problems none. Collective-free; `groups`
  // must outlive the trainer.
  DataParallelTrainer(std::unique_ptr<Model<float>> model, const Plan& plan, comm::MeshCommunicators& groups);

  Model<float>& model() { return *model_; }

  // exec::train's contract (options per data-parallel rank: micro_batch,
  // micro_batches = plan.micro_batches()); on_step runs on every rank with
  // the same report. Collective.
  TrainResult train(data::DataLoader& loader, const TrainOptions& options);
  // exec::evaluate of the whole model on every rank; collective, same result everywhere.
  EvalResult evaluate(data::DataLoader& loader, std::int64_t max_samples);
  // Values and AdamW moments as the single-rank Model's checkpoint names them; collective.
  std::vector<TensorBlob> checkpoint_tensors();
  // The reverse; every rank reads `blobs` and keeps its shards.
  Problems restore(const std::vector<TensorBlob>& blobs, const std::string& where);

 private:
  enum class Mode { replicated, sharded_optimizer, sharded_values };
  Parameters<float>& params() { return model_->parameters(); }
  std::int64_t elements() const { return model_->parameters().layout.total_elements; }
  std::int64_t shard_end() const;  // end of this rank's shard, padding excluded
  void gather_values();            // sharded_values: the whole buffer from the shards
  void release_values();
  double reduce_gradients();       // returns this rank's sum of squares of the gradient it owns
  void update(float clip, std::int64_t updates, const kernels::AdamWHyperparameters& hp);
  // Values and moments (whole flat buffers of this rank's model) as the whole model's checkpoint tensors.
  std::vector<TensorBlob> whole_blobs(const float* values, const float* m, const float* v);

  std::unique_ptr<Model<float>> model_;
  Mlp<float>* tp_mlp_ = nullptr;       // the model when split over tp > 1
  comm::MeshCommunicators& groups_;
  Mode mode_ = Mode::replicated;
  bool shard_gradients_ = false;       // ZeRO >= 2 or fsdp: the whole gradient is freed after the reduction
  comm::Communicator* shard_group_;    // the group data_sharding names
  comm::Communicator* replica_group_;  // HSDP: dp replicas of an fsdp shard; else the rank alone
  std::unique_ptr<comm::Communicator> self_;
  std::int64_t data_index_ = 0;        // d above
  std::int64_t data_ranks_ = 1;        // D
  std::int64_t padded_ = 0;            // elements rounded up to a multiple of the shard group
  std::int64_t shard_begin_ = 0, shard_size_ = 0;
  // Sharded modes: this rank's shard of the gradient, the moments and (sharded_values) the values.
  TrackedVector<float> shard_grads_, shard_m_, shard_v_, shard_values_;
};

}  // namespace meshplan::exec
