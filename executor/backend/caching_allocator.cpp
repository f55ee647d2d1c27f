// The blocks of one segment form a doubly linked list in address order, so a
// freed block finds its neighbours in O(1) and merges with the free ones; the
// free blocks of a pool sit in one ordered set keyed (stream, size, address),
// so best fit on a stream is one lower_bound. A block is always in exactly
// one place: its pool's set when free, live_blocks_ when handed out.
#include "executor/backend/caching_allocator.hpp"

#include <algorithm>
#include <cassert>
#include <limits>
#include <utility>
#include <vector>

namespace meshplan::exec {

struct CachingAllocator::Block {
  char* address = nullptr;
  std::size_t size_bytes = 0;
  StreamId stream = 0;
  bool small_pool = false;
  bool live = false;
  // While live: the request rounded (allocator stats) and as asked (the ledger).
  std::size_t rounded_bytes = 0;
  std::size_t requested_bytes = 0;
  MemoryCategory category = MemoryCategory::workspace;
  Block* previous = nullptr;  // neighbours inside the segment, by address
  Block* next = nullptr;

  bool whole_segment() const { return previous == nullptr && next == nullptr; }
};

namespace {

std::int64_t signed_bytes(std::size_t bytes) { return static_cast<std::int64_t>(bytes); }

// n rounded up to a multiple of `step`, or 0 on overflow.
std::size_t round_up(std::size_t n, std::size_t step) {
  if (n > std::numeric_limits<std::size_t>::max() - (step - 1)) return 0;
  return (n + step - 1) / step * step;
}

}  // namespace

std::size_t round_request_bytes(std::size_t bytes) {
  return round_up(std::max<std::size_t>(bytes, 1), caching_block_alignment_bytes);
}

std::size_t segment_bytes_for(std::size_t rounded_bytes) {
  if (rounded_bytes <= caching_small_request_max_bytes) return caching_small_segment_bytes;
  if (rounded_bytes < caching_large_request_min_bytes) return caching_medium_segment_bytes;
  return round_up(rounded_bytes, caching_large_rounding_bytes);
}

bool CachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size_bytes != b->size_bytes) return a->size_bytes < b->size_bytes;
  return reinterpret_cast<std::uintptr_t>(a->address) < reinterpret_cast<std::uintptr_t>(b->address);
}

CachingAllocator::CachingAllocator(RawAllocator raw, MemoryLedger& ledger) : raw_(std::move(raw)), ledger_(ledger) {
  assert(raw_.allocate && raw_.free && "a caching allocator needs both raw functions");
}

CachingAllocator::~CachingAllocator() {
  std::vector<Block*> blocks(small_pool_.begin(), small_pool_.end());
  blocks.insert(blocks.end(), large_pool_.begin(), large_pool_.end());
  for (const auto& [address, block] : live_blocks_) blocks.push_back(block);
  for (Block* block : blocks)
    if (block->previous == nullptr) raw_.free(block->address);  // the first block starts the segment
  for (Block* block : blocks) delete block;
}

void* CachingAllocator::allocate(std::size_t bytes, MemoryCategory category, StreamId stream) {
  const std::size_t rounded = round_request_bytes(bytes);
  const std::size_t segment_bytes = segment_bytes_for(rounded);
  if (rounded == 0 || segment_bytes == 0) return nullptr;  // no device has that much

  const std::lock_guard lock(mutex_);
  const bool small = rounded <= caching_small_request_max_bytes;
  Pool& pool = small ? small_pool_ : large_pool_;
  Block* block = take_free_block(pool, stream, rounded);
  if (block != nullptr) {
    ++stats_.cache_hit_count;
    stats_.cached_bytes -= signed_bytes(block->size_bytes);
  } else {
    block = new_segment(segment_bytes, stream, small);
    if (block == nullptr) {  // out of memory: hand back what the cache holds, try once more
      release_free_segments();
      block = new_segment(segment_bytes, stream, small);
    }
    if (block == nullptr) return nullptr;
  }

  // Split off the rest when it is worth keeping as a block of its own
  // (PyTorch's should_split): any 512 B in the small pool, over 1 MiB in the large.
  const std::size_t remaining = block->size_bytes - rounded;
  if (small ? remaining >= caching_block_alignment_bytes : remaining > caching_small_request_max_bytes) {
    Block* rest = new Block{.address = block->address + rounded,
                            .size_bytes = remaining,
                            .stream = stream,
                            .small_pool = small,
                            .previous = block,
                            .next = block->next};
    if (block->next != nullptr) block->next->previous = rest;
    block->next = rest;
    block->size_bytes = rounded;
    pool.insert(rest);
    stats_.cached_bytes += signed_bytes(remaining);
  }

  block->live = true;
  block->rounded_bytes = rounded;
  block->requested_bytes = bytes;
  block->category = category;
  live_blocks_.emplace(block->address, block);
  stats_.allocated_bytes += signed_bytes(rounded);
  stats_.allocated_peak_bytes = std::max(stats_.allocated_peak_bytes, stats_.allocated_bytes);
  ledger_.record_allocation(category, signed_bytes(bytes));
  return block->address;
}

void CachingAllocator::deallocate(void* pointer, [[maybe_unused]] std::size_t bytes,
                                  [[maybe_unused]] MemoryCategory category) noexcept {
  if (pointer == nullptr) return;
  const std::lock_guard lock(mutex_);
  const auto found = live_blocks_.find(pointer);
  assert(found != live_blocks_.end() && "deallocate of a pointer this allocator did not hand out, or freed twice");
  if (found == live_blocks_.end()) return;
  Block* block = found->second;
  assert(block->requested_bytes == bytes && block->category == category &&
         "deallocate takes the same bytes and category as allocate");
  live_blocks_.erase(found);
  stats_.allocated_bytes -= signed_bytes(block->rounded_bytes);
  ledger_.record_free(block->category, signed_bytes(block->requested_bytes));
  free_block(block);
}

void CachingAllocator::empty_cache() {
  const std::lock_guard lock(mutex_);
  release_free_segments();
}

CachingAllocatorStats CachingAllocator::stats() const {
  const std::lock_guard lock(mutex_);
  return stats_;
}

CachingAllocator::Block* CachingAllocator::take_free_block(Pool& pool, StreamId stream, std::size_t rounded_bytes) {
  // The smallest block of this stream with size >= rounded_bytes: address 0 sorts before every real one.
  Block key{.size_bytes = rounded_bytes, .stream = stream};
  const auto found = pool.lower_bound(&key);
  if (found == pool.end() || (*found)->stream != stream) return nullptr;
  Block* block = *found;
  pool.erase(found);
  return block;
}

CachingAllocator::Block* CachingAllocator::new_segment(std::size_t segment_bytes, StreamId stream, bool small) {
  void* memory = raw_.allocate(segment_bytes);
  if (memory == nullptr) return nullptr;
  ++stats_.raw_allocation_count;
  ++stats_.segment_count;
  stats_.reserved_bytes += signed_bytes(segment_bytes);
  stats_.reserved_peak_bytes = std::max(stats_.reserved_peak_bytes, stats_.reserved_bytes);
  return new Block{.address = static_cast<char*>(memory), .size_bytes = segment_bytes, .stream = stream, .small_pool = small};
}

void CachingAllocator::release_free_segments() {
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* block = *it;
      if (!block->whole_segment()) {
        ++it;
        continue;
      }
      it = pool->erase(it);
      raw_.free(block->address);
      ++stats_.raw_free_count;
      --stats_.segment_count;
      stats_.reserved_bytes -= signed_bytes(block->size_bytes);
      stats_.cached_bytes -= signed_bytes(block->size_bytes);
      delete block;
    }
  }
}

// Marks `block` free and merges it with its free neighbours (which leave the
// pool, since their size changes), then files the result in its pool.
void CachingAllocator::free_block(Block* block) {
  Pool& pool = block->small_pool ? small_pool_ : large_pool_;
  block->live = false;
  stats_.cached_bytes += signed_bytes(block->size_bytes);
  if (Block* previous = block->previous; previous != nullptr && !previous->live) {
    pool.erase(previous);
    previous->size_bytes += block->size_bytes;
    previous->next = block->next;
    if (block->next != nullptr) block->next->previous = previous;
    delete block;
    block = previous;
  }
  if (Block* next = block->next; next != nullptr && !next->live) {
    pool.erase(next);
    block->size_bytes += next->size_bytes;
    block->next = next->next;
    if (next->next != nullptr) next->next->previous = block;
    delete next;
  }
  pool.insert(block);
}

}  // namespace meshplan::exec
