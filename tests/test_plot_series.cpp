// `meshplan plot`'s reading half (gui/plot/run_series.hpp), without Qt:
// metrics JSON Lines and run reports -> series, with a malformed line named
// by file and line, absent parts as notes, and the --size flag.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "gui/plot/run_series.hpp"

namespace {

using namespace meshplan;
using namespace meshplan::plot;

// As executor/metrics/metrics.cpp writes them (keys of docs/formats.md, "Metrics").
const std::string kMetrics =
    R"({"kind":"train","step":1,"loss":2.5,"lr":0.001,"grad_norm":1.0,"step_s":0.020,"samples_per_s":3200.0,"mfu":0.1,"memory_bytes":1048576,"memory":null})" "\n"
    R"({"kind":"train","step":2,"loss":null,"lr":0.001,"grad_norm":1.0,"step_s":0.010,"samples_per_s":6400.0,"mfu":0.1,"memory_bytes":2097152,"memory":null})" "\n"
    "\n"
    R"({"kind":"train","step":3,"loss":1.5,"lr":0.001,"grad_norm":1.0,"step_s":0.011,"samples_per_s":6000.0,"mfu":null,"memory_bytes":null,"memory":null})" "\n"
    R"({"kind":"eval","step":3,"epoch":1,"eval_loss":1.75,"eval_accuracy":0.625,"eval_samples":10000})" "\n";

std::string text_of(const Problems& problems) {
  std::string text;
  for (const auto& p : problems) text += describe(p) + "\n";
  return text;
}

TEST(PlotSeries, MetricsBecomeOneSeriesPerMetric) {
  std::istringstream in(kMetrics);
  const auto parsed = parse_metrics(in, "m.jsonl");
  ASSERT_TRUE(parsed.ok()) << text_of(parsed.problems);
  EXPECT_TRUE(parsed.problems.empty());
  const MetricsSeries& s = parsed.value;
  ASSERT_EQ(s.train_loss.size(), 2u);  // the null loss of step 2 left out, and counted
  EXPECT_EQ(s.train_loss[0].step, 1);
  EXPECT_EQ(s.train_loss[0].value, 2.5);
  EXPECT_EQ(s.train_loss[1].step, 3);
  EXPECT_EQ(s.null_losses, 1);
  ASSERT_EQ(s.step_s.size(), 3u);
  EXPECT_EQ(s.step_s[1].value, 0.010);
  ASSERT_EQ(s.memory_peak_bytes.size(), 2u);
  EXPECT_EQ(s.memory_peak_bytes[1].value, 2097152);
  ASSERT_EQ(s.eval_loss.size(), 1u);
  EXPECT_EQ(s.eval_loss[0].step, 3);
  EXPECT_EQ(s.eval_loss[0].value, 1.75);
  ASSERT_EQ(s.eval_accuracy.size(), 1u);
  EXPECT_EQ(s.eval_accuracy[0].value, 0.625);
}

// `train --resume` appends: steps 2 and 3, run before a kill and again after
// the resume from the step-1 checkpoint, are drawn once, as rerun.
TEST(PlotSeries, AResumedRunKeepsEachStepsLastRecord) {
  std::istringstream in(R"({"kind":"train","step":1,"loss":3.0,"step_s":0.1})" "\n"
                        R"({"kind":"train","step":2,"loss":2.0,"step_s":0.1})" "\n"
                        R"({"kind":"train","step":3,"loss":1.0,"step_s":0.1})" "\n"
                        R"({"kind":"train","step":2,"loss":2.5,"step_s":0.2})" "\n"
                        R"({"kind":"train","step":3,"loss":1.5,"step_s":0.2})" "\n"
                        R"({"kind":"train","step":4,"loss":0.5,"step_s":0.2})" "\n");
  const auto parsed = parse_metrics(in, "m.jsonl");
  ASSERT_TRUE(parsed.ok()) << text_of(parsed.problems);
  const auto& loss = parsed.value.train_loss;
  ASSERT_EQ(loss.size(), 4u);
  const double expected_steps[] = {1, 2, 3, 4}, expected_losses[] = {3.0, 2.5, 1.5, 0.5};
  for (std::size_t i = 0; i < loss.size(); ++i) {
    EXPECT_EQ(loss[i].step, expected_steps[i]) << i;
    EXPECT_EQ(loss[i].value, expected_losses[i]) << i;
  }
  ASSERT_EQ(parsed.value.step_s.size(), 4u);
  EXPECT_EQ(parsed.value.step_s[1].value, 0.2);
}

struct BadLine {
  const char* name;
  std::string line;       // written as line 3, after two good lines and a blank one
  std::string fragment;   // in the problem, after "m.jsonl:4"
};

void PrintTo(const BadLine& bad, std::ostream* out) { *out << bad.name; }

class PlotSeriesBadLine : public ::testing::TestWithParam<BadLine> {};

TEST_P(PlotSeriesBadLine, IsAnErrorNamingFileAndLine) {
  const std::string good = R"({"kind":"train","step":1,"loss":2.5,"step_s":0.02,"memory_bytes":null})";
  std::istringstream in(good + "\n" + good + "\n\n" + GetParam().line + "\n" + good + "\n");
  const auto parsed = parse_metrics(in, "runs/m.jsonl");
  ASSERT_FALSE(parsed.ok());
  ASSERT_EQ(parsed.problems.size(), 1u) << text_of(parsed.problems);
  EXPECT_EQ(parsed.problems[0].where, "runs/m.jsonl:4");
  EXPECT_NE(parsed.problems[0].message.find(GetParam().fragment), std::string::npos) << parsed.problems[0].message;
}

INSTANTIATE_TEST_SUITE_P(
    Lines, PlotSeriesBadLine,
    ::testing::Values(BadLine{"truncated", R"({"kind":"train","step":3,"lo)", "not a JSON object"},
                      BadLine{"not_json", "step 3 | loss 2.0", "not a JSON object"},
                      // Past double's range: nlohmann's out_of_range, which ended `plot` in "internal error".
                      BadLine{"number_overflow", R"({"kind":"train","step":3,"loss":1e400})", "number overflow"},
                      BadLine{"array", "[1, 2]", "not a JSON object but array"},
                      BadLine{"no_kind", R"({"model":"gpt2-124m","feasible":true})", "no \"kind\""},
                      BadLine{"no_step", R"({"kind":"train","loss":2.0})", "no 'step'"},
                      BadLine{"loss_text", R"({"kind":"train","step":3,"loss":"2.0"})", "key 'loss' is string"},
                      BadLine{"eval_accuracy_text", R"({"kind":"eval","step":3,"eval_accuracy":"high"})",
                              "key 'eval_accuracy' is string"},
                      // Values no run writes: drawn, they made an empty panel and a negative peak in the title.
                      BadLine{"negative_loss", R"({"kind":"train","step":3,"loss":-5})", "key 'loss' is -5; it must be from 0"},
                      BadLine{"negative_time", R"({"kind":"train","step":3,"loss":1,"step_s":-1})", "key 'step_s' is -1"},
                      BadLine{"negative_memory", R"({"kind":"train","step":3,"loss":1,"memory_bytes":-100})",
                              "key 'memory_bytes' is -100; it must be a byte count"},
                      BadLine{"huge_loss", R"({"kind":"train","step":3,"loss":1e308})", "fp32's largest"},
                      BadLine{"fractional_step", R"({"kind":"train","step":2.5,"loss":1})", "key 'step' is 2.5; it must be a whole number"},
                      BadLine{"negative_step", R"({"kind":"train","step":-1,"loss":1})", "key 'step' is -1"},
                      BadLine{"accuracy_above_one", R"({"kind":"eval","step":3,"eval_accuracy":62.5})",
                              "key 'eval_accuracy' is 62.5; it must be a fraction from 0 to 1"}),
    [](const ::testing::TestParamInfo<BadLine>& case_info) { return std::string(case_info.param.name); });

TEST(PlotSeries, OtherKindsAreSkippedWithAWarning) {
  std::istringstream in(R"({"kind":"train","step":1,"loss":2.5,"step_s":0.02})" "\n"
                        R"({"kind":"checkpoint","step":1})" "\n");
  const auto parsed = parse_metrics(in, "m.jsonl");
  ASSERT_TRUE(parsed.ok());
  ASSERT_EQ(parsed.problems.size(), 1u);
  EXPECT_EQ(parsed.problems[0].severity, Severity::warning);
  EXPECT_NE(parsed.problems[0].message.find("1 record of kind \"checkpoint\" skipped"), std::string::npos);
  EXPECT_EQ(parsed.value.train_loss.size(), 1u);
}

// As cli/run_report.cpp writes it (docs/formats.md, "Run reports"), two ranks.
const std::string kReport = R"({
  "plan": {"model": "gpt-byte-10m", "mesh": "dp=2", "world_size": 2, "micro_batch": 4, "global_batch": 8},
  "prediction": {"cluster": "local-cpu", "step_s": 0.25},
  "ranks": [
    {"rank": 0, "threads": 1, "steps_timed": 19, "measured_median_step_s": 0.3, "cpu_share": 0.9, "stage": 0,
     "predicted_step_s": 0.25, "measured_over_predicted": 1.2, "predicted_memory_bytes": 1.5e8,
     "measured_vm_hwm_bytes": 2.5e8, "measured_ledger_peak_bytes": null, "memory_compared": "vm_hwm"},
    {"rank": 1, "threads": 1, "steps_timed": 19, "measured_median_step_s": 0.31, "cpu_share": 0.9, "stage": 0,
     "predicted_step_s": 0.25, "measured_over_predicted": 1.24, "predicted_memory_bytes": 1.6e8,
     "measured_vm_hwm_bytes": 2.6e8, "measured_ledger_peak_bytes": 1.0e8, "memory_compared": "ledger"}]})";

TEST(PlotSeries, RunReportGivesOneRanksPredictions) {
  const auto zero = parse_run_report(kReport, "m.report.json");
  ASSERT_TRUE(zero.ok()) << text_of(zero.problems);
  EXPECT_EQ(zero.value.title, "gpt-byte-10m, dp=2 (2 ranks)");
  EXPECT_EQ(zero.value.rank, 0);
  EXPECT_EQ(zero.value.predicted_step_s, 0.25);
  EXPECT_EQ(zero.value.measured_median_step_s, 0.3);
  EXPECT_EQ(zero.value.predicted_memory_bytes, 1.5e8);
  EXPECT_EQ(zero.value.measured_vm_hwm_bytes, 2.5e8);
  EXPECT_FALSE(zero.value.measured_ledger_peak_bytes.has_value());
  EXPECT_TRUE(zero.value.prediction_error.empty());

  const auto one = parse_run_report(kReport, "m.report.json", 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one.value.predicted_memory_bytes, 1.6e8);
  EXPECT_EQ(one.value.measured_ledger_peak_bytes, 1.0e8);

  const auto missing = parse_run_report(kReport, "m.report.json", 5);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(text_of(missing.problems).find("no entry for rank 5"), std::string::npos);
}

TEST(PlotSeries, UnpricedReportKeepsTheReasonAndNoPrediction) {
  const auto r = parse_run_report(
      R"({"prediction": {"cluster": "local-cpu", "error": "--cluster local-cpu: not found"},
          "ranks": [{"rank": 0, "measured_median_step_s": 0.1, "measured_vm_hwm_bytes": 1e8, "measured_ledger_peak_bytes": 5e6}]})",
      "r.json");
  ASSERT_TRUE(r.ok()) << text_of(r.problems);
  EXPECT_EQ(r.value.prediction_error, "--cluster local-cpu: not found");
  EXPECT_FALSE(r.value.predicted_step_s.has_value());
  EXPECT_FALSE(r.value.predicted_memory_bytes.has_value());
  EXPECT_EQ(r.value.measured_median_step_s, 0.1);
}

TEST(PlotSeries, MalformedReportsAreErrorsNamingTheFileAndKey) {
  const auto not_json = parse_run_report("{\"ranks\": [", "r.json");
  ASSERT_FALSE(not_json.ok());
  EXPECT_EQ(not_json.problems[0].where, "r.json");
  EXPECT_NE(not_json.problems[0].message.find("not JSON"), std::string::npos);
  const auto overflow = parse_run_report(R"({"ranks": [{"rank": 0, "predicted_step_s": 1e400}]})", "r.json");
  ASSERT_FALSE(overflow.ok());
  EXPECT_EQ(overflow.problems[0].where, "r.json");
  EXPECT_NE(overflow.problems[0].message.find("not JSON: number overflow"), std::string::npos) << overflow.problems[0].message;
  const auto no_ranks = parse_run_report(R"({"plan": {}})", "r.json");
  ASSERT_FALSE(no_ranks.ok());
  EXPECT_NE(no_ranks.problems[0].message.find("no \"ranks\""), std::string::npos);
  const auto wrong_type = parse_run_report(R"({"ranks": [{"rank": 0, "predicted_step_s": "fast"}]})", "r.json");
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_NE(wrong_type.problems[0].where.find("r.json"), std::string::npos);
  EXPECT_NE(wrong_type.problems[0].message.find("key 'predicted_step_s' is string"), std::string::npos);
}

class PlotInputFiles : public ::testing::Test {
 protected:
  std::filesystem::path folder = std::filesystem::temp_directory_path() / ("plot-series-" + std::to_string(::getpid()));
  void SetUp() override { std::filesystem::create_directories(folder); }
  void TearDown() override { std::filesystem::remove_all(folder); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(folder / name) << text;
    return (folder / name).string();
  }
  static bool has_note(const PlotInput& input, const std::string& fragment) {
    for (const auto& note : input.notes) {
      if (note.find(fragment) != std::string::npos) return true;
    }
    return false;
  }
};

TEST_F(PlotInputFiles, ReportBesideTheMetricsIsRead) {
  const std::string metrics = write("run.jsonl", kMetrics);
  const std::string report = write("run.report.json", kReport);
  const auto input = read_plot_input(metrics, report);
  ASSERT_TRUE(input.ok()) << text_of(input.problems);
  EXPECT_EQ(input.value.metrics_name, "run.jsonl");
  ASSERT_TRUE(input.value.report.has_value());
  EXPECT_EQ(input.value.report->predicted_step_s, 0.25);
  EXPECT_FALSE(has_note(input.value, "no run report"));
  EXPECT_TRUE(has_note(input.value, "1 step with a null (non-finite) loss"));
  EXPECT_FALSE(has_note(input.value, "no evaluations"));
  EXPECT_FALSE(has_note(input.value, "no per-step memory"));
}

TEST_F(PlotInputFiles, AbsentPartsAreNotesNotErrors) {
  const std::string metrics = write("bare.jsonl", R"({"kind":"train","step":1,"loss":2.5,"step_s":0.02,"memory_bytes":null})" "\n");
  const auto input = read_plot_input(metrics, (folder / "bare.report.json").string());
  ASSERT_TRUE(input.ok()) << text_of(input.problems);
  EXPECT_FALSE(input.value.report.has_value());
  EXPECT_TRUE(has_note(input.value, "no run report at"));
  EXPECT_TRUE(has_note(input.value, "no evaluations"));
  EXPECT_TRUE(has_note(input.value, "the memory panel is not drawn"));
}

TEST_F(PlotInputFiles, NothingToDrawOrNoFileIsAnError) {
  const auto empty = read_plot_input(write("empty.jsonl", "\n"), "");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(text_of(empty.problems).find("nothing to plot"), std::string::npos);
  const auto absent = read_plot_input((folder / "absent.jsonl").string(), "");
  ASSERT_FALSE(absent.ok());
  EXPECT_NE(text_of(absent.problems).find("absent.jsonl: no such file"), std::string::npos);
  const auto folder_given = read_plot_input(folder.string(), "");
  EXPECT_NE(text_of(folder_given.problems).find("is a folder, not a file"), std::string::npos) << text_of(folder_given.problems);
  const auto bad_report = read_plot_input(write("ok.jsonl", kMetrics), write("ok.report.json", "{]"));
  ASSERT_FALSE(bad_report.ok());
  EXPECT_NE(text_of(bad_report.problems).find("ok.report.json: not JSON"), std::string::npos);
}

TEST(PlotSeries, ChartSizeIsWidthByHeightInPixels) {
  const auto size = parse_chart_size("1600x1000");
  ASSERT_TRUE(size.has_value());
  EXPECT_EQ(size->width_px, 1600);
  EXPECT_EQ(size->height_px, 1000);
  for (const char* bad : {"1600", "1600x", "x1000", "1600x1000x2", "16OOx1000", "-800x600", "100x600", "800x20000", ""}) {
    EXPECT_FALSE(parse_chart_size(bad).has_value()) << bad;
  }
}

}  // namespace
