// An owning, typed block of device memory: allocated from a Backend under a
// MemoryCategory, freed (and un-recorded from the ledger) on destruction.
// Move-only, like std::unique_ptr. For host-accessible backends span() gives
// the elements; on a GPU backend data() is a device pointer for kernels and
// Backend copies only. Elements are not initialised.
//
// defines: Buffer
#pragma once

#include <cassert>
#include <cstddef>
#include <new>
#include <span>
#include <type_traits>
#include <utility>

#include "executor/backend/backend.hpp"

namespace meshplan::exec {

template <typename T>
class Buffer {
  static_assert(std::is_trivially_copyable_v<T>, "device buffers hold plain numbers");

 public:
  Buffer() = default;
  // `count` elements; throws std::bad_alloc when the backend is out of memory.
  Buffer(Backend& backend, std::size_t count, MemoryCategory category)
      : backend_(&backend), count_(count), category_(category) {
    data_ = static_cast<T*>(backend.allocate(count * sizeof(T), category));
    if (data_ == nullptr) throw std::bad_alloc();
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& other) noexcept { swap(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    Buffer(std::move(other)).swap(*this);
    return *this;
  }
  ~Buffer() {
    if (backend_ != nullptr) backend_->deallocate(data_, count_ * sizeof(T), category_);
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }
  MemoryCategory category() const { return category_; }
  Backend* backend() const { return backend_; }

  std::span<T> span() {
    assert((backend_ == nullptr || backend_->host_accessible()) && "device memory is not host-accessible");
    return {data_, count_};
  }
  std::span<const T> span() const {
    assert((backend_ == nullptr || backend_->host_accessible()) && "device memory is not host-accessible");
    return {data_, count_};
  }

  void swap(Buffer& other) noexcept {
    std::swap(backend_, other.backend_);
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    std::swap(category_, other.category_);
  }

 private:
  Backend* backend_ = nullptr;
  T* data_ = nullptr;
  std::size_t count_ = 0;
  MemoryCategory category_ = MemoryCategory::workspace;
};

}  // namespace meshplan::exec
