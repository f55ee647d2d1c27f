// The hostfile reader and the sbatch writer of cluster_launch.hpp.
#include "executor/train/cluster_launch.hpp"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/atomic_file.hpp"

namespace meshplan::exec {
namespace {

Problem error(const std::string& where, const std::string& message) { return {Severity::error, where, message}; }

// A host's slots: at most this many (no node runs a million ranks), so the
// sum over any hostfile fits an int64.
constexpr std::int64_t kMaxSlots = 1000000;

std::optional<std::int64_t> positive_count(const std::string& text) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 1 || value > kMaxSlots) return std::nullopt;
  return value;
}

// `text` without the characters an #SBATCH word cannot hold (blanks, quotes,
// '#', '\\', control characters), each replaced by '_'.
std::string sbatch_word(std::string text) {
  for (char& c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= ' ' || u == 0x7f || c == '"' || c == '\'' || c == '#' || c == '\\') c = '_';
  }
  return text;
}

// NVLink or PCIe inside a node: the devices are GPUs (other kinds: CPU cores
// over shared memory, TPU chips over ICI, which Slurm does not count as GPUs).
bool gpu_cluster(const ClusterSpec& cluster) {
  return cluster.intra_node.kind == "nvlink" || cluster.intra_node.kind == "pcie";
}

// Slurm's time limit forms (sbatch(1), --time): "minutes", "minutes:seconds", "hours:minutes:seconds",
// "days-hours", "days-hours:minutes", "days-hours:minutes:seconds", or UNLIMITED / INFINITE. sbatch
// refuses anything else when the job is submitted, after the script was written.
bool slurm_time_limit(const std::string& text) {
  if (text == "UNLIMITED" || text == "INFINITE" || text == "unlimited" || text == "infinite") return true;
  auto numbers = [](const std::string& part, std::size_t count) {
    std::size_t fields = 0;
    std::size_t start = 0;
    while (start <= part.size()) {
      const std::size_t end = std::min(part.find(':', start), part.size());
      if (end == start || end - start > 9) return false;
      for (std::size_t i = start; i < end; ++i) {
        if (part[i] < '0' || part[i] > '9') return false;
      }
      ++fields;
      start = end + 1;
    }
    return fields >= 1 && fields <= count;
  };
  const std::size_t dash = text.find('-');
  if (dash == std::string::npos) return numbers(text, 3);
  return numbers(text.substr(0, dash), 1) && numbers(text.substr(dash + 1), 3);
}

}  // namespace

Loaded<std::vector<HostSlots>> parse_hostfile(const std::string& text, const std::string& display_name) {
  Loaded<std::vector<HostSlots>> result;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::istringstream words(line);
    std::string word;
    if (!(words >> word)) continue;
    const std::string where = display_name + ":" + std::to_string(number);
    if (word.find('=') != std::string::npos) {
      result.problems.push_back(error(where, "'" + word + "' where a host name should come first"));
      continue;
    }
    HostSlots host{word, std::nullopt};
    while (words >> word) {
      const auto eq = word.find('=');
      const std::string key = word.substr(0, eq), value = eq == std::string::npos ? "" : word.substr(eq + 1);
      if (key == "slots" || key == "max_slots" || key == "max-slots") {
        const auto count = positive_count(value);
        if (!count) {
          result.problems.push_back(error(where, key + "=" + value + ": a count from 1 to " + std::to_string(kMaxSlots)));
        } else if (key == "slots") {
          host.slots = *count;
        }
      } else {
        result.problems.push_back(error(where, "'" + word + "': an Open MPI hostfile line is 'host [slots=N] [max_slots=N]'"));
      }
    }
    result.value.push_back(std::move(host));
  }
  if (result.value.empty() && result.problems.empty()) {
    result.problems.push_back(error(display_name, "names no host"));
  }
  return result;
}

Loaded<std::vector<HostSlots>> read_hostfile(const std::string& path) {
  if (const auto why = why_unreadable(path)) {  // /dev/zero was read until memory ran out
    Loaded<std::vector<HostSlots>> failed;
    failed.problems.push_back(error(path, *why));
    return failed;
  }
  std::ifstream in(path);
  if (!in) {
    Loaded<std::vector<HostSlots>> failed;
    failed.problems.push_back(error(path, "cannot be read"));
    return failed;
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_hostfile(text.str(), path);
}

std::optional<std::int64_t> hostfile_slots(const std::vector<HostSlots>& hosts) {
  std::int64_t total = 0;
  for (const HostSlots& h : hosts) {
    if (!h.slots) return std::nullopt;
    total += *h.slots;
  }
  return total;
}

Loaded<SlurmJob> slurm_job(const PlanFile& plan, const std::string& plan_path, SlurmOptions options,
                           std::vector<std::string> command) {
  Loaded<SlurmJob> result;
  SlurmJob& job = result.value;
  job.ranks = plan.plan.mesh.world_size();
  SlurmOptions& o = options;
  if (o.tasks_per_node <= 0) {
    o.tasks_per_node = std::min(std::max<std::int64_t>(1, plan.cluster.devices_per_node), job.ranks);
    if (o.nodes > 0 && job.ranks % o.nodes == 0) o.tasks_per_node = job.ranks / o.nodes;
  }
  if (job.ranks % o.tasks_per_node != 0) {
    result.problems.push_back(error("--tasks-per-node", std::to_string(o.tasks_per_node) + " does not divide the " +
                                                            std::to_string(job.ranks) + " ranks of " +
                                                            plan.plan.mesh.to_string()));
    return result;
  }
  if (o.nodes <= 0) o.nodes = job.ranks / o.tasks_per_node;
  if (o.nodes * o.tasks_per_node != job.ranks) {
    result.problems.push_back(error("--nodes", std::to_string(o.nodes) + " nodes x " + std::to_string(o.tasks_per_node) +
                                                   " tasks per node is not the plan's " + std::to_string(job.ranks) +
                                                   " ranks (" + plan.plan.mesh.to_string() + ")"));
    return result;
  }
  if (plan.cluster.max_nodes && o.nodes > *plan.cluster.max_nodes) {
    result.problems.push_back(error("--nodes", std::to_string(o.nodes) + " nodes: the plan's cluster " + plan.cluster.name +
                                                   " has " + std::to_string(*plan.cluster.max_nodes)));
  }
  if (o.gpus_per_node < 0) o.gpus_per_node = gpu_cluster(plan.cluster) ? o.tasks_per_node : 0;
  if (o.job_name.empty()) o.job_name = "meshplan-" + sbatch_word(std::filesystem::path(plan_path).stem().string());
  if (o.output.empty()) o.output = sbatch_word(o.job_name) + "-%j.out";
  // Each goes on an #SBATCH line as one word: no spaces, quotes or line breaks.
  const std::pair<const char*, const std::string*> words[] = {{"--job-name", &o.job_name}, {"--partition", &o.partition},
                                                              {"--account", &o.account},   {"--time", &o.time},
                                                              {"--output", &o.output},     {"--srun-mpi", &o.srun_mpi}};
  for (const auto& [flag, value] : words) {
    if (sbatch_word(*value) != *value) {
      result.problems.push_back(error(flag, "'" + *value + "': one word without spaces, quotes, '#' or control characters"));
    }
  }
  if (!o.time.empty() && sbatch_word(o.time) == o.time && !slurm_time_limit(o.time)) {
    result.problems.push_back(error("--time", "'" + o.time +
                                                  "' is not a Slurm time limit: minutes, minutes:seconds, hours:minutes:seconds, "
                                                  "days-hours, days-hours:minutes, days-hours:minutes:seconds or UNLIMITED"));
  }
  if (o.srun_mpi.empty()) result.problems.push_back(error("--srun-mpi", "names srun's MPI plugin (pmix, pmi2, none)"));
  job.options = std::move(o);
  job.command = std::move(command);
  return result;
}

std::string shell_quoted(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") ==
                          std::string::npos) {
    return arg;
  }
  std::string q = "'";
  for (const char c : arg) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string sbatch_script(const SlurmJob& job) {
  const SlurmOptions& o = job.options;
  std::ostringstream s;
  s << "#!/bin/bash\n"
    << "# " << job.ranks << " ranks of a meshplan plan as one Slurm job; written by `meshplan launch --slurm`\n"
    << "# (docs/clusters.md). Submit with: sbatch <this file>\n"
    << "#SBATCH --job-name=" << o.job_name << "\n"
    << "#SBATCH --nodes=" << o.nodes << "\n"
    << "#SBATCH --ntasks-per-node=" << o.tasks_per_node << "\n";
  if (o.gpus_per_node > 0) s << "#SBATCH --gpus-per-node=" << o.gpus_per_node << "\n";
  if (o.cpus_per_task > 0) s << "#SBATCH --cpus-per-task=" << o.cpus_per_task << "\n";
  if (!o.partition.empty()) s << "#SBATCH --partition=" << o.partition << "\n";
  if (!o.account.empty()) s << "#SBATCH --account=" << o.account << "\n";
  if (!o.time.empty()) s << "#SBATCH --time=" << o.time << "\n";
  const bool plain_directory = sbatch_word(o.working_directory) == o.working_directory;
  if (!o.working_directory.empty() && plain_directory) s << "#SBATCH --chdir=" << o.working_directory << "\n";
  s << "#SBATCH --output=" << o.output << "\n"
    << "set -euo pipefail\n";
  if (!o.working_directory.empty() && !plain_directory) {  // not expressible on an #SBATCH line
    s << "cd " << shell_quoted(o.working_directory) << "\n";
  }
  if (o.cpus_per_task > 0) {
    s << "# each rank's kernel threads: the CPUs Slurm gives its task\n"
      << "export OMP_NUM_THREADS=" << o.cpus_per_task << " OPENBLAS_NUM_THREADS=" << o.cpus_per_task << "\n";
  }
  s << "# one task per rank; the ranks find each other through Slurm's PMI (no mpirun)\n"
    << "srun --mpi=" << o.srun_mpi;
  for (const std::string& arg : job.command) s << " " << shell_quoted(arg);
  s << "\n";
  return s.str();
}

}  // namespace meshplan::exec
