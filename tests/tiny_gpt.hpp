// The small GPT-2-style decoders the executor tests train: GELU MLP, layer
// norm, learned positions, tied embeddings, biases, multi-head attention
// (kv_heads = heads, head_dim = hidden / heads). One builder, so every test
// model is a complete, valid spec; and the optimizer settings the parallel
// tests share.
#pragma once

#include <cstdint>
#include <string>

#include "executor/train/trainer.hpp"
#include "model/model_spec.hpp"

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

}  // namespace meshplan::testing_support
