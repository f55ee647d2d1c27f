// The reference GPT-2 decoder (Radford et al. 2019): the simple, single-rank
// statement of the math that the executor's one GPT
// (executor/parallel/parallel_gpt.hpp, which also trains one-device plans)
// is tested against. It is test code: it runs in double for the
// finite-difference gradient tests, it is what tests/reference/ compares
// with PyTorch, and the parallel matrix (tests/parallel/) compares every
// mesh's loss curve with it. Structured as llm.c's train_gpt2.c: every saved
// activation lives in one buffer carved into named tensors (GptActivations,
// like llm.c's ActivationTensors), the forward walks embedding -> L x [ln1,
// qkv, attention, proj, residual, ln2, fc, gelu, fc_out, residual] -> ln_f
// -> logits (tied to wte) -> softmax cross-entropy, and the backward walks
// the same list in reverse, with a second buffer of the same layout for the
// activation gradients. Per-layer activations are stored [L, B, T, ...] so
// layer l's are a slice. Dropout is omitted (GPT-2 was trained with 0.1;
// llm.c omits it too). Memory: the saved activations are recorded as
// activations, the activation-gradient buffer as workspace.
//
// defines: GptDims, GptActivations, Gpt, make_reference_model
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "executor/backend/tracked_allocator.hpp"
#include "executor/model/matmul_runner.hpp"
#include "executor/model/model.hpp"

namespace meshplan::exec {

struct GptDims {
  std::int64_t vocab = 0;        // V
  std::int64_t max_seq_len = 0;  // maxT: rows of wpe
  std::int64_t layers = 0;       // L
  std::int64_t heads = 0;        // NH
  std::int64_t channels = 0;     // C
  std::int64_t ffn = 0;          // F (4C in GPT-2)
};

// Pointers into one allocation; shapes for a batch of B sequences of T tokens.
template <typename T>
struct GptActivations {
  T* encoded;    // [B, T, C]
  T* ln1;        // [L, B, T, C]
  T* ln1_mean;   // [L, B, T]
  T* ln1_rstd;   // [L, B, T]
  T* qkv;        // [L, B, T, 3C]
  T* atty;       // [L, B, T, C]
  T* att;        // [L, B, NH, T, T]
  T* attproj;    // [L, B, T, C]
  T* residual2;  // [L, B, T, C]
  T* ln2;        // [L, B, T, C]
  T* ln2_mean;   // [L, B, T]
  T* ln2_rstd;   // [L, B, T]
  T* fch;        // [L, B, T, F]
  T* fch_gelu;   // [L, B, T, F]
  T* fcproj;     // [L, B, T, C]
  T* residual3;  // [L, B, T, C]
  T* lnf;        // [B, T, C]
  T* lnf_mean;   // [B, T]
  T* lnf_rstd;   // [B, T]
  T* logits;     // [B, T, V]
  T* probs;      // [B, T, V]
  T* losses;     // [B, T]

  // Which buffer a layout is for. The activation gradients need only the
  // tensors the backward accumulates into: no softmax probabilities (att,
  // probs: the backward reads them from the forward's buffer), no norm
  // statistics, no per-token losses. Those fields are null in a gradient
  // layout; att alone is L x B x NH x T x T, the largest buffer at long sequences.
  enum class Role { activations, gradients };

  // Carves `memory` (resized and zeroed here) for batch B, sequence length T_len.
  void allocate(TrackedVector<T>& memory, const GptDims& d, std::int64_t B, std::int64_t T_len,
                Role role = Role::activations);
  // Elements allocate() carves for batch B, sequence length T_len.
  static std::int64_t elements(const GptDims& d, std::int64_t B, std::int64_t T_len, Role role = Role::activations);
};

template <typename T>
class Gpt final : public Model<T> {
 public:
  // `spec` must pass check_supported. Activations hold max_batch sequences of
  // seq_len tokens (seq_len <= the model's seq_len); forward accepts any batch
  // of at most max_batch sequences of exactly seq_len tokens.
  Gpt(const ModelSpec& spec, Parameters<T> parameters, std::int64_t max_batch, std::int64_t seq_len);

  Parameters<T>& parameters() override { return params_; }
  const Parameters<T>& parameters() const override { return params_; }
  std::int64_t max_batch() const override { return max_batch_; }
  std::int64_t items_per_sample() const override { return seq_len_; }
  Problems check_data(const data::BatchShape& shape) const override;
  T forward(const data::Batch& batch) override;
  void backward(T dloss) override;
  std::int64_t correct_predictions() const override { return correct_; }
  // The last forward's logits, [B, T, V] with the allocated B as stride (read by tests/reference/).
  const T* logits() const { return acts_.logits; }
  Problems set_matmul_precision(Precision precision) override { return matmul_.set_precision(precision); }
  Precision matmul_precision() const override { return matmul_.precision(); }

 private:
  // Offsets of one layer's tensors in the parameter buffer.
  struct LayerOffsets {
    std::int64_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
  };

  GptDims dims_;
  Parameters<T> params_;
  std::int64_t max_batch_;
  std::int64_t seq_len_;
  std::int64_t wte_, wpe_, lnfw_, lnfb_;
  std::vector<LayerOffsets> layers_;

  TrackedVector<T> acts_memory_, grad_acts_memory_;
  GptActivations<T> acts_{}, grad_acts_{};
  MatmulRunner<T> matmul_;

  std::int64_t batch_ = 0;
  std::vector<std::int32_t> tokens_, targets_;
  std::int64_t correct_ = 0;
};

// A Gpt (spec.kind transformer) or, for any other kind, make_model's model;
// arguments as make_model (model.hpp).
template <typename T>
Loaded<std::unique_ptr<Model<T>>> make_reference_model(const ModelSpec& spec, std::uint64_t seed,
                                                       std::int64_t max_batch, std::int64_t seq_len = 0,
                                                       Backend& backend = default_backend());

}  // namespace meshplan::exec
