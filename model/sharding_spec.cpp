// sharding_spec: the conventions of sharding_spec.hpp, tensor by tensor, in
// three phases: locate the tensor (its dimensions, which of them tp and ep
// split, its stage and the rule in words; one function per model kind), split
// its dimensions over the mesh (weights: tp, ep and the data axes of the role;
// activations: the data axes, cp and tp), and place it on pipeline stages.
#include "model/sharding_spec.hpp"

#include <algorithm>
#include <cctype>

#include "model/stage_partition.hpp"

namespace meshplan {
namespace {

// Axes of size > 1 among `wanted`, in mesh order (outer first).
std::vector<Axis> in_mesh_order(const Mesh& mesh, const std::vector<Axis>& wanted) {
  std::vector<Axis> out;
  for (const MeshAxis& a : mesh.axes) {
    if (a.size > 1 && std::find(wanted.begin(), wanted.end(), a.axis) != wanted.end() &&
        std::find(out.begin(), out.end(), a.axis) == out.end()) {
      out.push_back(a.axis);
    }
  }
  return out;
}

bool contains(const std::vector<Axis>& axes, Axis axis) { return std::find(axes.begin(), axes.end(), axis) != axes.end(); }

// A tensor as the first phase finds it: dimensions still whole.
struct Located {
  std::vector<ShardedDim> dims;
  int tp_dim = -1;       // dimension tp splits (-1: none)
  int ep_dim = -1;       // expert dimension
  bool expert = false;
  bool activation = false;
  std::int64_t stage = 0;  // -1: first and last (tied output layer)
  std::string rule;
};

Loaded<Located> failed(const std::string& message) {
  Loaded<Located> result;
  result.problems.push_back({Severity::error, "tensor", message});
  return result;
}

bool parse_layer(const std::string& name, const std::string& prefix, std::int64_t& layer, std::string& rest) {
  if (name.rfind(prefix, 0) != 0) return false;
  std::size_t i = prefix.size();
  std::size_t digits = 0;
  while (i + digits < name.size() && std::isdigit(static_cast<unsigned char>(name[i + digits]))) ++digits;
  if (digits == 0 || digits > 9 || i + digits >= name.size() || name[i + digits] != '.') return false;
  layer = std::stoll(name.substr(i, digits));
  rest = name.substr(i + digits + 1);
  return true;
}

// ---- phase 1: locate the tensor

// The dimensions a transformer's tensors are written with.
struct TransformerSizes {
  std::int64_t q = 0, kv = 0, f_in = 0, seq = 0, norm = 0, batch = 0;
  std::int64_t kv_heads = 0;
  bool moe = false;
};

TransformerSizes transformer_sizes(const TransformerDims& t, const Plan& plan) {
  TransformerSizes s;
  s.q = t.heads * t.head_size();
  s.kv = t.key_value_heads() * t.head_size();
  s.kv_heads = t.key_value_heads();
  s.f_in = t.in_projection_width(t.ffn);
  s.seq = plan.seq_len > 0 ? plan.seq_len : t.seq_len;
  s.norm = t.norm == Norm::layernorm ? 2 * t.hidden : t.hidden;
  s.batch = plan.micro_batch * plan.mesh.data_parallel_size();
  s.moe = t.experts > 0;
  return s;
}

// A tensor of layer block `layer` ("ln1", "attn.q", ..., "mlp.hidden").
Loaded<Located> transformer_layer_tensor(const TransformerDims& t, TransformerSizes s, const std::string& rest,
                                         const std::string& tensor, std::int64_t tp, std::int64_t layer) {
  if (!t.expert_layer(layer)) {  // a dense layer among the experts' (or a dense model): its own MLP width
    s.moe = false;
    s.f_in = t.in_projection_width(t.dense_width());
  }
  const std::int64_t ffn = s.moe ? t.ffn : t.dense_width();
  Loaded<Located> result;
  Located& l = result.value;
  if (rest == "ln1" || rest == "ln2") {
    l.dims = {{"norm", s.norm, {}}};
    l.rule = "norm weights: whole on every tp rank";
  } else if (t.latent_attention() && (rest == "attn.q_down" || rest == "attn.kv_down") &&
             (rest == "attn.kv_down" || t.q_lora_rank > 0)) {
    const bool q = rest == "attn.q_down";
    l.dims = {{"hidden", t.hidden, {}},
              {q ? "q_latent" : "kv_latent", q ? t.q_lora_rank : t.kv_down_width(), {}}};
    l.rule = std::string("latent down-projection") + (q ? "" : " (and the shared rotary key)") +
             ": whole on every tp rank (Megatron-Core's duplicated linear; under sequence parallelism each tp rank "
             "projects its own rows)";
  } else if (t.latent_attention() && (rest == "attn.q_norm" || rest == "attn.kv_norm") &&
             (rest == "attn.kv_norm" || t.q_lora_rank > 0)) {
    const std::int64_t width = rest == "attn.q_norm" ? t.q_lora_rank : t.kv_lora_rank;
    l.dims = {{"norm", t.norm == Norm::layernorm ? 2 * width : width, {}}};
    l.rule = "latent norm weights: whole on every tp rank";
  } else if (t.latent_attention() && (rest == "attn.q_up" || rest == "attn.kv_up") &&
             (rest == "attn.kv_up" || t.q_lora_rank > 0)) {
    const bool q = rest == "attn.q_up";
    l.dims = {{q ? "q_latent" : "kv_latent", q ? t.q_lora_rank : t.kv_lora_rank, {}},
              {q ? "q" : "kv", q ? s.q : t.kv_up_width(), {}}};
    l.tp_dim = 1;
    l.rule = std::string("column-parallel up-projection: output columns (") + (q ? "query" : "key and value") +
             " heads) split over tp";
  } else if (rest == "attn.q" && (!t.latent_attention() || t.q_lora_rank == 0)) {
    l.dims = {{"hidden", t.hidden, {}}, {"q", s.q, {}}};
    l.tp_dim = 1;
    l.rule = "column-parallel: output columns (query heads) split over tp";
  } else if (rest == "attn.kv" && !t.latent_attention()) {
    l.dims = {{"hidden", t.hidden, {}}, {"2kv", 2 * s.kv, {}}};  // key heads, then value heads
    if (t.kv_tp_split(tp) == tp) {
      l.tp_dim = 1;
      l.rule = "column-parallel: output columns (key and value heads) split over tp";
    } else {
      l.rule = "key and value heads: whole on every tp rank, since tp does not divide the " + std::to_string(s.kv_heads) +
               " kv heads (their gradients are summed over tp)";
    }
  } else if (rest == "attn.out") {
    l.dims = {{"q", t.heads * t.value_head_size(), {}}, {"hidden", t.hidden, {}}};  // the heads' outputs
    l.tp_dim = 0;
    l.rule = "row-parallel: input rows (heads) split over tp";
  } else if (rest == "mlp.w_in" || rest == "mlp.w_out") {
    const bool in = rest == "mlp.w_in";
    if (s.moe) {
      l.dims = in ? std::vector<ShardedDim>{{"expert", t.experts, {}}, {"hidden", t.hidden, {}}, {"ffn", s.f_in, {}}}
                  : std::vector<ShardedDim>{{"expert", t.experts, {}}, {"ffn", ffn, {}}, {"hidden", t.hidden, {}}};
      l.ep_dim = 0;
      l.tp_dim = in ? 2 : 1;
      l.expert = true;
    } else {
      l.dims = in ? std::vector<ShardedDim>{{"hidden", t.hidden, {}}, {"ffn", s.f_in, {}}}
                  : std::vector<ShardedDim>{{"ffn", ffn, {}}, {"hidden", t.hidden, {}}};
      l.tp_dim = in ? 1 : 0;
    }
    l.rule = in ? "column-parallel: ffn columns split over tp" : "row-parallel: ffn rows split over tp";
    if (s.moe) l.rule += "; experts split over ep";
  } else if (rest == "mlp.router" && s.moe) {
    l.dims = {{"hidden", t.hidden, {}}, {"expert", t.experts, {}}};
    l.rule = "router: whole on every tp and ep rank (every rank routes its own tokens)";
  } else if ((rest == "mlp.shared.w_in" || rest == "mlp.shared.w_out") && s.moe && t.shared_expert_ffn > 0) {
    const bool in = rest == "mlp.shared.w_in";
    const std::int64_t width = t.shared_expert_ffn, in_width = t.in_projection_width(width);
    l.dims = in ? std::vector<ShardedDim>{{"hidden", t.hidden, {}}, {"ffn", in_width, {}}}
                : std::vector<ShardedDim>{{"ffn", width, {}}, {"hidden", t.hidden, {}}};
    l.tp_dim = in ? 1 : 0;
    l.rule = std::string(in ? "column-parallel: ffn columns split over tp" : "row-parallel: ffn rows split over tp") +
             "; shared experts: whole on every ep rank";
  } else if (rest == "input") {
    l.dims = {{"batch", s.batch, {}}, {"seq", s.seq, {}}, {"hidden", t.hidden, {}}};
    l.activation = true;
    l.rule = "residual stream: whole on every tp rank (no sequence parallelism)";
  } else if (rest == "attn.scores") {
    l.dims = {{"batch", s.batch, {}}, {"heads", t.heads, {}}, {"query", s.seq, {}}, {"key", s.seq, {}}};
    l.tp_dim = 1;
    l.activation = true;
    l.rule = "attention scores: heads split over tp, query rows over cp";
  } else if (rest == "mlp.hidden") {
    l.dims = {{"batch", s.batch, {}}, {"seq", s.seq, {}}, {"ffn", ffn, {}}};
    l.tp_dim = 2;
    l.activation = true;
    l.rule = "MLP inner activation: ffn split over tp (inside Megatron's f/g region)";
  } else {
    return failed("unknown tensor '" + tensor + "'");
  }
  return result;
}

Loaded<Located> transformer_tensor(const ModelSpec& model, const Plan& plan, const std::string& tensor) {
  const TransformerDims& t = model.transformer;
  const TransformerSizes s = transformer_sizes(t, plan);
  const std::int64_t pp = plan.mesh.size(Axis::pp);
  std::int64_t layer = -1;
  std::string rest;
  if (parse_layer(tensor, "layer", layer, rest)) {
    const std::int64_t layers = sharding_layer_count(model);
    if (layer < 0 || layer >= layers) return failed("layer " + std::to_string(layer) + " is out of range 0.." + std::to_string(layers - 1));
    Loaded<Located> result = transformer_layer_tensor(t, s, rest, tensor, plan.mesh.size(Axis::tp), layer);
    result.value.stage = stage_of_layer(layers, plan, layer);
    if (rest == "input" && plan.sequence_parallel) result.value.rule = "residual stream: sequence split over cp and tp (sequence parallelism)";
    return result;
  }
  Loaded<Located> result;
  Located& l = result.value;
  if (tensor == "embedding.tokens") {
    l.dims = {{"vocab", t.vocab, {}}, {"hidden", t.hidden, {}}};
    l.tp_dim = 0;
    l.stage = t.tied_embeddings && pp > 1 ? -1 : 0;
    l.rule = "vocabulary-parallel embedding: rows split over tp";
    if (t.tied_embeddings && pp > 1) l.rule += "; tied to the output layer, so the last stage holds a copy";
  } else if (tensor == "embedding.positions") {
    if (t.positions != Positions::learned) return failed("this model has no learned position embedding");
    l.dims = {{"position", t.seq_len, {}}, {"hidden", t.hidden, {}}};
    l.rule = "position embedding: whole on every tp rank";
  } else if (tensor == "head.norm") {
    l.dims = {{"norm", s.norm, {}}};
    l.stage = pp - 1;
    l.rule = "final norm: whole on every tp rank";
  } else if (tensor == "head.output") {
    if (t.tied_embeddings) return failed("the output layer is tied to embedding.tokens");
    l.dims = {{"vocab", t.vocab, {}}, {"hidden", t.hidden, {}}};
    l.tp_dim = 0;
    l.stage = pp - 1;
    l.rule = "vocabulary-parallel output layer: rows split over tp";
  } else if (tensor == "head.logits") {
    l.dims = {{"batch", s.batch, {}}, {"seq", s.seq, {}}, {"vocab", t.vocab, {}}};
    l.tp_dim = 2;
    l.activation = true;
    l.stage = pp - 1;
    l.rule = std::string(plan.loss == Loss::fused ? "logits (kept in the activation dtype by the fused loss)"
                                                  : "fp32 logits (the eager loss)") +
             " of one micro-batch step: vocabulary split over tp (vocabulary-parallel cross-entropy)";
  } else {
    return failed("unknown tensor '" + tensor + "'");
  }
  return result;
}

Loaded<Located> mlp_tensor(const ModelSpec& model, const Plan& plan, const std::string& tensor) {
  std::int64_t layer = -1;
  std::string rest;
  if (!parse_layer(tensor, "linear", layer, rest) || (rest != "weight" && rest != "output")) {
    return failed("unknown tensor '" + tensor + "' (linear<i>.weight or linear<i>.output)");
  }
  const std::int64_t layers = sharding_layer_count(model);
  if (layer < 0 || layer >= layers) return failed("linear " + std::to_string(layer) + " is out of range 0.." + std::to_string(layers - 1));
  Loaded<Located> result;
  Located& l = result.value;
  const auto i = static_cast<std::size_t>(layer);
  const bool column = layer % 2 == 0;
  l.stage = stage_of_layer(layers, plan, layer);
  if (rest == "weight") {
    l.dims = {{"in", model.mlp.layer_sizes[i], {}}, {"out", model.mlp.layer_sizes[i + 1], {}}};
    l.tp_dim = column ? 1 : 0;
    l.rule = column ? "even linear, column-parallel: outputs split over tp" : "odd linear, row-parallel: inputs split over tp";
  } else {
    l.dims = {{"batch", plan.micro_batch * plan.mesh.data_parallel_size(), {}}, {"out", model.mlp.layer_sizes[i + 1], {}}};
    if (column) l.tp_dim = 1;
    l.activation = true;
    l.rule = column ? "output of a column-parallel linear: features split over tp" : "output of a row-parallel linear: whole after the all-reduce";
  }
  return result;
}

Loaded<Located> cnn_tensor(const ModelSpec& model, const Plan& plan, const std::string& tensor) {
  Loaded<Located> result;
  Located& l = result.value;
  if (tensor == "classifier.weight") {
    const std::int64_t features = model.cnn.stage_channels.empty() ? 0 : model.cnn.stage_channels.back() * model.cnn.expansion;
    l.dims = {{"features", features, {}}, {"classes", model.cnn.classes, {}}};
    l.rule = "CNNs are data-parallel only: whole unless fsdp / ZeRO shards it";
  } else if (tensor == "input.images") {
    const std::int64_t batch = plan.micro_batch * plan.mesh.data_parallel_size();
    l.dims = {{"batch", batch, {}}, {"channels", model.cnn.channels, {}}, {"height", model.cnn.image_size, {}}, {"width", model.cnn.image_size, {}}};
    l.activation = true;
    l.rule = "images of one micro-batch step: batch split over the data-parallel axes";
  } else {
    return failed("unknown tensor '" + tensor + "' (classifier.weight or input.images)");
  }
  return result;
}

Loaded<Located> locate(const ModelSpec& model, const Plan& plan, const std::string& tensor) {
  switch (model.kind) {
    case ModelKind::transformer: return transformer_tensor(model, plan, tensor);
    case ModelKind::mlp: return mlp_tensor(model, plan, tensor);
    case ModelKind::cnn: return cnn_tensor(model, plan, tensor);
  }
  return failed("unknown model kind");
}

// ---- phase 2: split the dimensions over the mesh

// A weight: tp on tp_dim, ep on ep_dim, the data axes of the role on the
// first dimension tp does not split. Routed experts out of tp
// (expert_split) put tp on the expert dimension, inside ep, instead. Returns
// the data axes used.
std::vector<Axis> shard_weight(Located& l, const Plan& plan, ModelState state) {
  const Mesh& mesh = plan.mesh;
  const int zero_stage = plan.zero_stage;
  if (l.expert && expert_split(plan).tokens > 1) {
    l.dims[static_cast<std::size_t>(l.ep_dim)].axes = in_mesh_order(mesh, {Axis::ep, Axis::tp});
    l.tp_dim = -1;
  }
  if (l.tp_dim >= 0) l.dims[static_cast<std::size_t>(l.tp_dim)].axes = in_mesh_order(mesh, {Axis::tp});
  if (l.ep_dim >= 0 && l.dims[static_cast<std::size_t>(l.ep_dim)].axes.empty()) {
    l.dims[static_cast<std::size_t>(l.ep_dim)].axes = in_mesh_order(mesh, {Axis::ep});
  }
  const std::vector<Axis> data = in_mesh_order(mesh, data_sharding_axes(zero_stage, state, l.expert));
  if (data.empty()) return data;
  for (std::size_t d = 0; d < l.dims.size(); ++d) {
    if (static_cast<int>(d) == l.tp_dim || static_cast<int>(d) == l.ep_dim) continue;
    l.dims[d].axes = data;
    return data;
  }
  // Every dimension is taken (a 1-D tp-split vector): nest the data axes inside.
  auto& axes = l.dims.front().axes;
  axes.insert(axes.end(), data.begin(), data.end());
  axes = in_mesh_order(mesh, axes);
  return data;
}

// An activation of one micro-batch step: batch over the data axes, heads /
// ffn / vocabulary over tp, the sequence (or query rows) over cp, and over tp
// too for the residual stream under sequence parallelism.
void shard_activation(Located& l, const Mesh& mesh, bool sequence_parallel) {
  if (l.tp_dim >= 0) l.dims[static_cast<std::size_t>(l.tp_dim)].axes = in_mesh_order(mesh, {Axis::tp});
  l.dims[0].axes = in_mesh_order(mesh, {Axis::dp, Axis::fsdp, Axis::ep});
  if (l.dims.size() >= 3 && (l.dims[1].name == "seq" || l.dims[2].name == "query")) {
    const std::size_t seq_dim = l.dims[1].name == "seq" ? 1 : 2;
    std::vector<Axis> seq_axes = {Axis::cp};
    if (sequence_parallel && l.tp_dim < 0) seq_axes.push_back(Axis::tp);
    l.dims[seq_dim].axes = in_mesh_order(mesh, seq_axes);
  }
}

// ---- phase 3: stages and replication

std::vector<std::int64_t> stages_holding(std::int64_t stage, std::int64_t pp) {
  if (pp == 1) return {0};
  if (stage == -1) return {0, pp - 1};
  return {stage};
}

// Axes of size > 1 (other than pp) that split no dimension.
std::vector<Axis> replicated_axes(const std::vector<ShardedDim>& dims, const Mesh& mesh) {
  std::vector<Axis> out;
  for (const MeshAxis& a : mesh.axes) {
    if (a.size <= 1 || a.axis == Axis::pp) continue;
    bool used = false;
    for (const auto& d : dims) used = used || contains(d.axes, a.axis);
    if (!used) out.push_back(a.axis);
  }
  return out;
}

}  // namespace

std::string to_string(TensorRole role) {
  switch (role) {
    case TensorRole::parameters: return "parameters";
    case TensorRole::gradients: return "gradients";
    case TensorRole::optimizer_moment: return "optimizer moment (Adam m or v)";
    case TensorRole::activation: return "activation";
  }
  return "?";
}

std::optional<ModelState> model_state(TensorRole role) {
  switch (role) {
    case TensorRole::parameters: return ModelState::parameters;
    case TensorRole::gradients: return ModelState::gradients;
    case TensorRole::optimizer_moment: return ModelState::optimizer;
    case TensorRole::activation: return std::nullopt;
  }
  return std::nullopt;
}

std::int64_t sharding_layer_count(const ModelSpec& model) {
  switch (model.kind) {
    case ModelKind::transformer: return model.transformer.layers;
    case ModelKind::mlp: return static_cast<std::int64_t>(model.mlp.layer_sizes.size()) - 1;
    case ModelKind::cnn: {
      std::int64_t blocks = 0;
      for (auto b : model.cnn.stage_blocks) blocks += b;
      return blocks;
    }
  }
  return 0;
}

std::string partition_entry(const std::vector<Axis>& axes) {
  if (axes.empty()) return "None";
  if (axes.size() == 1) return "'" + to_string(axes.front()) + "'";
  std::string text = "(";
  for (std::size_t a = 0; a < axes.size(); ++a) text += (a ? ", '" : "'") + to_string(axes[a]) + "'";
  return text + ")";
}

std::string ShardingSpec::partition_text() const {
  std::string text = "P(";
  for (std::size_t d = 0; d < dims.size(); ++d) text += (d ? ", " : "") + partition_entry(dims[d].axes);
  return text + ")";
}

std::int64_t ShardingSpec::splits(const Mesh& mesh, std::size_t d) const {
  std::int64_t n = 1;
  for (Axis a : dims.at(d).axes) n *= mesh.size(a);
  return n;
}

std::vector<TensorChoice> sharding_tensors(const ModelSpec& model, std::int64_t layer) {
  const std::string l = std::to_string(layer);
  switch (model.kind) {
    case ModelKind::transformer: {
      std::vector<TensorChoice> out = {{"embedding.tokens", false}};
      if (model.transformer.positions == Positions::learned) out.push_back({"embedding.positions", false});
      const TransformerDims& t = model.transformer;
      std::vector<const char*> attention = {"attn.q", "attn.kv"};
      if (t.latent_attention() && t.q_lora_rank > 0) {
        attention = {"attn.q_down", "attn.q_norm", "attn.q_up", "attn.kv_down", "attn.kv_norm", "attn.kv_up"};
      } else if (t.latent_attention()) {
        attention = {"attn.q", "attn.kv_down", "attn.kv_norm", "attn.kv_up"};
      }
      out.push_back({"layer" + l + ".ln1", false});
      for (const char* p : attention) out.push_back({"layer" + l + "." + p, false});
      for (const char* p : {"attn.out", "ln2"}) out.push_back({"layer" + l + "." + p, false});
      const bool experts = model.transformer.expert_layer(layer);
      if (experts) out.push_back({"layer" + l + ".mlp.router", false});
      for (const char* p : {"mlp.w_in", "mlp.w_out"}) out.push_back({"layer" + l + "." + p, false});
      if (experts && model.transformer.shared_expert_ffn > 0) {
        for (const char* p : {"mlp.shared.w_in", "mlp.shared.w_out"}) out.push_back({"layer" + l + "." + p, false});
      }
      out.push_back({"head.norm", false});
      if (!model.transformer.tied_embeddings) out.push_back({"head.output", false});
      out.push_back({"layer" + l + ".input", true});
      out.push_back({"layer" + l + ".attn.scores", true});
      out.push_back({"layer" + l + ".mlp.hidden", true});
      out.push_back({"head.logits", true});
      return out;
    }
    case ModelKind::mlp:
      return {{"linear" + l + ".weight", false}, {"linear" + l + ".output", true}};
    case ModelKind::cnn:
      return {{"classifier.weight", false}, {"input.images", true}};
  }
  return {};
}

Loaded<ShardingSpec> sharding_spec(const ModelSpec& model, const Plan& plan, const std::string& tensor, TensorRole role) {
  Loaded<ShardingSpec> result;
  Loaded<Located> located = locate(model, plan, tensor);
  result.problems = located.problems;
  if (!located.ok()) return result;
  Located& l = located.value;
  const std::optional<ModelState> state = model_state(role);
  if (l.activation != !state) {
    result.problems.push_back(
        {Severity::error, "tensor",
         l.activation ? "'" + tensor + "' is an activation; choose the activation role"
                      : "'" + tensor + "' is a weight; choose parameters, gradients or an optimizer moment"});
    return result;
  }
  ShardingSpec& spec = result.value;
  spec.tensor = tensor;
  spec.role = role;
  if (state) {
    spec.data_axes = shard_weight(l, plan, *state);
  } else {
    shard_activation(l, plan.mesh, plan.sequence_parallel);
  }
  spec.dims = std::move(l.dims);
  spec.rule = std::move(l.rule);
  spec.stages = stages_holding(l.stage, plan.mesh.size(Axis::pp));
  spec.replicated_over = replicated_axes(spec.dims, plan.mesh);
  return result;
}

ShardingSpec gathered(const ShardingSpec& spec, const Mesh& mesh) {
  ShardingSpec out = spec;
  for (auto& d : out.dims) std::erase_if(d.axes, [&](Axis a) { return contains(spec.data_axes, a); });
  out.data_axes.clear();
  out.replicated_over = replicated_axes(out.dims, mesh);
  return out;
}

std::optional<std::vector<std::int64_t>> block_of_device(const ShardingSpec& spec, const Mesh& mesh, std::int64_t rank) {
  const std::int64_t stage = mesh.coordinate(rank, Axis::pp);
  if (std::find(spec.stages.begin(), spec.stages.end(), stage) == spec.stages.end()) return std::nullopt;
  std::vector<std::int64_t> block;
  for (const auto& d : spec.dims) {
    std::int64_t index = 0;
    for (Axis a : d.axes) index = index * mesh.size(a) + mesh.coordinate(rank, a);
    block.push_back(index);
  }
  return block;
}

std::vector<std::int64_t> split_extents(std::int64_t size, std::int64_t parts) {
  std::vector<std::int64_t> out;
  if (parts < 1) return out;
  const std::int64_t chunk = (size + parts - 1) / parts;
  std::int64_t left = size;
  for (std::int64_t i = 0; i < parts; ++i) {
    const std::int64_t take = std::max<std::int64_t>(0, std::min(chunk, left));
    out.push_back(take);
    left -= take;
  }
  return out;
}

std::optional<std::vector<std::int64_t>> block_shape(const ShardingSpec& spec, const Mesh& mesh, std::int64_t rank) {
  const auto block = block_of_device(spec, mesh, rank);
  if (!block) return std::nullopt;
  std::vector<std::int64_t> shape;
  for (std::size_t d = 0; d < spec.dims.size(); ++d) {
    shape.push_back(split_extents(spec.dims[d].size, spec.splits(mesh, d))[static_cast<std::size_t>((*block)[d])]);
  }
  return shape;
}

}  // namespace meshplan
