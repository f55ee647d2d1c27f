// The communicator over real MPI ranks: every collective's values for each
// element type and reduction, in-place forms, point-to-point transfers, the
// overlap of a non-blocking all-reduce with work, the member order of split
// groups and of the mesh-axis groups the planner assumes, the group of one
// rank, and measure_collective through staged buffers (BenchBuffers). Run by ctest under mpirun with 2 and 4 ranks; every test is
// written for any rank count, runs on every rank in the same order (each
// collective is matched), and main() reports a failure seen on any rank.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "executor/comm/collective_bench.hpp"
#include "executor/comm/communicator.hpp"
#include "executor/comm/mesh_comms.hpp"
#include "executor/comm/mpi_communicator.hpp"
#include "tests/comm/mpi_gtest.hpp"
#include "model/mesh.hpp"

namespace comm = meshplan::exec::comm;
using comm::Communicator;
using comm::DataType;
using comm::ReduceOp;
using meshplan::Collective;

namespace {

Communicator* world_group = nullptr;
Communicator& world() { return *world_group; }

template <typename T>
class TypedCollectives : public ::testing::Test {};
using ElementTypes = ::testing::Types<float, double, std::int32_t, std::int64_t>;
TYPED_TEST_SUITE(TypedCollectives, ElementTypes);

TYPED_TEST(TypedCollectives, AllReduceSumAndMax) {
  using T = TypeParam;
  const int n = world().size();
  const int r = world().rank();
  const std::int64_t count = 1000;
  std::vector<T> sum(count), max(count);
  for (std::int64_t i = 0; i < count; ++i) {
    sum[i] = static_cast<T>((r + 1) * (i % 7 + 1));
    max[i] = static_cast<T>(((r + i) % n) * 3 - 1);  // the maximum n*3-4 is held by a different rank per element
  }
  world().all_reduce(std::span<T>(sum), ReduceOp::sum);
  world().all_reduce(std::span<T>(max), ReduceOp::max);
  for (std::int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(sum[i], static_cast<T>((i % 7 + 1) * n * (n + 1) / 2)) << "element " << i;
    ASSERT_EQ(max[i], static_cast<T>((n - 1) * 3 - 1)) << "element " << i;
  }
}

TYPED_TEST(TypedCollectives, AllGatherIntoRankBlocks) {
  using T = TypeParam;
  const int n = world().size();
  const int r = world().rank();
  const std::int64_t count = 37;
  std::vector<T> send(count);
  for (std::int64_t i = 0; i < count; ++i) send[i] = static_cast<T>(r * 100 + i);
  std::vector<T> recv(count * n, T{-1});
  world().all_gather(send.data(), recv.data(), count, comm::data_type_of<T>());
  for (int s = 0; s < n; ++s) {
    for (std::int64_t i = 0; i < count; ++i) ASSERT_EQ(recv[s * count + i], static_cast<T>(s * 100 + i));
  }
  // In place: this rank's block already sits at recv + rank x count.
  std::vector<T> in_place(count * n, T{-1});
  std::copy(send.begin(), send.end(), in_place.begin() + r * count);
  world().all_gather(in_place.data() + r * count, in_place.data(), count, comm::data_type_of<T>());
  EXPECT_EQ(in_place, recv);
}

TYPED_TEST(TypedCollectives, ReduceScatterSumsEachRanksBlock) {
  using T = TypeParam;
  const int n = world().size();
  const int r = world().rank();
  const std::int64_t count = 25;
  std::vector<T> send(count * n);
  for (std::int64_t j = 0; j < count * n; ++j) send[j] = static_cast<T>(r + j);
  std::vector<T> recv(count, T{-1});
  world().reduce_scatter(send.data(), recv.data(), count, comm::data_type_of<T>(), ReduceOp::sum);
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t j = r * count + i;
    ASSERT_EQ(recv[i], static_cast<T>(n * j + n * (n - 1) / 2)) << "element " << i;
  }
  // Max, in place: the result lands in the first `count` elements.
  std::vector<T> in_place(count * n);
  for (std::int64_t j = 0; j < count * n; ++j) in_place[j] = static_cast<T>((j + r) % n);
  world().reduce_scatter(in_place.data(), in_place.data(), count, comm::data_type_of<T>(), ReduceOp::max);
  for (std::int64_t i = 0; i < count; ++i) ASSERT_EQ(in_place[i], static_cast<T>(n - 1));
}

TYPED_TEST(TypedCollectives, BroadcastFromEveryRoot) {
  using T = TypeParam;
  const int n = world().size();
  for (int root = 0; root < n; ++root) {
    std::vector<T> buffer(50);
    for (std::size_t i = 0; i < buffer.size(); ++i) {
      buffer[i] = static_cast<T>(world().rank() == root ? root * 10 + static_cast<int>(i) : -7);
    }
    world().broadcast(std::span<T>(buffer), root);
    for (std::size_t i = 0; i < buffer.size(); ++i) ASSERT_EQ(buffer[i], static_cast<T>(root * 10 + static_cast<int>(i)));
  }
}

TYPED_TEST(TypedCollectives, AllToAllTransposesBlocks) {
  using T = TypeParam;
  const int n = world().size();
  const int r = world().rank();
  const std::int64_t count = 9;
  std::vector<T> send(count * n);
  for (int d = 0; d < n; ++d) {
    for (std::int64_t i = 0; i < count; ++i) send[d * count + i] = static_cast<T>(r * 1000 + d * 10 + i);
  }
  std::vector<T> recv(count * n, T{-1});
  world().all_to_all(send.data(), recv.data(), count, comm::data_type_of<T>());
  for (int s = 0; s < n; ++s) {
    for (std::int64_t i = 0; i < count; ++i) ASSERT_EQ(recv[s * count + i], static_cast<T>(s * 1000 + r * 10 + i));
  }
  world().all_to_all(send.data(), send.data(), count, comm::data_type_of<T>());
  EXPECT_EQ(send, recv);
}

TEST(Collectives, BytesAllGather) {
  const int n = world().size();
  std::vector<std::uint8_t> send(3, static_cast<std::uint8_t>(world().rank() + 1));
  std::vector<std::uint8_t> recv(3 * n);
  world().all_gather(send.data(), recv.data(), 3, DataType::u8);
  for (int i = 0; i < 3 * n; ++i) ASSERT_EQ(recv[i], i / 3 + 1);
}

TEST(Collectives, ZeroCountsAreAllowed) {
  std::vector<float> nothing(1, 5.0f);
  world().all_reduce(nothing.data(), 0, DataType::f32, ReduceOp::sum);
  world().broadcast(nothing.data(), 0, DataType::f32, 0);
  EXPECT_EQ(nothing[0], 5.0f);
}

TEST(PointToPoint, RingOfNonBlockingTransfers) {
  const int n = world().size();
  const int r = world().rank();
  const int next = (r + 1) % n;
  const int previous = (r + n - 1) % n;
  if (n == 1) GTEST_SKIP() << "needs 2 ranks";
  std::vector<double> out(1000), in(1000, -1.0);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = r * 1e4 + static_cast<double>(i);
  auto receive = world().irecv(in.data(), std::ssize(in), DataType::f64, previous, 11);
  auto send = world().isend(out.data(), std::ssize(out), DataType::f64, next, 11);
  send->wait();
  receive->wait();
  EXPECT_TRUE(receive->test());
  for (std::size_t i = 0; i < in.size(); ++i) ASSERT_EQ(in[i], previous * 1e4 + static_cast<double>(i));
}

TEST(PointToPoint, BlockingPairsAndTagsKeepMessagesApart) {
  const int r = world().rank();
  const int n = world().size();
  const int pairs = n / 2;
  if (r >= 2 * pairs) return;  // an odd rank count leaves the last rank out
  const int peer = r ^ 1;
  std::vector<std::int32_t> a(10, r), b(10, r + 100), got_a(10), got_b(10);
  if (r % 2 == 0) {
    world().send(a.data(), 10, DataType::i32, peer, 1);
    world().send(b.data(), 10, DataType::i32, peer, 2);
    world().recv(got_b.data(), 10, DataType::i32, peer, 2);
    world().recv(got_a.data(), 10, DataType::i32, peer, 1);
  } else {
    // Received in the opposite tag order; the eager send of small messages completes regardless.
    world().recv(got_b.data(), 10, DataType::i32, peer, 2);
    world().recv(got_a.data(), 10, DataType::i32, peer, 1);
    world().send(a.data(), 10, DataType::i32, peer, 1);
    world().send(b.data(), 10, DataType::i32, peer, 2);
  }
  EXPECT_EQ(got_a, std::vector<std::int32_t>(10, peer));
  EXPECT_EQ(got_b, std::vector<std::int32_t>(10, peer + 100));
}

TEST(PointToPoint, SendToItselfIsAProgrammingError) {
  float x = 0;
  EXPECT_THROW(world().send(&x, 1, DataType::f32, world().rank(), 0), std::logic_error);
}

TEST(NonBlocking, AllReduceOverlapsWithWork) {
  const int n = world().size();
  std::vector<float> gradients(1 << 18);
  for (std::size_t i = 0; i < gradients.size(); ++i) gradients[i] = static_cast<float>(world().rank() + (i % 5));
  auto request = world().iall_reduce(gradients.data(), std::ssize(gradients), DataType::f32, ReduceOp::sum);
  // Work done while the reduction is in flight (polled, as the backward pass polls between layers).
  double work = 0;
  int polls = 0;
  for (int k = 0; k < 2000; ++k) {
    for (int j = 0; j < 500; ++j) work += std::sqrt(static_cast<double>(k * 500 + j));
    if (k % 100 == 0 && request->test()) ++polls;
  }
  request->wait();
  EXPECT_GT(work, 0.0);
  const float rank_sum = static_cast<float>(n * (n - 1) / 2);
  for (std::size_t i = 0; i < gradients.size(); ++i) {
    ASSERT_EQ(gradients[i], rank_sum + static_cast<float>(n * static_cast<int>(i % 5))) << "element " << i;
  }
}

TEST(NonBlocking, AllGatherAndReduceScatterOverlapWithWork) {
  const int n = world().size();
  const int r = world().rank();
  const std::int64_t count = 1 << 15;
  std::vector<double> shard(count), gathered(count * n, -1.0);
  for (std::int64_t i = 0; i < count; ++i) shard[i] = r * 0.5 + static_cast<double>(i % 9);
  std::vector<float> gradients(count * n), mine(count, -1.0f);
  for (std::int64_t j = 0; j < count * n; ++j) gradients[j] = static_cast<float>((r + 1) * (j % 4));
  auto gather = world().iall_gather(shard.data(), gathered.data(), count, DataType::f64);
  auto scatter = world().ireduce_scatter(gradients.data(), mine.data(), count, DataType::f32, ReduceOp::sum);
  double work = 0;
  for (int k = 0; k < 200000; ++k) work += std::sqrt(static_cast<double>(k));
  EXPECT_GT(work, 0.0);
  gather->wait();
  scatter->wait();
  EXPECT_TRUE(gather->test());
  for (int s = 0; s < n; ++s) {
    for (std::int64_t i = 0; i < count; ++i) ASSERT_EQ(gathered[s * count + i], s * 0.5 + static_cast<double>(i % 9));
  }
  for (std::int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(mine[i], static_cast<float>(n * (n + 1) / 2 * ((r * count + i) % 4))) << "element " << i;
  }
  // In place, as FSDP gathers into the full buffer it already holds its shard in.
  std::vector<double> in_place(count * n, -1.0);
  std::copy(shard.begin(), shard.end(), in_place.begin() + r * count);
  world().iall_gather(in_place.data() + r * count, in_place.data(), count, DataType::f64)->wait();
  EXPECT_EQ(in_place, gathered);
}

TEST(Groups, SplitOrdersMembersByKeyThenParentRank) {
  const int r = world().rank();
  const int n = world().size();
  // Colour by parity; key reverses the order inside each group.
  auto group = world().split(r % 2, n - r, "parity");
  EXPECT_EQ(group->name(), "parity");
  const int members = (n - r % 2 + 1) / 2;
  ASSERT_EQ(group->size(), members);
  EXPECT_EQ(group->rank(), members - 1 - r / 2);
  // The group really contains those ranks: gather their world ranks.
  std::vector<std::int32_t> ranks(members);
  const std::int32_t mine = r;
  group->all_gather(&mine, ranks.data(), 1, DataType::i32);
  for (int i = 0; i < members; ++i) EXPECT_EQ(ranks[i], (members - 1 - i) * 2 + r % 2);
  // Equal keys keep the parent's order.
  auto same_key = world().split(0, 0, "all");
  EXPECT_EQ(same_key->rank(), r);
}

TEST(Groups, WatchdogSettingsAreSharedWithSplitGroups) {
  auto group = world().split(0, world().rank(), "copy");
  const auto before = world().timeout();
  group->set_timeout(std::chrono::duration<double>(41.5));
  EXPECT_DOUBLE_EQ(world().timeout().count(), 41.5);
  world().set_timeout(before);
  EXPECT_DOUBLE_EQ(group->timeout().count(), before.count());
}

TEST(Groups, BarrierCompletes) {
  world().barrier();
  SUCCEED();
}

TEST(MeshGroups, TwoByTwoMeshMatchesThePlannersDeviceOrder) {
  if (world().size() != 4) GTEST_SKIP() << "needs 4 ranks";
  const auto mesh = meshplan::parse_mesh("dp=2,tp=2", "mesh");
  ASSERT_TRUE(mesh.ok());
  auto groups = comm::MeshCommunicators::create(world(), mesh.value);
  ASSERT_TRUE(groups.ok());
  auto& g = groups.value;
  const int r = world().rank();
  // tp is the fastest axis: tp groups {0,1},{2,3}; dp groups {0,2},{1,3}.
  std::vector<std::int32_t> tp_members(2), dp_members(2);
  const std::int32_t mine = r;
  g.group(meshplan::Axis::tp).all_gather(&mine, tp_members.data(), 1, DataType::i32);
  g.group(meshplan::Axis::dp).all_gather(&mine, dp_members.data(), 1, DataType::i32);
  EXPECT_EQ(tp_members, (std::vector<std::int32_t>{r / 2 * 2, r / 2 * 2 + 1}));
  EXPECT_EQ(dp_members, (std::vector<std::int32_t>{r % 2, r % 2 + 2}));
  EXPECT_EQ(g.group(meshplan::Axis::tp).name(), "tp");
  EXPECT_EQ(g.coordinate(meshplan::Axis::dp), r / 2);
  EXPECT_EQ(g.coordinate(meshplan::Axis::tp), r % 2);
  // Absent axes are groups of one.
  EXPECT_EQ(g.group(meshplan::Axis::pp).size(), 1);
  EXPECT_EQ(g.coordinate(meshplan::Axis::pp), 0);
  // dp x fsdp (fsdp absent): the dp group's members.
  EXPECT_EQ(g.data_parallel().size(), 2);
  std::vector<std::int32_t> data_members(2);
  g.data_parallel().all_gather(&mine, data_members.data(), 1, DataType::i32);
  EXPECT_EQ(data_members, dp_members);
}

TEST(MeshGroups, EveryAxisGroupHoldsTheRanksThatDifferOnlyOnThatAxis) {
  // dp x tp x pp shapes that fit the world: check each group against Mesh::coordinates.
  const int n = world().size();
  std::vector<std::string> shapes{"dp=" + std::to_string(n), "tp=" + std::to_string(n)};
  if (n % 2 == 0) shapes.insert(shapes.end(), {"pp=" + std::to_string(n / 2) + ",tp=2", "fsdp=2,dp=" + std::to_string(n / 2)});
  for (const std::string& text : shapes) {
    const auto mesh = meshplan::parse_mesh(text, "mesh");
    ASSERT_TRUE(mesh.ok()) << text;
    if (mesh.value.world_size() != n) continue;
    auto groups = comm::MeshCommunicators::create(world(), mesh.value);
    ASSERT_TRUE(groups.ok()) << text;
    const auto my_coords = mesh.value.coordinates(world().rank());
    for (std::size_t a = 0; a < mesh.value.axes.size(); ++a) {
      auto& group = groups.value.group(mesh.value.axes[a].axis);
      ASSERT_EQ(group.size(), mesh.value.axes[a].size) << text;
      EXPECT_EQ(group.rank(), my_coords[a]) << text;
      std::vector<std::int64_t> members(group.size());
      const std::int64_t mine = world().rank();
      group.all_gather(&mine, members.data(), 1, DataType::i64);
      for (std::int64_t k = 0; k < group.size(); ++k) {
        auto coords = mesh.value.coordinates(members[k]);
        EXPECT_EQ(coords[a], k) << text << " axis " << a;
        coords[a] = my_coords[a];
        EXPECT_EQ(coords, my_coords) << text << ": member " << members[k] << " differs on another axis";
      }
    }
  }
}

TEST(MeshGroups, WrongWorldSizeIsAProblemNamingTheCommand) {
  const auto mesh = meshplan::parse_mesh("dp=2,tp=2,pp=2", "mesh");
  ASSERT_TRUE(mesh.ok());
  if (world().size() == 8) GTEST_SKIP();
  auto groups = comm::MeshCommunicators::create(world(), mesh.value);
  ASSERT_FALSE(groups.ok());
  const std::string text = meshplan::describe(groups.problems.front());
  const std::string started = world().size() == 1 ? "but this is a single process (not started by mpirun)"
                                                   : "but mpirun started " + std::to_string(world().size());
  EXPECT_NE(text.find("the plan needs 8 ranks (dp=2,tp=2,pp=2) " + started), std::string::npos) << text;
  EXPECT_NE(text.find("mpirun -np 8"), std::string::npos) << text;
}

TEST(SelfGroup, CollectivesCopyOrDoNothing) {
  auto self = comm::make_self_communicator("tp");
  EXPECT_EQ(self->size(), 1);
  EXPECT_EQ(self->rank(), 0);
  EXPECT_EQ(self->name(), "tp");
  std::vector<float> data{1.5f, -2.0f};
  self->all_reduce(std::span<float>(data));
  self->broadcast(std::span<float>(data), 0);
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f}));
  std::vector<float> out(2);
  self->all_gather(data.data(), out.data(), 2, DataType::f32);
  EXPECT_EQ(out, data);
  std::vector<float> out2(2);
  self->reduce_scatter(data.data(), out2.data(), 2, DataType::f32, ReduceOp::sum);
  EXPECT_EQ(out2, data);
  std::vector<float> out3(2);
  self->all_to_all(data.data(), out3.data(), 2, DataType::f32);
  EXPECT_EQ(out3, data);
  std::vector<float> out4(2), out5(2);
  self->iall_gather(data.data(), out4.data(), 2, DataType::f32)->wait();
  self->ireduce_scatter(data.data(), out5.data(), 2, DataType::f32, ReduceOp::sum)->wait();
  EXPECT_EQ(out4, data);
  EXPECT_EQ(out5, data);
  auto request = self->iall_reduce(data.data(), 2, DataType::f32, ReduceOp::max);
  EXPECT_TRUE(request->test());
  request->wait();
  EXPECT_THROW(self->send(data.data(), 2, DataType::f32, 0, 0), std::logic_error);
  EXPECT_THROW(self->irecv(data.data(), 2, DataType::f32, 0, 0), std::logic_error);
  EXPECT_THROW(self->broadcast(data.data(), 2, DataType::f32, 1), std::logic_error);
  self->set_timeout(std::chrono::duration<double>(7));
  auto child = self->split(3, 0, "pp");
  EXPECT_EQ(child->name(), "pp");
  EXPECT_EQ(child->size(), 1);
  EXPECT_DOUBLE_EQ(child->timeout().count(), 7.0);
}

// measure_collective through BenchBuffers (the hook `commbench --backend
// nccl` gives device memory with): here separate host blocks, so the
// communicator only ever sees the staged copies. Every collective is right
// and staged both ways; a download that corrupts one element is caught.
class CountingBuffers final : public comm::BenchBuffers {
 public:
  void* allocate(std::size_t bytes) override { ++live; return ::operator new(bytes); }
  void release(void* buffer, std::size_t) noexcept override { --live; ::operator delete(buffer); }
  void upload(void* buffer, const void* host, std::size_t bytes) override {
    ++uploads;
    std::memcpy(buffer, host, bytes);
  }
  void download(void* host, const void* buffer, std::size_t bytes) override {
    ++downloads;
    std::memcpy(host, buffer, bytes);
    if (corrupt && bytes >= sizeof(float)) static_cast<unsigned char*>(host)[0] ^= 0x40;
  }
  int live = 0, uploads = 0, downloads = 0;
  bool corrupt = false;
};

TEST(CollectiveBench, StagedBuffersGiveCorrectResultsForEveryCollective) {
  for (const Collective c : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                             Collective::broadcast, Collective::all_to_all, Collective::send_recv}) {
    if (c == Collective::send_recv && world().size() < 2) continue;
    CountingBuffers buffers;
    const auto staged = comm::measure_collective(world(), c, 4096, 3, 1, DataType::f32, &buffers);
    const auto host = comm::measure_collective(world(), c, 4096, 3, 1, DataType::f32);
    EXPECT_TRUE(staged.correct) << meshplan::to_string(c) << ": " << staged.wrong_elements << " wrong";
    EXPECT_EQ(staged.bytes, host.bytes);
    EXPECT_EQ(staged.count, host.count);
    EXPECT_GT(staged.time_s, 0.0);
    EXPECT_GE(buffers.uploads, 4);    // every iteration, warm-up included, and the summaries
    EXPECT_GE(buffers.downloads, 4);  // every iteration's result is checked
    EXPECT_EQ(buffers.live, 0) << "every staged buffer released";
  }
}

TEST(CollectiveBench, AWrongStagedResultIsCounted) {
  CountingBuffers buffers;
  buffers.corrupt = true;
  const auto t = comm::measure_collective(world(), Collective::all_reduce, 1024, 2, 0, DataType::f32, &buffers);
  EXPECT_FALSE(t.correct);
  EXPECT_GE(t.wrong_elements, 2 * world().size());  // one per iteration per rank at least
}

TEST(DataTypes, SizesAndNames) {
  EXPECT_EQ(comm::size_of(DataType::f32), 4u);
  EXPECT_EQ(comm::size_of(DataType::f64), 8u);
  EXPECT_EQ(comm::size_of(DataType::i32), 4u);
  EXPECT_EQ(comm::size_of(DataType::i64), 8u);
  EXPECT_EQ(comm::size_of(DataType::u8), 1u);
  EXPECT_EQ(comm::to_string(DataType::f32), "f32");
  EXPECT_EQ(comm::to_string(DataType::i64), "i64");
  EXPECT_EQ(comm::to_string(ReduceOp::max), "max");
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto world_loaded = comm::mpi_world(&argc, &argv);
  if (!world_loaded.ok()) {
    for (const auto& problem : world_loaded.problems) std::fprintf(stderr, "%s\n", meshplan::describe(problem).c_str());
    return 2;
  }
  world_group = world_loaded.value.get();
  // A test that returns early on one rank leaves the others in a collective: fail in seconds, not minutes.
  world().set_timeout(std::chrono::duration<double>(30));
  const int failed = comm::testing::run_all_tests_on_every_rank(world(), "comm_tests");
  world_loaded.value.reset();
  return failed;
}
