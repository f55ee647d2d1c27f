// A resizable, typed array in one Backend's memory, recorded in its ledger
// under one MemoryCategory: the buffers of the GPT executor
// (executor/parallel/), which run on whichever backend the model was built
// for. Like a std::vector it keeps its capacity when it shrinks (a buffer
// fitted to several sizes allocates once, at the largest, and a training
// step that fits its buffers again allocates nothing) and release() gives
// the memory back. Unlike one it never touches its elements from the host
// unless the backend is host-accessible: growing copies the old elements on
// the device and sets the new ones to zero through the backend (as
// std::vector's resize value-initialises them), and every copy goes through
// the backend on its default context (in order with the work enqueued there).
//
// Growing allocates exactly the new size (no doubling), so the ledger holds
// what the model asked for.
//
// defines: DeviceVector
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <new>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "executor/backend/backend.hpp"

namespace meshplan::exec {

template <typename T>
class DeviceVector {
  static_assert(std::is_trivially_copyable_v<T>, "device buffers hold plain numbers");

 public:
  explicit DeviceVector(MemoryCategory category = MemoryCategory::workspace, Backend& backend = default_backend())
      : backend_(&backend), category_(category) {}
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  DeviceVector(DeviceVector&& other) noexcept { swap(other); }
  DeviceVector& operator=(DeviceVector&& other) noexcept {
    DeviceVector(std::move(other)).swap(*this);
    return *this;
  }
  ~DeviceVector() { release(); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::size_t capacity() const { return capacity_; }
  bool empty() const { return size_ == 0; }
  MemoryCategory category() const { return category_; }
  Backend& backend() const { return *backend_; }

  // `count` elements; the first min(count, size()) keep their values, the
  // ones past size() are zero. Throws std::bad_alloc when the backend is out of memory.
  void resize(std::size_t count) {
    if (count > capacity_) {
      T* grown = static_cast<T*>(backend_->allocate(count * sizeof(T), category_));
      if (grown == nullptr) throw std::bad_alloc();
      if (size_ > 0) backend_->copy_device_to_device(grown, data_, size_ * sizeof(T), backend_->default_context());
      free_memory();
      data_ = grown;
      capacity_ = count;
    }
    if (count > size_) backend_->fill_zero(data_ + size_, (count - size_) * sizeof(T), backend_->default_context());
    size_ = count;
  }
  // Sets every element to zero (all bits clear: 0.0f, 0).
  void zero() { backend_->fill_zero(data_, size_ * sizeof(T), backend_->default_context()); }
  // `count` zeros.
  void assign_zero(std::size_t count) {
    reserve_unset(count);
    zero();
  }
  // Gives the memory back (the ledger records the free); size and capacity become 0.
  void release() noexcept {
    free_memory();
    data_ = nullptr;
    size_ = capacity_ = 0;
  }

  // `count` elements from device memory of the same backend, or from the host.
  void assign_device(const T* source, std::size_t count) {
    reserve_unset(count);
    if (count > 0) backend_->copy_device_to_device(data_, source, count * sizeof(T), backend_->default_context());
  }
  void assign(const DeviceVector& other) { assign_device(other.data(), other.size()); }
  void assign_host(const T* source, std::size_t count) {
    reserve_unset(count);
    if (count > 0) backend_->copy_host_to_device(data_, source, count * sizeof(T), backend_->default_context());
  }
  // A host copy of the elements (waits for the backend's default context).
  std::vector<T> to_host() const {
    std::vector<T> host(size_);
    if (size_ > 0) {
      backend_->copy_device_to_host(host.data(), data_, size_ * sizeof(T), backend_->default_context());
      backend_->default_context().synchronize();
    }
    return host;
  }

  // The elements, where the backend's memory is host memory (the CPU's).
  std::span<T> host_span() {
    assert(backend_->host_accessible() && "device memory is not host-accessible");
    return {data_, size_};
  }
  std::span<const T> host_span() const {
    assert(backend_->host_accessible() && "device memory is not host-accessible");
    return {data_, size_};
  }
  T& operator[](std::size_t i) { return host_span()[i]; }
  const T& operator[](std::size_t i) const { return host_span()[i]; }

  void swap(DeviceVector& other) noexcept {
    std::swap(backend_, other.backend_);
    std::swap(category_, other.category_);
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(capacity_, other.capacity_);
  }

 private:
  // `count` elements whose values are about to be overwritten (none copied or zeroed).
  void reserve_unset(std::size_t count) {
    if (count > capacity_) {
      release();
      data_ = static_cast<T*>(backend_->allocate(count * sizeof(T), category_));
      if (data_ == nullptr) throw std::bad_alloc();
      capacity_ = count;
    }
    size_ = count;
  }
  void free_memory() noexcept {
    if (capacity_ > 0 || data_ != nullptr) backend_->deallocate(data_, capacity_ * sizeof(T), category_);
  }

  Backend* backend_ = &default_backend();
  MemoryCategory category_ = MemoryCategory::workspace;
  T* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

}  // namespace meshplan::exec
