// The executor's GPT on a backend whose memory the host cannot touch
// (tests/fake_device.hpp: device pointers crash when dereferenced), as a GPU
// backend will run it: ParallelGpt and train_parallel must reach every
// tensor through the backend's copies and the GptOps they were given, never
// through a host pointer. The ops here are the CPU's behind a translation of
// each pointer (a pointer that is not the device's aborts), so the run must
// also equal the same model on the CPU bit for bit: losses, gradient norms,
// parameters and AdamW moments after training, an evaluation, and the
// memory each category holds, now in the device's ledger.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <span>
#include <vector>

#include "executor/backend/cpu_backend.hpp"
#include "executor/comm/mesh_comms.hpp"
#include "executor/data/text.hpp"
#include "executor/parallel/gpt_ops.hpp"
#include "executor/parallel/parallel_gpt.hpp"
#include "executor/parallel/parallel_trainer.hpp"
#include "model/schedule.hpp"
#include "tests/fake_device.hpp"
#include "tests/fake_device_ops.hpp"
#include "tests/test_support.hpp"
#include "tests/tiny_gpt.hpp"

namespace meshplan::exec::parallel {
namespace {

using testing_support::FakeDevice;
using testing_support::FakeDeviceOps;
using testing_support::messages;

std::unique_ptr<data::TextLoader> text_loader(std::int64_t seq_len, std::uint64_t seed) {
  const std::string phrase = "the quick brown fox jumps over the lazy dog. ";
  std::vector<std::uint8_t> corpus;
  for (int i = 0; i < 60; ++i) corpus.insert(corpus.end(), phrase.begin(), phrase.end());
  const data::TextSplitRange range = data::text_split_range(std::ssize(corpus), data::Split::train);
  return std::make_unique<data::TextLoader>(std::move(corpus), range, seq_len, seed);
}

// One rank's model on `backend` (with `ops`, or the CPU's), its step reports over `steps`, and what it holds after.
struct Run {
  std::vector<StepReport> steps;
  std::vector<float> values, m, v;
  EvalResult evaluation;
  std::map<MemoryCategory, std::int64_t> held;  // bytes by category after training, over the model's start
};

Run train_on(const ModelSpec& spec, Backend& backend, std::unique_ptr<GptOps> ops, std::int64_t steps) {
  Run run;
  const std::int64_t B = 2, M = 2, T = 16;
  auto world = comm::make_self_communicator("world");
  Plan plan;
  plan.mesh = parse_mesh("dp=1", "mesh").value;
  plan.micro_batch = B;
  plan.global_batch = B * M;
  plan.precision = Precision::fp32;
  plan.schedule = *parse_schedule("1f1b");
  auto groups = comm::MeshCommunicators::create(*world, plan.mesh);
  EXPECT_TRUE(groups.ok()) << messages(groups.problems);
  if (!groups.ok()) return run;
  const MemorySnapshot before = backend.ledger().snapshot();
  auto gpt = ParallelGpt::create(spec, plan, groups.value, 5, T, backend, std::move(ops));
  EXPECT_TRUE(gpt.ok()) << messages(gpt.problems);
  if (!gpt.ok()) return run;
  TrainOptions options = testing_support::tiny_gpt_train_options(steps);
  options.micro_batch = B;
  options.micro_batches = M;
  options.on_step = [&](const StepReport& r) { run.steps.push_back(r); };
  auto loader = text_loader(T, 3);
  const TrainResult trained = train_parallel(*gpt.value, plan, *loader, options);
  EXPECT_TRUE(trained.ok()) << messages(trained.problems);
  const MemorySnapshot after = backend.ledger().snapshot();
  for (const MemoryCategory c : memory_categories) run.held[c] = after[c].now_bytes - before[c].now_bytes;
  run.values = gpt.value->gather_full(0);
  run.m = gpt.value->gather_full(1);
  run.v = gpt.value->gather_full(2);
  auto eval_loader = text_loader(T, 9);
  run.evaluation = evaluate_parallel(*gpt.value, *eval_loader, 7);
  return run;
}

void expect_same_run(const ModelSpec& spec) {
  CpuBackend cpu("cpu-reference");
  const Run on_cpu = train_on(spec, cpu, nullptr, 4);
  FakeDevice device;
  const Run on_device = train_on(spec, device, std::make_unique<FakeDeviceOps>(), 4);
  ASSERT_EQ(on_cpu.steps.size(), 4u);
  ASSERT_EQ(on_device.steps.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(on_device.steps[i].loss, on_cpu.steps[i].loss) << "step " << i;
    EXPECT_EQ(on_device.steps[i].grad_norm, on_cpu.steps[i].grad_norm) << "step " << i;
  }
  EXPECT_LT(on_cpu.steps.back().loss, on_cpu.steps.front().loss);  // it trained
  EXPECT_EQ(on_device.values, on_cpu.values);
  EXPECT_EQ(on_device.m, on_cpu.m);
  EXPECT_EQ(on_device.v, on_cpu.v);
  EXPECT_EQ(on_device.evaluation.samples, 7);
  EXPECT_EQ(on_device.evaluation.loss, on_cpu.evaluation.loss);
  EXPECT_EQ(on_device.evaluation.accuracy, on_cpu.evaluation.accuracy);
  // The same buffers, in the device's ledger; only the token copies (two int32 per row of each
  // micro-batch slot in flight, activations) exist on the device alone.
  for (const MemoryCategory c : {MemoryCategory::parameters, MemoryCategory::gradients, MemoryCategory::optimizer,
                                 MemoryCategory::workspace})
    EXPECT_EQ(on_device.held.at(c), on_cpu.held.at(c)) << to_string(c);
  EXPECT_GT(on_device.held.at(MemoryCategory::parameters), 0);
  EXPECT_GT(on_device.held.at(MemoryCategory::activations), on_cpu.held.at(MemoryCategory::activations));
  EXPECT_GT(device.to_device, 0);
  EXPECT_GT(device.to_host, 0);
}

TEST(GptOnDevice, Gpt2LayersNeverTouchDeviceMemoryFromTheHost) {
  expect_same_run(testing_support::tiny_gpt_spec("gpt-device", 2, 32, 4, 96, 257, 16));
}

// RMSNorm, SwiGLU, rotary positions, grouped-query attention, untied head, no biases.
TEST(GptOnDevice, LlamaLayersNeverTouchDeviceMemoryFromTheHost) {
  ModelSpec spec = testing_support::tiny_gpt_spec("llama-device", 2, 32, 4, 64, 257, 16);
  TransformerDims& t = spec.transformer;
  t.kv_heads = 2;
  t.feed_forward = FeedForward::swiglu;
  t.norm = Norm::rmsnorm;
  t.positions = Positions::rotary;
  t.bias = false;
  t.tied_embeddings = false;
  expect_same_run(spec);
}

TEST(GptOnDevice, AModelOnADeviceWithoutItsOpsIsRefused) {
  auto world = comm::make_self_communicator("world");
  Plan plan;
  plan.mesh = parse_mesh("dp=1", "mesh").value;
  plan.micro_batch = 2;
  plan.global_batch = 2;
  plan.schedule = *parse_schedule("1f1b");
  auto groups = comm::MeshCommunicators::create(*world, plan.mesh);
  ASSERT_TRUE(groups.ok());
  FakeDevice device;
  auto gpt = ParallelGpt::create(testing_support::tiny_gpt_spec("gpt-device", 1, 32, 4, 96, 257, 16), plan,
                                 groups.value, 5, 16, device);
  EXPECT_EQ(gpt.value, nullptr);
  ASSERT_TRUE(has_errors(gpt.problems));
  EXPECT_NE(messages(gpt.problems).find("fake-device"), std::string::npos) << messages(gpt.problems);
}

}  // namespace
}  // namespace meshplan::exec::parallel
