// JSON Lines records and their one-line text form (metrics.hpp).
#include "executor/metrics/metrics.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <type_traits>
#include <utility>

namespace meshplan::exec {
namespace {

using nlohmann::json;

// JSON has no NaN or infinity: write null so every reader can parse the line.
json number_or_null(double value) { return std::isfinite(value) ? json(value) : json(nullptr); }

template <typename T>
json optional_or_null(const std::optional<T>& value) {
  if (!value) return nullptr;
  if constexpr (std::is_floating_point_v<T>) return number_or_null(*value);
  return *value;
}

template <typename... Args>
std::string format(const char* pattern, Args... args) {
  char text[128];
  std::snprintf(text, sizeof text, pattern, args...);
  return text;
}

// 950 -> "950", 12345 -> "12.3k", 4.2e6 -> "4.20M".
std::string with_si_prefix(double value) {
  if (value >= 1e9) return format("%.2fG", value / 1e9);
  if (value >= 1e6) return format("%.2fM", value / 1e6);
  if (value >= 1e4) return format("%.1fk", value / 1e3);
  return format("%.0f", value);
}

std::string bytes_text(std::int64_t bytes) {
  const double value = static_cast<double>(bytes);
  if (value >= 1024.0 * 1024 * 1024) return format("%.2f GiB", value / (1024.0 * 1024 * 1024));
  if (value >= 1024.0 * 1024) return format("%.1f MiB", value / (1024.0 * 1024));
  return format("%.1f KiB", value / 1024.0);
}

json amount_json(const MemoryAmount& amount) {
  return {{"now_bytes", amount.now_bytes}, {"peak_bytes", amount.peak_bytes}};
}

json memory_json(const MemorySnapshot& snapshot) {
  json out = json::object();
  for (const MemoryCategory category : memory_categories)
    out[std::string(to_string(category))] = amount_json(snapshot[category]);
  out["total"] = amount_json(snapshot.total);
  return out;
}

}  // namespace

json to_json(const StepMetrics& metrics) {
  const char* throughput_key =
      metrics.throughput_unit == ThroughputUnit::tokens ? "tokens_per_s" : "samples_per_s";
  return {{"kind", "train"},
          {"step", metrics.step},
          {"loss", number_or_null(metrics.loss)},
          {"lr", number_or_null(metrics.learning_rate)},
          {"grad_norm", number_or_null(metrics.grad_norm)},
          {"step_s", number_or_null(metrics.step_s)},
          {throughput_key, number_or_null(metrics.throughput_per_s)},
          {"mfu", optional_or_null(metrics.mfu)},
          {"memory_bytes", optional_or_null(metrics.memory_bytes)},
          {"memory", metrics.memory ? memory_json(*metrics.memory) : json(nullptr)}};
}

void set_memory(StepMetrics& metrics, const MemorySnapshot& snapshot) {
  metrics.memory_bytes = snapshot.total.peak_bytes;
  metrics.memory = snapshot;
}

json to_json(const EvalMetrics& metrics) {
  return {{"kind", "eval"},
          {"step", metrics.step},
          {"epoch", metrics.epoch},
          {"eval_loss", number_or_null(metrics.eval_loss)},
          {"eval_accuracy", optional_or_null(metrics.eval_accuracy)},
          {"eval_samples", metrics.eval_samples}};
}

std::string format_line(const StepMetrics& metrics) {
  std::string line = "step " + std::to_string(metrics.step);
  line += format(" | loss %.4f", metrics.loss);
  line += format(" | lr %.2e", metrics.learning_rate);
  line += format(" | grad %.3f", metrics.grad_norm);
  line += format(" | %.3f s", metrics.step_s);
  line += " | " + with_si_prefix(metrics.throughput_per_s) +
          (metrics.throughput_unit == ThroughputUnit::tokens ? " tokens/s" : " samples/s");
  if (metrics.mfu) line += format(" | mfu %.1f%%", *metrics.mfu * 100.0);
  if (metrics.memory_bytes) line += " | mem " + bytes_text(*metrics.memory_bytes);
  return line;
}

std::string format_line(const EvalMetrics& metrics) {
  std::string line = "eval step " + std::to_string(metrics.step) + " epoch " + std::to_string(metrics.epoch);
  line += format(" | loss %.4f", metrics.eval_loss);
  if (metrics.eval_accuracy) line += format(" | accuracy %.2f%%", *metrics.eval_accuracy * 100.0);
  return line;
}

std::string format_peak_memory(const MemorySnapshot& snapshot) {
  std::string line = "peak memory:";
  for (const MemoryCategory category : memory_categories) {
    if (snapshot[category].peak_bytes == 0) continue;
    line += " " + std::string(to_string(category)) + " " + bytes_text(snapshot[category].peak_bytes) + " |";
  }
  return line + " total " + bytes_text(snapshot.total.peak_bytes);
}

MetricsWriter::MetricsWriter(std::ostream& out, std::string display_name)
    : out_(&out), display_name_(std::move(display_name)) {}

MetricsWriter::MetricsWriter(std::unique_ptr<std::ofstream> file, std::string display_name)
    : file_(std::move(file)), out_(file_.get()), display_name_(std::move(display_name)) {}

Loaded<std::unique_ptr<MetricsWriter>> MetricsWriter::open(const std::string& path, bool append) {
  Loaded<std::unique_ptr<MetricsWriter>> result;
  std::error_code error;
  if (append && std::filesystem::is_regular_file(path, error)) {
    // A run stopped mid-line (killed, disk full) leaves a partial last line; appending after it made
    // one line of two, and plot refused the whole file. It is cut back to the last whole line.
    const auto size = std::filesystem::file_size(path, error);
    std::ifstream in(path, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!error && !text.empty() && text.back() != '\n') {
      const std::size_t keep = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      std::filesystem::resize_file(path, keep, error);
      result.problems.push_back({Severity::warning, path,
                                 "its last line was cut short (" + std::to_string(size - keep) +
                                     " bytes after the last whole line); dropped before appending"});
    }
  }
  auto file = std::make_unique<std::ofstream>(path, append ? std::ios::app : std::ios::trunc);
  if (!*file) {
    result.problems.push_back({Severity::error, path, "cannot open the metrics file for writing"});
    return result;
  }
  result.value.reset(new MetricsWriter(std::move(file), path));
  return result;
}

Problems MetricsWriter::write(const StepMetrics& metrics) { return write_record(to_json(metrics)); }

Problems MetricsWriter::write(const EvalMetrics& metrics) { return write_record(to_json(metrics)); }

Problems MetricsWriter::write_record(const json& record) {
  *out_ << record.dump() << '\n';
  out_->flush();
  if (!*out_) return {{Severity::error, display_name_, "write failed (disk full?)"}};
  return {};
}

}  // namespace meshplan::exec
