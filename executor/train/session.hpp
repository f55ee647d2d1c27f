// A training session: everything `meshplan train` does around the steps,
// for one rank and for every rank of a multi-rank job alike, so the two
// cannot drift apart (the CLI parses flags, prints, and turns the outcome
// into an exit status):
//
//   open     the loaders, the model (a GPT: ParallelGpt over the mesh's
//            groups; an MLP: Model<float> under DataParallelTrainer
//            (data_parallel.hpp); a one-device plan is the mesh of one),
//            the options from the plan, --resume from the newest intact
//            checkpoint (damaged newer ones set aside), the metrics file;
//   train    the steps; after each one, on every rank: the metrics line
//            (loss, lr, norm, throughput, MFU, rank 0's memory ledger), the
//            evaluations, and one decision to save and to stop
//            (run_control.hpp), with a signal on any rank agreed by one
//            all-reduce (max) so all ranks stop after the same step;
//   save     full tensors by name (parallel_checkpoint.hpp): every rank
//            gathers, rank 0 writes, every rank waits for the outcome (a rank
//            that exited first would have mpirun end the job, the save with
//            it). A checkpoint of any plan loads under any other and on one rank.
//
// MFU = model FLOPs per step / step time / (device peak x ranks), the model
// FLOPs from the cost model's profile (model/evaluate.hpp), the peak from
// the plan's device preset at the matmul precision (a local-cpu device is
// one core: a rank's threads are that many devices).
//
// Rank 0 alone writes metrics and calls the printing hooks.
//
// defines: SessionConfig, SessionHooks, SessionEnd, TrainingSession
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "executor/backend/backend.hpp"
#include "executor/comm/communicator.hpp"
#include "executor/train/trainer.hpp"
#include "model/plan_file.hpp"
#include "model/precision.hpp"
#include "model/problem.hpp"

namespace meshplan::exec {

namespace parallel {
class GptOps;
}

// A device other than the CPU for a transformer to train on (`meshplan
// train --backend cuda`): its backend and the model's ops on it. Whoever
// links that device's library builds it (the CLI, with CUDA); the session
// runs every collective on its memory through comm/staged_communicator.hpp
// (MPI staged through page-locked host memory), so any number of ranks may
// share one device.
struct TrainingDevice {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<parallel::GptOps> ops;
  TrainingDevice();
  TrainingDevice(std::unique_ptr<Backend> backend, std::unique_ptr<parallel::GptOps> ops);
  TrainingDevice(TrainingDevice&&) noexcept;
  TrainingDevice& operator=(TrainingDevice&&) noexcept;
  ~TrainingDevice();
};

struct SessionConfig {
  std::string data = "synthetic";  // data::make_loader's spec
  std::int64_t steps = 0;          // optimizer steps; 0: from epochs
  double epochs = 0;
  std::optional<double> lr;  // peak rate; none: default_learning_rate (lr_schedule.hpp) for the plan's model
  std::int64_t warmup = 0;
  double clip = 1.0;
  double weight_decay = 0;
  std::uint64_t seed = 1;
  std::string checkpoint_dir;         // where checkpoints go (a stop saves here even when checkpoints are off)
  bool checkpoints_on = false;        // --checkpoint-dir was given
  std::int64_t checkpoint_every = 0;  // <= 0: only at the end
  std::int64_t stop_after = 0;        // <= 0: off
  bool resume = false;                // needs checkpoints_on
  std::string metrics_path;           // empty: no metrics file
  std::int64_t eval_every = 0;        // steps between evaluations
  std::int64_t eval_samples = 0;      // 0: language models 64 micro-batches, classifiers the whole test split
  bool skip_non_finite = false;
  Precision compute = Precision::fp32;  // the matmuls' arithmetic (fp32 or bf16)
  int threads = 1;                      // BLAS/OpenMP threads per rank (the MFU's peak on local-cpu)
  // The device a transformer trains on, built when the model is; null: the
  // CPU (default_backend()). MLPs train on the CPU only.
  std::function<Loaded<TrainingDevice>()> device;
};

// What rank 0 prints (the CLI's screen output). All optional.
struct SessionHooks {
  std::function<void(const Problems&)> report;  // problems and warnings, as they are found
  std::function<void(const std::string&)> say;  // a line that stays (resumed from, notes, evaluations)
  // After every step: the step, and its full metrics line.
  std::function<void(const StepReport&, const std::string& line)> step;
  // This rank's own interrupt flag (a signal arrived); the session agrees it over the ranks.
  std::function<bool()> interrupt_requested;
  // Every rank, after every step: its wall time (the run report's measurement).
  std::function<void(double step_s)> step_time;
};

// The optimiser's settings a session refuses before it starts, each naming
// its flag: a learning rate that is not a positive finite number (nan or
// inf stopped the run at step 1; a negative one ascends the loss), a
// negative warm-up, a weight decay that is negative or not finite, a
// clipping norm that is nan, a negative step count (checkpoints,
// evaluations, stop-after: 0 is off). TrainingSession::open asks it too.
Problems session_config_problems(const SessionConfig& config);

// How train() ended.
struct SessionEnd {
  enum Kind { finished, stopped, failed } kind = finished;
  std::int64_t steps_done = 0;  // steps completed, including earlier runs resumed from
  bool interrupted = false;     // stopped by a signal (else --stop-after)
  Problems problems;             // training's (failed: the non-finite step; skipped steps' warnings)
  Problems save_problems;       // problems of saving checkpoints (stopped: the last save's among them)
};

class TrainingSession {
 public:
  ~TrainingSession();
  TrainingSession(const TrainingSession&) = delete;
  TrainingSession& operator=(const TrainingSession&) = delete;

  // Collective over `world`. Problems (already passed to hooks.report on rank
  // 0) are bad input: flags, data, model, plan, a checkpoint that does not
  // fit. `world` must outlive the session.
  static Loaded<std::unique_ptr<TrainingSession>> open(const SessionConfig& config, const PlanFile& plan_file,
                                                       comm::Communicator& world, SessionHooks hooks);

  // --resume found a checkpoint at or past the last step: nothing to train
  // (rank 0 has said so).
  bool already_finished() const { return already_finished_; }
  std::int64_t total_steps() const;
  std::int64_t first_step() const;
  // "tokens" (language models) or "samples".
  const std::string& unit() const { return unit_; }

  // Runs the steps (collective).
  SessionEnd train();
  // After a finished run, for models the run does not evaluate along the way
  // (regression): one last evaluation, said and written to the metrics file.
  void final_evaluation();
  // The memory ledger of the device the model lives on (this rank's).
  MemorySnapshot memory() const;
  // A transformer's attention as its ops compute it (fused: flash attention on a GPU in bf16); unfused otherwise.
  Attention attention() const;

 private:
  struct State;
  explicit TrainingSession(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
  bool already_finished_ = false;
  std::string unit_;
};

}  // namespace meshplan::exec
