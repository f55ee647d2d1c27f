// The one interface between the executor and a device, in the way of ggml's
// backends: layers, models and the trainer allocate and copy through a
// Backend and never name a device API. CpuBackend (cpu_backend.hpp) is the
// one they run on; CudaBackend (cuda_backend.hpp, built only with the CUDA
// toolkit: cudaMalloc behind a caching allocator, cudaMemcpyAsync on a
// cudaStream_t) implements the same interface without touching them. Running
// the layers' math on it (cuBLAS and the kernels of kernels/cuda/ on its
// streams) is still to come.
//
//   * Memory: allocate/deallocate raw bytes tagged with a MemoryCategory; the
//     backend records every byte in its MemoryLedger (memory_ledger.hpp), so
//     "memory in use" is measured, not estimated. deallocate takes the same
//     size and category as the allocation (as std::allocator does), so a
//     backend that hands memory straight back (the CPU's) needs no
//     per-pointer table; the CUDA backend's cache keeps one anyway, for its
//     blocks, and asserts that the two agree.
//   * Execution: an ExecutionContext is an in-order queue of work (a CUDA
//     stream; on the CPU, work runs on the calling thread, so a context is
//     always synchronized). Copies are enqueued on a context; synchronize()
//     waits for everything enqueued on it.
//   * Copies between host memory (ordinary pointers) and device memory
//     (pointers from allocate) are the only way data crosses; on the CPU the
//     two are the same memory and the copies are memcpy.
//
// defines: DeviceKind, to_string, ExecutionContext, Backend, default_backend
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

#include "executor/backend/memory_ledger.hpp"

namespace meshplan::exec {

enum class DeviceKind { cpu, cuda };

std::string_view to_string(DeviceKind kind);  // "cpu", "cuda"

// An in-order queue of device work (a stream).
class ExecutionContext {
 public:
  virtual ~ExecutionContext() = default;
  // Returns when all work enqueued on this context so far has finished.
  virtual void synchronize() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;  // "cpu", "cuda:0"
  virtual DeviceKind device_kind() const = 0;
  // Whether device memory is ordinary host memory (pointers from allocate may
  // be read and written by host code, e.g. through a TrackedVector).
  bool host_accessible() const { return device_kind() == DeviceKind::cpu; }

  // `bytes` of device memory recorded under `category`, aligned for any
  // vector load (64 bytes on the CPU, at least 256 on CUDA); nullptr when the
  // device is out of memory (nothing is recorded then). bytes == 0 gives a
  // valid, unique pointer.
  virtual void* allocate(std::size_t bytes, MemoryCategory category) = 0;
  // Releases an allocation: same pointer, bytes and category as allocate's.
  virtual void deallocate(void* pointer, std::size_t bytes, MemoryCategory category) noexcept = 0;

  // Host memory to stage device data through (an MPI transfer of a GPU
  // buffer, comm/staged_communicator.hpp): page-locked on a GPU, so copies
  // to and from it run at the link's speed; ordinary 64-byte-aligned memory
  // here. Recorded in the ledger under `communication`; nullptr when out of
  // memory. Freed with the same size.
  virtual void* allocate_host_staging(std::size_t bytes);
  virtual void deallocate_host_staging(void* pointer, std::size_t bytes) noexcept;

  virtual MemoryLedger& ledger() = 0;
  virtual const MemoryLedger& ledger() const = 0;

  // The context work runs on when none is named; lives as long as the backend.
  virtual ExecutionContext& default_context() = 0;
  // Another independent queue (a second CUDA stream, e.g. to overlap a
  // collective with compute).
  virtual std::unique_ptr<ExecutionContext> make_context() = 0;

  // Enqueue a copy on `context`; the copy has happened after context.synchronize().
  virtual void copy_host_to_device(void* device_destination, const void* host_source, std::size_t bytes,
                                   ExecutionContext& context) = 0;
  virtual void copy_device_to_host(void* host_destination, const void* device_source, std::size_t bytes,
                                   ExecutionContext& context) = 0;
  virtual void copy_device_to_device(void* device_destination, const void* device_source, std::size_t bytes,
                                     ExecutionContext& context) = 0;
  // Enqueue setting `bytes` of device memory to zero (memset; cudaMemsetAsync).
  virtual void fill_zero(void* device_destination, std::size_t bytes, ExecutionContext& context) = 0;
};

// The process's CPU backend (cpu_backend.hpp): what the single-rank models
// allocate from when no backend is named, and whose ledger the trainer
// reports. One process is one rank, so this is the rank's memory. Never destroyed.
Backend& default_backend();

}  // namespace meshplan::exec
