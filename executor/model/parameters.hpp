// The parameters of one model as one flat buffer, like llm.c's params_memory:
// a single allocation makes the optimizer one loop, the gradient norm one
// pass, a checkpoint one write, and zeroing the gradients one fill. Each
// tensor is a named (name, shape, offset) view into it, so layers, tests and
// checkpoints address tensors by name, and the gradient and the AdamW moment
// buffers share the same layout (same offsets) as the values.
//
// Supported: decoder-only transformers in the GPT-2 family (GELU MLP, layer
// norm, learned positions, tied embeddings, biases) and the Llama family
// (SwiGLU, RMSNorm, rotary positions, grouped-query attention, untied output
// layer, no biases), GeGLU (Gemma's gated MLP), any mix of those features,
// and MLPs (relu or gelu). Any other feature (experts, CNNs) is reported as a
// Problem by check_supported, never a crash.
//
// Layouts (weights are [out, in], as nn.Linear and llm.c store them):
//   MLP:  linear{i}.weight [out, in], linear{i}.bias [out], i = 0..n-2
//   transformer: wte [V, C]; wpe [maxT, C] with learned positions; then per
//         layer l: layer{l}.ln1.w [C] (and .b with layer norm),
//         layer{l}.qkv.w [Q + 2K, C] (.b [Q + 2K] with biases; Q = heads x
//         head_dim, K = kv_heads x head_dim: the query rows, then the key
//         rows, then the value rows), layer{l}.attn_out.w [C, Q] (.b [C]),
//         layer{l}.ln2.w (.b), layer{l}.fc.w [F, C] (gated: [2F, C], the gate
//         rows then the up rows; .b), layer{l}.fc_out.w [C, F] (.b [C]); then
//         ln_f.w (.b) [C]; then lm_head.w [V, C] when the output layer is not
//         tied to wte. F = ffn (4C in GPT-2). GPT-2's layout is the case with
//         every optional tensor present and no lm_head.
//
// Initialisation is deterministic from a seed on every platform (draws go
// through executor/data/random.hpp; tensor i uses stream derive_seed(seed, i)):
//   GPT-2 (Radford et al. 2019; nanoGPT / llm.c): every matrix and both
//     embeddings ~ N(0, 0.02); the residual projections attn_out.w and
//     fc_out.w ~ N(0, 0.02 / sqrt(2 L)) (GPT-2 paper, section 2.3); biases 0;
//     norm weights 1, biases 0. The Llama family gets the same rule (its
//     Hugging Face initializer_range is 0.02 too; lm_head.w ~ N(0, 0.02)).
//   MLP: PyTorch's nn.Linear default, kaiming_uniform_(a = sqrt(5)), which
//     reduces to weight and bias ~ U(-1/sqrt(in), 1/sqrt(in)).
//
// Memory: the four buffers are TrackedVectors (executor/backend/
// tracked_allocator.hpp): ordinary vectors whose bytes are recorded in a
// Backend's ledger as parameters, gradients and optimizer (m and v), so the
// trainer reports what training really holds.
//
// defines: ParameterTensor, ParameterLayout, check_supported, parameter_layout,
//          Parameters, zero_parameters, make_parameters
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "executor/backend/tracked_allocator.hpp"
#include "model/model_spec.hpp"
#include "model/problem.hpp"

namespace meshplan::exec {

struct ParameterTensor {
  std::string name;                 // "wte", "layer0.qkv.w", "linear1.bias"
  std::vector<std::int64_t> shape;  // row-major
  std::int64_t offset = 0;          // first element in the flat buffer
  std::int64_t elements = 0;        // product of shape
};

struct ParameterLayout {
  std::vector<ParameterTensor> tensors;  // in buffer order, no gaps
  std::int64_t total_elements = 0;

  // The tensor called `name`, or nullptr.
  const ParameterTensor* find(const std::string& name) const;
  // The tensor called `name`; asserts that it exists (layer code asks only for names it made).
  const ParameterTensor& at(const std::string& name) const;
};


// Every feature of `spec` the executor cannot train yet, as
// errors naming the field ("model.norm", "model.experts", ...); dropout > 0
// is a warning (it is omitted: training runs as if dropout were 0).
Problems check_supported(const ModelSpec& spec);

// The layout above; problems from check_supported when unsupported.
Loaded<ParameterLayout> parameter_layout(const ModelSpec& spec);

// Values, gradients and AdamW's two moments, all with the same layout.
// T is float for training (fp32 master weights) and double for gradient checks.
template <typename T>
struct Parameters {
  ParameterLayout layout;
  TrackedVector<T> values{TrackedAllocator<T>(MemoryCategory::parameters)};
  TrackedVector<T> grads{TrackedAllocator<T>(MemoryCategory::gradients)};
  TrackedVector<T> adam_m{TrackedAllocator<T>(MemoryCategory::optimizer)};
  TrackedVector<T> adam_v{TrackedAllocator<T>(MemoryCategory::optimizer)};

  std::span<T> value(const std::string& name);
  std::span<T> grad(const std::string& name);
  void zero_grads();
};

// `layout` with values, gradients and moments all zero, allocated from `backend`.
template <typename T>
Parameters<T> zero_parameters(ParameterLayout layout, Backend& backend = default_backend());

// A layout with values initialised from `seed` as described above and
// gradients and moments at zero, allocated from `backend` (recorded in its ledger).
template <typename T>
Loaded<Parameters<T>> make_parameters(const ModelSpec& spec, std::uint64_t seed, Backend& backend = default_backend());

}  // namespace meshplan::exec
