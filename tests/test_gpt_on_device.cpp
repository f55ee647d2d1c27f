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
#include "tests/one_rank_run.hpp"
#include "tests/test_support.hpp"
#include "tests/tiny_gpt.hpp"

namespace meshplan::exec::parallel {
namespace {

using testing_support::FakeDevice;
using testing_support::FakeDeviceOps;
using testing_support::messages;

using testing_support::OneRankRun;

void expect_same_run(const ModelSpec& spec) {
  CpuBackend cpu("cpu-reference");
  const OneRankRun on_cpu = testing_support::train_one_rank(spec, cpu, nullptr, Precision::fp32, 4, 2, 2, 16, 7);
  FakeDevice device;
  const OneRankRun on_device =
      testing_support::train_one_rank(spec, device, std::make_unique<FakeDeviceOps>(), Precision::fp32, 4, 2, 2, 16, 7);
  ASSERT_FALSE(has_errors(on_cpu.problems)) << messages(on_cpu.problems);
  ASSERT_FALSE(has_errors(on_device.problems)) << messages(on_device.problems);
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
  testing_support::set_llama_layers(spec.transformer, 2);
  expect_same_run(spec);
}

TEST(GptOnDevice, AModelOnADeviceWithoutItsOpsIsRefused) {
  FakeDevice device;
  const std::string text = messages(testing_support::one_rank_model_problems(
      testing_support::tiny_gpt_spec("gpt-device", 1, 32, 4, 96, 257, 16), device, nullptr, 16));
  EXPECT_NE(text.find("--backend: a model on fake-device needs that device's ops"), std::string::npos) << text;
}

}  // namespace
}  // namespace meshplan::exec::parallel
