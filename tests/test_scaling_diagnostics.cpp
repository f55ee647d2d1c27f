// The "How to Scale Your Model" checks against the seed guide's TPU v5p
// numbers: C = 4.59e14 bf16 FLOP/s and 9e10 bytes/s one way per ICI axis,
// which a bidirectional ring uses both ways (W = 1.8e11): C / W = 2550.
#include <gtest/gtest.h>

#include "model/scaling_diagnostics.hpp"
#include "test_support.hpp"

namespace meshplan {
namespace {
using namespace testing_support;

ModelSpec model_with_ffn(std::int64_t ffn) {
  return must(load_model_text("name: f\nkind: transformer\nsource: test\nlayers: 4\nhidden: 8192\nheads: 64\nffn: " +
                                  std::to_string(ffn) + "\nvocab: 32000\nseq_len: 4096\nmlp: gelu\ntied_embeddings: false\n",
                              "f.yaml"));
}

ClusterSpec tpu_cluster() {
  ClusterSpec cluster;
  cluster.name = "tpu";
  cluster.device = must(load_device("tpu-v5p"));
  return cluster;
}

AxisPlacement axis(Axis a, std::int64_t size) {
  AxisPlacement p;
  p.axis = a;
  p.size = size;
  p.bandwidth_bytes_per_s = 1.8e11;
  return p;
}

TEST(ScalingDiagnostics, SeedThresholds) {
  const ClusterSpec cluster = tpu_cluster();
  ASSERT_DOUBLE_EQ(*cluster.device.peak_for(Dtype::bf16) / 1.8e11, 2550.0);
  // Data parallel over X = 256 with B = 1024 sequences of 4096 tokens: B/X = 16384 > 2550.
  Plan plan = plan_with("dp=256", 1, 1024);
  auto d = scaling_diagnostics(model_with_ffn(32768), cluster, plan, 4096, {axis(Axis::dp, 256)});
  ASSERT_EQ(d.axes.size(), 1u);
  EXPECT_DOUBLE_EQ(d.axes[0].threshold, 2550);
  EXPECT_DOUBLE_EQ(d.axes[0].value, 1024.0 * 4096 / 256);
  EXPECT_TRUE(d.axes[0].compute_bound);
  // The same with 256 sequences of 1024 tokens on 256 chips: 1024 tokens per chip < 2550.
  plan = plan_with("dp=256", 1, 256);
  d = scaling_diagnostics(model_with_ffn(32768), cluster, plan, 1024, {axis(Axis::dp, 256)});
  EXPECT_FALSE(d.axes[0].compute_bound);
  // Tensor parallel is compute-bound while Y < F / 2550: F = 32768 allows Y up to 12.
  plan = plan_with("tp=8", 1, 1);
  d = scaling_diagnostics(model_with_ffn(32768), cluster, plan, 4096, {axis(Axis::tp, 8)});
  EXPECT_TRUE(d.axes[0].compute_bound);
  plan = plan_with("tp=16", 1, 1);
  d = scaling_diagnostics(model_with_ffn(32768), cluster, plan, 4096, {axis(Axis::tp, 16)});
  EXPECT_FALSE(d.axes[0].compute_bound);
}

TEST(ScalingDiagnostics, MixedFsdpTensorOptimum) {
  // X_opt = sqrt(B / F x M_X / M_Y x N); compute-bound down to B/N > 4 alpha^2 / (M_X M_Y F):
  // about 400 tokens per chip for F ~ 32k with M_X M_Y = 2 (the seed guide's figure).
  const ClusterSpec cluster = tpu_cluster();
  Plan plan = plan_with("fsdp=64,tp=4", 1, 512);
  const auto d = scaling_diagnostics(model_with_ffn(32768), cluster, plan, 4096,
                                     {axis(Axis::fsdp, 64), axis(Axis::tp, 4)}, 2, 1);
  const double tokens = 512.0 * 4096, n = 256;
  ASSERT_TRUE(d.optimal_fsdp);
  EXPECT_DOUBLE_EQ(*d.optimal_fsdp, std::min(n, std::sqrt(tokens / 32768 * 2 * n)));
  EXPECT_DOUBLE_EQ(*d.optimal_tp, n / *d.optimal_fsdp);
  EXPECT_NEAR(*d.compute_bound_tokens_per_device, 4 * 2550.0 * 2550.0 / (2 * 32768), 1e-6);
  EXPECT_NEAR(*d.compute_bound_tokens_per_device, 400, 5);
}

}  // namespace
}  // namespace meshplan
