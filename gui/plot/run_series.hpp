// What `meshplan plot` draws, read from a training run's files: the metrics
// (JSON Lines, one record per step or evaluation; executor/metrics/metrics.hpp,
// docs/formats.md "Metrics") and the run report `train` writes beside them
// (<metrics stem>.report.json; cli/run_report.hpp, docs/formats.md "Run
// reports"): the predicted step time and memory per rank, and the measured
// median and peaks they are compared with.
//
// Why apart from the drawing: parsing is where a user's file can be wrong,
// and it is tested here without Qt (gui/plot/run_chart.hpp draws the result).
// A malformed metrics line is an error naming the file and line; a part that
// is simply absent (no report, no evaluations, no per-step memory in a
// multi-rank run) is a note, and that part is not drawn.
//
// defines: StepPoint, MetricsSeries, parse_metrics, ReportFigures,
//          parse_run_report, PlotInput, read_plot_input, ChartSize, parse_chart_size
#pragma once

#include <cstdint>
#include <istream>
#include <optional>
#include <string>
#include <vector>

#include "model/problem.hpp"

namespace meshplan::plot {

struct StepPoint {
  double step = 0;
  double value = 0;
};

// One series per metric, in step order. Null values (a diverged loss, an
// unknown memory) are left out of their series. A step recorded twice (a
// resumed run appends to the file) keeps its last record.
struct MetricsSeries {
  std::vector<StepPoint> train_loss;
  std::vector<StepPoint> step_s;               // wall-clock seconds of each step
  std::vector<StepPoint> memory_peak_bytes;    // memory_bytes: the rank's ledger peak so far
  std::vector<StepPoint> eval_loss;
  std::vector<StepPoint> eval_accuracy;        // fraction in [0, 1]
  std::int64_t null_losses = 0;                // train records whose loss was null
};

// Reads metrics JSON Lines from `in`; problems name `display_name` and the
// line ("m.jsonl:12"). Blank lines are skipped; records of another "kind"
// are counted in a warning.
Loaded<MetricsSeries> parse_metrics(std::istream& in, const std::string& display_name);

// One rank's figures from a run report (the first rank listed when `rank` is absent).
struct ReportFigures {
  std::string title;                            // "mlp-fashion, dp=1 (1 rank)"
  int rank = 0;
  std::optional<double> predicted_step_s;
  std::optional<double> measured_median_step_s;
  std::optional<double> predicted_memory_bytes;  // the memory model's total for the rank's stage
  std::optional<double> measured_ledger_peak_bytes;
  std::optional<double> measured_vm_hwm_bytes;  // the process's peak resident memory
  std::string prediction_error;                 // why the run was not priced; empty when it was
};

// Parses the report's JSON text; problems name `display_name` and the key.
Loaded<ReportFigures> parse_run_report(const std::string& text, const std::string& display_name, int rank = 0);

struct PlotInput {
  std::string metrics_name;                     // the metrics file's name, for titles
  MetricsSeries metrics;
  std::optional<ReportFigures> report;
  std::vector<std::string> notes;               // what is not drawn, and why
};

// Reads the metrics file and, when `report_path` names a file that exists,
// the report. An unreadable or malformed file is an error; a missing report,
// missing evaluations or per-step memory are notes. Nothing to draw at all
// (no train or eval records) is an error.
Loaded<PlotInput> read_plot_input(const std::string& metrics_path, const std::string& report_path);

// The image's size in pixels (`meshplan plot --size WxH`).
struct ChartSize {
  int width_px = 1200;
  int height_px = 900;
};

// "1200x900" -> {1200, 900}; nullopt unless both are whole numbers in [kMinChartSide_px, kMaxChartSide_px].
inline constexpr int kMinChartSide_px = 200;
inline constexpr int kMaxChartSide_px = 10000;
std::optional<ChartSize> parse_chart_size(const std::string& text);

}  // namespace meshplan::plot
