// `meshplan plot`'s drawing (gui/plot/run_chart.hpp), offscreen: the PNG has
// the requested size and holds the series' colours (so it is not blank), the
// SVG is an SVG; then the command on a real `meshplan train` run's metrics
// and report, with no display and QT_QPA_PLATFORM unset, and its errors.
#include <gtest/gtest.h>

#include <QApplication>
#include <QColor>
#include <QImage>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "cli_runner.hpp"
#include "gui/plot/run_chart.hpp"

namespace {

using namespace meshplan;
using namespace meshplan::plot;
using namespace meshplan::testing_support;

// Pixels within `tolerance` of `color` in each channel (antialiased edges differ; line centres and legend markers do not).
std::int64_t pixels_near(const QImage& image, const QColor& color, int tolerance = 12) {
  std::int64_t count = 0;
  for (int y = 0; y < image.height(); ++y) {
    for (int x = 0; x < image.width(); ++x) {
      const QColor c = image.pixelColor(x, y);
      if (std::abs(c.red() - color.red()) <= tolerance && std::abs(c.green() - color.green()) <= tolerance &&
          std::abs(c.blue() - color.blue()) <= tolerance) {
        ++count;
      }
    }
  }
  return count;
}

// A run of 60 steps: falling loss, an evaluation every 20 steps, step times
// around 10 ms, memory growing to 3 MiB; a report predicting 8 ms and 2.5 MiB.
PlotInput sample_run() {
  PlotInput input;
  input.metrics_name = "sample.jsonl";
  for (int step = 1; step <= 60; ++step) {
    input.metrics.train_loss.push_back({double(step), 2.3 * std::exp(-step / 25.0) + 0.3});
    input.metrics.step_s.push_back({double(step), 0.010 + 0.001 * std::sin(step)});
    input.metrics.memory_peak_bytes.push_back({double(step), std::min(step, 3) * 1024.0 * 1024.0});
    if (step % 20 == 0) {
      input.metrics.eval_loss.push_back({double(step), 2.3 * std::exp(-step / 25.0) + 0.4});
      input.metrics.eval_accuracy.push_back({double(step), 0.6 + step / 300.0});
    }
  }
  ReportFigures report;
  report.title = "mlp-fashion, dp=1 (1 rank)";
  report.predicted_step_s = 0.008;
  report.measured_median_step_s = 0.010;
  report.predicted_memory_bytes = 2.5 * 1024 * 1024;
  report.measured_ledger_peak_bytes = 3.0 * 1024 * 1024;
  input.report = report;
  return input;
}

// A legend marker is a square of about 12 x 12 pixels: a series drawn as a
// line across a panel adds several hundred more.
constexpr std::int64_t kMoreThanALegendMarker_px = 300;

TEST(PlotChart, PngHasTheRequestedSizeAndEverySeriesColour) {
  const auto path = temp_path("sample.png");
  const Problems problems = render_run_chart(sample_run(), path.string(), {1000, 760});
  ASSERT_TRUE(problems.empty()) << describe(problems.front());
  QImage image;
  ASSERT_TRUE(image.load(QString::fromStdString(path.string())));
  EXPECT_EQ(image.width(), 1000);
  EXPECT_EQ(image.height(), 760);
  for (const char* color : {kMeasuredColor, kPredictedColor, kEvalColor, kAccuracyColor}) {
    EXPECT_GT(pixels_near(image, QColor(color)), kMoreThanALegendMarker_px) << color;
  }
}

TEST(PlotChart, MissingPartsAreNotDrawn) {
  PlotInput input = sample_run();
  input.report.reset();
  input.metrics.eval_loss.clear();
  input.metrics.eval_accuracy.clear();
  const auto path = temp_path("bare.png");
  ASSERT_TRUE(render_run_chart(input, path.string(), {800, 600}).empty());
  QImage image;
  ASSERT_TRUE(image.load(QString::fromStdString(path.string())));
  EXPECT_EQ(image.size(), QSize(800, 600));
  EXPECT_GT(pixels_near(image, QColor(kMeasuredColor)), kMoreThanALegendMarker_px);
  for (const char* absent : {kPredictedColor, kEvalColor, kAccuracyColor}) EXPECT_EQ(pixels_near(image, QColor(absent), 4), 0) << absent;
}

TEST(PlotChart, SvgWhenTheNameSaysSo) {
  const auto path = temp_path("sample.svg");
  ASSERT_TRUE(render_run_chart(sample_run(), path.string(), {900, 700}).empty());
  const std::string svg = read_text(path);
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("viewBox=\"0 0 900 700\""), std::string::npos) << svg.substr(0, 600);
  EXPECT_NE(svg.find(QColor(kPredictedColor).name().toStdString()), std::string::npos);
}

TEST(PlotChart, UnwritablePathIsAProblem) {
  const Problems problems = render_run_chart(sample_run(), "/nonexistent-meshplan-dir/x.png", {800, 600});
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(describe(problems.front()).find("/nonexistent-meshplan-dir/x.png"), std::string::npos);
}

// `meshplan` with no display: QT_QPA_PLATFORM, DISPLAY and WAYLAND_DISPLAY unset.
CliRun run_without_display(const std::vector<std::string>& args) {
  return run_under({"env", "-u", "QT_QPA_PLATFORM", "-u", "DISPLAY", "-u", "WAYLAND_DISPLAY"}, args);
}

TEST(PlotCommand, DrawsARealTrainingRun) {
  const auto plan = temp_path("plot-plan.json"), metrics = temp_path("plot-run.jsonl"), png = temp_path("plot-run.png");
  CliRun r = run({"explain", "--model", "mlp-fashion", "--cluster", "local-cpu", "--gpus", "1", "--mesh", "dp=1",
                  "--micro-batch", "64", "--global-batch", "64", "--emit-plan", plan.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  r = run({"train", "--plan", plan.string(), "--data", "fashion-mnist", "--steps", "12", "--metrics", metrics.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_TRUE(std::filesystem::exists(temp_path("plot-run.report.json")));

  r = run_without_display({"plot", metrics.string(), "-o", png.string(), "--size", "900x700"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("wrote " + png.string()), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("no run report"), std::string::npos) << r.err;
  QImage image;
  ASSERT_TRUE(image.load(QString::fromStdString(png.string())));
  EXPECT_EQ(image.size(), QSize(900, 700));
  EXPECT_GT(pixels_near(image, QColor(kMeasuredColor)), kMoreThanALegendMarker_px);
  EXPECT_GT(pixels_near(image, QColor(kPredictedColor)), kMoreThanALegendMarker_px);

  // Without the report: drawn, with a note.
  std::filesystem::remove(temp_path("plot-run.report.json"));
  r = run_without_display({"plot", metrics.string(), "-o", png.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("note: no run report at"), std::string::npos) << r.err;
  ASSERT_TRUE(image.load(QString::fromStdString(png.string())));
  EXPECT_EQ(image.size(), QSize(1200, 900));  // the default --size

  // A malformed line: exit 2, naming the file and line.
  const auto damaged = temp_path("damaged.jsonl");
  {
    std::ifstream in(metrics);
    std::ofstream out(damaged);
    std::string line;
    for (int i = 1; std::getline(in, line); ++i) out << (i == 5 ? line.substr(0, line.size() / 2) : line) << "\n";
  }
  r = run_without_display({"plot", damaged.string(), "-o", temp_path("damaged.png").string()});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find(damaged.string() + ":5: not a JSON object"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(temp_path("damaged.png")));
  expect_no_crash_text(r);
}

TEST(PlotCommand, BadFlagsExitTwoNamingTheFlag) {
  const auto metrics = temp_path("flags.jsonl");
  std::ofstream(metrics) << R"({"kind":"train","step":1,"loss":2.5,"step_s":0.02})" "\n";
  struct Case {
    std::vector<std::string> args;
    std::string fragment;
  };
  for (const Case& c : {Case{{"plot", metrics.string(), "-o", "x.jpg"}, "--out: 'x.jpg'"},
                        Case{{"plot", metrics.string(), "-o", "x.png", "--size", "wide"}, "--size: 'wide'"},
                        Case{{"plot", metrics.string(), "-o", "x.png", "--report", "/nonexistent.json"}, "--report /nonexistent.json"},
                        // A name longer than the file system allows: "internal error: filesystem error" before.
                        Case{{"plot", metrics.string(), "-o", "x.png", "--report", "/tmp/" + std::string(5000, 'a')},
                             ": no such file (File name too long)"},
                        Case{{"plot", metrics.string()}, "--out"},
                        Case{{"plot", temp_path("none.jsonl").string(), "-o", "x.png"}, "none.jsonl: no such file"}}) {
    const CliRun r = run_without_display(c.args);
    EXPECT_EQ(r.status, 2) << c.fragment << "\n" << r.err;
    EXPECT_NE(r.err.find(c.fragment), std::string::npos) << c.fragment << "\n" << r.err;
    expect_no_crash_text(r);
  }
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);  // one for the in-process renders; the command makes its own
  return RUN_ALL_TESTS();
}
