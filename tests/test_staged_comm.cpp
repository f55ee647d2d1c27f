// The MPI communicator on device buffers, staged through host memory
// (executor/comm/staged_communicator.hpp), over real MPI ranks (2, and 4
// oversubscribed). The device is a stand-in whose "pointers" are not host
// addresses (a high bit set: non-canonical on x86-64), so any code that
// handed a device pointer to MPI or read it on the host would crash the
// test; only the backend's copies translate them. Every collective's values,
// in-place forms, point-to-point, several non-blocking operations in flight
// at once, split groups, and the staging memory in the ledger. Every test
// runs on every rank in the same order; main() reports a failure on any rank.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "executor/backend/backend.hpp"
#include "executor/comm/mesh_comms.hpp"
#include "executor/comm/mpi_communicator.hpp"
#include "executor/comm/staged_communicator.hpp"
#include "tests/comm/mpi_gtest.hpp"
#include "tests/fake_device.hpp"

namespace meshplan::exec {
namespace {

using comm::Communicator;
using comm::DataType;
using comm::ReduceOp;
using testing_support::FakeDevice;

// A typed device array with host views through the backend's copies.
template <typename T>
class DeviceVector {
 public:
  DeviceVector(FakeDevice& device, const std::vector<T>& values) : device_(device), count_(values.size()) {
    data_ = static_cast<T*>(device.allocate(count_ * sizeof(T), MemoryCategory::workspace));
    device.copy_host_to_device(data_, values.data(), count_ * sizeof(T), device.default_context());
  }
  DeviceVector(FakeDevice& device, std::size_t count, T poison) : DeviceVector(device, std::vector<T>(count, poison)) {}
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  ~DeviceVector() { device_.deallocate(data_, count_ * sizeof(T), MemoryCategory::workspace); }
  T* data() { return data_; }
  std::int64_t size() const { return static_cast<std::int64_t>(count_); }
  std::vector<T> host() const {
    std::vector<T> out(count_);
    device_.copy_device_to_host(out.data(), data_, count_ * sizeof(T), device_.default_context());
    return out;
  }

 private:
  FakeDevice& device_;
  std::size_t count_;
  T* data_ = nullptr;
};

Communicator* world_group = nullptr;
FakeDevice* device_ = nullptr;
std::unique_ptr<comm::StagedCommunicator> staged_group;

Communicator& world() { return *world_group; }
FakeDevice& device() { return *device_; }
comm::StagedCommunicator& staged() { return *staged_group; }

// The same draw on every rank for rank r's values: element i of rank r.
float value(int r, std::int64_t i) { return static_cast<float>((r + 1) * 1000 + i % 97) * 0.5f; }

TEST(StagedCollectives, AllReduceSumAndMaxOnDeviceBuffers) {
  const int n = staged().size(), r = staged().rank();
  const std::int64_t count = 1000;
  std::vector<float> mine(count);
  for (std::int64_t i = 0; i < count; ++i) mine[static_cast<std::size_t>(i)] = value(r, i);
  DeviceVector<float> sum(device(), mine), max(device(), mine);
  const int copies_before = device().to_host + device().to_device;
  staged().all_reduce(sum.data(), count, DataType::f32, ReduceOp::sum);
  staged().all_reduce(max.data(), count, DataType::f32, ReduceOp::max);
  EXPECT_GE(device().to_host + device().to_device - copies_before, 4);  // in and out, twice
  const auto s = sum.host(), m = max.host();
  for (std::int64_t i = 0; i < count; ++i) {
    float expected = 0;
    for (int q = 0; q < n; ++q) expected += value(q, i);
    ASSERT_FLOAT_EQ(s[static_cast<std::size_t>(i)], expected) << i;
    ASSERT_EQ(m[static_cast<std::size_t>(i)], value(n - 1, i)) << i;
  }
}

TEST(StagedCollectives, AllGatherIntoRankBlocksAndInPlace) {
  const int n = staged().size(), r = staged().rank();
  const std::int64_t count = 37;
  std::vector<std::int32_t> mine(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) mine[static_cast<std::size_t>(i)] = r * 100 + static_cast<std::int32_t>(i);
  DeviceVector<std::int32_t> send(device(), mine), recv(device(), static_cast<std::size_t>(count * n), -1);
  staged().all_gather(send.data(), recv.data(), count, DataType::i32);
  // In place: this rank's block of the receive buffer is the send buffer.
  std::vector<std::int32_t> in_place_start(static_cast<std::size_t>(count * n), -7);
  std::copy(mine.begin(), mine.end(), in_place_start.begin() + r * count);
  DeviceVector<std::int32_t> in_place(device(), in_place_start);
  staged().all_gather(in_place.data() + r * count, in_place.data(), count, DataType::i32);
  const auto a = recv.host(), b = in_place.host();
  for (int q = 0; q < n; ++q) {
    for (std::int64_t i = 0; i < count; ++i) {
      const auto k = static_cast<std::size_t>(q * count + i);
      ASSERT_EQ(a[k], q * 100 + i);
      ASSERT_EQ(b[k], q * 100 + i);
    }
  }
}

TEST(StagedCollectives, ReduceScatterGivesEachRankItsSummedBlock) {
  const int n = staged().size(), r = staged().rank();
  const std::int64_t count = 50;
  std::vector<double> mine(static_cast<std::size_t>(count * n));
  for (std::int64_t i = 0; i < count * n; ++i) mine[static_cast<std::size_t>(i)] = (r + 1) * 0.25 + static_cast<double>(i);
  DeviceVector<double> send(device(), mine), recv(device(), static_cast<std::size_t>(count), -1.0);
  staged().reduce_scatter(send.data(), recv.data(), count, DataType::f64, ReduceOp::sum);
  const auto got = recv.host();
  for (std::int64_t i = 0; i < count; ++i) {
    double expected = 0;
    for (int q = 0; q < n; ++q) expected += (q + 1) * 0.25 + static_cast<double>(r * count + i);
    ASSERT_DOUBLE_EQ(got[static_cast<std::size_t>(i)], expected) << i;
  }
}

TEST(StagedCollectives, BroadcastFromEveryRoot) {
  const int n = staged().size(), r = staged().rank();
  for (int root = 0; root < n; ++root) {
    std::vector<std::int64_t> start(64, r == root ? 0 : -1);
    if (r == root) std::iota(start.begin(), start.end(), std::int64_t{root} * 1000);
    DeviceVector<std::int64_t> buffer(device(), start);
    staged().broadcast(buffer.data(), buffer.size(), DataType::i64, root);
    const auto got = buffer.host();
    for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], root * 1000 + static_cast<std::int64_t>(i)) << root;
  }
}

TEST(StagedCollectives, AllToAllSwapsBlocks) {
  const int n = staged().size(), r = staged().rank();
  const std::int64_t count = 5;
  std::vector<float> mine(static_cast<std::size_t>(count * n));
  for (int q = 0; q < n; ++q) {
    for (std::int64_t i = 0; i < count; ++i) mine[static_cast<std::size_t>(q * count + i)] = static_cast<float>(r * 100 + q * 10 + i);
  }
  DeviceVector<float> send(device(), mine), recv(device(), mine.size(), -1.0f);
  staged().all_to_all(send.data(), recv.data(), count, DataType::f32);
  const auto got = recv.host();
  for (int q = 0; q < n; ++q) {
    for (std::int64_t i = 0; i < count; ++i) ASSERT_EQ(got[static_cast<std::size_t>(q * count + i)], static_cast<float>(q * 100 + r * 10 + i));
  }
}

TEST(StagedPointToPoint, BlockingRing) {
  const int n = staged().size(), r = staged().rank();
  const int next = (r + 1) % n, previous = (r + n - 1) % n;
  DeviceVector<std::int32_t> out(device(), std::vector<std::int32_t>(16, r)), in(device(), 16, -1);
  if (r % 2 == 0) {
    staged().send(out.data(), 16, DataType::i32, next, 3);
    staged().recv(in.data(), 16, DataType::i32, previous, 3);
  } else {
    staged().recv(in.data(), 16, DataType::i32, previous, 3);
    staged().send(out.data(), 16, DataType::i32, next, 3);
  }
  for (std::int32_t v : in.host()) ASSERT_EQ(v, previous);
}

// Three collectives and a ring of transfers in flight at once: each holds its
// own staging memory until it completes.
TEST(StagedNonBlocking, SeveralInFlightTogether) {
  const int n = staged().size(), r = staged().rank();
  const int next = (r + 1) % n, previous = (r + n - 1) % n;
  const std::int64_t count = 300;
  std::vector<float> ones(static_cast<std::size_t>(count), static_cast<float>(r + 1));
  DeviceVector<float> reduced(device(), ones);
  DeviceVector<float> gather_send(device(), std::vector<float>(static_cast<std::size_t>(count), static_cast<float>(r)));
  DeviceVector<float> gathered(device(), static_cast<std::size_t>(count * n), -1.0f);
  DeviceVector<float> scatter_send(device(), std::vector<float>(static_cast<std::size_t>(count * n), 2.0f));
  DeviceVector<float> scattered(device(), static_cast<std::size_t>(count), -1.0f);
  DeviceVector<float> ring_out(device(), std::vector<float>(static_cast<std::size_t>(count), static_cast<float>(10 * r)));
  DeviceVector<float> ring_in(device(), static_cast<std::size_t>(count), -1.0f);

  auto a = staged().iall_reduce(reduced.data(), count, DataType::f32, ReduceOp::sum);
  auto b = staged().iall_gather(gather_send.data(), gathered.data(), count, DataType::f32);
  auto c = staged().ireduce_scatter(scatter_send.data(), scattered.data(), count, DataType::f32, ReduceOp::sum);
  auto receive = staged().irecv(ring_in.data(), count, DataType::f32, previous, 9);
  auto send = staged().isend(ring_out.data(), count, DataType::f32, next, 9);
  while (!c->test()) {
  }
  send->wait();
  receive->wait();
  b->wait();
  a->wait();
  EXPECT_TRUE(a->test());  // completed requests stay completed

  for (float v : reduced.host()) ASSERT_EQ(v, static_cast<float>(n * (n + 1) / 2));
  const auto g = gathered.host();
  for (int q = 0; q < n; ++q) {
    for (std::int64_t i = 0; i < count; ++i) ASSERT_EQ(g[static_cast<std::size_t>(q * count + i)], static_cast<float>(q));
  }
  for (float v : scattered.host()) ASSERT_EQ(v, 2.0f * static_cast<float>(n));
  for (float v : ring_in.host()) ASSERT_EQ(v, static_cast<float>(10 * previous));
}

TEST(StagedGroups, SplitGroupsWorkOnDeviceBuffersToo) {
  const int r = staged().rank();
  auto half = staged().split(r % 2, r, "half");
  ASSERT_EQ(half->name(), "half");
  DeviceVector<std::int32_t> buffer(device(), std::vector<std::int32_t>(8, r));
  half->all_reduce(buffer.data(), buffer.size(), DataType::i32, ReduceOp::sum);
  std::int32_t expected = 0;
  for (int q = r % 2; q < staged().size(); q += 2) expected += q;
  for (std::int32_t v : buffer.host()) ASSERT_EQ(v, expected);
}

// A mesh over staged groups: the axes it lacks are groups of one split from
// the staged world, so their collectives copy with the device's copies (a
// host group of one would memmove device pointers and crash here).
TEST(StagedGroups, AMeshLacksAxesAsDeviceGroupsOfOne) {
  const int n = staged().size();
  Mesh mesh;
  mesh.axes.push_back({Axis::dp, n});
  auto groups = comm::MeshCommunicators::create(staged(), mesh, comm::SelfGroups::split_from_world);
  ASSERT_TRUE(groups.ok());
  Communicator& tp = groups.value.group(Axis::tp);
  ASSERT_EQ(tp.size(), 1);
  DeviceVector<float> send(device(), std::vector<float>(12, 3.5f)), recv(device(), 12, -1.0f);
  tp.all_gather(send.data(), recv.data(), 12, DataType::f32);
  for (float v : recv.host()) ASSERT_EQ(v, 3.5f);
  DeviceVector<float> buffer(device(), std::vector<float>(8, static_cast<float>(staged().rank())));
  groups.value.group(Axis::dp).all_reduce(buffer.data(), 8, DataType::f32, ReduceOp::sum);
  for (float v : buffer.host()) ASSERT_EQ(v, static_cast<float>(n * (n - 1) / 2));
}

TEST(StagedMemory, StagingIsRecordedAsCommunicationAndFreedWithTheGroup) {
  FakeDevice own;
  std::int64_t held = 0;
  {
    comm::StagedCommunicator group(world().split(0, world().rank(), "ledger"), own);
    std::vector<float> values(100000, 1.0f);  // 400 KB: more than the pool's 64 KiB minimum
    DeviceVector<float> buffer(own, values);
    group.all_reduce(buffer.data(), buffer.size(), DataType::f32, ReduceOp::sum);
    held = own.ledger().snapshot()[MemoryCategory::communication].now_bytes;
    EXPECT_GE(held, static_cast<std::int64_t>(values.size() * sizeof(float)));
    // Reused, not grown, by a second operation of the same size.
    group.all_reduce(buffer.data(), buffer.size(), DataType::f32, ReduceOp::sum);
    EXPECT_EQ(own.ledger().snapshot()[MemoryCategory::communication].now_bytes, held);
    for (float v : buffer.host()) ASSERT_EQ(v, static_cast<float>(world().size() * world().size()));
  }
  EXPECT_EQ(own.ledger().snapshot()[MemoryCategory::communication].now_bytes, 0);
}

}  // namespace
}  // namespace meshplan::exec

int main(int argc, char** argv) {
  using namespace meshplan::exec;
  ::testing::InitGoogleTest(&argc, argv);
  auto world_loaded = comm::mpi_world(&argc, &argv);
  if (!world_loaded.ok()) {
    for (const auto& problem : world_loaded.problems) std::fprintf(stderr, "%s\n", meshplan::describe(problem).c_str());
    return 2;
  }
  world_group = world_loaded.value.get();
  world_group->set_timeout(std::chrono::duration<double>(30));
  FakeDevice fake;
  device_ = &fake;
  staged_group = std::make_unique<comm::StagedCommunicator>(world_group->split(0, world_group->rank(), "staged"), fake);
  const int failed = comm::testing::run_all_tests_on_every_rank(*world_group, "staged_comm_tests");
  staged_group.reset();
  world_loaded.value.reset();
  return failed;
}
