// A Hugging Face `config.json` as a meshplan model: `--model hf:PATH` (every
// command that takes --model reads it through load_model). The architectures
// meshplan can cost are mapped field by field; what the schema cannot state
// is refused (an error) when it changes the model's shape or cost, and named
// (a warning) when it does not or only slightly (docs/presets.md, "Hugging
// Face configs", lists every key and why).
//
//   model_type gpt2            n_layer, n_embd, n_head, n_inner (null: 4 x
//                              n_embd), vocab_size, n_positions, the largest
//                              of resid/embd/attn_pdrop, layer_norm_epsilon,
//                              tie_word_embeddings (default true);
//                              LayerNorm, GELU, learned positions, biases
//   llama, mistral, qwen2,     num_hidden_layers, hidden_size,
//   mixtral, gemma             num_attention_heads, num_key_value_heads
//                              (default: the heads), head_dim (default:
//                              hidden / heads), intermediate_size,
//                              vocab_size, max_position_embeddings,
//                              rms_norm_eps, rope_theta (default 10000),
//                              hidden_act / hidden_activation (silu: SwiGLU;
//                              a GELU: GeGLU), attention_bias,
//                              attention_dropout, tie_word_embeddings
//                              (default false; gemma true);
//                              num_local_experts and num_experts_per_tok
//                              (mixtral); RMSNorm, rotary positions
//   deepseek_v2, deepseek_v3   as llama, with q_lora_rank, kv_lora_rank,
//                              qk_nope_head_dim, qk_rope_head_dim,
//                              v_head_dim (latent attention);
//                              moe_intermediate_size, n_routed_experts,
//                              num_experts_per_tok, n_shared_experts,
//                              first_k_dense_replace, moe_layer_freq,
//                              intermediate_size (the dense layers')
//
// defines: HfField, HfModel, read_hf_config, read_hf_config_text, hf_model_yaml
#pragma once

#include <string>
#include <vector>

#include "model/model_spec.hpp"
#include "model/problem.hpp"

namespace meshplan {

// One schema field and the config keys it came from ("num_hidden_layers", or
// "(architecture)" for what the model_type fixes).
struct HfField {
  std::string field;  // "layers"
  std::string value;  // "32"
  std::string keys;   // "num_hidden_layers"
};

struct HfModel {
  ModelSpec model;
  std::string model_type;
  std::vector<HfField> fields;  // in the preset file's order
};

// Problems name the config's keys ("config.json key 'hidden_act'").
Loaded<HfModel> read_hf_config(const std::string& path);
Loaded<HfModel> read_hf_config_text(const std::string& json_text, const std::string& display_name);

// The model as a preset file (docs/presets.md), each field commented with the
// config keys it came from: what `meshplan presets --from-hf` prints.
std::string hf_model_yaml(const HfModel& hf);

}  // namespace meshplan
