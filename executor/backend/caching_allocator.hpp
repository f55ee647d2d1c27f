// A caching allocator for device memory, after PyTorch's CUDA caching
// allocator (c10/cuda/CUDACachingAllocator.cpp) in spirit: cudaMalloc and
// cudaFree are slow and synchronise the device, so memory is taken from the
// device in segments of a few MiB, carved into blocks, and a freed block is
// kept for the next request instead of being handed back. It knows nothing
// of CUDA: the device is a RawAllocator (two functions), so the same code is
// tested here over host memory with a byte cap (tests/test_caching_allocator.cpp)
// and runs on a GPU over cudaMalloc/cudaFree (cuda_backend.hpp).
//
// The rules (PyTorch's constants, c10/cuda/CUDACachingAllocator.cpp):
//   * every request is rounded up to a multiple of 512 B (0 B to 512 B);
//   * requests of at most 1 MiB are "small": served from 2 MiB segments in the
//     small pool; larger ones from the large pool, whose new segments are
//     20 MiB for requests under 10 MiB and the request rounded up to a
//     multiple of 2 MiB from 10 MiB on;
//   * a request takes the smallest free block of its pool and stream that
//     fits (best fit; ties to the lowest address); the block is split when
//     what is left is worth keeping: >= 512 B in the small pool, > 1 MiB in
//     the large pool (a large block keeps a tail of up to 1 MiB instead);
//   * a freed block merges with free neighbours of its segment, and is reused
//     only by requests on the stream it was allocated on, so work queued on
//     that stream before the free finishes before the new owner's work starts;
//   * when the device is out of memory, every fully free segment is handed
//     back and the request tried once more; then allocate returns nullptr.
//
// The ledger (memory_ledger.hpp) records the bytes each caller asked for,
// under its category, as CpuBackend does; what the allocator holds from the
// device (reserved bytes, segments) is its own statistics. deallocate takes
// the same size and category as allocate (the Backend contract) and checks
// them against what it recorded. Thread-safe: one mutex over everything.
//
// defines: StreamId, RawAllocator, CachingAllocatorStats, CachingAllocator,
//          round_request_bytes, segment_bytes_for
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <unordered_map>

#include "executor/backend/memory_ledger.hpp"

namespace meshplan::exec {

// An opaque name of an in-order queue (a cudaStream_t's bits on a GPU).
using StreamId = std::uintptr_t;

// The device underneath: allocate returns nullptr when out of memory (and may
// throw for any other failure); free never fails.
struct RawAllocator {
  std::function<void*(std::size_t bytes)> allocate;
  std::function<void(void* pointer)> free;
};

inline constexpr std::size_t caching_block_alignment_bytes = 512;         // kMinBlockSize
inline constexpr std::size_t caching_small_request_max_bytes = 1 << 20;   // kSmallSize: 1 MiB
inline constexpr std::size_t caching_small_segment_bytes = 2 << 20;       // kSmallBuffer: 2 MiB
inline constexpr std::size_t caching_medium_segment_bytes = 20 << 20;     // kLargeBuffer: 20 MiB
inline constexpr std::size_t caching_large_request_min_bytes = 10 << 20;  // kMinLargeAlloc: 10 MiB
inline constexpr std::size_t caching_large_rounding_bytes = 2 << 20;      // kRoundLarge: 2 MiB

// A request's size in the allocator: a multiple of 512, at least 512; 0 when
// rounding would overflow.
std::size_t round_request_bytes(std::size_t bytes);
// The segment a rounded request takes from the device when no cached block
// fits: 2 MiB (small), 20 MiB (under 10 MiB), or the request rounded up to
// 2 MiB; 0 when that would overflow.
std::size_t segment_bytes_for(std::size_t rounded_bytes);

struct CachingAllocatorStats {
  std::int64_t allocated_bytes = 0;       // live requests, each rounded to 512 B
  std::int64_t allocated_peak_bytes = 0;
  std::int64_t reserved_bytes = 0;        // segments held from the raw allocator
  std::int64_t reserved_peak_bytes = 0;
  std::int64_t cached_bytes = 0;          // free blocks inside the segments
  std::int64_t segment_count = 0;
  std::int64_t raw_allocation_count = 0;  // successful raw allocations (failed tries not counted)
  std::int64_t raw_free_count = 0;
  std::int64_t cache_hit_count = 0;       // requests served from a cached free block
};
// reserved = cached + live block bytes, and live block bytes >= allocated: a
// large block may keep an unsplit tail of up to 1 MiB beyond its request.

class CachingAllocator {
 public:
  CachingAllocator(RawAllocator raw, MemoryLedger& ledger);
  // Hands every segment back, even ones with live blocks (their pointers dangle).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // `bytes` for use on `stream`, recorded in the ledger under `category`;
  // nullptr when the raw allocator is out of memory even after the cache was
  // emptied (nothing recorded then). 0 bytes gives a unique pointer.
  void* allocate(std::size_t bytes, MemoryCategory category, StreamId stream);
  // Same pointer, bytes and category as allocate's; nullptr is ignored.
  void deallocate(void* pointer, std::size_t bytes, MemoryCategory category) noexcept;
  // Hands every fully free segment back to the raw allocator.
  void empty_cache();

  CachingAllocatorStats stats() const;

 private:
  struct Block;
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockOrder>;  // free blocks by (stream, size, address)

  Block* take_free_block(Pool& pool, StreamId stream, std::size_t rounded_bytes);
  Block* new_segment(std::size_t segment_bytes, StreamId stream, bool small);
  void release_free_segments();
  void free_block(Block* block);

  RawAllocator raw_;
  MemoryLedger& ledger_;
  mutable std::mutex mutex_;
  Pool small_pool_;
  Pool large_pool_;
  std::unordered_map<void*, Block*> live_blocks_;
  CachingAllocatorStats stats_;
};

}  // namespace meshplan::exec
