// The CPU as a Backend (backend.hpp): device memory is host memory from
// std::aligned_alloc with 64-byte alignment (one cache line, one AVX-512
// vector), work runs synchronously on the calling thread (BLAS and the
// kernels of kernels/cpu/ parallelise inside themselves), and copies are
// memcpy. Every allocation is recorded in the backend's ledger.
//
// defines: CpuExecutionContext, CpuBackend
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "executor/backend/backend.hpp"

namespace meshplan::exec {

// Work on the CPU runs when it is enqueued, so there is never anything to wait for.
class CpuExecutionContext final : public ExecutionContext {
 public:
  void synchronize() override {}
};

class CpuBackend final : public Backend {
 public:
  static constexpr std::size_t alignment_bytes = 64;

  explicit CpuBackend(std::string name = "cpu") : name_(std::move(name)) {}

  std::string_view name() const override { return name_; }
  DeviceKind device_kind() const override { return DeviceKind::cpu; }
  void* allocate(std::size_t bytes, MemoryCategory category) override;
  void deallocate(void* pointer, std::size_t bytes, MemoryCategory category) noexcept override;
  MemoryLedger& ledger() override { return ledger_; }
  const MemoryLedger& ledger() const override { return ledger_; }
  ExecutionContext& default_context() override { return context_; }
  std::unique_ptr<ExecutionContext> make_context() override { return std::make_unique<CpuExecutionContext>(); }
  void copy_host_to_device(void* device_destination, const void* host_source, std::size_t bytes,
                           ExecutionContext& context) override;
  void copy_device_to_host(void* host_destination, const void* device_source, std::size_t bytes,
                           ExecutionContext& context) override;
  void copy_device_to_device(void* device_destination, const void* device_source, std::size_t bytes,
                             ExecutionContext& context) override;
  void fill_zero(void* device_destination, std::size_t bytes, ExecutionContext& context) override;

 private:
  std::string name_;
  MemoryLedger ledger_;
  CpuExecutionContext context_;
};

}  // namespace meshplan::exec
