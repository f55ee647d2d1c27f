// `meshplan commbench --backend nccl`: the NCCL world the table is measured
// on, one GPU per rank. Only meshplan-commbench-nccl (commbench_nccl_main.cpp)
// builds and calls this; `meshplan` itself execs that program, so that it
// never loads the CUDA runtime or NCCL. This header names no CUDA type.
//
// Which GPU: the rank's local rank on its node (OMPI_COMM_WORLD_LOCAL_RANK,
// SLURM_LOCALID or MPI_LOCALRANKID; else its place among the ranks with its
// host name), modulo the GPUs it sees. NCCL refuses two ranks on one GPU, so
// two ranks of a node that would share one (same PCI bus id) are refused here,
// before NCCL is called, with what to do instead.
//
// defines: NcclBench, open_nccl_bench
#pragma once

#include <memory>
#include <string>

#include "executor/comm/collective_bench.hpp"
#include "executor/comm/communicator.hpp"
#include "model/problem.hpp"

namespace meshplan::cli {

struct NcclBench {
  std::unique_ptr<exec::comm::BenchBuffers> buffers;  // device memory on this rank's GPU, staged through the host
  std::unique_ptr<exec::comm::Communicator> group;    // the NCCL world (an NcclCommunicator)
  std::string description;  // "NCCL 2.21.5, one GPU per rank (rank 0: cuda:0, NVIDIA H100 80GB HBM3)"
  int reporting_rank = 0;   // the world rank whose problems are printed (the first that has any)
};

// Collective over `world` (host memory; every rank calls it, and all fail
// together): problems when a rank sees no GPU or would share its GPU with
// another rank; the NCCL world on this rank's GPU otherwise. `world` must
// outlive the result.
Loaded<NcclBench> open_nccl_bench(exec::comm::Communicator& world);

}  // namespace meshplan::cli
