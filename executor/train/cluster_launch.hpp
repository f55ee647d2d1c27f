// Where `meshplan launch` starts a plan's ranks beyond this machine
// (docs/clusters.md): hosts listed in an Open MPI hostfile, or a Slurm job
// written as an sbatch script. Pure functions of their inputs: cli/launch
// parses the flags, runs mpirun or sbatch, and prints.
//
// defines: HostSlots, parse_hostfile, read_hostfile, hostfile_slots,
// SlurmOptions, SlurmJob, slurm_job, sbatch_script
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/plan_file.hpp"
#include "model/problem.hpp"

namespace meshplan::exec {

// One host of an Open MPI hostfile: "node01 slots=8 max_slots=8", '#'
// comments. slots is nullopt where the line gives none: Open MPI then counts
// that host's processor cores, which launch cannot know.
struct HostSlots {
  std::string host;
  std::optional<std::int64_t> slots;
};
// Problems name "hostfile:LINE" (a malformed slots= count, an unknown key,
// no host at all).
Loaded<std::vector<HostSlots>> parse_hostfile(const std::string& text, const std::string& display_name);
Loaded<std::vector<HostSlots>> read_hostfile(const std::string& path);
// The slots of all hosts, or nullopt when a host leaves its count to Open MPI.
std::optional<std::int64_t> hostfile_slots(const std::vector<HostSlots>& hosts);

// What the user sets of the Slurm job (0 / empty: derived or left out).
struct SlurmOptions {
  std::int64_t nodes = 0;            // default: ranks / tasks per node
  std::int64_t tasks_per_node = 0;   // default: the plan's cluster's devices per node (at most the ranks)
  std::int64_t gpus_per_node = -1;   // -1: tasks per node on a GPU cluster (NVLink or PCIe inside a node), else none
  std::int64_t cpus_per_task = 0;    // 0: Slurm's default; also each rank's OMP/OpenBLAS threads when set
  std::string job_name;              // default: meshplan-<plan file stem>
  std::string partition, account, time;
  std::string output;                // default: <job_name>-%j.out in the working directory
  std::string srun_mpi = "pmix";     // srun --mpi=
  std::string working_directory;     // #SBATCH --chdir (the directory launch ran in)
};

struct SlurmJob {
  SlurmOptions options;              // with the defaults filled in
  std::int64_t ranks = 0;
  std::vector<std::string> command;  // each rank's command: meshplan train --plan ... (absolute paths)
};

// The job for `plan` (its mesh's ranks, its cluster's node size) running
// `command` on every rank. Problems name the option: tasks per node that do
// not divide the ranks, nodes x tasks per node that are not the ranks, more
// nodes than the cluster has, a name, time or path that is not one word on
// an #SBATCH line. A working directory that is not one word becomes a `cd`
// in the script instead of --chdir.
Loaded<SlurmJob> slurm_job(const PlanFile& plan, const std::string& plan_path, SlurmOptions options,
                           std::vector<std::string> command);

// The sbatch script: #SBATCH lines, then srun --mpi=<...> of the command.
std::string sbatch_script(const SlurmJob& job);

// `arg` as one shell word (single-quoted when it needs to be).
std::string shell_quoted(const std::string& arg);

}  // namespace meshplan::exec
