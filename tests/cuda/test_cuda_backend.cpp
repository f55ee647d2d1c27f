// The CUDA backend (executor/backend/cuda_backend.hpp) on a real GPU: random
// bytes (a fresh seed every run, printed; MESHPLAN_CUDA_TEST_SEED replays
// one) go host -> device -> device -> host on two contexts, one waiting for
// the other, and come back equal; the ledger holds exactly the bytes asked
// for, by category; the caching allocator reserves at least what is
// allocated, and a freed block is handed out again without a cudaMalloc;
// device out of memory is nullptr with nothing recorded. The allocator's
// rules themselves are tested without a GPU (tests/test_caching_allocator.cpp).
//
// Without a usable GPU the program prints why and exits 77, which ctest
// reports as skipped: it never passes without running.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "executor/backend/buffer.hpp"
#include "executor/backend/cuda_backend.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "tests/cuda/cuda_test_support.hpp"

namespace meshplan::exec {
namespace {

using kernels::cuda::test_support::seed;  // fresh every run, or MESHPLAN_CUDA_TEST_SEED

constexpr std::size_t MiB = std::size_t{1} << 20;

std::vector<unsigned char> random_bytes(std::size_t n, std::mt19937_64& rng) {
  std::vector<unsigned char> bytes(n);
  for (unsigned char& b : bytes) b = static_cast<unsigned char>(rng());
  return bytes;
}

TEST(CudaBackend, NamesItsDevice) {
  CudaBackend backend(0);
  EXPECT_EQ(backend.name(), "cuda:0");
  EXPECT_EQ(backend.device_kind(), DeviceKind::cuda);
  EXPECT_FALSE(backend.host_accessible());
  EXPECT_THROW(CudaBackend{CudaBackend::device_count()}, std::runtime_error);
}

TEST(CudaBackend, RoundTripsRandomBytesOnTwoContexts) {
  CudaBackend backend(0);
  std::mt19937_64 rng(seed());
  auto second = backend.make_context();
  auto& upload = backend.cuda_default_context();
  auto& download = dynamic_cast<CudaExecutionContext&>(*second);
  // Sizes that cross the rules: under 512 B, small, just over 1 MiB, from 10 MiB.
  for (std::size_t bytes : {std::size_t{1}, std::size_t{777}, 300 * std::size_t{1024} + 5, MiB + 1, 12 * MiB + 3}) {
    SCOPED_TRACE(bytes);
    const std::vector<unsigned char> original = random_bytes(bytes, rng);
    Buffer<unsigned char> first(backend, bytes, MemoryCategory::activations);
    Buffer<unsigned char> copy(backend, bytes, MemoryCategory::activations);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first.data()) % 256, 0u) << "cudaMalloc's documented alignment";
    backend.copy_host_to_device(first.data(), original.data(), bytes, upload);
    download.wait_for(upload);  // the device-to-device copy starts after the upload, with no host wait
    backend.copy_device_to_device(copy.data(), first.data(), bytes, download);
    std::vector<unsigned char> back(bytes, 0);
    backend.copy_device_to_host(back.data(), copy.data(), bytes, download);
    download.synchronize();
    EXPECT_EQ(back, original);
    // And straight back on the first context.
    std::vector<unsigned char> direct(bytes, 0);
    backend.copy_device_to_host(direct.data(), first.data(), bytes, upload);
    upload.synchronize();
    EXPECT_EQ(direct, original);
    // The default context waits before the buffers are freed: their blocks belong to its stream.
    upload.wait_for(download);
    upload.synchronize();
  }
}

TEST(CudaBackend, LedgerCountsRequestedBytesAndReservedCoversAllocated) {
  CudaBackend backend(0);
  void* parameters = backend.allocate(1000, MemoryCategory::parameters);
  void* activations = backend.allocate(3 * MiB, MemoryCategory::activations);
  ASSERT_NE(parameters, nullptr);
  ASSERT_NE(activations, nullptr);
  const MemorySnapshot held = backend.ledger().snapshot();
  EXPECT_EQ(held[MemoryCategory::parameters].now_bytes, 1000);
  EXPECT_EQ(held[MemoryCategory::activations].now_bytes, static_cast<std::int64_t>(3 * MiB));
  EXPECT_EQ(held.total.now_bytes, static_cast<std::int64_t>(3 * MiB + 1000));
  EXPECT_EQ(backend.allocated_bytes(), static_cast<std::int64_t>(1024 + 3 * MiB));  // rounded to 512 B
  EXPECT_EQ(backend.reserved_bytes(), static_cast<std::int64_t>(2 * MiB + 20 * MiB));  // one small, one large segment
  EXPECT_GE(backend.reserved_bytes(), backend.allocated_bytes());

  backend.deallocate(activations, 3 * MiB, MemoryCategory::activations);
  backend.deallocate(parameters, 1000, MemoryCategory::parameters);
  const MemorySnapshot freed = backend.ledger().snapshot();
  EXPECT_EQ(freed.total.now_bytes, 0);
  EXPECT_EQ(freed.total.peak_bytes, static_cast<std::int64_t>(3 * MiB + 1000));
  EXPECT_EQ(backend.reserved_bytes(), static_cast<std::int64_t>(22 * MiB)) << "freed blocks stay cached";
  backend.empty_cache();
  EXPECT_EQ(backend.reserved_bytes(), 0);
  EXPECT_EQ(backend.allocator_stats().raw_free_count, 2);
}

TEST(CudaBackend, FreeingAndReallocatingTheSameSizeHitsTheCache) {
  CudaBackend backend(0);
  void* first = backend.allocate(5 * MiB, MemoryCategory::workspace);
  ASSERT_NE(first, nullptr);
  const CachingAllocatorStats before = backend.allocator_stats();
  backend.deallocate(first, 5 * MiB, MemoryCategory::workspace);
  void* again = backend.allocate(5 * MiB, MemoryCategory::workspace);
  EXPECT_EQ(again, first);
  const CachingAllocatorStats after = backend.allocator_stats();
  EXPECT_EQ(after.raw_allocation_count, before.raw_allocation_count) << "no cudaMalloc for a cached block";
  EXPECT_EQ(after.cache_hit_count, before.cache_hit_count + 1);
  backend.deallocate(again, 5 * MiB, MemoryCategory::workspace);
}

TEST(CudaBackend, OutOfDeviceMemoryIsNullptrWithNothingRecorded) {
  CudaBackend backend(0);
  void* held = backend.allocate(1000, MemoryCategory::parameters);
  const std::size_t far_too_much = std::size_t{1} << 50;  // 1 PiB
  EXPECT_EQ(backend.allocate(far_too_much, MemoryCategory::activations), nullptr);
  EXPECT_EQ(backend.ledger().snapshot().total.now_bytes, 1000);
  EXPECT_EQ(backend.ledger().snapshot().total.peak_bytes, 1000);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the failed cudaMalloc must not leave an error behind";
  backend.deallocate(held, 1000, MemoryCategory::parameters);
}

}  // namespace
}  // namespace meshplan::exec

int main(int argc, char** argv) {
  return meshplan::kernels::cuda::test_support::run_gpu_tests(argc, argv, "cuda_backend_tests");
}
