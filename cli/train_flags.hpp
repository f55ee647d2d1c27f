// The flags of `meshplan train`, defined once: the train command parses them,
// and `meshplan launch` parses the flags it passes on to train with the same
// definitions, so that what train would refuse about them (an unknown flag, a
// value that does not convert, a nan --lr, an unwritable --report) is refused
// before mpirun starts rather than by every rank under it.
//
// defines: TrainFlags, add_train_flags, train_settings_problems, train_flag_problems, report_path_of
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "cli/train_progress.hpp"
#include "executor/comm/communicator.hpp"
#include "executor/train/session.hpp"
#include "model/problem.hpp"

namespace meshplan::cli {

struct TrainFlags {
  std::string plan_path;
  exec::SessionConfig session;  // all but the checkpoint folder, the precision and the threads
  std::string checkpoint_dir;
  double comm_timeout_s = exec::comm::default_timeout.count();
  std::string precision = "fp32";  // matmul arithmetic: fp32 or bf16
  bool shrink = false;             // rehearse the plan with a model reduced to fit this machine
  std::string report_path;         // run report JSON (default: <metrics stem>.report.json)
  std::int64_t log_every = default_log_every;  // full stdout lines every N steps (train_progress.hpp)
  std::string backend = "auto";    // auto, cpu or cuda (one GPU per rank, shared when fewer; meshplan-train-cuda)
};

// Every flag of `train` on `command`, bound to `f`.
void add_train_flags(CLI::App& command, TrainFlags& f);

// What train refuses about its parsed flags alone, without the plan: the
// optimiser settings (exec::session_config_problems) and the run report's
// folder (exec::output_file_problems).
Problems train_settings_problems(const TrainFlags& f);

// `args` (train's arguments, --plan and all) parsed with train's definitions
// into `f`, then train_settings_problems. A parse error is one problem naming
// "train" (an unknown flag with the nearest one).
Problems train_flag_problems(const std::vector<std::string>& args, TrainFlags& f);

// The run report's path: --report, else the --metrics file's stem + .report.json (empty: none).
std::string report_path_of(const TrainFlags& f);

}  // namespace meshplan::cli
