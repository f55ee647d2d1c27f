// The lines of train_progress.hpp. ETA = elapsed / steps run x steps left:
// the mean step of this run so far, which the first (slower, warming) steps
// weigh less the longer the run goes.
#include "cli/train_progress.hpp"

#include <cmath>
#include <cstdio>
#include <utility>

namespace meshplan::cli {
namespace {

constexpr double kRedraw_s = 0.1;  // at most 10 redraws a second

std::string duration_text(double seconds) {
  char text[48];
  if (seconds < 60) {
    std::snprintf(text, sizeof text, "%.0f s", seconds);
  } else if (seconds < 3600) {
    std::snprintf(text, sizeof text, "%.0f min %02.0f s", std::floor(seconds / 60), std::floor(std::fmod(seconds, 60)));
  } else {
    std::snprintf(text, sizeof text, "%.0f h %02.0f min", std::floor(seconds / 3600),
                  std::floor(std::fmod(seconds, 3600) / 60));
  }
  return text;
}

}  // namespace

bool log_line_due(std::int64_t step, std::int64_t first_step, std::int64_t total_steps, std::int64_t log_every) {
  if (step == first_step || step + 1 >= total_steps) return true;
  return log_every > 0 && step % log_every == 0;
}

std::string format_live_progress(std::int64_t steps_done, std::int64_t total_steps, double loss, double items_per_s,
                                 const std::string& unit, double eta_s) {
  char text[200];
  std::snprintf(text, sizeof text, "[%lld/%lld] loss %.4f | %.0f %s/s", static_cast<long long>(steps_done),
                static_cast<long long>(total_steps), loss, items_per_s, unit.c_str());
  std::string line = text;
  if (std::isfinite(eta_s) && eta_s >= 0) line += " | ETA " + duration_text(eta_s);
  return line;
}

TrainLog::TrainLog(std::ostream& out, bool terminal, std::int64_t first_step, std::int64_t total_steps,
                   std::int64_t log_every, std::string unit, Clock::time_point started)
    : out_(out),
      terminal_(terminal),
      first_step_(first_step),
      total_steps_(total_steps),
      log_every_(log_every),
      unit_(std::move(unit)),
      started_(started),
      last_drawn_(started) {}

void TrainLog::step(std::int64_t step, double loss, double items_per_s, const std::string& full_line,
                    Clock::time_point now) {
  const std::int64_t steps_done = step + 1;
  if (terminal_) {
    const double elapsed_s = std::chrono::duration<double>(now - started_).count();
    const auto run = static_cast<double>(steps_done - first_step_);
    const double eta_s = run > 0 ? elapsed_s / run * static_cast<double>(total_steps_ - steps_done) : NAN;
    live_ = format_live_progress(steps_done, total_steps_, loss, items_per_s, unit_, eta_s);
  }
  if (log_line_due(step, first_step_, total_steps_, log_every_)) {
    line(full_line);  // redraws the live line under it
    last_drawn_ = now;
    return;
  }
  if (!terminal_ || (drawn_ && std::chrono::duration<double>(now - last_drawn_).count() < kRedraw_s)) return;
  last_drawn_ = now;
  out_ << "\r" << live_ << "\x1b[K" << std::flush;  // ESC[K: erase what a longer line left
  drawn_ = true;
}

void TrainLog::line(const std::string& text) {
  if (terminal_ && drawn_) out_ << "\r\x1b[K";
  out_ << text << "\n";
  if (terminal_ && !live_.empty()) {
    out_ << live_ << "\x1b[K";
    drawn_ = true;
  }
  out_ << std::flush;  // live when stdout is a pipe or a file
}

void TrainLog::finish() {
  if (terminal_ && drawn_) out_ << "\r\x1b[K" << std::flush;
  drawn_ = false;
  live_.clear();
}

}  // namespace meshplan::cli
