// The mapping of hf_config.hpp. The config is read into schema fields as
// text, written as a preset file and read back with load_model_text, so a
// Hugging Face model passes every rule a preset does (ranges, heads that the
// kv heads divide, top_k within the experts) and says it the same way.
#include "model/hf_config.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "model/atomic_file.hpp"
#include "model/json_lines.hpp"
#include "model/text.hpp"

namespace meshplan {
namespace {

using Json = nlohmann::json;

std::string number_text(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.10g", x);
  return text;
}

// Typed reads of the config's keys; a wrong type is an error naming the key,
// an absent or null key is nullopt.
class ConfigReader {
 public:
  ConfigReader(const Json& j, std::string where, Problems& problems) : j_(j), where_(std::move(where)), problems_(problems) {}

  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  bool object_at(const std::string& key) const { return has(key) && j_.at(key).is_object(); }
  void error(const std::string& key, const std::string& message) { add(Severity::error, key, message); }
  void warning(const std::string& key, const std::string& message) { add(Severity::warning, key, message); }

  std::optional<std::int64_t> count(const std::string& key) {
    if (!has(key)) return std::nullopt;
    const Json& v = j_.at(key);
    if (v.is_number()) {
      const double d = v.get<double>();
      if (d >= 1 && d < 9e15 && d == std::floor(d)) return static_cast<std::int64_t>(d);
      // A whole number out of reach is said to be so (1e18 was "not a positive whole number").
      if (d >= 9e15 && std::isfinite(d) && d == std::floor(d)) {
        error(key, "is " + v.dump() + ", past any model meshplan plans (below 9e15)");
        return std::nullopt;
      }
    }
    error(key, "must be a positive whole number, got " + v.dump());
    return std::nullopt;
  }
  std::optional<std::int64_t> required_count(const std::string& key) {
    if (!has(key)) {
      // A multimodal config nests its language model (Llama 4, Gemma 3, Mistral 3): say where the sizes are.
      const bool nested = j_.contains("text_config") && j_.at("text_config").is_object() && !said_nested_;
      said_nested_ = said_nested_ || nested;
      error(key, nested
                     ? "is missing here, and this config nests its language model under 'text_config': give that "
                       "object, with its model_type, as the config"
                     : "is missing (the model_type's configs have it)");
    }
    return count(key);
  }
  std::optional<double> number(const std::string& key) {
    if (!has(key)) return std::nullopt;
    const Json& v = j_.at(key);
    if (v.is_number()) return v.get<double>();
    error(key, "must be a number, got " + v.dump());
    return std::nullopt;
  }
  std::optional<bool> boolean(const std::string& key) {
    if (!has(key)) return std::nullopt;
    const Json& v = j_.at(key);
    if (v.is_boolean()) return v.get<bool>();
    error(key, "must be true or false, got " + v.dump());
    return std::nullopt;
  }
  std::optional<std::string> text(const std::string& key) {
    if (!has(key)) return std::nullopt;
    const Json& v = j_.at(key);
    if (v.is_string()) return v.get<std::string>();
    error(key, "must be a string, got " + v.dump());
    return std::nullopt;
  }
  const Json& raw(const std::string& key) const { return j_.at(key); }

 private:
  void add(Severity severity, const std::string& key, const std::string& message) {
    problems_.push_back({severity, where_ + " key '" + key + "'", message});
  }
  const Json& j_;
  bool said_nested_ = false;  // the text_config hint, once
  std::string where_;
  Problems& problems_;
};

class Mapper {
 public:
  Mapper(HfModel& hf, ConfigReader& r) : hf_(hf), r_(r) {}

  void set(const std::string& field, const std::string& value, const std::string& keys) {
    hf_.fields.push_back({field, value, keys});
  }
  void count(const std::string& field, const std::string& key, bool required = true) {
    const auto n = required ? r_.required_count(key) : r_.count(key);
    if (n) set(field, std::to_string(*n), key);
  }

  // GPT-2 (transformers' GPT2Config).
  void gpt2() {
    count("layers", "n_layer");
    count("hidden", "n_embd");
    count("heads", "n_head");
    const auto hidden = r_.count("n_embd");
    if (r_.has("n_inner")) {
      count("ffn", "n_inner");
    } else if (hidden) {
      set("ffn", std::to_string(4 * *hidden), "n_inner (null: 4 x n_embd)");
    }
    count("vocab", "vocab_size");
    count("seq_len", "n_positions");
    const std::string act = r_.text("activation_function").value_or("gelu_new");
    if (act.rfind("gelu", 0) != 0) r_.error("activation_function", "'" + act + "' is not a GELU; meshplan's GPT-2 MLP is GELU");
    set("mlp", "gelu", "activation_function (" + act + ")");
    set("norm", "layernorm", "(architecture)");
    set("positions", "learned", "(architecture)");
    set("bias", "true", "(architecture)");
    set("tied_embeddings", r_.boolean("tie_word_embeddings").value_or(true) ? "true" : "false",
        "tie_word_embeddings (default true)");
    double dropout = 0;
    for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) {
      const double p = r_.number(key).value_or(0.1);
      if (!(p >= 0 && p < 1)) r_.error(key, "must be a probability from 0 to below 1, got " + number_text(p));
      dropout = std::max(dropout, p);
    }
    set("dropout", number_text(dropout), "resid_pdrop, embd_pdrop, attn_pdrop (the largest; default 0.1)");
    if (const auto eps = r_.number("layer_norm_epsilon")) set("norm_eps", number_text(*eps), "layer_norm_epsilon");
  }

  // Llama and the decoders built like it (LlamaConfig, MistralConfig, MixtralConfig, Qwen2Config,
  // Qwen2MoeConfig, Qwen3Config, Qwen3MoeConfig, OlmoeConfig, GemmaConfig).
  void llama_like(const std::string& type) {
    count("layers", "num_hidden_layers");
    count("hidden", "hidden_size");
    count("heads", "num_attention_heads");
    if (r_.has("num_key_value_heads")) {
      count("kv_heads", "num_key_value_heads");
    }
    const bool deepseek = type == "deepseek_v2" || type == "deepseek_v3";
    if (deepseek) {
      latent_attention();
    } else if (r_.has("head_dim")) {
      count("head_dim", "head_dim");
    }
    // The MoE types whose experts have their own width keep it in moe_intermediate_size;
    // intermediate_size is then the width of their dense layers, if any (dense_layers_among_experts).
    count("ffn", type == "qwen2_moe" || type == "qwen3_moe" || deepseek ? "moe_intermediate_size" : "intermediate_size");
    count("vocab", "vocab_size");
    count("seq_len", "max_position_embeddings");
    activation(type);
    set("norm", "rmsnorm", "(architecture)");
    set("positions", "rotary", "(architecture)");
    bias(type);
    const bool tied_default = type == "gemma";
    set("tied_embeddings", r_.boolean("tie_word_embeddings").value_or(tied_default) ? "true" : "false",
        std::string("tie_word_embeddings (default ") + (tied_default ? "true" : "false") + ")");
    if (const auto p = r_.number("attention_dropout"); p && *p != 0) set("dropout", number_text(*p), "attention_dropout");
    set("rope_theta", number_text(r_.number("rope_theta").value_or(10000.0)), "rope_theta (default 10000)");
    if (const auto eps = r_.number("rms_norm_eps")) set("norm_eps", number_text(*eps), "rms_norm_eps");
    if (type == "mixtral") {
      count("experts", "num_local_experts");
      count("top_k", "num_experts_per_tok");
    } else if (type == "qwen2_moe" || type == "qwen3_moe" || type == "olmoe") {
      count("experts", "num_experts");
      count("top_k", "num_experts_per_tok");
      if (type != "olmoe") dense_layers_among_experts();
    } else if (deepseek) {
      deepseek_experts();
    }
    if (type == "qwen2_moe") {
      // Qwen2-MoE's shared expert, gated per token by a sigmoid over one output (h weights per layer, not counted).
      if (const auto shared = r_.count("shared_expert_intermediate_size")) {
        set("shared_expert_ffn", std::to_string(*shared),
            "shared_expert_intermediate_size (its sigmoid gate's hidden_size weights per layer not counted)");
      }
    }
    if (type == "qwen3" || type == "qwen3_moe" || type == "olmoe") {
      r_.warning("model_type", "'" + type + "' normalises queries and keys (QK-norm); that norm's few weights and its "
                                            "memory-bound passes are not modelled");
    }
    not_modelled(type);
  }

 private:
  void activation(const std::string& type) {
    const char* key = r_.has("hidden_activation") ? "hidden_activation" : "hidden_act";
    const std::string act = r_.text(key).value_or(type == "gemma" ? "gelu_pytorch_tanh" : "silu");
    if (act == "silu" || act == "swish") {
      set("mlp", "swiglu", std::string(key) + " (" + act + ", gated)");
    } else if (act.rfind("gelu", 0) == 0) {
      set("mlp", "geglu", std::string(key) + " (" + act + ", gated)");
    } else {
      r_.error(key, "'" + act + "' is neither SiLU nor a GELU: meshplan's gated MLPs are SwiGLU and GeGLU");
    }
  }

  // Biases: all linears or none in the schema.
  void bias(const std::string& type) {
    const bool attention = r_.boolean("attention_bias").value_or(false);
    const bool mlp = r_.boolean("mlp_bias").value_or(false);
    if (attention != mlp) {
      r_.warning("attention_bias", std::string("attention_bias ") + (attention ? "true" : "false") + " and mlp_bias " +
                                       (mlp ? "true" : "false") + ": the schema's bias is every linear's or none; "
                                       "set from attention_bias");
    }
    if ((type == "qwen2" || type == "qwen2_moe") && !attention) {
      const auto hidden = r_.count("hidden_size"), heads = r_.count("num_attention_heads");
      const auto kv = r_.has("num_key_value_heads") ? r_.count("num_key_value_heads") : heads;
      const auto layers = r_.count("num_hidden_layers");
      if (hidden && heads && kv && layers) {
        const std::int64_t per_layer = *hidden + 2 * *kv * (*hidden / *heads);
        r_.warning("model_type", "Qwen 2's q, k and v projections have biases (its architecture's, no config key); the "
                                 "schema's bias is every linear's or none, so their " + std::to_string(per_layer) +
                                 " parameters per layer (" + std::to_string(per_layer * *layers) + " in all) are not counted");
      }
    }
    set("bias", attention ? "true" : "false", "attention_bias (default false)");
  }

  // DeepSeek-V2/V3's multi-head latent attention (DeepseekV3Config: q_lora_rank null in V2-Lite, whose
  // queries come from hidden directly). Its head_dim key, where a config has one, is the rotary part's.
  void latent_attention() {
    if (r_.has("q_lora_rank")) count("q_lora_rank", "q_lora_rank");
    count("kv_lora_rank", "kv_lora_rank");
    count("qk_nope_head_dim", "qk_nope_head_dim");
    count("qk_rope_head_dim", "qk_rope_head_dim");
    count("v_head_dim", "v_head_dim");
  }

  // DeepSeekMoE as DeepSeek-V2/V3 configure it (transformers' DeepseekV3DecoderLayer: layer i has
  // experts when i >= first_k_dense_replace and i % moe_layer_freq == 0), its n_shared_experts of
  // moe_intermediate_size each as one shared MLP, and what the schema does not state.
  void deepseek_experts() {
    const auto experts = r_.count("n_routed_experts");
    if (!experts) {
      r_.error("n_routed_experts", "is missing or null: a dense DeepSeek model has no schema here; write a preset file");
      return;
    }
    count("experts", "n_routed_experts");
    count("top_k", "num_experts_per_tok");
    if (const auto shared = r_.count("n_shared_experts"); shared && r_.count("moe_intermediate_size")) {
      set("shared_expert_ffn", std::to_string(*shared * *r_.count("moe_intermediate_size")),
          "n_shared_experts x moe_intermediate_size");
    }
    const auto layers = r_.count("num_hidden_layers");
    const std::int64_t first = r_.has("first_k_dense_replace") ? r_.count("first_k_dense_replace").value_or(0) : 0;
    const std::int64_t freq = r_.count("moe_layer_freq").value_or(1);
    if (layers) {
      std::string list;
      for (std::int64_t i = 0; i < *layers; ++i) {
        if (i < first || i % freq != 0) list += (list.empty() ? "" : ", ") + std::to_string(i);
      }
      if (!list.empty()) {
        set("dense_layers", "[" + list + "]", "first_k_dense_replace, moe_layer_freq");
        count("dense_ffn", "intermediate_size");
      }
    }
    if (r_.count("num_nextn_predict_layers").value_or(0) > 0) {
      r_.warning("num_nextn_predict_layers", "multi-token prediction modules (DeepSeek-V3, Sec. 2.2) are not modelled: "
                                             "their layers, weights and loss are left out");
    }
    // Group-limited routing (V2's device-limited, V3's node-limited): n_group of 1 is none (V2-Lite).
    if (r_.count("n_group").value_or(1) > 1 && r_.count("topk_group")) {
      count("expert_groups", "n_group");
      count("group_top_k", "topk_group");
    }
    if (r_.text("scoring_func").value_or("softmax") != "softmax") {
      r_.warning("scoring_func", "the router's " + r_.text("scoring_func").value_or("") + " scoring is not modelled: "
                                 "tokens are costed as routed evenly over the experts (of their chosen groups)");
    }
  }

  // Which layers are dense among the experts' (Qwen-MoE: layer i has experts when (i + 1) % decoder_sparse_step
  // == 0 and i is not in mlp_only_layers, transformers' Qwen2MoeDecoderLayer): dense_layers, and their
  // MLP's width, intermediate_size, as dense_ffn.
  void dense_layers_among_experts() {
    const auto layers = r_.count("num_hidden_layers");
    if (!layers) return;
    const std::int64_t step = r_.count("decoder_sparse_step").value_or(1);
    std::vector<bool> dense(static_cast<std::size_t>(*layers), false);
    for (std::int64_t i = 0; i < *layers; ++i) dense[static_cast<std::size_t>(i)] = (i + 1) % step != 0;
    if (r_.has("mlp_only_layers")) {
      const Json& listed = r_.raw("mlp_only_layers");
      if (!listed.is_array()) {
        r_.error("mlp_only_layers", "must be a list of layer indices, got " + listed.dump());
        return;
      }
      for (const Json& v : listed) {
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= *layers) {
          r_.error("mlp_only_layers", "must list layers 0 to " + std::to_string(*layers - 1) + ", got " + v.dump());
          return;
        }
        dense[static_cast<std::size_t>(v.get<std::int64_t>())] = true;
      }
    }
    std::string list;
    for (std::int64_t i = 0; i < *layers; ++i) {
      if (dense[static_cast<std::size_t>(i)]) list += (list.empty() ? "" : ", ") + std::to_string(i);
    }
    if (list.empty()) return;
    set("dense_layers", "[" + list + "]", "decoder_sparse_step, mlp_only_layers");
    count("dense_ffn", "intermediate_size");
  }

  // Keys that change the attention or the frequencies but not the shapes.
  void not_modelled(const std::string& type) {
    const bool window_on = type == "mistral" || type == "mixtral" ? true : r_.boolean("use_sliding_window").value_or(false);
    if (window_on) {
      if (const auto window = r_.count("sliding_window")) {
        const auto seq = r_.count("max_position_embeddings");
        if (!seq || *window < *seq) {
          r_.warning("sliding_window", "sliding-window attention (window " + std::to_string(*window) +
                                           ") is not modelled: attention is costed over the whole sequence, the same "
                                           "for sequences up to the window");
        }
      }
    }
    if (r_.has("rope_scaling") && !r_.object_at("rope_scaling")) {
      r_.error("rope_scaling", "must be an object such as {\"rope_type\": \"llama3\", \"factor\": 8.0} or null");
    } else if (r_.has("rope_scaling")) {
      r_.warning("rope_scaling", "is not modelled (it rescales the rotary frequencies): costs do not change, and the "
                                 "executor trains with the unscaled frequencies");
    }
  }

  HfModel& hf_;
  ConfigReader& r_;
};

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// A name for the preset: the checkpoint's own (_name_or_path's last part), else
// the checkpoint folder's (for a config.json) or the file's stem.
std::string model_name(const Json& j, const std::string& display_name, const std::string& type) {
  std::string name;
  if (j.contains("_name_or_path") && j.at("_name_or_path").is_string()) name = j.at("_name_or_path").get<std::string>();
  const std::filesystem::path file(display_name);
  if (name.empty()) name = file.filename() == "config.json" ? file.parent_path().filename().string() : file.stem().string();
  if (name.empty() || name == ".") name = "hf-" + type;
  if (const auto slash = name.find_last_of('/'); slash != std::string::npos) name = name.substr(slash + 1);
  return name;
}

// A problem of the preset written from the config, in the config's terms:
// "config.json:17 key 'num_hidden_layers'" instead of the generated preset's
// "config.json:4 key 'layers'", with the preset field named after the message.
// The line is that of the config's top-level key (json_lines.hpp); a field the
// config does not state (a default, the architecture) keeps no line.
Problem in_config_terms(Problem problem, const HfModel& hf, const std::string& json_text, const std::string& display_name) {
  const auto at = problem.where.find(" key '");
  if (at == std::string::npos) return problem;
  const auto start = at + 6, end = problem.where.find('\'', start);
  if (end == std::string::npos) return problem;
  const std::string field = problem.where.substr(start, end - start);
  for (const HfField& f : hf.fields) {
    if (f.field != field) continue;
    std::size_t n = 0;  // the config key: the first word of `keys` ("rope_theta (default 10000)")
    while (n < f.keys.size() && (std::isalnum(static_cast<unsigned char>(f.keys[n])) || f.keys[n] == '_')) ++n;
    const std::string key = f.keys.substr(0, n);
    const std::map<std::string, int> lines = json_key_lines(json_text);
    const auto mention = key.empty() ? lines.end() : lines.find(key);
    if (mention == lines.end()) {
      problem.where = display_name;
      problem.message = "the preset's '" + field + "' (from " + f.keys + ", " + f.value + "): " + problem.message;
    } else {
      problem.where = display_name + ":" + std::to_string(mention->second) + " key '" + key + "'";
      problem.message += " (as the preset's '" + field + "')";
    }
    return problem;
  }
  return problem;
}

}  // namespace

Loaded<HfModel> read_hf_config_text(const std::string& json_text, const std::string& display_name) {
  Loaded<HfModel> result;
  HfModel& hf = result.value;
  Json j;
  // nlohmann keeps the last of a repeated key; the config's author meant one of them, so say which is repeated.
  std::vector<std::set<std::string>> keys_of_open_objects;
  std::string repeated;
  const Json::parser_callback_t note_repeats = [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) keys_of_open_objects.emplace_back();
    if (event == Json::parse_event_t::object_end && !keys_of_open_objects.empty()) keys_of_open_objects.pop_back();
    if (event == Json::parse_event_t::key && !keys_of_open_objects.empty() && parsed.is_string() &&
        !keys_of_open_objects.back().insert(parsed.get<std::string>()).second && repeated.empty()) {
      repeated = parsed.get<std::string>();
    }
    return true;
  };
  try {
    j = Json::parse(json_text, note_repeats);
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
    result.problems.push_back({Severity::error, display_name, "is not valid JSON: " + json_error_text(e.what())});
    return result;
  }
  if (!repeated.empty()) {
    result.problems.push_back({Severity::error, display_name + " key '" + repeated + "'",
                               "given twice in one object; keep one"});
    return result;
  }
  if (!j.is_object()) {
    result.problems.push_back({Severity::error, display_name, "must be a JSON object (a config.json)"});
    return result;
  }
  ConfigReader reader(j, display_name, result.problems);
  const auto type = reader.text("model_type");
  if (!type) {
    if (!reader.has("model_type")) reader.error("model_type", "is missing: it says which architecture the config describes");
    return result;
  }
  hf.model_type = *type;
  Mapper mapper(hf, reader);
  if (*type == "gpt2") {
    mapper.gpt2();
  } else if (*type == "llama" || *type == "mistral" || *type == "mixtral" || *type == "qwen2" || *type == "qwen2_moe" ||
             *type == "qwen3" || *type == "qwen3_moe" || *type == "olmoe" || *type == "gemma" ||
             *type == "deepseek_v2" || *type == "deepseek_v3") {
    mapper.llama_like(*type);
  } else {
    // A multimodal config (llava, mistral3, gemma3) keeps its language model under text_config.
    std::string nested;
    if (const auto text = j.find("text_config"); text != j.end() && text->is_object()) {
      const auto inner = text->find("model_type");
      nested = "; its language model is under 'text_config'" +
               (inner != text->end() && inner->is_string() ? " (model_type '" + inner->get<std::string>() + "')" : std::string()) +
               ": give that object as the config";
    }
    reader.error("model_type", "'" + *type + "' is not an architecture meshplan maps (gpt2, llama, mistral, mixtral, qwen2, "
                               "qwen2_moe, qwen3, qwen3_moe, olmoe, gemma, deepseek_v2, deepseek_v3)" +
                               (nested.empty() ? "; write a preset file instead (docs/presets.md)" : nested));
    return result;
  }
  if (has_errors(result.problems)) return result;
  hf.model.name = model_name(j, display_name, *type);
  Loaded<ModelSpec> model = load_model_text(hf_model_yaml(hf), display_name);
  for (const Problem& p : model.problems) result.problems.push_back(in_config_terms(p, hf, json_text, display_name));
  hf.model = std::move(model.value);
  hf.model.source = "Hugging Face config.json " + display_name + " (model_type " + *type + ")";
  return result;
}

Loaded<HfModel> read_hf_config(const std::string& path) {
  if (const auto why = why_unreadable(path)) return {{}, {{Severity::error, path, *why + " (a Hugging Face config.json was expected)"}}};
  std::ifstream in(path);
  if (!in) return {{}, {{Severity::error, path, "cannot be read (a Hugging Face config.json was expected)"}}};
  std::ostringstream text;
  text << in.rdbuf();
  return read_hf_config_text(text.str(), path);
}

std::string hf_model_yaml(const HfModel& hf) {
  std::ostringstream y;
  y << "name: " << quoted(hf.model.name) << "\n"
    << "kind: transformer\n"
    << "source: " << quoted("Hugging Face config.json (model_type " + hf.model_type + ")") << "\n";
  for (const HfField& f : hf.fields) y << f.field << ": " << f.value << "   # " << f.keys << "\n";
  return y.str();
}

}  // namespace meshplan
