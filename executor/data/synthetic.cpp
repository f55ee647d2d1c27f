#include "executor/data/synthetic.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "executor/data/random.hpp"

namespace meshplan::data {
namespace {

// Independent streams of data_seed.
constexpr std::uint64_t truth_stream = 0;
constexpr std::uint64_t train_stream = 1;
constexpr std::uint64_t validation_stream = 2;
constexpr std::uint64_t text_table_stream = 3;
constexpr std::uint64_t text_walk_stream = 4;

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

std::vector<std::uint8_t> synthetic_text_corpus(const SyntheticTextConfig& config) {
  constexpr int symbols = 256;
  const int successors = std::clamp(config.successors, 1, symbols);
  // table[b * k + i]: the i-th possible byte after b, all k distinct.
  std::vector<std::uint8_t> table(static_cast<std::size_t>(symbols * successors));
  std::mt19937_64 engine(derive_seed(config.data_seed, text_table_stream));
  for (std::size_t context = 0; context < static_cast<std::size_t>(symbols); ++context) {
    std::uint8_t* next = &table[context * static_cast<std::size_t>(successors)];
    for (int i = 0; i < successors; ++i) {
      std::uint8_t candidate = 0;
      do {
        candidate = static_cast<std::uint8_t>(uniform_below(engine, symbols));
      } while (std::find(next, next + i, candidate) != next + i);
      next[i] = candidate;
    }
  }
  std::vector<std::uint8_t> corpus(static_cast<std::size_t>(std::max<std::int64_t>(config.bytes, 0)));
  engine.seed(derive_seed(config.data_seed, text_walk_stream));
  for (std::size_t t = 0; t < corpus.size(); ++t) {
    corpus[t] = t == 0 ? static_cast<std::uint8_t>(uniform_below(engine, symbols))
                       : table[static_cast<std::size_t>(corpus[t - 1]) * static_cast<std::size_t>(successors) +
                               static_cast<std::size_t>(uniform_below(engine, static_cast<std::uint64_t>(successors)))];
  }
  return corpus;
}

double synthetic_text_entropy_nats(const SyntheticTextConfig& config) {
  return std::log(static_cast<double>(std::clamp(config.successors, 1, 256)));
}

}  // namespace meshplan::data
