// `meshplan calibrate` and the user presets folder: a quick calibration
// writes device and cluster presets `local-cpu` that load cleanly and hold
// this machine's figures; with the folder as MESHPLAN_USER_PRESETS, explain
// plans with the measured peak and train reports mfu against it; a user
// preset overrides a built-in one of the same name; a bad --out is refused
// before anything is measured. The cold, every-core measurements write a GEMM
// curve by arithmetic intensity and per-op-class rates that the device loads,
// and the curve is built from measured points by a rule checked on hand-made
// points.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "executor/calibrate/measure.hpp"
#include "model/calibration.hpp"
#include "cli_runner.hpp"
#include "model/cluster_spec.hpp"
#include "model/device_spec.hpp"
#include "model/presets.hpp"

namespace {
using namespace meshplan::testing_support;
namespace fs = std::filesystem;
using Json = nlohmann::json;

// Sets MESHPLAN_USER_PRESETS for this process and the commands it runs; restores it after.
class UserPresets {
 public:
  explicit UserPresets(const fs::path& folder) {
    if (const char* old = std::getenv("MESHPLAN_USER_PRESETS")) previous_ = old;
    ::setenv("MESHPLAN_USER_PRESETS", folder.c_str(), 1);
  }
  ~UserPresets() {
    if (previous_) {
      ::setenv("MESHPLAN_USER_PRESETS", previous_->c_str(), 1);
    } else {
      ::unsetenv("MESHPLAN_USER_PRESETS");
    }
  }
  UserPresets(const UserPresets&) = delete;
  UserPresets& operator=(const UserPresets&) = delete;

 private:
  std::optional<std::string> previous_;
};

double mem_total_bytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string key; in >> key;) {
    double kib = 0;
    in >> kib;
    if (key == "MemTotal:") return kib * 1024;
    in.ignore(1 << 10, '\n');
  }
  return 0;
}

// One quick calibration per test process, into its own folder; its --json output.
const Json& calibrated(const fs::path& folder) {
  static const Json result = [&]() {
    const CliRun r = run({"calibrate", "--quick", "--json", "--out", folder.string()});
    EXPECT_EQ(r.status, 0) << r.err;
    expect_no_crash_text(r);
    EXPECT_NE(r.err.find("calibrate: [1/"), std::string::npos) << "progress goes to stderr: " << r.err;
    return Json::parse(r.out, nullptr, false);
  }();
  return result;
}

fs::path calibrated_folder() {
  const fs::path folder = temp_path("calibrated");
  calibrated(folder);
  return folder;
}

TEST(Calibrate, QuickRunWritesPlausiblePresetsThatLoad) {
  const fs::path folder = calibrated_folder();
  const Json& j = calibrated(folder);
  ASSERT_TRUE(j.is_object());
  const fs::path device_file = folder / "devices" / "local-cpu.yaml";
  const fs::path cluster_file = folder / "clusters" / "local-cpu.yaml";
  ASSERT_TRUE(fs::is_regular_file(device_file));
  ASSERT_TRUE(fs::is_regular_file(cluster_file));
  EXPECT_EQ(j["files"][0], device_file.string());
  EXPECT_EQ(j["files"][1], cluster_file.string());

  const UserPresets user(folder);
  const auto device = meshplan::load_device(device_file.string());
  ASSERT_TRUE(device.ok()) << meshplan::describe(device.problems.front());
  EXPECT_TRUE(device.problems.empty());
  const auto cluster = meshplan::load_cluster(cluster_file.string());
  ASSERT_TRUE(cluster.ok()) << meshplan::describe(cluster.problems.front());
  EXPECT_TRUE(cluster.problems.empty());

  // Plausible: any machine with a BLAS does more than 1 GFLOP/s on a core and
  // streams more than 100 MB/s; one device per physical core.
  const double fp32 = device.value.peak_for(meshplan::Dtype::fp32).value_or(0);
  EXPECT_GT(fp32, 1e9);
  EXPECT_GT(device.value.memory_bandwidth_bytes_per_s, 1e8);
  EXPECT_EQ(device.value.gemm_efficiency, 1.0);
  EXPECT_EQ(device.value.memory_efficiency, 1.0);
  const auto cores = cluster.value.devices_per_node;
  EXPECT_GE(cores, 1);
  EXPECT_LE(cores, static_cast<std::int64_t>(std::max(1u, std::thread::hardware_concurrency())));
  EXPECT_EQ(cluster.value.device.name, "local-cpu");
  EXPECT_EQ(cluster.value.device.peak_for(meshplan::Dtype::fp32), fp32) << "the cluster's device is the calibrated one";

  // Memory: MemTotal shared by the cores, to the 6 digits written.
  EXPECT_NEAR(device.value.memory_bytes * static_cast<double>(cores), mem_total_bytes(), mem_total_bytes() * 1e-5);

  // The written peak is the best one-thread fp32 GEMM measured among best
  // repeats of at least 1 ms (shorter ones can read too fast on a VM's clock:
  // calibrate_command.cpp, kMinPeakRepeatSeconds), and the JSON reports the
  // figures as written.
  double best = 0;
  for (const auto& g : j["gemm"]) {
    EXPECT_GT(g["flops_per_s"].get<double>(), 0) << g.dump();
    if (g["dtype"] == "fp32" && g["threads"] == 1 && g["best_s"].get<double>() >= 1e-3) {
      best = std::max(best, g["flops_per_s"].get<double>());
    }
  }
  ASSERT_GT(best, 0) << "the quick ladder has GEMMs of 1 ms and more";
  EXPECT_NEAR(fp32, best, best * 1e-5);
  EXPECT_DOUBLE_EQ(j["device"]["peak_flops_per_s"]["fp32"].get<double>(), fp32);
  EXPECT_DOUBLE_EQ(j["device"]["memory_bytes"].get<double>(), device.value.memory_bytes);
  EXPECT_DOUBLE_EQ(j["device"]["memory_bandwidth_bytes_per_s"].get<double>(), device.value.memory_bandwidth_bytes_per_s);
  EXPECT_EQ(j["cluster"]["devices_per_node"].get<std::int64_t>(), cores);
  // Bandwidth per device: the all-CPU triad shared by the cores.
  const Json& all = j["memory_bandwidth"].back();
  EXPECT_NEAR(device.value.memory_bandwidth_bytes_per_s * static_cast<double>(cores),
              all["triad_bytes_per_s"].get<double>(), all["triad_bytes_per_s"].get<double>() * 1e-5);
  // The preset says how it was made.
  const std::string text = read_text(device_file);
  EXPECT_NE(text.find("meshplan calibrate --quick"), std::string::npos) << text;
  EXPECT_NE(text.find("# fp32 GEMM"), std::string::npos) << text;
}

TEST(Calibrate, QuickRunWritesTheGemmCurveAndOpClassRates) {
  const fs::path folder = calibrated_folder();
  const Json& j = calibrated(folder);
  ASSERT_TRUE(j.is_object());
  const UserPresets user(folder);
  const auto device = meshplan::load_device((folder / "devices" / "local-cpu.yaml").string());
  ASSERT_TRUE(device.ok()) << meshplan::describe(device.problems.front());
  const double peak = device.value.peak_for(meshplan::Dtype::fp32).value_or(0);
  ASSERT_GT(peak, 0);

  // The curve: 4 or more points, strictly increasing intensity, fractions the schema accepts,
  // spanning the quick ladder (16^3 at I = 10.7 to 512^3 at I = 341).
  const auto& curve = device.value.gemm_curve;
  ASSERT_GE(curve.size(), 4u);
  EXPECT_LE(curve.size(), 12u);
  for (std::size_t i = 0; i < curve.size(); ++i) {
    EXPECT_GT(curve[i].fraction, 0) << i;
    EXPECT_LE(curve[i].fraction, 1.5) << i;
    if (i > 0) {
      EXPECT_GT(curve[i].intensity, curve[i - 1].intensity) << i;
    }
  }
  EXPECT_LT(curve.front().intensity, 20);
  EXPECT_GT(curve.back().intensity, 300);
  // The JSON's cold GEMMs: intensity 2mnk / (mk + kn + mn), fraction = rate / the written peak,
  // and the written curve is build_gemm_curve of exactly those points.
  std::vector<meshplan::GemmCurvePoint> measured;
  for (const auto& g : j["gemm_cold"]) {
    const double m = g["m"].get<double>(), n = g["n"].get<double>(), k = g["k"].get<double>();
    EXPECT_NEAR(g["intensity"].get<double>(), 2 * m * n * k / (m * k + k * n + m * n), 1e-9) << g.dump();
    EXPECT_NEAR(g["flops_per_s"].get<double>(), 2 * m * n * k / g["call_s"].get<double>(), 1e-6 * g["flops_per_s"].get<double>());
    EXPECT_NEAR(g["fraction_of_peak"].get<double>(), g["flops_per_s"].get<double>() / peak, 1e-9) << g.dump();
    measured.push_back({g["intensity"].get<double>(), g["fraction_of_peak"].get<double>()});
  }
  const auto rebuilt = meshplan::build_gemm_curve(measured, 0.05, 12);
  ASSERT_EQ(rebuilt.size(), curve.size());
  for (std::size_t i = 0; i < curve.size(); ++i) {
    EXPECT_NEAR(curve[i].intensity, rebuilt[i].intensity, 1e-5 * rebuilt[i].intensity) << i;
    EXPECT_NEAR(curve[i].fraction, rebuilt[i].fraction, 1e-5 * rebuilt[i].fraction) << i;
  }

  // The op classes: each rate positive and below 10x the memory bandwidth written beside it,
  // and equal to the counted traffic over the measured time (forward traffic: GELU and
  // LayerNorm read and write each element, the residual add reads two and writes one; the
  // optimizer counts 24 B per fp32 parameter for its whole step, as model/evaluate.cpp does).
  const std::map<std::string, double> bytes_per_element = {
      {"activation", 8}, {"norm", 8}, {"elementwise", 12}, {"optimizer", 24}};
  std::set<std::string> seen;
  for (const auto& r : j["op_classes"]) {
    const std::string name = r["class"].get<std::string>();
    ASSERT_TRUE(bytes_per_element.count(name)) << r.dump();
    seen.insert(name);
    const auto op = meshplan::parse_stream_op(name);
    ASSERT_TRUE(op.has_value()) << name;
    const double rate = device.value.op_bandwidth_bytes_per_s[static_cast<std::size_t>(*op)];
    EXPECT_GT(rate, 0) << name;
    EXPECT_LT(rate, 10 * device.value.memory_bandwidth_bytes_per_s) << name;
    EXPECT_NEAR(rate, r["counted_bytes_per_s"].get<double>(), 1e-5 * rate) << name;
    const double counted = r["counted_forward_bytes"].get<double>();
    EXPECT_DOUBLE_EQ(counted, bytes_per_element.at(name) * r["elements"].get<double>()) << name;
    const double seconds = r["forward_s"].get<double>() + r["backward_s"].get<double>();
    EXPECT_NEAR(r["counted_bytes_per_s"].get<double>(), (name == "optimizer" ? 1 : 3) * counted / seconds,
                1e-9 * r["counted_bytes_per_s"].get<double>())
        << name;
    if (name == "optimizer") {
      EXPECT_EQ(r["backward_s"].get<double>(), 0);
    } else {
      EXPECT_GT(r["backward_s"].get<double>(), 0) << name;
    }
  }
  EXPECT_EQ(seen.size(), 4u);
  // Classes the calibration does not measure stay unset (the memory bandwidth prices them).
  EXPECT_EQ(device.value.op_bandwidth_bytes_per_s[static_cast<std::size_t>(meshplan::StreamOp::softmax)], 0);
  const std::string text = read_text(folder / "devices" / "local-cpu.yaml");
  EXPECT_NE(text.find("# Cold operands, every core busy"), std::string::npos) << text;

  // With several cores: the same figures as one process of every core's threads, per core
  // (the process's rate / threads), which device_for_threads uses for such a rank.
  const int cores = j["cold"]["threads"].get<int>();
  if (cores < 2) {
    EXPECT_FALSE(device.value.threaded.has_value());
    EXPECT_FALSE(j.contains("threaded"));
    return;
  }
  ASSERT_TRUE(device.value.threaded.has_value()) << text;
  const auto& threaded = *device.value.threaded;
  EXPECT_EQ(threaded.threads, cores);
  EXPECT_EQ(j["threaded"]["threads"].get<int>(), cores);
  std::vector<meshplan::GemmCurvePoint> threaded_points;
  for (const auto& g : j["threaded"]["gemm"]) {
    EXPECT_NEAR(g["fraction_of_threads_x_peak"].get<double>(), g["flops_per_s"].get<double>() / (cores * peak), 1e-9)
        << g.dump();
    threaded_points.push_back({g["intensity"].get<double>(), g["fraction_of_threads_x_peak"].get<double>()});
  }
  const auto threaded_rebuilt = meshplan::build_gemm_curve(threaded_points, 0.05, 12);
  ASSERT_EQ(threaded.gemm_curve.size(), threaded_rebuilt.size());
  for (std::size_t i = 0; i < threaded_rebuilt.size(); ++i) {
    EXPECT_NEAR(threaded.gemm_curve[i].fraction, threaded_rebuilt[i].fraction, 1e-5 * threaded_rebuilt[i].fraction) << i;
  }
  std::set<std::string> threaded_seen;
  for (const auto& r : j["threaded"]["op_classes"]) {
    const std::string name = r["class"].get<std::string>();
    threaded_seen.insert(name);
    const double rate = threaded.op_bandwidth_bytes_per_s[static_cast<std::size_t>(*meshplan::parse_stream_op(name))];
    EXPECT_NEAR(rate, r["counted_bytes_per_s"].get<double>() / cores, 1e-5 * rate) << name;
  }
  EXPECT_EQ(threaded_seen, seen);
}

TEST(GemmCurve, ArithmeticIntensityOfShapes) {
  // GemmShape is {label, M = rows, K = in_features, N = out_features}.
  EXPECT_DOUBLE_EQ(meshplan::exec::arithmetic_intensity({"", 96, 96, 96}), 64.0);  // 2n/3 for a square
  EXPECT_DOUBLE_EQ(meshplan::exec::arithmetic_intensity({"", 128, 256, 10}),
                   2.0 * 128 * 10 * 256 / (128 * 256 + 256 * 10 + 128 * 10));
  EXPECT_DOUBLE_EQ(meshplan::exec::arithmetic_intensity({"", 0, 4, 4}), 0.0);
}

TEST(GemmCurve, MergesCloseIntensitiesAndKeepsWhatWasMeasured) {
  using meshplan::GemmCurvePoint;
  using meshplan::build_gemm_curve;
  const auto expect_curve = [](const std::vector<GemmCurvePoint>& got, const std::vector<GemmCurvePoint>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_DOUBLE_EQ(got[i].intensity, want[i].intensity) << i;
      EXPECT_DOUBLE_EQ(got[i].fraction, want[i].fraction) << i;
    }
  };
  // Unsorted; a non-positive intensity and a zero fraction are dropped; 100 and 104 are
  // within 5% and merge (means); 2.0 is clamped to the schema's 1.5; the dip at 102 is kept.
  const std::vector<GemmCurvePoint> points = {{100, 0.5}, {10, 0.1}, {104, 0.7}, {1000, 0.9},
                                              {-1, 0.3},  {50, 0},   {20, 2.0}};
  expect_curve(build_gemm_curve(points, 0.05, 12), {{10, 0.1}, {20, 1.5}, {102, 0.6}, {1000, 0.9}});
  // Too many points: the neighbours closest in log(intensity) merge, weighted by measurements.
  expect_curve(build_gemm_curve(points, 0.05, 3), {{15, 1.05}, {102, 0.6}, {1000, 0.9}});
  expect_curve(build_gemm_curve(points, 0.05, 2), {{58.5, 0.825}, {1000, 0.9}});
  // A run is measured from its first point: 108 is more than 5% above 100, so it starts a new one.
  expect_curve(build_gemm_curve({{104, 0.4}, {108, 0.6}, {100, 0.2}}, 0.05, 12), {{102, 0.3}, {108, 0.6}});
  EXPECT_TRUE(build_gemm_curve({}, 0.05, 12).empty());
}

TEST(Calibrate, ExplainAndTrainUseTheCalibratedPeak) {
  const fs::path folder = calibrated_folder();
  const double written = calibrated(folder)["device"]["peak_flops_per_s"]["fp32"].get<double>();
  const auto plan_file = temp_path("calibrated-plan.json");
  const std::vector<std::string> explain = {"explain", "--model", "mlp-fashion", "--cluster", "local-cpu", "--gpus", "1",
                                            "--mesh", "dp=1", "--micro-batch", "128", "--global-batch", "128",
                                            "--precision", "fp32", "--json"};

  // Without the user folder: the built-in placeholder.
  const UserPresets empty_folder(temp_path("no-user-presets"));
  CliRun r = run(explain);
  ASSERT_EQ(r.status, 0) << r.err;
  Json builtin = Json::parse(r.out);
  const double builtin_peak =
      builtin["model_flops_per_step"].get<double>() / (builtin["mfu"].get<double>() * builtin["time_s"]["step"].get<double>());
  EXPECT_NEAR(builtin_peak, 0.128e12, 0.128e12 * 1e-9);

  // With it: explain's MFU and step time imply exactly the measured peak.
  const UserPresets user(folder);
  auto with_plan = explain;
  with_plan.insert(with_plan.end(), {"--emit-plan", plan_file.string()});
  r = run(with_plan);
  ASSERT_EQ(r.status, 0) << r.err;
  const Json j = Json::parse(r.out);
  const double model_flops = j["model_flops_per_step"].get<double>();
  const double implied_peak = model_flops / (j["mfu"].get<double>() * j["time_s"]["step"].get<double>());
  EXPECT_NEAR(implied_peak, written, written * 1e-9);
  const Json plan = Json::parse(read_text(plan_file));
  EXPECT_DOUBLE_EQ(plan["cluster"]["device"]["peak_flops_per_s"]["fp32"].get<double>(), written);
  // The table says the measured curve and op-class rates priced the step.
  std::vector<std::string> table = explain;
  table.pop_back();  // no --json
  const CliRun text = run(table);
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("priced with local-cpu's measured GEMM efficiency curve ("), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("4 op-class rates"), std::string::npos) << text.out;

  // The trainer's mfu is against the plan's (calibrated) peak.
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST (Debian dataset-fashion-mnist) is not installed; the train half is skipped";
  }
  // A local-cpu device is one core: a run of t BLAS threads is t devices, so
  // its mfu is against t x the peak (docs/measured-vs-predicted.md, "Threads").
  for (const int threads : {1, 2}) {
    const auto metrics = temp_path("calibrated-metrics-" + std::to_string(threads) + ".jsonl");
    const std::string t = std::to_string(threads);
    r = run_under({"env", "OPENBLAS_NUM_THREADS=" + t, "OMP_NUM_THREADS=" + t},
                  {"train", "--plan", plan_file.string(), "--data", "fashion-mnist", "--steps", "3", "--metrics",
                   metrics.string()});
    ASSERT_EQ(r.status, 0) << r.err;
    std::ifstream in(metrics);
    int lines = 0;
    for (std::string line; std::getline(in, line);) {
      const Json m = Json::parse(line);
      if (m["kind"] != "train") continue;
      ++lines;
      EXPECT_NEAR(m["mfu"].get<double>() * m["step_s"].get<double>() * written * threads, model_flops,
                  model_flops * 1e-6)
          << line;
    }
    EXPECT_EQ(lines, 3);
  }
}

// The CPU's native bf16 flags, as /proc/cpuinfo lists them for the first CPU.
std::set<std::string> native_bf16_flags_of_this_cpu() {
  std::ifstream in("/proc/cpuinfo");
  std::set<std::string> found;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string flag; words >> flag;) {
      if (flag == "avx512_bf16" || flag == "amx_bf16") found.insert(flag);
    }
    break;
  }
  return found;
}

// bf16 has one answer (issue 13, item 8): calibrate times the oneDNN matmul
// `train --precision bf16` runs, records the CPU's native bf16 flags, and
// writes a bf16 figure when that rate beats fp32; explain then plans bf16
// exactly when the written preset has the figure.
TEST(Calibrate, Bf16IsMeasuredAsTrainRunsItAndThePresetAnswersForPlans) {
  const fs::path folder = calibrated_folder();
  const Json& j = calibrated(folder);
  ASSERT_TRUE(j.contains("bf16_native_flags")) << j.dump(2).substr(0, 2000);
  std::set<std::string> recorded;
  for (const auto& flag : j["bf16_native_flags"]) recorded.insert(flag.get<std::string>());
  const std::set<std::string> native = native_bf16_flags_of_this_cpu();
  EXPECT_EQ(recorded, native);

  double best_bf16 = 0, best_fp32 = 0;
  for (const auto& g : j["gemm"]) {
    if (g["threads"] != 1 || g["best_s"].get<double>() < 1e-3) continue;
    double& best = g["dtype"] == "bf16" ? best_bf16 : best_fp32;
    best = std::max(best, g["flops_per_s"].get<double>());
  }
  const std::string text = read_text(folder / "devices" / "local-cpu.yaml");
  if (native.empty()) {
    // train refuses bf16 here, and calibrate says why it measured none.
    EXPECT_NE(j["bf16_note"].get<std::string>().find("not measured"), std::string::npos) << j["bf16_note"];
    EXPECT_EQ(best_bf16, 0);
  } else {
    EXPECT_EQ(j["bf16_note"], "") << "this CPU has native bf16 and the ci build has oneDNN";
    EXPECT_GT(best_bf16, 0);
    EXPECT_NE(text.find("kernels::matmul_forward_bf16"), std::string::npos) << text;
  }
  EXPECT_NE(text.find("# native bf16 instructions: "), std::string::npos) << text;

  const bool written = j["device"]["peak_flops_per_s"].contains("bf16");
  EXPECT_EQ(written, best_bf16 > best_fp32);
  if (written) {
    EXPECT_NEAR(j["device"]["peak_flops_per_s"]["bf16"].get<double>(), best_bf16, best_bf16 * 1e-5);
  }
  const UserPresets user(folder);
  const CliRun r = run({"explain", "--model", "mlp-fashion", "--cluster", "local-cpu", "--gpus", "1", "--mesh", "dp=1",
                        "--micro-batch", "128", "--global-batch", "128", "--precision", "bf16"});
  if (written) {
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("precision bf16"), std::string::npos) << r.out;
  } else {
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.err.find("the local-cpu preset written by `meshplan calibrate` has no bf16 figure"), std::string::npos)
        << r.err;
    EXPECT_NE(text.find("# bf16 omitted: "), std::string::npos) << text;
  }
  EXPECT_EQ(r.err.find("no bf16 support"), std::string::npos) << r.err;
}

TEST(Calibrate, BadOutIsAClearErrorBeforeMeasuring) {
  const fs::path file = temp_path("a-file");
  std::ofstream(file) << "not a folder\n";
  for (const fs::path& out : {file, file / "presets"}) {
    const CliRun r = run({"calibrate", "--quick", "--out", out.string()});
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find("--out"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(out.string()), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("[1/"), std::string::npos) << "nothing is measured: " << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    expect_no_crash_text(r);
  }
}

TEST(UserPresets, OverrideBuiltInPresetsAndAreListedWithTheirFile) {
  const fs::path folder = temp_path("user-override");
  fs::create_directories(folder / "devices");
  std::ofstream(folder / "devices" / "a100-80g.yaml") << "name: a100-80g\n"
                                                          "source: \"a user's own measurement\"\n"
                                                          "peak_tflops:\n  fp32: 12.5\n"
                                                          "memory_gib: 79\n"
                                                          "memory_bandwidth_gb_per_s: 1800\n";
  std::ofstream(folder / "devices" / "my-gpu.yaml") << "name: my-gpu\nsource: x\npeak_tflops:\n  bf16: 3\n"
                                                        "memory_gib: 8\nmemory_bandwidth_gb_per_s: 100\n";
  const UserPresets user(folder);
  EXPECT_EQ(meshplan::user_presets_dir(), folder.string());

  const auto file = meshplan::find_preset(meshplan::PresetKind::device, "a100-80g");
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE(file.value.from_user_folder);
  EXPECT_EQ(file.value.path, (folder / "devices" / "a100-80g.yaml").string());
  const auto device = meshplan::load_device("a100-80g");
  ASSERT_TRUE(device.ok());
  EXPECT_DOUBLE_EQ(device.value.peak_for(meshplan::Dtype::fp32).value_or(0), 12.5e12);
  // A cluster naming the device gets the user's version too.
  const auto cluster = meshplan::load_cluster("dgx-a100");
  ASSERT_TRUE(cluster.ok());
  EXPECT_DOUBLE_EQ(cluster.value.device.memory_bytes, 79.0 * 1024 * 1024 * 1024);
  // Built-in presets the user folder lacks are still found, and listed once.
  const auto h100 = meshplan::find_preset(meshplan::PresetKind::device, "h100-sxm");
  ASSERT_TRUE(h100.ok());
  EXPECT_FALSE(h100.value.from_user_folder);
  const auto names = meshplan::list_presets(meshplan::PresetKind::device);
  EXPECT_EQ(std::count(names.begin(), names.end(), "a100-80g"), 1);
  EXPECT_EQ(std::count(names.begin(), names.end(), "my-gpu"), 1);
  EXPECT_EQ(std::count(names.begin(), names.end(), "h100-sxm"), 1);

  const CliRun r = run({"presets", "devices"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("user presets folder (searched first): " + folder.string()), std::string::npos) << r.out;
  const auto line_of = [&](const std::string& name) {
    const auto at = r.out.find("  " + name + " ");
    return at == std::string::npos ? std::string() : r.out.substr(at, r.out.find('\n', at) - at);
  };
  EXPECT_NE(line_of("a100-80g").find("fp32 12.5"), std::string::npos) << r.out;
  EXPECT_NE(line_of("a100-80g").find("(from " + (folder / "devices" / "a100-80g.yaml").string() + ")"), std::string::npos)
      << r.out;
  EXPECT_EQ(line_of("h100-sxm").find("(from "), std::string::npos) << r.out;

  // The validation page compares published figures with the presets of the published hardware: the
  // user's a100-80g (no bf16 figure: it ended the page in "internal error", exit 70) is not used.
  const CliRun page = run({"validation"});
  EXPECT_EQ(page.status, 0) << page.err;
  EXPECT_NE(page.err.find("built-in presets only; the user presets in " + folder.string() + " are not used"),
            std::string::npos)
      << page.err;
  std::ifstream committed(std::string(MESHPLAN_SOURCE_ROOT) + "/docs/validation.md");
  const std::string expected((std::istreambuf_iterator<char>(committed)), std::istreambuf_iterator<char>());
  EXPECT_EQ(page.out, expected);
}

// A user preset whose 'name:' is not its file's name is chosen by the file's
// name but reported under the other, which nothing finds: warned at the key,
// with its line, wherever it is loaded (rc 0). A folder named like a preset
// is said to be a folder, and not listed as a known preset (it was listed, and
// then called unknown).
TEST(UserPresets, ANameThatIsNotTheFilesIsWarnedAndAFolderIsNotAPreset) {
  const fs::path folder = temp_path("user-misnamed");
  fs::remove_all(folder);
  fs::create_directories(folder / "devices" / "a-folder.yaml");
  std::ofstream(folder / "devices" / "mine.yaml") << "# my card\nname: theirs\nsource: x\npeak_tflops:\n  bf16: 3\n"
                                                      "memory_gib: 8\nmemory_bandwidth_gb_per_s: 100\n";
  const UserPresets user(folder);
  const auto device = meshplan::load_device("mine");
  ASSERT_TRUE(device.ok()) << meshplan::describe(device.problems.front());
  ASSERT_EQ(device.problems.size(), 1u);
  EXPECT_EQ(device.problems.front().severity, meshplan::Severity::warning);
  EXPECT_EQ(device.problems.front().where, (folder / "devices" / "mine.yaml").string() + ":2 key 'name'");
  EXPECT_NE(device.problems.front().message.find("'theirs' is not the file's name: the preset is chosen as 'mine'"),
            std::string::npos)
      << device.problems.front().message;
  const auto by_path = meshplan::load_device((folder / "devices" / "mine.yaml").string());
  ASSERT_TRUE(by_path.ok());
  EXPECT_TRUE(by_path.problems.empty()) << "a path names no preset: " << meshplan::describe(by_path.problems.front());
  const auto built_in = meshplan::load_device("h100-sxm");
  ASSERT_TRUE(built_in.ok());
  EXPECT_TRUE(built_in.problems.empty());

  const CliRun r = run({"presets", "devices"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("mine.yaml:2 key 'name': 'theirs' is not the file's name"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("a-folder"), std::string::npos) << r.out;
  const auto names = meshplan::list_presets(meshplan::PresetKind::device);
  EXPECT_EQ(std::count(names.begin(), names.end(), "a-folder"), 0);
  const auto as_folder = meshplan::find_preset(meshplan::PresetKind::device, "a-folder");
  ASSERT_FALSE(as_folder.ok());
  EXPECT_EQ(as_folder.problems.front().where, (folder / "devices" / "a-folder.yaml").string());
  EXPECT_NE(as_folder.problems.front().message.find("is a folder"), std::string::npos) << as_folder.problems.front().message;
  // Links to nothing (a missing file, a loop) are said to be so, when named and when listed.
  fs::create_symlink("missing.yaml", folder / "devices" / "gone.yaml");
  fs::create_symlink("loop-b.yaml", folder / "devices" / "loop-a.yaml");
  fs::create_symlink("loop-a.yaml", folder / "devices" / "loop-b.yaml");
  for (const char* name : {"gone", "loop-a"}) {
    const auto linked = meshplan::find_preset(meshplan::PresetKind::device, name);
    ASSERT_FALSE(linked.ok()) << name;
    EXPECT_NE(linked.problems.front().message.find("is a symbolic link to nothing"), std::string::npos)
        << linked.problems.front().message;
  }
  const CliRun listed = run({"presets", "devices"});
  EXPECT_EQ(listed.status, 0) << listed.err;
  for (const char* entry : {"a-folder.yaml: is a folder, not a file; not a preset",
                            "gone.yaml: is a symbolic link to nothing", "loop-b.yaml: is a symbolic link to nothing"}) {
    EXPECT_NE(listed.err.find(entry), std::string::npos) << entry << "\n" << listed.err;
  }
}

TEST(UserPresets, FolderFromTheEnvironment) {
  const UserPresets user(temp_path("x"));  // restores the variable afterwards
  ::setenv("MESHPLAN_USER_PRESETS", "", 1);
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  const std::string saved_xdg = xdg ? xdg : "";
  ::setenv("XDG_CONFIG_HOME", "/tmp/xdg-config", 1);
  EXPECT_EQ(meshplan::user_presets_dir(), "/tmp/xdg-config/meshplan/presets");
  ::unsetenv("XDG_CONFIG_HOME");
  const char* home = std::getenv("HOME");
  if (home && *home) {
    EXPECT_EQ(meshplan::user_presets_dir(), std::string(home) + "/.config/meshplan/presets");
  }
  if (xdg) ::setenv("XDG_CONFIG_HOME", saved_xdg.c_str(), 1);
}


// ---- calibrate --from: presets from measurements made elsewhere ----

// Runs meshplan from the source tree, as the preset headers say it was run.
CliRun run_in_source(const std::vector<std::string>& args) { return run_under({"env", "-C", MESHPLAN_SOURCE_ROOT}, args); }

TEST(CalibrateFrom, WritesTheCommittedH100PresetByteForByte) {
  const CliRun r = run_in_source({"calibrate", "--from", "tests/data/h100-measured.jsonl", "--base", "h100-sxm"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, read_text(fs::path(MESHPLAN_SOURCE_ROOT) / "presets/devices/h100-sxm.yaml"));
}

TEST(CalibrateFrom, WritesTheCommittedH200PresetByteForByte) {
  const CliRun r = run_in_source({"calibrate", "--from", "tests/data/h200-measured.jsonl", "--base", "h200"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, read_text(fs::path(MESHPLAN_SOURCE_ROOT) / "presets/devices/h200.yaml"));
}

TEST(CalibrateFrom, DatasheetFlagsAloneGiveTheH100PresetsMeasuredFigures) {
  const fs::path out = temp_path("h100-from-flags.yaml");
  const CliRun r = run_in_source({"calibrate", "--from", "tests/data/h100-measured.jsonl", "--name", "h100-check",
                                  "--peak-tflops", "bf16=989.4", "--memory-bandwidth-gb-per-s", "3350", "-o", out.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("wrote " + out.string()), std::string::npos);
  const auto got = meshplan::load_device(out.string());
  ASSERT_TRUE(got.ok()) << read_text(out);
  const auto want = meshplan::load_device("h100-sxm");
  ASSERT_TRUE(want.ok());
  const meshplan::DeviceSpec &g = got.value, &w = want.value;
  EXPECT_EQ(g.name, "h100-check");
  EXPECT_DOUBLE_EQ(g.memory_bytes, w.memory_bytes);
  EXPECT_EQ(g.compute_units, w.compute_units);
  EXPECT_DOUBLE_EQ(g.gemm_efficiency, w.gemm_efficiency);
  EXPECT_DOUBLE_EQ(g.memory_efficiency, w.memory_efficiency);
  EXPECT_DOUBLE_EQ(g.launch_overhead_s, w.launch_overhead_s);
  ASSERT_EQ(g.gemm_curve.size(), w.gemm_curve.size());
  for (std::size_t i = 0; i < w.gemm_curve.size(); ++i) {
    EXPECT_DOUBLE_EQ(g.gemm_curve[i].intensity, w.gemm_curve[i].intensity) << i;
    EXPECT_DOUBLE_EQ(g.gemm_curve[i].fraction, w.gemm_curve[i].fraction) << i;
  }
  ASSERT_EQ(g.attention_forward_curve.size(), w.attention_forward_curve.size());
  for (std::size_t i = 0; i < w.attention_forward_curve.size(); ++i) {
    EXPECT_DOUBLE_EQ(g.attention_forward_curve[i].forward_flops, w.attention_forward_curve[i].forward_flops) << i;
    EXPECT_DOUBLE_EQ(g.attention_forward_curve[i].flops_per_s, w.attention_forward_curve[i].flops_per_s) << i;
    EXPECT_DOUBLE_EQ(g.attention_backward_curve[i].flops_per_s, w.attention_backward_curve[i].flops_per_s) << i;
  }
  EXPECT_EQ(g.op_bandwidth_bytes_per_s, w.op_bandwidth_bytes_per_s);
  // Only the bf16 peak was given: no other dtype is invented.
  EXPECT_EQ(g.peak_flops_per_s.size(), 1u);
  EXPECT_DOUBLE_EQ(g.l2_bandwidth_bytes_per_s, 0.0);
}

TEST(CalibrateFrom, NcclTestsWritesTheClustersLink) {
  const fs::path out = temp_path("dgx-fitted.yaml");
  const CliRun r = run_in_source({"calibrate", "--from", "tests/data/nccl-tests-all-reduce-8xh100.txt", "--nccl-tests",
                                  "--base", "dgx-h100", "--name", "dgx-fitted", "-o", out.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto got = meshplan::load_cluster(out.string());
  ASSERT_TRUE(got.ok()) << read_text(out);
  EXPECT_EQ(got.value.name, "dgx-fitted");
  EXPECT_NEAR(got.value.intra_node.bandwidth_bytes_per_s, 360e9, 0.05 * 360e9);  // the sample's made-from figures
  EXPECT_NEAR(got.value.intra_node.latency_s, 1.2e-6, 0.05 * 1.2e-6);
  const auto base = meshplan::load_cluster("dgx-h100");
  EXPECT_DOUBLE_EQ(got.value.inter_node.bandwidth_bytes_per_s, base.value.inter_node.bandwidth_bytes_per_s);
  EXPECT_EQ(got.value.device.name, "h100-sxm");
}

TEST(CalibrateFrom, BadInputIsAClearError) {
  const fs::path garbage = temp_path("garbage.jsonl");
  std::ofstream(garbage) << "{\"section\": \"gemm\", \"m\": 8}\n\x01\x02 garbage\n";
  CliRun r = run({"calibrate", "--from", garbage.string(), "--peak-tflops", "bf16=1", "--memory-bandwidth-gb-per-s", "1"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find(garbage.string() + ":1 key 'n'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(garbage.string() + ":2: not a JSON object"), std::string::npos) << r.err;
  expect_no_crash_text(r);
  r = run({"calibrate", "--from", garbage.string(), "--nccl-tests", "--base", "dgx-h100"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find(garbage.string() + ":1: not an nccl-tests result row"), std::string::npos) << r.err;
  expect_no_crash_text(r);
  r = run({"calibrate", "--from", temp_path("missing.jsonl").string()});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--from: " + temp_path("missing.jsonl").string() + ": no such file"), std::string::npos) << r.err;
  r = run({"calibrate", "--from", garbage.string(), "--quick"});
  EXPECT_EQ(r.status, 2);
  r = run_in_source({"calibrate", "--from", "tests/data/h100-measured.jsonl"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--peak-tflops"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--memory-bandwidth-gb-per-s"), std::string::npos) << r.err;
}

// Datasheet flags outside what a device preset holds are refused by name
// (--memory-gib 1e300 wrote "memory_gib: inf", a preset that did not load);
// a memory given by flag says so in the written preset, not "measured".
TEST(CalibrateFrom, FlagsOutsideWhatAPresetHoldsAreRefused) {
  const fs::path out = temp_path("h100-bad-flags.yaml");
  struct Bad {
    std::vector<std::string> flags;
    std::string message;
  };
  const Bad bad[] = {
      {{"--memory-gib", "1e300"}, "--memory-gib: must be from 0.001 to 1e+06 GiB, got 1e+300"},
      {{"--memory-gib", "-5"}, "--memory-gib: must be from 0.001 to 1e+06 GiB, got -5"},
      {{"--memory-bandwidth-gb-per-s", "1e9"}, "--memory-bandwidth-gb-per-s: must be from 0.001 to 1e+06 GB/s"},
      {{"--peak-tflops", "bf16=inf"}, "--peak-tflops: 'bf16=inf' is not DTYPE=TFLOPS"},
      {{"--peak-tflops", "bf16=1e7"}, "a rate from 1e-06 to 1e+06 TFLOP/s"},
  };
  for (const Bad& b : bad) {
    std::vector<std::string> args = {"calibrate", "--from", "tests/data/h100-measured.jsonl", "--base", "h100-sxm", "-o", out.string()};
    args.insert(args.end(), b.flags.begin(), b.flags.end());
    const CliRun r = run_in_source(args);
    EXPECT_EQ(r.status, 2) << b.flags[1];
    EXPECT_NE(r.err.find(b.message), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out)) << b.flags[1];
    expect_no_crash_text(r);
  }
  const CliRun r = run_in_source({"calibrate", "--from", "tests/data/h100-measured.jsonl", "--base", "h100-sxm",
                                  "--memory-gib", "94", "-o", out.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(read_text(out).find("memory_gib: 94       # from --memory-gib"), std::string::npos) << read_text(out);
  const auto got = meshplan::load_device(out.string());
  ASSERT_TRUE(got.ok());
  EXPECT_DOUBLE_EQ(got.value.memory_bytes, 94.0 * 1024 * 1024 * 1024);
}

// `calibrate --backend cuda` where no GPU can be used measures nothing: exit
// 2, why, and the PyTorch script with --from as the way instead. The GPU is
// hidden (CUDA_VISIBLE_DEVICES empty), so this checks the same path on a
// machine that has one; a build without CUDA says so instead.
TEST(CalibrateCuda, WithoutAGpuExitsTwoAndSaysWhy) {
  std::optional<std::string> previous;
  if (const char* old = std::getenv("CUDA_VISIBLE_DEVICES")) previous = old;
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  const fs::path out = temp_path("cuda-presets");
  fs::remove_all(out);
  const CliRun r = run({"calibrate", "--backend", "cuda", "--quick", "--out", out.string()});
  if (previous) {
    ::setenv("CUDA_VISIBLE_DEVICES", previous->c_str(), 1);
  } else {
    ::unsetenv("CUDA_VISIBLE_DEVICES");
  }
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--backend cuda: "), std::string::npos) << r.err;
  const bool no_device = r.err.find("no usable CUDA device on this machine") != std::string::npos;
  const bool no_cuda = r.err.find("built without CUDA") != std::string::npos;
  EXPECT_TRUE(no_device || no_cuda) << r.err;
  EXPECT_NE(r.err.find("nothing was measured"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("scripts/gpu/measure_device.py"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("meshplan calibrate --from OUT.jsonl"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_FALSE(fs::exists(out / "devices" / "local-cuda.yaml"));
  expect_no_crash_text(r);
}

TEST(CalibrateCuda, FlagsThatDoNotGoTogetherAreRefused) {
  CliRun r = run({"calibrate", "--device", "1"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--device goes with --backend cuda"), std::string::npos) << r.err;
  r = run({"calibrate", "--name", "x"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--name goes with --from FILE or --backend cuda"), std::string::npos) << r.err;
  r = run_in_source({"calibrate", "--backend", "cuda", "--from", "tests/data/h100-measured.jsonl"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--from does not go with --backend cuda"), std::string::npos) << r.err;
  r = run({"calibrate", "--backend", "gpu"});
  EXPECT_NE(r.status, 0);
  expect_no_crash_text(r);
}

}  // namespace
