// open_nccl_bench() (commbench_nccl.hpp): which GPU each rank takes, the
// checks that every rank can take one of its own, and the device buffers
// measure_collective stages its inputs and results through (CudaBackend
// copies on the backend's default stream, synchronised, so that each is
// complete before the NCCL call that reads it and after the one that wrote it).
#include "cli/commbench_nccl.hpp"

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "executor/backend/cuda_backend.hpp"
#include "executor/comm/nccl_communicator.hpp"
#include "kernels/cuda/cuda_check.hpp"

namespace meshplan::cli {
namespace {

namespace comm = exec::comm;

// What to do when NCCL cannot run here.
constexpr const char* kInstead =
    "time the MPI communicator instead (`meshplan commbench`, --backend mpi), or run this on nodes with a GPU per rank";

class DeviceBenchBuffers final : public comm::BenchBuffers {
 public:
  explicit DeviceBenchBuffers(int device) : backend_(device) {}

  void* allocate(std::size_t bytes) override {
    void* buffer = backend_.allocate(bytes, exec::MemoryCategory::communication);
    if (buffer == nullptr) {
      throw std::runtime_error("out of device memory on " + std::string(backend_.name()) + " (" +
                               std::to_string(bytes) + " bytes)");
    }
    return buffer;
  }
  void release(void* buffer, std::size_t bytes) noexcept override {
    backend_.deallocate(buffer, bytes, exec::MemoryCategory::communication);
  }
  void upload(void* buffer, const void* host, std::size_t bytes) override {
    backend_.copy_host_to_device(buffer, host, bytes, backend_.default_context());
    backend_.default_context().synchronize();
  }
  void download(void* host, const void* buffer, std::size_t bytes) override {
    backend_.copy_device_to_host(host, buffer, bytes, backend_.default_context());
    backend_.default_context().synchronize();
  }

 private:
  exec::CudaBackend backend_;
};

// A fixed-size text field, for all_gather over the host world.
using Field = std::array<char, 64>;

Field field_of(const std::string& text) {
  Field f{};
  std::copy_n(text.begin(), std::min(text.size(), f.size() - 1), f.begin());
  return f;
}

std::string text_of(const Field& f) { return std::string(f.data()); }

std::vector<Field> gather(comm::Communicator& world, const Field& mine) {
  std::vector<Field> all(static_cast<std::size_t>(world.size()));
  world.all_gather(mine.data(), all.data(), static_cast<std::int64_t>(mine.size()), comm::DataType::u8);
  return all;
}

// The launcher's local rank, or -1 when it sets none.
int launcher_local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') return std::atoi(value);
  }
  return -1;
}

std::string nccl_version() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "NCCL";
  const int major = version >= 10000 ? version / 10000 : version / 1000;
  const int minor = version >= 10000 ? version / 100 % 100 : version / 100 % 10;
  return "NCCL " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(version % 100);
}

}  // namespace

Loaded<NcclBench> open_nccl_bench(comm::Communicator& world) {
  Loaded<NcclBench> out;
  const int rank = world.rank();
  const auto me = static_cast<std::size_t>(rank);
  std::string problem;

  char host_name[HOST_NAME_MAX + 1] = {};
  ::gethostname(host_name, sizeof host_name - 1);
  const std::vector<Field> hosts = gather(world, field_of(host_name));
  std::vector<int> node_ranks;  // world ranks on this rank's host, in order
  for (std::size_t r = 0; r < hosts.size(); ++r) {
    if (hosts[r] == hosts[me]) node_ranks.push_back(static_cast<int>(r));
  }
  int local_rank = launcher_local_rank();
  if (local_rank < 0) {
    local_rank = static_cast<int>(std::find(node_ranks.begin(), node_ranks.end(), rank) - node_ranks.begin());
  }

  const int gpus = exec::CudaBackend::device_count();
  const int device = gpus > 0 ? local_rank % gpus : -1;
  char bus_id[64] = {};
  if (gpus == 0) {
    const std::string why = kernels::cuda::cuda_device_problem();
    problem = "rank " + std::to_string(rank) + " on " + host_name + " sees no CUDA device (" +
              (why.empty() ? std::string("none found") : why) + "): NCCL needs a GPU per rank; " + kInstead;
  } else if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    problem = "rank " + std::to_string(rank) + " on " + host_name + ": cannot identify CUDA device " +
              std::to_string(device) + "; " + kInstead;
  }
  // NCCL refuses two ranks on one GPU: find a rank of this node that took the same one.
  const std::vector<Field> buses = gather(world, field_of(bus_id));
  for (const int other : node_ranks) {
    const auto o = static_cast<std::size_t>(other);
    if (problem.empty() && other != rank && buses[me][0] != '\0' && buses[o] == buses[me]) {
      problem = "ranks " + std::to_string(std::min(rank, other)) + " and " + std::to_string(std::max(rank, other)) +
                " on " + host_name + " would share the GPU " + text_of(buses[me]) + " (" +
                std::to_string(node_ranks.size()) + " ranks on this node, " + std::to_string(gpus) +
                " GPU(s) visible to rank " + std::to_string(rank) +
                "), and NCCL refuses two ranks on one GPU: start at most one rank per GPU (mpirun -np " +
                std::to_string(std::max(gpus, 1)) + " on one node), or " + kInstead;
    }
  }
  // Every rank fails together, and the first rank with a problem says it.
  // (ReduceOp has no min: the maximum of size - rank is the lowest rank.)
  std::int32_t lowest = problem.empty() ? 0 : world.size() - rank;
  world.all_reduce(&lowest, 1, comm::DataType::i32, comm::ReduceOp::max);
  if (lowest > 0) {
    const int first_bad = world.size() - lowest;
    out.value.reporting_rank = first_bad;
    out.problems.push_back({Severity::error, "--backend nccl",
                            problem.empty() ? "rank " + std::to_string(first_bad) + " cannot run NCCL" : problem});
    return out;
  }

  try {
    out.value.buffers = std::make_unique<DeviceBenchBuffers>(device);
    out.value.group = comm::NcclCommunicator::create(world, device, "world");
  } catch (const std::exception& e) {
    out.problems.push_back({Severity::error, "--backend nccl",
                            "rank " + std::to_string(rank) + ": starting NCCL on cuda:" + std::to_string(device) +
                                " failed: " + e.what()});
    out.value.reporting_rank = rank;
    return out;
  }
  cudaDeviceProp properties{};
  const bool named = cudaGetDeviceProperties(&properties, device) == cudaSuccess;
  out.value.description = nccl_version() + ", one GPU per rank (rank " + std::to_string(rank) + ": cuda:" +
                          std::to_string(device) + (named ? std::string(", ") + properties.name : std::string()) +
                          ")";
  return out;
}

}  // namespace meshplan::cli
