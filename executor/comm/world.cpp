// open_world(): the one place that decides between MPI and a group of one.
//
// defines: built_with_mpi, started_by_mpi_launcher, open_world
#include "executor/comm/world.hpp"

#include <cstdlib>
#include <string>

#ifdef MESHPLAN_HAVE_MPI
#include "executor/comm/mpi_communicator.hpp"
#endif

namespace meshplan::exec::comm {
#ifndef MESHPLAN_HAVE_MPI
namespace {

long env_integer_or(const char* name, long fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return *end == '\0' ? value : fallback;
}

}  // namespace
#endif

bool built_with_mpi() {
#ifdef MESHPLAN_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool started_by_mpi_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return true;
  }
  return false;
}

Loaded<std::unique_ptr<Communicator>> open_world(int* argc, char*** argv) {
#ifdef MESHPLAN_HAVE_MPI
  return mpi_world(argc, argv);
#else
  (void)argc;
  (void)argv;
  Loaded<std::unique_ptr<Communicator>> result;
  const long launched = env_integer_or("OMPI_COMM_WORLD_SIZE", env_integer_or("PMI_SIZE", 1));
  const long requested = env_integer_or("WORLD_SIZE", 1);
  if (launched > 1 || requested > 1) {
    result.problems.push_back(
        {Severity::error, launched > 1 ? "mpirun" : "environment WORLD_SIZE",
         "this meshplan was built without MPI and runs one rank only, but " +
             std::to_string(launched > 1 ? launched : requested) +
             " ranks were asked for; rebuild with MPI (scripts/install-deps.sh installs libopenmpi-dev)"});
  }
  result.value = make_self_communicator("world");
  return result;
#endif
}

}  // namespace meshplan::exec::comm
