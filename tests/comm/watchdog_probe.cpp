// A job for the watchdog test (watchdog_test.sh): every rank runs all-reduces
// over a group named "dp" (all ranks) at steps 0..9 under a short timeout;
// at step 7 the last rank either stalls (sleeps, as a rank stuck in a
// deadlock or a slow filesystem does) or dies by SIGKILL (as an OOM kill
// does). The surviving ranks must stop the job; the script checks how fast
// and with which message.
//
// usage: watchdog_probe stall|kill TIMEOUT_S
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "executor/comm/world.hpp"

namespace comm = meshplan::exec::comm;

int main(int argc, char** argv) {
  if (argc != 3 || (std::string(argv[1]) != "stall" && std::string(argv[1]) != "kill")) {
    std::fprintf(stderr, "usage: watchdog_probe stall|kill TIMEOUT_S\n");
    return 2;
  }
  const std::string mode = argv[1];
  const double timeout_s = std::atof(argv[2]);
  auto world = comm::open_world(&argc, &argv);
  if (!world.ok()) {
    for (const auto& p : world.problems) std::fprintf(stderr, "%s\n", meshplan::describe(p).c_str());
    return 2;
  }
  world.value->set_timeout(std::chrono::duration<double>(timeout_s));
  auto dp = world.value->split(0, world.value->rank(), "dp");
  const bool victim = dp->rank() == dp->size() - 1;
  std::vector<float> gradients(1024, 1.0f);
  for (std::int64_t step = 0; step < 10; ++step) {
    dp->set_step(step);
    if (step == 7 && victim) {
      // The moment the others start waiting, for the script to time against (wall clock, ms).
      const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count();
      std::fprintf(stderr, "watchdog_probe: victim rank %d %s at %lld ms\n", world.value->rank(),
                   mode == "kill" ? "killed" : "stalls", static_cast<long long>(now_ms));
      std::fflush(stderr);
      if (mode == "kill") raise(SIGKILL);
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(60));
    }
    dp->all_reduce(std::span<float>(gradients));
  }
  std::printf("watchdog_probe: rank %d finished all steps (the victim never failed?)\n", world.value->rank());
  return 0;
}
