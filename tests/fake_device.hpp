// A stand-in GPU for host tests: a Backend whose "device pointers" are host
// allocations with a high bit set (bit 62: non-canonical on x86-64), so any
// code that reads or writes device memory from the host, or hands a device
// pointer to a host library, crashes instead of working by accident. Only
// the backend's copies and fills, and real(), translate them. Its context
// never waits (the copies are synchronous memcpy). Counts its copies each way.
//
// defines: kDeviceBit, NoWaitContext, FakeDevice
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>

#include "executor/backend/backend.hpp"

namespace meshplan::testing_support {

using exec::DeviceKind;
using exec::ExecutionContext;
using exec::MemoryCategory;
using exec::MemoryLedger;

constexpr std::uintptr_t kDeviceBit = std::uintptr_t{1} << 62;

class NoWaitContext final : public exec::ExecutionContext {
 public:
  void synchronize() override {}
};

// Device memory is host memory behind pointers that are not host addresses.
class FakeDevice final : public exec::Backend {
 public:
  std::string_view name() const override { return "fake-device"; }
  DeviceKind device_kind() const override { return DeviceKind::cuda; }
  void* allocate(std::size_t bytes, MemoryCategory category) override {
    void* real = std::malloc(bytes == 0 ? 1 : bytes);
    if (real == nullptr) return nullptr;
    ledger_.record_allocation(category, static_cast<std::int64_t>(bytes));
    return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(real) | kDeviceBit);
  }
  void deallocate(void* pointer, std::size_t bytes, MemoryCategory category) noexcept override {
    if (pointer == nullptr) return;
    std::free(real(pointer));
    ledger_.record_free(category, static_cast<std::int64_t>(bytes));
  }
  MemoryLedger& ledger() override { return ledger_; }
  const MemoryLedger& ledger() const override { return ledger_; }
  ExecutionContext& default_context() override { return context_; }
  std::unique_ptr<ExecutionContext> make_context() override { return std::make_unique<NoWaitContext>(); }
  void copy_host_to_device(void* device, const void* host, std::size_t bytes, ExecutionContext&) override {
    ++to_device;
    if (bytes > 0) std::memcpy(real(device), host, bytes);
  }
  void copy_device_to_host(void* host, const void* device, std::size_t bytes, ExecutionContext&) override {
    ++to_host;
    if (bytes > 0) std::memcpy(host, real(device), bytes);
  }
  void copy_device_to_device(void* destination, const void* source, std::size_t bytes, ExecutionContext&) override {
    if (bytes > 0) std::memcpy(real(destination), real(source), bytes);
  }
  void fill_zero(void* destination, std::size_t bytes, ExecutionContext&) override {
    if (bytes > 0) std::memset(real(destination), 0, bytes);
  }

  static void* real(const void* device) {
    const auto bits = reinterpret_cast<std::uintptr_t>(device);
    if ((bits & kDeviceBit) == 0) {
      std::fprintf(stderr, "FakeDevice: %p is not a device pointer\n", device);
      std::abort();
    }
    return reinterpret_cast<void*>(bits & ~kDeviceBit);
  }

  int to_device = 0, to_host = 0;

 private:
  MemoryLedger ledger_;
  NoWaitContext context_;
};

}  // namespace meshplan::testing_support
