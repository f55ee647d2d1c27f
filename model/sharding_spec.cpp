// sharding_spec: the conventions of sharding.hpp, tensor by tensor.
#include "gui/core/sharding.hpp"

#include <algorithm>
#include <cctype>

namespace meshplan::studio {
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

std::int64_t layer_count(const ModelSpec& model) {
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

// The ZeRO stage at which dp (and ep, for dense weights) start sharding a state.
int zero_threshold(TensorRole role) {
  switch (role) {
    case TensorRole::parameters: return 3;
    case TensorRole::gradients: return 2;
    case TensorRole::optimizer_moment: return 1;
    case TensorRole::activation: return 99;
  }
  return 99;
}

struct Shape {
  std::vector<ShardedDim> dims;
  int tp_dim = -1;     // dimension tp splits (-1: none)
  int ep_dim = -1;     // expert dimension
  bool expert = false;
};

// Splits for a weight: tp on tp_dim, ep on ep_dim, the data axes on the first dimension tp does not split.
void shard_weight(Shape& shape, const Mesh& mesh, const Plan& plan, TensorRole role) {
  if (shape.tp_dim >= 0) shape.dims[static_cast<std::size_t>(shape.tp_dim)].axes = in_mesh_order(mesh, {Axis::tp});
  if (shape.ep_dim >= 0) shape.dims[static_cast<std::size_t>(shape.ep_dim)].axes = in_mesh_order(mesh, {Axis::ep});
  std::vector<Axis> data = {Axis::fsdp};
  if (plan.zero_stage >= zero_threshold(role)) {
    data.push_back(Axis::dp);
    if (!shape.expert) data.push_back(Axis::ep);
  }
  data = in_mesh_order(mesh, data);
  if (data.empty()) return;
  for (std::size_t d = 0; d < shape.dims.size(); ++d) {
    if (static_cast<int>(d) == shape.tp_dim || static_cast<int>(d) == shape.ep_dim) continue;
    shape.dims[d].axes = data;
    return;
  }
  // Every dimension is taken (a 1-D tp-split vector): nest the data axes inside.
  auto& axes = shape.dims.front().axes;
  axes.insert(axes.end(), data.begin(), data.end());
  axes = in_mesh_order(mesh, axes);
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

std::string ShardingSpec::partition_text() const {
  std::string text = "P(";
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (d) text += ", ";
    if (dims[d].axes.empty()) {
      text += "None";
    } else if (dims[d].axes.size() == 1) {
      text += "'" + to_string(dims[d].axes.front()) + "'";
    } else {
      text += "(";
      for (std::size_t a = 0; a < dims[d].axes.size(); ++a) text += (a ? ", '" : "'") + to_string(dims[d].axes[a]) + "'";
      text += ")";
    }
  }
  return text + ")";
}

std::int64_t ShardingSpec::splits(const Mesh& mesh, std::size_t d) const {
  std::int64_t n = 1;
  for (Axis a : dims.at(d).axes) n *= mesh.size(a);
  return n;
}

std::int64_t stage_of_layer(std::int64_t layers, const Plan& plan, std::int64_t layer) {
  const std::int64_t pp = plan.mesh.size(Axis::pp);
  const std::int64_t v = plan.schedule.kind == ScheduleKind::interleaved ? std::max<std::int64_t>(plan.schedule.virtual_stages, 1) : 1;
  const std::int64_t chunks = pp * v;
  std::int64_t chunk = 0;
  if (!plan.stage_layers.empty()) {
    std::int64_t end = 0;
    for (std::size_t c = 0; c < plan.stage_layers.size(); ++c) {
      end += plan.stage_layers[c];
      if (layer < end) {
        chunk = static_cast<std::int64_t>(c);
        break;
      }
    }
  } else if (layers > 0) {
    chunk = std::min(chunks - 1, layer * chunks / layers);
  }
  return chunk % pp;
}

std::vector<TensorChoice> sharding_tensors(const ModelSpec& model, std::int64_t layer) {
  const std::string l = std::to_string(layer);
  switch (model.kind) {
    case ModelKind::transformer: {
      std::vector<TensorChoice> out = {{"embedding.tokens", false}};
      if (model.transformer.positions == Positions::learned) out.push_back({"embedding.positions", false});
      for (const char* p : {"ln1", "attn.qkv", "attn.out", "ln2", "mlp.w_in", "mlp.w_out"}) out.push_back({"layer" + l + "." + p, false});
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
  ShardingSpec& spec = result.value;
  spec.tensor = tensor;
  spec.role = role;
  const Mesh& mesh = plan.mesh;
  const std::int64_t pp = mesh.size(Axis::pp);
  const std::int64_t layers = layer_count(model);
  const std::int64_t batch = plan.micro_batch * mesh.data_parallel_size();
  auto fail = [&](const std::string& message) {
    result.problems.push_back({Severity::error, "tensor", message});
    return result;
  };

  Shape shape;
  bool activation = false;
  std::int64_t stage = 0;  // -1: first and last (tied output layer)
  std::string rule;
  std::int64_t layer = -1;
  std::string rest;

  if (model.kind == ModelKind::transformer) {
    const TransformerDims& t = model.transformer;
    const std::int64_t head_dim = t.head_dim > 0 ? t.head_dim : t.hidden / std::max<std::int64_t>(t.heads, 1);
    const std::int64_t q = t.heads * head_dim, kv = t.kv_heads * head_dim;
    const bool gated = t.feed_forward != FeedForward::gelu;
    const std::int64_t f_in = gated ? 2 * t.ffn : t.ffn;
    const std::int64_t seq = plan.seq_len > 0 ? plan.seq_len : t.seq_len;
    const std::int64_t norm = t.norm == Norm::layernorm ? 2 * t.hidden : t.hidden;
    const bool moe = t.experts > 0;
    if (tensor == "embedding.tokens") {
      shape.dims = {{"vocab", t.vocab, {}}, {"hidden", t.hidden, {}}};
      shape.tp_dim = 0;
      stage = t.tied_embeddings && pp > 1 ? -1 : 0;
      rule = "vocabulary-parallel embedding: rows split over tp";
      if (t.tied_embeddings && pp > 1) rule += "; tied to the output layer, so the last stage holds a copy";
    } else if (tensor == "embedding.positions") {
      if (t.positions != Positions::learned) return fail("this model has no learned position embedding");
      shape.dims = {{"position", t.seq_len, {}}, {"hidden", t.hidden, {}}};
      rule = "position embedding: whole on every tp rank";
    } else if (tensor == "head.norm") {
      shape.dims = {{"norm", norm, {}}};
      stage = pp - 1;
      rule = "final norm: whole on every tp rank";
    } else if (tensor == "head.output") {
      if (t.tied_embeddings) return fail("the output layer is tied to embedding.tokens");
      shape.dims = {{"vocab", t.vocab, {}}, {"hidden", t.hidden, {}}};
      shape.tp_dim = 0;
      stage = pp - 1;
      rule = "vocabulary-parallel output layer: rows split over tp";
    } else if (tensor == "head.logits") {
      shape.dims = {{"batch", batch, {}}, {"seq", seq, {}}, {"vocab", t.vocab, {}}};
      shape.tp_dim = 2;
      activation = true;
      stage = pp - 1;
      rule = "fp32 logits of one micro-batch step: vocabulary split over tp (vocabulary-parallel cross-entropy)";
    } else if (parse_layer(tensor, "layer", layer, rest)) {
      if (layer < 0 || layer >= layers) return fail("layer " + std::to_string(layer) + " is out of range 0.." + std::to_string(layers - 1));
      stage = stage_of_layer(layers, plan, layer);
      if (rest == "ln1" || rest == "ln2") {
        shape.dims = {{"norm", norm, {}}};
        rule = "norm weights: whole on every tp rank";
      } else if (rest == "attn.qkv") {
        shape.dims = {{"hidden", t.hidden, {}}, {"q+2kv", q + 2 * kv, {}}};
        shape.tp_dim = 1;
        rule = "column-parallel: output columns (heads) split over tp";
      } else if (rest == "attn.out") {
        shape.dims = {{"q", q, {}}, {"hidden", t.hidden, {}}};
        shape.tp_dim = 0;
        rule = "row-parallel: input rows (heads) split over tp";
      } else if (rest == "mlp.w_in" || rest == "mlp.w_out") {
        const bool in = rest == "mlp.w_in";
        if (moe) {
          shape.dims = in ? std::vector<ShardedDim>{{"expert", t.experts, {}}, {"hidden", t.hidden, {}}, {"ffn", f_in, {}}}
                          : std::vector<ShardedDim>{{"expert", t.experts, {}}, {"ffn", t.ffn, {}}, {"hidden", t.hidden, {}}};
          shape.ep_dim = 0;
          shape.tp_dim = in ? 2 : 1;
          shape.expert = true;
        } else {
          shape.dims = in ? std::vector<ShardedDim>{{"hidden", t.hidden, {}}, {"ffn", f_in, {}}}
                          : std::vector<ShardedDim>{{"ffn", t.ffn, {}}, {"hidden", t.hidden, {}}};
          shape.tp_dim = in ? 1 : 0;
        }
        rule = in ? "column-parallel: ffn columns split over tp" : "row-parallel: ffn rows split over tp";
        if (moe) rule += "; experts split over ep";
      } else if (rest == "input") {
        shape.dims = {{"batch", batch, {}}, {"seq", seq, {}}, {"hidden", t.hidden, {}}};
        activation = true;
        rule = plan.sequence_parallel ? "residual stream: sequence split over cp and tp (sequence parallelism)"
                                      : "residual stream: whole on every tp rank (no sequence parallelism)";
      } else if (rest == "attn.scores") {
        shape.dims = {{"batch", batch, {}}, {"heads", t.heads, {}}, {"query", seq, {}}, {"key", seq, {}}};
        shape.tp_dim = 1;
        activation = true;
        rule = "attention scores: heads split over tp, query rows over cp";
      } else if (rest == "mlp.hidden") {
        shape.dims = {{"batch", batch, {}}, {"seq", seq, {}}, {"ffn", t.ffn, {}}};
        shape.tp_dim = 2;
        activation = true;
        rule = "MLP inner activation: ffn split over tp (inside Megatron's f/g region)";
      } else {
        return fail("unknown tensor '" + tensor + "'");
      }
    } else {
      return fail("unknown tensor '" + tensor + "'");
    }
  } else if (model.kind == ModelKind::mlp) {
    if (!parse_layer(tensor, "linear", layer, rest) || (rest != "weight" && rest != "output")) {
      return fail("unknown tensor '" + tensor + "' (linear<i>.weight or linear<i>.output)");
    }
    if (layer < 0 || layer >= layers) return fail("linear " + std::to_string(layer) + " is out of range 0.." + std::to_string(layers - 1));
    const auto i = static_cast<std::size_t>(layer);
    const bool column = layer % 2 == 0;
    stage = stage_of_layer(layers, plan, layer);
    if (rest == "weight") {
      shape.dims = {{"in", model.mlp.layer_sizes[i], {}}, {"out", model.mlp.layer_sizes[i + 1], {}}};
      shape.tp_dim = column ? 1 : 0;
      rule = column ? "even linear, column-parallel: outputs split over tp" : "odd linear, row-parallel: inputs split over tp";
    } else {
      shape.dims = {{"batch", batch, {}}, {"out", model.mlp.layer_sizes[i + 1], {}}};
      if (column) shape.tp_dim = 1;
      activation = true;
      rule = column ? "output of a column-parallel linear: features split over tp" : "output of a row-parallel linear: whole after the all-reduce";
    }
  } else {
    if (tensor == "classifier.weight") {
      const std::int64_t features = model.cnn.stage_channels.empty() ? 0 : model.cnn.stage_channels.back() * model.cnn.expansion;
      shape.dims = {{"features", features, {}}, {"classes", model.cnn.classes, {}}};
      rule = "CNNs are data-parallel only: whole unless fsdp / ZeRO shards it";
    } else if (tensor == "input.images") {
      shape.dims = {{"batch", batch, {}}, {"channels", model.cnn.channels, {}}, {"height", model.cnn.image_size, {}}, {"width", model.cnn.image_size, {}}};
      activation = true;
      rule = "images of one micro-batch step: batch split over the data-parallel axes";
    } else {
      return fail("unknown tensor '" + tensor + "' (classifier.weight or input.images)");
    }
  }

  if (activation != (role == TensorRole::activation)) {
    return fail(activation ? "'" + tensor + "' is an activation; choose the activation role"
                           : "'" + tensor + "' is a weight; choose parameters, gradients or an optimizer moment");
  }
  if (activation) {
    if (shape.tp_dim >= 0) shape.dims[static_cast<std::size_t>(shape.tp_dim)].axes = in_mesh_order(mesh, {Axis::tp});
    shape.dims[0].axes = in_mesh_order(mesh, {Axis::dp, Axis::fsdp, Axis::ep});
    if (shape.dims.size() >= 3 && (shape.dims[1].name == "seq" || shape.dims[2].name == "query")) {
      const std::size_t seq_dim = shape.dims[1].name == "seq" ? 1 : 2;
      std::vector<Axis> seq_axes = {Axis::cp};
      if (plan.sequence_parallel && shape.tp_dim < 0) seq_axes.push_back(Axis::tp);
      shape.dims[seq_dim].axes = in_mesh_order(mesh, seq_axes);
    }
  } else {
    shard_weight(shape, mesh, plan, role);
  }

  spec.dims = shape.dims;
  spec.rule = rule;
  if (stage == -1) {
    spec.stages = {0, pp - 1};
  } else {
    spec.stages = {stage};
  }
  if (pp == 1) spec.stages = {0};
  for (const MeshAxis& a : mesh.axes) {
    if (a.size <= 1 || a.axis == Axis::pp) continue;
    bool used = false;
    for (const auto& d : spec.dims) used = used || std::find(d.axes.begin(), d.axes.end(), a.axis) != d.axes.end();
    if (!used) spec.replicated_over.push_back(a.axis);
  }
  return result;
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

}  // namespace meshplan::studio
