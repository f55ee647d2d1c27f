#include "cli/openmp_env.hpp"

#include <unistd.h>

#include <cstdlib>

namespace meshplan::cli {

void reexec_with_openmp_spin_limit(char** argv) {
  if (std::getenv("GOMP_SPINCOUNT") != nullptr || std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (::setenv("GOMP_SPINCOUNT", kDefaultGompSpinCount, 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  // exec failed (no /proc?): carry on with libgomp's defaults; the variable set
  // above only reaches child processes, which is harmless.
}

}  // namespace meshplan::cli
