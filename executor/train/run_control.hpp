// What a training run does after each step: save a checkpoint, stop, or go
// on. The training session asks this one function on every rank (the tests'
// single-rank trainer, exec::train, too), so they cannot disagree, and each
// step is saved at most once (a final save used to collide with the periodic
// one when --steps was a multiple of --checkpoint-every).
//
// Rules, with d = steps done and S = the run's total steps:
//   finished  d >= S
//   stop      not finished, and an interrupt was agreed (Ctrl-C, SIGTERM;
//             on N ranks every rank passes the same agreed value) or
//             --stop-after reached (d >= stop_after > 0)
//   save      stop (into the default directory when none was given), or
//             checkpoints on and (finished or d a multiple of every > 0)
//
// defines: AfterStep, RunControl, decide_after_step, run_finished
#pragma once

#include <cstdint>

namespace meshplan::exec {

struct AfterStep {
  bool save = false;  // write a checkpoint of this step
  bool stop = false;  // end the run after this step (interrupted or --stop-after)
};

struct RunControl {
  std::int64_t total_steps = 0;       // S
  std::int64_t checkpoint_every = 0;  // <= 0: no periodic checkpoints
  bool checkpoints_on = false;        // a checkpoint directory was given
  std::int64_t stop_after = 0;        // <= 0: off
};

AfterStep decide_after_step(const RunControl& control, std::int64_t steps_done, bool interrupted);

// A run resumed at `steps_done` has nothing left to do.
inline bool run_finished(const RunControl& control, std::int64_t steps_done) {
  return steps_done >= control.total_steps;
}

}  // namespace meshplan::exec
