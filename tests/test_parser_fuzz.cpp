// Fuzz-style tests: thousands of malformed presets and flag values, made by
// mutating the shipped presets with a fixed seed. Nothing may throw or crash;
// every rejection must say where and why; whatever is accepted must be sane.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "model/cluster_spec.hpp"
#include "model/device_spec.hpp"
#include "model/explain.hpp"
#include "model/mesh.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"
#include "model/presets.hpp"

namespace meshplan {
namespace {
namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// One random edit of YAML text: the kinds of mistakes people and tools make.
std::string mutate(std::string text, std::mt19937& rng) {
  static const std::vector<std::string> tokens = {
      "-1", "0", "1e400", "nan", ".inf", "[1, 2", "{a: b}", "- x", "\"", "'", ":", ": :", "\t", "~", "null",
      "true", "9999999999999999999999", "1.5", "abc", "&anchor", "*alias", "!!binary", "#", "\n  nested: 1", "[]"};
  auto pick = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
  if (text.empty()) return tokens[pick(tokens.size())];
  switch (pick(7)) {
    case 0: text.erase(pick(text.size()), 1); break;                                        // drop a character
    case 1: text.insert(pick(text.size()), 1, static_cast<char>(32 + pick(95))); break;     // stray character
    case 2: text.insert(pick(text.size()), tokens[pick(tokens.size())]); break;             // stray token
    case 3: text.resize(pick(text.size())); break;                                          // truncated file
    case 4: {  // replace a value after a colon
      auto colon = text.find(": ", pick(text.size()));
      if (colon != std::string::npos) {
        auto end = text.find('\n', colon);
        text.replace(colon + 2, (end == std::string::npos ? text.size() : end) - colon - 2, tokens[pick(tokens.size())]);
      }
      break;
    }
    case 5: {  // duplicate a line (duplicate keys)
      auto start = text.rfind('\n', pick(text.size()));
      start = start == std::string::npos ? 0 : start + 1;
      auto end = text.find('\n', start);
      text.insert(start, text.substr(start, (end == std::string::npos ? text.size() : end) - start) + "\n");
      break;
    }
    default: {  // misspell a key
      auto pos = text.find_first_of("abcdefghijklmnopqrstuvwxyz", pick(text.size()));
      if (pos != std::string::npos) text[pos] = static_cast<char>('a' + pick(26));
    }
  }
  return text;
}

void expect_well_formed(const Problems& problems, const std::string& input) {
  for (const auto& p : problems) {
    EXPECT_FALSE(p.message.empty()) << input;
    EXPECT_FALSE(p.where.empty()) << p.message << "\n" << input;
  }
}

TEST(ParserFuzz, MutatedModelPresets) {
  std::mt19937 rng(20261121);
  const auto root = fs::path(presets_root()) / "models";
  int accepted = 0, rejected = 0;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string original = read_file(entry.path());
    for (int i = 0; i < 150; ++i) {
      std::string text = original;
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int e = 0; e < edits; ++e) text = mutate(text, rng);
      Loaded<ModelSpec> model;
      ASSERT_NO_THROW(model = load_model_text(text, "fuzz.yaml")) << text;
      if (model.ok()) {
        ++accepted;
        const auto seq = model.value.default_seq_len();
        Explanation ex;
        Plan plan;
        ASSERT_NO_THROW(ex = explain_plan(model.value, load_cluster("dgx-a100").value, {8, 0}, plan)) << text;
        (void)seq;
      } else {
        ++rejected;
        expect_well_formed(model.problems, text);
      }
    }
  }
  EXPECT_GT(rejected, 500);  // the mutations really do break files
  std::printf("[ fuzz ] model presets: %d accepted, %d rejected with a message\n", accepted, rejected);
}

TEST(ParserFuzz, MutatedDeviceAndClusterPresets) {
  std::mt19937 rng(7);
  const fs::path dir = fs::temp_directory_path() / ("meshplan-fuzz-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  int rejected = 0;
  for (const char* kind : {"devices", "clusters"}) {
    for (const auto& entry : fs::directory_iterator(fs::path(presets_root()) / kind)) {
      const std::string original = read_file(entry.path());
      for (int i = 0; i < 100; ++i) {
        const fs::path file = dir / "fuzz.yaml";
        std::ofstream(file) << mutate(mutate(original, rng), rng);
        if (std::string(kind) == "devices") {
          Loaded<DeviceSpec> device;
          ASSERT_NO_THROW(device = load_device(file.string()));
          if (!device.ok()) ++rejected;
          expect_well_formed(device.problems, read_file(file));
        } else {
          Loaded<ClusterSpec> cluster;
          ASSERT_NO_THROW(cluster = load_cluster(file.string()));
          if (!cluster.ok()) ++rejected;
          expect_well_formed(cluster.problems, read_file(file));
        }
      }
    }
  }
  fs::remove_all(dir);
  EXPECT_GT(rejected, 200);
}

TEST(ParserFuzz, RandomFlagValues) {
  std::mt19937 rng(99);
  const std::string alphabet = "dpfstcexmlnio=,:[]\"' 0123456789-_";
  for (int i = 0; i < 5000; ++i) {
    std::string text;
    const auto length = rng() % 24;
    for (std::size_t j = 0; j < length; ++j) text += alphabet[rng() % alphabet.size()];
    Loaded<Mesh> mesh, shape;
    ASSERT_NO_THROW(mesh = parse_mesh(text, "--mesh")) << text;
    ASSERT_NO_THROW(shape = parse_mesh_shape(text, "--mesh-shape")) << text;
    ASSERT_NO_THROW((void)parse_schedule(text)) << text;
    if (mesh.ok()) {
      for (const auto& axis : mesh.value.axes) EXPECT_GE(axis.size, 1) << text;
    } else {
      expect_well_formed(mesh.problems, text);
    }
  }
}

TEST(ParserFuzz, RandomPlansNeverThrow) {
  std::mt19937 rng(3);
  const auto cluster = load_cluster("dgx-a100").value;
  const std::vector<std::string> models = {"gpt2-124m", "llama2-70b", "mlp-seed", "resnet50", "gemma3-1b"};
  const std::vector<std::int64_t> sizes = {1, 2, 3, 4, 7, 8, 16};
  for (int i = 0; i < 400; ++i) {
    const auto model = load_model(models[rng() % models.size()]).value;
    Plan plan;
    std::int64_t world = 1;
    for (Axis axis : all_axes) {
      if (rng() % 2) continue;
      const auto size = sizes[rng() % sizes.size()];
      plan.mesh.axes.push_back({axis, size});
      world *= size;
    }
    plan.micro_batch = static_cast<std::int64_t>(rng() % 4);
    plan.global_batch = static_cast<std::int64_t>(rng() % 64);
    plan.zero_stage = static_cast<int>(rng() % 5);
    plan.recompute = static_cast<Recompute>(rng() % 3);
    plan.sequence_parallel = rng() % 2;
    plan.schedule = rng() % 3 == 0 ? Schedule{ScheduleKind::interleaved, 2 + static_cast<std::int64_t>(rng() % 3)}
                                   : Schedule{static_cast<ScheduleKind>(rng() % 2), 1};
    plan.seq_len = static_cast<std::int64_t>(rng() % 3) * 512;
    Explanation ex;
    ASSERT_NO_THROW(ex = explain_plan(model, cluster, {world + static_cast<std::int64_t>(rng() % 2), 0}, plan));
    if (!ex.valid) expect_well_formed(ex.problems, plan.mesh.to_string());
  }
}

}  // namespace
}  // namespace meshplan
