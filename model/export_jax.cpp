// `meshplan export --to jax`: a Python module that builds the plan's JAX
// Mesh and the NamedSharding of every weight (parameters, gradients, Adam's
// moments), of the batch and of the activations the model code constrains,
// plus Flax logical-axis rules. Every PartitionSpec is the ShardingSpec's own
// (model/sharding_spec.hpp, partition_text), so the device holding each block
// in JAX is the one meshplan costed; tests/export/jax_check.sh checks that
// with JAX itself. docs/export.md, "JAX", says what maps to what.
#include <map>
#include <sstream>
#include <utility>

#include "model/export.hpp"

namespace meshplan {
namespace {

// A tensor the ShardingSpec writes as two side by side along one dimension
// (attn.kv: keys then values; a gated w_in: gate then up; a LayerNorm: scale
// then bias): that dimension and the two arrays' names. fused < 0: one array.
struct Parts {
  int fused = -1;
  std::vector<std::string> names;
};

Parts exported_parts(const ModelSpec& model, const std::string& name, const ShardingSpec& spec) {
  if (model.kind != ModelKind::transformer) return {-1, {name}};
  const TransformerDims& t = model.transformer;
  const std::string stem = name.substr(0, name.rfind('.') + 1);
  for (std::size_t d = 0; d < spec.dims.size(); ++d) {
    const ShardedDim& dim = spec.dims[d];
    const int fused = static_cast<int>(d);
    if (dim.name == "2kv") return {fused, {stem + "k", stem + "v"}};
    if (dim.name == "ffn" && t.gated() && name.ends_with(".w_in")) {  // the MLP's, the experts' or the shared experts'
      return {fused, {stem + "w_gate", stem + "w_up"}};
    }
    if (dim.name == "norm") {
      if (t.norm == Norm::layernorm) return {fused, {name + ".scale", name + ".bias"}};
      return {-1, {name + ".scale"}};
    }
  }
  return {-1, {name}};
}

// Adds the array, its dimensions as JAX must have them: divisible by the
// mesh axes that split them (JAX shards nothing unevenly). A vocabulary is
// padded up to the next multiple, as Megatron-LM pads its own (the extra rows
// are never looked up); any other dimension that does not divide is an error.
void push_array(Loaded<std::vector<ExportedArray>>& out, std::string name, ShardingSpec spec, const Mesh& mesh) {
  ExportedArray a{std::move(name), {}, {}};
  // The untied output layer is [vocab, hidden] in the spec (rows of the vocabulary, as the embedding);
  // as a Flax Dense kernel it is [in, out]: [hidden, vocab] (the module listed it [vocab, hidden]).
  if (a.name == "head.output" && spec.dims.size() == 2) std::swap(spec.dims[0], spec.dims[1]);
  for (std::size_t d = 0; d < spec.dims.size(); ++d) {
    ShardedDim& dim = spec.dims[d];
    const std::int64_t parts = spec.splits(mesh, d);
    if (dim.size % parts != 0) {
      const std::string where = "dimension '" + dim.name + "' (" + std::to_string(dim.size) + ") of " + a.name +
                                " over " + std::to_string(parts) + " devices";
      if (dim.name != "vocab") {
        out.problems.push_back({Severity::error, "tensor",
                                where + ": JAX shards only dimensions that the mesh axes splitting them divide"});
      } else {
        const std::int64_t padded = (dim.size + parts - 1) / parts * parts;
        const std::string message = "vocabulary padded from " + std::to_string(dim.size) + " to " +
                                    std::to_string(padded) + " rows so that its " + std::to_string(parts) +
                                    " shards are equal, as JAX requires (the extra rows are never looked up)";
        bool said = false;
        for (const Problem& p : out.problems) said = said || p.message == message;
        if (!said) out.problems.push_back({Severity::warning, "model.vocab", message});
        dim.size = padded;
      }
    }
    a.shape.push_back(dim.size);
  }
  a.spec = std::move(spec);
  out.value.push_back(std::move(a));
}

std::string python_tuple(const std::vector<std::int64_t>& values) {
  std::string s = "(";
  for (std::size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + (values.size() == 1 ? ",)" : ")");
}

void write_arrays(std::ostringstream& o, const std::string& name, const std::vector<ExportedArray>& arrays) {
  o << name << " = {\n";
  for (const ExportedArray& a : arrays) {
    o << "    '" << a.name << "': (" << python_tuple(a.shape) << ", " << a.spec.partition_text() << "),\n";
  }
  o << "}\n";
}

// Flax logical-axis rules: each dimension name of the parameters with the mesh
// axes that split it, where every parameter splits it the same way.
std::string logical_axis_rules(const std::vector<ExportedArray>& parameters) {
  std::map<std::string, std::vector<Axis>> rule;
  std::map<std::string, bool> conflicting;
  std::vector<std::string> order;
  for (const ExportedArray& a : parameters) {
    for (const ShardedDim& d : a.spec.dims) {
      auto [it, inserted] = rule.emplace(d.name, d.axes);
      if (inserted) order.push_back(d.name);
      else if (it->second != d.axes) conflicting[d.name] = true;
    }
  }
  std::string text = "LOGICAL_AXIS_RULES = (\n";
  for (const std::string& name : order) {
    if (conflicting[name]) {
      text += "    # '" + name + "': split differently by different parameters; use PARAMS' specs for it\n";
    } else {
      text += "    ('" + name + "', " + partition_entry(rule[name]) + "),\n";
    }
  }
  return text + ")\n";
}

}  // namespace

Loaded<std::vector<ExportedArray>> exported_weights(const PlanFile& file, TensorRole role) {
  Loaded<std::vector<ExportedArray>> result;
  const ModelSpec& model = file.model;
  // The embedding first, then the layers in order, then the head.
  std::vector<std::string> names, head;
  for (std::int64_t layer = 0; layer < sharding_layer_count(model); ++layer) {
    for (const TensorChoice& t : sharding_tensors(model, layer)) {
      if (t.activation) continue;
      if (t.name.starts_with("layer") || t.name.starts_with("linear") || t.name.starts_with("embedding")) {
        if (layer == 0 || !t.name.starts_with("embedding")) names.push_back(t.name);
      } else if (layer == 0) {
        head.push_back(t.name);
      }
    }
  }
  names.insert(names.end(), head.begin(), head.end());
  for (const std::string& name : names) {
    Loaded<ShardingSpec> spec = sharding_spec(model, file.plan, name, role);
    result.problems.insert(result.problems.end(), spec.problems.begin(), spec.problems.end());
    if (!spec.ok()) continue;
    const Parts parts = exported_parts(model, name, spec.value);
    if (parts.fused < 0) {
      push_array(result, parts.names.front(), spec.value, file.plan.mesh);
      continue;
    }
    // Two tensors side by side: two arrays, each split as the fused one.
    ShardingSpec half = spec.value;
    ShardedDim& dim = half.dims[static_cast<std::size_t>(parts.fused)];
    dim.size /= 2;
    dim.name = dim.name == "2kv" ? "kv" : dim.name == "norm" ? "hidden" : dim.name;
    for (const std::string& part : parts.names) push_array(result, part, half, file.plan.mesh);
  }
  return result;
}

Loaded<std::vector<ExportedArray>> exported_activations(const PlanFile& file) {
  Loaded<std::vector<ExportedArray>> result;
  if (file.model.kind != ModelKind::transformer) return result;
  const std::pair<const char*, const char*> kActivations[] = {
      {"layer0.input", "residual"}, {"layer0.mlp.hidden", "mlp_hidden"}, {"head.logits", "logits"}};
  for (const auto& [tensor, name] : kActivations) {
    Loaded<ShardingSpec> spec = sharding_spec(file.model, file.plan, tensor, TensorRole::activation);
    result.problems.insert(result.problems.end(), spec.problems.begin(), spec.problems.end());
    if (spec.ok()) push_array(result, name, spec.value, file.plan.mesh);
  }
  // The token batch of one micro-step: the residual stream's batch and
  // sequence split, without the tp of sequence parallelism (tp ranks read the
  // same tokens).
  if (!result.value.empty()) {
    ShardingSpec tokens = result.value.front().spec;
    tokens.tensor = "batch";
    tokens.dims.pop_back();
    std::erase(tokens.dims[1].axes, Axis::tp);
    push_array(result, "batch", tokens, file.plan.mesh);
  }
  return result;
}

namespace {

// What the module cannot say of the plan: warnings, the module still written.
void add_jax_warnings(const Plan& plan, Problems& problems) {
  if (plan.recompute == Recompute::selective_op) {
    problems.push_back({Severity::warning, "recompute",
                        "JAX has no policy that saves every second matmul (torchtitan's op-level checkpointing); "
                        "written as dots_with_no_batch_dims_saveable, which saves every weight matmul's output"});
  }
  if (plan.overlap_expert_parallel) {
    problems.push_back({Severity::warning, "overlap_expert_parallel",
                        "the module shards the experts; pairing one micro-batch's all-to-alls with another's "
                        "compute is the training loop's (XLA schedules one step as it sees fit): the plan prices "
                        "them hidden"});
  }
  if (tp_comm_overlap_applies(plan)) {
    problems.push_back({Severity::warning, "tp_comm_overlap",
                        "chunking the tp collectives beside their matmuls is XLA's choice (its collective-matmul "
                        "decomposition), not the module's: the plan prices them mostly hidden"});
  }
  if (plan.precision == Precision::fp8) {
    problems.push_back({Severity::warning, "precision",
                        "fp8: the module computes in bfloat16 (COMPUTE_DTYPE); fp8 matmuls are the model code's "
                        "(e.g. Transformer Engine's or AQT's dot_general): the plan prices them at the fp8 rate"});
  }
  if (plan.recompute == Recompute::selective && plan.recompute_modules != kDefaultRecomputeModules) {
    problems.push_back({Severity::warning, "recompute_modules",
                        "JAX has no policy by Megatron-Core's modules (" + recompute_modules_text(plan.recompute_modules) +
                            "); written as dots_with_no_batch_dims_saveable, which saves every weight matmul's "
                            "output and repeats the rest"});
  }
}

}  // namespace

Loaded<std::string> export_jax(const PlanFile& file) {
  Loaded<std::string> result;
  auto error = [&](const std::string& field, const std::string& message) {
    result.problems.push_back({Severity::error, field, message});
  };
  const Plan& plan = file.plan;
  if (file.model.kind == ModelKind::cnn) {
    error("model.kind", "a CNN's ShardingSpec names only its classifier weight; export transformers or MLPs to JAX");
  }
  if (plan.mesh.size(Axis::pp) > 1) {
    error("mesh.pp", "JAX's sharding places arrays on a mesh but has no pipeline schedule: pp > 1 needs a pipelining "
                     "layer in the model code (shard_map over a stage axis); export a plan with pp = 1, or use "
                     "--to torchtitan or --to megatron");
  }
  if (has_errors(result.problems)) return result;

  Loaded<std::vector<ExportedArray>> roles[3] = {exported_weights(file, TensorRole::parameters),
                                                 exported_weights(file, TensorRole::gradients),
                                                 exported_weights(file, TensorRole::optimizer_moment)};
  Loaded<std::vector<ExportedArray>> activations = exported_activations(file);
  // Each once (the roles share their dimensions), and the first few of one field: one cause can
  // refuse every tensor (1,137 lines for a hidden size over 131,072 devices).
  constexpr std::size_t kShownPerField = 4;
  std::map<std::string, std::size_t> per_field;
  for (const auto* part : {&roles[0], &roles[1], &roles[2], &activations}) {
    for (const Problem& p : part->problems) {
      bool said = false;
      for (const Problem& q : result.problems) said = said || q.message == p.message;
      if (said) continue;
      if (++per_field[p.where] <= kShownPerField) result.problems.push_back(p);
    }
  }
  for (const auto& [field, count] : per_field) {
    if (count > kShownPerField) {
      result.problems.push_back({Severity::error, field, std::to_string(count - kShownPerField) + " more the same way"});
    }
  }
  add_jax_warnings(plan, result.problems);
  if (has_errors(result.problems)) return result;

  const Mesh& mesh = plan.mesh;
  std::vector<std::int64_t> shape;
  std::string axes;
  for (const MeshAxis& a : mesh.axes) {
    shape.push_back(a.size);
    axes += (axes.empty() ? "'" : ", '") + to_string(a.axis) + "'";
  }
  if (mesh.axes.empty()) {  // one device: a mesh of one dp rank
    shape.push_back(1);
    axes = "'dp'";
  }
  if (shape.size() == 1) axes += ",";
  const std::int64_t micro_step_batch = plan.micro_batch * mesh.data_parallel_size();
  const char* remat = plan.recompute == Recompute::full        ? "jax.checkpoint_policies.nothing_saveable"
                      : plan.recompute == Recompute::selective || plan.recompute == Recompute::selective_op
                          ? "jax.checkpoint_policies.dots_with_no_batch_dims_saveable"
                                                               : "None";
  const char* compute_dtype = plan.precision == Precision::fp32   ? "float32"
                              : plan.precision == Precision::fp16 ? "float16"
                                                                  : "bfloat16";
  std::ostringstream o;
  o << "# JAX mesh and shardings for " << file.model.name << " on " << mesh.to_string() << " (" << mesh.world_size()
    << " devices), written by `meshplan export` (docs/export.md)\n"
    << R"("""The plan's device mesh and the sharding of every array, for jax.jit.

meshplan rank r is device r of `devices` (jax.devices() by default: process by
process, local devices in order), so the mesh keeps meshplan's placement: the
last mesh axis varies fastest, over the devices nearest each other.

PARAMS, GRADS and OPT_STATE map each weight to (shape, PartitionSpec); weights
are written [in, out], as a Flax kernel is; OPT_STATE is Adam's first moment
and, the same again, its second. Tensors meshplan keeps side by side are two
arrays here (attn.k and attn.v; a gated MLP's w_gate and w_up; a LayerNorm's
scale and bias), each sharded as the pair is. The linear layers' biases are
not listed: each is sharded as its weight's output dimension.
ACTIVATIONS are for jax.lax.with_sharding_constraint in the model code;
ACTIVATIONS['batch'] is the token batch of one accumulation step.
"""
import numpy as np
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

)";
  o << "MESH_AXES = (" << axes << ")\n"
    << "MESH_SHAPE = " << python_tuple(shape) << "\n"
    << "MICRO_BATCH = " << plan.micro_batch << "        # sequences per data-parallel rank per step\n"
    << "GLOBAL_BATCH = " << plan.global_batch << "\n"
    << "ACCUMULATION_STEPS = " << plan.global_batch / std::max<std::int64_t>(1, micro_step_batch)
    << "  # steps of ACTIVATIONS['batch'] per optimizer update\n"
    << "PARAM_DTYPE = 'float32'       # master weights\n"
    << "MOMENT_DTYPE = '" << (plan.bf16_moments ? "bfloat16" : "float32")
    << "'  # Adam's m and v as the plan prices them (bf16_moments); optax.adamw's mu_dtype sets m's only\n"
    << "COMPUTE_DTYPE = '" << compute_dtype << "'\n"
    << "GRAD_DTYPE = '" << (gradients_in_fp32(plan) ? "float32" : compute_dtype)
    << "'  # gradients accumulated and reduced in this dtype, as the plan prices them (fp32_gradients)\n"
    << "# jax.checkpoint(block, policy=REMAT_POLICY) around each layer; None: no rematerialization\n"
    << "REMAT_POLICY = " << remat << "\n\n";
  write_arrays(o, "PARAMS", roles[0].value);
  write_arrays(o, "GRADS", roles[1].value);
  write_arrays(o, "OPT_STATE", roles[2].value);
  write_arrays(o, "ACTIVATIONS", activations.value);
  o << "\n# Flax: with nn.logical_axis_rules(LOGICAL_AXIS_RULES), names are meshplan's dimension names.\n"
    << logical_axis_rules(roles[0].value);
  o << R"(

def make_mesh(devices=None):
    """The plan's Mesh over the first prod(MESH_SHAPE) of `devices`."""
    devices = jax.devices() if devices is None else list(devices)
    size = int(np.prod(MESH_SHAPE))
    if len(devices) < size:
        raise ValueError(f"the plan needs {size} devices, {len(devices)} are present")
    return Mesh(np.asarray(devices[:size], dtype=object).reshape(MESH_SHAPE), MESH_AXES)


def named_shardings(mesh, arrays):
    """{name: NamedSharding} for one of PARAMS, GRADS, OPT_STATE or ACTIVATIONS."""
    return {name: NamedSharding(mesh, spec) for name, (_, spec) in arrays.items()}


if __name__ == "__main__":
    mesh = make_mesh()
    print(mesh)
    for name, (shape, spec) in PARAMS.items():
        print(f"{name:28s} {str(shape):22s} {spec}")
)";
  result.value = o.str();
  return result;
}

}  // namespace meshplan
