// What `meshplan calibrate` measured on this machine (Calibration), the
// preset figures made from it (PresetFigures, figures_of), and the local-cpu
// device and cluster YAML with their evidence as comments.
// executor/calibrate/run.hpp measures; this file writes; the CLI prints the
// table and the --json object (cli/calibrate_report.hpp).
//
// Defines: kEvictionCapBytes, kCurveMergeRelative, kCurveMaxPoints, Calibration, PresetFigures,
// figures_of, device_yaml, cluster_yaml, utc_now, threads_text, six_digits, as_written,
// native_bf16_text, best_rate, theoretical_fp32_per_core, cold_method, op_class_row.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "executor/calibrate/measure.hpp"
#include "executor/comm/collective_bench.hpp"
#include "model/device_spec.hpp"

namespace meshplan::exec {

// The eviction buffer per thread before each cold call: 2x the last-level
// cache, but no more than this (a VM may report the host's whole L3: 480 MiB
// on the development machine, 2 x 480 MiB per core would be most of a small
// machine's memory and seconds per repeat).
constexpr double kEvictionCapBytes = 64.0 * 1024 * 1024;

// Curve points closer than this in intensity are merged; at most this many written.
constexpr double kCurveMergeRelative = 0.05;
constexpr std::size_t kCurveMaxPoints = 12;

struct Calibration {
  MachineInfo machine;
  std::int64_t devices_per_node = 1;
  std::vector<GemmResult> fp32;            // one thread: one device
  std::optional<GemmResult> fp32_all_cores;  // every core at once, for the table
  std::vector<GemmResult> bf16;         // kernels::matmul_forward_bf16 (oneDNN), one thread
  std::string bf16_note;                // why bf16 was not measured, "" when it was
  std::vector<std::string> bf16_native_flags;  // avx512_bf16, amx_bf16 among /proc/cpuinfo's flags
  std::optional<BandwidthResult> bandwidth_one_thread;
  std::optional<BandwidthResult> bandwidth_all_cpus;
  std::vector<exec::comm::CollectiveTiming> collectives;  // every group size, collective and size
  std::optional<LinkFit> intra_link;                       // fitted to `collectives`
  ColdSettings cold;                                       // how the two below were measured
  std::vector<ColdGemmResult> gemm_cold;                   // cold operands, every core busy
  std::vector<OpClassResult> op_classes;                   // activation, norm, elementwise, optimizer
  // The same, as one process of `threaded->threads` BLAS/OpenMP threads (cores > 1 only).
  std::optional<ColdSettings> threaded;
  std::vector<ColdGemmResult> gemm_threaded;
  std::vector<OpClassResult> op_classes_threaded;
};

// The figures written into the presets, rounded as written.
struct PresetFigures {
  double fp32_flops_per_s = 0;
  std::optional<double> bf16_flops_per_s;
  double memory_bytes = 0;
  double memory_bandwidth_bytes_per_s = 0;
  std::int64_t devices_per_node = 1;
  std::vector<GemmCurvePoint> gemm_curve;                        // build_gemm_curve of the cold ladder
  std::vector<std::pair<StreamOp, double>> op_bandwidth_bytes_per_s;  // measured classes
  // achievable.threaded, per core (threaded_threads 0: not measured).
  int threaded_threads = 0;
  std::vector<GemmCurvePoint> threaded_gemm_curve;
  std::vector<std::pair<StreamOp, double>> threaded_op_bandwidth_bytes_per_s;
};

// The preset figures, rounded as written.
PresetFigures figures_of(const Calibration& c);

// The files' text; `when` is utc_now() of the run.
std::string device_yaml(const Calibration& c, const PresetFigures& f, const std::string& when, bool quick);
std::string cluster_yaml(const Calibration& c, const PresetFigures& f, const std::string& when, bool quick);

// The best GEMM rate among repeats long enough to time (all of them when none is).
double best_rate(const std::vector<GemmResult>& results);
// Clock x FLOP/cycle assumed from the CPU flags; 0 without a clock.
double theoretical_fp32_per_core(const MachineInfo& machine);
// How the cold measurements ran, in three lines joined by `line_break` (comment and table say the same).
std::string cold_method(const ColdSettings& cold, const std::string& line_break);
// One op class as a table row: class, kernel, elements, ms forward and backward, GB/s counted.
std::string op_class_row(const OpClassResult& r);

std::string utc_now();                   // "2026-11-22 05:29 UTC"
std::string threads_text(int threads);   // "1 thread", "2 threads"
// "avx512_bf16, amx_bf16", or "none (no avx512_bf16 or amx_bf16 in /proc/cpuinfo)".
std::string native_bf16_text(const std::vector<std::string>& flags);
std::string six_digits(double value);    // %.6g, as the presets are written
double as_written(double value);         // value read back from six_digits(value)

}  // namespace meshplan::exec
