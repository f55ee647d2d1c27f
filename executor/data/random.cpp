#include "executor/data/random.hpp"

#include <cmath>
#include <numbers>
#include <utility>

namespace meshplan::data {

std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) {
  // SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", 2014).
  std::uint64_t z = seed + (stream + 1) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t uniform_below(std::mt19937_64& engine, std::uint64_t bound) {
  // Accept only draws below the largest multiple of bound, so every residue is equally likely.
  const std::uint64_t rejection_limit = UINT64_MAX - UINT64_MAX % bound;
  std::uint64_t draw = engine();
  while (draw >= rejection_limit) draw = engine();
  return draw % bound;
}

double uniform_unit(std::mt19937_64& engine) {
  return static_cast<double>(engine() >> 11) * 0x1.0p-53;
}

double standard_normal(std::mt19937_64& engine) {
  const double u1 = 1.0 - uniform_unit(engine);  // (0, 1]: log is finite
  const double u2 = uniform_unit(engine);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

void fisher_yates_shuffle(std::vector<std::int64_t>& values, std::mt19937_64& engine) {
  for (std::size_t i = values.size(); i > 1; --i) {
    const auto j = static_cast<std::size_t>(uniform_below(engine, i));
    std::swap(values[i - 1], values[j]);
  }
}

}  // namespace meshplan::data
