// The one interface the trainer sees, whatever the architecture: a model owns
// its parameters (parameters.hpp) and the activation buffers for one
// micro-batch, runs forward on a data::Batch returning the mean loss, and
// backward from the last forward accumulating into the parameter gradients
// (+=, as every kernel does), so gradient accumulation over micro-batches is
// just forward/backward repeated with dloss = 1 / micro_batches.
// Like llm.c's gpt2_forward/gpt2_backward, the backward uses the activations
// the forward saved, so forward and backward must alternate on the same batch.
//
// Memory: models allocate parameters and activations from a Backend
// (executor/backend/), so its ledger holds what training really uses.
// Precision: linear layers run in fp32 unless set_matmul_precision(bf16).
//
// defines: Model, make_model
#pragma once

#include <cstdint>
#include <memory>

#include "executor/backend/backend.hpp"
#include "executor/data/loader.hpp"
#include "executor/model/parameters.hpp"
#include "model/model_spec.hpp"
#include "model/precision.hpp"
#include "model/problem.hpp"

namespace meshplan::exec {

template <typename T>
class Model {
 public:
  virtual ~Model() = default;

  virtual Parameters<T>& parameters() = 0;
  virtual const Parameters<T>& parameters() const = 0;

  // The largest batch (samples) forward accepts; activations are sized for it.
  virtual std::int64_t max_batch() const = 0;
  // Loss terms per sample: 1 for an MLP, T (tokens) for a GPT. Used for
  // throughput (tokens/s) and accuracy denominators.
  virtual std::int64_t items_per_sample() const = 0;

  // Whether batches shaped `shape` fit this model (input width, classes,
  // sequence length); problems name "--data".
  virtual Problems check_data(const data::BatchShape& shape) const = 0;

  // Mean loss over the batch (1 <= batch.samples <= max_batch()):
  // cross-entropy (nats) when the batch has targets, mean squared error over
  // every output when it has target_values.
  virtual T forward(const data::Batch& batch) = 0;
  // Accumulates d(dloss * loss)/d(parameters) of the last forward into parameters().grads.
  virtual void backward(T dloss) = 0;
  // Items of the last forward whose arg-max prediction equals the target
  // (0 for regression).
  virtual std::int64_t correct_predictions() const = 0;

  // Arithmetic of the linear layers' GEMMs (matmul_runner.hpp): fp32 (the
  // default) or bf16 (float models on CPUs with bf16 support). Problems name
  // "--precision"; the setting is unchanged then. A model without its own
  // support accepts fp32 only.
  virtual Problems set_matmul_precision(Precision precision) {
    if (precision == Precision::fp32) return {};
    return {{Severity::error, "--precision", "this model computes in fp32 only"}};
  }
  virtual Precision matmul_precision() const { return Precision::fp32; }
};

// An Mlp with parameters initialised from `seed` and activations for
// `max_batch` samples, all allocated from `backend` (seq_len is unused).
// Problems for unsupported features, and for a transformer: every GPT plan,
// one device included, trains on ParallelGpt (executor/parallel/).
template <typename T>
Loaded<std::unique_ptr<Model<T>>> make_model(const ModelSpec& spec, std::uint64_t seed, std::int64_t max_batch,
                                             std::int64_t seq_len = 0, Backend& backend = default_backend());

}  // namespace meshplan::exec
