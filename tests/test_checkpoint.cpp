// Checkpoints (save, load, refusal of incomplete or damaged ones, finding the
// newest) and metrics records (JSON Lines keys, the stdout line, golden text).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>
#include <string>

#include <unistd.h>

#include "executor/checkpoint/checkpoint.hpp"
#include "executor/checkpoint/checksum.hpp"
#include "executor/metrics/metrics.hpp"
#include "executor/train/run_control.hpp"

namespace meshplan::exec {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() /
            ("meshplan_checkpoint_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string root() const { return root_.string(); }

  fs::path checkpoint_path(std::int64_t step) const { return root_ / checkpoint_directory_name(step); }

  static CheckpointContents sample_contents(std::int64_t step) {
    CheckpointContents contents;
    contents.step = step;
    contents.plan = {{"version", 1}, {"world_size", 1}, {"plan", {{"mesh", {{"dp", 1}, {"tp", 1}}}}}};
    contents.seed = 0xfedcba9876543210ULL;  // above INT64_MAX: must survive JSON as unsigned
    contents.data_state = {.seed = 42, .epoch = 3, .position = 1234};
    // Values that a lossy (text, rounding) encoding would change.
    contents.tensors.push_back({"params.w", {2, 3}, {0.1f, -1.5e-38f, 3.4e38f, -0.0f, 1.0f / 3.0f, 7.0f}});
    contents.tensors.push_back({"adam_m.w", {2, 3}, {1e-8f, 2e-8f, 3e-8f, 4e-8f, 5e-8f, 6e-8f}});
    contents.tensors.push_back({"adam_v.w", {6}, {1, 2, 3, 4, 5, 6}});
    contents.tensors.push_back({"empty", {0, 4}, {}});
    contents.extra = {{"schedule", "cosine"}};
    return contents;
  }

  static std::string all_messages(const Problems& problems) {
    std::string text;
    for (const Problem& problem : problems) text += describe(problem) + "\n";
    return text;
  }

 private:
  fs::path root_;
};

void expect_bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(a[i]), std::bit_cast<std::uint32_t>(b[i])) << "index " << i;
  }
}

TEST(Checksum, MatchesTheStandardCrc32CheckValue) {
  // The CRC-32 check value of "123456789" (ISO 3309 / zlib) is 0xcbf43926.
  const std::string text = "123456789";
  EXPECT_EQ(checksum_text(std::as_bytes(std::span(text.data(), text.size()))), "crc32:cbf43926");
  EXPECT_EQ(checksum_text({}), "crc32:00000000");
}

TEST(CheckpointName, PadsToSixDigits) {
  EXPECT_EQ(checkpoint_directory_name(123), "step-000123");
  EXPECT_EQ(checkpoint_directory_name(12345678), "step-12345678");
}

TEST_F(CheckpointTest, RoundTripIsBitIdentical) {
  const CheckpointContents saved = sample_contents(123);
  const Problems problems = save_checkpoint(root(), saved);
  ASSERT_TRUE(problems.empty()) << all_messages(problems);
  EXPECT_TRUE(fs::exists(checkpoint_path(123) / "COMPLETE"));
  EXPECT_FALSE(fs::exists(root() + "/step-000123.tmp"));

  const Loaded<CheckpointContents> loaded = load_checkpoint(checkpoint_path(123).string());
  ASSERT_TRUE(loaded.ok()) << all_messages(loaded.problems);
  EXPECT_EQ(loaded.value.step, 123);
  EXPECT_EQ(loaded.value.plan, saved.plan);
  EXPECT_EQ(loaded.value.seed, saved.seed);
  EXPECT_EQ(loaded.value.data_state, saved.data_state);
  EXPECT_EQ(loaded.value.extra, saved.extra);
  ASSERT_EQ(loaded.value.tensors.size(), saved.tensors.size());
  for (std::size_t i = 0; i < saved.tensors.size(); ++i) {
    EXPECT_EQ(loaded.value.tensors[i].name, saved.tensors[i].name);
    EXPECT_EQ(loaded.value.tensors[i].shape, saved.tensors[i].shape);
    expect_bit_identical(loaded.value.tensors[i].data, saved.tensors[i].data);
  }
}

TEST_F(CheckpointTest, TensorFilesAreRawLittleEndianFloat32) {
  CheckpointContents contents = sample_contents(1);
  contents.tensors = {{"one", {1}, {1.0f}}};
  ASSERT_TRUE(save_checkpoint(root(), contents).empty());
  std::ifstream in(checkpoint_path(1) / "one.f32", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes, std::string("\x00\x00\x80\x3f", 4));  // 1.0f = 0x3f800000
}

TEST_F(CheckpointTest, RefusesInvalidContentsBeforeWriting) {
  CheckpointContents contents = sample_contents(5);
  contents.tensors.push_back({"../escape", {1}, {1.0f}});
  contents.tensors.push_back({"params.w", {2, 3}, {1, 2, 3, 4, 5, 6}});
  contents.tensors.push_back({"short", {2, 2}, {1, 2, 3}});
  const std::string messages = all_messages(save_checkpoint(root(), contents));
  EXPECT_NE(messages.find("'../escape' is not allowed"), std::string::npos) << messages;
  EXPECT_NE(messages.find("'params.w' appears twice"), std::string::npos) << messages;
  EXPECT_NE(messages.find("holds 3"), std::string::npos) << messages;
  EXPECT_FALSE(fs::exists(checkpoint_path(5)));
}

TEST_F(CheckpointTest, RefusesToOverwriteAnExistingCheckpoint) {
  ASSERT_TRUE(save_checkpoint(root(), sample_contents(7)).empty());
  const std::string messages = all_messages(save_checkpoint(root(), sample_contents(7)));
  EXPECT_NE(messages.find("already exists"), std::string::npos) << messages;
}

TEST_F(CheckpointTest, RefusesWithoutCompleteMarker) {
  ASSERT_TRUE(save_checkpoint(root(), sample_contents(10)).empty());
  fs::remove(checkpoint_path(10) / "COMPLETE");
  const Loaded<CheckpointContents> loaded = load_checkpoint(checkpoint_path(10).string());
  ASSERT_FALSE(loaded.ok());
  const std::string messages = all_messages(loaded.problems);
  EXPECT_NE(messages.find("incomplete"), std::string::npos) << messages;
  EXPECT_NE(messages.find("step-000010"), std::string::npos) << messages;
}

TEST_F(CheckpointTest, RefusesAFlippedByte) {
  ASSERT_TRUE(save_checkpoint(root(), sample_contents(11)).empty());
  const fs::path file = checkpoint_path(11) / "adam_m.w.f32";
  {
    std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(5);
    const char byte = static_cast<char>(io.get());
    io.seekp(5);
    io.put(static_cast<char>(byte ^ 0x01));
  }
  const Loaded<CheckpointContents> loaded = load_checkpoint(checkpoint_path(11).string());
  ASSERT_FALSE(loaded.ok());
  ASSERT_EQ(loaded.problems.size(), 1u) << all_messages(loaded.problems);
  EXPECT_EQ(loaded.problems[0].where, file.string());
  EXPECT_NE(loaded.problems[0].message.find("checksum"), std::string::npos) << loaded.problems[0].message;
}

TEST_F(CheckpointTest, RefusesATruncatedFile) {
  ASSERT_TRUE(save_checkpoint(root(), sample_contents(12)).empty());
  const fs::path file = checkpoint_path(12) / "params.w.f32";
  fs::resize_file(file, 10);
  const Loaded<CheckpointContents> loaded = load_checkpoint(checkpoint_path(12).string());
  ASSERT_FALSE(loaded.ok());
  ASSERT_EQ(loaded.problems.size(), 1u) << all_messages(loaded.problems);
  EXPECT_EQ(loaded.problems[0].where, file.string());
  EXPECT_NE(loaded.problems[0].message.find("10 bytes, manifest.json says 24 (truncated)"), std::string::npos)
      << loaded.problems[0].message;
}

TEST_F(CheckpointTest, RefusesAMissingTensorFile) {
  ASSERT_TRUE(save_checkpoint(root(), sample_contents(13)).empty());
  const fs::path file = checkpoint_path(13) / "adam_v.w.f32";
  fs::remove(file);
  const Loaded<CheckpointContents> loaded = load_checkpoint(checkpoint_path(13).string());
  ASSERT_FALSE(loaded.ok());
  ASSERT_EQ(loaded.problems.size(), 1u) << all_messages(loaded.problems);
  EXPECT_EQ(loaded.problems[0].where, file.string());
  EXPECT_NE(loaded.problems[0].message.find("missing tensor file"), std::string::npos);
}

TEST_F(CheckpointTest, RefusesMalformedManifests) {
  ASSERT_TRUE(save_checkpoint(root(), sample_contents(14)).empty());
  const fs::path manifest = checkpoint_path(14) / "manifest.json";
  std::ifstream in(manifest);
  std::stringstream original;
  original << in.rdbuf();
  const nlohmann::json good = nlohmann::json::parse(original.str());

  const auto refusal = [&](const std::string& text) {
    std::ofstream(manifest, std::ios::trunc) << text;
    return all_messages(load_checkpoint(checkpoint_path(14).string()).problems);
  };
  std::string messages = refusal("{\"version\": 1, \"step\": ");
  EXPECT_NE(messages.find("malformed manifest"), std::string::npos) << messages;
  EXPECT_NE(messages.find(manifest.string()), std::string::npos) << messages;

  nlohmann::json changed = good;
  changed["version"] = 2;
  messages = refusal(changed.dump());
  EXPECT_NE(messages.find("unsupported manifest version 2 (this build reads version 1)"), std::string::npos)
      << messages;

  changed = good;
  changed.erase("data_state");
  changed["tensors"][0]["shape"] = "2x3";
  messages = refusal(changed.dump());
  EXPECT_NE(messages.find("key 'data_state': malformed manifest: is missing"), std::string::npos) << messages;
  EXPECT_NE(messages.find("key 'tensors[0].shape'"), std::string::npos) << messages;

  changed = good;
  changed["tensors"][1]["file"] = "../../etc/passwd";
  messages = refusal(changed.dump());
  EXPECT_NE(messages.find("not a plain file name"), std::string::npos) << messages;

  EXPECT_TRUE(load_checkpoint(checkpoint_path(14).string() + "-nope").problems.size() == 1);
  // Valid JSON with one changed value: only the seal in COMPLETE can tell.
  changed = good;
  changed["data_state"]["position"] = good["data_state"]["position"].get<std::int64_t>() + 1;
  messages = refusal(changed.dump(2) + "\n");
  EXPECT_NE(messages.find("damaged"), std::string::npos) << messages;
  EXPECT_NE(messages.find("recorded in COMPLETE"), std::string::npos) << messages;
  // A step that is not the folder's (a renamed folder was resumed as the newest) or is negative.
  changed = good;
  changed["step"] = 15;
  messages = refusal(changed.dump(2) + "\n");
  EXPECT_NE(messages.find("key 'step': malformed manifest: is 15, but the folder is named for step 14"), std::string::npos)
      << messages;
  changed["step"] = -5;
  messages = refusal(changed.dump(2) + "\n");
  EXPECT_NE(messages.find("key 'step': malformed manifest: must be 0 or more, got -5"), std::string::npos) << messages;
  messages = refusal(original.str());
  EXPECT_EQ(messages, "");
  // A COMPLETE marker that records no checksum (empty after a crash, or garbled) seals nothing.
  const fs::path marker = checkpoint_path(14) / "COMPLETE";
  for (const std::string text : {"", "garbage\n", "step 14\n"}) {
    std::ofstream(marker, std::ios::trunc) << text;
    messages = refusal(original.str());
    EXPECT_NE(messages.find("damaged: the COMPLETE marker does not record the manifest's checksum"), std::string::npos)
        << "'" << text << "': " << messages;
  }
}

TEST_F(CheckpointTest, LatestSkipsIncompleteNewerOnes) {
  EXPECT_FALSE(latest_checkpoint(root() + "/nothing-here").value.has_value());
  EXPECT_FALSE(latest_checkpoint(root()).value.has_value());

  for (const std::int64_t step : {5, 1000000, 40}) ASSERT_TRUE(save_checkpoint(root(), sample_contents(step)).empty());
  ASSERT_TRUE(save_checkpoint(root(), sample_contents(2000000)).empty());
  fs::remove(checkpoint_path(2000000) / "COMPLETE");       // crashed after the rename
  fs::create_directory(root() + "/step-3000000.tmp");       // crashed before it
  fs::create_directory(root() + "/unrelated");

  const Loaded<std::optional<std::string>> latest = latest_checkpoint(root());
  ASSERT_TRUE(latest.ok()) << all_messages(latest.problems);
  ASSERT_TRUE(latest.value.has_value());
  EXPECT_EQ(*latest.value, checkpoint_path(1000000).string());  // by step number, not by name
  ASSERT_EQ(latest.problems.size(), 2u) << all_messages(latest.problems);
  for (const Problem& problem : latest.problems) {
    EXPECT_EQ(problem.severity, Severity::warning);
    EXPECT_NE(problem.message.find("incomplete"), std::string::npos);
  }
  EXPECT_TRUE(load_checkpoint(*latest.value).ok());
}

// --resume: a damaged newest checkpoint (a flipped byte; a manifest that no
// longer matches its seal) is skipped, with a warning naming it and why, for
// the newest one that loads.
// Many incomplete checkpoints are named three at a time, the rest counted.
TEST_F(CheckpointTest, ManyIncompleteOnesAreCounted) {
  ASSERT_TRUE(save_checkpoint(root(), sample_contents(1)).empty());
  for (int step = 2; step < 12; ++step) fs::create_directories(checkpoint_path(step));
  const auto latest = latest_checkpoint(root());
  ASSERT_TRUE(latest.value.has_value());
  EXPECT_EQ(*latest.value, checkpoint_path(1).string());
  ASSERT_EQ(latest.problems.size(), 4u) << all_messages(latest.problems);
  EXPECT_EQ(latest.problems.back().message, "7 more incomplete checkpoints, ignored");
}

TEST_F(CheckpointTest, ResumeFallsBackOverDamagedNewerOnes) {
  EXPECT_FALSE(load_latest_checkpoint(root() + "/nothing-here").value.has_value());
  for (const std::int64_t step : {10, 20, 30, 40}) ASSERT_TRUE(save_checkpoint(root(), sample_contents(step)).empty());
  {
    std::fstream io(checkpoint_path(40) / "params.w.f32", std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(3);
    io.put('\x5a');
  }
  std::ofstream(checkpoint_path(30) / "manifest.json", std::ios::app) << " ";
  fs::remove(checkpoint_path(20) / "COMPLETE");  // incomplete: skipped as latest_checkpoint skips it

  const Loaded<std::optional<ResumePoint>> resumed = load_latest_checkpoint(root());
  ASSERT_TRUE(resumed.ok()) << all_messages(resumed.problems);
  ASSERT_TRUE(resumed.value.has_value());
  EXPECT_EQ(resumed.value->path, checkpoint_path(10).string());
  EXPECT_EQ(resumed.value->contents.step, 10);
  EXPECT_EQ(resumed.value->contents.tensors.size(), sample_contents(10).tensors.size());
  const std::string messages = all_messages(resumed.problems);
  ASSERT_EQ(resumed.problems.size(), 3u) << messages;
  for (const Problem& problem : resumed.problems) EXPECT_EQ(problem.severity, Severity::warning) << messages;
  EXPECT_NE(messages.find(checkpoint_path(40).string() + ": skipped"), std::string::npos) << messages;
  EXPECT_NE(messages.find("checksum"), std::string::npos) << messages;
  EXPECT_NE(messages.find(checkpoint_path(30).string() + ": skipped"), std::string::npos) << messages;
  EXPECT_NE(messages.find("recorded in COMPLETE"), std::string::npos) << messages;
  EXPECT_NE(messages.find("no COMPLETE marker"), std::string::npos) << messages;
  EXPECT_EQ(resumed.value->damaged, (std::vector<std::string>{checkpoint_path(40).string(), checkpoint_path(30).string()}));

  // Training on from step 10 saves steps 20, 30 and 40 again: the incomplete
  // one is replaced, the damaged ones are first moved aside (and kept).
  ASSERT_TRUE(save_checkpoint(root(), sample_contents(20)).empty());
  EXPECT_FALSE(save_checkpoint(root(), sample_contents(30)).empty());  // complete: never overwritten
  for (const std::string& path : resumed.value->damaged) {
    const Problems aside = set_checkpoint_aside(path);
    ASSERT_EQ(aside.size(), 1u);
    EXPECT_EQ(aside[0].severity, Severity::warning) << describe(aside[0]);
    EXPECT_TRUE(fs::exists(path + ".damaged"));
  }
  for (const std::int64_t step : {30, 40}) EXPECT_TRUE(save_checkpoint(root(), sample_contents(step)).empty());
  const Loaded<std::optional<ResumePoint>> again = load_latest_checkpoint(root());
  ASSERT_TRUE(again.ok() && again.value) << all_messages(again.problems);
  EXPECT_EQ(again.value->contents.step, 40);
  EXPECT_TRUE(again.problems.empty()) << all_messages(again.problems);  // the .damaged folders are not checkpoints
}

TEST_F(CheckpointTest, ResumeRefusesWhenEveryCheckpointIsDamaged) {
  ASSERT_TRUE(save_checkpoint(root(), sample_contents(7)).empty());
  fs::remove(checkpoint_path(7) / "adam_v.w.f32");
  const Loaded<std::optional<ResumePoint>> resumed = load_latest_checkpoint(root());
  EXPECT_FALSE(resumed.ok());
  const std::string messages = all_messages(resumed.problems);
  EXPECT_NE(messages.find("missing tensor file"), std::string::npos) << messages;
  EXPECT_NE(messages.find("no checkpoint here loads"), std::string::npos) << messages;
}

// One decision per step for both training paths (run_control.hpp).
TEST(RunControl, SavesEachStepAtMostOnceAndStopsOnlyBeforeTheEnd) {
  RunControl control{.total_steps = 500, .checkpoint_every = 100, .checkpoints_on = true, .stop_after = 0};
  int saves = 0;
  for (std::int64_t done = 1; done <= 500; ++done) {
    const AfterStep after = decide_after_step(control, done, false);
    EXPECT_FALSE(after.stop) << done;
    saves += after.save ? 1 : 0;
  }
  EXPECT_EQ(saves, 5);  // 100 .. 500: the last one is periodic and final at once, saved once
  control.checkpoint_every = 0;
  EXPECT_TRUE(decide_after_step(control, 500, false).save);  // the final save
  EXPECT_FALSE(decide_after_step(control, 499, false).save);
  // Interrupted: stop and save (even with no checkpoint directory: the default one), except after the last step.
  control.checkpoints_on = false;
  EXPECT_TRUE(decide_after_step(control, 137, true).stop);
  EXPECT_TRUE(decide_after_step(control, 137, true).save);
  EXPECT_FALSE(decide_after_step(control, 500, true).stop);
  EXPECT_FALSE(decide_after_step(control, 500, true).save);
  control.stop_after = 3;
  EXPECT_FALSE(decide_after_step(control, 2, false).stop);
  EXPECT_TRUE(decide_after_step(control, 3, false).stop);
  EXPECT_TRUE(decide_after_step(control, 3, false).save);
  EXPECT_TRUE(run_finished(control, 500));
  EXPECT_TRUE(run_finished(control, 600));
  EXPECT_FALSE(run_finished(control, 499));
}

StepMetrics sample_step() {
  return {.step = 120,
          .loss = 2.34567,
          .learning_rate = 3e-4,
          .grad_norm = 1.2341,
          .step_s = 0.4123,
          .throughput_per_s = 12345,
          .throughput_unit = ThroughputUnit::tokens,
          .mfu = 0.4123,
          .memory_bytes = std::int64_t{3} << 29};
}

TEST(Metrics, JsonLinesParseAndHoldTheKeys) {
  std::ostringstream out;
  MetricsWriter writer(out, "metrics.jsonl");
  StepMetrics samples = sample_step();
  samples.throughput_unit = ThroughputUnit::samples;
  samples.mfu.reset();
  samples.loss = std::nan("");
  EXPECT_TRUE(writer.write(sample_step()).empty());
  EXPECT_TRUE(writer.write(samples).empty());
  EXPECT_TRUE(writer.write(EvalMetrics{.step = 120, .epoch = 2, .eval_loss = 0.4321, .eval_accuracy = 0.8456,
                                       .eval_samples = 10000})
                  .empty());

  std::istringstream lines(out.str());
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(lines, line);) records.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(records.size(), 3u);
  for (const char* key : {"kind", "step", "loss", "lr", "grad_norm", "step_s", "tokens_per_s", "mfu", "memory_bytes"}) {
    EXPECT_TRUE(records[0].contains(key)) << key;
  }
  EXPECT_EQ(records[0]["kind"], "train");
  EXPECT_EQ(records[0]["step"], 120);
  EXPECT_DOUBLE_EQ(records[0]["lr"].get<double>(), 3e-4);
  EXPECT_EQ(records[0]["memory_bytes"], std::int64_t{3} << 29);
  EXPECT_TRUE(records[1].contains("samples_per_s"));
  EXPECT_FALSE(records[1].contains("tokens_per_s"));
  EXPECT_TRUE(records[1]["mfu"].is_null());
  EXPECT_TRUE(records[1]["loss"].is_null());  // NaN is not JSON
  for (const char* key : {"kind", "step", "epoch", "eval_loss", "eval_accuracy", "eval_samples"}) {
    EXPECT_TRUE(records[2].contains(key)) << key;
  }
  EXPECT_EQ(records[2]["kind"], "eval");
  EXPECT_EQ(records[2]["eval_samples"], 10000);
  EXPECT_EQ(records[2]["epoch"], 2);
}

TEST(Metrics, FileWriterFlushesEachLine) {
  const fs::path path = fs::temp_directory_path() / ("meshplan_metrics_" + std::to_string(::getpid()) + ".jsonl");
  Loaded<std::unique_ptr<MetricsWriter>> writer = MetricsWriter::open(path.string(), false);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(writer.value->write(sample_step()).empty());
  std::ifstream in(path);  // read while the writer is still open
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(nlohmann::json::parse(line)["step"], 120);
  fs::remove(path);
  EXPECT_FALSE(MetricsWriter::open("/nonexistent-dir/metrics.jsonl", false).ok());
}

// A resumed run appends; a last line cut short by the run before (killed,
// disk full) is dropped first, with a warning, so every line stays JSON (it
// was glued to the next one, and plot refused the file). A whole file is
// appended to as it is.
TEST(Metrics, AppendingDropsALastLineCutShort) {
  const fs::path path = fs::temp_directory_path() / ("meshplan_metrics_cut_" + std::to_string(::getpid()) + ".jsonl");
  std::ofstream(path, std::ios::trunc) << "{\"kind\": \"train\", \"step\": 0}\n{\"kind\": \"tra";
  {
    Loaded<std::unique_ptr<MetricsWriter>> writer = MetricsWriter::open(path.string(), true);
    ASSERT_TRUE(writer.ok());
    ASSERT_EQ(writer.problems.size(), 1u);
    EXPECT_EQ(writer.problems.front().severity, Severity::warning);
    EXPECT_NE(writer.problems.front().message.find("cut short (13 bytes after the last whole line)"), std::string::npos)
        << writer.problems.front().message;
    ASSERT_TRUE(writer.value->write(sample_step()).empty());
  }
  {
    std::ifstream in(path);
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(lines[0]["step"], 0);
    EXPECT_EQ(lines[1]["step"], 120);
  }
  Loaded<std::unique_ptr<MetricsWriter>> again = MetricsWriter::open(path.string(), true);
  EXPECT_TRUE(again.problems.empty());
  fs::remove(path);
}

TEST(Metrics, HumanReadableLines) {
  EXPECT_EQ(format_line(sample_step()),
            "step 120 | loss 2.3457 | lr 3.00e-04 | grad 1.234 | 0.412 s | 12.3k tokens/s | mfu 41.2% | mem 1.50 GiB");
  StepMetrics minimal = sample_step();
  minimal.mfu.reset();
  minimal.memory_bytes.reset();
  minimal.throughput_unit = ThroughputUnit::samples;
  minimal.throughput_per_s = 950;
  EXPECT_EQ(format_line(minimal), "step 120 | loss 2.3457 | lr 3.00e-04 | grad 1.234 | 0.412 s | 950 samples/s");
  EXPECT_EQ(format_line(EvalMetrics{.step = 120, .epoch = 2, .eval_loss = 0.4321, .eval_accuracy = 0.8456}),
            "eval step 120 epoch 2 | loss 0.4321 | accuracy 84.56%");
  EXPECT_EQ(format_line(EvalMetrics{.step = 3, .epoch = 0, .eval_loss = 1.5, .eval_accuracy = std::nullopt}),
            "eval step 3 epoch 0 | loss 1.5000");
}

}  // namespace
}  // namespace meshplan::exec
