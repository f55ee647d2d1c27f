// The rules of run_control.hpp, in the order the header states them.
#include "executor/train/run_control.hpp"

namespace meshplan::exec {

AfterStep decide_after_step(const RunControl& control, std::int64_t steps_done, bool interrupted) {
  AfterStep after;
  const bool finished = run_finished(control, steps_done);
  const bool stop_after_reached = control.stop_after > 0 && steps_done >= control.stop_after;
  after.stop = !finished && (interrupted || stop_after_reached);
  const bool periodic = control.checkpoint_every > 0 && steps_done % control.checkpoint_every == 0;
  after.save = after.stop || (control.checkpoints_on && (finished || periodic));
  return after;
}

}  // namespace meshplan::exec
