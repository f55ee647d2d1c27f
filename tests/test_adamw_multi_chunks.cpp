// The host side of the multi-tensor AdamW (kernels/cuda/adamw_multi_chunks.hpp),
// with no GPU:
//   - the chunk table covers every element of every tensor exactly once, in
//     tensor and element order, no chunk spanning two tensors or holding
//     more than the chunk size, on random tensor lists (a fresh seed every
//     run, printed; MESHPLAN_ADAMW_CHUNKS_TEST_SEED replays one) with empty
//     tensors and sizes around multiples of the chunk size;
//   - adamw_element, the update the CUDA kernels run, equals
//     kernels/cpu/adamw.hpp's float step (gradients scaled first, as the
//     trainers clip) bit for bit over 10 steps on random inputs. The bound
//     is 0 ulps when the host compiler cannot fuse a*b+c (no FMA in the
//     target ISA: __FP_FAST_FMAF undefined, as on x86-64 without -march);
//     where it can, the two loops may be fused differently, and the bound
//     is 2 ulps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/adamw.hpp"
#include "kernels/cuda/adamw_multi_chunks.hpp"

namespace meshplan::kernels::cuda {
namespace {

std::uint64_t seed() {
  static const std::uint64_t value = [] {
    const std::uint64_t s = std::getenv("MESHPLAN_ADAMW_CHUNKS_TEST_SEED") != nullptr
                                ? std::strtoull(std::getenv("MESHPLAN_ADAMW_CHUNKS_TEST_SEED"), nullptr, 10)
                                : static_cast<std::uint64_t>(std::random_device{}());
    std::printf("adamw_multi_chunks: seed %llu (MESHPLAN_ADAMW_CHUNKS_TEST_SEED=%llu replays it)\n",
                static_cast<unsigned long long>(s), static_cast<unsigned long long>(s));
    return s;
  }();
  return value;
}

// Checks `chunks` against `sizes`: every element once, in order, chunks within one tensor and the chunk size.
void expect_exact_cover(const std::vector<std::int64_t>& sizes, std::int64_t chunk_elements,
                        const std::vector<TensorChunk>& chunks, const std::string& what) {
  std::vector<std::vector<std::uint8_t>> seen(sizes.size());
  for (std::size_t t = 0; t < sizes.size(); ++t) seen[t].assign(static_cast<std::size_t>(sizes[t]), 0);
  std::int64_t expected_chunks = 0;
  for (const std::int64_t n : sizes) expected_chunks += (n + chunk_elements - 1) / chunk_elements;
  EXPECT_EQ(static_cast<std::int64_t>(chunks.size()), expected_chunks) << what;
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    const TensorChunk& k = chunks[c];
    ASSERT_GE(k.tensor, 0) << what << ", chunk " << c;
    ASSERT_LT(k.tensor, static_cast<std::int64_t>(sizes.size())) << what << ", chunk " << c;
    const std::int64_t n = sizes[static_cast<std::size_t>(k.tensor)];
    ASSERT_GE(k.begin, 0) << what << ", chunk " << c;
    ASSERT_LT(k.begin, k.end) << what << ", chunk " << c << " is empty";
    ASSERT_LE(k.end, n) << what << ", chunk " << c << " runs past its tensor";
    EXPECT_LE(k.end - k.begin, chunk_elements) << what << ", chunk " << c;
    if (c > 0) {  // the order the norm's partial sums are added in
      const TensorChunk& before = chunks[c - 1];
      EXPECT_TRUE(before.tensor < k.tensor || (before.tensor == k.tensor && before.end == k.begin))
          << what << ", chunk " << c << " out of order";
    }
    for (std::int64_t i = k.begin; i < k.end; ++i) ++seen[static_cast<std::size_t>(k.tensor)][static_cast<std::size_t>(i)];
  }
  for (std::size_t t = 0; t < sizes.size(); ++t)
    for (std::size_t i = 0; i < seen[t].size(); ++i)
      if (seen[t][i] != 1) {
        ADD_FAILURE() << what << ": tensor " << t << " element " << i << " is in " << int{seen[t][i]} << " chunks";
        return;
      }
}

std::string describe(const std::vector<std::int64_t>& sizes, std::int64_t chunk_elements) {
  std::string s = "chunk " + std::to_string(chunk_elements) + ", sizes";
  for (const std::int64_t n : sizes) s += " " + std::to_string(n);
  return s + " (seed " + std::to_string(seed()) + ")";
}

TEST(AdamWMultiChunks, CoverEveryElementOnceOnRandomTensorLists) {
  std::mt19937_64 rng(seed());
  for (int trial = 0; trial < 300; ++trial) {
    const std::int64_t chunk = std::vector<std::int64_t>{1, 3, 64, 1000, kChunkElements}[rng() % 5];
    std::vector<std::int64_t> sizes(rng() % 13);
    for (std::int64_t& n : sizes) {
      const std::int64_t multiple = static_cast<std::int64_t>(rng() % 4) * chunk;
      switch (rng() % 5) {
        case 0: n = 0; break;
        case 1: n = std::max<std::int64_t>(multiple - 1, 0); break;
        case 2: n = multiple; break;
        case 3: n = multiple + 1; break;
        default: n = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(3 * chunk + 1)); break;
      }
      n = std::min<std::int64_t>(n, 300000);  // keeps the cover arrays small with chunk = kChunkElements
    }
    expect_exact_cover(sizes, chunk, tensor_chunks(sizes, chunk), describe(sizes, chunk));
    if (HasFailure()) return;
  }
}

TEST(AdamWMultiChunks, EmptyTensorsHaveNoChunksAndTheLastChunkIsShort) {
  const std::vector<std::int64_t> sizes = {0, 5, 0, kChunkElements, kChunkElements + 1, 0};
  const std::vector<TensorChunk> chunks = tensor_chunks(sizes);
  ASSERT_EQ(chunks.size(), 4u);
  const TensorChunk expected[] = {{1, 0, 5}, {3, 0, kChunkElements}, {4, 0, kChunkElements}, {4, kChunkElements, kChunkElements + 1}};
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    EXPECT_EQ(chunks[c].tensor, expected[c].tensor) << c;
    EXPECT_EQ(chunks[c].begin, expected[c].begin) << c;
    EXPECT_EQ(chunks[c].end, expected[c].end) << c;
  }
  EXPECT_TRUE(tensor_chunks({}).empty());
  EXPECT_TRUE(tensor_chunks({0, 0, 0}).empty());
  EXPECT_THROW(tensor_chunks({4, -1}), std::invalid_argument);
  EXPECT_THROW(tensor_chunks({4}, 0), std::invalid_argument);
  EXPECT_THROW(adamw_step_scalars(0, AdamWHyperparameters{}, 1.0f), std::invalid_argument);
}

// Distance in representable floats (0: the same bits; -0 and +0 are 1 apart).
std::int64_t ulp_distance(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return INT64_MAX;
  const auto ordered = [](float x) {
    std::int32_t bits = 0;
    std::memcpy(&bits, &x, sizeof bits);
    return bits < 0 ? static_cast<std::int64_t>(INT32_MIN) - bits - 1 : static_cast<std::int64_t>(bits);
  };
  return std::llabs(ordered(a) - ordered(b));
}

#if defined(__FP_FAST_FMAF)
constexpr std::int64_t kUlpBound = 2;
#else
constexpr std::int64_t kUlpBound = 0;
#endif

TEST(AdamWMultiChunks, ElementUpdateEqualsTheCpuStepInFloat) {
  std::mt19937_64 rng(seed() + 1);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  const std::size_t n = 20000;
  struct Case {
    double lr, weight_decay, max_grad_norm;  // max_grad_norm 0: no clipping
  };
  for (const Case c : {Case{1e-3, 0.0, 0.0}, Case{3e-4, 0.1, 1.0}, Case{6e-4, 0.01, 50.0}}) {
    AdamWHyperparameters hp;
    hp.learning_rate = c.lr;
    hp.weight_decay = c.weight_decay;
    std::vector<float> params(n), m(n, 0.0f), v(n, 0.0f);
    for (float& p : params) p = unit(rng);
    std::vector<float> twin_params = params, twin_m = m, twin_v = v;
    std::int64_t worst = 0;
    for (std::int64_t step = 1; step <= 10; ++step) {
      std::vector<float> grads(n);
      const float magnitude = std::pow(10.0f, static_cast<float>(rng() % 6) - 3.0f);  // 1e-3 .. 1e2
      for (float& g : grads) g = magnitude * unit(rng);
      const float scale = static_cast<float>(
          clip_scale(global_l2_norm<float>(std::vector<std::span<const float>>{grads}), c.max_grad_norm));
      const std::vector<float> raw = grads;
      if (scale != 1.0f)
        for (float& g : grads) g *= scale;  // the trainers' clipping, before the step
      adamw_update<float>(params.data(), grads.data(), m.data(), v.data(), static_cast<std::int64_t>(n), step, hp);
      const AdamWStepScalars s = adamw_step_scalars(step, hp, scale);
      for (std::size_t i = 0; i < n; ++i) adamw_element(twin_params[i], twin_m[i], twin_v[i], raw[i], s);
      for (std::size_t i = 0; i < n; ++i) {
        worst = std::max({worst, ulp_distance(twin_params[i], params[i]), ulp_distance(twin_m[i], m[i]),
                          ulp_distance(twin_v[i], v[i])});
      }
    }
    EXPECT_LE(worst, kUlpBound) << "lr " << c.lr << " weight decay " << c.weight_decay << " max norm "
                                << c.max_grad_norm << " (seed " << seed() << ")";
  }
}

}  // namespace
}  // namespace meshplan::kernels::cuda
