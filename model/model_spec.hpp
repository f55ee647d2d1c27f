// What is being trained: a GPT/Llama-style decoder, an MLP or a ResNet-style
// CNN, with the dimensions of its preset file. The layer graph
// (layer_graph.hpp) turns this into ops with FLOPs, parameters and saved
// activations; nothing else should need the raw dimensions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "model/problem.hpp"

namespace meshplan {

enum class ModelKind { transformer, mlp, cnn };
enum class FeedForward { gelu, swiglu, geglu };  // swiglu/geglu are gated: three matrices
enum class Norm { layernorm, rmsnorm };
enum class Positions { learned, rotary, none };

// Ways tensor parallelism splits `kv_heads` key/value heads: tp when it
// divides them (0 heads: as many as the query heads, which tp always
// divides); otherwise 1, and every tp rank holds all of them (replicated,
// their gradients summed over tp). docs/cost-model.md, "Grouped-query
// attention under tp".
inline std::int64_t kv_tp_split(std::int64_t kv_heads, std::int64_t tp) { return tp > 0 && kv_heads % tp == 0 ? tp : 1; }

struct TransformerDims {
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;   // == heads unless grouped-query attention
  std::int64_t head_dim = 0;   // hidden / heads unless stated
  std::int64_t ffn = 0;
  std::int64_t vocab = 0;
  std::int64_t seq_len = 0;    // training context; learned positions have this many rows
  FeedForward feed_forward = FeedForward::gelu;
  Norm norm = Norm::layernorm;
  Positions positions = Positions::rotary;
  bool bias = true;
  bool tied_embeddings = false;
  double dropout = 0;           // > 0 adds 1-byte dropout masks to saved activations
  double rope_theta = 10000;    // rotary positions: the base of the frequencies (RoFormer's 10000; Llama 3: 500000)
  double norm_eps = 1e-5;       // added to the variance (layernorm) or mean square (rmsnorm) under the root
  std::int64_t experts = 0;     // 0 = dense; otherwise every layer's MLP is a mixture of experts
  std::int64_t top_k = 1;
  // Drop-and-pad expert capacity (Switch Transformer, Fedus et al. 2021, Sec. 2.1; GShard; Megatron-Core's
  // --moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity, whose README gives
  // capacity = tokens x top_k x capacity_factor / experts): every expert takes that many tokens, padded
  // where fewer are routed to it, the rest dropped before the all-to-all. 0: dropless, with every expert
  // equally loaded (the ideal a load-balancing loss aims at).
  double capacity_factor = 0;
  // Shared experts: a dense MLP of this hidden width (the activation's, ffn's kind) beside the routed
  // experts, run on every token and split over tp like a dense MLP (Qwen2-MoE's
  // shared_expert_intermediate_size; DeepSeekMoE's shared experts, Dai et al. 2024, Sec. 3.2, as their
  // number x the expert width; Megatron-Core's --moe-shared-expert-intermediate-size). 0: none.
  std::int64_t shared_expert_ffn = 0;
  // Group-limited routing (DeepSeek-V2's device-limited routing, Sec. 2.2.2; DeepSeek-V3's node-
  // limited routing, Sec. 2.1.2; Hugging Face n_group / topk_group; Megatron-Core's
  // --moe-router-num-groups / --moe-router-group-topk): the experts in expert_groups equal groups,
  // laid out contiguously as the expert-parallel ranks hold them, and each token's top_k chosen among
  // the experts of its group_top_k best groups. Only the deduplicated dispatch feels it: a token then
  // reaches fewer nodes (docs/cost-model.md, "Deduplicated dispatch"). 0: no groups.
  std::int64_t expert_groups = 0;
  std::int64_t group_top_k = 0;
  // Layers whose MLP is dense among a mixture of experts' (0-based, ascending): DeepSeek's first
  // first_k_dense_replace layers, Qwen-MoE's decoder_sparse_step and mlp_only_layers, Megatron-Core's
  // --moe-layer-freq. Their MLP is one of width dense_ffn (0: ffn), with no router and no shared experts.
  std::vector<std::int64_t> dense_layers;
  std::int64_t dense_ffn = 0;
  // Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, Sec. 2.1.2-2.1.3; Megatron-Core's
  // --multi-latent-attention): keys and values are projected from hidden to a latent of kv_lora_rank
  // (plus qk_rope_head_dim for the one rotary key all heads share), normed, and up-projected per head
  // to keys (head_dim - qk_rope_head_dim of them without rotation, then the shared rotary part) and
  // values (v_head_dim); queries likewise through a latent of q_lora_rank (0: projected from hidden
  // directly, as DeepSeek-V2-Lite). head_dim is the query/key head size, rotary part included.
  // kv_lora_rank 0: ordinary (grouped-query) attention, and the other three are 0.
  std::int64_t q_lora_rank = 0;
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_rope_head_dim = 0;
  std::int64_t v_head_dim = 0;

  // The counts as every reader uses them (0 in the fields above means the default).
  std::int64_t key_value_heads() const { return kv_heads > 0 ? kv_heads : heads; }
  std::int64_t head_size() const { return head_dim > 0 ? head_dim : hidden / (heads > 0 ? heads : 1); }
  bool gated() const { return feed_forward != FeedForward::gelu; }
  bool latent_attention() const { return kv_lora_rank > 0; }
  // A value head's size: v_head_dim under latent attention, else the query/key head's.
  std::int64_t value_head_size() const { return v_head_dim > 0 ? v_head_dim : head_size(); }
  // Latent attention's shapes: a query/key head's part without rotation; the key/value down-
  // projection's output (the latent and the one rotary key all heads share); the key/value up-
  // projection's output (each head's unrotated key and its value).
  std::int64_t qk_nope_head_size() const { return head_size() - qk_rope_head_dim; }
  std::int64_t kv_down_width() const { return kv_lora_rank + qk_rope_head_dim; }
  std::int64_t kv_up_width() const { return heads * qk_nope_head_size() + value_width(); }
  // Per token: the queries', the keys' and the values' widths over all their heads.
  std::int64_t query_width() const { return heads * head_size(); }
  std::int64_t key_width() const { return key_value_heads() * head_size(); }
  std::int64_t value_width() const { return key_value_heads() * value_head_size(); }
  // Keys and values move and are buffered together (context parallelism): their mean width per
  // token, so that twice it is both.
  double key_value_mean_width() const { return static_cast<double>(key_width() + value_width()) / 2; }
  // Copies of each token the experts compute and the dispatch moves, padding included: top_k x
  // capacity_factor (top_k when dropless); 1 for a dense MLP. Model FLOPs count top_k only.
  double expert_slots_per_token() const {
    if (experts == 0) return 1.0;
    return static_cast<double>(top_k) * (capacity_factor > 0 ? capacity_factor : 1.0);
  }
  std::int64_t kv_tp_split(std::int64_t tp) const { return meshplan::kv_tp_split(key_value_heads(), tp); }
  // Whether layer `layer`'s MLP is a mixture of experts.
  bool expert_layer(std::int64_t layer) const {
    return experts > 0 && !std::binary_search(dense_layers.begin(), dense_layers.end(), layer);
  }
  // The width of a dense layer's MLP (the model's MLP when it has no experts).
  std::int64_t dense_width() const { return dense_ffn > 0 ? dense_ffn : ffn; }
  // The output columns of an MLP's in-projection of hidden width `width`: gated, gate and up side by side.
  std::int64_t in_projection_width(std::int64_t width) const { return gated() ? 2 * width : width; }
};

struct MlpDims {
  std::vector<std::int64_t> layer_sizes;  // input, hidden..., output (classes)
  std::string activation = "relu";        // relu | gelu
};

struct CnnDims {
  std::int64_t image_size = 224;
  std::int64_t channels = 3;
  std::int64_t stem_channels = 64;
  std::vector<std::int64_t> stage_blocks;    // bottleneck blocks per stage
  std::vector<std::int64_t> stage_channels;  // bottleneck width per stage
  std::int64_t expansion = 4;
  std::int64_t classes = 1000;
};

struct ModelSpec {
  std::string name;
  std::string source;
  ModelKind kind = ModelKind::transformer;
  TransformerDims transformer;
  MlpDims mlp;
  CnnDims cnn;

  // The natural sequence length (transformer) or 1 (one sample is one item).
  std::int64_t default_seq_len() const { return kind == ModelKind::transformer ? transformer.seq_len : 1; }
  // A mixture of experts: a transformer with routed experts (what ep splits).
  bool has_experts() const { return kind == ModelKind::transformer && transformer.experts > 0; }
};

std::string to_string(ModelKind kind);
// The preset-file words for these enums ("swiglu", "rmsnorm", "rotary").
std::string to_string(FeedForward feed_forward);
std::string to_string(Norm norm);
std::string to_string(Positions positions);

Loaded<ModelSpec> load_model(const std::string& name_or_path);
// The same, from YAML text (tests, fuzzing); `display_name` names it in messages.
Loaded<ModelSpec> load_model_text(const std::string& yaml_text, const std::string& display_name);

}  // namespace meshplan
