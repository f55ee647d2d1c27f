// `meshplan commbench`: nccl-tests' tables over this build's communicator
// (MPI), run under mpirun like any rank program:
//
//   mpirun -np 2 meshplan commbench --max-bytes 16M
//
// For each collective and each size from --min-bytes to --max-bytes
// (x --step-factor), the median time over --iters iterations (after
// --warmup), the slowest rank's, with algbw and busbw and a correctness check
// of every iteration's result; definitions in executor/comm/collective_bench.hpp
// and docs/executor-parallel.md ("Communication"). Rank 0 prints; the others
// are silent. Started without mpirun it still runs, on one rank, and says that
// the numbers then measure no communication (send_recv needs 2 ranks and is
// skipped). Exit status 1 when any result was wrong.
//
// --backend nccl times the NCCL communicator on GPU buffers instead, one GPU
// per rank (commbench_nccl.hpp), with the same flags, sizes and table. This
// file is built twice: into `meshplan`, which for --backend nccl execs
// meshplan-commbench-nccl beside it with the same flags (so that meshplan
// never loads the CUDA runtime or NCCL), and into that program
// (MESHPLAN_COMMBENCH_NCCL_BUILD), which opens the NCCL world. Without that
// program, --backend nccl exits 2 and says why.
#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/sibling_program.hpp"
#include "executor/comm/collective_bench.hpp"
#include "executor/comm/world.hpp"
#if defined(MESHPLAN_COMMBENCH_NCCL_BUILD)
#include "cli/commbench_nccl.hpp"
#endif

namespace meshplan::cli {
namespace {

namespace comm = exec::comm;

struct CommbenchFlags {
  std::string backend = "mpi";  // mpi (host buffers) or nccl (GPU buffers, meshplan-commbench-nccl)
  std::string min_bytes = "8";
  std::string max_bytes = "16M";
  int step_factor = 2;
  int iters = 20;
  int warmup = 5;
  std::vector<std::string> collectives{"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all",
                                       "send_recv"};
  std::string type = "f32";
  double comm_timeout_s = comm::default_timeout.count();
  bool json = false;
};

// "64", "4K", "16M", "1G" (binary multiples, an optional trailing B).
std::optional<std::int64_t> parse_bytes(std::string text) {
  if (!text.empty() && (text.back() == 'B' || text.back() == 'b')) text.pop_back();
  if (text.empty()) return std::nullopt;
  std::int64_t multiplier = 1;
  switch (std::toupper(static_cast<unsigned char>(text.back()))) {
    case 'K': multiplier = 1LL << 10; break;
    case 'M': multiplier = 1LL << 20; break;
    case 'G': multiplier = 1LL << 30; break;
    default: break;
  }
  if (multiplier != 1) text.pop_back();
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 12) {
    return std::nullopt;
  }
  std::int64_t bytes = 0;  // 12 digits times 2^30 can pass int64: "17179869185G" wrapped to 1G
  if (__builtin_mul_overflow(std::stoll(text), multiplier, &bytes)) return std::nullopt;
  return bytes;
}

std::optional<Collective> parse_collective(const std::string& name) {
  for (const Collective c : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                             Collective::broadcast, Collective::all_to_all, Collective::send_recv}) {
    if (to_string(c) == name) return c;
  }
  return std::nullopt;
}

std::optional<comm::DataType> parse_type(const std::string& name) {
  for (const auto t : {comm::DataType::f32, comm::DataType::f64, comm::DataType::i32, comm::DataType::i64}) {
    if (comm::to_string(t) == name) return t;
  }
  return std::nullopt;
}

std::string bus_factor_formula(Collective collective) {
  switch (collective) {
    case Collective::all_reduce: return "2(n-1)/n";
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::all_to_all: return "(n-1)/n";
    case Collective::broadcast:
    case Collective::send_recv: return "1";
  }
  return "?";
}

struct Validated {
  std::int64_t min_bytes = 0, max_bytes = 0;
  std::vector<Collective> collectives;
  comm::DataType type = comm::DataType::f32;
};

Loaded<Validated> validate(const CommbenchFlags& f) {
  Loaded<Validated> out;
  auto& problems = out.problems;
  const auto min_bytes = parse_bytes(f.min_bytes), max_bytes = parse_bytes(f.max_bytes);
  if (!min_bytes || *min_bytes < 1) {
    problems.push_back({Severity::error, "--min-bytes", "'" + f.min_bytes + "' is not a size like 8, 4K, 16M"});
  }
  if (!max_bytes || *max_bytes < 1 || *max_bytes > (1LL << 31)) {
    problems.push_back({Severity::error, "--max-bytes", "'" + f.max_bytes + "' is not a size from 1 to 2G"});
  }
  if (min_bytes && max_bytes && *min_bytes > *max_bytes) {
    // Named together: either may be the one given (--max-bytes 7 blamed the default --min-bytes 8).
    problems.push_back({Severity::error, "--min-bytes and --max-bytes",
                        f.min_bytes + " to " + f.max_bytes + " is no range: --min-bytes (default 8) must be at most "
                                                             "--max-bytes (default 16M)"});
  }
  if (f.step_factor < 2) problems.push_back({Severity::error, "--step-factor", "must be 2 or more"});
  if (f.iters < 1) problems.push_back({Severity::error, "--iters", "must be 1 or more"});
  if (f.warmup < 0) problems.push_back({Severity::error, "--warmup", "must be 0 or more"});
  if (const std::string why = exec::comm::timeout_problem(f.comm_timeout_s); !why.empty()) {
    problems.push_back({Severity::error, "--comm-timeout", why});
  }
  for (const auto& name : f.collectives) {
    if (const auto c = parse_collective(name)) {
      out.value.collectives.push_back(*c);
    } else {
      problems.push_back({Severity::error, "--collectives",
                          "'" + name + "' is not one of all_reduce, all_gather, reduce_scatter, broadcast, "
                                       "all_to_all, send_recv"});
    }
  }
  if (const auto t = parse_type(f.type)) {
    out.value.type = *t;
  } else {
    problems.push_back({Severity::error, "--type", "'" + f.type + "' is not one of f32, f64, i32, i64"});
  }
  out.value.min_bytes = min_bytes.value_or(0);
  out.value.max_bytes = max_bytes.value_or(0);
  return out;
}

std::string table_row(const comm::CollectiveTiming& t) {
  char line[160];
  std::snprintf(line, sizeof line, "%12lld %12lld %6s %12.2f %12.2f %12.3f %12.3f  %s", static_cast<long long>(t.bytes),
                static_cast<long long>(t.count), comm::to_string(t.type).c_str(), t.time_s * 1e6, t.min_time_s * 1e6,
                t.algbw_bytes_per_s / 1e9, t.busbw_bytes_per_s / 1e9,
                t.correct ? "ok" : ("WRONG (" + std::to_string(t.wrong_elements) + " elements)").c_str());
  return line;
}

#if !defined(MESHPLAN_COMMBENCH_NCCL_BUILD)
int cannot_run_nccl(const std::string& why) {
  std::cerr << "meshplan commbench: --backend nccl: " << why
            << "; nothing was measured. `meshplan commbench` (--backend mpi) times the MPI communicator\n";
  return exit_bad_input;
}

// `meshplan` itself: exec meshplan-commbench-nccl with the same flags (this process has not started MPI).
int exec_commbench_nccl(const CommbenchFlags& f) {
#if defined(MESHPLAN_COMMBENCH_NCCL_PROGRAM)
  std::string collectives;
  for (const auto& c : f.collectives) collectives += (collectives.empty() ? "" : ",") + c;
  char timeout[32];
  std::snprintf(timeout, sizeof timeout, "%.17g", f.comm_timeout_s);
  std::vector<std::string> args = {"commbench", "--backend", "nccl", "--min-bytes", f.min_bytes,
                                   "--max-bytes", f.max_bytes, "--step-factor", std::to_string(f.step_factor),
                                   "--iters", std::to_string(f.iters), "--warmup", std::to_string(f.warmup),
                                   "--collectives", collectives, "--type", f.type, "--comm-timeout", timeout};
  if (f.json) args.emplace_back("--json");
  return cannot_run_nccl(exec_beside_meshplan(MESHPLAN_COMMBENCH_NCCL_PROGRAM, args));
#else
  (void)f;
  return cannot_run_nccl("this meshplan was built without NCCL (MESHPLAN_CUDA=OFF, or CMake found no CUDA toolkit "
                         "or no NCCL)");
#endif
}
#endif

int run_commbench(const CommbenchFlags& flags) {
#if !defined(MESHPLAN_COMMBENCH_NCCL_BUILD)
  if (flags.backend == "nccl") return exec_commbench_nccl(flags);
#endif
  auto world = comm::open_world();
  const bool speaks = !world.value || world.value->rank() == 0;
  if (!world.ok()) {
    for (const auto& p : world.problems) std::cerr << "meshplan commbench: " << describe(p) << "\n";
    return exit_bad_input;
  }
  const auto valid = validate(flags);
  if (!valid.ok()) {
    if (speaks) {
      for (const auto& p : valid.problems) std::cerr << "meshplan commbench: " << describe(p) << "\n";
    }
    return exit_bad_input;
  }
  world.value->set_timeout(std::chrono::duration<double>(flags.comm_timeout_s));
  comm::Communicator* measured = world.value.get();
  comm::BenchBuffers* buffers = nullptr;  // host memory
  std::string over = comm::built_with_mpi() ? "MPI" : "no MPI (this build runs one rank)";
#if defined(MESHPLAN_COMMBENCH_NCCL_BUILD)
  Loaded<NcclBench> nccl;
  if (flags.backend == "nccl") {
    nccl = open_nccl_bench(*world.value);
    if (!nccl.ok()) {
      if (world.value->rank() == nccl.value.reporting_rank) {
        for (const auto& p : nccl.problems) std::cerr << "meshplan commbench: " << describe(p) << "\n";
      }
      return exit_bad_input;
    }
    measured = nccl.value.group.get();
    buffers = nccl.value.buffers.get();
    over = nccl.value.description;
  }
#endif
  auto& group = *measured;
  const int n = group.size();
  const char* rerun = flags.backend == "nccl" ? "mpirun -np 2 meshplan commbench --backend nccl"
                                              : "mpirun -np 2 meshplan commbench";

  std::vector<std::int64_t> sizes;
  for (std::int64_t s = valid.value.min_bytes; s <= valid.value.max_bytes; s *= flags.step_factor) sizes.push_back(s);

  if (speaks && !flags.json) {
    std::printf("# meshplan commbench: %d rank%s over %s; %s; %d iterations after %d warm-up\n", n,
                n == 1 ? "" : "s", over.c_str(), flags.type.c_str(), flags.iters, flags.warmup);
    std::printf("# time: median over iterations, max over ranks (min: the fastest iteration); algbw = size / time;"
                " busbw = algbw x F_bus\n");
    if (n == 1) {
      std::printf("# one rank: collectives only copy, so these times measure no communication;\n"
                  "# run under mpirun (%s) to measure %s. send_recv is skipped.\n",
                  rerun, flags.backend == "nccl" ? "NCCL" : "MPI");
    }
  }
  nlohmann::json results = nlohmann::json::array();
  bool all_correct = true;
  for (const Collective collective : valid.value.collectives) {
    if (collective == Collective::send_recv && n < 2) continue;
    if (speaks && !flags.json) {
      std::printf("#\n# %s (F_bus = %s = %.3f; %s)\n", to_string(collective).c_str(),
                  bus_factor_formula(collective).c_str(), bus_bandwidth_factor(collective, n),
                  collective == Collective::send_recv ? "ping-pong between ranks 0 and 1, time one way"
                                                      : "all ranks");
      std::printf("# %10s %12s %6s %12s %12s %12s %12s  %s\n", "size_B", "count", "type", "time_us", "min_us",
                  "algbw_GB/s", "busbw_GB/s", "check");
      std::fflush(stdout);
    }
    std::int64_t previous = -1;
    for (const std::int64_t size : sizes) {
      // Sizes that round to the same whole-element buffer are measured once.
      if (comm::collective_size_bytes(collective, size, n, valid.value.type) == previous) continue;
      const auto t = comm::measure_collective(group, collective, size, flags.iters, flags.warmup, valid.value.type,
                                               buffers);
      previous = t.bytes;
      all_correct = all_correct && t.correct;
      if (!speaks) continue;
      if (flags.json) {
        results.push_back({{"collective", to_string(collective)},
                           {"bytes", t.bytes},
                           {"count", t.count},
                           {"type", comm::to_string(t.type)},
                           {"ranks", t.ranks},
                           {"time_us", t.time_s * 1e6},
                           {"min_time_us", t.min_time_s * 1e6},
                           {"algbw_GBps", t.algbw_bytes_per_s / 1e9},
                           {"busbw_GBps", t.busbw_bytes_per_s / 1e9},
                           {"bus_factor", bus_bandwidth_factor(collective, n)},
                           {"correct", t.correct},
                           {"wrong_elements", t.wrong_elements}});
      } else {
        std::printf("  %s\n", table_row(t).c_str());
        std::fflush(stdout);
      }
    }
  }
  if (speaks && flags.json) {
    const nlohmann::json out = {{"ranks", n},
                                {"backend", flags.backend},
                                {"over", over},
                                {"mpi", comm::built_with_mpi()},
                                {"type", flags.type},
                                {"iterations", flags.iters},
                                {"warmup", flags.warmup},
                                {"time", "median over iterations, max over ranks"},
                                {"results", results}};
    std::cout << out.dump(2) << "\n";
  }
  if (!all_correct) {
    if (speaks) std::cerr << "meshplan commbench: some results were wrong (see the check column)\n";
    return exit_does_not_fit;
  }
  return exit_ok;
}

}  // namespace

Command add_commbench_command(CLI::App& app) {
  auto flags = std::make_shared<CommbenchFlags>();
  auto* command = app.add_subcommand(
      "commbench", "Time the communicator's collectives by size, nccl-tests style (run under mpirun -np N)");
  command->add_option("--backend", flags->backend,
                      "mpi: the MPI communicator on host buffers; nccl: the NCCL communicator on GPU buffers, one GPU "
                      "per rank (needs the CUDA build's meshplan-commbench-nccl)")
      ->check(CLI::IsMember({"mpi", "nccl"}))
      ->capture_default_str();
  command->add_option("--min-bytes", flags->min_bytes, "Smallest size (bytes; K, M, G suffixes)")
      ->capture_default_str();
  command->add_option("--max-bytes", flags->max_bytes, "Largest size (bytes; K, M, G suffixes)")
      ->capture_default_str();
  command->add_option("--step-factor", flags->step_factor, "Multiply the size by this between rows")
      ->capture_default_str();
  command->add_option("--iters", flags->iters, "Timed iterations per size")->capture_default_str();
  command->add_option("--warmup", flags->warmup, "Untimed iterations before them")->capture_default_str();
  command->add_option("--collectives", flags->collectives,
                      "Which: all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, send_recv")
      ->delimiter(',')
      ->capture_default_str();
  command->add_option("--type", flags->type, "Element type: f32, f64, i32, i64")->capture_default_str();
  command->add_option("--comm-timeout", flags->comm_timeout_s,
                      "Seconds a rank waits in one operation before the watchdog stops the job")
      ->capture_default_str();
  command->add_flag("--json", flags->json, "Print the results as JSON instead of tables");
  return [flags]() { return run_commbench(*flags); };
}

}  // namespace meshplan::cli
