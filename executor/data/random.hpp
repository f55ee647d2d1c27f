// Reproducible randomness for the data loaders. std::mt19937_64's output
// sequence is fixed by the C++ standard, but std::shuffle,
// std::uniform_int_distribution and std::normal_distribution are not: libstdc++
// and libc++ give different results from the same engine. Reruns and resumes
// must be bit-identical on every platform (docs/architecture.md, correctness ladder step
// 2), so everything drawn from an engine goes through these few functions.
//
// defines: derive_seed, uniform_below, uniform_unit, standard_normal, fisher_yates_shuffle
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace meshplan::data {

// A well-mixed seed for an independent stream (an epoch, a split, a tensor):
// the SplitMix64 finaliser applied to seed + golden-ratio multiples of stream.
std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream);

// Uniform in [0, bound), bound > 0, by rejection (no modulo bias).
std::uint64_t uniform_below(std::mt19937_64& engine, std::uint64_t bound);

// Uniform in [0, 1) with 53 random bits.
double uniform_unit(std::mt19937_64& engine);

// N(0, 1) by the Box-Muller transform; uses exactly two engine outputs.
double standard_normal(std::mt19937_64& engine);

// Fisher-Yates (Knuth, TAOCP vol. 2, 3.4.2, Algorithm P), high index down.
void fisher_yates_shuffle(std::vector<std::int64_t>& values, std::mt19937_64& engine);

}  // namespace meshplan::data
