// The sweep's progress line (progress.hpp): the text is a pure function of
// (share done, candidates, elapsed); the pacing depends only on the times
// it is given, so both are tested without sleeping.
#include "cli/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace meshplan::cli {
namespace {

// Redraw at most 10 times a second on a terminal; a plain line every 2 s in a log.
constexpr double kTerminalInterval_s = 0.1;
constexpr double kLogInterval_s = 2.0;
constexpr int kBarWidth = 20;

std::string duration_text(double seconds) {
  char text[32];
  if (seconds < 60) {
    std::snprintf(text, sizeof text, "%.0f s", seconds);
  } else if (seconds < 3600) {
    std::snprintf(text, sizeof text, "%.0f min %02.0f s", std::floor(seconds / 60), std::fmod(seconds, 60));
  } else {
    std::snprintf(text, sizeof text, "%.0f h %02.0f min", std::floor(seconds / 3600), std::fmod(seconds, 3600) / 60);
  }
  return text;
}

}  // namespace

std::string format_progress(double fraction_done, std::int64_t candidates, double elapsed_s) {
  const double fraction = std::clamp(std::isfinite(fraction_done) ? fraction_done : 0.0, 0.0, 1.0);
  const int filled = static_cast<int>(fraction * kBarWidth);
  std::string bar = "[" + std::string(static_cast<std::size_t>(filled), '#') +
                    std::string(static_cast<std::size_t>(kBarWidth - filled), '.') + "]";
  char text[160];
  const double rate = elapsed_s > 0 ? static_cast<double>(candidates) / elapsed_s : 0;
  std::snprintf(text, sizeof text, " %3.0f%% of meshes, %lld candidates, %.0f/s", 100 * fraction,
                static_cast<long long>(candidates), rate);
  std::string line = bar + text;
  if (fraction > 0 && fraction < 1) {
    line += ", ETA " + duration_text(elapsed_s * (1 - fraction) / fraction);
  }
  return line;
}

bool stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

Progress::Progress(std::ostream& out, bool terminal, Clock::time_point started)
    : out_(out), terminal_(terminal), started_(started), last_drawn_(started) {}

double Progress::elapsed_s() const { return std::chrono::duration<double>(Clock::now() - started_).count(); }

void Progress::update(double fraction_done, std::int64_t candidates, Clock::time_point now) {
  const double since_last_s = std::chrono::duration<double>(now - last_drawn_).count();
  if (since_last_s < (terminal_ ? kTerminalInterval_s : kLogInterval_s)) return;
  last_drawn_ = now;
  const std::string line =
      format_progress(fraction_done, candidates, std::chrono::duration<double>(now - started_).count());
  if (terminal_) {
    out_ << "\r" << line << "\x1b[K" << std::flush;  // ESC[K: erase what a longer line left
  } else {
    out_ << line << "\n" << std::flush;
  }
  drawn_ = true;
}

void Progress::finish() {
  if (terminal_ && drawn_) out_ << "\r\x1b[K" << std::flush;
  drawn_ = false;
}

}  // namespace meshplan::cli
