// Where a program gets its world group without naming MPI: the MPI world when
// the build has MPI (MESHPLAN_HAVE_MPI), a group of one otherwise. Commands
// (`meshplan train`, `commbench`) call open_world() and never #ifdef.
//
// defines: built_with_mpi, started_by_mpi_launcher, open_world
#pragma once

#include <memory>

#include "executor/comm/communicator.hpp"
#include "model/problem.hpp"

namespace meshplan::exec::comm {

// True when this build has the MPI communicator.
bool built_with_mpi();

// True when this process was started by an MPI launcher (mpirun, srun with
// PMI/PMIx): its environment carries the launcher's rank variables.
bool started_by_mpi_launcher();

// The job's world group, "world". With MPI: mpi_world() (MPI is initialised
// even without a launcher: a singleton job of one rank). Without MPI: a group
// of one, and a Problem when a launcher or WORLD_SIZE asks for more ranks.
// argc/argv may be null (MPI does not need them).
Loaded<std::unique_ptr<Communicator>> open_world(int* argc = nullptr, char*** argv = nullptr);

}  // namespace meshplan::exec::comm
