// Hugging Face config.json files as models (model/hf_config.hpp): the
// published configs of nine checkpoints (tests/data/hf/, each the
// checkpoint's config.json on the Hugging Face Hub as its _name_or_path
// names it) map to the dimensions their model cards give, and to the
// parameter counts their authors report; what the schema cannot state is
// refused or named.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "model/hf_config.hpp"
#include "model/layer_graph.hpp"
#include "model/model_spec.hpp"

namespace meshplan {
namespace {

std::string fixture(const std::string& name) { return std::string(MESHPLAN_TEST_DATA) + "/hf/" + name + ".json"; }

std::string messages(const Problems& problems) {
  std::string out;
  for (const Problem& p : problems) out += describe(p) + "\n";
  return out;
}

int warnings(const Problems& problems) {
  int n = 0;
  for (const Problem& p : problems) n += p.severity == Severity::warning ? 1 : 0;
  return n;
}

bool mentions(const Problems& problems, Severity severity, const std::string& fragment) {
  for (const Problem& p : problems)
    if (p.severity == severity && describe(p).find(fragment) != std::string::npos) return true;
  return false;
}

struct Published {
  const char* file;
  std::int64_t layers, hidden, heads, kv_heads, head_dim, ffn, vocab, seq_len;
  FeedForward mlp;
  bool tied;
  double rope_theta;
  std::int64_t experts, top_k;
  double parameters;  // as the authors report it
  int warnings;       // what the mapping names but cannot state
  std::int64_t shared_expert_ffn = 0;
};

// Parameter counts: GPT-2 124,439,808 (Hugging Face's count of gpt2); Llama 2
// 7B 6,738,415,616 and Llama 3 8B 8,030,261,248 (the safetensors index totals
// of meta-llama's checkpoints); Mistral 7B 7,241,732,096 (Jiang et al. 2023's
// 7.24B); Gemma 2B 2,506,172,416 (Gemma Team 2024, Table 2: 2.51B); Mixtral
// 8x7B 46,702,792,704 (Jiang et al. 2024: 46.7B). Qwen 2 7B is 7,615,616,512
// with its q, k, v biases, which the schema cannot hold: 28 x 4608 fewer.
constexpr Published kPublished[] = {
    {"gpt2", 12, 768, 12, 12, 64, 3072, 50257, 1024, FeedForward::gelu, true, 10000, 0, 1, 124439808.0, 0},
    {"llama-2-7b", 32, 4096, 32, 32, 128, 11008, 32000, 4096, FeedForward::swiglu, false, 10000, 0, 1, 6738415616.0, 0},
    {"llama-3-8b", 32, 4096, 32, 8, 128, 14336, 128256, 8192, FeedForward::swiglu, false, 500000, 0, 1, 8030261248.0, 0},
    {"mistral-7b", 32, 4096, 32, 8, 128, 14336, 32000, 32768, FeedForward::swiglu, false, 10000, 0, 1, 7241732096.0, 1},
    {"qwen2-7b-instruct", 28, 3584, 28, 4, 128, 18944, 152064, 32768, FeedForward::swiglu, false, 1e6, 0, 1,
     7615616512.0 - 28 * 4608.0, 1},
    {"gemma-2b", 18, 2048, 8, 1, 256, 16384, 256000, 8192, FeedForward::geglu, true, 10000, 0, 1, 2506172416.0, 0},
    {"mixtral-8x7b", 32, 4096, 32, 8, 128, 14336, 32000, 32768, FeedForward::swiglu, false, 1e6, 8, 2, 46702792704.0, 0},
    // Fine-grained experts (ffn is moe_intermediate_size) and a shared expert: the count is the config's
    // arithmetic less what the schema cannot hold (Qwen 2's q, k, v biases and the shared expert's gate,
    // 4 x 2048 per layer), and rounds to the model card's 14.3B (HfConfig.MixturesOfExpertsMatchTheirCards).
    {"qwen1.5-moe-a2.7b", 24, 2048, 16, 16, 128, 1408, 151936, 8192, FeedForward::swiglu, false, 1e6, 60, 4,
     2 * 151936.0 * 2048 + 2048 + 24 * (4 * 2048.0 * 2048 + 60 * 3 * 2048.0 * 1408 + 3 * 2048.0 * 5632 + 2048 * 60 + 2 * 2048), 1,
     5632},
    // 128 experts of width 768, no shared expert; less its QK-norm weights (2 x 128 per layer).
    {"qwen3-30b-a3b", 48, 2048, 32, 4, 128, 768, 151936, 40960, FeedForward::swiglu, false, 1e6, 128, 8,
     2 * 151936.0 * 2048 + 2048 + 48 * (2 * 2048.0 * 4096 + 2 * 2048.0 * 512 + 128 * 3 * 2048.0 * 768 + 2048 * 128 + 2 * 2048), 1},
};

TEST(HfConfig, PublishedConfigsMapToTheirModelsAndParameterCounts) {
  for (const Published& p : kPublished) {
    const Loaded<ModelSpec> loaded = load_model("hf:" + fixture(p.file));
    ASSERT_TRUE(loaded.ok()) << p.file << "\n" << messages(loaded.problems);
    const TransformerDims& t = loaded.value.transformer;
    EXPECT_EQ(loaded.value.kind, ModelKind::transformer);
    EXPECT_EQ(t.layers, p.layers) << p.file;
    EXPECT_EQ(t.hidden, p.hidden) << p.file;
    EXPECT_EQ(t.heads, p.heads) << p.file;
    EXPECT_EQ(t.kv_heads, p.kv_heads) << p.file;
    EXPECT_EQ(t.head_dim, p.head_dim) << p.file;
    EXPECT_EQ(t.ffn, p.ffn) << p.file;
    EXPECT_EQ(t.vocab, p.vocab) << p.file;
    EXPECT_EQ(t.seq_len, p.seq_len) << p.file;
    EXPECT_EQ(t.feed_forward, p.mlp) << p.file;
    EXPECT_EQ(t.tied_embeddings, p.tied) << p.file;
    EXPECT_DOUBLE_EQ(t.rope_theta, p.rope_theta) << p.file;
    EXPECT_EQ(t.experts, p.experts) << p.file;
    EXPECT_EQ(t.top_k, p.top_k) << p.file;
    EXPECT_EQ(t.shared_expert_ffn, p.shared_expert_ffn) << p.file;
    const double parameters = build_layer_graph(loaded.value, t.seq_len).parameter_count();
    EXPECT_DOUBLE_EQ(parameters, p.parameters) << p.file;
    // A null rope_scaling and a sliding window turned off are no warnings.
    EXPECT_EQ(warnings(loaded.problems), p.warnings) << p.file << "\n" << messages(loaded.problems);
  }
}

// The model cards' totals: Qwen1.5-MoE-A2.7B "14.3B parameters in total" (Qwen blog, Qwen1.5-MoE, March
// 2024), Qwen3-30B-A3B "30.5B in total" (its Hugging Face model card); rounded, so within 0.05B. The
// shared expert is a dense MLP beside the experts: held on every ep rank, split over tp.
TEST(HfConfig, MixturesOfExpertsMatchTheirCards) {
  const struct {
    const char* file;
    double billions;
  } cards[] = {{"qwen1.5-moe-a2.7b", 14.3}, {"qwen3-30b-a3b", 30.5}};
  for (const auto& card : cards) {
    const Loaded<ModelSpec> loaded = load_model("hf:" + fixture(card.file));
    ASSERT_TRUE(loaded.ok()) << card.file << "\n" << messages(loaded.problems);
    const double parameters = build_layer_graph(loaded.value, 2048).parameter_count();
    EXPECT_NEAR(parameters / 1e9, card.billions, 0.05) << card.file;
  }
  // Qwen3 dense: the fields of Qwen/Qwen3-4B's config.json that set its shapes; "4.0B" parameters,
  // "3.6B" without the (tied) embedding (its model card).
  const Loaded<HfModel> dense = read_hf_config_text(R"({"model_type": "qwen3", "head_dim": 128, "hidden_size": 2560,
      "intermediate_size": 9728, "max_position_embeddings": 40960, "num_attention_heads": 32, "num_hidden_layers": 36,
      "num_key_value_heads": 8, "tie_word_embeddings": true, "vocab_size": 151936})", "Qwen3-4B");
  ASSERT_TRUE(dense.ok()) << messages(dense.problems);
  const double qwen3_4b = build_layer_graph(dense.value.model, 4096).parameter_count();
  EXPECT_NEAR(qwen3_4b / 1e9, 4.0, 0.05);
  EXPECT_NEAR((qwen3_4b - 151936.0 * 2560) / 1e9, 3.6, 0.05);
  EXPECT_TRUE(mentions(dense.problems, Severity::warning, "QK-norm")) << messages(dense.problems);
  const Loaded<HfModel> qwen3 = read_hf_config(fixture("qwen3-30b-a3b"));
  EXPECT_TRUE(mentions(qwen3.problems, Severity::warning, "QK-norm")) << messages(qwen3.problems);
  EXPECT_NE(hf_model_yaml(qwen3.value).find("ffn: 768   # moe_intermediate_size"), std::string::npos);
  const Loaded<HfModel> qwen2 = read_hf_config(fixture("qwen1.5-moe-a2.7b"));
  EXPECT_NE(hf_model_yaml(qwen2.value).find("shared_expert_ffn: 5632   # shared_expert_intermediate_size"), std::string::npos)
      << hf_model_yaml(qwen2.value);
}

// DeepSeek's configs (the fields of deepseek-ai/DeepSeek-V3's and DeepSeek-V2-Lite's config.json that
// set their shapes): multi-head latent attention, routed and shared experts, dense first layers. The
// counts are their authors': 671B in V3's main model (README_WEIGHTS.md; its multi-token prediction
// module is named, not counted), 15.7B for V2-Lite (DeepSeek-V2 paper, arXiv 2405.04434, Appendix B),
// whose queries have no latent (q_lora_rank null).
TEST(HfConfig, DeepSeekLatentAttentionAndExpertsMatchTheirCounts) {
  const Loaded<HfModel> v3 = read_hf_config_text(R"({"model_type": "deepseek_v3", "hidden_size": 7168,
      "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
      "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256, "num_experts_per_tok": 8,
      "first_k_dense_replace": 3, "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512,
      "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
      "max_position_embeddings": 163840, "rms_norm_eps": 1e-6, "rope_theta": 10000, "tie_word_embeddings": false,
      "attention_bias": false, "hidden_act": "silu", "num_nextn_predict_layers": 1, "scoring_func": "sigmoid",
      "topk_group": 4, "n_group": 8})", "DeepSeek-V3");
  ASSERT_TRUE(v3.ok()) << messages(v3.problems);
  const TransformerDims& t = v3.value.model.transformer;
  EXPECT_TRUE(t.latent_attention());
  EXPECT_EQ(t.head_size(), 192);
  EXPECT_EQ(t.value_head_size(), 128);
  EXPECT_EQ(t.dense_layers, (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(t.dense_ffn, 18432);
  EXPECT_EQ(t.shared_expert_ffn, 2048);
  EXPECT_NEAR(build_layer_graph(v3.value.model, 4096).parameter_count() / 1e9, 671, 0.5);
  EXPECT_TRUE(mentions(v3.problems, Severity::warning, "multi-token prediction")) << messages(v3.problems);
  // Node-limited routing as group-limited routing: 4 of 8 groups; the sigmoid scoring is named.
  EXPECT_EQ(t.expert_groups, 8);
  EXPECT_EQ(t.group_top_k, 4);
  EXPECT_NE(hf_model_yaml(v3.value).find("expert_groups: 8   # n_group"), std::string::npos) << hf_model_yaml(v3.value);
  EXPECT_TRUE(mentions(v3.problems, Severity::warning, "sigmoid scoring")) << messages(v3.problems);
  EXPECT_NE(hf_model_yaml(v3.value).find("shared_expert_ffn: 2048   # n_shared_experts x moe_intermediate_size"),
            std::string::npos) << hf_model_yaml(v3.value);

  const Loaded<HfModel> lite = read_hf_config_text(R"({"model_type": "deepseek_v2", "hidden_size": 2048,
      "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 27, "num_attention_heads": 16,
      "num_key_value_heads": 16, "n_shared_experts": 2, "n_routed_experts": 64, "num_experts_per_tok": 6,
      "first_k_dense_replace": 1, "moe_layer_freq": 1, "q_lora_rank": null, "kv_lora_rank": 512,
      "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 102400,
      "max_position_embeddings": 163840, "tie_word_embeddings": false})", "DeepSeek-V2-Lite");
  ASSERT_TRUE(lite.ok()) << messages(lite.problems);
  EXPECT_EQ(lite.value.model.transformer.q_lora_rank, 0);
  EXPECT_EQ(lite.value.model.transformer.expert_groups, 0);  // V2-Lite routes over all its experts
  EXPECT_NEAR(build_layer_graph(lite.value.model, 4096).parameter_count() / 1e9, 15.7, 0.05);
}

// Qwen-MoE's dense layers (transformers' Qwen2MoeDecoderLayer: experts where (i + 1) % decoder_sparse_step
// == 0 and i is not in mlp_only_layers) become dense_layers, with intermediate_size as their width.
TEST(HfConfig, QwenMoeDenseLayersAreMapped) {
  const std::string config = R"({"model_type": "qwen3_moe", "num_hidden_layers": 6, "hidden_size": 64,
      "num_attention_heads": 4, "moe_intermediate_size": 32, "intermediate_size": 96, "vocab_size": 100,
      "max_position_embeddings": 16, "num_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 2,
      "mlp_only_layers": [1]})";
  const Loaded<HfModel> hf = read_hf_config_text(config, "sparse.json");
  ASSERT_TRUE(hf.ok()) << messages(hf.problems);
  const TransformerDims& t = hf.value.model.transformer;
  EXPECT_EQ(t.dense_layers, (std::vector<std::int64_t>{0, 1, 2, 4}));  // 0, 2, 4 by the step; 1 by the list
  EXPECT_EQ(t.dense_ffn, 96);
  EXPECT_EQ(t.ffn, 32);
  EXPECT_NE(hf_model_yaml(hf.value).find("dense_layers: [0, 1, 2, 4]   # decoder_sparse_step, mlp_only_layers"),
            std::string::npos) << hf_model_yaml(hf.value);
  // Every layer sparse: no dense_layers, no dense_ffn.
  const Loaded<HfModel> all = read_hf_config(fixture("qwen3-30b-a3b"));
  EXPECT_TRUE(all.value.model.transformer.dense_layers.empty());
  EXPECT_EQ(all.value.model.transformer.dense_ffn, 0);
}

TEST(HfConfig, Gpt2KeepsItsArchitecture) {
  const Loaded<HfModel> hf = read_hf_config(fixture("gpt2"));
  ASSERT_TRUE(hf.ok()) << messages(hf.problems);
  const TransformerDims& t = hf.value.model.transformer;
  EXPECT_EQ(t.norm, Norm::layernorm);
  EXPECT_EQ(t.positions, Positions::learned);
  EXPECT_TRUE(t.bias);
  EXPECT_DOUBLE_EQ(t.dropout, 0.1);
  EXPECT_DOUBLE_EQ(t.norm_eps, 1e-5);
  EXPECT_EQ(hf.value.model.name, "gpt2");  // no _name_or_path: the file's stem (a config.json: its folder's name)
}

TEST(HfConfig, EveryFieldNamesTheKeysItCameFrom) {
  const Loaded<HfModel> hf = read_hf_config(fixture("llama-3-8b"));
  ASSERT_TRUE(hf.ok()) << messages(hf.problems);
  EXPECT_EQ(hf.value.model.name, "Meta-Llama-3-8B");
  EXPECT_NE(hf.value.model.source.find("model_type llama"), std::string::npos) << hf.value.model.source;
  const std::string yaml = hf_model_yaml(hf.value);
  for (const char* line : {"layers: 32   # num_hidden_layers", "kv_heads: 8   # num_key_value_heads",
                           "ffn: 14336   # intermediate_size", "mlp: swiglu   # hidden_act (silu, gated)",
                           "rope_theta: 500000   # rope_theta", "norm: rmsnorm   # (architecture)"}) {
    EXPECT_NE(yaml.find(line), std::string::npos) << line << "\n" << yaml;
  }
  // The preset it prints reads back as the same model.
  const Loaded<ModelSpec> again = load_model_text(yaml, "printed");
  ASSERT_TRUE(again.ok()) << messages(again.problems);
  EXPECT_EQ(build_layer_graph(again.value, 8192).parameter_count(), 8030261248.0);
}

TEST(HfConfig, WhatTheSchemaCannotStateIsNamed) {
  const Loaded<HfModel> mistral = read_hf_config(fixture("mistral-7b"));
  EXPECT_TRUE(mentions(mistral.problems, Severity::warning, "sliding-window attention (window 4096)")) << messages(mistral.problems);
  const Loaded<HfModel> qwen = read_hf_config(fixture("qwen2-7b-instruct"));
  EXPECT_TRUE(mentions(qwen.problems, Severity::warning, "4608 parameters per layer (129024 in all) are not counted"))
      << messages(qwen.problems);
  EXPECT_FALSE(mentions(qwen.problems, Severity::warning, "sliding")) << "use_sliding_window is false";
  const Loaded<HfModel> gemma = read_hf_config(fixture("gemma-2b"));
  EXPECT_TRUE(gemma.ok());
  EXPECT_EQ(gemma.value.model.transformer.feed_forward, FeedForward::geglu);
}

// A rule the written preset breaks is said in the config's terms: its key and its line in the JSON,
// not the generated preset's key and line (which the user never saw).
TEST(HfConfig, PresetRulesNameTheConfigsKeyAndLine) {
  const std::string json = "{\n  \"model_type\": \"llama\",\n  \"hidden_size\": 64,\n  \"num_attention_heads\": 4,\n"
                           "  \"intermediate_size\": 128,\n  \"vocab_size\": 100,\n  \"max_position_embeddings\": 16,\n"
                           "  \"num_hidden_layers\": 1000000000000\n}\n";
  const Loaded<HfModel> hf = read_hf_config_text(json, "config.json");
  ASSERT_FALSE(hf.ok());
  EXPECT_TRUE(mentions(hf.problems, Severity::error, "config.json:8 key 'num_hidden_layers': must be between 1 and"))
      << messages(hf.problems);
  EXPECT_TRUE(mentions(hf.problems, Severity::error, "(as the preset's 'layers')")) << messages(hf.problems);
  // A negative probability was dropped silently (llama) or replaced by the default (gpt2).
  std::string dropout = json;
  dropout.replace(dropout.find("1000000000000"), 13, "2,\n  \"attention_dropout\": -0.5");
  const Loaded<HfModel> negative = read_hf_config_text(dropout, "config.json");
  EXPECT_FALSE(negative.ok());
  EXPECT_TRUE(mentions(negative.problems, Severity::error, "config.json:9 key 'attention_dropout'")) << messages(negative.problems);
  const Loaded<HfModel> gpt2 = read_hf_config_text(
      R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 100, "n_positions": 16,
          "resid_pdrop": -1})", "config.json");
  EXPECT_FALSE(gpt2.ok());
  EXPECT_TRUE(mentions(gpt2.problems, Severity::error, "key 'resid_pdrop': must be a probability")) << messages(gpt2.problems);
  // nlohmann keeps the last of a repeated key.
  const Loaded<HfModel> twice = read_hf_config_text(R"({"model_type": "llama", "model_type": "gpt2"})", "config.json");
  EXPECT_FALSE(twice.ok());
  EXPECT_TRUE(mentions(twice.problems, Severity::error, "config.json key 'model_type': given twice")) << messages(twice.problems);
}

TEST(HfConfig, RefusesWhatItCannotModel) {
  struct Bad {
    const char* json;
    const char* fragment;
  };
  const Bad bad[] = {
      {"{", "is not valid JSON"},
      // A number past double's range: nlohmann throws out_of_range, not parse_error (fuzz_hf_config).
      {R"({"model_type": "llama", "hidden_size": 1e400})", "is not valid JSON"},
      {"[1, 2]", "must be a JSON object"},
      {R"({"hidden_size": 64})", "key 'model_type': is missing"},
      {R"({"model_type": "t5"})", "'t5' is not an architecture meshplan maps"},
      {R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
           "vocab_size": 100, "max_position_embeddings": 16})",
       "key 'num_hidden_layers': is missing"},
      {R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": "64", "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 16})",
       "key 'hidden_size': must be a positive whole number, got \"64\""},
      // rope_scaling of the wrong type was accepted with the "not modelled" warning.
      {R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 16, "rope_scaling": "linear"})",
       "key 'rope_scaling': must be an object"},
      // A multimodal config's sizes are under text_config: said once, where they are.
      {R"({"model_type": "llama", "text_config": {"model_type": "llama", "num_hidden_layers": 2}})",
       "this config nests its language model under 'text_config'"},
      {R"({"model_type": "llava", "text_config": {"model_type": "llama", "num_hidden_layers": 2}})",
       "its language model is under 'text_config' (model_type 'llama'): give that object as the config"},
      // A whole number out of reach is said to be one (it was "not a positive whole number").
      {R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 1e18, "max_position_embeddings": 16})",
       "key 'vocab_size': is 1e+18, past any model meshplan plans (below 9e15)"},
      {R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 16, "hidden_act": "relu"})",
       "'relu' is neither SiLU nor a GELU"},
      {R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 100, "n_positions": 16,
           "activation_function": "relu"})",
       "'relu' is not a GELU"},
      {R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
           "num_key_value_heads": 3, "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 16})",
       "must be a multiple of kv_heads (3)"},
      {R"({"model_type": "qwen2_moe", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
           "moe_intermediate_size": 32, "intermediate_size": 96, "vocab_size": 100, "max_position_embeddings": 16,
           "num_experts": 8, "num_experts_per_tok": 2, "mlp_only_layers": [0, 4]})",
       "key 'mlp_only_layers': must list layers 0 to 3, got 4"},
      {R"({"model_type": "olmoe", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
           "intermediate_size": 32, "vocab_size": 100, "max_position_embeddings": 16, "num_experts": 8,
           "num_experts_per_tok": 9})",
       "top_k (9) exceeds experts (8)"},
  };
  for (const Bad& b : bad) {
    const Loaded<HfModel> hf = read_hf_config_text(b.json, "config.json");
    EXPECT_FALSE(hf.ok()) << b.json;
    EXPECT_TRUE(mentions(hf.problems, Severity::error, b.fragment)) << b.fragment << "\n" << messages(hf.problems);
  }
  const Loaded<ModelSpec> missing = load_model("hf:/no/such/config.json");
  EXPECT_FALSE(missing.ok());
  EXPECT_TRUE(mentions(missing.problems, Severity::error, "no such file")) << messages(missing.problems);
  // A folder where the file should be says so (it was "cannot be read").
  const Loaded<ModelSpec> folder = load_model("hf:" + std::filesystem::temp_directory_path().string());
  EXPECT_TRUE(mentions(folder.problems, Severity::error, "is a folder, not a file")) << messages(folder.problems);
}

}  // namespace
}  // namespace meshplan
