// The caching allocator (executor/backend/caching_allocator.hpp) over host
// memory: a FakeDevice hands out 512-byte-aligned segments from
// std::aligned_alloc up to a byte cap, beyond which it fails as cudaMalloc
// does, and counts every call, so each test can say exactly how many raw
// allocations and frees a sequence of requests must cause. No GPU needed.
//   1. The rounding rules, against PyTorch's constants.
//   2. Reuse, best fit, splitting, coalescing, streams, the out-of-memory
//      retry and the ledger, each with exact segment counts, reserved bytes
//      and addresses.
//   3. Threads, and a randomised stress run (a fresh seed every run, printed;
//      MESHPLAN_CACHING_TEST_SEED replays one) that checks after every
//      operation that live blocks never overlap, lie inside a live segment,
//      are 512-byte aligned and come from a segment of their own stream, that
//      the stats equal the fake device's own counts, and that the ledger
//      equals the requests; and that everything is back to zero after freeing
//      all and empty_cache().
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "executor/backend/caching_allocator.hpp"
#include "executor/backend/memory_ledger.hpp"

namespace meshplan::exec {
namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;
constexpr StreamId stream_a = 1;
constexpr StreamId stream_b = 2;
constexpr StreamId stream_c = 3;

std::int64_t i64(std::size_t bytes) { return static_cast<std::int64_t>(bytes); }

// Host memory standing in for a device of `capacity_bytes`.
class FakeDevice {
 public:
  explicit FakeDevice(std::size_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}
  ~FakeDevice() {
    for (const auto& [address, held] : segments_) std::free(address);
  }
  FakeDevice(const FakeDevice&) = delete;
  FakeDevice& operator=(const FakeDevice&) = delete;

  RawAllocator raw() {
    return {.allocate = [this](std::size_t bytes) { return allocate(bytes); },
            .free = [this](void* pointer) { free(pointer); }};
  }

  std::size_t live_bytes() const { return live_bytes_; }
  std::size_t peak_bytes() const { return peak_bytes_; }
  std::size_t live_segments() const { return segments_.size(); }
  std::int64_t allocations() const { return allocations_; }
  std::int64_t frees() const { return frees_; }
  std::int64_t failures() const { return failures_; }

  // Whether [pointer, pointer + bytes) lies inside one live segment.
  bool holds(const void* pointer, std::size_t bytes) const { return segment_number(pointer, bytes) != 0; }
  // Which raw allocation (1, 2, ...) the live segment holding [pointer, pointer + bytes) came from; 0 if none.
  std::int64_t segment_number(const void* pointer, std::size_t bytes) const {
    const auto* begin = static_cast<const char*>(pointer);
    auto after = segments_.upper_bound(const_cast<char*>(begin));
    if (after == segments_.begin()) return 0;
    const auto& [segment, held] = *std::prev(after);
    return begin >= segment && begin + bytes <= segment + held.bytes ? held.number : 0;
  }

 private:
  void* allocate(std::size_t bytes) {
    if (bytes > capacity_bytes_ - live_bytes_) {
      ++failures_;
      return nullptr;
    }
    EXPECT_EQ(bytes % caching_block_alignment_bytes, 0u) << "segments are whole 512-byte units";
    auto* address = static_cast<char*>(std::aligned_alloc(caching_block_alignment_bytes, bytes));
    if (address == nullptr) {
      ADD_FAILURE() << "the host itself is out of memory for a " << bytes << "-byte segment";
      return nullptr;
    }
    ++allocations_;
    segments_.emplace(address, Segment{bytes, allocations_});
    live_bytes_ += bytes;
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
    return address;
  }
  void free(void* pointer) {
    const auto found = segments_.find(static_cast<char*>(pointer));
    if (found == segments_.end()) {
      ADD_FAILURE() << "raw free of " << pointer << ", which is not a live segment";
      return;
    }
    live_bytes_ -= found->second.bytes;
    std::free(found->first);
    segments_.erase(found);
    ++frees_;
  }

  struct Segment {
    std::size_t bytes;
    std::int64_t number;
  };
  std::size_t capacity_bytes_;
  std::map<char*, Segment> segments_;
  std::size_t live_bytes_ = 0;
  std::size_t peak_bytes_ = 0;
  std::int64_t allocations_ = 0;
  std::int64_t frees_ = 0;
  std::int64_t failures_ = 0;
};

// A device, a ledger and the allocator over them, destroyed in that order's reverse.
struct Harness {
  explicit Harness(std::size_t capacity_bytes = std::size_t{1} << 30)
      : device(capacity_bytes), allocator(device.raw(), ledger) {}
  FakeDevice device;
  MemoryLedger ledger;
  CachingAllocator allocator;
};

char* bytes_of(void* pointer) { return static_cast<char*>(pointer); }

// ---------------------------------------------------------------- (1) rules

TEST(CachingAllocatorRules, RoundsRequestsAndSizesSegmentsAsPyTorchDoes) {
  struct Case {
    std::size_t request_bytes, rounded_bytes, segment_bytes;
  };
  const std::array<Case, 10> cases = {{
      {0, 512, 2 * MiB},
      {1, 512, 2 * MiB},
      {512, 512, 2 * MiB},
      {513, 1024, 2 * MiB},
      {1 * MiB, 1 * MiB, 2 * MiB},                     // the largest small request
      {1 * MiB + 1, 1 * MiB + 512, 20 * MiB},          // the smallest large one
      {10 * MiB - 512, 10 * MiB - 512, 20 * MiB},      // under 10 MiB: a 20 MiB segment
      {10 * MiB - 511, 10 * MiB, 10 * MiB},            // from 10 MiB: rounded to 2 MiB
      {10 * MiB + 1, 10 * MiB + 512, 12 * MiB},
      {100 * MiB + 3, 100 * MiB + 512, 102 * MiB},
  }};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.request_bytes);
    EXPECT_EQ(round_request_bytes(c.request_bytes), c.rounded_bytes);
    EXPECT_EQ(segment_bytes_for(c.rounded_bytes), c.segment_bytes);
  }
  EXPECT_EQ(round_request_bytes(std::numeric_limits<std::size_t>::max()), 0u);
  EXPECT_EQ(segment_bytes_for(std::numeric_limits<std::size_t>::max() - 511), 0u);
}

// ---------------------------------------------------------------- (2) behaviour

TEST(CachingAllocator, FreedBlockIsReusedWithoutANewRawAllocation) {
  Harness h;
  void* first = h.allocator.allocate(4000, MemoryCategory::workspace, stream_a);
  ASSERT_NE(first, nullptr);
  h.allocator.deallocate(first, 4000, MemoryCategory::workspace);
  void* again = h.allocator.allocate(4000, MemoryCategory::workspace, stream_a);
  EXPECT_EQ(again, first);
  h.allocator.deallocate(again, 4000, MemoryCategory::workspace);
  void* smaller = h.allocator.allocate(3000, MemoryCategory::workspace, stream_a);
  EXPECT_EQ(smaller, first);  // best fit in the one free (coalesced) block
  h.allocator.deallocate(smaller, 3000, MemoryCategory::workspace);

  // Large: a 12 MiB segment serves an 11 MiB request whole (the 1 MiB tail is not split off).
  void* large = h.allocator.allocate(12 * MiB, MemoryCategory::activations, stream_a);
  h.allocator.deallocate(large, 12 * MiB, MemoryCategory::activations);
  void* large_again = h.allocator.allocate(11 * MiB, MemoryCategory::activations, stream_a);
  EXPECT_EQ(large_again, large);
  const CachingAllocatorStats s = h.allocator.stats();
  EXPECT_EQ(s.raw_allocation_count, 2);
  EXPECT_EQ(s.cache_hit_count, 3);
  EXPECT_EQ(s.segment_count, 2);
  EXPECT_EQ(s.reserved_bytes, i64(2 * MiB + 12 * MiB));
  EXPECT_EQ(s.allocated_bytes, i64(11 * MiB));
  EXPECT_EQ(s.cached_bytes, i64(2 * MiB));  // the small segment, whole again
  EXPECT_EQ(h.device.allocations(), 2);
  h.allocator.deallocate(large_again, 11 * MiB, MemoryCategory::activations);
}

TEST(CachingAllocator, SplitsASegmentAndCoalescesFreedNeighbours) {
  Harness h;
  std::array<void*, 4> quarter{};
  for (void*& block : quarter) block = h.allocator.allocate(512 * KiB, MemoryCategory::workspace, stream_a);
  for (std::size_t i = 0; i < quarter.size(); ++i) EXPECT_EQ(bytes_of(quarter[i]), bytes_of(quarter[0]) + i * 512 * KiB);
  CachingAllocatorStats s = h.allocator.stats();
  EXPECT_EQ(s.segment_count, 1);
  EXPECT_EQ(s.reserved_bytes, i64(2 * MiB));
  EXPECT_EQ(s.cached_bytes, 0);
  EXPECT_EQ(s.allocated_bytes, i64(2 * MiB));

  // Free 0 and 2, then 1, which merges with both: one free block of 1.5 MiB at quarter[0].
  h.allocator.deallocate(quarter[0], 512 * KiB, MemoryCategory::workspace);
  h.allocator.deallocate(quarter[2], 512 * KiB, MemoryCategory::workspace);
  h.allocator.deallocate(quarter[1], 512 * KiB, MemoryCategory::workspace);
  EXPECT_EQ(h.allocator.stats().cached_bytes, i64(1536 * KiB));
  void* merged = h.allocator.allocate(1536 * KiB - 512 * KiB, MemoryCategory::workspace, stream_a);  // 1 MiB
  EXPECT_EQ(merged, quarter[0]);
  s = h.allocator.stats();
  EXPECT_EQ(s.segment_count, 1) << "a 1 MiB request fits only in the coalesced hole";
  EXPECT_EQ(s.raw_allocation_count, 1);
  EXPECT_EQ(s.cached_bytes, i64(512 * KiB));  // quarter[2]'s place, split off again

  // Everything free: one block as large as the segment, which empty_cache hands back.
  h.allocator.deallocate(merged, 1 * MiB, MemoryCategory::workspace);
  h.allocator.deallocate(quarter[3], 512 * KiB, MemoryCategory::workspace);
  s = h.allocator.stats();
  EXPECT_EQ(s.cached_bytes, i64(2 * MiB));
  EXPECT_EQ(s.allocated_bytes, 0);
  h.allocator.empty_cache();
  s = h.allocator.stats();
  EXPECT_EQ(s.segment_count, 0);
  EXPECT_EQ(s.reserved_bytes, 0);
  EXPECT_EQ(s.cached_bytes, 0);
  EXPECT_EQ(s.raw_free_count, 1);
  EXPECT_EQ(s.reserved_peak_bytes, i64(2 * MiB));
  EXPECT_EQ(h.device.live_bytes(), 0u);
}

TEST(CachingAllocator, TakesTheSmallestFreeBlockThatFits) {
  Harness h;
  // One small segment: [64 KiB][4 KiB][256 KiB][4 KiB][the free rest, about 1.7 MiB].
  void* sixty_four = h.allocator.allocate(64 * KiB, MemoryCategory::workspace, stream_a);
  void* fence_one = h.allocator.allocate(4 * KiB, MemoryCategory::workspace, stream_a);
  void* two_fifty_six = h.allocator.allocate(256 * KiB, MemoryCategory::workspace, stream_a);
  void* fence_two = h.allocator.allocate(4 * KiB, MemoryCategory::workspace, stream_a);
  h.allocator.deallocate(sixty_four, 64 * KiB, MemoryCategory::workspace);
  h.allocator.deallocate(two_fifty_six, 256 * KiB, MemoryCategory::workspace);
  void* fits_in_64 = h.allocator.allocate(60 * KiB, MemoryCategory::workspace, stream_a);
  void* fits_in_256 = h.allocator.allocate(200 * KiB, MemoryCategory::workspace, stream_a);
  EXPECT_EQ(fits_in_64, sixty_four);
  EXPECT_EQ(fits_in_256, two_fifty_six);
  EXPECT_EQ(h.allocator.stats().raw_allocation_count, 1);
  h.allocator.deallocate(fits_in_64, 60 * KiB, MemoryCategory::workspace);
  h.allocator.deallocate(fits_in_256, 200 * KiB, MemoryCategory::workspace);
  h.allocator.deallocate(fence_one, 4 * KiB, MemoryCategory::workspace);
  h.allocator.deallocate(fence_two, 4 * KiB, MemoryCategory::workspace);
  EXPECT_EQ(h.allocator.stats().cached_bytes, i64(2 * MiB));
}

TEST(CachingAllocator, LargeBlocksSplitOnlyWhenMoreThan1MiBIsLeft) {
  Harness h;
  void* a = h.allocator.allocate(5 * MiB, MemoryCategory::activations, stream_a);  // a 20 MiB segment
  EXPECT_EQ(h.allocator.stats().cached_bytes, i64(15 * MiB));
  void* b = h.allocator.allocate(13 * MiB, MemoryCategory::activations, stream_a);  // leaves 2 MiB: split
  EXPECT_EQ(bytes_of(b), bytes_of(a) + 5 * MiB);
  EXPECT_EQ(h.allocator.stats().cached_bytes, i64(2 * MiB));
  void* c = h.allocator.allocate(1536 * KiB, MemoryCategory::activations, stream_a);  // leaves 0.5 MiB: kept
  EXPECT_EQ(bytes_of(c), bytes_of(a) + 18 * MiB);
  CachingAllocatorStats s = h.allocator.stats();
  EXPECT_EQ(s.raw_allocation_count, 1);
  EXPECT_EQ(s.cached_bytes, 0);
  EXPECT_EQ(s.allocated_bytes, i64(19 * MiB + 512 * KiB));
  EXPECT_EQ(s.reserved_bytes - s.cached_bytes - s.allocated_bytes, i64(512 * KiB));  // c's unsplit tail

  // A small request never takes from the large pool: its own 2 MiB segment.
  void* small = h.allocator.allocate(100, MemoryCategory::workspace, stream_a);
  s = h.allocator.stats();
  EXPECT_EQ(s.raw_allocation_count, 2);
  EXPECT_EQ(s.reserved_bytes, i64(22 * MiB));
  h.allocator.deallocate(c, 1536 * KiB, MemoryCategory::activations);
  EXPECT_EQ(h.allocator.stats().cached_bytes, i64(2 * MiB - 512 + 2 * MiB));  // the small segment's rest + c with its tail
  for (auto [pointer, bytes] : {std::pair{a, 5 * MiB}, std::pair{b, 13 * MiB}})
    h.allocator.deallocate(pointer, bytes, MemoryCategory::activations);
  h.allocator.deallocate(small, 100, MemoryCategory::workspace);
  h.allocator.empty_cache();
  EXPECT_EQ(h.allocator.stats().reserved_bytes, 0);
  EXPECT_EQ(h.device.live_segments(), 0u);
}

TEST(CachingAllocator, BlocksAreReusedOnlyOnTheirOwnStream) {
  Harness h;
  void* on_a = h.allocator.allocate(64 * KiB, MemoryCategory::workspace, stream_a);
  h.allocator.deallocate(on_a, 64 * KiB, MemoryCategory::workspace);
  void* on_b = h.allocator.allocate(64 * KiB, MemoryCategory::workspace, stream_b);
  EXPECT_NE(on_b, on_a) << "stream b must get a segment of its own, not a's cached block";
  CachingAllocatorStats s = h.allocator.stats();
  EXPECT_EQ(s.raw_allocation_count, 2);
  EXPECT_EQ(s.cache_hit_count, 0);
  EXPECT_EQ(s.segment_count, 2);
  void* on_a_again = h.allocator.allocate(64 * KiB, MemoryCategory::workspace, stream_a);
  EXPECT_EQ(on_a_again, on_a);
  EXPECT_EQ(h.allocator.stats().cache_hit_count, 1);

  // Large pool too: b's cached 20 MiB segment is not a's to use.
  void* large_b = h.allocator.allocate(3 * MiB, MemoryCategory::activations, stream_b);
  h.allocator.deallocate(large_b, 3 * MiB, MemoryCategory::activations);
  void* large_a = h.allocator.allocate(3 * MiB, MemoryCategory::activations, stream_a);
  EXPECT_NE(large_a, large_b);
  EXPECT_EQ(h.allocator.stats().raw_allocation_count, 4);
  for (auto [pointer, bytes, category] : {std::tuple{on_b, 64 * KiB, MemoryCategory::workspace},
                                          std::tuple{on_a_again, 64 * KiB, MemoryCategory::workspace},
                                          std::tuple{large_a, 3 * MiB, MemoryCategory::activations}})
    h.allocator.deallocate(pointer, bytes, category);
  h.allocator.empty_cache();
  EXPECT_EQ(h.allocator.stats().raw_free_count, 4);
}

TEST(CachingAllocator, OutOfMemoryHandsBackCachedSegmentsOfEveryStreamAndRetriesOnce) {
  Harness h(25 * MiB);
  void* live = h.allocator.allocate(1 * KiB, MemoryCategory::parameters, stream_a);  // 2 MiB segment, kept
  for (StreamId stream : {stream_b, stream_c}) {  // two cached 2 MiB segments
    void* cached = h.allocator.allocate(1 * KiB, MemoryCategory::workspace, stream);
    h.allocator.deallocate(cached, 1 * KiB, MemoryCategory::workspace);
  }
  EXPECT_EQ(h.device.live_bytes(), 6 * MiB);
  // 6 + 20 MiB > 25 MiB: the first try fails, b's and c's segments go back, the retry fits.
  void* big = h.allocator.allocate(5 * MiB, MemoryCategory::activations, stream_a);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(h.device.failures(), 1);
  const CachingAllocatorStats s = h.allocator.stats();
  EXPECT_EQ(s.raw_free_count, 2);
  EXPECT_EQ(s.segment_count, 2);
  EXPECT_EQ(s.reserved_bytes, i64(22 * MiB));
  EXPECT_EQ(s.reserved_peak_bytes, i64(22 * MiB));
  EXPECT_TRUE(h.device.holds(live, 1 * KiB)) << "a segment with a live block must stay";
  EXPECT_EQ(h.ledger.snapshot()[MemoryCategory::activations].now_bytes, i64(5 * MiB));
  h.allocator.deallocate(big, 5 * MiB, MemoryCategory::activations);
  h.allocator.deallocate(live, 1 * KiB, MemoryCategory::parameters);
}

TEST(CachingAllocator, TrulyOutOfMemoryReturnsNullptrAndRecordsNothing) {
  Harness h(21 * MiB);
  void* held = h.allocator.allocate(15 * MiB, MemoryCategory::parameters, stream_a);  // a 16 MiB segment
  ASSERT_NE(held, nullptr);
  const MemorySnapshot before = h.ledger.snapshot();
  const CachingAllocatorStats stats_before = h.allocator.stats();

  EXPECT_EQ(h.allocator.allocate(6 * MiB, MemoryCategory::activations, stream_a), nullptr);  // needs 20 MiB more
  EXPECT_EQ(h.device.failures(), 2) << "one try, the cache emptied (nothing to free), one retry";
  EXPECT_EQ(h.allocator.allocate(std::numeric_limits<std::size_t>::max(), MemoryCategory::activations, stream_a), nullptr);
  EXPECT_EQ(h.device.failures(), 2) << "a size that cannot be rounded never reaches the device";

  const MemorySnapshot after = h.ledger.snapshot();
  for (MemoryCategory category : memory_categories) {
    EXPECT_EQ(after[category].now_bytes, before[category].now_bytes) << to_string(category);
    EXPECT_EQ(after[category].peak_bytes, before[category].peak_bytes) << to_string(category);
  }
  EXPECT_EQ(after.total.peak_bytes, i64(15 * MiB));
  const CachingAllocatorStats s = h.allocator.stats();
  EXPECT_EQ(s.allocated_bytes, stats_before.allocated_bytes);
  EXPECT_EQ(s.allocated_peak_bytes, stats_before.allocated_peak_bytes);
  EXPECT_EQ(s.reserved_bytes, i64(16 * MiB));
  EXPECT_EQ(s.segment_count, 1);
  EXPECT_EQ(s.raw_free_count, 0);
  h.allocator.deallocate(held, 15 * MiB, MemoryCategory::parameters);
}

TEST(CachingAllocator, LedgerRecordsWhatCallersAskedForByCategory) {
  Harness h;
  void* parameters = h.allocator.allocate(100, MemoryCategory::parameters, stream_a);
  void* activations_big = h.allocator.allocate(3 * MiB, MemoryCategory::activations, stream_a);
  void* activations_small = h.allocator.allocate(700, MemoryCategory::activations, stream_a);
  MemorySnapshot s = h.ledger.snapshot();
  EXPECT_EQ(s[MemoryCategory::parameters].now_bytes, 100);
  EXPECT_EQ(s[MemoryCategory::activations].now_bytes, i64(3 * MiB + 700));
  EXPECT_EQ(s.total.now_bytes, i64(3 * MiB + 800));
  EXPECT_EQ(h.allocator.stats().allocated_bytes, i64(512 + 3 * MiB + 1024));  // rounded

  h.allocator.deallocate(activations_big, 3 * MiB, MemoryCategory::activations);
  void* gradients = h.allocator.allocate(1 * MiB, MemoryCategory::gradients, stream_b);
  s = h.ledger.snapshot();
  EXPECT_EQ(s[MemoryCategory::activations].now_bytes, 700);
  EXPECT_EQ(s[MemoryCategory::activations].peak_bytes, i64(3 * MiB + 700));
  EXPECT_EQ(s[MemoryCategory::gradients].now_bytes, i64(1 * MiB));
  EXPECT_EQ(s.total.now_bytes, i64(1 * MiB + 800));
  EXPECT_EQ(s.total.peak_bytes, i64(3 * MiB + 800));  // the simultaneous peak
  CachingAllocatorStats stats = h.allocator.stats();
  EXPECT_EQ(stats.allocated_bytes, i64(512 + 1024 + 1 * MiB));
  EXPECT_EQ(stats.allocated_peak_bytes, i64(512 + 3 * MiB + 1024));

  // 0 bytes: distinct pointers, nothing in the ledger, 512 B each in the allocator.
  void* empty_one = h.allocator.allocate(0, MemoryCategory::workspace, stream_a);
  void* empty_two = h.allocator.allocate(0, MemoryCategory::workspace, stream_a);
  ASSERT_NE(empty_one, nullptr);
  EXPECT_NE(empty_one, empty_two);
  EXPECT_EQ(h.ledger.snapshot()[MemoryCategory::workspace].now_bytes, 0);
  EXPECT_EQ(h.allocator.stats().allocated_bytes, stats.allocated_bytes + 1024);

  h.allocator.deallocate(empty_one, 0, MemoryCategory::workspace);
  h.allocator.deallocate(empty_two, 0, MemoryCategory::workspace);
  h.allocator.deallocate(parameters, 100, MemoryCategory::parameters);
  h.allocator.deallocate(activations_small, 700, MemoryCategory::activations);
  h.allocator.deallocate(gradients, 1 * MiB, MemoryCategory::gradients);
  s = h.ledger.snapshot();
  for (MemoryCategory category : memory_categories) EXPECT_EQ(s[category].now_bytes, 0) << to_string(category);
  EXPECT_EQ(h.allocator.stats().allocated_bytes, 0);
}

TEST(CachingAllocator, EmptyCacheKeepsSegmentsWithALiveBlockAndTheDestructorReturnsAll) {
  FakeDevice device(std::size_t{1} << 30);
  MemoryLedger ledger;
  {
    CachingAllocator allocator(device.raw(), ledger);
    void* live = allocator.allocate(4 * KiB, MemoryCategory::workspace, stream_a);
    void* large = allocator.allocate(12 * MiB, MemoryCategory::activations, stream_a);
    allocator.deallocate(large, 12 * MiB, MemoryCategory::activations);
    allocator.empty_cache();
    const CachingAllocatorStats s = allocator.stats();
    EXPECT_EQ(s.segment_count, 1);
    EXPECT_EQ(s.reserved_bytes, i64(2 * MiB));
    EXPECT_EQ(s.cached_bytes, i64(2 * MiB - 4 * KiB));  // the live block's segment keeps its free rest
    EXPECT_TRUE(device.holds(live, 4 * KiB));
    void* cached = allocator.allocate(3 * MiB, MemoryCategory::activations, stream_b);
    allocator.deallocate(cached, 3 * MiB, MemoryCategory::activations);
    EXPECT_EQ(device.live_segments(), 2u);
    allocator.deallocate(live, 4 * KiB, MemoryCategory::workspace);
  }
  EXPECT_EQ(device.live_segments(), 0u) << "the destructor hands every segment back";
  EXPECT_EQ(device.frees(), device.allocations());
}

// ---------------------------------------------------------------- (3) threads and stress

TEST(CachingAllocator, ConcurrentThreadsKeepTheBooksBalanced) {
  Harness h;
  constexpr int threads = 4, rounds = 3000;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&h, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 1);
      std::uniform_int_distribution<std::size_t> size(0, 3 * MiB);
      const auto stream = static_cast<StreamId>(t % 2 + 1);  // two threads per stream
      std::vector<std::pair<void*, std::size_t>> live;
      for (int i = 0; i < rounds; ++i) {
        if (live.size() < 8 && (live.empty() || rng() % 2 == 0)) {
          const std::size_t bytes = size(rng);
          void* pointer = h.allocator.allocate(bytes, MemoryCategory::workspace, stream);
          if (pointer != nullptr) live.emplace_back(pointer, bytes);
        } else {
          const std::size_t index = rng() % live.size();
          h.allocator.deallocate(live[index].first, live[index].second, MemoryCategory::workspace);
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(index));
        }
      }
      for (auto [pointer, bytes] : live) h.allocator.deallocate(pointer, bytes, MemoryCategory::workspace);
    });
  for (std::thread& worker : workers) worker.join();
  CachingAllocatorStats s = h.allocator.stats();
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.cached_bytes, s.reserved_bytes);
  EXPECT_EQ(h.ledger.snapshot().total.now_bytes, 0);
  h.allocator.empty_cache();
  s = h.allocator.stats();
  EXPECT_EQ(s.reserved_bytes, 0);
  EXPECT_EQ(s.segment_count, 0);
  EXPECT_EQ(h.device.live_segments(), 0u);
  EXPECT_EQ(s.raw_allocation_count, h.device.allocations());
}

std::uint64_t stress_seed() {
  if (const char* fixed = std::getenv("MESHPLAN_CACHING_TEST_SEED")) return std::strtoull(fixed, nullptr, 10);
  return (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
}

// A request the stress test holds: where, what it asked for, and the tag
// written into its first and last byte (a block handed out twice would lose it).
struct LiveRequest {
  std::size_t bytes = 0;
  std::size_t rounded_bytes = 0;
  MemoryCategory category = MemoryCategory::workspace;
  unsigned char tag = 0;
};

TEST(CachingAllocatorStress, RandomRequestsKeepEveryInvariant) {
  const std::uint64_t seed = stress_seed();
  std::printf("caching allocator stress: seed %llu (MESHPLAN_CACHING_TEST_SEED=%llu replays it)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);

  Harness h(256 * MiB);  // small enough that large requests run out now and then
  std::map<std::uintptr_t, LiveRequest> live;  // by address
  std::map<std::int64_t, StreamId> segment_stream;  // by raw allocation number: the stream it serves
  std::array<std::int64_t, memory_categories.size()> ledger_now{};
  std::int64_t ledger_total = 0, ledger_total_peak = 0, allocated = 0, allocated_peak = 0;
  int out_of_memory = 0;

  const auto random_bytes = [&rng]() -> std::size_t {
    const auto kind = rng() % 100;
    if (kind < 55) return std::uniform_int_distribution<std::size_t>(0, 1 * MiB)(rng);  // small
    if (kind < 85) return std::uniform_int_distribution<std::size_t>(1 * MiB + 1, 10 * MiB - 1)(rng);
    return std::uniform_int_distribution<std::size_t>(10 * MiB, 40 * MiB)(rng);
  };

  const auto check = [&] {
    const CachingAllocatorStats s = h.allocator.stats();
    ASSERT_EQ(s.allocated_bytes, allocated);
    ASSERT_EQ(s.allocated_peak_bytes, allocated_peak);
    ASSERT_EQ(s.reserved_bytes, i64(h.device.live_bytes()));
    ASSERT_EQ(s.reserved_peak_bytes, i64(h.device.peak_bytes()));
    ASSERT_EQ(s.segment_count, i64(h.device.live_segments()));
    ASSERT_EQ(s.raw_allocation_count, h.device.allocations());
    ASSERT_EQ(s.raw_free_count, h.device.frees());
    ASSERT_GE(s.cached_bytes, 0);
    // Live block bytes = reserved - cached: at least what was asked (rounded),
    // at most 1 MiB more per live block (a large block's unsplit tail).
    const std::int64_t live_block_bytes = s.reserved_bytes - s.cached_bytes;
    ASSERT_GE(live_block_bytes, allocated);
    ASSERT_LE(live_block_bytes - allocated, i64(live.size() * 1 * MiB));
    const MemorySnapshot ledger = h.ledger.snapshot();
    for (std::size_t c = 0; c < memory_categories.size(); ++c) ASSERT_EQ(ledger.by_category[c].now_bytes, ledger_now[c]);
    ASSERT_EQ(ledger.total.now_bytes, ledger_total);
    ASSERT_EQ(ledger.total.peak_bytes, ledger_total_peak);
  };

  const auto release = [&](std::map<std::uintptr_t, LiveRequest>::iterator at) {
    auto* pointer = reinterpret_cast<unsigned char*>(at->first);
    const LiveRequest& request = at->second;
    if (request.bytes > 0) {
      ASSERT_EQ(pointer[0], request.tag) << "another request wrote into this block";
      ASSERT_EQ(pointer[request.bytes - 1], request.tag) << "another request wrote into this block";
    }
    h.allocator.deallocate(pointer, request.bytes, request.category);
    allocated -= i64(request.rounded_bytes);
    ledger_now[static_cast<std::size_t>(request.category)] -= i64(request.bytes);
    ledger_total -= i64(request.bytes);
    live.erase(at);
  };

  constexpr int operations = 20000;
  for (int operation = 0; operation < operations; ++operation) {
    SCOPED_TRACE("operation " + std::to_string(operation));
    const auto choice = rng() % 100;
    if (live.empty() || choice < 52) {
      const std::size_t bytes = random_bytes();
      const MemoryCategory category = memory_categories[rng() % memory_categories.size()];
      const StreamId stream = 1 + rng() % 3;
      const std::int64_t failures_before = h.device.failures();
      void* pointer = h.allocator.allocate(bytes, category, stream);
      if (pointer == nullptr) {
        ++out_of_memory;
        ASSERT_EQ(h.device.failures() - failures_before, 2) << "nullptr only after a failed try and a failed retry";
      } else {
        const auto address = reinterpret_cast<std::uintptr_t>(pointer);
        const std::size_t rounded = round_request_bytes(bytes);
        ASSERT_EQ(address % caching_block_alignment_bytes, 0u);
        const std::int64_t segment = h.device.segment_number(pointer, rounded);
        ASSERT_NE(segment, 0) << "a block outside every live segment";
        const auto owner = segment_stream.emplace(segment, stream).first;
        ASSERT_EQ(owner->second, stream) << "a block of one stream's segment handed out on another stream";
        const auto after = live.lower_bound(address);
        ASSERT_TRUE(after == live.end() || after->first >= address + rounded) << "overlaps the next live block";
        if (after != live.begin()) {
          const auto before = std::prev(after);
          ASSERT_LE(before->first + before->second.rounded_bytes, address) << "overlaps the previous live block";
        }
        const auto tag = static_cast<unsigned char>(rng());
        if (bytes > 0) static_cast<unsigned char*>(pointer)[0] = static_cast<unsigned char*>(pointer)[bytes - 1] = tag;
        live.emplace(address, LiveRequest{bytes, rounded, category, tag});
        allocated += i64(rounded);
        allocated_peak = std::max(allocated_peak, allocated);
        ledger_now[static_cast<std::size_t>(category)] += i64(bytes);
        ledger_total += i64(bytes);
        ledger_total_peak = std::max(ledger_total_peak, ledger_total);
      }
    } else if (choice < 98) {
      auto at = live.begin();
      std::advance(at, static_cast<std::ptrdiff_t>(rng() % live.size()));
      ASSERT_NO_FATAL_FAILURE(release(at));
    } else {
      h.allocator.empty_cache();
    }
    ASSERT_NO_FATAL_FAILURE(check());
  }

  while (!live.empty()) ASSERT_NO_FATAL_FAILURE(release(live.begin()));
  ASSERT_NO_FATAL_FAILURE(check());
  h.allocator.empty_cache();
  const CachingAllocatorStats s = h.allocator.stats();
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.reserved_bytes, 0);
  EXPECT_EQ(s.cached_bytes, 0);
  EXPECT_EQ(s.segment_count, 0);
  EXPECT_EQ(h.device.live_bytes(), 0u);
  EXPECT_EQ(h.ledger.snapshot().total.now_bytes, 0);
  std::printf("caching allocator stress: %d operations, %lld raw allocations, %lld cache hits, %d out of memory\n",
              operations, static_cast<long long>(s.raw_allocation_count), static_cast<long long>(s.cache_hit_count),
              out_of_memory);
}

}  // namespace
}  // namespace meshplan::exec
