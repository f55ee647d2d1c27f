#include "executor/data/in_memory.hpp"

#include <algorithm>
#include <cassert>
#include <numeric>
#include <random>
#include <utility>

#include "executor/data/random.hpp"

namespace meshplan::data {

std::vector<std::int64_t> epoch_order(std::int64_t samples, std::uint64_t seed, std::int64_t epoch) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(samples));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::mt19937_64 engine(derive_seed(seed, static_cast<std::uint64_t>(epoch)));
  fisher_yates_shuffle(order, engine);
  return order;
}

ShuffledLoader::ShuffledLoader(InMemoryDataset dataset, std::uint64_t seed)
    : dataset_(std::move(dataset)), seed_(seed) {
  assert(dataset_.samples > 0);
  assert(std::ssize(dataset_.inputs) == dataset_.samples * dataset_.inputs_per_sample);
  assert(dataset_.classes == 0 || std::ssize(dataset_.labels) == dataset_.samples);
  assert(std::ssize(dataset_.target_values) == dataset_.samples * dataset_.target_values_per_sample);
  start_epoch(0);
}

void ShuffledLoader::start_epoch(std::int64_t epoch) {
  epoch_ = epoch;
  position_ = 0;
  order_ = epoch_order(dataset_.samples, seed_, epoch);
}

BatchShape ShuffledLoader::shape() const {
  return {dataset_.inputs_per_sample, dataset_.classes > 0 ? 1 : 0, dataset_.target_values_per_sample,
          dataset_.classes};
}

Batch ShuffledLoader::next_batch(std::int64_t samples) {
  Batch batch;
  batch.samples = std::max<std::int64_t>(samples, 0);
  const auto in_width = static_cast<std::size_t>(dataset_.inputs_per_sample);
  const auto out_width = static_cast<std::size_t>(dataset_.target_values_per_sample);
  batch.inputs.reserve(static_cast<std::size_t>(batch.samples) * in_width);
  batch.target_values.reserve(static_cast<std::size_t>(batch.samples) * out_width);
  for (std::int64_t s = 0; s < batch.samples; ++s) {
    const auto row = static_cast<std::size_t>(order_[static_cast<std::size_t>(position_)]);
    const auto inputs = dataset_.inputs.begin() + static_cast<std::ptrdiff_t>(row * in_width);
    batch.inputs.insert(batch.inputs.end(), inputs, inputs + static_cast<std::ptrdiff_t>(in_width));
    if (dataset_.classes > 0) batch.targets.push_back(dataset_.labels[row]);
    const auto values = dataset_.target_values.begin() + static_cast<std::ptrdiff_t>(row * out_width);
    batch.target_values.insert(batch.target_values.end(), values, values + static_cast<std::ptrdiff_t>(out_width));
    if (++position_ == dataset_.samples) start_epoch(epoch_ + 1);
  }
  return batch;
}

Problems ShuffledLoader::restore(const LoaderState& state) {
  Problems problems = check_loader_state(state, seed_, dataset_.samples);
  if (has_errors(problems)) return problems;
  if (state.epoch != epoch_) start_epoch(state.epoch);
  position_ = state.position;
  return problems;
}

}  // namespace meshplan::data
