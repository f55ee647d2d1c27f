// One NVIDIA GPU as a Backend (backend.hpp), through the CUDA runtime API in
// plain C++ (no kernels here): device memory comes from a CachingAllocator
// (caching_allocator.hpp) over cudaMalloc/cudaFree, so a step that frees and
// allocates the same buffers again calls neither; a context is a CUDA stream;
// copies are cudaMemcpyAsync on the context's stream. Built only when the
// CUDA toolkit is found (MESHPLAN_HAVE_CUDA), as the separate library
// meshplan_cuda_backend; nothing else in the executor includes this header.
//
// Streams and memory. Backend::allocate names no context, so every block is
// tagged with the default context's stream and reused only by it: memory
// written or read on another context must be ordered before it is freed
// (synchronize() that context, or have the default context wait_for() it),
// as with PyTorch's allocator without record_stream.
//
// Every CUDA call is checked (kernels/cuda/cuda_check.hpp): a failure throws
// std::runtime_error naming the call and CUDA's message. Out of device memory
// is not a failure: allocate returns nullptr, as the interface says.
//
// defines: CudaExecutionContext, CudaBackend
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "executor/backend/backend.hpp"
#include "executor/backend/caching_allocator.hpp"

namespace meshplan::exec {

// A CUDA stream on one device (non-blocking: it never waits for the legacy
// default stream), with an event for other contexts to wait on.
class CudaExecutionContext final : public ExecutionContext {
 public:
  explicit CudaExecutionContext(int device);
  ~CudaExecutionContext() override;
  CudaExecutionContext(const CudaExecutionContext&) = delete;
  CudaExecutionContext& operator=(const CudaExecutionContext&) = delete;

  void synchronize() override;  // cudaStreamSynchronize
  // Work enqueued here from now on starts only after everything enqueued on
  // `other` so far has finished (cudaEventRecord on other's stream, then
  // cudaStreamWaitEvent here); the host does not wait.
  void wait_for(CudaExecutionContext& other);

  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;  // recorded by wait_for callers on this stream
};

class CudaBackend final : public Backend {
 public:
  // The number of CUDA devices; 0 (never an exception) without a driver or GPU.
  static int device_count() noexcept;

  // Device `device` (0 <= device < device_count()); throws std::runtime_error otherwise.
  explicit CudaBackend(int device = 0);
  ~CudaBackend() override;

  std::string_view name() const override { return name_; }  // "cuda:N"
  DeviceKind device_kind() const override { return DeviceKind::cuda; }
  // Aligned to 512 B within a segment, segments as cudaMalloc aligns them (at least 256 B).
  void* allocate(std::size_t bytes, MemoryCategory category) override;
  void deallocate(void* pointer, std::size_t bytes, MemoryCategory category) noexcept override;
  // Page-locked host memory (cudaMallocHost), recorded under communication.
  void* allocate_host_staging(std::size_t bytes) override;
  void deallocate_host_staging(void* pointer, std::size_t bytes) noexcept override;
  MemoryLedger& ledger() override { return ledger_; }
  const MemoryLedger& ledger() const override { return ledger_; }
  ExecutionContext& default_context() override { return *default_context_; }
  std::unique_ptr<ExecutionContext> make_context() override;
  // `context` must be a CudaExecutionContext of this backend (std::invalid_argument otherwise).
  void copy_host_to_device(void* device_destination, const void* host_source, std::size_t bytes,
                           ExecutionContext& context) override;
  void copy_device_to_host(void* host_destination, const void* device_source, std::size_t bytes,
                           ExecutionContext& context) override;
  void copy_device_to_device(void* device_destination, const void* device_source, std::size_t bytes,
                             ExecutionContext& context) override;
  void fill_zero(void* device_destination, std::size_t bytes, ExecutionContext& context) override;

  int device() const { return device_; }
  CudaExecutionContext& cuda_default_context() { return *default_context_; }
  // The allocator's own figures (reserved segments, cache hits); the ledger has what callers asked for.
  CachingAllocatorStats allocator_stats() const { return allocator_.stats(); }
  std::int64_t reserved_bytes() const { return allocator_stats().reserved_bytes; }
  std::int64_t allocated_bytes() const { return allocator_stats().allocated_bytes; }
  // Hands every fully free cached segment back: cudaDeviceSynchronize, then cudaFree.
  void empty_cache() { allocator_.empty_cache(); }

 private:
  void copy(void* destination, const void* source, std::size_t bytes, cudaMemcpyKind kind, ExecutionContext& context);

  int device_;
  std::string name_;
  MemoryLedger ledger_;
  std::unique_ptr<CudaExecutionContext> default_context_;
  CachingAllocator allocator_;  // destroyed first: its segments go back before the stream goes
};

}  // namespace meshplan::exec
