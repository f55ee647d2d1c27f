// What `meshplan train` prints per step. A Fashion-MNIST epoch is 469 steps,
// and a line for each buries everything else; the metrics file still gets
// every step (JSON Lines), so the screen keeps only what a person reads:
//
//   on a terminal   one live line, rewritten in place at most 10 times a
//                   second: "[120/469] loss 0.5123 | 23456 samples/s | ETA 4 s"
//                   plus the full metrics line every --log-every steps, at
//                   the run's first and last step, and at evaluations;
//   off a terminal  (a pipe, a file, any rank under mpirun, whose stdout is
//                   mpirun's pseudo-terminal whatever mpirun's own is) the
//                   full line every --log-every steps, the first and the last.
//
// The text and the choice of lines are pure functions of their arguments (and
// of the times given), so both are tested without a clock or a terminal.
//
// defines: default_log_every, log_line_due, format_live_progress, TrainLog
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace meshplan::cli {

// 20: tens of lines per Fashion-MNIST epoch (469 steps: 23 lines).
inline constexpr std::int64_t default_log_every = 20;

// Whether the full line of 0-based step `step` ("step 40 | loss ...") is
// printed: `step` a multiple of `log_every`, the run's first step
// (`first_step`, later than 0 on resume) or its last (`total_steps` - 1).
bool log_line_due(std::int64_t step, std::int64_t first_step, std::int64_t total_steps, std::int64_t log_every);

// "[120/469] loss 0.5123 | 23456 samples/s | ETA 4 s": steps done of the
// run's total (no ETA when `eta_s` is not finite).
std::string format_live_progress(std::int64_t steps_done, std::int64_t total_steps, double loss, double items_per_s,
                                 const std::string& unit, double eta_s);

class TrainLog {
 public:
  using Clock = std::chrono::steady_clock;

  // `unit`: "samples" or "tokens"; `first_step`: steps done before this run (resume).
  TrainLog(std::ostream& out, bool terminal, std::int64_t first_step, std::int64_t total_steps, std::int64_t log_every,
           std::string unit, Clock::time_point started = Clock::now());

  // After 0-based step `step`: the full line when due, the live line on a terminal.
  void step(std::int64_t step, double loss, double items_per_s, const std::string& full_line,
            Clock::time_point now = Clock::now());
  // A line that always stays (evaluations, notes): printed above the live line.
  void line(const std::string& text);
  // Clears the live line (before the summary, or when the run stops).
  void finish();

 private:
  std::ostream& out_;
  bool terminal_;
  std::int64_t first_step_, total_steps_, log_every_;
  std::string unit_;
  Clock::time_point started_, last_drawn_;
  bool drawn_ = false;
  std::string live_;
};

}  // namespace meshplan::cli
