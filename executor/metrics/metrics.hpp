// Training metrics as JSON Lines (one JSON object per line, https://jsonlines.org)
// for tools to read back, and as one human-readable line per record for
// stdout. Each line is flushed as it is written, so a `tail -f` or a crashed
// run's file holds every finished step.
//
// Record keys (docs/formats.md, "Metrics"); "kind" tells the two apart:
//   {"kind": "train", "step", "loss", "lr", "grad_norm", "step_s",
//    "tokens_per_s" | "samples_per_s", "mfu", "memory_bytes", "memory"}
//   {"kind": "eval", "step", "epoch", "eval_loss", "eval_accuracy"}
// Optional fields that are unknown are written as null, never left out, so
// every line of a kind has the same keys; non-finite numbers (a diverged
// loss) are written as null too, since JSON has no NaN.
// Memory comes from the backend's ledger (executor/backend/memory_ledger.hpp):
// memory_bytes is the rank's peak total so far (the simultaneous peak), and
// "memory" is {"<category>": {"now_bytes", "peak_bytes"}, ..., "total": {...}}
// for the six categories.
//
// defines: ThroughputUnit, StepMetrics, set_memory, EvalMetrics, to_json,
//          format_line, format_peak_memory, MetricsWriter
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "executor/backend/memory_ledger.hpp"
#include "model/problem.hpp"

namespace meshplan::exec {

// What a step's throughput counts: tokens for language models, samples otherwise.
enum class ThroughputUnit { tokens, samples };

struct StepMetrics {
  std::int64_t step = 0;
  double loss = 0;
  double learning_rate = 0;
  double grad_norm = 0;  // global L2 norm before clipping
  double step_s = 0;     // wall-clock seconds of the step
  double throughput_per_s = 0;
  ThroughputUnit throughput_unit = ThroughputUnit::samples;
  std::optional<double> mfu;                  // model FLOP/s over peak FLOP/s, in [0, 1]
  std::optional<std::int64_t> memory_bytes;  // peak bytes in use on this rank so far (all categories at once)
  std::optional<MemorySnapshot> memory{};     // now and peak by category
};

// Fills memory_bytes (= snapshot.total.peak_bytes) and memory from a ledger snapshot.
void set_memory(StepMetrics& metrics, const MemorySnapshot& snapshot);

struct EvalMetrics {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  double eval_loss = 0;
  std::optional<double> eval_accuracy;  // fraction in [0, 1]; absent for regression
  std::int64_t eval_samples = 0;        // samples (windows for language models) evaluated
};

nlohmann::json to_json(const StepMetrics& metrics);
nlohmann::json to_json(const EvalMetrics& metrics);

// One line without a newline, e.g.
//   "step 120 | loss 2.3457 | lr 3.00e-04 | grad 1.234 | 0.412 s | 12.3k tokens/s | mfu 41.2% | mem 1.50 GiB"
//   "eval step 120 epoch 2 | loss 0.4321 | accuracy 84.56%"
// Unknown optional fields are left out.
std::string format_line(const StepMetrics& metrics);
std::string format_line(const EvalMetrics& metrics);

// The end-of-run summary of a ledger, one line:
//   "peak memory: parameters 1.2 MiB | gradients 1.2 MiB | optimizer 2.4 MiB |
//    activations 3.1 MiB | total 7.9 MiB"
// Categories that never held a byte are left out; the total is the
// simultaneous peak, not the sum of the categories' peaks.
std::string format_peak_memory(const MemorySnapshot& snapshot);

class MetricsWriter {
 public:
  // Writes to `out`, which must outlive the writer; `display_name` names it in problems.
  MetricsWriter(std::ostream& out, std::string display_name);

  // Creates (or with `append`, extends: a resumed run) the file at `path`.
  static Loaded<std::unique_ptr<MetricsWriter>> open(const std::string& path, bool append);

  // Each writes one line and flushes; problems name the file (write failed).
  Problems write(const StepMetrics& metrics);
  Problems write(const EvalMetrics& metrics);
  Problems write_record(const nlohmann::json& record);

 private:
  MetricsWriter(std::unique_ptr<std::ofstream> file, std::string display_name);

  std::unique_ptr<std::ofstream> file_;  // set when the writer owns its file
  std::ostream* out_;
  std::string display_name_;
};

}  // namespace meshplan::exec
