// Fuzz target: what `meshplan plot` reads (gui/plot/run_series.hpp): the
// metrics JSON Lines a run writes (parse_metrics) and the run report beside
// them (parse_run_report), the same input read as both. A rejected input
// names the file (and line, and key); accepted series hold finite steps,
// each step once, in order.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "fuzz/fuzz_common.hpp"
#include "gui/plot/run_series.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  using namespace meshplan::plot;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::istringstream in(text);
  const auto metrics = parse_metrics(in, "fuzz-metrics.jsonl");
  fuzz::check_loaded(metrics, "fuzz-metrics.jsonl");
  for (const auto* series : {&metrics.value.train_loss, &metrics.value.step_s, &metrics.value.memory_peak_bytes,
                             &metrics.value.eval_loss, &metrics.value.eval_accuracy}) {
    for (std::size_t i = 1; i < series->size(); ++i) {
      fuzz::require((*series)[i - 1].step < (*series)[i].step, "a series holds each step once, in order");
    }
  }
  const auto report = parse_run_report(text, "fuzz-run.report.json");
  fuzz::check_loaded(report, "fuzz-run.report.json");
  return 0;
}
