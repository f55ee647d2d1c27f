// Ctrl-C, SIGTERM and SIGUSR1 during `meshplan train`: the first asks the run
// to stop after the step in progress, save a checkpoint and say how to
// resume (exit 130); a second stops at once (exit 130, nothing more saved).
//
// Why these signals: Ctrl-C is SIGINT on one rank; batch systems (Slurm's
// scancel, a container stop) send SIGTERM and SIGKILL after a grace time;
// Open MPI 4's mpirun cannot forward SIGINT or SIGTERM to its ranks (on
// either it sends SIGCONT, waits odls_base_sigkill_timeout = 1 s, SIGTERM,
// waits again, SIGKILL) but forwards SIGUSR1 at once, so `meshplan launch`
// turns the user's Ctrl-C into SIGUSR1 for the ranks (launch_command.cpp).
// The handler only sets a flag (and writes a fixed line); on N ranks the flag
// is combined by one all-reduce per step, so every rank stops after the same
// step (train_command.cpp).
//
// defines: install_interrupt_handlers, interrupt_requested, quiet_further_interrupts,
//          resume_command, this_command_line
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meshplan::cli {

// Installs (or takes back, when a library installed its own since) the
// handlers of SIGINT, SIGTERM and SIGUSR1. `notice` is written to stderr on
// the first signal (empty: nothing, as on ranks other than 0).
void install_interrupt_handlers(const std::string& notice);

// Whether a first signal has arrived.
bool interrupt_requested();

// From now on a signal ends the process at once without a word (the stop
// has been reported; mpirun's teardown of the other ranks may still signal).
void quiet_further_interrupts();

// This process's argument vector, as it was started (/proc/self/cmdline).
std::vector<std::string> this_command_line();

// The command that resumes a run started as `args` (argv of `meshplan train`):
// --stop-after and any --resume dropped, `--checkpoint-dir dir` added when
// `args` had none, `--resume` appended. `ranks` > 1 prefixes
// `mpirun -np <ranks>`; `launched` (started by `meshplan launch`) gives the
// launch form instead. Shell-quoted, one line.
std::string resume_command(const std::vector<std::string>& args, const std::string& checkpoint_dir,
                           std::int64_t ranks, bool launched);

}  // namespace meshplan::cli
