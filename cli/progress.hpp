// A progress line for long sweeps, on stderr: share of meshes done,
// candidates per second and the time left.
//
// Why so little: a sweep's output is its file; the progress line must not
// slow it down (it redraws at most 10 times a second however often it is
// told) nor litter a log (when stderr is not a terminal it prints plain
// lines, one every few seconds, instead of redrawing with carriage returns).
// The text is a pure function so it can be tested without a clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace meshplan::cli {

// "[#########...........]  45% of meshes, 1234567 candidates, 250000/s, ETA 12 s"
std::string format_progress(double fraction_done, std::int64_t candidates, double elapsed_s);

bool stderr_is_terminal();

class Progress {
 public:
  using Clock = std::chrono::steady_clock;

  // `terminal`: redraw one line in place; otherwise print plain lines.
  Progress(std::ostream& out, bool terminal, Clock::time_point started = Clock::now());

  // Shows the state if enough time has passed since it was last shown
  // (0.1 s on a terminal, 2 s for plain lines). `now` is for tests.
  void update(double fraction_done, std::int64_t candidates) { update(fraction_done, candidates, Clock::now()); }
  void update(double fraction_done, std::int64_t candidates, Clock::time_point now);
  // Clears the line on a terminal; nothing otherwise. Call before the summary.
  void finish();

  double elapsed_s() const;

 private:
  std::ostream& out_;
  bool terminal_;
  bool drawn_ = false;
  Clock::time_point started_;
  Clock::time_point last_drawn_;
};

}  // namespace meshplan::cli
