// Metrics JSON Lines and run report JSON -> the series `meshplan plot` draws (run_series.hpp).
#include "gui/plot/run_series.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>

#include "model/atomic_file.hpp"
#include "model/text.hpp"

namespace meshplan::plot {
namespace {

using nlohmann::json;

// A number, or nullopt for null or an absent key; a value of another type is a problem.
std::optional<double> number_or_null(const json& object, const char* key, const std::string& where, Problems& problems) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) {
    problems.push_back({Severity::error, where, std::string("key '") + key + "' is " + it->type_name() +
                                                    ", expected a number or null"});
    return std::nullopt;
  }
  return it->get<double>();
}

// A required number.
std::optional<double> required_number(const json& object, const char* key, const std::string& where, Problems& problems) {
  if (!object.contains(key) || object[key].is_null()) {
    problems.push_back({Severity::error, where, std::string("no '") + key + "' (a number)"});
    return std::nullopt;
  }
  return number_or_null(object, key, where, problems);
}

// A number or null that, when given, lies in [lo, hi] (`whole`: and has no fraction); a value
// outside is a problem naming the key, as a chart of it would be meaningless.
std::optional<double> bounded(const json& object, const char* key, double lo, double hi, const char* what,
                              const std::string& where, Problems& problems, bool whole = false) {
  const auto value = number_or_null(object, key, where, problems);
  if (!value) return value;
  if (!(*value >= lo && *value <= hi) || (whole && *value != std::floor(*value))) {
    char text[200];
    std::snprintf(text, sizeof text, "key '%s' is %.6g; it must be %s", key, *value, what);
    problems.push_back({Severity::error, where, text});
    return std::nullopt;
  }
  return value;
}

// A resumed run (`train --resume`) appends to its metrics file, so the steps
// between the last checkpoint and the stop come twice: keep each step's last
// record, in step order.
void keep_last_per_step(std::vector<StepPoint>& points) {
  std::stable_sort(points.begin(), points.end(), [](const StepPoint& a, const StepPoint& b) { return a.step < b.step; });
  std::vector<StepPoint> kept;
  for (const StepPoint& p : points) {
    if (!kept.empty() && kept.back().step == p.step) kept.back() = p;
    else kept.push_back(p);
  }
  points = std::move(kept);
}

std::string plural(std::int64_t count, const char* noun) {
  return std::to_string(count) + " " + noun + (count == 1 ? "" : "s");
}

}  // namespace

Loaded<MetricsSeries> parse_metrics(std::istream& in, const std::string& display_name) {
  Loaded<MetricsSeries> result;
  MetricsSeries& s = result.value;
  std::map<std::string, std::int64_t> other_kinds;
  std::string line;
  for (std::int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = display_name + ":" + std::to_string(number);
    json record;
    try {
      record = json::parse(line);
    } catch (const json::exception& e) {
      result.problems.push_back({Severity::error, where, "not a JSON object: " + json_error_text(e.what())});
      continue;
    }
    if (!record.is_object()) {
      result.problems.push_back({Severity::error, where, std::string("not a JSON object but ") + record.type_name()});
      continue;
    }
    if (!record.contains("kind") || !record["kind"].is_string()) {
      result.problems.push_back({Severity::error, where, "no \"kind\" (\"train\" or \"eval\"): not a metrics record "
                                                         "of `meshplan train --metrics`"});
      continue;
    }
    const std::string kind = record["kind"].get<std::string>();
    if (kind != "train" && kind != "eval") {
      ++other_kinds[kind];
      continue;
    }
    const std::size_t before = result.problems.size();
    auto step = required_number(record, "step", where, result.problems);
    // Steps count from 0; a loss is a cross-entropy or squared error, at most fp32's largest value.
    if (step) step = bounded(record, "step", 0, 1e15, "a whole number from 0 to 1e15", where, result.problems, true);
    constexpr double kFloatMax = 3.4028234663852886e38;
    if (kind == "train") {
      const auto loss = bounded(record, "loss", 0, kFloatMax, "from 0 to fp32's largest, 3.4e38", where, result.problems);
      const auto step_s = bounded(record, "step_s", 0, 1e9, "a time in seconds from 0 to 1e9", where, result.problems);
      const auto memory = bounded(record, "memory_bytes", 0, 1e18, "a byte count from 0 to 1e18", where, result.problems);
      if (result.problems.size() != before) continue;
      if (loss) s.train_loss.push_back({*step, *loss});
      else ++s.null_losses;
      if (step_s) s.step_s.push_back({*step, *step_s});
      if (memory) s.memory_peak_bytes.push_back({*step, *memory});
    } else {
      const auto loss = bounded(record, "eval_loss", 0, kFloatMax, "from 0 to fp32's largest, 3.4e38", where, result.problems);
      const auto accuracy = bounded(record, "eval_accuracy", 0, 1, "a fraction from 0 to 1", where, result.problems);
      if (result.problems.size() != before) continue;
      if (loss) s.eval_loss.push_back({*step, *loss});
      if (accuracy) s.eval_accuracy.push_back({*step, *accuracy});
    }
  }
  if (in.bad()) result.problems.push_back({Severity::error, display_name, "read failed"});
  for (auto* series : {&s.train_loss, &s.step_s, &s.memory_peak_bytes, &s.eval_loss, &s.eval_accuracy}) keep_last_per_step(*series);
  for (const auto& [kind, count] : other_kinds) {
    result.problems.push_back({Severity::warning, display_name,
                               plural(count, "record") + " of kind \"" + kind + "\" skipped (not \"train\" or \"eval\")"});
  }
  return result;
}

Loaded<ReportFigures> parse_run_report(const std::string& text, const std::string& display_name, int rank) {
  Loaded<ReportFigures> result;
  ReportFigures& r = result.value;
  json report;
  try {
    report = json::parse(text);
  } catch (const json::exception& e) {
    result.problems.push_back({Severity::error, display_name, "not JSON: " + json_error_text(e.what())});
    return result;
  }
  if (!report.is_object() || !report.contains("ranks") || !report["ranks"].is_array()) {
    result.problems.push_back({Severity::error, display_name, "not a run report of `meshplan train`: no \"ranks\" array"});
    return result;
  }
  if (report.contains("plan") && report["plan"].is_object()) {
    const json& plan = report["plan"];
    const auto text_of = [&](const char* key) { return plan.contains(key) && plan[key].is_string() ? plan[key].get<std::string>() : ""; };
    r.title = text_of("model");
    if (!text_of("mesh").empty()) r.title += (r.title.empty() ? "" : ", ") + text_of("mesh");
    if (plan.contains("world_size") && plan["world_size"].is_number_integer()) {
      const auto ranks = plan["world_size"].get<std::int64_t>();
      r.title += " (" + plural(ranks, "rank") + ")";
    }
  }
  if (report.contains("prediction") && report["prediction"].is_object() && report["prediction"].contains("error")) {
    const json& error = report["prediction"]["error"];
    r.prediction_error = error.is_string() ? error.get<std::string>() : error.dump();
  }
  const json* row = nullptr;
  for (const json& candidate : report["ranks"]) {
    if (candidate.is_object() && candidate.contains("rank") && candidate["rank"] == rank) row = &candidate;
  }
  if (!row) {
    result.problems.push_back({Severity::error, display_name, "key 'ranks': no entry for rank " + std::to_string(rank)});
    return result;
  }
  r.rank = rank;
  const std::string where = display_name + " ranks[rank " + std::to_string(rank) + "]";
  const char* seconds = "a time in seconds from 0 to 1e9";
  const char* bytes = "a byte count from 0 to 1e18";
  r.predicted_step_s = bounded(*row, "predicted_step_s", 0, 1e9, seconds, where, result.problems);
  r.measured_median_step_s = bounded(*row, "measured_median_step_s", 0, 1e9, seconds, where, result.problems);
  r.predicted_memory_bytes = bounded(*row, "predicted_memory_bytes", 0, 1e18, bytes, where, result.problems);
  r.measured_ledger_peak_bytes = bounded(*row, "measured_ledger_peak_bytes", 0, 1e18, bytes, where, result.problems);
  r.measured_vm_hwm_bytes = bounded(*row, "measured_vm_hwm_bytes", 0, 1e18, bytes, where, result.problems);
  if (r.measured_vm_hwm_bytes && *r.measured_vm_hwm_bytes <= 0) r.measured_vm_hwm_bytes.reset();  // 0: unknown
  return result;
}

Loaded<PlotInput> read_plot_input(const std::string& metrics_path, const std::string& report_path) {
  Loaded<PlotInput> result;
  PlotInput& input = result.value;
  input.metrics_name = std::filesystem::path(metrics_path).filename().string();
  if (const auto why = why_unreadable(metrics_path)) {
    result.problems.push_back({Severity::error, metrics_path, *why});
    return result;
  }
  std::ifstream metrics_file(metrics_path);
  if (!metrics_file) {
    result.problems.push_back({Severity::error, metrics_path, "cannot open the metrics file"});
    return result;
  }
  auto metrics = parse_metrics(metrics_file, metrics_path);
  result.problems = std::move(metrics.problems);
  input.metrics = std::move(metrics.value);
  if (!result.ok()) return result;
  const MetricsSeries& m = input.metrics;
  if (m.train_loss.empty() && m.step_s.empty() && m.eval_loss.empty() && m.eval_accuracy.empty()) {
    result.problems.push_back({Severity::error, metrics_path, "no \"train\" or \"eval\" records with values: nothing to plot"});
    return result;
  }

  std::error_code error;
  if (report_path.empty() || !std::filesystem::exists(report_path, error)) {
    input.notes.push_back("no run report" + (report_path.empty() ? std::string() : " at " + report_path) +
                          ": the predicted step time and memory are not drawn");
  } else if (const auto why = why_unreadable(report_path)) {
    result.problems.push_back({Severity::error, report_path, *why});
    return result;
  } else {
    std::ifstream report_file(report_path);
    std::stringstream text;
    text << report_file.rdbuf();
    if (!report_file) {
      result.problems.push_back({Severity::error, report_path, "cannot read the run report"});
      return result;
    }
    auto report = parse_run_report(text.str(), report_path);
    result.problems.insert(result.problems.end(), report.problems.begin(), report.problems.end());
    if (!result.ok()) return result;
    input.report = std::move(report.value);
    if (!input.report->prediction_error.empty()) {
      input.notes.push_back(report_path + ": the run was not priced (" + input.report->prediction_error +
                            "): no predicted step time or memory to draw");
    }
  }

  if (m.null_losses > 0) {
    input.notes.push_back(plural(m.null_losses, "step") + " with a null (non-finite) loss left out of the loss curve");
  }
  if (m.eval_loss.empty() && m.eval_accuracy.empty()) {
    input.notes.push_back("no evaluations in " + metrics_path + ": the eval loss and accuracy are not drawn");
  }
  if (m.step_s.empty()) input.notes.push_back("no step times in " + metrics_path + ": the step time panel is not drawn");
  const bool report_memory = input.report && (input.report->predicted_memory_bytes || input.report->measured_vm_hwm_bytes);
  if (m.memory_peak_bytes.empty()) {
    input.notes.push_back(std::string("no per-step memory in ") + metrics_path +
                          " (multi-rank runs do not track their buffers): " +
                          (report_memory ? "the memory panel shows the run report's figures only"
                                         : "the memory panel is not drawn"));
  }
  return result;
}

std::optional<ChartSize> parse_chart_size(const std::string& text) {
  const auto x = text.find('x');
  if (x == std::string::npos) return std::nullopt;
  const auto side = [](std::string_view digits) -> std::optional<int> {
    int value = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
    if (value < kMinChartSide_px || value > kMaxChartSide_px) return std::nullopt;
    return value;
  };
  const std::string_view view(text);
  const auto width = side(view.substr(0, x)), height = side(view.substr(x + 1));
  if (!width || !height) return std::nullopt;
  return ChartSize{*width, *height};
}

}  // namespace meshplan::plot
