// Training one rank of a multi-rank plan: the single-rank loop of
// trainer.hpp, with the step's forward and backward passes run from the
// pipeline schedule's instruction list for this rank's stage (the same list
// the simulator times, schedule.hpp) and the gradient work of a mesh between
// the passes and the optimizer:
//
//   data     every rank draws the step's whole global batch from its loader
//            (same seed: same samples) and data-parallel rank d (d = dp
//            coordinate x fsdp + fsdp coordinate) takes micro-batches
//            [d M, (d + 1) M) of it, so the tokens per step equal the
//            single-rank run's (M = plan.micro_batches()).
//   passes   forward / backward of (chunk, micro-batch); activations and
//            their gradients travel between stages by isend (posted when
//            reached, waited at the end of the step) and blocking receive,
//            matched by a tag made of (producing chunk, micro-batch, kind).
//            Each backward scales the loss by 1 / (M x dp x fsdp) and the
//            reductions below sum, so the gradient is the global batch's mean.
//   dp       ZeRO 0/1: during the step's last backward pass of each chunk,
//            a unit's gradient joins a bucket when it is final; a bucket of
//            plan.gradient_bucket_bytes starts its all-reduce (iall_reduce)
//            at once, reduce_gradients starts the partial one, and the
//            optimizer step waits for all (PyTorch DDP's scheme).
//            ZeRO 2: the full gradient is reduce-scattered at the step end.
//            fsdp: gradients were reduce-scattered after each backward use;
//            replicas over dp (HSDP) all-reduce their shards.
//   tied     wte's gradient is summed between the first and last pipeline
//            stage, which both hold it (Megatron-LM's embedding group).
//   sp       with sequence parallelism the gradients of tp-replicated
//            tensors are partial sums over sequence shards: all-reduced over tp.
//   norm     sum of squares over the elements this rank owns (each element
//            of the global model counted once: tp-replicated tensors on tp
//            rank 0, shards on their owner, the tied copy on stage 0), one
//            world all-reduce (in double) together with the loss.
//   update   clipping and AdamW as trainer.hpp, on the range this rank
//            updates; ZeRO 1/2 all-gather the updated shards over dp.
//   loss     computed by the last stage's tp rank 0 of each data-parallel
//            replica, averaged in the same all-reduce, so every rank knows
//            it (the caller reports it from world rank 0 only).
//
// Evaluation runs forward passes only, in chunk order: each chunk's stage
// receives the activation from the previous stage, runs it, sends it on and
// frees the pass. Every rank draws B x D samples a round, and data-parallel
// rank d takes the d-th micro-batch of them, so the replicas evaluate
// different samples and the sums over the world are the whole set's.
//
// defines: train_parallel, evaluate_parallel
#pragma once

#include "executor/data/loader.hpp"
#include "executor/parallel/parallel_gpt.hpp"
#include "executor/train/trainer.hpp"
#include "model/plan.hpp"

namespace meshplan::exec::parallel {

// options.micro_batch / micro_batches are per data-parallel rank (plan.micro_batch,
// plan.micro_batches()); on_step runs on every rank with the same report.
TrainResult train_parallel(ParallelGpt& model, const Plan& plan, data::DataLoader& loader, const TrainOptions& options);

// Mean loss and next-token accuracy over the next min(samples_per_epoch,
// max_samples) samples of `loader` (max_samples 0: one epoch), as
// exec::evaluate gives them on one rank: a last round short of B x D samples
// is padded, the padding left out. Collective over the world; every rank
// returns the same result.
EvalResult evaluate_parallel(ParallelGpt& model, data::DataLoader& loader, std::int64_t max_samples);

}  // namespace meshplan::exec::parallel
