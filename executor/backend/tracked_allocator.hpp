// A standard allocator that allocates from a host-accessible Backend under a
// MemoryCategory, so a std::vector<T, TrackedAllocator<T>> (TrackedVector) is
// an ordinary vector (data(), size(), indexing, iterators, std::span) whose
// every byte appears in the backend's ledger. The models keep their
// parameters, gradients, AdamW moments and activations in TrackedVectors,
// which is how the trainer reports real memory by category.
//
// The allocator travels with the memory it allocated (it propagates on copy
// and move assignment and on swap), so memory is always freed, and
// un-recorded, under the category it was recorded in; two allocators are
// equal only with the same backend and category. A default-constructed
// allocator records scratch (workspace) on default_backend().
//
// defines: TrackedAllocator, TrackedVector, release
#pragma once

#include <cassert>
#include <cstddef>
#include <limits>
#include <new>
#include <type_traits>
#include <vector>

#include "executor/backend/backend.hpp"

namespace meshplan::exec {

template <typename T>
class TrackedAllocator {
 public:
  using value_type = T;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  using is_always_equal = std::false_type;

  TrackedAllocator() noexcept : TrackedAllocator(MemoryCategory::workspace) {}
  explicit TrackedAllocator(MemoryCategory category, Backend& backend = default_backend()) noexcept
      : backend_(&backend), category_(category) {
    assert(backend.host_accessible() && "a TrackedVector needs host-accessible memory");
  }
  template <typename U>
  TrackedAllocator(const TrackedAllocator<U>& other) noexcept  // NOLINT(google-explicit-constructor): rebinding
      : backend_(&other.backend()), category_(other.category()) {}

  T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    void* pointer = backend_->allocate(n * sizeof(T), category_);
    if (pointer == nullptr) throw std::bad_alloc();
    return static_cast<T*>(pointer);
  }
  void deallocate(T* pointer, std::size_t n) noexcept { backend_->deallocate(pointer, n * sizeof(T), category_); }

  Backend& backend() const { return *backend_; }
  MemoryCategory category() const { return category_; }

  template <typename U>
  bool operator==(const TrackedAllocator<U>& other) const {
    return backend_ == &other.backend() && category_ == other.category();
  }

 private:
  Backend* backend_;
  MemoryCategory category_;
};

template <typename T>
using TrackedVector = std::vector<T, TrackedAllocator<T>>;

// Frees the vector's memory (clear() keeps the capacity), so the ledger drops;
// the vector stays usable with the same allocator.
template <typename T>
void release(TrackedVector<T>& buffer) {
  TrackedVector<T>(buffer.get_allocator()).swap(buffer);
}

}  // namespace meshplan::exec
