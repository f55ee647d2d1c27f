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
// defines: SyntheticConfig, SyntheticTruth, synthetic_truth, make_synthetic_regression
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

}  // namespace meshplan::data
