#include "executor/data/synthetic.hpp"

#include <cmath>
#include <random>

#include "executor/data/random.hpp"

namespace meshplan::data {
namespace {

// Independent streams of data_seed.
constexpr std::uint64_t truth_stream = 0;
constexpr std::uint64_t train_stream = 1;
constexpr std::uint64_t validation_stream = 2;

}  // namespace

SyntheticTruth synthetic_truth(const SyntheticConfig& config) {
  std::mt19937_64 engine(derive_seed(config.data_seed, truth_stream));
  SyntheticTruth truth;
  const double weight_stddev = 1.0 / std::sqrt(static_cast<double>(config.input_features));
  truth.weights.resize(static_cast<std::size_t>(config.output_features * config.input_features));
  for (float& w : truth.weights) w = static_cast<float>(weight_stddev * standard_normal(engine));
  truth.bias.resize(static_cast<std::size_t>(config.output_features));
  for (float& b : truth.bias) b = static_cast<float>(standard_normal(engine));
  return truth;
}

InMemoryDataset make_synthetic_regression(const SyntheticConfig& config, Split split) {
  const SyntheticTruth truth = synthetic_truth(config);
  std::mt19937_64 engine(derive_seed(config.data_seed, split == Split::train ? train_stream : validation_stream));

  InMemoryDataset data;
  data.samples = split == Split::train ? config.train_samples : config.validation_samples;
  data.inputs_per_sample = config.input_features;
  data.target_values_per_sample = config.output_features;
  const auto in = static_cast<std::size_t>(config.input_features);
  const auto out = static_cast<std::size_t>(config.output_features);
  data.inputs.resize(static_cast<std::size_t>(data.samples) * in);
  data.target_values.resize(static_cast<std::size_t>(data.samples) * out);
  for (std::size_t s = 0; s < static_cast<std::size_t>(data.samples); ++s) {
    float* x = &data.inputs[s * in];
    for (std::size_t i = 0; i < in; ++i) x[i] = static_cast<float>(standard_normal(engine));
    for (std::size_t o = 0; o < out; ++o) {
      double y = truth.bias[o] + config.noise_stddev * standard_normal(engine);
      for (std::size_t i = 0; i < in; ++i) y += static_cast<double>(truth.weights[o * in + i]) * x[i];
      data.target_values[s * out + o] = static_cast<float>(y);
    }
  }
  return data;
}

}  // namespace meshplan::data
