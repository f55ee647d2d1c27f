// The integration test matrix of the parallel executor (issue 6, "Must
// show"): one plan per invocation, run under `mpirun -np <world size>`
// (ctest runs one test per plan, tests/CMakeLists.txt). Every rank trains the
// plan with the parallel runtime; world rank 0 also trains the single-rank
// reference (executor/train/trainer.hpp on tests/reference/reference_gpt.hpp)
// on the same global batches, then compares
//   * the loss of every step: relative difference <= tolerance,
//   * the parameters after the last step, gathered from every shard:
//     ||p - p_ref|| / ||p_ref|| <= tolerance, and
//   * an evaluation of the trained model (evaluate_parallel, every rank) on
//     13 samples, not a multiple of B x D, so the last round is padded,
//     against exec::evaluate of the reference: loss within the tolerance,
//     correct tokens within 2 of 208 (an arg-max may flip on a near-tie),
// prints the largest differences seen, and exits 1 naming the plan and the
// first step (or tensor) that diverges.
//
// The llama-* plans train a Llama-style model (matrix_model) and compare it
// with the executor's GPT on the mesh of one device instead, since the
// reference GPT is GPT-2's architecture only.
//
// The model: GPT-2's block at 4 layers (so pp 2 x v 2 has a layer per
// chunk), C = 32, 4 heads, F = 128, T = 16, and vocabulary 257, odd, so
// tp = 2 splits it 129 + 128 and the padded row of the second shard must be
// masked for the loss to be right. Data: byte-level text (tokens < 256).
// fp32, seed 7, global batch 8 sequences, 20 steps, AdamW with weight decay,
// warmup and clipping at 1.0 (active: the early gradient norms exceed it).
//
// --device fake runs the plan's model on a stand-in device whose memory the
// host cannot touch (tests/fake_device.hpp) with the CPU's ops behind
// pointer translation, every collective staged through host memory
// (comm/staged_communicator.hpp), as several ranks sharing one GPU run it;
// the CUDA build of this program (parallel_matrix_cuda) adds --device cuda,
// the same on the GPU (ranks share GPU 0, or the launcher's local rank's).
//
// usage: parallel_matrix <plan> [--tolerance X] [--steps N] [--device cpu|fake|cuda]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "executor/comm/mesh_comms.hpp"
#include "executor/comm/mpi_communicator.hpp"
#include "executor/comm/staged_communicator.hpp"
#include "executor/data/text.hpp"
#include "executor/model/model.hpp"
#include "executor/parallel/parallel_gpt.hpp"
#include "executor/parallel/parallel_trainer.hpp"
#include "executor/train/trainer.hpp"
#include "reference/reference_gpt.hpp"
#include "../fake_device.hpp"
#include "../fake_device_ops.hpp"
#include "../tiny_gpt.hpp"

#if defined(MESHPLAN_MATRIX_CUDA)
#include "executor/backend/cuda_backend.hpp"
#include "executor/parallel/cuda_gpt_ops.hpp"
#include "kernels/cuda/cuda_check.hpp"
#endif

namespace {

using namespace meshplan;

struct MatrixPlan {
  std::string mesh;
  int zero_stage = 0;
  bool sequence_parallel = false;
  std::string schedule = "1f1b";
  bool llama = false;  // the Llama-style model (matrix_model), against ParallelGpt on one rank
};

const std::map<std::string, MatrixPlan>& matrix_plans() {
  static const std::map<std::string, MatrixPlan> plans = [] {
  std::map<std::string, MatrixPlan> gpt = {
      {"one", {"dp=1", 0, false, "1f1b"}},
      {"dp2", {"dp=2", 0, false, "1f1b"}},
      {"dp2-zero1", {"dp=2", 1, false, "1f1b"}},
      {"dp2-zero2", {"dp=2", 2, false, "1f1b"}},
      {"fsdp2", {"fsdp=2", 0, false, "1f1b"}},
      {"dp2-zero3", {"dp=2", 3, false, "1f1b"}},
      {"dp2-fsdp2", {"dp=2,fsdp=2", 0, false, "1f1b"}},
      {"tp2", {"tp=2", 0, false, "1f1b"}},
      {"tp2-sp", {"tp=2", 0, true, "1f1b"}},
      {"pp2-gpipe", {"pp=2", 0, false, "gpipe"}},
      {"pp2-1f1b", {"pp=2", 0, false, "1f1b"}},
      {"pp2-interleaved", {"pp=2", 0, false, "interleaved:2"}},
      {"pp2-zb-h1", {"pp=2", 0, false, "zb-h1"}},
      {"dp2-tp2", {"dp=2,tp=2", 0, false, "1f1b"}},
      {"fsdp2-tp2", {"fsdp=2,tp=2", 0, false, "1f1b"}},
      {"tp2-pp2", {"pp=2,tp=2", 0, false, "1f1b"}},
      {"dp2-tp2-pp2", {"dp=2,pp=2,tp=2", 0, false, "1f1b"}},
      // Beyond the list: the remaining knobs together on 8 ranks.
      {"dp2-zero1-tp2-sp-pp2-interleaved", {"dp=2,pp=2,tp=2", 1, true, "interleaved:2"}},
      {"fsdp2-tp2-sp-pp2-zb-h1", {"fsdp=2,pp=2,tp=2", 0, true, "zb-h1"}},
      {"dp2-zero2-tp2-pp2-gpipe", {"dp=2,pp=2,tp=2", 2, false, "gpipe"}},
  };
  // Every multi-rank plan again for the Llama-style model: grouped-query attention split over tp,
  // rotary positions, SwiGLU, RMSNorm, an untied output layer (its own unit on the last stage), no biases.
  std::map<std::string, MatrixPlan> all = gpt;
  for (const auto& [name, plan] : gpt) {
    if (name == "one") continue;  // its yardstick is itself
    MatrixPlan llama = plan;
    llama.llama = true;
    all.emplace("llama-" + name, llama);
  }
  // tp = 4 does not divide the Llama-style model's 2 key/value heads: every tp rank holds both
  // (replicated) and their gradients are summed over tp.
  all.emplace("llama-tp4", MatrixPlan{"tp=4", 0, false, "1f1b", true});
  all.emplace("llama-tp4-sp", MatrixPlan{"tp=4", 0, true, "1f1b", true});
  all.emplace("llama-dp2-zero2-tp4-sp", MatrixPlan{"dp=2,tp=4", 2, true, "1f1b", true});
  all.emplace("llama-fsdp2-tp4", MatrixPlan{"fsdp=2,tp=4", 0, false, "1f1b", true});
  return all;
  }();
  return plans;
}

// 257 does not divide over tp = 2: the vocabulary-parallel padding is exercised.
// The Llama-style model: 4 query heads sharing 2 key/value heads (tp = 2 holds
// one kv head per rank, tp = 4 both), head_dim 8, SwiGLU with ffn 48, RMSNorm, rotary
// positions at Llama 3's theta, untied output layer, no biases.
ModelSpec matrix_model(bool llama) {
  ModelSpec spec = testing_support::tiny_gpt_spec(llama ? "llama-matrix" : "gpt-matrix", 4, 32, 4, 128, 257, 16);
  if (!llama) return spec;
  TransformerDims& t = spec.transformer;
  testing_support::set_llama_layers(t, 2);
  t.ffn = 48;
  t.rope_theta = 500000;
  return spec;
}

// What the single-device run gives for comparison.
struct SingleDevice {
  bool ok = false;
  std::vector<double> losses;
  std::vector<float> params;  // parameter_layout order
  exec::EvalResult evaluated;
};

// A deterministic corpus of a few kilobytes: varied enough that the loss moves.
std::vector<std::uint8_t> matrix_corpus() {
  const std::string text =
      "Pipeline parallelism splits the layers of a model into stages; tensor parallelism splits each layer's "
      "matrices; data parallelism splits the batch. The loss of every plan must equal the loss of one device, "
      "step after step, because they compute the same sums in another order. 0123456789 {}[]()<>;:,.!? ";
  std::vector<std::uint8_t> corpus;
  for (int copy = 0; copy < 12; ++copy)
    for (std::size_t i = 0; i < text.size(); ++i)
      corpus.push_back(static_cast<std::uint8_t>(text[(i * static_cast<std::size_t>(copy + 1)) % text.size()]));
  return corpus;
}

std::unique_ptr<data::DataLoader> matrix_loader(std::uint64_t seed, std::int64_t T) {
  std::vector<std::uint8_t> corpus = matrix_corpus();
  const data::TextSplitRange range{0, std::ssize(corpus)};
  return std::make_unique<data::TextLoader>(std::move(corpus), range, T, seed);
}

exec::TrainOptions matrix_options(std::int64_t steps) { return testing_support::tiny_gpt_train_options(steps); }

// Evaluation samples: not a multiple of B x D, so the last round is padded.
constexpr std::int64_t kEvalSamples = 13;

double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

// The reference GPT (tests/reference/reference_gpt.hpp) trained on the same global batches.
SingleDevice reference_gpt(const ModelSpec& spec, std::uint64_t seed, std::int64_t micro_batch, std::int64_t global_batch,
                           std::int64_t T, std::int64_t steps) {
  SingleDevice out;
  auto reference = exec::make_reference_model<float>(spec, seed, micro_batch, T);
  if (!reference.ok()) return out;
  exec::TrainOptions options = matrix_options(steps);
  options.micro_batch = micro_batch;
  options.micro_batches = global_batch / micro_batch;
  options.on_step = [&](const exec::StepReport& r) { out.losses.push_back(r.loss); };
  auto loader = matrix_loader(seed, T);
  if (!exec::train(*reference.value, *loader, options).ok()) return out;
  const auto& values = reference.value->parameters().values;
  out.params.assign(values.begin(), values.end());
  auto eval_loader = matrix_loader(seed + 1, T);
  out.evaluated = exec::evaluate(*reference.value, *eval_loader, kEvalSamples);
  out.ok = true;
  return out;
}

// The executor's GPT on the mesh of one device (what `meshplan train` runs for
// a one-device plan) on the same global batches: the yardstick for the
// features the reference GPT does not have (the Llama family's), whose ops are
// each checked against double-precision references in tests/test_kernels.cpp.
SingleDevice one_rank_parallel(const ModelSpec& spec, std::uint64_t seed, std::int64_t micro_batch,
                               std::int64_t global_batch, std::int64_t T, std::int64_t steps) {
  SingleDevice out;
  testing_support::OneRankGpt gpt(spec, seed, micro_batch, global_batch / micro_batch, T);
  if (gpt.model == nullptr) {
    for (const auto& p : gpt.problems) std::fprintf(stderr, "parallel_matrix one rank: %s\n", describe(p).c_str());
    return out;
  }
  exec::TrainOptions options = matrix_options(steps);
  options.on_step = [&](const exec::StepReport& r) { out.losses.push_back(r.loss); };
  auto loader = matrix_loader(seed, T);
  if (!gpt.train(*loader, options).ok()) return out;
  out.params = gpt.model->gather_full(0);
  auto eval_loader = matrix_loader(seed + 1, T);
  out.evaluated = exec::parallel::evaluate_parallel(*gpt.model, *eval_loader, kEvalSamples);
  out.ok = true;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  auto world = exec::comm::mpi_world(&argc, &argv);
  if (!world.ok()) {
    for (const auto& p : world.problems) std::fprintf(stderr, "parallel_matrix: %s\n", describe(p).c_str());
    return 2;
  }
  exec::comm::Communicator& comm = *world.value;
  if (argc < 2 || matrix_plans().count(argv[1]) == 0) {
    std::fprintf(stderr, "usage: parallel_matrix <plan> [--tolerance X] [--steps N]; plans:");
    for (const auto& [name, plan] : matrix_plans()) std::fprintf(stderr, " %s", name.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  const std::string name = argv[1];
  double tolerance = 1e-5;
  std::int64_t steps = 20;
  std::string device_name = "cpu";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--tolerance") tolerance = std::atof(argv[i + 1]);
    if (flag == "--steps") steps = std::atoll(argv[i + 1]);
    if (flag == "--device") device_name = argv[i + 1];
  }
  // The device the parallel run lives on, its ops, and the world on its memory.
  std::unique_ptr<exec::Backend> device;
  std::unique_ptr<exec::parallel::GptOps> ops;
  if (device_name == "fake") {
    device = std::make_unique<testing_support::FakeDevice>();
    ops = std::make_unique<testing_support::FakeDeviceOps>();
#if defined(MESHPLAN_MATRIX_CUDA)
  } else if (device_name == "cuda") {
    if (const std::string problem = kernels::cuda::cuda_device_problem(); !problem.empty()) {
      if (comm.rank() == 0) std::printf("SKIPPED: no usable GPU (%s)\n", problem.c_str());
      return 77;
    }
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    auto gpu = std::make_unique<exec::CudaBackend>((local ? std::atoi(local) : 0) % exec::CudaBackend::device_count());
    ops = exec::parallel::make_cuda_gpt_ops(*gpu);
    device = std::move(gpu);
#endif
  } else if (device_name != "cpu") {
    std::fprintf(stderr, "parallel_matrix: --device %s: cpu or fake%s\n", device_name.c_str(),
#if defined(MESHPLAN_MATRIX_CUDA)
                 " or cuda"
#else
                 " (cuda in parallel_matrix_cuda)"
#endif
    );
    return 2;
  }
  std::unique_ptr<exec::comm::Communicator> staged_world;
  if (device) staged_world = std::make_unique<exec::comm::StagedCommunicator>(comm.split(0, comm.rank(), "world"), *device);
  const MatrixPlan& entry = matrix_plans().at(name);
  const ModelSpec spec = matrix_model(entry.llama);
  const std::uint64_t seed = 7;
  const std::int64_t T = spec.transformer.seq_len, micro_batch = 2, global_batch = 8;

  Plan plan;
  plan.mesh = parse_mesh(entry.mesh, "mesh").value;
  plan.micro_batch = micro_batch;
  plan.global_batch = global_batch;
  plan.zero_stage = entry.zero_stage;
  plan.sequence_parallel = entry.sequence_parallel;
  plan.schedule = *parse_schedule(entry.schedule);
  plan.precision = Precision::fp32;
  plan.gradient_bucket_bytes = 64 * 1024;  // a few buckets even for this small model

  auto groups = exec::comm::MeshCommunicators::create(staged_world ? *staged_world : comm, plan.mesh);
  auto model = groups.ok() ? exec::parallel::ParallelGpt::create(spec, plan, groups.value, seed, T,
                                                                 device ? *device : exec::default_backend(), std::move(ops))
                           : Loaded<std::unique_ptr<exec::parallel::ParallelGpt>>{};
  if (!groups.ok() || !model.ok()) {
    for (const auto& p : groups.problems) std::fprintf(stderr, "parallel_matrix %s: %s\n", name.c_str(), describe(p).c_str());
    for (const auto& p : model.problems) std::fprintf(stderr, "parallel_matrix %s: %s\n", name.c_str(), describe(p).c_str());
    return 1;
  }

  exec::TrainOptions options = matrix_options(steps);
  options.micro_batch = micro_batch;
  options.micro_batches = plan.micro_batches();
  std::vector<double> losses, norms;
  options.on_step = [&](const exec::StepReport& r) {
    losses.push_back(r.loss);
    norms.push_back(r.grad_norm);
  };
  auto loader = matrix_loader(seed, T);
  const exec::TrainResult trained = exec::parallel::train_parallel(*model.value, plan, *loader, options);
  for (const auto& p : trained.problems) std::fprintf(stderr, "parallel_matrix %s: %s\n", name.c_str(), describe(p).c_str());
  const std::vector<float> params = model.value->gather_full(0);
  if (!trained.ok()) return 1;
  auto eval_loader = matrix_loader(seed + 1, T);
  const exec::EvalResult evaluated = exec::parallel::evaluate_parallel(*model.value, *eval_loader, kEvalSamples);
  if (comm.rank() != 0) return 0;

  const SingleDevice single = entry.llama ? one_rank_parallel(spec, seed, micro_batch, global_batch, T, steps)
                                          : reference_gpt(spec, seed, micro_batch, global_batch, T, steps);
  if (!single.ok || single.losses.size() != losses.size()) {
    std::fprintf(stderr, "parallel_matrix %s: the single-device run failed or ran another number of steps\n",
                 name.c_str());
    return 1;
  }
  const std::vector<double>& ref_losses = single.losses;

  bool ok = true;
  double worst_loss = 0;
  std::int64_t worst_step = 0;
  for (std::size_t s = 0; s < losses.size(); ++s) {
    const double diff = relative(losses[s], ref_losses[s]);
    if (diff > worst_loss) worst_loss = diff, worst_step = static_cast<std::int64_t>(s);
    if (diff > tolerance && ok) {
      std::fprintf(stderr, "parallel_matrix %s: DIVERGED at step %zu: loss %.9g, single rank %.9g (relative %.3g > %.1g)\n",
                   name.c_str(), s, losses[s], ref_losses[s], diff, tolerance);
      ok = false;
    }
  }
  const exec::ParameterLayout layout = exec::parameter_layout(spec).value;
  double diff2 = 0, ref2 = 0, worst_tensor = 0;
  std::string worst_name;
  for (const auto& t : layout.tensors) {
    double d2 = 0, r2 = 0;
    for (std::int64_t k = t.offset; k < t.offset + t.elements; ++k) {
      const double r = single.params[static_cast<std::size_t>(k)], p = params[static_cast<std::size_t>(k)];
      d2 += (p - r) * (p - r);
      r2 += r * r;
    }
    diff2 += d2;
    ref2 += r2;
    const double rel = r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2);
    if (rel > worst_tensor) worst_tensor = rel, worst_name = t.name;
  }
  const double param_diff = std::sqrt(diff2 / ref2);
  const exec::EvalResult& ref_evaluated = single.evaluated;
  const double tokens = static_cast<double>(kEvalSamples * T);
  const double correct_gap = std::abs(evaluated.accuracy - ref_evaluated.accuracy) * tokens;
  if (evaluated.samples != ref_evaluated.samples || relative(evaluated.loss, ref_evaluated.loss) > tolerance ||
      !(correct_gap <= 2.0)) {
    std::fprintf(stderr, "parallel_matrix %s: evaluation differs: %lld samples, loss %.9g, accuracy %.6f; single rank "
                         "%lld samples, loss %.9g, accuracy %.6f\n",
                 name.c_str(), static_cast<long long>(evaluated.samples), evaluated.loss, evaluated.accuracy,
                 static_cast<long long>(ref_evaluated.samples), ref_evaluated.loss, ref_evaluated.accuracy);
    ok = false;
  }
  if (param_diff > tolerance) {
    std::fprintf(stderr, "parallel_matrix %s: DIVERGED parameters after %zu steps: relative norm %.3g > %.1g "
                         "(worst tensor %s: %.3g)\n",
                 name.c_str(), losses.size(), param_diff, tolerance, worst_name.c_str(), worst_tensor);
    ok = false;
  }
  std::printf("device %s: ", device_name.c_str());
  std::printf("plan %-34s ranks %d  steps %zu  loss %.6f -> %.6f  max loss rel diff %.3g (step %lld)  "
              "param rel diff %.3g (worst %s %.3g)  tolerance %.0e  %s\n",
              name.c_str(), comm.size(), losses.size(), losses.front(), losses.back(), worst_loss,
              static_cast<long long>(worst_step), param_diff, worst_name.c_str(), worst_tensor, tolerance,
              ok ? "OK" : "FAILED");
  std::printf("  grad norms: first %.4f last %.4f\n", norms.front(), norms.back());
  std::printf("  evaluation: loss %.9g (single rank %.9g), accuracy %.6f (single rank %.6f) on %lld samples\n",
              evaluated.loss, ref_evaluated.loss, evaluated.accuracy, ref_evaluated.accuracy,
              static_cast<long long>(evaluated.samples));
  return ok ? 0 : 1;
}
