// `meshplan plot METRICS -o run.png`: a training run's loss, step time and
// memory, measured against predicted, as one image (docs/formats.md,
// "Plots"). The metrics are `train --metrics`'s JSON Lines; the predictions
// come from the run report `train` writes beside them (<stem>.report.json,
// or --report). Parsing is gui/plot/run_series.hpp (no Qt), drawing
// gui/plot/run_chart.hpp (Qt Charts, offscreen).
//
// Why the CLI still builds without Qt: everything else in `meshplan` needs
// no display library, and a cluster login node often has none. There `plot`
// is still listed, and says what it lacks (exit 2).
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/run_report.hpp"
#include "gui/plot/run_series.hpp"
#ifdef MESHPLAN_HAVE_PLOT
#include "gui/plot/run_chart.hpp"
#endif

namespace meshplan::cli {
namespace {

struct PlotFlags {
  std::string metrics_path;
  std::string out_path;
  std::string report_path;  // default: default_report_path(metrics_path)
  std::string size = "1200x900";
};

int run_plot(const PlotFlags& f) {
  Problems problems;
  const bool svg = f.out_path.ends_with(".svg");
  if (!svg && !f.out_path.ends_with(".png")) {
    problems.push_back({Severity::error, "--out", "'" + f.out_path + "': the format comes from the extension: .png or .svg"});
  }
  const auto size = plot::parse_chart_size(f.size);
  if (!size) {
    problems.push_back({Severity::error, "--size", "'" + f.size + "': expected WIDTHxHEIGHT in pixels, each " +
                                                       std::to_string(plot::kMinChartSide_px) + " to " +
                                                       std::to_string(plot::kMaxChartSide_px) + ", e.g. 1200x900"});
  }
#ifndef MESHPLAN_HAVE_PLOT
  problems.push_back({Severity::error, "", "this meshplan was built without Qt 6 (Widgets, Charts, Svg), which plot draws "
                                           "with: install them (scripts/install-deps.sh) and rebuild"});
#endif
  if (has_errors(problems)) {
    for (const auto& p : problems) std::cerr << "meshplan plot: " << describe(p) << "\n";
    return exit_bad_input;
  }
#ifdef MESHPLAN_HAVE_PLOT
  const std::string report_path = f.report_path.empty() ? default_report_path(f.metrics_path) : f.report_path;
  std::error_code error;  // a name the file system refuses (too long) is "no such file" too, not an exception
  if (!f.report_path.empty() && !std::filesystem::exists(f.report_path, error)) {
    std::cerr << "meshplan plot: --report " << f.report_path << ": no such file"
              << (error ? " (" + error.message() + ")" : std::string()) << "\n";
    return exit_bad_input;
  }
  const auto input = plot::read_plot_input(f.metrics_path, report_path);
  for (const auto& p : input.problems) std::cerr << "meshplan plot: " << describe(p) << "\n";
  if (!input.ok()) return exit_bad_input;
  for (const auto& note : input.value.notes) std::cerr << "meshplan plot: note: " << note << "\n";
  const Problems drawn = plot::render_run_chart(input.value, f.out_path, *size);
  for (const auto& p : drawn) std::cerr << "meshplan plot: " << describe(p) << "\n";
  if (has_errors(drawn)) return exit_bad_input;
  std::cerr << "meshplan plot: wrote " << f.out_path << " (" << size->width_px << "x" << size->height_px << ")\n";
  return exit_ok;
#else
  return exit_bad_input;
#endif
}

}  // namespace

Command add_plot_command(CLI::App& app) {
  auto* command = app.add_subcommand(
      "plot", "Draw a training run's loss, step time and memory, measured against predicted, as PNG or SVG");
  command->footer(
      "Example: meshplan train --plan p.json --data fashion-mnist --epochs 2 --metrics m.jsonl\n"
      "         meshplan plot m.jsonl -o m.png      # predictions from m.report.json, written by train\n"
      "Draws offscreen (no display needed). Parts the files lack are left out with a note.\n"
      "Exit status: 0 drawn, 2 bad input (flags, a malformed metrics line, a build without Qt 6).");
  auto flags = std::make_shared<PlotFlags>();
  command->add_option("metrics", flags->metrics_path, "Metrics JSON Lines written by `meshplan train --metrics`")->required();
  command->add_option("-o,--out", flags->out_path, "Image to write: .png, or .svg")->required();
  command->add_option("--report", flags->report_path,
                      "Run report JSON with the predictions (default: the metrics file's stem + .report.json beside it)");
  command->add_option("--size", flags->size, "Image size in pixels, WIDTHxHEIGHT")->capture_default_str();
  return [flags]() { return run_plot(*flags); };
}

}  // namespace meshplan::cli
