// The run report of `meshplan train`: what the cost model predicts for the
// plan on this machine (the `local-cpu` preset as it is now, normally the one
// `meshplan calibrate` wrote) set beside what the run measured, per rank.
// Printed as a table by rank 0 at the end of every run and written as JSON
// (docs/formats.md, "Run reports").
//
// Threads (docs/measured-vs-predicted.md, "Threads"): a local-cpu device is
// one core, and a rank that runs t BLAS/OpenMP threads uses t cores. So the
// train command fixes t before any work (set_compute_threads: the user's
// OPENBLAS_NUM_THREADS / OMP_NUM_THREADS when set; else, when the launcher
// bound the rank to some CPUs (Open MPI binds to a core for 2 ranks or
// fewer), the number of those CPUs; else hardware threads / ranks on this
// node: never more BLAS threads than cores in all), and the prediction
// prices each rank as a device with t times the core's FLOP rate and memory
// bandwidth.
//
// Measured step time: the median of the rank's step times, the first step
// left out as warm-up (page faults, BLAS buffers) when there are two or more.
// Measured memory: the memory ledger's simultaneous peak (every rank: the
// trainers keep their buffers in it), and VmHWM from /proc/self/status (the
// process's peak resident memory, including the program and MPI's buffers);
// the report says which one it compares.
//
// CPU share: the process's CPU time between consecutive steps over the wall
// step time x threads, median over the steps after the first. Below 1 the
// rank's threads did not get their cores all the time (other processes on a
// busy machine, or waiting in communication), which the cost model, pricing
// dedicated cores, does not include.
//
// defines: ComputeThreads, set_compute_threads, StepRecorder, RankMeasurement,
// measure_rank, RunPrediction, predict_on_this_machine, write_run_report
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "executor/comm/communicator.hpp"
#include "model/plan_file.hpp"
#include "model/problem.hpp"

namespace meshplan::cli {

struct ComputeThreads {
  int threads = 1;
  std::string source;  // "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", or how the default was chosen
};

// Fixes this process's BLAS and OpenMP threads (see above). `local_ranks`:
// ranks of the job on this node (1 when not under a launcher).
ComputeThreads set_compute_threads(int local_ranks);

// Ranks on this node as the launcher says (OMPI_COMM_WORLD_LOCAL_SIZE,
// MPI_LOCALNRANKS, LOCAL_WORLD_SIZE), else `fallback`.
int local_ranks_from_environment(int fallback);

// Each step's wall time as the trainer measured it, and the process's CPU
// time (CLOCK_PROCESS_CPUTIME_ID) when the step was reported.
struct StepRecorder {
  std::vector<double> step_seconds;
  std::vector<double> cpu_clock_seconds;
  void record(double step_s);
};

struct RankMeasurement {
  int rank = 0;
  int threads = 1;
  std::int64_t steps_timed = 0;        // steps in the median (warm-up step excluded)
  double median_step_s = 0;
  double cpu_share = 0;                // median CPU time / (wall step x threads) after the first step; 0 unknown
  double vm_hwm_bytes = 0;             // 0 when /proc/self/status has no VmHWM
  double ledger_peak_bytes = -1;       // -1: buffers not tracked by the ledger on this rank
};

// This rank's figures from its step times (seconds, in step order).
RankMeasurement measure_rank(int rank, int threads, const StepRecorder& steps,
                             std::optional<double> ledger_peak_bytes);

// The median of the step times after the first (all of them when fewer than 2).
double median_after_warmup(const std::vector<double>& step_seconds, std::int64_t* counted = nullptr);

struct RunPrediction {
  std::string cluster = "local-cpu";     // the preset priced on: local-cpu, or the plan's own on a GPU
  std::string cluster_source;            // that preset's `source`
  bool on_gpu = false;                   // train --backend cuda: threads do not scale the device
  std::string cluster_file_note;         // "user presets" or "built-in"
  int threads_per_rank = 1;
  // More than one thread per rank: whether local-cpu's `achievable.threaded`
  // figures (measured at this thread count) priced it, rather than one core's x threads.
  bool threaded_rates = false;
  double step_s = 0;
  double compute_s = 0;
  double communication_exposed_s = 0;
  double bubble_s = 0;
  double optimizer_s = 0;
  std::vector<double> memory_bytes;      // per rank: the memory model's total for the rank's stage
  // Per rank: of that total, what the memory ledger can see: the allocated peak less the GEMM library's
  // workspace (cuBLASLt's is allocated outside the ledger), without the CUDA context and the caching
  // allocator's reserve. A GPU run's ledger is compared with this, VmHWM with the total.
  std::vector<double> ledger_bytes;
  std::vector<std::int64_t> stage;      // per rank: its pipeline stage
  std::string plan_file_cluster;         // the cluster the plan file was made for
  std::optional<double> plan_file_step_s;  // the plan file's embedded prediction
};

// The plan priced on the current local-cpu preset, each device scaled to
// `threads_per_rank` cores, with the matmuls in `compute` precision. On a
// GPU (`on_gpu`: train --backend cuda) on the plan file's own cluster
// instead (its device preset: `calibrate --backend cuda` writes one of the
// card trained on), threads not applying. `attention`: as the executor
// computed it (TrainingSession::attention), whatever the plan assumed.
Loaded<RunPrediction> predict_on_this_machine(const PlanFile& plan_file, int threads_per_rank, Precision compute,
                                              bool on_gpu = false, Attention attention = Attention::unfused);

// Gathers every rank's measurement to rank 0 over `world` (null: one rank),
// and there prints the table to stdout and writes the JSON to `json_path`
// (nothing written when empty); `data_spec` is the --data the run trained
// on, recorded with the plan. Collective over `world`.
Problems write_run_report(exec::comm::Communicator* world, const PlanFile& plan_file, const std::string& data_spec,
                          const Loaded<RunPrediction>& prediction, const RankMeasurement& mine,
                          const ComputeThreads& threads, const std::string& json_path);

// The report's default path: the metrics file's stem + ".report.json" in its
// folder; empty when there is no metrics file.
std::string default_report_path(const std::string& metrics_path);

}  // namespace meshplan::cli
