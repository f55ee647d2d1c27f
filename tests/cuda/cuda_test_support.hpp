// What the CUDA tests share: the seed (fresh every run, or
// MESHPLAN_CUDA_TEST_SEED), random vectors exactly representable in float
// or bf16, DeviceArray<T> (device memory freed when it goes, filled from and
// read back as doubles, poisoned with NaN before a kernel that must write
// it), and the relative error ||a - b|| / ||b|| that the tolerances bound.
//
// Every GPU test program's main() is run_gpu_tests: without a usable GPU it
// says why and exits 77 (ctest: skipped), never passing vacuously.
//
// defines: test_support::Vec, seed, random_vector, bf16_vector, DeviceArray,
// DeviceFloats, DeviceBf16, DeviceInts, on_device, relative_error, accumulated_error, run_gpu_tests
#pragma once

#include <cuda_bf16.h>
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_check.hpp"

namespace meshplan::kernels::cuda::test_support {

using Vec = std::vector<double>;

inline std::uint64_t seed() {
  static const std::uint64_t value = [] {
    if (const char* fixed = std::getenv("MESHPLAN_CUDA_TEST_SEED")) return static_cast<std::uint64_t>(std::strtoull(fixed, nullptr, 10));
    return static_cast<std::uint64_t>(std::random_device{}());
  }();
  return value;
}

inline Vec random_vector(std::size_t n, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double& x : v) x = static_cast<double>(static_cast<float>(dist(rng)));  // exactly representable in float
  return v;
}

// A device array of T (float, bf16 or int32), freed when it goes. upload and
// download convert from and to double (T's rounding); poison sets every byte
// to 0xFF, NaN for float and bf16.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t n) : n_(n) { MESHPLAN_CUDA_CHECK(cudaMalloc(&data_, std::max<std::size_t>(n, 1) * sizeof(T))); }
  explicit DeviceArray(const std::vector<T>& values) : DeviceArray(values.size()) {
    MESHPLAN_CUDA_CHECK(cudaMemcpy(data_, values.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& other) noexcept : data_(other.data_), n_(other.n_) { other.data_ = nullptr; }
  DeviceArray& operator=(DeviceArray&&) = delete;
  ~DeviceArray() { cudaFree(data_); }
  T* get() { return data_; }
  const T* get() const { return data_; }
  void upload(const Vec& v) {
    std::vector<T> h(n_);
    for (std::size_t i = 0; i < n_; ++i) h[i] = static_cast<T>(static_cast<float>(v[i]));
    MESHPLAN_CUDA_CHECK(cudaMemcpy(data_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  void poison() { MESHPLAN_CUDA_CHECK(cudaMemset(data_, 0xFF, n_ * sizeof(T))); }
  Vec download() const {
    std::vector<T> h(n_);
    MESHPLAN_CUDA_CHECK(cudaDeviceSynchronize());
    MESHPLAN_CUDA_CHECK(cudaMemcpy(h.data(), data_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    Vec v(n_);
    for (std::size_t i = 0; i < n_; ++i) v[i] = static_cast<float>(h[i]);
    return v;
  }

 private:
  T* data_ = nullptr;
  std::size_t n_;
};
using DeviceFloats = DeviceArray<float>;
using DeviceBf16 = DeviceArray<__nv_bfloat16>;
using DeviceInts = DeviceArray<std::int32_t>;

inline DeviceFloats on_device(const Vec& v) {
  DeviceFloats d(v.size());
  d.upload(v);
  return d;
}

// ||a - b|| / ||b||; NaN anywhere fails.
inline double relative_error(const Vec& a, const Vec& b) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

// For an output that a kernel accumulates (out = start + added):
// ||gpu - reference|| / (||start|| + ||added||), which stays meaningful where
// the sum cancels and its own norm is near zero.
inline double accumulated_error(const Vec& gpu, const Vec& reference, const Vec& start, const Vec& added) {
  double diff = 0, start_norm = 0, added_norm = 0;
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    if (!std::isfinite(gpu[i])) return INFINITY;
    diff += (gpu[i] - reference[i]) * (gpu[i] - reference[i]);
    start_norm += start[i] * start[i];
    added_norm += added[i] * added[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(start_norm) + std::sqrt(added_norm), 1e-300);
}

// Values exactly representable in bf16, as the GPU holds them.
inline Vec bf16_vector(std::size_t n, std::mt19937_64& rng) {
  Vec v = random_vector(n, rng);
  for (double& x : v) x = __bfloat162float(__float2bfloat16(static_cast<float>(x)));
  return v;
}

// The main() of a GPU test program: exit 77 with the reason when no CUDA
// device can be used; else print the seed (and `extra`) and run the tests.
inline int run_gpu_tests(int argc, char** argv, const char* program, const std::string& extra = "") {
  const std::string problem = cuda_device_problem();
  if (!problem.empty()) {
    std::printf("%s: skipped: %s; these tests need an NVIDIA GPU (scripts/gpu/cuda-checks.sh runs them on one)\n",
                program, problem.c_str());
    return 77;
  }
  std::printf("%s: %sseed %llu (MESHPLAN_CUDA_TEST_SEED=%llu replays it)\n", program, extra.c_str(),
              static_cast<unsigned long long>(seed()), static_cast<unsigned long long>(seed()));
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

}  // namespace meshplan::kernels::cuda::test_support
