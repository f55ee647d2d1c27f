// The ledger's bookkeeping: now and peak per category and in total, updated
// together under one lock so the total's peak is a real instant's sum.
#include "executor/backend/memory_ledger.hpp"

#include <algorithm>
#include <cassert>

namespace meshplan::exec {

std::string_view to_string(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::parameters: return "parameters";
    case MemoryCategory::gradients: return "gradients";
    case MemoryCategory::optimizer: return "optimizer";
    case MemoryCategory::activations: return "activations";
    case MemoryCategory::communication: return "communication";
    case MemoryCategory::workspace: return "workspace";
  }
  return "unknown";
}

void MemoryLedger::record_allocation(MemoryCategory category, std::int64_t bytes) {
  assert(bytes >= 0);
  const std::lock_guard lock(mutex_);
  MemoryAmount& amount = state_.by_category[static_cast<std::size_t>(category)];
  amount.now_bytes += bytes;
  amount.peak_bytes = std::max(amount.peak_bytes, amount.now_bytes);
  state_.total.now_bytes += bytes;
  state_.total.peak_bytes = std::max(state_.total.peak_bytes, state_.total.now_bytes);
}

void MemoryLedger::record_free(MemoryCategory category, std::int64_t bytes) {
  assert(bytes >= 0);
  const std::lock_guard lock(mutex_);
  MemoryAmount& amount = state_.by_category[static_cast<std::size_t>(category)];
  assert(amount.now_bytes >= bytes && "freeing more bytes than the category holds");
  amount.now_bytes -= bytes;
  state_.total.now_bytes -= bytes;
}

MemorySnapshot MemoryLedger::snapshot() const {
  const std::lock_guard lock(mutex_);
  return state_;
}

void MemoryLedger::reset_peaks() {
  const std::lock_guard lock(mutex_);
  for (MemoryAmount& amount : state_.by_category) amount.peak_bytes = amount.now_bytes;
  state_.total.peak_bytes = state_.total.now_bytes;
}

}  // namespace meshplan::exec
