// What the executor can train, decided before anything starts. A plan the
// planner proposes may still be one the executor cannot run (a mixture of
// experts, a cp axis, a CNN); users should learn that when the plan file is written
// (`explain` / `plan --emit-plan` warn) and before ranks start (`launch` and
// `train` refuse with one message, not an MPI abort from every rank). The
// training session and ParallelGpt::create ask the same function when they
// build the model, so each rule is written once:
//
//   transformer  the features the executor has (check_supported: the GPT-2
//                and Llama families, GeGLU) and what the parallel runtime runs of
//                the plan (parallel::plan_problems: no cp or ep, tp dividing
//                the heads, the kv heads and ffn, the schedule, ...);
//   mlp          the supported features, on a mesh of dp and fsdp axes only
//                (data_parallel.hpp: any ZeRO stage; tp, pp, cp and ep are
//                refused, naming the axis);
//   cnn          refused: ResNets are planned, not trained.
//
// run_input_problems checks the rest of what `train` would otherwise fail on
// late: the --data spec and a --checkpoint-dir that cannot be written.
//
// host_memory_problems refuses, on the CPU, a plan whose own prediction does
// not fit this machine: the allocation would fail part way (std::bad_alloc)
// or the kernel would kill the ranks.
//
// defines: trainable, training_seq_len, run_input_problems, host_memory_problems
#pragma once

#include <cstdint>
#include <string>

#include "model/model_spec.hpp"
#include "model/plan.hpp"
#include "model/problem.hpp"

namespace meshplan::exec {

// Every reason the executor cannot train `plan` of `spec` at `seq_len` tokens
// (the plan's sequence length, training_seq_len), each naming the model or
// plan field ("model.kind", "model.experts", "mesh.cp", "mesh", ...).
// Warnings (dropout, which training leaves out) come with the errors.
Problems trainable(const ModelSpec& spec, const Plan& plan, std::int64_t seq_len);

// The sequence length a plan trains at: the plan's, or the model's when the plan leaves it at 0.
std::int64_t training_seq_len(const ModelSpec& spec, const Plan& plan);

// What `train` would fail on about its inputs, found before training:
// `data_spec` (data::check_data_spec, windows of `seq_len` tokens), and
// `checkpoint_dir` when it is not empty: created when missing, as a save
// would, and a probe file written in it and removed. Problems of the folder
// name "--checkpoint-dir <dir>".
Problems run_input_problems(const std::string& data_spec, std::int64_t seq_len, const std::string& checkpoint_dir);

// Whether the --data spec's samples are what the model trains on: a
// transformer on token windows (text:PATH or synthetic-text, byte tokens, so
// a vocabulary of at least 256), an MLP on labelled vectors (synthetic,
// fashion-mnist). Errors name "--data" and say which data fits. (It was found
// late, after the model was built, as "the data's windows or vocabulary do
// not fit the model".)
Problems data_model_problems(const std::string& data_spec, const ModelSpec& spec);

// The --data a run of `spec` takes when none is given: synthetic-text for a
// transformer; fashion-mnist for an MLP of Fashion-MNIST's shape (784 inputs,
// 10 classes: both MLP presets); synthetic for any other (data/synthetic.hpp).
std::string default_data_spec(const ModelSpec& spec);

// The CPU run of a plan whose predicted allocations per rank
// (`predicted_rank_bytes`: the plan file's memory_bytes.allocated_peak, what
// the executor's tensors take) times the ranks on this host exceed the host's
// memory (`host_bytes`): one error naming "memory", with --shrink, which
// rehearses the plan at a size this machine holds. A lower bound of what the
// run needs, so nothing that fits is refused.
Problems host_memory_problems(double predicted_rank_bytes, std::int64_t ranks_here, double host_bytes);

// This host's memory in bytes: probe_machine()'s MemTotal (physical pages
// x page size where /proc/meminfo cannot be read).
double host_memory_bytes();

}  // namespace meshplan::exec
