// The executor's data loaders (executor/data/): the IDX reader on small .gz
// files written here with zlib (good, bad magic, truncated, wrong size), the
// real Fashion-MNIST files when Debian's dataset-fashion-mnist is installed,
// and the loader promises the trainer relies on: same seed same batches,
// restore continues exactly, an epoch visits every sample once, text windows
// stay inside their split with targets shifted by one, bad specs are Problems.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <functional>
#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "executor/data/fashion_mnist.hpp"
#include "executor/data/idx_file.hpp"
#include "executor/data/in_memory.hpp"
#include "executor/data/loader.hpp"
#include "executor/data/synthetic.hpp"
#include "executor/data/text.hpp"

namespace meshplan::data {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

Bytes idx_bytes(std::uint32_t magic, const std::vector<std::uint32_t>& dimensions, const Bytes& payload) {
  Bytes out;
  const auto put32 = [&](std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(v >> shift));
  };
  put32(magic);
  for (std::uint32_t d : dimensions) put32(d);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

void write_gz(const fs::path& path, const Bytes& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(file), Z_OK);
}

void write_plain(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

bool mentions(const Problems& problems, const std::string& where, const std::string& words) {
  return std::any_of(problems.begin(), problems.end(), [&](const Problem& p) {
    return p.where == where && p.message.find(words) != std::string::npos;
  });
}

bool same(const Batch& a, const Batch& b) {
  return a.samples == b.samples && a.inputs == b.inputs && a.targets == b.targets &&
         a.target_values == b.target_values;
}

std::unique_ptr<DataLoader> make_ok(const std::string& spec, Split split, std::uint64_t seed, std::int64_t t = 0) {
  Loaded<std::unique_ptr<DataLoader>> loaded = make_loader(spec, split, seed, t);
  EXPECT_TRUE(loaded.ok()) << (loaded.problems.empty() ? "" : describe(loaded.problems.front()));
  return std::move(loaded.value);
}

class DataFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("meshplan_data_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

// ---- IDX files ----

TEST_F(DataFiles, IdxReadsLabelsAndImages) {
  write_gz(path("labels.gz"), idx_bytes(0x801, {5}, {0, 1, 2, 3, 9}));
  Loaded<IdxArray> labels = read_idx_file(path("labels.gz"), 1);
  ASSERT_TRUE(labels.ok());
  EXPECT_EQ(labels.value.dimensions, (std::vector<std::int64_t>{5}));
  EXPECT_EQ(labels.value.values, (Bytes{0, 1, 2, 3, 9}));

  Bytes pixels(2 * 2 * 3);
  std::iota(pixels.begin(), pixels.end(), std::uint8_t{100});
  write_gz(path("images.gz"), idx_bytes(0x803, {2, 2, 3}, pixels));
  Loaded<IdxArray> images = read_idx_file(path("images.gz"), 3);
  ASSERT_TRUE(images.ok());
  EXPECT_EQ(images.value.dimensions, (std::vector<std::int64_t>{2, 2, 3}));
  EXPECT_EQ(images.value.values, pixels);
}

TEST_F(DataFiles, IdxReadsUncompressedCopies) {
  const Bytes bytes = idx_bytes(0x801, {3}, {7, 8, 9});
  write_plain(path("labels"), std::string(bytes.begin(), bytes.end()));
  Loaded<IdxArray> labels = read_idx_file(path("labels"), 1);
  ASSERT_TRUE(labels.ok());
  EXPECT_EQ(labels.value.values, (Bytes{7, 8, 9}));
}

TEST_F(DataFiles, IdxRejectsBadMagic) {
  write_gz(path("images.gz"), idx_bytes(0x803, {1, 1, 1}, {0}));
  EXPECT_TRUE(mentions(read_idx_file(path("images.gz"), 1).problems, path("images.gz"), "magic number is 0x00000803"));
  write_gz(path("floats.gz"), idx_bytes(0xD01, {1}, {0, 0, 0, 0}));
  EXPECT_TRUE(mentions(read_idx_file(path("floats.gz"), 1).problems, path("floats.gz"), "expected 0x00000801"));
}

TEST_F(DataFiles, IdxRejectsTruncatedAndOversizedFiles) {
  write_gz(path("short.gz"), Bytes{0, 0});
  EXPECT_TRUE(mentions(read_idx_file(path("short.gz"), 1).problems, path("short.gz"), "shorter than"));

  write_gz(path("header.gz"), idx_bytes(0x803, {4, 2}, {}));
  EXPECT_TRUE(mentions(read_idx_file(path("header.gz"), 3).problems, path("header.gz"), "header truncated"));

  write_gz(path("payload.gz"), idx_bytes(0x801, {10}, Bytes(7, 1)));
  EXPECT_TRUE(mentions(read_idx_file(path("payload.gz"), 1).problems, path("payload.gz"),
                       "promises 10 bytes, file holds 7"));

  write_gz(path("long.gz"), idx_bytes(0x801, {3}, Bytes(4, 1)));
  EXPECT_TRUE(mentions(read_idx_file(path("long.gz"), 1).problems, path("long.gz"), "longer than its header"));

  write_gz(path("zero.gz"), idx_bytes(0x803, {0, 28, 28}, {}));
  EXPECT_TRUE(mentions(read_idx_file(path("zero.gz"), 3).problems, path("zero.gz"), "size 0"));

  EXPECT_TRUE(mentions(read_idx_file(path("missing.gz"), 1).problems, path("missing.gz"), "cannot open"));
}

// A tiny file whose header claims 10 GB is refused without allocating the
// 10 GB first (it took 9.8 GB and 28 s): the peak resident size of this test
// process grows by well under the claim.
TEST_F(DataFiles, IdxHeaderClaimingGigabytesAllocatesWhatArrives) {
  write_gz(path("claims.gz"), idx_bytes(0x803, {100000, 100, 1000}, Bytes(100, 1)));
  struct rusage before {};
  ::getrusage(RUSAGE_SELF, &before);
  EXPECT_TRUE(mentions(read_idx_file(path("claims.gz"), 3).problems, path("claims.gz"),
                       "promises 10000000000 bytes, file holds 100"));
  struct rusage after {};
  ::getrusage(RUSAGE_SELF, &after);
  const double grown_bytes = 1024.0 * static_cast<double>(after.ru_maxrss - before.ru_maxrss);  // ru_maxrss is KiB
  EXPECT_LT(grown_bytes, 1e9) << "the header's claim was allocated";
}

// The byte-level loader holds its corpus in memory on every rank: a corpus
// past 4 GiB is refused by its size, before a byte is read (a sparse 5 GiB
// file costs no disk).
TEST_F(DataFiles, TextCorpusPastFourGibIsRefusedBeforeReading) {
  {
    std::ofstream(path("huge.txt")) << "x";
  }
  std::error_code error;
  fs::resize_file(path("huge.txt"), std::uintmax_t{5} << 30, error);
  if (error) GTEST_SKIP() << "cannot make a sparse file here: " << error.message();
  const auto corpus = read_text_corpus(path("huge.txt"));
  EXPECT_TRUE(mentions(corpus.problems, path("huge.txt"), "holds 5.0 GiB"));
  EXPECT_TRUE(mentions(corpus.problems, path("huge.txt"), "at most 4 GiB"));
  EXPECT_TRUE(corpus.value.empty());
  fs::remove(path("huge.txt"));
}

TEST_F(DataFiles, IdxRejectsACutGzipStream) {
  write_gz(path("whole.gz"), idx_bytes(0x801, {4000}, Bytes(4000, 3)));
  std::ifstream in(path("whole.gz"), std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  write_plain(path("cut.gz"), gz.substr(0, gz.size() - 12));  // drop the trailer and some data
  Loaded<IdxArray> cut = read_idx_file(path("cut.gz"), 1);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.problems.front().where, path("cut.gz"));
}

// ---- Fashion-MNIST ----

// A tiny copy in Fashion-MNIST's layout: `count` images whose pixels are all `i`, label i % 10.
void write_tiny_fashion_mnist(const fs::path& dir, Split split, std::uint32_t count, std::uint8_t bad_label = 0) {
  const auto [images, labels] = fashion_mnist_files(dir.string(), split);
  Bytes pixels, classes;
  for (std::uint32_t i = 0; i < count; ++i) {
    pixels.insert(pixels.end(), 28 * 28, static_cast<std::uint8_t>(i * 50));
    classes.push_back(static_cast<std::uint8_t>(i % 10));
  }
  if (bad_label) classes.back() = bad_label;
  write_gz(images, idx_bytes(0x803, {count, 28, 28}, pixels));
  write_gz(labels, idx_bytes(0x801, {count}, classes));
}

TEST_F(DataFiles, FashionMnistFromAnotherDirectory) {
  write_tiny_fashion_mnist(dir_, Split::train, 6);
  Loaded<InMemoryDataset> data = load_fashion_mnist(dir_.string(), Split::train);
  ASSERT_TRUE(data.ok()) << describe(data.problems.front());
  EXPECT_EQ(data.value.samples, 6);
  EXPECT_EQ(data.value.inputs_per_sample, 784);
  EXPECT_EQ(data.value.classes, 10);
  EXPECT_EQ(data.value.labels, (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_FLOAT_EQ(data.value.inputs[784 * 5], 250.0f / 255.0f);

  std::unique_ptr<DataLoader> loader = make_ok("fashion-mnist:" + dir_.string(), Split::train, 1);
  ASSERT_TRUE(loader);
  EXPECT_EQ(loader->shape().inputs_per_sample, 784);
  const Batch batch = loader->next_batch(4);
  EXPECT_EQ(batch.inputs.size(), 4u * 784u);
  EXPECT_EQ(batch.targets.size(), 4u);
  for (std::size_t s = 0; s < 4; ++s) {  // each row is the image its label says
    EXPECT_FLOAT_EQ(batch.inputs[s * 784], static_cast<float>(batch.targets[s] * 50) / 255.0f);
  }
}

TEST_F(DataFiles, FashionMnistProblemsNameTheFile) {
  write_tiny_fashion_mnist(dir_, Split::train, 3, /*bad_label=*/12);
  const auto [images, labels] = fashion_mnist_files(dir_.string(), Split::train);
  EXPECT_TRUE(mentions(load_fashion_mnist(dir_.string(), Split::train).problems, labels, "label 12 of sample 2"));

  // The test split is missing altogether: both files are named.
  const auto [test_images, test_labels] = fashion_mnist_files(dir_.string(), Split::validation);
  Loaded<std::unique_ptr<DataLoader>> missing = make_loader("fashion-mnist:" + dir_.string(), Split::validation, 1, 0);
  EXPECT_TRUE(mentions(missing.problems, test_images, "cannot open"));
  EXPECT_TRUE(mentions(missing.problems, test_labels, "cannot open"));

  write_gz(labels, idx_bytes(0x801, {2}, {0, 1}));
  EXPECT_TRUE(mentions(load_fashion_mnist(dir_.string(), Split::train).problems, labels, "holds 2 labels"));
}

TEST(FashionMnistInstalled, SizesLabelsAndFirstSample) {
  const auto [train_images, train_labels] = fashion_mnist_files(default_fashion_mnist_directory, Split::train);
  if (!fs::exists(train_labels)) GTEST_SKIP() << "dataset-fashion-mnist is not installed";

  // The first label and first image as the file holds them, read here without the loader.
  gzFile raw = gzopen(train_labels.c_str(), "rb");
  ASSERT_NE(raw, nullptr);
  std::uint8_t label_header_and_first[9] = {};
  ASSERT_EQ(gzread(raw, label_header_and_first, 9), 9);
  gzclose(raw);
  raw = gzopen(train_images.c_str(), "rb");
  ASSERT_NE(raw, nullptr);
  std::uint8_t image_header_and_first[16 + 784] = {};
  ASSERT_EQ(gzread(raw, image_header_and_first, sizeof image_header_and_first), 16 + 784);
  gzclose(raw);

  Loaded<InMemoryDataset> train = load_fashion_mnist(default_fashion_mnist_directory, Split::train);
  ASSERT_TRUE(train.ok()) << describe(train.problems.front());
  EXPECT_EQ(train.value.samples, 60000);
  EXPECT_EQ(train.value.inputs.size(), 60000u * 784u);
  EXPECT_EQ(train.value.labels[0], label_header_and_first[8]);
  for (std::size_t p = 0; p < 784; ++p) {
    ASSERT_FLOAT_EQ(train.value.inputs[p], image_header_and_first[16 + p] / 255.0f);
  }
  const auto [min_pixel, max_pixel] = std::minmax_element(train.value.inputs.begin(), train.value.inputs.end());
  EXPECT_GE(*min_pixel, 0.0f);
  EXPECT_LE(*max_pixel, 1.0f);
  std::vector<int> per_class(10);
  for (std::int32_t label : train.value.labels) {
    ASSERT_TRUE(label >= 0 && label < 10);
    ++per_class[static_cast<std::size_t>(label)];
  }
  EXPECT_EQ(per_class, std::vector<int>(10, 6000));  // Fashion-MNIST is balanced (Xiao et al. 2017)

  Loaded<InMemoryDataset> test = load_fashion_mnist(default_fashion_mnist_directory, Split::validation);
  ASSERT_TRUE(test.ok()) << describe(test.problems.front());
  EXPECT_EQ(test.value.samples, 10000);
  EXPECT_TRUE(std::all_of(test.value.labels.begin(), test.value.labels.end(),
                          [](std::int32_t label) { return label >= 0 && label < 10; }));
}

// ---- shuffling, determinism, checkpoints ----

InMemoryDataset numbered_samples(std::int64_t samples) {
  InMemoryDataset data;
  data.samples = samples;
  data.inputs_per_sample = 1;
  data.classes = 3;
  for (std::int64_t i = 0; i < samples; ++i) {
    data.inputs.push_back(static_cast<float>(i));
    data.labels.push_back(static_cast<std::int32_t>(i % 3));
  }
  return data;
}

TEST(Shuffle, OrderIsFixedOnEveryPlatform) {
  // mt19937_64's outputs are fixed by the C++ standard and the shuffle is ours,
  // so this order is the same with libstdc++, libc++ and MSVC.
  EXPECT_EQ(epoch_order(10, 42, 0), (std::vector<std::int64_t>{2, 9, 0, 7, 3, 6, 5, 4, 8, 1}));
  EXPECT_NE(epoch_order(10, 42, 0), epoch_order(10, 42, 1));
  EXPECT_NE(epoch_order(10, 42, 0), epoch_order(10, 43, 0));
  EXPECT_EQ(epoch_order(1, 42, 0), (std::vector<std::int64_t>{0}));
}

TEST(Shuffle, EachEpochVisitsEverySampleOnce) {
  ShuffledLoader loader(numbered_samples(10), 5);
  std::vector<std::vector<std::int64_t>> epochs(3);
  for (int b = 0; b < 10; ++b) {  // 30 samples in batches of 3: epochs end mid-batch
    const std::int64_t epoch_before = loader.epoch();
    const Batch batch = loader.next_batch(3);
    ASSERT_EQ(batch.samples, 3);
    for (std::size_t s = 0; s < 3; ++s) {
      const auto sample = static_cast<std::int64_t>(batch.inputs[s]);
      EXPECT_EQ(batch.targets[s], sample % 3);
      const std::size_t taken = static_cast<std::size_t>(b) * 3 + s;
      epochs[taken / 10].push_back(sample);
    }
    EXPECT_EQ(loader.epoch(), static_cast<std::int64_t>((b + 1) * 3 / 10));
    EXPECT_GE(loader.epoch(), epoch_before);
  }
  std::vector<std::int64_t> all(10);
  std::iota(all.begin(), all.end(), std::int64_t{0});
  for (std::size_t e = 0; e < 3; ++e) {
    EXPECT_EQ(epochs[e], epoch_order(10, 5, static_cast<std::int64_t>(e)));
    std::vector<std::int64_t> sorted = epochs[e];
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, all) << "epoch " << e;
  }
}

TEST(Determinism, SameSeedSameBatchesOtherSeedOthers) {
  std::unique_ptr<DataLoader> a = make_ok("synthetic", Split::train, 7);
  std::unique_ptr<DataLoader> b = make_ok("synthetic", Split::train, 7);
  std::unique_ptr<DataLoader> c = make_ok("synthetic", Split::train, 8);
  ASSERT_TRUE(a && b && c);
  bool any_difference = false;
  for (int i = 0; i < 5; ++i) {
    const Batch batch_a = a->next_batch(32);
    EXPECT_TRUE(same(batch_a, b->next_batch(32)));
    any_difference = any_difference || !same(batch_a, c->next_batch(32));
  }
  EXPECT_TRUE(any_difference);
}

// Takes `before` samples, saves the state, and checks a fresh loader restored
// to it produces the same next batches (across at least one epoch boundary).
void expect_restore_continues(const std::function<std::unique_ptr<DataLoader>()>& make, std::int64_t before,
                              std::int64_t batch) {
  std::unique_ptr<DataLoader> original = make();
  ASSERT_TRUE(original);
  original->next_batch(before);
  const LoaderState saved = original->state();
  std::unique_ptr<DataLoader> resumed = make();
  ASSERT_TRUE(resumed->restore(saved).empty());
  EXPECT_EQ(resumed->state(), saved);
  const std::int64_t batches = original->samples_per_epoch() / batch + 2;
  for (std::int64_t i = 0; i < batches; ++i) {
    ASSERT_TRUE(same(original->next_batch(batch), resumed->next_batch(batch))) << "batch " << i;
    ASSERT_EQ(original->state(), resumed->state());
  }
  EXPECT_GT(original->epoch(), saved.epoch);
}

TEST(Checkpoint, RestoreContinuesExactlyInMemory) {
  expect_restore_continues([] { return std::unique_ptr<DataLoader>(new ShuffledLoader(numbered_samples(50), 3)); },
                           73, 7);
  SyntheticConfig small;
  small.train_samples = 300;
  expect_restore_continues(
      [&] { return std::unique_ptr<DataLoader>(new ShuffledLoader(make_synthetic_regression(small, Split::train), 9)); },
      450, 64);
}

TEST_F(DataFiles, RestoreContinuesExactlyText) {
  std::string text;
  for (int i = 0; i < 2000; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  write_plain(path("corpus.txt"), text);
  expect_restore_continues([&] { return make_ok("text:" + path("corpus.txt"), Split::train, 11, 16); }, 150, 16);
}

TEST(Checkpoint, RestoreRejectsForeignStates) {
  ShuffledLoader loader(numbered_samples(10), 3);
  loader.next_batch(4);
  const LoaderState before = loader.state();
  EXPECT_TRUE(mentions(loader.restore({4, 0, 0}), "data loader state", "seed 4"));
  EXPECT_TRUE(mentions(loader.restore({3, 0, 10}), "data loader state", "position 10"));
  EXPECT_TRUE(mentions(loader.restore({3, -1, 0}), "data loader state", "negative"));
  EXPECT_EQ(loader.state(), before);
}

// ---- synthetic ----

TEST(Synthetic, TargetsAreTheHiddenLinearMapPlusSmallNoise) {
  SyntheticConfig config;
  const SyntheticTruth truth = synthetic_truth(config);
  const InMemoryDataset data = make_synthetic_regression(config, Split::validation);
  ASSERT_EQ(data.samples, config.validation_samples);
  const auto in = static_cast<std::size_t>(config.input_features);
  const auto out = static_cast<std::size_t>(config.output_features);
  double squared_residual = 0;
  for (std::size_t s = 0; s < static_cast<std::size_t>(data.samples); ++s) {
    for (std::size_t o = 0; o < out; ++o) {
      double y = truth.bias[o];
      for (std::size_t i = 0; i < in; ++i) y += static_cast<double>(truth.weights[o * in + i]) * data.inputs[s * in + i];
      const double residual = data.target_values[s * out + o] - y;
      squared_residual += residual * residual;
    }
  }
  const double noise_variance = squared_residual / static_cast<double>(data.samples * config.output_features);
  EXPECT_NEAR(std::sqrt(noise_variance), config.noise_stddev, 0.1 * config.noise_stddev);
  // The splits share W but not samples.
  EXPECT_NE(make_synthetic_regression(config, Split::train).inputs[0], data.inputs[0]);
}

// ---- synthetic text ----

// The corpus is the Markov source its header states: every byte is followed
// by exactly `successors` distinct bytes, about equally often, so the
// empirical next-byte entropy is ln(successors), the loss floor it reports;
// and it is one fixed corpus, whatever the loader's seed.
TEST(SyntheticText, IsAFirstOrderSourceWithItsStatedEntropy) {
  const SyntheticTextConfig config;
  const std::vector<std::uint8_t> corpus = synthetic_text_corpus(config);
  ASSERT_EQ(std::ssize(corpus), config.bytes);
  EXPECT_EQ(corpus, synthetic_text_corpus(config));
  SyntheticTextConfig other = config;
  other.data_seed += 1;
  EXPECT_NE(corpus, synthetic_text_corpus(other));

  std::vector<std::array<std::int64_t, 256>> counts(256);
  for (auto& row : counts) row.fill(0);
  for (std::size_t t = 1; t < corpus.size(); ++t) ++counts[corpus[t - 1]][corpus[t]];
  double entropy = 0, transitions = 0;
  int contexts_seen = 0;
  for (const auto& row : counts) {
    const double total = static_cast<double>(std::accumulate(row.begin(), row.end(), std::int64_t{0}));
    if (total == 0) continue;
    ++contexts_seen;
    EXPECT_EQ(std::count_if(row.begin(), row.end(), [](std::int64_t c) { return c > 0; }), config.successors);
    for (const std::int64_t c : row) {
      if (c > 0) entropy -= static_cast<double>(c) * std::log(static_cast<double>(c) / total);
    }
    transitions += total;
  }
  EXPECT_GT(contexts_seen, 16);  // the walk does not sit in a few bytes
  EXPECT_NEAR(entropy / transitions, synthetic_text_entropy_nats(config), 0.005);
  EXPECT_NEAR(synthetic_text_entropy_nats(config), std::log(4.0), 1e-12);
}

TEST(SyntheticText, LoadsAsTextWindowsOfItsSplits) {
  const std::vector<std::uint8_t> corpus = synthetic_text_corpus(SyntheticTextConfig{});
  const std::int64_t t = 32;
  for (Split split : {Split::train, Split::validation}) {
    Loaded<std::unique_ptr<DataLoader>> loaded = make_loader("synthetic-text", split, 7, t);
    ASSERT_TRUE(loaded.ok());
    DataLoader& loader = *loaded.value;
    EXPECT_EQ(loader.shape().classes, text_vocab);
    const TextSplitRange range = text_split_range(std::ssize(corpus), split);
    EXPECT_EQ(loader.samples_per_epoch(), (range.end - range.begin) / t);
    const Batch batch = loader.next_batch(16);
    for (std::size_t s = 0; s < 16; ++s) {
      // Each window is a run of the corpus, inside the split, targets one byte on.
      const std::uint8_t first = static_cast<std::uint8_t>(batch.inputs[s * static_cast<std::size_t>(t)]);
      bool found = false;
      for (std::int64_t at = range.begin; at + t < range.end && !found; ++at) {
        if (corpus[static_cast<std::size_t>(at)] != first) continue;
        found = true;
        for (std::int64_t k = 0; k < t && found; ++k) {
          const std::size_t i = s * static_cast<std::size_t>(t) + static_cast<std::size_t>(k);
          found = batch.inputs[i] == corpus[static_cast<std::size_t>(at + k)] &&
                  batch.targets[i] == corpus[static_cast<std::size_t>(at + k + 1)];
        }
      }
      EXPECT_TRUE(found) << "window " << s << " of the " << to_string(split) << " split";
    }
  }
  // The loader's seed picks the windows, not the corpus.
  const Batch a = make_loader("synthetic-text", Split::train, 1, t).value->next_batch(4);
  const Batch b = make_loader("synthetic-text", Split::train, 2, t).value->next_batch(4);
  EXPECT_NE(a.inputs, b.inputs);
}

TEST(SyntheticText, ChecksWindowsWithoutGeneratingAndRefusesArguments) {
  // The validation split is the last 10% of 4 MiB: 419,430 bytes, so windows of 419,429 + 1 fit.
  const std::int64_t validation = text_split_range(SyntheticTextConfig{}.bytes, Split::validation).end -
                                  text_split_range(SyntheticTextConfig{}.bytes, Split::validation).begin;
  EXPECT_TRUE(check_data_spec("synthetic-text", validation - 1).empty());
  EXPECT_TRUE(mentions(check_data_spec("synthetic-text", validation), "synthetic-text",
                       "the validation split holds " + std::to_string(validation) + " bytes"));
  EXPECT_TRUE(mentions(make_loader("synthetic-text", Split::validation, 1, validation).problems, "synthetic-text",
                       "fewer than one window"));
  EXPECT_TRUE(mentions(check_data_spec("synthetic-text", 0), "--data", "sequence length"));
  EXPECT_TRUE(mentions(make_loader("synthetic-text:big", Split::train, 1, 8).problems, "--data", "takes no argument"));
}

// ---- text ----

TEST_F(DataFiles, TextWindowsStayInTheirSplitAndTargetsShiftByOne) {
  // 900 lowercase bytes of train, then 100 digits of validation (the last 10%).
  std::string text;
  for (int i = 0; i < 900; ++i) text += static_cast<char>('a' + i % 26);
  for (int i = 0; i < 100; ++i) text += static_cast<char>('0' + i % 10);
  write_plain(path("corpus.txt"), text);
  const std::int64_t t = 12;

  for (Split split : {Split::train, Split::validation}) {
    std::unique_ptr<DataLoader> loader = make_ok("text:" + path("corpus.txt"), split, 1, t);
    ASSERT_TRUE(loader);
    EXPECT_EQ(loader->shape().classes, 256);
    const Batch batch = loader->next_batch(64);
    ASSERT_EQ(batch.inputs.size(), static_cast<std::size_t>(64 * t));
    ASSERT_EQ(batch.targets.size(), static_cast<std::size_t>(64 * t));
    for (std::size_t s = 0; s < 64; ++s) {
      std::string window;
      for (std::size_t k = 0; k < static_cast<std::size_t>(t); ++k) {
        window += static_cast<char>(batch.inputs[s * static_cast<std::size_t>(t) + k]);
      }
      window += static_cast<char>(batch.targets[s * static_cast<std::size_t>(t) + static_cast<std::size_t>(t) - 1]);
      for (std::size_t k = 0; k + 1 < static_cast<std::size_t>(t); ++k) {
        ASSERT_EQ(batch.targets[s * static_cast<std::size_t>(t) + k],
                  static_cast<std::int32_t>(batch.inputs[s * static_cast<std::size_t>(t) + k + 1]));
      }
      const std::size_t at = text.find(window);
      ASSERT_NE(at, std::string::npos) << window;
      if (split == Split::train) {
        EXPECT_LE(at + window.size(), 900u) << window;
      } else {
        EXPECT_GE(at, 900u) << window;
      }
    }
  }
}

TEST_F(DataFiles, TextFolderIsItsFilesInNameOrder) {
  fs::create_directories(dir_ / "corpus" / "sub");
  write_plain(dir_ / "corpus" / "b.txt", "world");
  write_plain(dir_ / "corpus" / "a.txt", "hello ");
  write_plain(dir_ / "corpus" / "sub" / "c.txt", "ignored");
  Loaded<std::vector<std::uint8_t>> corpus = read_text_corpus(path("corpus"));
  ASSERT_TRUE(corpus.ok());
  EXPECT_EQ(std::string(corpus.value.begin(), corpus.value.end()), "hello world");
  EXPECT_EQ(text_split_range(1000, Split::train).end, 900);
  EXPECT_EQ(text_split_range(1000, Split::validation).begin, 900);
}

// ---- bad specs ----

TEST_F(DataFiles, BadSpecsAreProblems) {
  const auto problems = [](const std::string& spec, std::int64_t t = 8) {
    return make_loader(spec, Split::train, 1, t).problems;
  };
  EXPECT_TRUE(mentions(problems("mnist"), "--data", "unknown data kind 'mnist'"));
  EXPECT_TRUE(mentions(problems(""), "--data", "unknown data kind ''"));
  EXPECT_TRUE(mentions(problems("text"), "--data", "names no file or folder"));
  EXPECT_TRUE(mentions(problems("text:"), "--data", "names no file or folder"));
  EXPECT_TRUE(mentions(problems("fashion-mnist:"), "--data", "names no directory"));
  EXPECT_TRUE(mentions(problems("synthetic:3"), "--data", "takes no argument"));
  EXPECT_TRUE(mentions(problems("text:" + path("nothing")), path("nothing"), "no such file or folder"));

  write_plain(path("empty.txt"), "");
  EXPECT_TRUE(mentions(problems("text:" + path("empty.txt")), path("empty.txt"), "text is empty"));
  fs::create_directories(dir_ / "hollow");
  EXPECT_TRUE(mentions(problems("text:" + path("hollow")), path("hollow"), "no regular files"));
  write_plain(path("short.txt"), "01234567");
  EXPECT_TRUE(mentions(problems("text:" + path("short.txt")), path("short.txt"), "fewer than one window of 9"));
  EXPECT_TRUE(mentions(problems("text:" + path("short.txt"), 0), "--data", "sequence length"));
}

}  // namespace
}  // namespace meshplan::data
