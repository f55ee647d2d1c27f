#include "model/model_spec.hpp"

#include <algorithm>
#include <utility>

#include "model/hf_config.hpp"
#include "model/presets.hpp"
#include "model/text.hpp"
#include "model/yaml_reader.hpp"

namespace meshplan {
namespace {

constexpr std::int64_t kMaxDim = std::int64_t{1} << 40;
// Transformer layers, and ResNet blocks over all stages: 4096, 32x the
// deepest published transformer (Megatron-LM's 1T model: 128 layers, Narayanan
// et al. 2021, Table 1) and 12x ResNet-1001's 333 blocks. The layer graph has
// nodes per layer: a plan file saying 2^20 layers took minutes to read
// (fuzz/fuzz_plan_file.cpp timed out), 4096 take 0.1 s.
constexpr std::int64_t kMaxLayers = std::int64_t{1} << 12;

// Multi-head latent attention's fields (TransformerDims): all four head sizes stated, as DeepSeek's
// configs state them; the query/key head size is qk_nope_head_dim + qk_rope_head_dim.
// expert_groups and group_top_k (TransformerDims): both or neither, on a mixture of experts whose
// groups are equal and whose chosen groups hold at least top_k experts.
void read_expert_groups(YamlMap& root, TransformerDims& t) {
  const auto groups = root.integer("expert_groups", Need::optional, 1, 1 << 20);
  const auto chosen = root.integer("group_top_k", Need::optional, 1, 1 << 20);
  if (!groups && !chosen) return;
  if (root.refused("expert_groups") || root.refused("group_top_k")) return;  // said at its key
  if (!groups || !chosen) {
    root.add_problem(groups ? "group_top_k" : "expert_groups", "group-limited routing needs both expert_groups and group_top_k");
    return;
  }
  t.expert_groups = *groups;
  t.group_top_k = *chosen;
  const std::string g = std::to_string(*groups), m = std::to_string(*chosen);
  if (t.experts == 0) {
    root.add_problem("expert_groups", "groups of experts need experts (this model's MLP is dense)");
  } else if (t.experts % *groups != 0) {
    root.add_problem("expert_groups", "expert_groups (" + g + ") must divide the experts (" + std::to_string(t.experts) + ")");
  } else if (*chosen > *groups) {
    root.add_problem("group_top_k", "group_top_k (" + m + ") exceeds expert_groups (" + g + ")");
  } else if (*chosen * (t.experts / *groups) < t.top_k) {
    root.add_problem("group_top_k", "the " + m + " chosen groups hold " + std::to_string(*chosen * (t.experts / *groups)) +
                                        " experts, fewer than top_k (" + std::to_string(t.top_k) + ")");
  }
}

void read_latent_attention(YamlMap& root, TransformerDims& t, bool head_dim_given) {
  const auto kv_rank = root.integer("kv_lora_rank", Need::optional, 1, kMaxDim);
  const auto q_rank = root.integer("q_lora_rank", Need::optional, 1, kMaxDim);
  const auto nope = root.integer("qk_nope_head_dim", Need::optional, 1, kMaxDim);
  const auto rope = root.integer("qk_rope_head_dim", Need::optional, 2, kMaxDim);
  const auto v = root.integer("v_head_dim", Need::optional, 1, kMaxDim);
  if (!kv_rank) {
    if (root.refused("kv_lora_rank")) return;  // given and refused: said once, at its key
    const std::pair<const char*, bool> stated[] = {
        {"q_lora_rank", q_rank.has_value()}, {"qk_nope_head_dim", nope.has_value()},
        {"qk_rope_head_dim", rope.has_value()}, {"v_head_dim", v.has_value()}};
    for (const auto& [key, given] : stated) {
      if (given) {
        root.add_problem(key, "belongs to multi-head latent attention, which kv_lora_rank turns on; this model "
                              "does not state kv_lora_rank");
      }
    }
    return;
  }
  t.kv_lora_rank = *kv_rank;
  t.q_lora_rank = q_rank.value_or(0);
  if (!nope || !rope || !v) {
    root.add_problem("kv_lora_rank", "multi-head latent attention needs qk_nope_head_dim, qk_rope_head_dim and v_head_dim");
    return;
  }
  if (*rope % 2 != 0) root.add_problem("qk_rope_head_dim", "rotary positions rotate pairs: give an even size");
  if (head_dim_given) {
    root.add_problem("head_dim", "under multi-head latent attention the query/key head size is qk_nope_head_dim + "
                                 "qk_rope_head_dim; state those instead of head_dim");
  }
  if (t.kv_heads != t.heads) {
    root.add_problem("kv_heads", "multi-head latent attention up-projects keys and values for every head: kv_heads "
                                 "must equal heads (" + std::to_string(t.heads) + ")");
  }
  if (t.positions != Positions::rotary) {
    root.add_problem("positions", "multi-head latent attention carries its positions in the rotary part of its "
                                  "keys and queries (qk_rope_head_dim): positions must be rotary");
  }
  t.kv_heads = t.heads;
  t.qk_rope_head_dim = *rope;
  t.head_dim = *nope + *rope;
  t.v_head_dim = *v;
}

void read_transformer(YamlMap& root, TransformerDims& t) {
  t.layers = root.integer("layers", Need::required, 1, kMaxLayers).value_or(0);
  t.hidden = root.integer("hidden", Need::required, 1, kMaxDim).value_or(0);
  t.heads = root.integer("heads", Need::required, 1, 1 << 20).value_or(0);
  t.kv_heads = root.integer("kv_heads", Need::optional, 1, 1 << 20).value_or(t.heads);
  const auto head_dim = root.integer("head_dim", Need::optional, 1, kMaxDim);
  t.ffn = root.integer("ffn", Need::required, 1, kMaxDim).value_or(0);
  t.vocab = root.integer("vocab", Need::required, 1, kMaxDim).value_or(0);
  t.seq_len = root.integer("seq_len", Need::required, 1, kMaxDim).value_or(0);
  const auto mlp = root.choice("mlp", Need::required, {"gelu", "swiglu", "geglu"}).value_or("gelu");
  t.feed_forward = mlp == "swiglu" ? FeedForward::swiglu : mlp == "geglu" ? FeedForward::geglu : FeedForward::gelu;
  t.norm = root.choice("norm", Need::optional, {"layernorm", "rmsnorm"}).value_or("layernorm") == "rmsnorm"
               ? Norm::rmsnorm
               : Norm::layernorm;
  const auto positions = root.choice("positions", Need::optional, {"learned", "rotary", "none"}).value_or("rotary");
  t.positions = positions == "learned" ? Positions::learned : positions == "none" ? Positions::none : Positions::rotary;
  t.bias = root.boolean("bias", Need::optional).value_or(true);
  t.tied_embeddings = root.boolean("tied_embeddings", Need::required).value_or(false);
  t.dropout = root.number("dropout", Need::optional, 0.0, 0.999).value_or(0.0);
  t.rope_theta = root.number("rope_theta", Need::optional, 1.0, 1e12).value_or(10000.0);
  t.norm_eps = root.number("norm_eps", Need::optional, 1e-12, 1e-1).value_or(1e-5);
  t.experts = root.integer("experts", Need::optional, 0, 1 << 20).value_or(0);
  const auto top_k = root.integer("top_k", Need::optional, 1, 1 << 20);
  t.top_k = top_k.value_or(1);
  if (top_k && *top_k > 1 && t.experts == 0 && !root.refused("experts")) {  // top_k: 1 is what plan files write for a dense model
    root.add_problem("top_k", "top_k " + std::to_string(*top_k) + " routes each token to experts; this model's MLP is dense (no experts)");
  }

  read_latent_attention(root, t, head_dim.has_value());
  if (t.latent_attention()) {
    // head_dim is qk_nope_head_dim + qk_rope_head_dim (read_latent_attention)
  } else if (head_dim) {
    t.head_dim = *head_dim;
  } else if (t.heads > 0 && t.hidden % t.heads != 0) {
    root.add_problem("heads", "hidden (" + std::to_string(t.hidden) + ") is not divisible by heads (" +
                                  std::to_string(t.heads) + "); state head_dim explicitly");
  } else if (t.heads > 0) {
    t.head_dim = t.hidden / t.heads;
  }
  if (t.positions == Positions::rotary && !t.latent_attention() && t.head_size() % 2 != 0) {
    root.add_problem(head_dim ? "head_dim" : "heads", "rotary positions rotate pairs of a head's " +
                                                          std::to_string(t.head_size()) +
                                                          " dimensions: the head size must be even (or positions: learned or none)");
  }
  if (t.kv_heads > 0 && t.heads % t.kv_heads != 0) {
    root.add_problem("kv_heads", "heads (" + std::to_string(t.heads) + ") must be a multiple of kv_heads (" +
                                     std::to_string(t.kv_heads) + ")");
  }
  if (t.experts > 0 && t.top_k > t.experts) {
    root.add_problem("top_k", "top_k (" + std::to_string(t.top_k) + ") exceeds experts (" +
                                  std::to_string(t.experts) + ")");
  }
  if (const auto cf = root.number("capacity_factor", Need::optional, 1.0, 1e6)) {
    t.capacity_factor = *cf;
    if (t.experts == 0) {
      root.add_problem("capacity_factor", "a capacity factor needs experts (this model's MLP is dense)");
    } else if (t.top_k <= t.experts && *cf * static_cast<double>(t.top_k) > static_cast<double>(t.experts)) {
      // Past experts / top_k every expert could take every token: more padding than tokens.
      root.add_problem("capacity_factor", "capacity_factor x top_k (" + format("%g", *cf * static_cast<double>(t.top_k)) +
                                              ") exceeds experts (" + std::to_string(t.experts) +
                                              "): an expert never holds more than every token");
    }
  }
  read_expert_groups(root, t);
  if (const auto shared = root.integer("shared_expert_ffn", Need::optional, 1, kMaxDim)) {
    t.shared_expert_ffn = *shared;
    if (t.experts == 0 && !root.refused("experts")) root.add_problem("shared_expert_ffn", "shared experts need routed experts (this model's MLP is dense)");
  }
  if (const auto dense = root.integer_list("dense_layers", Need::optional, 0, kMaxDim)) {
    t.dense_layers = *dense;
    std::sort(t.dense_layers.begin(), t.dense_layers.end());
    if (t.experts == 0) {
      if (!root.refused("experts")) root.add_problem("dense_layers", "names dense layers among experts' ones, but this model has no experts");
    } else if (std::adjacent_find(t.dense_layers.begin(), t.dense_layers.end()) != t.dense_layers.end()) {
      root.add_problem("dense_layers", "names a layer twice");
    } else if (!t.dense_layers.empty() && t.layers > 0 && t.dense_layers.back() >= t.layers) {
      root.add_problem("dense_layers", "names layer " + std::to_string(t.dense_layers.back()) + "; the layers are 0 to " +
                                           std::to_string(t.layers - 1));
    } else if (t.layers > 0 && static_cast<std::int64_t>(t.dense_layers.size()) == t.layers) {
      root.add_problem("dense_layers", "names every layer: a model without experts states no experts");
    }
  }
  if (const auto dense_ffn = root.integer("dense_ffn", Need::optional, 1, kMaxDim)) {
    t.dense_ffn = *dense_ffn;
    if (t.dense_layers.empty() && !root.refused("dense_layers")) root.add_problem("dense_ffn", "is the width of dense_layers' MLP, and no dense_layers are named");
  }
}

void read_mlp(YamlMap& root, MlpDims& m) {
  if (auto sizes = root.integer_list("layer_sizes", Need::required, 1, kMaxDim)) {
    if (sizes->size() < 2) {
      root.add_problem("layer_sizes", "needs at least an input and an output size");
    } else if (static_cast<std::int64_t>(sizes->size()) > kMaxLayers + 1) {  // the search grew quadratically past it
      root.add_problem("layer_sizes", "has " + std::to_string(sizes->size()) + " sizes, " +
                                          std::to_string(sizes->size() - 1) + " layers; at most " +
                                          std::to_string(kMaxLayers) + " layers are allowed");
    }
    m.layer_sizes = *sizes;
  }
  m.activation = root.choice("activation", Need::optional, {"relu", "gelu"}).value_or("relu");
}

void read_cnn(YamlMap& root, CnnDims& c) {
  root.choice("architecture", Need::required, {"resnet-bottleneck"});
  c.image_size = root.integer("image_size", Need::required, 32, 1 << 16).value_or(224);
  c.channels = root.integer("channels", Need::required, 1, 1 << 16).value_or(3);
  c.stem_channels = root.integer("stem_channels", Need::required, 1, 1 << 20).value_or(64);
  const auto stage_blocks = root.integer_list("stage_blocks", Need::required, 1, 1 << 12);
  const auto stage_channels = root.integer_list("stage_channels", Need::required, 1, 1 << 20);
  c.stage_blocks = stage_blocks.value_or(std::vector<std::int64_t>{});
  c.stage_channels = stage_channels.value_or(std::vector<std::int64_t>{});
  c.expansion = root.integer("expansion", Need::required, 1, 64).value_or(4);
  c.classes = root.integer("classes", Need::required, 1, 1 << 24).value_or(1000);
  std::int64_t blocks = 0;
  for (const auto n : c.stage_blocks) blocks += n;  // each <= 2^12: no overflow
  if (blocks > kMaxLayers) {
    root.add_problem("stage_blocks", "has " + std::to_string(blocks) + " blocks in all; at most " +
                                         std::to_string(kMaxLayers) + " are allowed");
  }
  if (stage_blocks && stage_channels && c.stage_blocks.size() != c.stage_channels.size()) {  // both read: else said
    root.add_problem("stage_channels", "must have one entry per stage (stage_blocks has " +
                                           std::to_string(c.stage_blocks.size()) + ")");
  }
}

Loaded<ModelSpec> read_model(const YAML::Node& node, const std::string& display_name) {
  Loaded<ModelSpec> result;
  ModelSpec& model = result.value;
  YamlMap root(node, display_name, "", result.problems);
  model.name = root.text("name", Need::required).value_or("");
  model.source = root.text("source", Need::required).value_or("");
  const auto kind = root.choice("kind", Need::required, {"transformer", "mlp", "cnn"});
  if (!kind) return result;  // the other keys depend on the kind; that one problem is enough
  if (*kind == "transformer") {
    model.kind = ModelKind::transformer;
    read_transformer(root, model.transformer);
  } else if (*kind == "mlp") {
    model.kind = ModelKind::mlp;
    read_mlp(root, model.mlp);
  } else {
    model.kind = ModelKind::cnn;
    read_cnn(root, model.cnn);
  }
  root.finish();
  return result;
}

}  // namespace

std::string to_string(FeedForward feed_forward) {
  switch (feed_forward) {
    case FeedForward::gelu: return "gelu";
    case FeedForward::swiglu: return "swiglu";
    case FeedForward::geglu: return "geglu";
  }
  return "?";
}

std::string to_string(Norm norm) { return norm == Norm::rmsnorm ? "rmsnorm" : "layernorm"; }

std::string to_string(Positions positions) {
  switch (positions) {
    case Positions::learned: return "learned";
    case Positions::rotary: return "rotary";
    case Positions::none: return "none";
  }
  return "?";
}

std::string to_string(ModelKind kind) {
  switch (kind) {
    case ModelKind::transformer: return "transformer";
    case ModelKind::mlp: return "mlp";
    case ModelKind::cnn: return "cnn";
  }
  return "?";
}

Loaded<ModelSpec> load_model(const std::string& name_or_path) {
  if (name_or_path.rfind("hf:", 0) == 0) {
    Loaded<HfModel> hf = read_hf_config(name_or_path.substr(3));
    return {std::move(hf.value.model), std::move(hf.problems)};
  }
  auto file = find_preset(PresetKind::model, name_or_path);
  if (!file.ok()) return {{}, file.problems};
  auto yaml = load_yaml_file(file.value.path, file.value.display_name);
  if (!yaml.ok()) return {{}, yaml.problems};
  auto loaded = read_model(yaml.value, file.value.display_name);
  if (loaded.ok()) add_name_mismatch(file.value, yaml.value, loaded.value.name, loaded.problems);
  return loaded;
}

Loaded<ModelSpec> load_model_text(const std::string& yaml_text, const std::string& display_name) {
  auto yaml = load_yaml_text(yaml_text, display_name);
  if (!yaml.ok()) return {{}, yaml.problems};
  return read_model(yaml.value, display_name);
}

}  // namespace meshplan
