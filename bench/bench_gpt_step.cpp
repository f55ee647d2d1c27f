// One training step of a GPT-2-small-shaped model on this machine's CPU:
// forward + backward + global-norm clipping + AdamW, timed by the real
// trainer (the executor's GPT on the mesh of one device, as `meshplan train`
// runs a one-device plan; train_parallel reports each step's wall time, data
// included), in tokens per second. bench/torch_gpt_step.py times the same step in PyTorch
// and bench/compare_gpt_step.sh runs both with the same threads and prints
// the ratio (issue "Executor core": target >= 1.0, stretch 1.3).
//
// A plain program rather than Google Benchmark: a step takes seconds, so a
// few steps after one warm-up step (first touch of ~3 GB of buffers) are the
// measurement, and the median is reported.
//
// Threads: matmuls run in OpenBLAS (Debian's pthreads build), set here with
// openblas_set_num_threads; the other kernels' row loops run in OpenMP
// threads where the kernels use OpenMP, set here with omp_set_num_threads.
// Both are printed, and compare_gpt_step.sh also sets OMP_NUM_THREADS and
// OPENBLAS_NUM_THREADS to the same count for both programs.
//
// Usage: bench_gpt_step [--model gpt2-124m] [--batch 2] [--seq 256]
//                       [--threads N] [--steps 3] [--warmup 1]
// Prints a table and a last line "result: tokens_per_s=... step_s=...".
#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "executor/data/loader.hpp"
#include "executor/data/random.hpp"
#include "executor/comm/communicator.hpp"
#include "executor/comm/mesh_comms.hpp"
#include "executor/model/parameters.hpp"
#include "executor/parallel/parallel_gpt.hpp"
#include "executor/parallel/parallel_trainer.hpp"
#include "executor/train/trainer.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"

namespace {
using namespace meshplan;

// Uniform random tokens over the whole vocabulary (the step's cost does not
// depend on which tokens; a real loader's cost is not what is measured).
// Sample s comes from its own engine, so the stream is restorable.
class RandomTokens final : public data::DataLoader {
 public:
  RandomTokens(std::int64_t seq_len, std::int64_t vocab) : seq_len_(seq_len), vocab_(vocab) {}
  data::Batch next_batch(std::int64_t samples) override {
    data::Batch batch;
    batch.samples = samples;
    for (std::int64_t s = 0; s < samples; ++s, ++position_) {
      std::mt19937_64 engine(data::derive_seed(kSeed, static_cast<std::uint64_t>(position_)));
      const auto vocab = static_cast<std::uint64_t>(vocab_);
      for (std::int64_t t = 0; t < seq_len_; ++t) {
        batch.inputs.push_back(static_cast<float>(data::uniform_below(engine, vocab)));
        batch.targets.push_back(static_cast<std::int32_t>(data::uniform_below(engine, vocab)));
      }
    }
    return batch;
  }
  std::int64_t epoch() const override { return 0; }
  std::int64_t samples_per_epoch() const override { return kSamplesPerEpoch; }
  data::BatchShape shape() const override { return {seq_len_, seq_len_, 0, vocab_}; }
  data::LoaderState state() const override { return {kSeed, 0, position_}; }
  Problems restore(const data::LoaderState& state) override {
    Problems problems = data::check_loader_state(state, kSeed, kSamplesPerEpoch);
    if (!has_errors(problems)) position_ = state.position;
    return problems;
  }

 private:
  static constexpr std::uint64_t kSeed = 1;
  static constexpr std::int64_t kSamplesPerEpoch = std::int64_t{1} << 40;
  std::int64_t seq_len_, vocab_;
  std::int64_t position_ = 0;
};

struct Options {
  std::string model = "gpt2-124m";
  std::int64_t batch = 2;
  std::int64_t seq = 256;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::int64_t steps = 3;
  std::int64_t warmup = 1;
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return false;
    const std::string value = argv[++i];
    if (flag == "--model") o.model = value;
    else if (flag == "--batch") o.batch = std::stoll(value);
    else if (flag == "--seq") o.seq = std::stoll(value);
    else if (flag == "--threads") o.threads = std::stoi(value);
    else if (flag == "--steps") o.steps = std::stoll(value);
    else if (flag == "--warmup") o.warmup = std::stoll(value);
    else return false;
  }
  return o.batch > 0 && o.seq > 0 && o.threads > 0 && o.steps > 0 && o.warmup >= 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::cerr << "usage: bench_gpt_step [--model NAME|PATH] [--batch B] [--seq T] [--threads N] [--steps S] "
                 "[--warmup W]\n";
    return 2;
  }
  Loaded<ModelSpec> spec = load_model(o.model);
  if (!spec.ok()) {
    for (const Problem& p : spec.problems) std::cerr << "bench_gpt_step: " << describe(p) << "\n";
    return 1;
  }
  if (spec.value.kind != ModelKind::transformer || o.seq > spec.value.transformer.seq_len) {
    std::cerr << "bench_gpt_step: " << o.model << " is not a transformer with at least " << o.seq << " positions\n";
    return 1;
  }
  spec.value.transformer.dropout = 0;  // not implemented by the executor (a warning otherwise); PyTorch runs without it too
  openblas_set_num_threads(o.threads);
#ifdef _OPENMP
  omp_set_num_threads(o.threads);
  const int omp_threads = omp_get_max_threads();
#else
  const int omp_threads = 0;  // the kernels are built without OpenMP
#endif

  Plan plan;
  plan.mesh = parse_mesh("dp=1", "mesh").value;
  plan.micro_batch = o.batch;
  plan.global_batch = o.batch;
  plan.precision = Precision::fp32;
  plan.schedule = *parse_schedule("1f1b");
  auto world = exec::comm::make_self_communicator("world");
  auto groups = exec::comm::MeshCommunicators::create(*world, plan.mesh);
  auto model = groups.ok() ? exec::parallel::ParallelGpt::create(spec.value, plan, groups.value, 1, o.seq)
                           : Loaded<std::unique_ptr<exec::parallel::ParallelGpt>>{};
  if (!groups.ok() || !model.ok()) {
    for (const Problem& p : groups.problems) std::cerr << "bench_gpt_step: " << describe(p) << "\n";
    for (const Problem& p : model.problems) std::cerr << "bench_gpt_step: " << describe(p) << "\n";
    return 1;
  }
  RandomTokens loader(o.seq, spec.value.transformer.vocab);
  exec::TrainOptions train;
  train.micro_batch = o.batch;
  train.micro_batches = 1;
  train.steps = o.warmup + o.steps;
  train.adamw = {.learning_rate = 1e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  train.max_grad_norm = 1.0;
  // CPU seconds of the process (all threads) between step reports: the
  // work a step costs, which other jobs on the machine change far less than
  // its wall time. Spin-waiting threads count as work.
  std::vector<double> step_s, cpu_s;
  std::clock_t cpu_before = std::clock();
  train.on_step = [&](const exec::StepReport& r) {
    const std::clock_t cpu_now = std::clock();
    if (r.step >= o.warmup) {
      step_s.push_back(r.step_s);
      cpu_s.push_back(static_cast<double>(cpu_now - cpu_before) / CLOCKS_PER_SEC);
    }
    cpu_before = cpu_now;
    std::fprintf(stderr, "  step %lld: %.3f s, loss %.4f\n", static_cast<long long>(r.step), r.step_s, r.loss);
  };
  const exec::TrainResult result = exec::parallel::train_parallel(*model.value, plan, loader, train);
  if (!result.ok()) {
    for (const Problem& p : result.problems) std::cerr << "bench_gpt_step: " << describe(p) << "\n";
    return 1;
  }
  const auto median_of = [](std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const std::size_t mid = values.size() / 2;
    return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
  };
  const double median = median_of(step_s);
  const double median_cpu = median_of(cpu_s);
  const double fastest = *std::min_element(step_s.begin(), step_s.end());
  const double tokens = static_cast<double>(o.batch * o.seq);
  const std::int64_t parameters = exec::parameter_layout(spec.value).value.total_elements;

  std::printf("threads: OpenBLAS %d, OpenMP %d\n", openblas_get_num_threads(), omp_threads);
  std::printf("%-10s %-12s %10s %3s %5s %8s %6s %12s %12s %12s %14s\n", "impl", "model", "params", "B", "T",
              "threads", "steps", "min_step_s", "median_s", "cpu_s", "tokens_per_s");
  std::printf("%-10s %-12s %9.1fM %3lld %5lld %8d %6zu %12.3f %12.3f %12.3f %14.1f\n", "meshplan",
              spec.value.name.c_str(), static_cast<double>(parameters) / 1e6, static_cast<long long>(o.batch),
              static_cast<long long>(o.seq), openblas_get_num_threads(), step_s.size(), fastest, median, median_cpu,
              tokens / median);
  std::printf("result: tokens_per_s=%.1f step_s=%.4f min_step_s=%.4f cpu_s=%.4f\n", tokens / median, median, fastest,
              median_cpu);
  return 0;
}
