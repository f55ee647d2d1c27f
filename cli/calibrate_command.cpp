// `meshplan calibrate`: measures this machine and writes the device and
// cluster presets `local-cpu` into the user's presets folder, which preset
// lookup searches before the built-in one (model/presets.hpp). From then on
// `plan`/`explain --cluster local-cpu` plan for this machine, and `train`
// reports `mfu` against the rate measured here.
//
// How the measurements become preset figures (docs/presets.md, "Calibrating
// local-cpu", says why):
//   device        = one physical core (one MPI rank each, as the built-in
//                   local-cpu says), so GEMMs are timed on one BLAS thread;
//   peak fp32     = the best GEMM rate measured over the size ladder (among
//                   repeats of at least 1 ms: see kMinPeakRepeatSeconds), and
//   gemm_fraction = 1, so peak x fraction (what the planner divides GEMM
//                   FLOPs by) is exactly the measured rate, and mfu is the
//                   share of that rate a training step reaches;
//   bf16          = the same for kernels::matmul_forward_bf16 (oneDNN, the
//                   matmul `train --precision bf16` runs, operand rounding
//                   included), written only when this build and CPU have it
//                   and it beats fp32 (`--precision auto` picks bf16 when a
//                   device lists it); the CPU's native bf16 flags
//                   (avx512_bf16, amx_bf16) are recorded beside it;
//   bandwidth     = STREAM triad on all CPUs / cores (a rank's share when
//                   every core streams), memory_bandwidth_fraction = 1;
//   memory        = MemTotal / cores;  devices_per_node = physical cores.
//   gemm_curve    = fraction of that peak each GEMM of a ladder reaches with
//                   cold operands while every core runs one (time_gemm_cold),
//                   by arithmetic intensity, close points merged;
//   op_bandwidth_gb_per_s = per op class (GELU, LayerNorm, residual, the
//                   optimizer step), the executor's kernel timed cold on every
//                   core, as GB/s of the traffic the cost model counts.
//   threaded      = with 2 or more cores, the same two figures measured as
//                   one process of that many OpenBLAS/OpenMP threads, per
//                   core (what a one-rank job on every core gets of each).
//   intra-node link = latency and bus bandwidth fitted to all_reduce,
//                   all_gather, reduce_scatter and send/recv timed by size
//                   (executor/comm/collective_bench.hpp), when calibrate runs
//                   under an MPI launcher with 2 or more ranks
//                   (`mpirun -np 2 meshplan calibrate`); every rank times the
//                   collectives, then rank 0 alone measures the rest and
//                   writes the files while the others wait without spinning.
//                   With one rank the link figures stay the built-in
//                   placeholder's, marked as such.
//
// `--backend cuda` measures one GPU instead and writes a device preset
// (cli/calibrate_cuda.hpp); `--from FILE` measures nothing (calibrate_from.hpp).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli/calibrate_cuda.hpp"
#include "cli/calibrate_from.hpp"
#include "cli/calibrate_report.hpp"
#include "cli/commands.hpp"
#include "executor/calibrate/local_preset.hpp"
#include "executor/calibrate/run.hpp"
#include "executor/comm/world.hpp"
#include "model/atomic_file.hpp"
#include "model/presets.hpp"
#include "model/problem.hpp"

namespace meshplan::cli {
namespace {
namespace fs = std::filesystem;
using exec::Calibration;
using exec::PresetFigures;

struct CalibrateFlags {
  std::string out;
  bool quick = false;
  bool json = false;
  CalibrateFromFlags from;  // --from FILE: presets from measurements made elsewhere
  std::string backend = "cpu";  // --backend: cpu (this machine's cores) or cuda (one GPU, calibrate_cuda.hpp)
  int device = 0;               // --device, with --backend cuda
  std::string jsonl;            // --jsonl, with --backend cuda
};

// --backend cuda: the flags it shares with --from (--name, --base) and its own.
int run_calibrate_cuda_flags(const CalibrateFlags& flags, CLI::App& command) {
  for (const char* other : {"--from", "--json"}) {
    if (command.count(other) > 0) {
      std::cerr << "meshplan calibrate: " << other << " does not go with --backend cuda\n";
      return exit_bad_input;
    }
  }
  CalibrateCudaFlags cuda;
  cuda.device = flags.device;
  cuda.quick = flags.quick;
  cuda.out = flags.out;
  cuda.name = flags.from.name;
  cuda.base = flags.from.base;
  cuda.jsonl = flags.jsonl;
  return run_calibrate_cuda(cuda);
}

// The output folder and its devices/ and clusters/ subfolders, created now so
// that a bad --out fails before minutes of measuring.
Problems prepare_out(const std::string& out) {
  Problems problems;
  if (out.empty()) {
    problems.push_back({Severity::error, "--out",
                        "no user presets folder: set MESHPLAN_USER_PRESETS, XDG_CONFIG_HOME or HOME, or give --out DIR"});
    return problems;
  }
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::is_directory(out, ec)) {
    problems.push_back({Severity::error, "--out", "'" + out + "' exists and is not a folder"});
    return problems;
  }
  for (const char* sub : {"devices", "clusters"}) {
    const fs::path folder = fs::path(out) / sub;
    fs::create_directories(folder, ec);
    std::error_code check;
    if (ec || !fs::is_directory(folder, check)) {
      problems.push_back({Severity::error, "--out",
                          "cannot create the folder '" + folder.string() + "'" + (ec ? ": " + ec.message() : std::string())});
      return problems;
    }
  }
  return problems;
}

int run_calibrate(const CalibrateFlags& flags) {
  auto report = [](const Problems& problems) {
    for (const auto& p : problems) std::cerr << "meshplan calibrate: " << describe(p) << "\n";
  };
  // Under an MPI launcher: every rank times the collectives, rank 0 alone does the rest.
  std::unique_ptr<exec::comm::Communicator> world;
  if (exec::comm::started_by_mpi_launcher()) {
    auto opened = exec::comm::open_world();
    if (!opened.ok()) {
      report(opened.problems);
      return exit_bad_input;
    }
    world = std::move(opened.value);
    world->set_timeout(std::chrono::duration<double>(3600.0));
  }
  const bool leader = !world || world->rank() == 0;
  const bool several = world && world->size() > 1;
  const std::string out = flags.out.empty() ? user_presets_dir() : flags.out;
  std::int32_t bad = 0;
  if (leader) {
    if (const Problems problems = prepare_out(out); has_errors(problems)) {
      report(problems);
      bad = 1;
    }
  }
  if (several) world->all_reduce(&bad, 1, exec::comm::DataType::i32, exec::comm::ReduceOp::max);
  if (bad != 0) return exit_bad_input;
  const std::string when = exec::utc_now();
  const exec::Say say = [](const std::string& line) { std::cerr << "calibrate: " << line << std::endl; };
  Calibration calibration;
  if (several) {
    if (leader) std::cerr << "calibrate: [collectives] " << world->size() << " ranks" << std::endl;
    exec::time_collectives(*world, flags.quick, calibration, say);
    if (!leader) {
      exec::wait_for_leader(*world);
      return exit_ok;
    }
    exec::widen_affinity_to_all_cpus();
  }
  // Rank 0 releases the waiting ranks however it leaves from here.
  struct Release {
    exec::comm::Communicator* world;
    ~Release() {
      if (world == nullptr) return;
      const std::int32_t done = 1;
      for (int r = 1; r < world->size(); ++r) world->send(&done, 1, exec::comm::DataType::i32, r, 7);
    }
  } release{several ? world.get() : nullptr};
  const auto steps = exec::phases(say);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    std::cerr << "calibrate: [" << i + 1 << "/" << steps.size() << "] " << steps[i].name << std::endl;
    steps[i].run(flags.quick, calibration);
  }
  const PresetFigures figures = exec::figures_of(calibration);
  const std::string device_path = (fs::path(out) / "devices" / "local-cpu.yaml").string();
  const std::string cluster_path = (fs::path(out) / "clusters" / "local-cpu.yaml").string();
  Problems problems = write_file_atomically(
      device_path, [&](std::ostream& o) { o << exec::device_yaml(calibration, figures, when, flags.quick); });
  if (!has_errors(problems)) {
    problems = write_file_atomically(
        cluster_path, [&](std::ostream& o) { o << exec::cluster_yaml(calibration, figures, when, flags.quick); });
  }
  if (has_errors(problems)) {
    report(problems);
    return exit_bad_input;
  }
  const std::vector<std::string> files = {device_path, cluster_path};
  if (flags.json) {
    std::cout << to_json(calibration, figures, files).dump(2) << "\n";
  } else {
    print_table(std::cout, calibration, figures, files);
  }
  return exit_ok;
}

}  // namespace

Command add_calibrate_command(CLI::App& app) {
  auto* command = app.add_subcommand(
      "calibrate", "Measure this machine (GEMM rate by size, memory bandwidth, cores, memory; with cold operands on "
                   "every core the GEMM efficiency by arithmetic intensity and the rates of GELU, LayerNorm, residual and "
                   "optimizer kernels; under mpirun with 2 or more ranks also the MPI collectives) and write the device "
                   "and cluster presets local-cpu; with --backend cuda, measure one GPU with meshplan's own CUDA kernels "
                   "(GEMMs, attention, memory-bound ops, AdamW, device copy), keep the rows as JSON lines and write a "
                   "device preset from them; or, with --from FILE, write a device preset from measurements made on another "
                   "device (a GPU), or a cluster preset from nccl-tests output");
  auto flags = std::make_shared<CalibrateFlags>();
  command->add_option("--out", flags->out,
                      "Presets folder to write devices/local-cpu.yaml and clusters/local-cpu.yaml into (default: "
                      "$MESHPLAN_USER_PRESETS, else $XDG_CONFIG_HOME/meshplan/presets, else "
                      "~/.config/meshplan/presets, which preset lookup searches first)");
  command->add_flag("--quick", flags->quick,
                    "A run of a few seconds: small GEMMs and arrays (for tests; rougher figures); with --backend cuda, "
                    "fewer shapes");
  command->add_option("--backend", flags->backend,
                      "What to measure: cpu (this machine's cores, the local-cpu presets; the default) or cuda (one "
                      "GPU with meshplan's CUDA kernels: writes devices/NAME.yaml into --out and the measured rows to "
                      "--jsonl; needs a CUDA build and a GPU, else exits 2 and says why)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  command->add_option("--device", flags->device, "With --backend cuda: the CUDA device to measure (default 0)");
  command->add_option("--jsonl", flags->jsonl,
                      "With --backend cuda: where to write the measured rows (default: OUT/measured/NAME.jsonl), the "
                      "format --from reads");
  command->add_flag("--json", flags->json, "Print the measurements and the written figures as one JSON object");
  CalibrateFromFlags& from = flags->from;
  auto* from_file = command->add_option(
      "--from", from.file,
      "Instead of measuring here: write a device preset from measurements made elsewhere (one JSON object per line: "
      "device, ceiling, gemm, attention and op rows; docs/presets.md, \"Calibrating from measurements\"), or with "
      "--nccl-tests a cluster preset whose link is fitted to nccl-tests output");
  auto needs_from = [&](CLI::Option* option) { option->needs(from_file); };
  needs_from(command->add_flag("--nccl-tests", from.nccl_tests,
                               "--from FILE is nccl-tests output (all_reduce_perf, all_gather_perf, reduce_scatter_perf, "
                               "sendrecv_perf): fit the link's latency and bus bandwidth (needs --base CLUSTER; the "
                               "intra-node link when every rank ran on one host, else the inter-node link)"));
  needs_from(command->add_option("--collective", from.collective,
                                 "With --nccl-tests: the collective timed (all_reduce, all_gather, reduce_scatter, "
                                 "send_recv), when the text does not name its program"));
  command->add_option("--name", from.name,
                      "Name of the written preset (with --from, default: the --base preset's; with --backend cuda, "
                      "default: local-cuda)");
  needs_from(command->add_option("-o,--output", from.output, "Write the preset to FILE (default: stdout)"));
  command->add_option(
      "--base", from.base,
      "Device (or with --nccl-tests cluster) preset whose figures the file does not measure are kept: dense peaks, "
      "memory bandwidth, the stack's context and workspace; for a device, flags override it. With --backend cuda, "
      "default: the built-in preset for the GPU's name (h100-sxm, h200, a100-80g, a100-40g, v100-32g)");
  needs_from(command->add_option("--peak-tflops", from.peak_tflops,
                                 "Dense datasheet peaks the file cannot measure, e.g. bf16=989.4,fp32=67 (the GEMM rows "
                                 "are fractions of the bf16 peak)"));
  needs_from(command->add_option("--memory-bandwidth-gb-per-s", from.memory_bandwidth_gb_per_s,
                                 "Datasheet memory bandwidth (the device copy is a fraction of it)"));
  needs_from(command->add_option("--memory-gib", from.memory_gib,
                                 "Device memory, in place of the file's device row (mem_bytes) or the base's"));
  needs_from(command->add_option("--source", from.source, "The preset's source: text (default: the base's)"));
  // --from measures nothing here: the measuring flags do not go with it.
  for (const char* measuring : {"--quick", "--json", "--out"}) from_file->excludes(command->get_option(measuring));
  return [flags, command]() {
    if (flags->backend == "cuda") return run_calibrate_cuda_flags(*flags, *command);
    for (const char* cuda_only : {"--device", "--jsonl"}) {
      if (command->count(cuda_only) > 0) {
        std::cerr << "meshplan calibrate: " << cuda_only << " goes with --backend cuda\n";
        return exit_bad_input;
      }
    }
    if (flags->from.file.empty()) {
      for (const char* from_only : {"--name", "--base"}) {
        if (command->count(from_only) > 0) {
          std::cerr << "meshplan calibrate: " << from_only << " goes with --from FILE or --backend cuda\n";
          return exit_bad_input;
        }
      }
      return run_calibrate(*flags);
    }
    return run_calibrate_from(flags->from);
  };
}

}  // namespace meshplan::cli
