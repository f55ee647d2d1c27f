// The NCCL communicator (executor/comm/nccl_communicator.hpp) on one real GPU,
// in a world of one rank bootstrapped over make_self_communicator (NCCL
// refuses two ranks of one communicator on one GPU, so more ranks need more
// GPUs and mpirun: not tested here). Random device data (a fresh seed every
// run, printed; MESHPLAN_CUDA_TEST_SEED replays one) in every element type:
// every collective of a group of one leaves its data as it was or copies it,
// in place and not, blocking and not; the communicator's stream waits for a
// producer stream; split makes a group of one that shares the watchdog;
// point-to-point to oneself is refused (NCCL pairs a send and a receive to
// oneself only inside one group call; all_to_all does that and is tested);
// and the watchdog: a request whose stream is held by a host function
// sleeping 2 s, under a 0.2 s timeout, aborts the communicator and names the
// operation, the group and the step, by an exception or, by default, by
// ending the process with status 3.
//
// Without a usable GPU the program prints why and exits 77, which ctest
// reports as skipped: it never passes without running.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "executor/comm/nccl_communicator.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "tests/cuda/cuda_test_support.hpp"

namespace meshplan::exec::comm {
namespace {

using kernels::cuda::test_support::seed;  // fresh every run, or MESHPLAN_CUDA_TEST_SEED

using Bytes = std::vector<unsigned char>;

constexpr DataType all_types[] = {DataType::f32, DataType::f64, DataType::i32, DataType::i64, DataType::u8};

// `count` random elements of `type` as bytes: finite values in [-1, 1] for
// floats (so no NaN payload can hide a change), any bits for integers.
Bytes random_elements(DataType type, std::size_t count, std::mt19937_64& rng) {
  Bytes bytes(count * size_of(type));
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  for (std::size_t i = 0; i < count; ++i) {
    unsigned char* at = bytes.data() + i * size_of(type);
    if (type == DataType::f32) {
      const auto value = static_cast<float>(uniform(rng));
      std::memcpy(at, &value, sizeof value);
    } else if (type == DataType::f64) {
      const double value = uniform(rng);
      std::memcpy(at, &value, sizeof value);
    } else {
      const std::uint64_t bits = rng();
      std::memcpy(at, &bits, size_of(type));
    }
  }
  return bytes;
}

// Device memory of `bytes` bytes, freed when it goes; poison() sets every byte to 0xFF.
class DeviceBytes {
 public:
  explicit DeviceBytes(std::size_t bytes) : bytes_(bytes) {
    MESHPLAN_CUDA_CHECK(cudaMalloc(&data_, std::max<std::size_t>(bytes, 1)));
  }
  explicit DeviceBytes(const Bytes& values) : DeviceBytes(values.size()) { upload(values); }
  ~DeviceBytes() { cudaFree(data_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;

  unsigned char* get() { return static_cast<unsigned char*>(data_); }
  void upload(const Bytes& values) {
    MESHPLAN_CUDA_CHECK(cudaMemcpy(data_, values.data(), values.size(), cudaMemcpyHostToDevice));
  }
  void poison() { MESHPLAN_CUDA_CHECK(cudaMemset(data_, 0xFF, bytes_)); }
  Bytes download() const {
    Bytes values(bytes_);
    MESHPLAN_CUDA_CHECK(cudaMemcpy(values.data(), data_, bytes_, cudaMemcpyDeviceToHost));
    return values;
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_;
};

class NcclWorldOfOne : public ::testing::Test {
 protected:
  std::unique_ptr<Communicator> bootstrap = make_self_communicator("world");
  std::unique_ptr<NcclCommunicator> world = NcclCommunicator::create(*bootstrap, 0);
};

TEST_F(NcclWorldOfOne, IsRankZeroOfOneOnItsDeviceWithTheBootstrapsNameAndTimeout) {
  EXPECT_EQ(world->rank(), 0);
  EXPECT_EQ(world->size(), 1);
  EXPECT_EQ(world->name(), "world");
  EXPECT_EQ(world->device(), 0);
  EXPECT_NE(world->stream(), nullptr);
  EXPECT_EQ(world->timeout(), bootstrap->timeout());
}

// A group of one: all_reduce and broadcast leave the data; all_gather,
// reduce_scatter and all_to_all copy it, or leave it when in place.
TEST_F(NcclWorldOfOne, EveryCollectiveOfOneRankLeavesOrCopiesRandomDeviceData) {
  std::mt19937_64 rng(seed());
  for (const DataType type : all_types) {
    for (const std::size_t count : {std::size_t{1}, std::size_t{4099}, (std::size_t{1} << 20) + 3}) {
      SCOPED_TRACE(to_string(type) + " x " + std::to_string(count));
      const auto n = static_cast<std::int64_t>(count);
      const Bytes original = random_elements(type, count, rng);
      DeviceBytes data(original);
      DeviceBytes out(original.size());

      for (const ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
        world->all_reduce(data.get(), n, type, op);
        EXPECT_EQ(data.download(), original) << "all_reduce " << to_string(op);
        auto request = world->iall_reduce(data.get(), n, type, op);
        request->wait();
        EXPECT_TRUE(request->test());
        EXPECT_EQ(data.download(), original) << "iall_reduce " << to_string(op);
      }
      world->broadcast(data.get(), n, type, 0);
      EXPECT_EQ(data.download(), original) << "broadcast";

      out.poison();
      world->all_gather(data.get(), out.get(), n, type);
      EXPECT_EQ(out.download(), original) << "all_gather";
      out.poison();
      world->iall_gather(data.get(), out.get(), n, type)->wait();
      EXPECT_EQ(out.download(), original) << "iall_gather";
      world->all_gather(data.get(), data.get(), n, type);  // in place: send = recv + rank x count
      EXPECT_EQ(data.download(), original) << "all_gather in place";

      for (const ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
        out.poison();
        world->reduce_scatter(data.get(), out.get(), n, type, op);
        EXPECT_EQ(out.download(), original) << "reduce_scatter " << to_string(op);
        out.poison();
        world->ireduce_scatter(data.get(), out.get(), n, type, op)->wait();
        EXPECT_EQ(out.download(), original) << "ireduce_scatter " << to_string(op);
        world->reduce_scatter(data.get(), data.get(), n, type, op);
        EXPECT_EQ(data.download(), original) << "reduce_scatter in place " << to_string(op);
      }

      out.poison();
      world->all_to_all(data.get(), out.get(), n, type);
      EXPECT_EQ(out.download(), original) << "all_to_all";
      world->all_to_all(data.get(), data.get(), n, type);
      EXPECT_EQ(data.download(), original) << "all_to_all in place";
      world->barrier();
    }
  }
}

TEST_F(NcclWorldOfOne, RefusesBadArgumentsAndPointToPointToItself) {
  DeviceBytes data(64);
  EXPECT_THROW(world->broadcast(data.get(), 4, DataType::f32, 1), std::logic_error);
  EXPECT_THROW(world->all_reduce(data.get(), -1, DataType::f32, ReduceOp::sum), std::logic_error);
  EXPECT_THROW(world->split(-1, 0, "tp"), std::logic_error);
  try {
    world->isend(data.get(), 4, DataType::f32, 0, 5);
    ADD_FAILURE() << "isend to itself was accepted";
  } catch (const std::logic_error& error) {
    EXPECT_NE(std::string(error.what()).find("send to itself"), std::string::npos) << error.what();
  }
  EXPECT_THROW(world->irecv(data.get(), 4, DataType::f32, 0, 5), std::logic_error);
  EXPECT_THROW(world->send(data.get(), 4, DataType::f32, 0, 5), std::logic_error);
  EXPECT_THROW(world->recv(data.get(), 4, DataType::f32, 0, 5), std::logic_error);
  // The refusals left the communicator usable.
  world->barrier();
}

// Data written on another stream behind a 100 ms host function reaches the
// collective because the communicator's stream waits for that stream.
TEST_F(NcclWorldOfOne, WaitsForAProducerStream) {
  std::mt19937_64 rng(seed() + 1);
  const std::size_t count = 1 << 16;
  const Bytes before = random_elements(DataType::f32, count, rng);
  const Bytes after = random_elements(DataType::f32, count, rng);
  DeviceBytes data(before);
  DeviceBytes out(before.size());
  out.poison();
  cudaStream_t producer = nullptr;
  MESHPLAN_CUDA_CHECK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
  MESHPLAN_CUDA_CHECK(cudaLaunchHostFunc(
      producer, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(100)); }, nullptr));
  MESHPLAN_CUDA_CHECK(cudaMemcpyAsync(data.get(), after.data(), after.size(), cudaMemcpyHostToDevice, producer));
  world->wait_for(producer);
  world->all_gather(data.get(), out.get(), static_cast<std::int64_t>(count), DataType::f32);
  EXPECT_EQ(out.download(), after);
  MESHPLAN_CUDA_CHECK(cudaStreamSynchronize(producer));
  MESHPLAN_CUDA_CHECK(cudaStreamDestroy(producer));
}

TEST_F(NcclWorldOfOne, SplitMakesAGroupOfOneThatSharesTheWatchdog) {
  auto tp = world->split(0, 0, "tp");
  EXPECT_EQ(tp->name(), "tp");
  EXPECT_EQ(tp->rank(), 0);
  EXPECT_EQ(tp->size(), 1);
  world->set_timeout(std::chrono::duration<double>(42.0));
  EXPECT_EQ(tp->timeout().count(), 42.0);
  auto nested = tp->split(3, 7, "tp-inner");
  EXPECT_EQ(nested->size(), 1);
  EXPECT_EQ(nested->timeout().count(), 42.0);

  std::mt19937_64 rng(seed() + 2);
  const Bytes original = random_elements(DataType::i64, 1000, rng);
  DeviceBytes data(original);
  DeviceBytes out(original.size());
  out.poison();
  tp->all_gather(data.get(), out.get(), 1000, DataType::i64);
  EXPECT_EQ(out.download(), original);
  nested->all_reduce(data.get(), 1000, DataType::i64, ReduceOp::sum);
  EXPECT_EQ(data.download(), original);
  tp->barrier();
  world->barrier();
}

// Holds `stream` for `hold_ms` with a host function, then sets *released.
void hold_stream(cudaStream_t stream, std::atomic<bool>* released) {
  MESHPLAN_CUDA_CHECK(cudaLaunchHostFunc(
      stream,
      [](void* flag) {
        std::this_thread::sleep_for(std::chrono::seconds(2));
        static_cast<std::atomic<bool>*>(flag)->store(true);
      },
      released));
}

// One rank cannot leave a collective unmatched, so the stuck operation is an
// all_reduce queued behind a stream that a host function holds for 2 s.
TEST_F(NcclWorldOfOne, WatchdogAbortsAStuckRequestAndNamesOperationGroupAndStep) {
  auto tp = world->split(0, 0, "tp");
  auto& group = dynamic_cast<NcclCommunicator&>(*tp);
  group.set_timeout(std::chrono::duration<double>(0.2));
  group.set_step(7);
  group.set_timeout_action(TimeoutAction::throw_error);
  DeviceBytes data(4096);
  cudaStream_t blocker = nullptr;
  MESHPLAN_CUDA_CHECK(cudaStreamCreateWithFlags(&blocker, cudaStreamNonBlocking));
  std::atomic<bool> released{false};
  hold_stream(blocker, &released);
  group.wait_for(blocker);
  auto request = group.iall_reduce(data.get(), 1024, DataType::f32, ReduceOp::sum);
  EXPECT_FALSE(request->test());
  try {
    request->wait();
    ADD_FAILURE() << "the stuck all_reduce completed";
  } catch (const CommError& error) {
    EXPECT_FALSE(released.load()) << "the watchdog waited for the stream instead of aborting after 0.2 s";
    const std::string message = error.what();
    EXPECT_NE(message.find("rank 0: all_reduce on axis \"tp\" (1024 x f32) at step 7 waited more than 0.2 s"),
              std::string::npos)
        << message;
  }
  // The aborted communicator refuses further work instead of hanging.
  EXPECT_THROW(group.barrier(), CommError);
  MESHPLAN_CUDA_CHECK(cudaStreamSynchronize(blocker));
  MESHPLAN_CUDA_CHECK(cudaStreamDestroy(blocker));
}

// By default the watchdog ends the process with the MPI communicator's status
// and wording. The death test re-runs this program ("threadsafe" style), so the
// child makes its own CUDA context.
TEST(NcclWatchdog, EndsTheJobByDefault) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto bootstrap = make_self_communicator("world");
        auto world = NcclCommunicator::create(*bootstrap, 0);
        auto tp = world->split(0, 0, "tp");
        tp->set_timeout(std::chrono::duration<double>(0.2));
        tp->set_step(7);
        DeviceBytes data(4096);
        cudaStream_t blocker = nullptr;
        MESHPLAN_CUDA_CHECK(cudaStreamCreateWithFlags(&blocker, cudaStreamNonBlocking));
        std::atomic<bool> released{false};
        hold_stream(blocker, &released);
        dynamic_cast<NcclCommunicator&>(*tp).wait_for(blocker);
        tp->all_reduce(data.get(), 1024, DataType::f32, ReduceOp::sum);
        std::exit(0);  // not reached: the watchdog ends the process first
      },
      ::testing::ExitedWithCode(nccl_watchdog_exit_status),
      "meshplan: rank 0: all_reduce on axis \"tp\" \\(1024 x f32\\) at step 7 waited more than 0.2 s.*stopping the job");
}

}  // namespace
}  // namespace meshplan::exec::comm

int main(int argc, char** argv) {
  int version = 0;
  if (meshplan::kernels::cuda::cuda_device_problem().empty()) ncclGetVersion(&version);
  return meshplan::kernels::cuda::test_support::run_gpu_tests(
      argc, argv, "nccl_communicator_tests",
      "NCCL " + std::to_string(version) + " (header " + std::to_string(NCCL_VERSION_CODE) + "), ");
}
