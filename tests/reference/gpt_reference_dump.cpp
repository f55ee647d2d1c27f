// The C++ half of the PyTorch reference test (gpt_torch_reference.py is the
// other half): builds the executor's GPT (executor/parallel/parallel_gpt.hpp
// on the mesh of one device, which is how `meshplan train` runs a one-device
// plan) for a model YAML (GPT-2 or Llama family), writes its weights as a
// real checkpoint (executor/checkpoint), runs one forward/backward on a fixed
// batch and ten optimizer steps with the real trainer (train_parallel:
// gradient accumulation, global-norm clipping, warmup + cosine, AdamW with
// decay on rank >= 2 tensors), and writes everything a second implementation
// needs to redo the same computation and compare:
//
//   OUT/checkpoint/step-000000/   the initial weights (and zero Adam moments)
//   OUT/reference.json            the model, the batch loss, the gradient
//                                 layout, the training options and every
//                                 step's loss, lr and gradient norm
//   OUT/batch_tokens.i32, batch_targets.i32     [B, T] int32 little-endian
//   OUT/probs.f32                 [B, T, V] float32 little-endian: the softmax
//                                 of the logits (the executor's loss keeps
//                                 the probabilities in place of the logits)
//   OUT/grads.f32                 the flat gradient buffer (layout in the JSON)
//   OUT/train_tokens.i32, train_targets.i32     [steps, micro_batches, B, T]
//
// The weights are not the GPT-2 initialisation: that one (std 0.02, biases 0,
// norm weights 1) leaves every activation so small that GELU is nearly
// linear, the attention nearly uniform and the bias and norm paths
// untested, so a wrong GELU constant would hide below the tolerance. Here
// every matrix is N(0, 1/fan_in), biases N(0, 0.1^2), norm weights
// 1 + N(0, 0.2^2): unit-scale activations that exercise every term.
//
// Built a second time as gpt_reference_dump_cuda (MESHPLAN_REFERENCE_CUDA):
// the same, with the model on a GPU (executor/parallel/cuda_gpt_ops.hpp), so
// the same PyTorch comparison checks the GPU executor.
//
// Usage: gpt_reference_dump MODEL.yaml OUT_DIR   (OUT_DIR must not hold a checkpoint)
// Exit status: 0 written, 1 the model or an output could not be made, 2
// usage, 77 (the CUDA build) no usable GPU.
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "executor/checkpoint/checkpoint.hpp"
#include "executor/data/loader.hpp"
#include "executor/data/random.hpp"
#include "executor/model/parameters.hpp"
#include "executor/parallel/shard_layout.hpp"
#include "executor/train/trainer.hpp"
#include "model/model_spec.hpp"
#include "model/plan_file.hpp"
#include "tiny_gpt.hpp"

#if defined(MESHPLAN_REFERENCE_CUDA)
#include "executor/backend/cuda_backend.hpp"
#include "executor/parallel/cuda_gpt_ops.hpp"
#include "kernels/cuda/cuda_check.hpp"
#endif

namespace meshplan::exec {
namespace {

constexpr std::uint64_t kSeed = 20240601;
constexpr std::int64_t kBatch = 4;         // B: sequences per micro-batch
constexpr std::int64_t kMicroBatches = 2;  // gradient accumulation in the training steps
constexpr std::int64_t kSteps = 10;

// Random token windows: sample s of the stream is drawn from its own engine
// (derive_seed(seed, s)), so the stream is a function of (seed, position)
// and checkpointable like the project's loaders. Every batch handed out is
// recorded, so the reference can replay exactly what the trainer saw.
class RandomTokenLoader final : public data::DataLoader {
 public:
  RandomTokenLoader(std::uint64_t seed, std::int64_t seq_len, std::int64_t vocab)
      : seed_(seed), seq_len_(seq_len), vocab_(vocab) {}

  data::Batch next_batch(std::int64_t samples) override {
    data::Batch batch;
    batch.samples = samples;
    for (std::int64_t s = 0; s < samples; ++s, ++position_) {
      std::mt19937_64 engine(data::derive_seed(seed_, static_cast<std::uint64_t>(position_)));
      for (std::int64_t t = 0; t < seq_len_; ++t) {
        const auto token = static_cast<std::int32_t>(data::uniform_below(engine, static_cast<std::uint64_t>(vocab_)));
        batch.inputs.push_back(static_cast<float>(token));
        recorded_tokens.push_back(token);
      }
      for (std::int64_t t = 0; t < seq_len_; ++t) {
        const auto target = static_cast<std::int32_t>(data::uniform_below(engine, static_cast<std::uint64_t>(vocab_)));
        batch.targets.push_back(target);
        recorded_targets.push_back(target);
      }
    }
    return batch;
  }
  std::int64_t epoch() const override { return 0; }
  std::int64_t samples_per_epoch() const override { return kSamplesPerEpoch; }
  data::BatchShape shape() const override { return {seq_len_, seq_len_, 0, vocab_}; }
  data::LoaderState state() const override { return {seed_, 0, position_}; }
  Problems restore(const data::LoaderState& state) override {
    Problems problems = data::check_loader_state(state, seed_, kSamplesPerEpoch);
    if (!has_errors(problems)) position_ = state.position;
    return problems;
  }

  std::vector<std::int32_t> recorded_tokens, recorded_targets;

 private:
  static constexpr std::int64_t kSamplesPerEpoch = std::int64_t{1} << 40;
  std::uint64_t seed_;
  std::int64_t seq_len_, vocab_;
  std::int64_t position_ = 0;
};

// The reference initialisation described at the top, tensor i from stream derive_seed(seed, i).
std::vector<float> reference_initialisation(const ParameterLayout& layout, std::uint64_t seed) {
  std::vector<float> values(static_cast<std::size_t>(layout.total_elements));
  for (std::size_t i = 0; i < layout.tensors.size(); ++i) {
    const ParameterTensor& tensor = layout.tensors[i];
    std::mt19937_64 engine(data::derive_seed(seed, i));
    const bool matrix = tensor.shape.size() == 2;
    const bool norm_weight = !matrix && (tensor.name.ends_with("ln1.w") || tensor.name.ends_with("ln2.w") ||
                                         tensor.name == "ln_f.w");
    const double stddev = matrix ? 1.0 / std::sqrt(static_cast<double>(tensor.shape[1])) : norm_weight ? 0.2 : 0.1;
    const double mean = norm_weight ? 1.0 : 0.0;
    float* out = values.data() + tensor.offset;
    for (std::int64_t k = 0; k < tensor.elements; ++k)
      out[k] = static_cast<float>(mean + stddev * data::standard_normal(engine));
  }
  return values;
}

// Parameters and both (zero) Adam moments, named as `meshplan train` names them.
std::vector<TensorBlob> parameter_blobs(const ParameterLayout& layout, const std::vector<float>& values) {
  std::vector<TensorBlob> blobs;
  for (const ParameterTensor& t : layout.tensors) {
    const auto begin = values.begin() + static_cast<std::ptrdiff_t>(t.offset);
    blobs.push_back({t.name, t.shape, std::vector<float>(begin, begin + static_cast<std::ptrdiff_t>(t.elements))});
    blobs.push_back({t.name + ".adam_m", t.shape, std::vector<float>(static_cast<std::size_t>(t.elements), 0.0f)});
    blobs.push_back({t.name + ".adam_v", t.shape, std::vector<float>(static_cast<std::size_t>(t.elements), 0.0f)});
  }
  return blobs;
}

// The gradient of one rank holding every tensor whole (the mesh of one), in parameter_layout order.
std::vector<float> full_gradient(parallel::ParallelGpt& model, const ParameterLayout& layout) {
  std::vector<float> grads(static_cast<std::size_t>(layout.total_elements), 0.0f);
  for (parallel::Unit& u : model.units()) {
    const std::vector<float> unit = u.grads.to_host();
    for (const parallel::LocalTensor& t : u.layout.tensors)
      parallel::insert_shard(t, model.shape(), unit.data() + t.offset, grads.data() + layout.at(t.name).offset);
  }
  return grads;
}

// Raw little-endian values (this program runs on little-endian hosts only; checked in main).
template <typename T>
bool write_raw(const std::filesystem::path& path, const T* data, std::int64_t count) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(count * std::int64_t{sizeof(T)}));
  out.close();
  if (!out) std::cerr << "gpt_reference_dump: cannot write " << path.string() << "\n";
  return static_cast<bool>(out);
}

bool report(const Problems& problems) {
  for (const Problem& p : problems) std::cerr << "gpt_reference_dump: " << describe(p) << "\n";
  return !has_errors(problems);
}

int run(const std::string& model_path, const std::filesystem::path& out_dir) {
  Loaded<ModelSpec> spec = load_model(model_path);
  if (!report(spec.problems)) return 1;
  if (spec.value.kind != ModelKind::transformer) {
    std::cerr << "gpt_reference_dump: " << model_path << " is not a transformer\n";
    return 1;
  }
  const TransformerDims& dims = spec.value.transformer;
  const std::int64_t T = dims.seq_len, V = dims.vocab;
#if defined(MESHPLAN_REFERENCE_CUDA)
  if (const std::string problem = kernels::cuda::cuda_device_problem(); !problem.empty()) {
    std::cout << "SKIPPED: no usable GPU (" << problem << ")\n";
    return 77;
  }
  CudaBackend gpu(0);
  testing_support::OneRankGpt gpt(spec.value, kSeed, kBatch, kMicroBatches, T, gpu, parallel::make_cuda_gpt_ops(gpu));
#else
  testing_support::OneRankGpt gpt(spec.value, kSeed, kBatch, kMicroBatches, T);
#endif
  if (!report(gpt.problems) || gpt.model == nullptr) return 1;
  const Loaded<ParameterLayout> layout = parameter_layout(spec.value);
  if (!report(layout.problems)) return 1;
  const std::vector<float> values = reference_initialisation(layout.value, kSeed);
  gpt.model->scatter_full(0, values);

  // The weights, through the project's checkpoint writer; the model as plan files state it.
  CheckpointContents contents;
  contents.step = 0;
  contents.seed = kSeed;
  contents.tensors = parameter_blobs(layout.value, values);
  const nlohmann::json model_json = nlohmann::json::parse(model_to_json(spec.value).dump());
  contents.extra = {{"model", model_json}, {"written_by", "tests/reference/gpt_reference_dump"}};
  if (!report(save_checkpoint((out_dir / "checkpoint").string(), contents))) return 1;

  // One forward/backward on a fixed batch (one micro-batch of the mesh of one).
  RandomTokenLoader batch_loader(kSeed + 1, T, V);
  batch_loader.next_batch(kBatch);  // recorded: the tokens and targets below
  const double loss = gpt.model->forward(0, 0, batch_loader.recorded_tokens.data(), batch_loader.recorded_targets.data());
  const std::int64_t BT = kBatch * T;
  const parallel::Floats& probs_buffer = gpt.model->probabilities(0, 0);
  std::vector<float> probs = probs_buffer.to_host();
  probs.resize(static_cast<std::size_t>(BT * V));
  gpt.model->backward(0, 0, 1.0f, true, [](parallel::Unit&) {});
  const std::vector<float> batch_grads = full_gradient(*gpt.model, layout.value);

  nlohmann::json grads = nlohmann::json::array();
  for (const ParameterTensor& t : layout.value.tensors)
    grads.push_back({{"name", t.name}, {"shape", t.shape}, {"offset", t.offset}});

  // Ten optimizer steps with the real trainer.
  TrainOptions options;
  options.steps = kSteps;
  options.adamw = {.learning_rate = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  options.warmup_steps = 3;
  options.min_lr_fraction = 0.1;
  options.max_grad_norm = 1.0;
  nlohmann::json steps = nlohmann::json::array();
  options.on_step = [&](const StepReport& r) {
    steps.push_back({{"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm}});
  };
  RandomTokenLoader train_loader(kSeed + 2, T, V);
  const TrainResult trained = gpt.train(train_loader, options);
  if (!report(trained.problems)) return 1;

  const nlohmann::json reference = {
      {"model", model_json},
      {"batch", {{"samples", kBatch}, {"seq_len", T}, {"loss", loss}}},
      {"grads", grads},
      {"train",
       {{"micro_batch", kBatch},
        {"micro_batches", kMicroBatches},
        {"steps", options.steps},
        {"learning_rate", options.adamw.learning_rate},
        {"beta1", options.adamw.beta1},
        {"beta2", options.adamw.beta2},
        {"eps", options.adamw.eps},
        {"weight_decay", options.adamw.weight_decay},
        {"warmup_steps", options.warmup_steps},
        {"min_lr_fraction", options.min_lr_fraction},
        {"max_grad_norm", options.max_grad_norm},
        {"records", steps}}},
  };
  std::ofstream json_out(out_dir / "reference.json");
  json_out << reference.dump(2) << "\n";
  json_out.close();
  if (!json_out) {
    std::cerr << "gpt_reference_dump: cannot write " << (out_dir / "reference.json").string() << "\n";
    return 1;
  }
  const std::int64_t train_values = kSteps * kMicroBatches * BT;
  const bool written =
      write_raw(out_dir / "batch_tokens.i32", batch_loader.recorded_tokens.data(), BT) &&
      write_raw(out_dir / "batch_targets.i32", batch_loader.recorded_targets.data(), BT) &&
      write_raw(out_dir / "probs.f32", probs.data(), BT * V) &&
      write_raw(out_dir / "grads.f32", batch_grads.data(), std::ssize(batch_grads)) &&
      write_raw(out_dir / "train_tokens.i32", train_loader.recorded_tokens.data(), train_values) &&
      write_raw(out_dir / "train_targets.i32", train_loader.recorded_targets.data(), train_values);
  return written ? 0 : 1;
}

}  // namespace
}  // namespace meshplan::exec

int main(int argc, char** argv) {
  if constexpr (std::endian::native != std::endian::little) {
    std::cerr << "gpt_reference_dump: writes raw little-endian arrays; this host is big-endian\n";
    return 1;
  }
  if (argc != 3) {
    std::cerr << "usage: gpt_reference_dump MODEL.yaml OUT_DIR\n";
    return 2;
  }
  return meshplan::exec::run(argv[1], argv[2]);
}
