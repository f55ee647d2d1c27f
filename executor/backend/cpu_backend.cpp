// aligned_alloc needs a size that is a multiple of the alignment, so requests
// are rounded up (and 0 becomes one line, for a unique pointer); the ledger
// records the bytes asked for.
#include "executor/backend/cpu_backend.hpp"

#include <cstdlib>
#include <cstring>

namespace meshplan::exec {

std::string_view to_string(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::cpu: return "cpu";
    case DeviceKind::cuda: return "cuda";
  }
  return "unknown";
}

void* Backend::allocate_host_staging(std::size_t bytes) {
  constexpr std::size_t alignment = CpuBackend::alignment_bytes;
  const std::size_t rounded = bytes == 0 ? alignment : (bytes + alignment - 1) / alignment * alignment;
  if (rounded < bytes) return nullptr;  // overflow
  void* pointer = std::aligned_alloc(alignment, rounded);
  if (pointer != nullptr) ledger().record_allocation(MemoryCategory::communication, static_cast<std::int64_t>(bytes));
  return pointer;
}

void Backend::deallocate_host_staging(void* pointer, std::size_t bytes) noexcept {
  if (pointer == nullptr) return;
  std::free(pointer);
  ledger().record_free(MemoryCategory::communication, static_cast<std::int64_t>(bytes));
}

void* CpuBackend::allocate(std::size_t bytes, MemoryCategory category) {
  const std::size_t rounded = bytes == 0 ? alignment_bytes : (bytes + alignment_bytes - 1) / alignment_bytes * alignment_bytes;
  if (rounded < bytes) return nullptr;  // overflow
  void* pointer = std::aligned_alloc(alignment_bytes, rounded);
  if (pointer != nullptr) ledger_.record_allocation(category, static_cast<std::int64_t>(bytes));
  return pointer;
}

void CpuBackend::deallocate(void* pointer, std::size_t bytes, MemoryCategory category) noexcept {
  if (pointer == nullptr) return;
  std::free(pointer);
  ledger_.record_free(category, static_cast<std::int64_t>(bytes));
}

void CpuBackend::copy_host_to_device(void* device_destination, const void* host_source, std::size_t bytes,
                                     ExecutionContext&) {
  if (bytes > 0) std::memcpy(device_destination, host_source, bytes);
}

void CpuBackend::copy_device_to_host(void* host_destination, const void* device_source, std::size_t bytes,
                                     ExecutionContext&) {
  if (bytes > 0) std::memcpy(host_destination, device_source, bytes);
}

void CpuBackend::copy_device_to_device(void* device_destination, const void* device_source, std::size_t bytes,
                                       ExecutionContext&) {
  if (bytes > 0) std::memmove(device_destination, device_source, bytes);
}

void CpuBackend::fill_zero(void* device_destination, std::size_t bytes, ExecutionContext&) {
  if (bytes > 0) std::memset(device_destination, 0, bytes);
}

Backend& default_backend() {
  // Never destroyed: containers with static storage may free into it during exit.
  static CpuBackend* const backend = new CpuBackend("cpu");
  return *backend;
}

}  // namespace meshplan::exec
