// The CUDA runtime's current device is per host thread, so every call that
// creates or uses device state runs under a DeviceGuard for this backend's
// device. The raw allocator the cache sits on treats cudaErrorMemoryAllocation
// as "out of memory" (nullptr) and any other cudaMalloc error as a failure;
// its free waits for the whole device first, because cudaFree only "may"
// synchronise (CUDA runtime API reference, cudaFree) and a cached block freed
// on the host may still be in use by work queued on its stream.
#include "executor/backend/cuda_backend.hpp"

#include <new>
#include <stdexcept>
#include <utility>

#include "kernels/cuda/cuda_check.hpp"

namespace meshplan::exec {
namespace {

// Makes `device` current for the calling thread while it lives, then restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : device_(device) {
    MESHPLAN_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device_) MESHPLAN_CUDA_CHECK(cudaSetDevice(device_));
  }
  // For destructors and frees, which must not throw: failures are ignored.
  DeviceGuard(int device, std::nothrow_t) noexcept : device_(device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = device_;
    if (previous_ != device_) static_cast<void>(cudaSetDevice(device_));
  }
  ~DeviceGuard() {
    if (previous_ != device_) static_cast<void>(cudaSetDevice(previous_));
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_;
  int previous_ = 0;
};

RawAllocator cuda_raw_allocator(int device) {
  return {.allocate =
              [device](std::size_t bytes) -> void* {
                const DeviceGuard guard(device);
                void* pointer = nullptr;
                const cudaError_t status = cudaMalloc(&pointer, bytes);
                if (status == cudaErrorMemoryAllocation) {
                  static_cast<void>(cudaGetLastError());  // not sticky: clear it so later checks do not see it
                  return nullptr;
                }
                ::meshplan::kernels::cuda::cuda_check(status, "cudaMalloc", __FILE__, __LINE__);
                return pointer;
              },
          .free =
              [device](void* pointer) noexcept {
                // Errors are ignored: a raw free cannot fail the caller, and at
                // process exit the runtime may already be unloading.
                const DeviceGuard guard(device, std::nothrow);
                static_cast<void>(cudaDeviceSynchronize());
                static_cast<void>(cudaFree(pointer));
                static_cast<void>(cudaGetLastError());
              }};
}

int checked_device(int device) {
  const int count = CudaBackend::device_count();
  if (device < 0 || device >= count) {
    const std::string problem = kernels::cuda::cuda_device_problem();
    throw std::runtime_error("CudaBackend: no CUDA device " + std::to_string(device) + " (this machine has " +
                             std::to_string(count) + (problem.empty() ? ")" : "; " + problem + ")"));
  }
  return device;
}

}  // namespace

// ---------------------------------------------------------------- CudaExecutionContext

CudaExecutionContext::CudaExecutionContext(int device) : device_(device) {
  const DeviceGuard guard(device_);
  MESHPLAN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  try {
    MESHPLAN_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  } catch (...) {
    static_cast<void>(cudaStreamDestroy(stream_));
    throw;
  }
}

CudaExecutionContext::~CudaExecutionContext() {
  const DeviceGuard guard(device_, std::nothrow);
  static_cast<void>(cudaEventDestroy(done_));
  static_cast<void>(cudaStreamDestroy(stream_));  // returns at once; queued work still completes
}

void CudaExecutionContext::synchronize() {
  const DeviceGuard guard(device_);
  MESHPLAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaExecutionContext::wait_for(CudaExecutionContext& other) {
  {
    const DeviceGuard guard(other.device_);  // an event is recorded on a stream of its own device
    MESHPLAN_CUDA_CHECK(cudaEventRecord(other.done_, other.stream_));
  }
  const DeviceGuard guard(device_);
  MESHPLAN_CUDA_CHECK(cudaStreamWaitEvent(stream_, other.done_, 0));
}

// ---------------------------------------------------------------- CudaBackend

int CudaBackend::device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return 0;
  }
  return count;
}

CudaBackend::CudaBackend(int device)
    : device_(checked_device(device)),
      name_("cuda:" + std::to_string(device)),
      default_context_(std::make_unique<CudaExecutionContext>(device)),
      allocator_(cuda_raw_allocator(device), ledger_) {}

CudaBackend::~CudaBackend() = default;

void* CudaBackend::allocate(std::size_t bytes, MemoryCategory category) {
  return allocator_.allocate(bytes, category, reinterpret_cast<StreamId>(default_context_->stream()));
}

void CudaBackend::deallocate(void* pointer, std::size_t bytes, MemoryCategory category) noexcept {
  allocator_.deallocate(pointer, bytes, category);
}

void* CudaBackend::allocate_host_staging(std::size_t bytes) {
  const DeviceGuard guard(device_);
  void* pointer = nullptr;
  const cudaError_t status = cudaMallocHost(&pointer, bytes == 0 ? 1 : bytes);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // clear it: running out is not a sticky error
    return nullptr;
  }
  MESHPLAN_CUDA_CHECK(status);
  ledger_.record_allocation(MemoryCategory::communication, static_cast<std::int64_t>(bytes));
  return pointer;
}

void CudaBackend::deallocate_host_staging(void* pointer, std::size_t bytes) noexcept {
  if (pointer == nullptr) return;
  (void)cudaFreeHost(pointer);  // no device guard (it may throw); a failed release cannot be reported here
  ledger_.record_free(MemoryCategory::communication, static_cast<std::int64_t>(bytes));
}

std::unique_ptr<ExecutionContext> CudaBackend::make_context() { return std::make_unique<CudaExecutionContext>(device_); }

void CudaBackend::copy_host_to_device(void* device_destination, const void* host_source, std::size_t bytes,
                                      ExecutionContext& context) {
  copy(device_destination, host_source, bytes, cudaMemcpyHostToDevice, context);
}

void CudaBackend::copy_device_to_host(void* host_destination, const void* device_source, std::size_t bytes,
                                      ExecutionContext& context) {
  copy(host_destination, device_source, bytes, cudaMemcpyDeviceToHost, context);
}

void CudaBackend::copy_device_to_device(void* device_destination, const void* device_source, std::size_t bytes,
                                        ExecutionContext& context) {
  copy(device_destination, device_source, bytes, cudaMemcpyDeviceToDevice, context);
}

void CudaBackend::fill_zero(void* device_destination, std::size_t bytes, ExecutionContext& context) {
  if (bytes == 0) return;
  auto* cuda_context = dynamic_cast<CudaExecutionContext*>(&context);
  if (cuda_context == nullptr || cuda_context->device() != device_)
    throw std::invalid_argument(name_ + ": fills need a CUDA context of the same device (from make_context)");
  const DeviceGuard guard(device_);
  MESHPLAN_CUDA_CHECK(cudaMemsetAsync(device_destination, 0, bytes, cuda_context->stream()));
}

void CudaBackend::copy(void* destination, const void* source, std::size_t bytes, cudaMemcpyKind kind,
                       ExecutionContext& context) {
  if (bytes == 0) return;
  auto* cuda_context = dynamic_cast<CudaExecutionContext*>(&context);
  if (cuda_context == nullptr || cuda_context->device() != device_)
    throw std::invalid_argument(name_ + ": copies need a CUDA context of the same device (from make_context)");
  const DeviceGuard guard(device_);
  MESHPLAN_CUDA_CHECK(cudaMemcpyAsync(destination, source, bytes, kind, cuda_context->stream()));
}

}  // namespace meshplan::exec
