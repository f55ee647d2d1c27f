// Datasets small enough to hold in memory (Fashion-MNIST is 47 MB as floats,
// the synthetic set far less) share one loader: shuffle the sample indices
// at the start of every epoch, then walk them. The permutation of epoch e is
// a Fisher-Yates shuffle driven by std::mt19937_64 seeded with
// derive_seed(seed, e), so it can be rebuilt from (seed, epoch) alone and a
// checkpoint needs no RNG state at all.
//
// defines: InMemoryDataset, epoch_order, ShuffledLoader
#pragma once

#include <cstdint>
#include <vector>

#include "executor/data/loader.hpp"

namespace meshplan::data {

// Row-major arrays, one row per sample. Either labels (classes > 0) or
// target values (target_values_per_sample > 0), or both.
struct InMemoryDataset {
  std::int64_t samples = 0;
  std::int64_t inputs_per_sample = 0;
  std::vector<float> inputs;  // samples x inputs_per_sample
  std::int64_t classes = 0;
  std::vector<std::int32_t> labels;  // samples, each in [0, classes)
  std::int64_t target_values_per_sample = 0;
  std::vector<float> target_values;  // samples x target_values_per_sample
};

// The order in which epoch `epoch` visits samples 0..samples-1.
std::vector<std::int64_t> epoch_order(std::int64_t samples, std::uint64_t seed, std::int64_t epoch);

class ShuffledLoader final : public DataLoader {
 public:
  // `dataset` must hold at least one sample and arrays of the sizes it states.
  ShuffledLoader(InMemoryDataset dataset, std::uint64_t seed);

  Batch next_batch(std::int64_t samples) override;
  std::int64_t epoch() const override { return epoch_; }
  std::int64_t samples_per_epoch() const override { return dataset_.samples; }
  BatchShape shape() const override;
  LoaderState state() const override { return {seed_, epoch_, position_}; }
  Problems restore(const LoaderState& state) override;

 private:
  void start_epoch(std::int64_t epoch);

  InMemoryDataset dataset_;
  std::uint64_t seed_;
  std::int64_t epoch_ = 0;
  std::int64_t position_ = 0;
  std::vector<std::int64_t> order_;
};

}  // namespace meshplan::data
