// `meshplan calibrate` and the user presets folder: a quick calibration
// writes device and cluster presets `local-cpu` that load cleanly and hold
// this machine's figures; with the folder as MESHPLAN_USER_PRESETS, explain
// plans with the measured peak and train reports mfu against it; a user
// preset overrides a built-in one of the same name; a bad --out is refused
// before anything is measured.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

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

  // The written peak is the best one-thread fp32 GEMM measured, and the JSON
  // reports the figures as written.
  double best = 0;
  for (const auto& g : j["gemm"]) {
    EXPECT_GT(g["flops_per_s"].get<double>(), 0) << g.dump();
    if (g["dtype"] == "fp32" && g["threads"] == 1) best = std::max(best, g["flops_per_s"].get<double>());
  }
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

}  // namespace
