// Bytes held now and at peak, by what they are for. Every allocation the
// executor makes for training (parameters, gradients, AdamW moments, saved
// activations, communication and scratch buffers) goes through a Backend,
// which records it here, so the numbers are the memory really allocated, not
// an estimate: the measured side of the planner's per-device memory breakdown
// (model/memory_model.hpp), category by category.
//
// The ledger counts the bytes each allocation asked for (a CPU backend's
// 64-byte alignment padding is not counted, so parameters are exactly 4 B x
// parameter count in fp32). total.peak_bytes is the largest simultaneous sum
// over all categories, which is at most, and usually less than, the sum of
// the categories' own peaks. Thread-safe: one mutex, since allocations are
// rare (set-up and resizes), never per element.
//
// defines: MemoryCategory, memory_categories, to_string, MemoryAmount,
//          MemorySnapshot, MemoryLedger
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string_view>

namespace meshplan::exec {

// The planner's breakdown (MemoryBreakdown) uses the first four names; its
// "buffers" are communication here; workspace is scratch that no estimate
// names: activation-gradient buffers and bf16 operand copies.
enum class MemoryCategory : std::uint8_t { parameters, gradients, optimizer, activations, communication, workspace };

inline constexpr std::array<MemoryCategory, 6> memory_categories = {
    MemoryCategory::parameters,  MemoryCategory::gradients,     MemoryCategory::optimizer,
    MemoryCategory::activations, MemoryCategory::communication, MemoryCategory::workspace};

// "parameters", "gradients", "optimizer", "activations", "communication", "workspace".
std::string_view to_string(MemoryCategory category);

struct MemoryAmount {
  std::int64_t now_bytes = 0;
  std::int64_t peak_bytes = 0;  // largest now_bytes since creation or the last reset_peaks()
};

struct MemorySnapshot {
  std::array<MemoryAmount, memory_categories.size()> by_category{};
  MemoryAmount total;  // total.peak_bytes: the simultaneous peak, not a sum of peaks

  const MemoryAmount& operator[](MemoryCategory category) const {
    return by_category[static_cast<std::size_t>(category)];
  }
};

class MemoryLedger {
 public:
  void record_allocation(MemoryCategory category, std::int64_t bytes);
  // Asserts that the category holds at least `bytes` (a free that was never recorded is a bug).
  void record_free(MemoryCategory category, std::int64_t bytes);

  MemorySnapshot snapshot() const;
  // Every peak (per category and total) back to the bytes held now, to
  // measure the peak of one phase (as torch.cuda.reset_peak_memory_stats).
  void reset_peaks();

 private:
  mutable std::mutex mutex_;
  MemorySnapshot state_;
};

}  // namespace meshplan::exec
