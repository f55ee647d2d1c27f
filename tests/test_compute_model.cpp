// The measured refinements of the compute model (model/compute_model.hpp):
// the GEMM efficiency curve by arithmetic intensity and the per-class rates
// of memory-bound ops, from the device YAML to the evaluator's step time.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "model/cluster_spec.hpp"
#include "model/compute_model.hpp"
#include "model/evaluate.hpp"
#include "model/presets.hpp"
#include "model/profile.hpp"
#include "model/topology.hpp"
#include "test_support.hpp"

namespace meshplan {
namespace {
using namespace testing_support;

// A device file in a fresh temporary folder.
class DeviceFile {
 public:
  explicit DeviceFile(const std::string& achievable) {
    dir_ = std::filesystem::temp_directory_path() /
           ("meshplan-compute-model-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    path_ = dir_ / "dev.yaml";
    std::ofstream(path_) << "name: dev\nsource: test\npeak_tflops:\n  fp32: 0.1\nmemory_gib: 8\n"
                            "memory_bandwidth_gb_per_s: 10\nachievable:\n  gemm_fraction: 1.0\n"
                            "  memory_bandwidth_fraction: 1.0\n"
                         << achievable;
  }
  ~DeviceFile() { std::filesystem::remove_all(dir_); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path dir_, path_;
};

DeviceSpec curve_device() {
  DeviceSpec d;
  d.peak_flops_per_s[Dtype::fp32] = 1e11;
  d.gemm_efficiency = 1.0;
  d.memory_efficiency = 1.0;
  d.memory_bandwidth_bytes_per_s = 1e10;
  d.gemm_curve = {{10, 0.2}, {100, 0.6}, {1000, 0.9}};
  return d;
}

// A square GEMM of side d has intensity 2 d^3 / (3 d^2) = 2 d / 3.
double square_fraction(double intensity, const ComputeRates& rates) {
  const double d = 1.5 * intensity;
  return gemm_curve_fraction(d, d, d, rates);
}

TEST(GemmCurve, InterpolatesInLogIntensityAndClampsAtTheEnds) {
  const ComputeRates rates = rates_for(curve_device(), Precision::fp32);
  ASSERT_EQ(rates.curve_points, 3);
  EXPECT_NEAR(square_fraction(10, rates), 0.2, 1e-12);
  EXPECT_NEAR(square_fraction(100, rates), 0.6, 1e-12);
  EXPECT_NEAR(square_fraction(1000, rates), 0.9, 1e-12);
  EXPECT_NEAR(square_fraction(std::sqrt(10.0 * 100.0), rates), 0.4, 1e-12);    // halfway in ln
  EXPECT_NEAR(square_fraction(std::pow(10.0, 2.25), rates), 0.675, 1e-12);   // a quarter of the way
  EXPECT_NEAR(square_fraction(1, rates), 0.2, 1e-12);
  EXPECT_NEAR(square_fraction(1e6, rates), 0.9, 1e-12);
  // A skinny GEMM: 128 x 10 x 256 has intensity 655360 / 36608 = 17.90...
  const double skinny = 2.0 * 128 * 10 * 256 / (128.0 * 256 + 256.0 * 10 + 128.0 * 10);
  EXPECT_NEAR(gemm_curve_fraction(128, 10, 256, rates), 0.2 + 0.4 * std::log(skinny / 10) / std::log(10.0), 1e-12);
}

TEST(GemmCurve, WithoutACurveEveryGemmRunsAtTheDeviceRate) {
  DeviceSpec d = curve_device();
  d.gemm_curve.clear();
  const ComputeRates rates = rates_for(d, Precision::fp32);
  EXPECT_EQ(rates.curve_points, 0);
  EXPECT_EQ(gemm_curve_fraction(64, 64, 64, rates), 1.0);
  EXPECT_DOUBLE_EQ(gemm_time_s(1024, 1024, 1024, 1, 4, rates), 2.0 * 1024 * 1024 * 1024 / 1e11);
}

TEST(GemmCurve, GemmTimeDividesByTheFraction) {
  const DeviceSpec with = curve_device();
  DeviceSpec without = with;
  without.gemm_curve.clear();
  // 150^3: intensity 100, fraction 0.6, compute-bound at these rates (traffic 270 kB = 27 us < 67.5 us).
  const double t_with = gemm_time_s(150, 150, 150, 1, 4, rates_for(with, Precision::fp32));
  const double t_without = gemm_time_s(150, 150, 150, 1, 4, rates_for(without, Precision::fp32));
  EXPECT_NEAR(t_with / t_without, 1 / 0.6, 1e-9);
  // The memory roofline still bounds it from below: 1 x 1 x 1000000 is all traffic.
  const double traffic_s = (1e6 + 1e6 + 1) * 4 / 1e10;
  EXPECT_DOUBLE_EQ(gemm_time_s(1, 1, 1e6, 1, 4, rates_for(with, Precision::fp32)), traffic_s);
}

// An A100-like device: 108 SMs, 312 TFLOP/s bf16 at 80%, L2 feeding 4958 GB/s.
DeviceSpec tiled_device(double l2_bytes_per_s) {
  DeviceSpec d;
  d.peak_flops_per_s[Dtype::bf16] = 312e12;
  d.peak_flops_per_s[Dtype::fp32] = 19.5e12;
  d.gemm_efficiency = 0.8;
  d.memory_efficiency = 0.85;
  d.memory_bandwidth_bytes_per_s = 2039e9;
  d.compute_units = 108;
  d.l2_bandwidth_bytes_per_s = l2_bytes_per_s;
  return d;
}

TEST(TileTraffic, L2FeedsEachTileAtItsOperandReuse) {
  const ComputeRates rates = rates_for(tiled_device(4958e9), Precision::bf16);
  // 2 bm bn / ((bm + bn) 2 bytes) FLOP per byte: 256 x 128 reuses enough, 128 x 64 does not.
  EXPECT_EQ(tile_rate_fraction(256, 128, 2, rates), 1.0);
  EXPECT_NEAR(tile_rate_fraction(128, 64, 2, rates), 4958e9 * (128.0 * 64 / 192) / (312e12 * 0.8), 1e-12);
  EXPECT_NEAR(tile_rate_fraction(128, 64, 2, rates), 0.8475, 1e-4);
  // fp32 operands move twice the bytes for the same FLOPs.
  EXPECT_NEAR(tile_rate_fraction(64, 64, 4, rates), tile_rate_fraction(64, 64, 2, rates) / 2, 1e-12);
  // Without an L2 figure no tile is bound.
  const ComputeRates unbounded = rates_for(tiled_device(0), Precision::bf16);
  EXPECT_EQ(tile_rate_fraction(64, 64, 2, unbounded), 1.0);
}

TEST(TileTraffic, TheBestTileTradesWavesAgainstReuse) {
  // GPT-3 175B's QKV GEMM under tp 8: 2048 x 4608. 256 x 128 tiles: 288 tiles,
  // 3 waves of 108, 288 / 324 busy. 128 x 64 tiles: 1152 tiles, 11 waves,
  // 1152 / 1188 busy, but fed at 0.8475 of the rate.
  const double m = 2048, n = 4608;
  const ComputeRates unbounded = rates_for(tiled_device(0), Precision::bf16);
  EXPECT_NEAR(tile_efficiency(m, n, 1, 2, unbounded), 1152.0 / 1188, 1e-12);
  const ComputeRates bounded = rates_for(tiled_device(4958e9), Precision::bf16);
  EXPECT_NEAR(tile_efficiency(m, n, 1, 2, bounded), 288.0 / 324, 1e-12);
  // The GEMM time follows: same FLOPs, slower tile.
  const double k = 12288;
  EXPECT_NEAR(gemm_time_s(m, n, k, 1, 2, bounded) / gemm_time_s(m, n, k, 1, 2, unbounded), (1152.0 / 1188) / (288.0 / 324),
              1e-12);
  // A shape that fills whole waves of the biggest tile loses nothing: 108 x 256 x 128.
  EXPECT_EQ(tile_efficiency(108 * 256, 128, 1, 2, bounded), 1.0);
  // No compute units: no tile model at all, whatever the L2.
  DeviceSpec no_units = tiled_device(4958e9);
  no_units.compute_units = 0;
  EXPECT_EQ(tile_efficiency(m, n, 1, 2, rates_for(no_units, Precision::bf16)), 1.0);
}

TEST(DeviceYaml, ReadsTheL2BandwidthAndTheA100PresetsCarryIt) {
  DeviceFile file("compute_units: 8\nl2_bandwidth_gb_per_s: 1234.5\n");
  const auto loaded = load_device(file.path());
  ASSERT_TRUE(loaded.ok()) << messages(loaded.problems);
  EXPECT_DOUBLE_EQ(loaded.value.l2_bandwidth_bytes_per_s, 1234.5e9);
  DeviceFile bad("l2_bandwidth_gb_per_s: -1\n");
  const auto refused = load_device(bad.path());
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(messages(refused.problems).find("l2_bandwidth_gb_per_s"), std::string::npos) << messages(refused.problems);
  for (const char* name : {"a100-80g", "a100-40g"}) {
    const auto a100 = load_device(name);
    ASSERT_TRUE(a100.ok()) << name;
    EXPECT_DOUBLE_EQ(a100.value.l2_bandwidth_bytes_per_s, 4958e9) << name;
  }
}

TEST(StreamOps, ClassRatesReplaceMemoryBandwidthOnlyWhereGiven) {
  DeviceSpec d = curve_device();
  d.memory_efficiency = 0.5;  // 5 GB/s achievable
  d.op_bandwidth_bytes_per_s[static_cast<std::size_t>(StreamOp::activation)] = 2e9;
  const ComputeRates rates = rates_for(d, Precision::fp32);
  EXPECT_DOUBLE_EQ(stream_time_s(1e9, rates, StreamOp::activation), 0.5);
  EXPECT_DOUBLE_EQ(stream_time_s(1e9, rates, StreamOp::norm), 0.2);
  EXPECT_DOUBLE_EQ(stream_time_s(1e9, rates, StreamOp::optimizer), 0.2);
  EXPECT_DOUBLE_EQ(memory_time_s(1e9, rates), 0.2);
}

TEST(StreamOps, OpKindsMapToTheirClasses) {
  EXPECT_EQ(stream_op_of(OpKind::activation), StreamOp::activation);
  EXPECT_EQ(stream_op_of(OpKind::norm), StreamOp::norm);
  EXPECT_EQ(stream_op_of(OpKind::softmax), StreamOp::softmax);
  EXPECT_EQ(stream_op_of(OpKind::elementwise), StreamOp::elementwise);
  EXPECT_EQ(stream_op_of(OpKind::pool), StreamOp::elementwise);
  EXPECT_EQ(stream_op_of(OpKind::embedding), StreamOp::embedding);
  EXPECT_EQ(stream_op_of(OpKind::cross_entropy), StreamOp::cross_entropy);
  for (std::size_t i = 0; i < kStreamOps; ++i) {
    const auto op = static_cast<StreamOp>(i);
    EXPECT_EQ(parse_stream_op(to_string(op)), op);
  }
  EXPECT_FALSE(parse_stream_op("gelu").has_value());
}

TEST(DeviceYaml, ReadsTheCurveAndTheClassRates) {
  const DeviceFile file(
      "  gemm_curve:\n    - [16, 0.3]\n    - [64, 0.7]\n    - [512, 0.95]\n"
      "  op_bandwidth_gb_per_s:\n    activation: 3.5\n    optimizer: 12\n");
  const auto device = load_device(file.path());
  ASSERT_TRUE(device.ok()) << messages(device.problems);
  ASSERT_EQ(device.value.gemm_curve.size(), 3u);
  EXPECT_EQ(device.value.gemm_curve[1].intensity, 64);
  EXPECT_EQ(device.value.gemm_curve[1].fraction, 0.7);
  EXPECT_EQ(device.value.op_bandwidth_bytes_per_s[static_cast<std::size_t>(StreamOp::activation)], 3.5e9);
  EXPECT_EQ(device.value.op_bandwidth_bytes_per_s[static_cast<std::size_t>(StreamOp::optimizer)], 12e9);
  EXPECT_EQ(device.value.op_bandwidth_bytes_per_s[static_cast<std::size_t>(StreamOp::norm)], 0);
}

TEST(DeviceYaml, BadCurvesAndClassesAreNamedErrors) {
  struct Case {
    const char* yaml;
    const char* expect;
  };
  const Case cases[] = {
      {"  gemm_curve:\n    - [64, 0.7]\n    - [16, 0.3]\n", "arithmetic intensities must increase strictly"},
      {"  gemm_curve:\n    - [16, 0.3]\n    - [16, 0.4]\n", "arithmetic intensities must increase strictly"},
      {"  gemm_curve:\n    - [16, 0]\n", "item 1: fraction must be in [0.0001, 1.5], got 0"},
      {"  gemm_curve:\n    - [1, 1e-320]\n    - [2, 1e-320]\n", "item 1: fraction must be in [0.0001, 1.5], got 9.99989e-321"},
      {"  gemm_curve:\n    - [16, 1.6]\n", "item 1: fraction must be in [0.0001, 1.5], got 1.6"},
      {"  gemm_curve:\n    - [-1, 0.5]\n", "arithmetic intensity must be positive"},
      {"  gemm_curve:\n    - [16, 0.3, 4]\n", "expected a pair of numbers"},
      {"  gemm_curve: 0.8\n", "expected a non-empty list of [number, number] pairs"},
      {"  op_bandwidth_gb_per_s:\n    gelu: 3\n", "unknown key"},
      {"  op_bandwidth_gb_per_s:\n    norm: -3\n", "key 'achievable.op_bandwidth_gb_per_s.norm'"},
  };
  for (const Case& c : cases) {
    const DeviceFile file(c.yaml);
    const auto device = load_device(file.path());
    EXPECT_FALSE(device.ok()) << c.yaml;
    EXPECT_NE(messages(device.problems).find(c.expect), std::string::npos) << c.yaml << messages(device.problems);
  }
  std::string many = "  gemm_curve:\n";
  for (int i = 1; i <= 17; ++i) many += "    - [" + std::to_string(i) + ", 0.5]\n";
  const DeviceFile file(many);
  EXPECT_NE(messages(load_device(file.path()).problems).find("at most 16"), std::string::npos);
}

TEST(DeviceYaml, ThreadedFiguresReplaceOneCoresForThatThreadCountOnly) {
  const DeviceFile file(
      "  gemm_curve:\n    - [16, 0.3]\n    - [512, 0.95]\n"
      "  op_bandwidth_gb_per_s:\n    activation: 3.5\n    norm: 6\n"
      "  threaded:\n    threads: 2\n    gemm_curve:\n      - [16, 0.1]\n      - [512, 0.8]\n"
      "    op_bandwidth_gb_per_s:\n      activation: 3.0\n");
  const auto loaded = load_device(file.path());
  ASSERT_TRUE(loaded.ok()) << messages(loaded.problems);
  const DeviceSpec& core = loaded.value;
  ASSERT_TRUE(core.threaded.has_value());
  EXPECT_EQ(core.threaded->threads, 2);

  bool threaded = true;
  const DeviceSpec one = device_for_threads(core, 1, &threaded);
  EXPECT_FALSE(threaded);
  EXPECT_EQ(one.peak_flops_per_s.at(Dtype::fp32), 1e11);
  EXPECT_EQ(one.gemm_curve[0].fraction, 0.3);

  const DeviceSpec two = device_for_threads(core, 2, &threaded);
  EXPECT_TRUE(threaded);
  EXPECT_EQ(two.peak_flops_per_s.at(Dtype::fp32), 2e11);
  EXPECT_EQ(two.memory_bandwidth_bytes_per_s, 2e10);
  EXPECT_EQ(two.gemm_curve[0].fraction, 0.1);
  EXPECT_EQ(two.gemm_curve[1].fraction, 0.8);
  EXPECT_EQ(two.op_bandwidth_bytes_per_s[static_cast<std::size_t>(StreamOp::activation)], 6e9);  // threaded 3.0 x 2
  EXPECT_EQ(two.op_bandwidth_bytes_per_s[static_cast<std::size_t>(StreamOp::norm)], 12e9);       // one core's 6 x 2
  EXPECT_FALSE(two.threaded.has_value());

  const DeviceSpec four = device_for_threads(core, 4, &threaded);  // not measured at 4: one core's x 4
  EXPECT_FALSE(threaded);
  EXPECT_EQ(four.peak_flops_per_s.at(Dtype::fp32), 4e11);
  EXPECT_EQ(four.gemm_curve[0].fraction, 0.3);
  EXPECT_EQ(four.op_bandwidth_bytes_per_s[static_cast<std::size_t>(StreamOp::activation)], 14e9);

  const DeviceFile bad("  threaded:\n    gemm_curve:\n      - [16, 0.1]\n");
  EXPECT_NE(messages(load_device(bad.path()).problems).find("threads"), std::string::npos);
}

// The evaluator prices each memory-bound op at its class's rate: halving the
// activation rate adds exactly the activation traffic once more, forward and
// backward, and the optimizer step follows its own class.
TEST(StreamOps, EvaluatorPricesEachClassAtItsRate) {
  const ModelSpec model = must(load_model("gpt-byte-10m"));
  ClusterSpec cluster = must(load_cluster("local-cpu"));
  cluster.device = curve_device();
  cluster.device.gemm_curve.clear();
  Plan plan = plan_with("dp=1", 4, 4);
  plan.recompute = Recompute::none;
  plan.precision = Precision::fp32;
  const std::int64_t seq = 128;

  auto step = [&](double activation_rate, double optimizer_rate) {
    ClusterSpec c = cluster;
    c.device.op_bandwidth_bytes_per_s[static_cast<std::size_t>(StreamOp::activation)] = activation_rate;
    c.device.op_bandwidth_bytes_per_s[static_cast<std::size_t>(StreamOp::optimizer)] = optimizer_rate;
    const Evaluator evaluator(model, c, 1, seq);
    return evaluator.evaluate(plan).time;
  };
  const auto base = step(0, 0);
  const auto slow_activation = step(5e9, 0);
  const auto fast_optimizer = step(0, 2e10);

  // The activation ops' forward traffic from the layer graph itself.
  const LayerGraph graph = build_layer_graph(model, seq);
  double activation_bytes = 0;
  for (auto [v, end] = boost::vertices(graph.graph); v != end; ++v) {
    if (graph.op(*v).kind == OpKind::activation) activation_bytes += graph.op(*v).memory_elements_per_sample * 4 * 4;
  }
  ASSERT_GT(activation_bytes, 0);
  const double expected = 3 * (activation_bytes / 5e9 - activation_bytes / 1e10);  // forward + 2x backward
  EXPECT_NEAR(slow_activation.compute_s - base.compute_s, expected, 1e-9 * expected + 1e-12);
  EXPECT_DOUBLE_EQ(slow_activation.optimizer_s, base.optimizer_s);
  EXPECT_NEAR(fast_optimizer.optimizer_s, base.optimizer_s / 2, 1e-15);
  EXPECT_DOUBLE_EQ(fast_optimizer.compute_s, base.compute_s);
}

// No framework computes the gradient of the input data: the GEMM that reads
// it (an MLP's first layer) has no input-gradient GEMM in the backward, every
// other GEMM has one. Memory at an unbounded rate leaves only the GEMMs.
TEST(Backward, TheFirstLayerComputesNoGradientOfTheData) {
  const ModelSpec mlp = must(load_model("mlp-fashion"));
  const ModelSpec gpt = must(load_model("gpt-byte-10m"));
  ClusterSpec cluster = must(load_cluster("local-cpu"));
  cluster.device = curve_device();
  cluster.device.gemm_curve.clear();
  cluster.device.memory_bandwidth_bytes_per_s = 1e30;
  Plan plan = plan_with("dp=1", 512, 512);
  plan.recompute = Recompute::none;
  plan.precision = Precision::fp32;

  const Evaluator evaluator(mlp, cluster, 1, 1);
  const ModelProfile& profile = evaluator.profile();
  int first_layer_gemms = 0;
  for (const BlockProfile& kind : profile.kinds) {
    for (const GemmWork& g : kind.gemms) first_layer_gemms += g.needs_input_gradient ? 0 : 1;
  }
  EXPECT_EQ(first_layer_gemms, 1);
  const auto costs = evaluator.block_costs(plan, place_axes(evaluator.topology(), plan.mesh));
  const BlockCost& first = costs[static_cast<std::size_t>(profile.block_kind[0])];
  EXPECT_GT(first.weight_gradient_s, 0);
  EXPECT_DOUBLE_EQ(first.backward_compute_s, first.weight_gradient_s);
  // 784 -> 256 at 512 rows, forward and weight gradient: 2 x 2 x 512 x 784 x 256 FLOPs at 1e11 FLOP/s.
  EXPECT_NEAR(first.forward_compute_s + first.backward_compute_s, 4.0 * 512 * 784 * 256 / 1e11, 1e-12);

  const Evaluator transformer(gpt, cluster, 1, 128);
  for (const BlockProfile& kind : transformer.profile().kinds) {
    for (const GemmWork& g : kind.gemms) EXPECT_TRUE(g.needs_input_gradient);
  }
}

// A link that cannot move data while the devices compute (MPI over shared
// memory) hides nothing: the evaluator exposes every axis's communication.
TEST(Overlap, LinksThatCannotOverlapComputeExposeAllCommunication) {
  const ModelSpec model = must(load_model("gpt-byte-10m"));
  const ClusterSpec builtin = must(load_cluster("local-cpu"));
  EXPECT_FALSE(builtin.intra_node.overlaps_compute);  // presets/clusters/local-cpu.yaml says so
  EXPECT_TRUE(must(load_cluster("dgx-a100")).intra_node.overlaps_compute);

  for (const char* mesh : {"dp=2", "fsdp=2"}) {
    Plan plan = plan_with(mesh, 4, 8);
    plan.recompute = Recompute::none;
    plan.precision = Precision::fp32;
    plan.zero_stage = 0;
    const auto axis = static_cast<std::size_t>(std::string(mesh) == "dp=2" ? Axis::dp : Axis::fsdp);
    for (bool overlaps : {true, false}) {
      ClusterSpec cluster = builtin;
      cluster.intra_node.overlaps_compute = overlaps;
      const Evaluator evaluator(model, cluster, 2, 128);
      const auto placements = place_axes(evaluator.topology(), plan.mesh);
      ASSERT_EQ(placements.size(), 1u);
      EXPECT_EQ(placements[0].overlaps_compute, overlaps);
      const TimeEstimate t = evaluator.evaluate(plan).time;
      ASSERT_GT(t.axis_communication_s[axis], 0) << mesh;
      if (overlaps) {
        EXPECT_LT(t.axis_exposed_s[axis], 0.9 * t.axis_communication_s[axis]) << mesh;
      } else {
        // fsdp's exposed time is a difference of replayed times (model/sharded_replay.hpp): equal but for rounding.
        EXPECT_NEAR(t.axis_exposed_s[axis], t.axis_communication_s[axis], 1e-12 * t.axis_communication_s[axis]) << mesh;
      }
    }
  }
}

}  // namespace
}  // namespace meshplan
