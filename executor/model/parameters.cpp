// Layout first (names, shapes, offsets), then values: the layout alone is
// what a checkpoint or a sharding needs, so it is built without touching memory.
#include "executor/model/parameters.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <random>
#include <vector>

#include "executor/data/random.hpp"

namespace meshplan::exec {

namespace {

void add_tensor(ParameterLayout& layout, std::string name, std::vector<std::int64_t> shape) {
  std::int64_t elements = 1;
  for (const std::int64_t d : shape) elements *= d;
  layout.tensors.push_back({std::move(name), std::move(shape), layout.total_elements, elements});
  layout.total_elements += elements;
}

void unsupported(Problems& problems, const std::string& field, const std::string& what) {
  problems.push_back({Severity::error, field, what + " is not supported by the CPU executor yet"});
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

const ParameterTensor* ParameterLayout::find(const std::string& name) const {
  const auto it = std::find_if(tensors.begin(), tensors.end(), [&](const ParameterTensor& t) { return t.name == name; });
  return it == tensors.end() ? nullptr : &*it;
}

const ParameterTensor& ParameterLayout::at(const std::string& name) const {
  const ParameterTensor* tensor = find(name);
  assert(tensor != nullptr && "no parameter tensor of that name");
  return *tensor;
}

Problems check_supported(const ModelSpec& spec) {
  Problems problems;
  if (spec.kind == ModelKind::cnn) {
    unsupported(problems, "model.kind", "a CNN (kind: cnn)");
    return problems;
  }
  if (spec.kind == ModelKind::mlp) {
    const MlpDims& m = spec.mlp;
    if (m.layer_sizes.size() < 2)
      problems.push_back({Severity::error, "model.layer_sizes", "an MLP needs at least an input and an output size"});
    for (const std::int64_t size : m.layer_sizes)
      if (size <= 0) problems.push_back({Severity::error, "model.layer_sizes", "every layer size must be positive"});
    if (m.activation != "relu" && m.activation != "gelu")
      unsupported(problems, "model.activation", "activation '" + m.activation + "' (allowed: relu, gelu)");
    return problems;
  }
  const TransformerDims& t = spec.transformer;
  if (t.layers <= 0 || t.hidden <= 0 || t.heads <= 0 || t.vocab <= 0 || t.seq_len <= 0 || t.ffn <= 0)
    problems.push_back({Severity::error, "model", "layers, hidden, heads, ffn, vocab and seq_len must be positive"});
  else if (t.head_dim == 0 && t.hidden % t.heads != 0)
    problems.push_back({Severity::error, "model.head_dim", "hidden is not a multiple of heads; state head_dim"});
  if (t.head_size() % 2 != 0 && t.positions == Positions::rotary)
    problems.push_back({Severity::error, "model.head_dim", "rotary positions need an even head_dim"});
  if (t.kv_heads > 0 && t.heads % t.kv_heads != 0)
    problems.push_back({Severity::error, "model.kv_heads", "heads must be a multiple of kv_heads"});
  if (t.experts > 0) unsupported(problems, "model.experts", "a mixture of experts");
  if (t.latent_attention()) unsupported(problems, "model.kv_lora_rank", "multi-head latent attention");
  if (t.dropout > 0)
    problems.push_back({Severity::warning, "model.dropout",
                        "dropout is not implemented by the CPU executor; training runs without it"});
  return problems;
}

Loaded<ParameterLayout> parameter_layout(const ModelSpec& spec) {
  Loaded<ParameterLayout> result;
  result.problems = check_supported(spec);
  if (!result.ok()) return result;
  ParameterLayout& layout = result.value;
  if (spec.kind == ModelKind::mlp) {
    const auto& sizes = spec.mlp.layer_sizes;
    for (std::size_t i = 0; i + 1 < sizes.size(); ++i) {
      add_tensor(layout, "linear" + std::to_string(i) + ".weight", {sizes[i + 1], sizes[i]});
      add_tensor(layout, "linear" + std::to_string(i) + ".bias", {sizes[i + 1]});
    }
    return result;
  }
  const TransformerDims& t = spec.transformer;
  const std::int64_t C = t.hidden, F = t.ffn, F_in = t.gated() ? 2 * F : F;
  const std::int64_t Q = t.heads * t.head_size(), QKV = Q + 2 * t.key_value_heads() * t.head_size();
  const bool norm_bias = t.norm == Norm::layernorm;
  add_tensor(layout, "wte", {t.vocab, C});
  if (t.positions == Positions::learned) add_tensor(layout, "wpe", {t.seq_len, C});
  for (std::int64_t l = 0; l < t.layers; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    add_tensor(layout, p + "ln1.w", {C});
    if (norm_bias) add_tensor(layout, p + "ln1.b", {C});
    add_tensor(layout, p + "qkv.w", {QKV, C});
    if (t.bias) add_tensor(layout, p + "qkv.b", {QKV});
    add_tensor(layout, p + "attn_out.w", {C, Q});
    if (t.bias) add_tensor(layout, p + "attn_out.b", {C});
    add_tensor(layout, p + "ln2.w", {C});
    if (norm_bias) add_tensor(layout, p + "ln2.b", {C});
    add_tensor(layout, p + "fc.w", {F_in, C});
    if (t.bias) add_tensor(layout, p + "fc.b", {F_in});
    add_tensor(layout, p + "fc_out.w", {C, F});
    if (t.bias) add_tensor(layout, p + "fc_out.b", {C});
  }
  add_tensor(layout, "ln_f.w", {C});
  if (norm_bias) add_tensor(layout, "ln_f.b", {C});
  if (!t.tied_embeddings) add_tensor(layout, "lm_head.w", {t.vocab, C});
  return result;
}

template <typename T>
std::span<T> Parameters<T>::value(const std::string& name) {
  const ParameterTensor& t = layout.at(name);
  return std::span<T>(values).subspan(static_cast<std::size_t>(t.offset), static_cast<std::size_t>(t.elements));
}

template <typename T>
std::span<T> Parameters<T>::grad(const std::string& name) {
  const ParameterTensor& t = layout.at(name);
  return std::span<T>(grads).subspan(static_cast<std::size_t>(t.offset), static_cast<std::size_t>(t.elements));
}

template <typename T>
void Parameters<T>::zero_grads() {
  std::fill(grads.begin(), grads.end(), T(0));
}

template <typename T>
Parameters<T> zero_parameters(ParameterLayout layout, Backend& backend) {
  Parameters<T> p;
  p.layout = std::move(layout);
  const auto n = static_cast<std::size_t>(p.layout.total_elements);
  p.values = TrackedVector<T>(n, T(0), TrackedAllocator<T>(MemoryCategory::parameters, backend));
  p.grads = TrackedVector<T>(n, T(0), TrackedAllocator<T>(MemoryCategory::gradients, backend));
  p.adam_m = TrackedVector<T>(n, T(0), TrackedAllocator<T>(MemoryCategory::optimizer, backend));
  p.adam_v = TrackedVector<T>(n, T(0), TrackedAllocator<T>(MemoryCategory::optimizer, backend));
  return p;
}

template <typename T>
Loaded<Parameters<T>> make_parameters(const ModelSpec& spec, std::uint64_t seed, Backend& backend) {
  Loaded<Parameters<T>> result;
  Loaded<ParameterLayout> layout = parameter_layout(spec);
  result.problems = layout.problems;
  if (!layout.ok()) return result;
  result.value = zero_parameters<T>(std::move(layout.value), backend);
  Parameters<T>& p = result.value;

  const bool gpt = spec.kind == ModelKind::transformer;
  const double residual_std = gpt ? 0.02 / std::sqrt(2.0 * static_cast<double>(spec.transformer.layers)) : 0;
  // Each tensor draws from its own engine (derive_seed(seed, i)), so the tensors are filled on several
  // threads with the same values as on one: GPT-2 1.5B's 1.6e9 normal draws took about a minute on one.
  const auto fill = [&](std::size_t i) {
    const ParameterTensor& tensor = p.layout.tensors[i];
    std::mt19937_64 engine(data::derive_seed(seed, i));
    T* out = p.values.data() + tensor.offset;
    if (gpt) {
      if (ends_with(tensor.name, "ln1.w") || ends_with(tensor.name, "ln2.w") || tensor.name == "ln_f.w") {
        std::fill(out, out + tensor.elements, T(1));
      } else if (tensor.shape.size() == 2) {
        const bool residual = ends_with(tensor.name, "attn_out.w") || ends_with(tensor.name, "fc_out.w");
        const double stddev = residual ? residual_std : 0.02;
        for (std::int64_t k = 0; k < tensor.elements; ++k)
          out[k] = static_cast<T>(stddev * data::standard_normal(engine));
      }  // biases and layer-norm biases stay 0
    } else {
      // Both tensors of linear{i} are bounded by 1/sqrt(fan_in); the weight's fan_in is shape[1].
      const ParameterTensor& weight = tensor.shape.size() == 2 ? tensor : p.layout.tensors[i - 1];
      const double bound = 1.0 / std::sqrt(static_cast<double>(weight.shape[1]));
      for (std::int64_t k = 0; k < tensor.elements; ++k)
        out[k] = static_cast<T>(bound * (2.0 * data::uniform_unit(engine) - 1.0));
    }
  };
  // On the rank's OpenMP threads (OMP_NUM_THREADS, as the kernels), for models of 2M values or more:
  // smaller ones are drawn before threads would start.
  const auto tensors = static_cast<std::int64_t>(p.layout.tensors.size());
  const bool threaded = p.layout.total_elements >= (std::int64_t{2} << 20);
#pragma omp parallel for schedule(dynamic, 1) if (threaded)
  for (std::int64_t i = 0; i < tensors; ++i) fill(static_cast<std::size_t>(i));
  return result;
}

template struct Parameters<float>;
template struct Parameters<double>;
template Parameters<float> zero_parameters<float>(ParameterLayout, Backend&);
template Parameters<double> zero_parameters<double>(ParameterLayout, Backend&);
template Loaded<Parameters<float>> make_parameters<float>(const ModelSpec&, std::uint64_t, Backend&);
template Loaded<Parameters<double>> make_parameters<double>(const ModelSpec&, std::uint64_t, Backend&);

}  // namespace meshplan::exec
