// The small GPT-2-style decoders the executor tests train: GELU MLP, layer
// norm, learned positions, tied embeddings, biases, multi-head attention
// (kv_heads = heads, head_dim = hidden / heads). One builder, so every test
// model is a complete, valid spec; the optimizer settings the parallel
// tests share; and the executor's GPT on a world of one rank (OneRankGpt),
// which is how `meshplan train` runs a one-device plan.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "executor/comm/mesh_comms.hpp"
#include "executor/parallel/parallel_gpt.hpp"
#include "executor/parallel/parallel_trainer.hpp"
#include "executor/train/trainer.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"
#include "model/schedule.hpp"

namespace meshplan::testing_support {

inline ModelSpec tiny_gpt_spec(const std::string& name, std::int64_t layers, std::int64_t hidden, std::int64_t heads,
                               std::int64_t ffn, std::int64_t vocab, std::int64_t seq_len) {
  ModelSpec spec;
  spec.name = name;
  spec.kind = ModelKind::transformer;
  TransformerDims& t = spec.transformer;
  t.layers = layers;
  t.hidden = hidden;
  t.heads = heads;
  t.kv_heads = heads;
  t.head_dim = hidden / heads;
  t.ffn = ffn;
  t.vocab = vocab;
  t.seq_len = seq_len;
  t.feed_forward = FeedForward::gelu;
  t.norm = Norm::layernorm;
  t.positions = Positions::learned;
  t.bias = true;
  t.tied_embeddings = true;
  return spec;
}

// The Llama family's layers on such dims: grouped-query attention with
// `kv_heads` key/value heads, SwiGLU, RMSNorm, rotary positions, an untied
// output layer, no biases.
inline void set_llama_layers(TransformerDims& t, std::int64_t kv_heads) {
  t.kv_heads = kv_heads;
  t.feed_forward = FeedForward::swiglu;
  t.norm = Norm::rmsnorm;
  t.positions = Positions::rotary;
  t.tied_embeddings = false;
  t.bias = false;
}

// The optimizer settings the parallel tests train those models with (the
// matrix and the resharding run must agree on them): AdamW lr 3e-3, weight
// decay 0.1, 2 warm-up steps, gradients clipped at norm 1.
inline exec::TrainOptions tiny_gpt_train_options(std::int64_t steps) {
  exec::TrainOptions o;
  o.steps = steps;
  o.adamw.learning_rate = 3e-3;
  o.adamw.weight_decay = 0.1;
  o.warmup_steps = 2;
  o.max_grad_norm = 1.0;
  return o;
}

// ParallelGpt on the mesh of one device (dp=1), micro-batches of
// `micro_batch` sequences of `seq_len` tokens, `micro_batches` per step.
// `model` is null and `problems` say why when it could not be built.
struct OneRankGpt {
  std::unique_ptr<exec::comm::Communicator> world = exec::comm::make_self_communicator("world");
  std::unique_ptr<exec::comm::MeshCommunicators> groups;
  Plan plan;
  std::unique_ptr<exec::parallel::ParallelGpt> model;
  Problems problems;

  // On `backend` with its `ops` when given (a GPU's), else the CPU.
  OneRankGpt(const ModelSpec& spec, std::uint64_t seed, std::int64_t micro_batch, std::int64_t micro_batches,
             std::int64_t seq_len, exec::Backend& backend = exec::default_backend(),
             std::unique_ptr<exec::parallel::GptOps> ops = nullptr) {
    plan.mesh = parse_mesh("dp=1", "mesh").value;
    plan.micro_batch = micro_batch;
    plan.global_batch = micro_batch * micro_batches;
    plan.precision = Precision::fp32;
    plan.schedule = *parse_schedule("1f1b");
    auto made = exec::comm::MeshCommunicators::create(*world, plan.mesh);
    problems = made.problems;
    if (!made.ok()) return;
    groups = std::make_unique<exec::comm::MeshCommunicators>(std::move(made.value));
    auto gpt = exec::parallel::ParallelGpt::create(spec, plan, *groups, seed, seq_len, backend, std::move(ops));
    problems.insert(problems.end(), gpt.problems.begin(), gpt.problems.end());
    model = std::move(gpt.value);
  }

  // Trains as exec::train would with `options` (steps, optimizer); the batch comes from the plan.
  exec::TrainResult train(data::DataLoader& loader, exec::TrainOptions options) {
    options.micro_batch = plan.micro_batch;
    options.micro_batches = plan.micro_batches();
    return exec::parallel::train_parallel(*model, plan, loader, options);
  }
};

}  // namespace meshplan::testing_support
