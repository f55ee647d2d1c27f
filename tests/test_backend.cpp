// The backend interface and memory accounting (executor/backend/):
//  1. The ledger: now and peak per category, a total peak that is the
//     simultaneous peak (not a sum of peaks), reset_peaks, and consistency
//     under concurrent allocation from several threads.
//  2. CpuBackend: 64-byte alignment, requested bytes recorded and
//     un-recorded, copies; Buffer and TrackedVector free what they record;
//     DeviceVector's vector rules, also on a device the host cannot read.
//  3. Real training memory against closed forms: a GPT's and an MLP's
//     parameters = 4 B x parameter count exactly, gradients the same,
//     optimizer 2x, activations = the saved activation buffers; nothing
//     allocated during a training step; everything returned when the model
//     is destroyed. And the planner's memory model for the same model and an
//     fp32 plan (parameters, gradients and optimizer exactly; activations
//     within the stated band, see PlannerActivationsAreComparable).
//  4. Metrics records: "memory_bytes" and the "memory" object by category.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "executor/backend/buffer.hpp"
#include "executor/backend/cpu_backend.hpp"
#include "executor/backend/device_vector.hpp"
#include "executor/backend/memory_ledger.hpp"
#include "executor/backend/tracked_allocator.hpp"
#include "executor/data/text.hpp"
#include "executor/metrics/metrics.hpp"
#include "executor/model/model.hpp"
#include "executor/train/trainer.hpp"
#include "model/cluster_spec.hpp"
#include "model/evaluate.hpp"
#include "model/mesh.hpp"
#include "model/presets.hpp"
#include "fake_device.hpp"
#include "tiny_gpt.hpp"
#include "test_support.hpp"

namespace meshplan::exec {
namespace {

using testing_support::messages;

// ---------------------------------------------------------------- (1) the ledger

TEST(MemoryLedger, TotalPeakIsTheSimultaneousPeakNotTheSumOfPeaks) {
  MemoryLedger ledger;
  ledger.record_allocation(MemoryCategory::activations, 1000);
  ledger.record_free(MemoryCategory::activations, 1000);
  ledger.record_allocation(MemoryCategory::gradients, 600);
  ledger.record_allocation(MemoryCategory::parameters, 300);
  const MemorySnapshot s = ledger.snapshot();
  EXPECT_EQ(s[MemoryCategory::activations].now_bytes, 0);
  EXPECT_EQ(s[MemoryCategory::activations].peak_bytes, 1000);
  EXPECT_EQ(s[MemoryCategory::gradients].peak_bytes, 600);
  EXPECT_EQ(s[MemoryCategory::parameters].peak_bytes, 300);
  EXPECT_EQ(s.total.now_bytes, 900);
  EXPECT_EQ(s.total.peak_bytes, 1000);  // the sum of the peaks would be 1900

  ledger.reset_peaks();
  const MemorySnapshot r = ledger.snapshot();
  EXPECT_EQ(r[MemoryCategory::activations].peak_bytes, 0);
  EXPECT_EQ(r[MemoryCategory::gradients].peak_bytes, 600);
  EXPECT_EQ(r.total.peak_bytes, 900);
}

TEST(MemoryLedger, ConcurrentAllocationsBalance) {
  MemoryLedger ledger;
  constexpr int threads = 4, rounds = 20000;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&ledger, t] {
      const auto category = memory_categories[static_cast<std::size_t>(t) % memory_categories.size()];
      for (int i = 0; i < rounds; ++i) {
        ledger.record_allocation(category, 64);
        ledger.record_free(category, 64);
      }
      ledger.record_allocation(category, 10 * (t + 1));
    });
  for (std::thread& w : workers) w.join();
  const MemorySnapshot s = ledger.snapshot();
  EXPECT_EQ(s.total.now_bytes, 10 + 20 + 30 + 40);
  EXPECT_LE(s.total.peak_bytes, threads * 64 + 100);  // never more than every thread's block at once
  EXPECT_GE(s.total.peak_bytes, 100);
  std::int64_t sum_now = 0;
  for (const MemoryAmount& a : s.by_category) sum_now += a.now_bytes;
  EXPECT_EQ(sum_now, s.total.now_bytes);
}

// ---------------------------------------------------------------- (2) the CPU backend

TEST(CpuBackend, AlignsRecordsAndCopies) {
  CpuBackend backend;
  EXPECT_EQ(backend.name(), "cpu");
  EXPECT_EQ(backend.device_kind(), DeviceKind::cpu);
  void* a = backend.allocate(100, MemoryCategory::communication);
  void* b = backend.allocate(0, MemoryCategory::workspace);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % CpuBackend::alignment_bytes, 0u);
  EXPECT_EQ(backend.ledger().snapshot()[MemoryCategory::communication].now_bytes, 100);

  const std::vector<std::uint8_t> source = {1, 2, 3, 4, 5};
  std::vector<std::uint8_t> back(5);
  ExecutionContext& context = backend.default_context();
  backend.copy_host_to_device(a, source.data(), 5, context);
  backend.copy_device_to_device(static_cast<std::uint8_t*>(a) + 10, a, 5, context);
  backend.copy_device_to_host(back.data(), static_cast<std::uint8_t*>(a) + 10, 5, context);
  context.synchronize();
  EXPECT_EQ(back, source);
  EXPECT_NE(backend.make_context(), nullptr);

  backend.deallocate(a, 100, MemoryCategory::communication);
  backend.deallocate(b, 0, MemoryCategory::workspace);
  const MemorySnapshot s = backend.ledger().snapshot();
  EXPECT_EQ(s.total.now_bytes, 0);
  EXPECT_EQ(s.total.peak_bytes, 100);
}

TEST(CpuBackend, BufferFreesAndUnrecordsOnDestruction) {
  CpuBackend backend;
  {
    Buffer<float> buffer(backend, 1000, MemoryCategory::activations);
    EXPECT_EQ(buffer.bytes(), 4000u);
    buffer.span()[999] = 1.5f;
    EXPECT_EQ(backend.ledger().snapshot()[MemoryCategory::activations].now_bytes, 4000);
    Buffer<float> moved = std::move(buffer);
    EXPECT_EQ(moved.span()[999], 1.5f);
    EXPECT_EQ(buffer.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
    EXPECT_EQ(backend.ledger().snapshot().total.now_bytes, 4000);
  }
  EXPECT_EQ(backend.ledger().snapshot().total.now_bytes, 0);
}

TEST(CpuBackend, TrackedVectorKeepsItsCategoryThroughMovesAndCopies) {
  CpuBackend backend;
  const auto now = [&](MemoryCategory c) { return backend.ledger().snapshot()[c].now_bytes; };
  {
    TrackedVector<double> grads(TrackedAllocator<double>(MemoryCategory::gradients, backend));
    grads.reserve(10);
    grads.assign(10, 1.0);
    EXPECT_EQ(now(MemoryCategory::gradients), 80);
    TrackedVector<double> optimizer(5, 2.0, TrackedAllocator<double>(MemoryCategory::optimizer, backend));
    optimizer = std::move(grads);  // the allocator travels with the memory: still recorded as gradients
    EXPECT_EQ(now(MemoryCategory::gradients), 80);
    EXPECT_EQ(now(MemoryCategory::optimizer), 0);
    TrackedVector<double> copy = optimizer;
    EXPECT_EQ(now(MemoryCategory::gradients), 160);
    EXPECT_EQ(copy.get_allocator().category(), MemoryCategory::gradients);
  }
  EXPECT_EQ(backend.ledger().snapshot().total.now_bytes, 0);
}

// DeviceVector (device_vector.hpp), the GPT executor's buffers: std::vector's
// rules through the backend: new elements are zero, even where a shrink left
// old values in the memory; shrinking keeps the allocation; growing copies
// the old elements and allocates exactly the new size; release gives it all
// back. On the CPU and on a device whose memory the host cannot read
// (every element read back through the backend's copies).
template <typename Device>
void expect_vector_rules(Device& backend) {
  const auto now = [&] { return backend.ledger().snapshot()[MemoryCategory::activations].now_bytes; };
  {
    DeviceVector<float> v(MemoryCategory::activations, backend);
    v.resize(4);
    EXPECT_EQ(v.to_host(), (std::vector<float>{0, 0, 0, 0}));
    EXPECT_EQ(now(), 16);
    const std::vector<float> values{1, 2, 3, 4};
    v.assign_host(values.data(), values.size());
    v.resize(6);  // grows: the old four copied, two new zeros, exactly 6 floats allocated
    EXPECT_EQ(v.to_host(), (std::vector<float>{1, 2, 3, 4, 0, 0}));
    EXPECT_EQ(now(), 24);
    v.resize(2);  // shrinks: the allocation stays
    EXPECT_EQ(v.capacity(), 6u);
    EXPECT_EQ(now(), 24);
    v.resize(5);  // within capacity: elements past the old size are zero again, not the 3, 4 still in memory
    EXPECT_EQ(v.to_host(), (std::vector<float>{1, 2, 0, 0, 0}));
    EXPECT_EQ(now(), 24);
    v.assign_zero(3);
    EXPECT_EQ(v.to_host(), (std::vector<float>{0, 0, 0}));
    DeviceVector<float> w(MemoryCategory::activations, backend);
    w.assign(v);
    EXPECT_EQ(w.to_host(), (std::vector<float>{0, 0, 0}));
    EXPECT_EQ(now(), 24 + 12);
    v.release();
    EXPECT_EQ(v.size(), 0u);
    EXPECT_EQ(now(), 12);
  }
  EXPECT_EQ(backend.ledger().snapshot().total.now_bytes, 0);
}

TEST(DeviceVector, KeepsVectorRulesOnTheCpu) {
  CpuBackend backend;
  expect_vector_rules(backend);
}

TEST(DeviceVector, KeepsVectorRulesOnADeviceTheHostCannotRead) {
  testing_support::FakeDevice device;
  expect_vector_rules(device);
}

// ---------------------------------------------------------------- (3) training memory

ModelSpec tiny_gpt() { return testing_support::tiny_gpt_spec("tiny-gpt", 2, 32, 4, 128, 256, 16); }  // byte-level text

// GPT-2 parameters written out: wte V C + wpe T C + per layer (ln1 2C, qkv 3C^2 + 3C,
// attn_out C^2 + C, ln2 2C, fc F C + F, fc_out C F + C) + ln_f 2C.
std::int64_t gpt_parameter_count(const TransformerDims& t) {
  const std::int64_t C = t.hidden, F = t.ffn;
  return t.vocab * C + t.seq_len * C + t.layers * (4 * C * C + 2 * F * C + 9 * C + F) + 2 * C;
}

// Saved activations of one ParallelGpt pass on one rank (executor/parallel/
// parallel_gpt.cpp's Slot and LayerActs) for B sequences of T tokens: the
// chunk's input [B,T,C]; per layer 8 [B,T,C] tensors (ln1, qkv x3, atty,
// res2, ln2, res3), 2 [B,T,F] (fch, fch_gelu), 4 [B,T] (norm means and
// rstds) and the attention matrix [B,NH,T,T]; then ln_f [B,T,C] with its 2
// [B,T] statistics and the probabilities [B,T,V] (the logits, overwritten).
std::int64_t gpt_activation_elements(const TransformerDims& t, std::int64_t B, std::int64_t T) {
  const std::int64_t BT = B * T, C = t.hidden, F = t.ffn;
  return BT * C + t.layers * (BT * (8 * C + 2 * F + 4) + B * t.heads * T * T) + BT * (C + 2 + t.vocab);
}

// The passes' scratch (workspace): two [B,T,C] tensor-parallel buffers, the
// gradients of qkv, atty, fch, gelu and the two [B,T,C] stream gradients;
// the loss's three per-row buffers. The logits' gradient has no buffer of
// its own: it overwrites the probabilities.
std::int64_t gpt_workspace_elements(const TransformerDims& t, std::int64_t B, std::int64_t T) {
  const std::int64_t BT = B * T, C = t.hidden, F = t.ffn;
  return BT * (2 * C + 3 * C + C + 2 * F + 2 * C) + 3 * BT;
}

// The executor's GPT on one rank (ParallelGpt on the mesh of one, as
// `meshplan train` runs a one-device plan) holds the closed forms, and once
// its buffers exist a training step allocates nothing: the second step's
// peak is the first step's end.
TEST(TrainingMemory, GptMatchesTheClosedFormsAndAStepAllocatesNothing) {
  MemoryLedger& ledger = default_backend().ledger();
  const MemorySnapshot start = ledger.snapshot();
  const ModelSpec spec = tiny_gpt();
  const std::int64_t B = 4, T = 16;
  {
    testing_support::OneRankGpt gpt(spec, 7, B, 1, T);
    ASSERT_TRUE(gpt.model != nullptr) << messages(gpt.problems);
    const std::int64_t P = gpt_parameter_count(spec.transformer);
    std::vector<std::uint8_t> corpus;
    for (int i = 0; i < 400; ++i) corpus.push_back(static_cast<std::uint8_t>('a' + i % 13));
    data::TextLoader loader(corpus, {0, std::ssize(corpus)}, T, 3);
    TrainOptions options;
    options.steps = 1;
    ASSERT_TRUE(gpt.train(loader, options).ok());
    const MemorySnapshot after_one = ledger.snapshot();
    const auto held = [&](const MemorySnapshot& now, MemoryCategory c) {
      return now[c].now_bytes - start[c].now_bytes;
    };
    EXPECT_EQ(held(after_one, MemoryCategory::parameters), 4 * P);
    EXPECT_EQ(held(after_one, MemoryCategory::gradients), 4 * P);
    EXPECT_EQ(held(after_one, MemoryCategory::optimizer), 8 * P);
    EXPECT_EQ(held(after_one, MemoryCategory::activations), 4 * gpt_activation_elements(spec.transformer, B, T));
    EXPECT_EQ(held(after_one, MemoryCategory::workspace), 4 * gpt_workspace_elements(spec.transformer, B, T));

    ledger.reset_peaks();
    options.first_step = 1;
    options.steps = 3;
    ASSERT_TRUE(gpt.train(loader, options).ok());
    const MemorySnapshot after_three = ledger.snapshot();
    EXPECT_EQ(after_three.total.now_bytes, after_one.total.now_bytes);
    EXPECT_EQ(after_three.total.peak_bytes, after_one.total.now_bytes);  // no transient allocation in a step
  }
  EXPECT_EQ(ledger.snapshot().total.now_bytes, start.total.now_bytes);  // the model returned everything
}

TEST(TrainingMemory, MlpMatchesTheClosedForms) {
  CpuBackend backend;
  ModelSpec spec;
  spec.name = "mlp-fashion";
  spec.kind = ModelKind::mlp;
  spec.mlp.layer_sizes = {784, 256, 10};
  spec.mlp.activation = "relu";
  const std::int64_t B = 32;
  auto model = make_model<float>(spec, 1, B, 0, backend);
  ASSERT_TRUE(model.ok()) << messages(model.problems);
  const std::int64_t P = 784 * 256 + 256 + 256 * 10 + 10;
  const MemorySnapshot s = backend.ledger().snapshot();
  EXPECT_EQ(s[MemoryCategory::parameters].now_bytes, 4 * P);
  EXPECT_EQ(s[MemoryCategory::gradients].now_bytes, 4 * P);
  EXPECT_EQ(s[MemoryCategory::optimizer].now_bytes, 8 * P);
  // inputs [B,784], pre-activations [B,256] and [B,10], post-activation [B,256], probabilities [B,10].
  EXPECT_EQ(s[MemoryCategory::activations].now_bytes, 4 * B * (784 + 256 + 10 + 256 + 10));
  // their gradients: dpre [B,256] and [B,10], dpost [B,256].
  EXPECT_EQ(s[MemoryCategory::workspace].now_bytes, 4 * B * (256 + 10 + 256));
}

// The planner (model/memory_model.hpp) for the same GPT, one device, an fp32
// plan without recomputation: parameters, gradients and optimizer are the
// same 4 + 4 + 8 bytes per parameter, so they must agree exactly when both
// count the same parameters. Activations legitimately differ: the planner
// uses Korthikanti et al.'s per-layer formula (which counts e.g. dropout
// masks and the attention scores before and after softmax, but not the
// logits and probabilities over the vocabulary), the executor holds llm.c's
// buffers. The ratio of executor / planner activations (printed below) is
// asserted within [0.5, 2], the band in which the planner still answers
// "does it fit" usefully.
TEST(TrainingMemory, PlannerAgreesOnParameterStateAndIsComparableOnActivations) {
  const ModelSpec spec = tiny_gpt();
  const std::int64_t B = 4, T = 16;
  Loaded<ClusterSpec> cluster = load_cluster("local-cpu");
  ASSERT_TRUE(cluster.ok()) << messages(cluster.problems);
  const Evaluator evaluator(spec, cluster.value, 1, T);
  Plan plan;
  plan.mesh = parse_mesh("dp=1", "--mesh").value;
  plan.micro_batch = B;
  plan.global_batch = B;
  plan.precision = Precision::fp32;
  plan.recompute = Recompute::none;
  plan.attention = Attention::unfused;  // the executor's attention stores the s x s scores
  plan.seq_len = T;
  const MemoryBreakdown predicted = evaluator.evaluate(plan).worst_memory;

  MemoryLedger& ledger = default_backend().ledger();
  const MemorySnapshot start = ledger.snapshot();
  testing_support::OneRankGpt gpt(spec, 7, B, 1, T);
  ASSERT_TRUE(gpt.model != nullptr) << messages(gpt.problems);
  std::vector<std::uint8_t> corpus(400, 'a');
  data::TextLoader loader(corpus, {0, std::ssize(corpus)}, T, 3);
  TrainOptions options;
  options.steps = 1;
  ASSERT_TRUE(gpt.train(loader, options).ok());  // the activation slot exists from the first forward
  const MemorySnapshot measured = ledger.snapshot();
  const auto bytes = [&](MemoryCategory c) { return static_cast<double>(measured[c].now_bytes - start[c].now_bytes); };
  EXPECT_DOUBLE_EQ(predicted.parameters_bytes, bytes(MemoryCategory::parameters));
  EXPECT_DOUBLE_EQ(predicted.gradients_bytes, bytes(MemoryCategory::gradients));
  EXPECT_DOUBLE_EQ(predicted.optimizer_bytes, bytes(MemoryCategory::optimizer));
  const double ratio = bytes(MemoryCategory::activations) / predicted.activations_bytes;
  std::printf("activations: executor %.0f B, planner %.0f B, ratio %.3f\n", bytes(MemoryCategory::activations),
              predicted.activations_bytes, ratio);
  EXPECT_GT(ratio, 0.5);
  EXPECT_LT(ratio, 2.0);
}

// ---------------------------------------------------------------- (4) metrics

TEST(MemoryMetrics, StepLinesCarryPeakTotalAndEveryCategory) {
  MemoryLedger ledger;
  ledger.record_allocation(MemoryCategory::parameters, 4096);
  ledger.record_allocation(MemoryCategory::activations, 3 << 20);
  ledger.record_free(MemoryCategory::activations, 3 << 20);
  StepMetrics step;
  set_memory(step, ledger.snapshot());
  const nlohmann::json j = to_json(step);
  EXPECT_EQ(j["memory_bytes"], (3 << 20) + 4096);
  for (const MemoryCategory c : memory_categories) {
    ASSERT_TRUE(j["memory"].contains(std::string(to_string(c)))) << to_string(c);
  }
  EXPECT_EQ(j["memory"]["parameters"]["now_bytes"], 4096);
  EXPECT_EQ(j["memory"]["activations"]["now_bytes"], 0);
  EXPECT_EQ(j["memory"]["activations"]["peak_bytes"], 3 << 20);
  EXPECT_EQ(j["memory"]["total"]["now_bytes"], 4096);
  EXPECT_TRUE(to_json(StepMetrics{})["memory"].is_null());
  EXPECT_EQ(format_peak_memory(ledger.snapshot()), "peak memory: parameters 4.0 KiB | activations 3.0 MiB | total 3.0 MiB");
}

}  // namespace
}  // namespace meshplan::exec
