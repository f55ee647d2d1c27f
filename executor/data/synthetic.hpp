// Synthetic regression, the data the seed material's small MLP examples
// train on: a task with a known answer, no files, and a loss floor you can
// compute, so a training run that fails to learn is obviously broken.
//
//   y = W x + b + noise,   x ~ N(0, I_in),   noise ~ N(0, noise_stddev^2 I_out)
//   W [out x in] ~ N(0, 1/in) (so each y component has variance ~1), b ~ N(0, 1)
//
// W and b are fixed by `data_seed`, the same for both splits; the x and noise
// of train and validation are drawn from independent streams of it. The
// loader's own seed only orders the samples, so every run trains on the same
// data, like a dataset on disk. The best achievable mean squared error per
// output is noise_stddev^2.
//
// Synthetic text (`--data synthetic-text`), the same idea for transformers:
// a byte corpus drawn from a first-order Markov source. Each byte has
// `successors` distinct next bytes, fixed by data_seed, each drawn with equal
// probability; so the best achievable next-byte loss is exactly
// ln(successors) nats (1.386 for 4) against ln 256 = 5.545 for a model that
// has learnt nothing, and even a small model gets most of the way there in
// a few hundred steps: a run whose loss stays flat is broken. (A source with
// longer contexts would need far more steps than a smoke run takes.) The
// corpus is the same on every machine and for every --seed; the text loader
// splits it and draws windows from it as it does for a file (text.hpp).
//
// defines: SyntheticConfig, SyntheticTruth, synthetic_truth, make_synthetic_regression,
//          SyntheticTextConfig, synthetic_text_corpus, synthetic_text_entropy_nats
#pragma once

#include <cstdint>
#include <vector>

#include "executor/data/in_memory.hpp"
#include "executor/data/loader.hpp"

namespace meshplan::data {

struct SyntheticConfig {
  std::int64_t input_features = 16;
  std::int64_t output_features = 4;
  std::int64_t train_samples = 8192;
  std::int64_t validation_samples = 1024;
  double noise_stddev = 0.01;
  std::uint64_t data_seed = 0x5eed;
};

struct SyntheticTruth {
  std::vector<float> weights;  // output_features x input_features, row-major
  std::vector<float> bias;     // output_features
};

SyntheticTruth synthetic_truth(const SyntheticConfig& config);

// Samples of `split`: inputs = x, target_values = y, no labels.
InMemoryDataset make_synthetic_regression(const SyntheticConfig& config, Split split);

struct SyntheticTextConfig {
  std::int64_t bytes = std::int64_t{4} << 20;  // 4 MiB: windows up to 419,429 tokens fit the validation split
  int successors = 4;                          // 1..256 distinct next bytes per byte
  std::uint64_t data_seed = 0x5eed;
};

// The corpus, `bytes` long.
std::vector<std::uint8_t> synthetic_text_corpus(const SyntheticTextConfig& config);

// The source's entropy rate, the loss floor: ln(successors).
double synthetic_text_entropy_nats(const SyntheticTextConfig& config);

}  // namespace meshplan::data
