// How `meshplan calibrate` measures this machine, as library phases the CLI
// (cli/calibrate_command.cpp) runs in order and the studio could run too:
// machine, fp32 GEMM, bf16 GEMM, memory bandwidth, cold operands on every
// core, cold operands in one threaded process; and, under an MPI launcher,
// the collectives on every rank. Each phase fills its part of a Calibration
// (local_preset.hpp) and reports progress through `say`, one line at a time.
// Why each figure is measured as it is: docs/presets.md, "Calibrating local-cpu".
//
// Defines: Say, Phase, phases, time_collectives, wait_for_leader, widen_affinity_to_all_cpus.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "executor/calibrate/local_preset.hpp"
#include "executor/comm/communicator.hpp"

namespace meshplan::exec {

// One line of progress ("fp32 GEMM square 64: 41.2 GFLOP/s (1 thread)").
using Say = std::function<void(const std::string& line)>;

// One step of a calibration (rank 0 only when under a launcher).
struct Phase {
  const char* name;
  std::function<void(bool quick, Calibration&)> run;
};

// The phases in the order they run; `quick`: a few seconds' worth.
std::vector<Phase> phases(const Say& say);

// The collectives phase: every rank of `world` calls it. Groups of 2 ranks
// and of all of them (the first k world ranks), all_reduce, all_gather,
// reduce_scatter and send/recv from 1 KiB up; fills c.collectives and
// c.intra_link (fit_link over every sample). Rank 0 reports through `say`.
void time_collectives(comm::Communicator& world, bool quick, Calibration& c, const Say& say);

// A rank other than 0 after the collectives: waits for rank 0's word (tag 7)
// that the files are written, polling every 20 ms so that it leaves the
// cores to rank 0's measurements (an MPI receive would spin).
void wait_for_leader(comm::Communicator& world);

// mpirun binds each rank to a core, but rank 0 goes on to measure the whole
// machine: every thread of the process gets every online CPU back.
void widen_affinity_to_all_cpus();

}  // namespace meshplan::exec
