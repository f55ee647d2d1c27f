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
//   bf16          = the same for cblas_sbgemm, written only when the BLAS has
//                   it and it beats fp32 (`--precision auto` picks bf16 when
//                   a device lists it);
//   bandwidth     = STREAM triad on all CPUs / cores (a rank's share when
//                   every core streams), memory_bandwidth_fraction = 1;
//   memory        = MemTotal / cores;  devices_per_node = physical cores.
//   intra-node link = latency and bus bandwidth fitted to all_reduce,
//                   all_gather, reduce_scatter and send/recv timed by size
//                   (executor/comm/collective_bench.hpp), when calibrate runs
//                   under an MPI launcher with 2 or more ranks
//                   (`mpirun -np 2 meshplan calibrate`); every rank times the
//                   collectives, then rank 0 alone measures the rest and
//                   writes the files while the others wait without spinning.
//                   With one rank the link figures stay the built-in
//                   placeholder's, marked as such.
#include <cblas.h>
#include <sched.h>
#include <unistd.h>

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
#include <vector>

#include "cli/calibrate_measure.hpp"
#include "cli/commands.hpp"
#include "cli/text_report.hpp"
#include "executor/comm/collective_bench.hpp"
#include "executor/comm/world.hpp"
#include "model/atomic_file.hpp"
#include "model/presets.hpp"
#include "model/problem.hpp"

namespace meshplan::cli {
namespace {
namespace fs = std::filesystem;

struct CalibrateFlags {
  std::string out;
  bool quick = false;
  bool json = false;
};

// How much to measure: the full ladder, or a few seconds' worth (--quick).
struct Settings {
  std::vector<GemmShape> fp32_shapes;
  GemmShape all_cores_shape;
  double min_seconds = 0;
  int min_repeats = 0;
  double array_bytes = 0;
  int bandwidth_repeats = 0;
};

struct Calibration {
  MachineInfo machine;
  std::int64_t devices_per_node = 1;
  std::vector<GemmResult> fp32;            // one thread: one device
  std::optional<GemmResult> fp32_all_cores;  // every core at once, for the table
  std::vector<GemmResult> bf16;
  std::string bf16_note;
  std::optional<BandwidthResult> bandwidth_one_thread;
  std::optional<BandwidthResult> bandwidth_all_cpus;
  std::vector<exec::comm::CollectiveTiming> collectives;  // every group size, collective and size
  std::optional<LinkFit> intra_link;                       // fitted to `collectives`
};

// The figures written into the presets, rounded as written.
struct PresetFigures {
  double fp32_flops_per_s = 0;
  std::optional<double> bf16_flops_per_s;
  double memory_bytes = 0;
  double memory_bandwidth_bytes_per_s = 0;
  std::int64_t devices_per_node = 1;
};

std::string threads_text(int threads) { return std::to_string(threads) + (threads == 1 ? " thread" : " threads"); }

std::string six_digits(double value) { return format("%.6g", value); }
double as_written(double value) { return std::stod(six_digits(value)); }

Settings settings_for(bool quick, const MachineInfo& machine) {
  Settings s;
  const std::vector<std::int64_t> squares = quick ? std::vector<std::int64_t>{64, 128, 256, 512}
                                                  : std::vector<std::int64_t>{64, 128, 256, 512, 1024, 2048, 4096};
  for (auto n : squares) s.fp32_shapes.push_back({"square " + std::to_string(n), n, n, n});
  // Linear layers of the models the executor trains: mlp-fashion at micro-batch
  // 128 (784 -> 256 -> 10) and GPT-2 small (C = 768) on 1024 rows (B x T).
  s.fp32_shapes.push_back({"mlp-fashion fc1", 128, 784, 256});
  s.fp32_shapes.push_back({"mlp-fashion fc2", 128, 256, 10});
  if (quick) {
    s.fp32_shapes.push_back({"gpt2 fc (128 rows)", 128, 768, 3072});
  } else {
    s.fp32_shapes.push_back({"gpt2 qkv", 1024, 768, 2304});
    s.fp32_shapes.push_back({"gpt2 attn proj", 1024, 768, 768});
    s.fp32_shapes.push_back({"gpt2 fc", 1024, 768, 3072});
    s.fp32_shapes.push_back({"gpt2 fc proj", 1024, 3072, 768});
    s.fp32_shapes.push_back({"gpt2 lm head", 1024, 768, 50257});
  }
  const std::int64_t big = quick ? 512 : 4096;
  s.all_cores_shape = {"square " + std::to_string(big), big, big, big};
  s.min_seconds = quick ? 0.02 : 0.3;
  s.min_repeats = quick ? 3 : 2;
  // STREAM's rule: each array at least 4x the last-level cache; capped so
  // that calibrate never takes more than a sixteenth of the free memory.
  constexpr double mib = 1024.0 * 1024.0;
  const double wanted = std::max(4 * machine.last_level_cache_bytes, 64 * mib);
  s.array_bytes = quick ? 32 * mib : std::min({wanted, 512 * mib, machine.memory_available_bytes / 16});
  s.bandwidth_repeats = quick ? 2 : 5;
  return s;
}

// The collectives phase: every rank of `world` calls it. Groups of 2 ranks
// and of all of them (the first k world ranks), all_reduce, all_gather,
// reduce_scatter and send/recv from 1 KiB up; the fit is over every sample.
void time_collectives(exec::comm::Communicator& world, bool quick, Calibration& c) {
  const bool leader = world.rank() == 0;
  std::vector<std::int64_t> sizes;
  for (std::int64_t bytes = 1024; bytes <= (quick ? 4 : 64) * 1024 * 1024; bytes *= (quick ? 16 : 4)) sizes.push_back(bytes);
  std::vector<int> group_sizes = {2};
  if (world.size() > 2) group_sizes.push_back(world.size());
  std::vector<CollectiveSample> samples;
  for (const int k : group_sizes) {
    auto group = world.split(world.rank() < k ? 0 : 1, world.rank(), "calibrate" + std::to_string(k));
    if (world.rank() < k) {
      for (const Collective collective :
           {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter, Collective::send_recv}) {
        for (const std::int64_t bytes : sizes) {
          const int iterations = quick ? 5 : (bytes >= 16 * 1024 * 1024 ? 10 : 30);
          const auto t = exec::comm::measure_collective(*group, collective, bytes, iterations, quick ? 1 : 3);
          c.collectives.push_back(t);
          samples.push_back({collective, k, static_cast<double>(t.bytes), t.time_s});
          if (leader) {
            std::cerr << "calibrate: " << to_string(collective) << " " << k << " ranks "
                      << format("%.0f", static_cast<double>(t.bytes)) << " B: " << format("%.1f", t.time_s * 1e6)
                      << " us, busbw " << format("%.2f", t.busbw_bytes_per_s / 1e9) << " GB/s"
                      << (t.correct ? "" : " (WRONG RESULT)") << std::endl;
          }
        }
      }
    }
    world.barrier();
  }
  c.intra_link = fit_link(samples);
  if (leader && c.intra_link->ok) {
    std::cerr << "calibrate: intra-node link fit: latency " << format("%.2f", c.intra_link->latency_s * 1e6)
              << " us, bus bandwidth " << format("%.2f", c.intra_link->bandwidth_bytes_per_s / 1e9)
              << " GB/s (median error " << format("%.0f%%", 100 * c.intra_link->median_relative_error) << ", worst "
              << format("%.0f%%", 100 * c.intra_link->worst_relative_error) << ")" << std::endl;
  }
}

// A rank other than 0 after the collectives: waits for rank 0's word that the
// files are written, polling every 20 ms so that it leaves the cores to rank
// 0's GEMM and bandwidth measurements (an MPI receive would spin).
void wait_for_leader(exec::comm::Communicator& world) {
  std::int32_t status = 0;
  auto request = world.irecv(&status, 1, exec::comm::DataType::i32, 0, 7);
  while (!request->test()) ::usleep(20000);
}

// mpirun binds each rank to a core (Open MPI does for 2 ranks or fewer), but
// rank 0 goes on to measure the whole machine: every thread of the process
// (OpenBLAS starts its workers at load time) gets every online CPU back.
void widen_affinity_to_all_cpus() {
  cpu_set_t all;
  CPU_ZERO(&all);
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  for (long cpu = 0; cpu < online && cpu < CPU_SETSIZE; ++cpu) CPU_SET(static_cast<int>(cpu), &all);
  std::error_code ec;
  for (const auto& task : fs::directory_iterator("/proc/self/task", ec)) {
    const pid_t tid = static_cast<pid_t>(std::stol(task.path().filename().string()));
    ::sched_setaffinity(tid, sizeof all, &all);
  }
  ::sched_setaffinity(0, sizeof all, &all);
}

// One step of a calibration (rank 0 only when under a launcher; the collectives phase is time_collectives).
struct Phase {
  const char* name;
  std::function<void(bool quick, Calibration&)> run;
};

std::vector<Phase> phases() {
  auto say = [](const std::string& text) { std::cerr << "calibrate: " << text << std::endl; };
  return {
      {"machine",
       [say](bool, Calibration& c) {
         c.machine = probe_machine();
         c.devices_per_node = c.machine.physical_cores;
         say(c.machine.cpu_model + ", " + std::to_string(c.machine.physical_cores) + " physical cores, " +
             std::to_string(c.machine.logical_cpus) + " logical CPUs, " + gib(c.machine.memory_total_bytes) + " GiB");
         if (c.machine.load_average_1min > 0.25 * static_cast<double>(c.machine.logical_cpus)) {
           say("note: load average " + format("%.2f", c.machine.load_average_1min) +
               ": other work on this machine lowers every figure; calibrate when it is idle");
         }
       }},
      {"gemm-fp32",
       [say](bool quick, Calibration& c) {
         const Settings s = settings_for(quick, c.machine);
         for (const auto& shape : s.fp32_shapes) {
           c.fp32.push_back(time_gemm_fp32(shape, 1, s.min_seconds, s.min_repeats));
           say("fp32 GEMM " + shape.label + ": " + format("%.1f", c.fp32.back().flops_per_s() / 1e9) +
               " GFLOP/s (1 thread)");
         }
         const int cores = static_cast<int>(c.devices_per_node);
         c.fp32_all_cores = time_gemm_fp32(s.all_cores_shape, cores, s.min_seconds, s.min_repeats);
         say("fp32 GEMM " + s.all_cores_shape.label + ": " + format("%.1f", c.fp32_all_cores->flops_per_s() / 1e9) +
             " GFLOP/s (" + std::to_string(cores) + " threads)");
       }},
      {"gemm-bf16",
       [say](bool quick, Calibration& c) {
         if (!bf16_gemm_available()) {
           c.bf16_note = "not measured: this OpenBLAS does not export cblas_sbgemm (built without BUILD_BFLOAT16)";
           say("bf16 GEMM " + c.bf16_note);
           return;
         }
         const Settings s = settings_for(quick, c.machine);
         for (const auto& shape : s.fp32_shapes) {
           if (shape.label.rfind("square", 0) != 0) continue;
           if (auto r = time_gemm_bf16(shape, 1, s.min_seconds, s.min_repeats)) {
             c.bf16.push_back(*r);
             say("bf16 GEMM " + shape.label + ": " + format("%.1f", r->flops_per_s() / 1e9) + " GFLOP/s (1 thread)");
           }
         }
       }},
      {"memory",
       [say](bool quick, Calibration& c) {
         const Settings s = settings_for(quick, c.machine);
         c.bandwidth_one_thread = measure_bandwidth(s.array_bytes, 1, s.bandwidth_repeats);
         c.bandwidth_all_cpus = measure_bandwidth(s.array_bytes, static_cast<int>(c.machine.logical_cpus), s.bandwidth_repeats);
         for (const auto* b : {&*c.bandwidth_one_thread, &*c.bandwidth_all_cpus}) {
           say("memory bandwidth, " + format("%.0f", b->array_bytes / 1048576.0) + " MiB arrays, " + threads_text(b->threads) +
               ": copy " + format("%.1f", b->copy_bytes_per_s / 1e9) + " GB/s, triad " +
               format("%.1f", b->triad_bytes_per_s / 1e9) + " GB/s");
         }
       }},
  };
}

// The shortest best repeat whose rate can set the peak. A 128^3 GEMM takes
// about 20 us, a few ticks of a virtual machine's CPU clock, and one such
// repeat measured short by a tick reads as 1.3x the machine's real rate
// (205 GFLOP/s against a 166 GFLOP/s theoretical core on the development
// machine): the best of many tiny repeats is biased upwards, not a peak.
constexpr double kMinPeakRepeatSeconds = 1e-3;

// The best rate among repeats long enough to time (all of them when none is).
double best_rate(const std::vector<GemmResult>& results) {
  double best = 0, best_long = 0;
  for (const auto& r : results) {
    best = std::max(best, r.flops_per_s());
    if (r.best_s >= kMinPeakRepeatSeconds) best_long = std::max(best_long, r.flops_per_s());
  }
  return best_long > 0 ? best_long : best;
}

PresetFigures figures_of(const Calibration& c) {
  PresetFigures f;
  f.devices_per_node = c.devices_per_node;
  const double cores = static_cast<double>(c.devices_per_node);
  f.fp32_flops_per_s = as_written(best_rate(c.fp32) / 1e12) * 1e12;
  const double bf16 = best_rate(c.bf16);
  if (bf16 > best_rate(c.fp32)) f.bf16_flops_per_s = as_written(bf16 / 1e12) * 1e12;
  f.memory_bytes = as_written(c.machine.memory_total_bytes / cores / (1024.0 * 1024 * 1024)) * 1024.0 * 1024 * 1024;
  f.memory_bandwidth_bytes_per_s = as_written(c.bandwidth_all_cpus->triad_bytes_per_s / cores / 1e9) * 1e9;
  return f;
}

double theoretical_fp32_per_core(const MachineInfo& m) {
  return m.cpu_mhz * 1e6 * theoretical_fp32_flops_per_cycle(m.cpu_flags);
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M UTC", &tm);
  return text;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "this machine";
  return name;
}

// The measurements as a '#' comment block, so the preset carries its evidence.
std::string measurement_comment(const Calibration& c) {
  std::ostringstream out;
  out << "# fp32 GEMM, kernels::matmul_forward (cblas_sgemm, out = in . weight^T), best of repeats after a warm-up\n"
      << "# (1 thread: the thread's CPU time; more threads: wall time):\n";
  out << "#   shape                  M x N x K               threads  GFLOP/s\n";
  auto row = [&](const GemmResult& r, const char* dtype) {
    out << "#   " << dtype << " " << r.shape.label << std::string(r.shape.label.size() < 18 ? 18 - r.shape.label.size() : 1, ' ')
        << format("%6.0f", static_cast<double>(r.shape.rows)) << " x " << format("%6.0f", static_cast<double>(r.shape.out_features))
        << " x " << format("%6.0f", static_cast<double>(r.shape.in_features)) << "  " << format("%7.0f", r.threads)
        << "  " << format("%7.1f", r.flops_per_s() / 1e9) << "\n";
  };
  for (const auto& r : c.fp32) row(r, "fp32");
  if (c.fp32_all_cores) row(*c.fp32_all_cores, "fp32");
  for (const auto& r : c.bf16) row(r, "bf16");
  if (!c.bf16_note.empty()) out << "# bf16 GEMM " << c.bf16_note << "\n";
  for (const auto* b : {&c.bandwidth_one_thread, &c.bandwidth_all_cpus}) {
    if (!*b) continue;
    out << "# STREAM float64, " << format("%.0f", (*b)->array_bytes / 1048576.0) << " MiB arrays, "
        << threads_text((*b)->threads) << ": copy " << format("%.1f", (*b)->copy_bytes_per_s / 1e9) << " GB/s, triad "
        << format("%.1f", (*b)->triad_bytes_per_s / 1e9) << " GB/s\n";
  }
  return out.str();
}

std::string device_yaml(const Calibration& c, const PresetFigures& f, const std::string& when, bool quick) {
  const MachineInfo& m = c.machine;
  const double theoretical = theoretical_fp32_per_core(m);
  std::ostringstream y;
  y << "# This machine as one training device: one physical core per MPI rank.\n"
    << "# Written by `meshplan calibrate" << (quick ? " --quick" : "") << "` on " << host_name() << ", " << when << ";\n"
    << "# " << m.cpu_model << ", " << m.physical_cores << " physical cores, " << m.logical_cpus
    << " logical CPUs; " << openblas_get_config() << ".\n"
    << "# Load average at the start: " << format("%.2f", m.load_average_1min) << " (other work lowers every figure).\n"
    << "# Run `meshplan calibrate` again to refresh; delete this file to go back to the built-in placeholder.\n"
    << measurement_comment(c) << "name: local-cpu\n"
    << "source: \"meshplan calibrate" << (quick ? " --quick" : "") << ", " << when << ", " << host_name() << "\"\n"
    << "peak_tflops:\n"
    << "  fp32: " << six_digits(f.fp32_flops_per_s / 1e12)
    << "   # measured: best one-thread fp32 GEMM rate above (not a datasheet peak)";
  if (theoretical > 0) {
    y << "; for reference " << format("%.3f", theoretical / 1e12) << " TFLOP/s = " << format("%.0f MHz x ", m.cpu_mhz)
      << theoretical_fp32_flops_per_cycle(m.cpu_flags) << " FLOP/cycle (assumed from the CPU flags)";
  }
  y << "\n";
  if (f.bf16_flops_per_s) {
    y << "  bf16: " << six_digits(*f.bf16_flops_per_s / 1e12) << "   # measured: best one-thread cblas_sbgemm rate above\n";
  } else if (!c.bf16.empty()) {
    y << "  # bf16 omitted: cblas_sbgemm measured slower than fp32 here, so plans should not pick it\n";
  } else {
    y << "  # bf16 omitted: " << c.bf16_note << "\n";
  }
  y << "memory_gib: " << six_digits(f.memory_bytes / (1024.0 * 1024 * 1024)) << "   # /proc/meminfo MemTotal "
    << format("%.2f", m.memory_total_bytes / (1024.0 * 1024 * 1024)) << " GiB / " << f.devices_per_node << " cores\n"
    << "memory_bandwidth_gb_per_s: " << six_digits(f.memory_bandwidth_bytes_per_s / 1e9) << "   # measured: STREAM triad on "
    << c.bandwidth_all_cpus->threads << " threads "
    << format("%.1f", c.bandwidth_all_cpus->triad_bytes_per_s / 1e9) << " GB/s / " << f.devices_per_node
    << " cores (a rank's share when every core streams)\n"
    << "achievable:\n"
    << "  gemm_fraction: 1.0              # the peak above is itself a measured GEMM rate\n"
    << "  memory_bandwidth_fraction: 1.0  # the bandwidth above is itself a measured streaming rate\n";
  return y.str();
}

std::string cluster_yaml(const Calibration& c, const PresetFigures& f, const std::string& when, bool quick) {
  std::ostringstream y;
  const bool measured = c.intra_link && c.intra_link->ok;
  y << "# This machine as a cluster: one node whose devices are its physical cores,\n"
    << "# one MPI rank each, talking through shared memory.\n"
    << "# Written by `meshplan calibrate" << (quick ? " --quick" : "") << "` on " << host_name() << ", " << when << ".\n";
  if (measured) {
    y << "# The intra-node link: latency and bus bandwidth fitted (least squares on relative error) to\n"
      << "# t = latency_steps x latency + S x F_bus / bandwidth over these timings (median iteration,\n"
      << "# slowest rank; executor/comm/collective_bench.hpp):\n"
      << "#   collective      ranks        bytes   time us  busbw GB/s\n";
    for (const auto& t : c.collectives) {
      const std::string name = to_string(t.collective);
      y << "#   " << name << std::string(name.size() < 14 ? 14 - name.size() : 1, ' ') << format("%7.0f", t.ranks)
        << format("  %11.0f", static_cast<double>(t.bytes)) << format("  %8.1f", t.time_s * 1e6)
        << format("  %10.2f", t.busbw_bytes_per_s / 1e9) << "\n";
    }
    y << "# fit: median relative error " << format("%.0f%%", 100 * c.intra_link->median_relative_error)
      << ", worst " << format("%.0f%%", 100 * c.intra_link->worst_relative_error) << "\n";
  } else {
    y << "# The links were not timed (calibrate ran on one rank; `mpirun -np 2 meshplan calibrate`\n"
      << "# times them): their figures are the built-in placeholder's.\n";
  }
  y << "name: local-cpu\n"
    << "source: \"meshplan calibrate" << (quick ? " --quick" : "") << ", " << when << ", " << host_name()
    << (measured ? "; links measured over MPI" : "; link figures are placeholders") << "\"\n"
    << "device: local-cpu\n"
    << "devices_per_node: " << f.devices_per_node << "   # measured: physical cores this process may run on ("
    << c.machine.logical_cpus << " logical CPUs)\n"
    << "intra_node:\n"
    << "  kind: shared-memory\n";
  if (measured) {
    y << "  per_direction_gb_per_s: " << six_digits(c.intra_link->bandwidth_bytes_per_s / 1e9)
      << "   # measured: bus bandwidth of the fit above\n"
      << "  latency_us: " << six_digits(c.intra_link->latency_s * 1e6) << "   # measured: latency per step of the fit above\n"
      << "  achievable_fraction: 1.0   # the bandwidth above is itself a measured collective rate\n";
  } else {
    y << "  per_direction_gb_per_s: 5      # assumption, not measured: Open MPI shared-memory copy bandwidth between two cores\n"
      << "  latency_us: 1.0                # assumption, not measured: shared-memory message latency\n";
  }
  y
    << "inter_node:\n"
    << "  kind: ethernet\n"
    << "  nics_per_node: 1\n"
    << "  per_nic_gbit_per_s: 10         # assumption: one 10 GbE port, for jobs that span workstations\n"
    << "  latency_us: 30.0               # assumption, as for ethernet-10g\n";
  return y.str();
}

void print_table(std::ostream& out, const Calibration& c, const PresetFigures& f, const std::vector<std::string>& files) {
  const MachineInfo& m = c.machine;
  out << "machine: " << m.cpu_model << ", " << m.physical_cores << " physical cores, " << m.logical_cpus
      << " logical CPUs, " << gib(m.memory_total_bytes) << " GiB" << format(", load average %.2f", m.load_average_1min)
      << "\n\n";
  const double best = best_rate(c.fp32);
  out << "GEMM rate, best repeat (1 thread: the thread's CPU time; more threads: wall time)\n"
      << "  shape                           M x      N x      K  threads  GFLOP/s  of best\n";
  auto row = [&](const GemmResult& r, const char* dtype) {
    std::string name = std::string(dtype) + " " + r.shape.label;
    out << "  " << name << std::string(name.size() < 28 ? 28 - name.size() : 1, ' ')
        << format("%6.0f", static_cast<double>(r.shape.rows)) << " x " << format("%6.0f", static_cast<double>(r.shape.out_features))
        << " x " << format("%6.0f", static_cast<double>(r.shape.in_features)) << format("  %7.0f", r.threads)
        << format("  %7.1f", r.flops_per_s() / 1e9) << format("  %6.1f%%", 100 * r.flops_per_s() / best) << "\n";
  };
  for (const auto& r : c.fp32) row(r, "fp32");
  if (c.fp32_all_cores) row(*c.fp32_all_cores, "fp32");
  for (const auto& r : c.bf16) row(r, "bf16");
  if (!c.bf16_note.empty()) out << "  bf16 " << c.bf16_note << "\n";
  out << "\nmemory bandwidth (STREAM, float64)   copy GB/s  triad GB/s\n";
  for (const auto* b : {&c.bandwidth_one_thread, &c.bandwidth_all_cpus}) {
    if (!*b) continue;
    const std::string name = format("%.0f MiB arrays, ", (*b)->array_bytes / 1048576.0) + threads_text((*b)->threads);
    out << "  " << name << std::string(name.size() < 34 ? 34 - name.size() : 1, ' ')
        << format("%9.1f", (*b)->copy_bytes_per_s / 1e9) << format("  %10.1f", (*b)->triad_bytes_per_s / 1e9) << "\n";
  }
  out << "\nlocal-cpu device (one core): fp32 " << format("%.4f", f.fp32_flops_per_s / 1e12) << " TFLOP/s";
  if (f.bf16_flops_per_s) out << ", bf16 " << format("%.4f", *f.bf16_flops_per_s / 1e12) << " TFLOP/s";
  out << ", " << format("%.2f", f.memory_bytes / (1024.0 * 1024 * 1024)) << " GiB, "
      << format("%.2f", f.memory_bandwidth_bytes_per_s / 1e9) << " GB/s; " << f.devices_per_node << " per node\n";
  if (const double theoretical = theoretical_fp32_per_core(m); theoretical > 0) {
    out << "  (best fp32 GEMM = " << format("%.0f%%", 100 * best / theoretical) << " of "
        << format("%.1f", theoretical / 1e9) << " GFLOP/s = " << format("%.0f MHz x ", m.cpu_mhz)
        << theoretical_fp32_flops_per_cycle(m.cpu_flags) << " FLOP/cycle, assumed from the CPU flags)\n";
  }
  if (c.intra_link && c.intra_link->ok) {
    out << "intra-node link (fitted to " << c.collectives.size() << " collective timings over MPI): latency "
        << format("%.2f", c.intra_link->latency_s * 1e6) << " us, bus bandwidth "
        << format("%.2f", c.intra_link->bandwidth_bytes_per_s / 1e9) << " GB/s (median error "
        << format("%.0f%%", 100 * c.intra_link->median_relative_error) << ", worst "
        << format("%.0f%%", 100 * c.intra_link->worst_relative_error) << ")\n";
  } else {
    out << "intra-node link: not timed (one rank; `mpirun -np 2 meshplan calibrate` times it): placeholder figures\n";
  }
  for (const auto& file : files) out << "wrote " << file << "\n";
}

nlohmann::ordered_json to_json(const Calibration& c, const PresetFigures& f, const std::vector<std::string>& files) {
  using Json = nlohmann::ordered_json;
  const MachineInfo& m = c.machine;
  Json j;
  j["machine"] = {{"cpu_model", m.cpu_model},
                  {"physical_cores", m.physical_cores},
                  {"logical_cpus", m.logical_cpus},
                  {"cpu_mhz", m.cpu_mhz},
                  {"memory_total_bytes", m.memory_total_bytes},
                  {"last_level_cache_bytes", m.last_level_cache_bytes},
                  {"load_average_1min", m.load_average_1min},
                  {"blas", openblas_get_config()}};
  Json gemm = Json::array();
  auto add = [&](const GemmResult& r, const char* dtype) {
    gemm.push_back({{"dtype", dtype},
                    {"label", r.shape.label},
                    {"m", r.shape.rows},
                    {"n", r.shape.out_features},
                    {"k", r.shape.in_features},
                    {"threads", r.threads},
                    {"clock", r.thread_cpu_clock ? "thread-cpu" : "wall"},
                    {"repeats", r.repeats},
                    {"best_s", r.best_s},
                    {"flops_per_s", r.flops_per_s()}});
  };
  for (const auto& r : c.fp32) add(r, "fp32");
  if (c.fp32_all_cores) add(*c.fp32_all_cores, "fp32");
  for (const auto& r : c.bf16) add(r, "bf16");
  j["gemm"] = gemm;
  j["bf16_note"] = c.bf16_note;
  Json bandwidth = Json::array();
  for (const auto* b : {&c.bandwidth_one_thread, &c.bandwidth_all_cpus}) {
    if (!*b) continue;
    bandwidth.push_back({{"threads", (*b)->threads},
                         {"array_bytes", (*b)->array_bytes},
                         {"copy_bytes_per_s", (*b)->copy_bytes_per_s},
                         {"triad_bytes_per_s", (*b)->triad_bytes_per_s}});
  }
  j["memory_bandwidth"] = bandwidth;
  Json peaks = {{"fp32", f.fp32_flops_per_s}};
  if (f.bf16_flops_per_s) peaks["bf16"] = *f.bf16_flops_per_s;
  j["device"] = {{"name", "local-cpu"},
                 {"peak_flops_per_s", peaks},
                 {"memory_bytes", f.memory_bytes},
                 {"memory_bandwidth_bytes_per_s", f.memory_bandwidth_bytes_per_s},
                 {"gemm_efficiency", 1.0},
                 {"memory_efficiency", 1.0}};
  j["cluster"] = {{"name", "local-cpu"}, {"devices_per_node", f.devices_per_node}};
  Json collectives = Json::array();
  for (const auto& t : c.collectives) {
    collectives.push_back({{"collective", to_string(t.collective)},
                           {"ranks", t.ranks},
                           {"bytes", t.bytes},
                           {"iterations", t.iterations},
                           {"time_s", t.time_s},
                           {"busbw_bytes_per_s", t.busbw_bytes_per_s},
                           {"correct", t.correct}});
  }
  j["collectives"] = collectives;
  if (c.intra_link && c.intra_link->ok) {
    j["cluster"]["intra_node"] = {{"latency_s", c.intra_link->latency_s},
                                  {"bandwidth_bytes_per_s", c.intra_link->bandwidth_bytes_per_s},
                                  {"median_relative_error", c.intra_link->median_relative_error},
                                  {"worst_relative_error", c.intra_link->worst_relative_error}};
  } else {
    j["cluster"]["intra_node"] = nullptr;
  }
  j["theoretical_fp32_flops_per_s_per_core"] = theoretical_fp32_per_core(m);
  j["files"] = files;
  return j;
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
  const std::string when = utc_now();
  Calibration calibration;
  if (several) {
    if (leader) std::cerr << "calibrate: [collectives] " << world->size() << " ranks" << std::endl;
    time_collectives(*world, flags.quick, calibration);
    if (!leader) {
      wait_for_leader(*world);
      return exit_ok;
    }
    widen_affinity_to_all_cpus();
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
  const auto steps = phases();
  for (std::size_t i = 0; i < steps.size(); ++i) {
    std::cerr << "calibrate: [" << i + 1 << "/" << steps.size() << "] " << steps[i].name << std::endl;
    steps[i].run(flags.quick, calibration);
  }
  const PresetFigures figures = figures_of(calibration);
  const std::string device_path = (fs::path(out) / "devices" / "local-cpu.yaml").string();
  const std::string cluster_path = (fs::path(out) / "clusters" / "local-cpu.yaml").string();
  Problems problems = write_file_atomically(
      device_path, [&](std::ostream& o) { o << device_yaml(calibration, figures, when, flags.quick); });
  if (!has_errors(problems)) {
    problems = write_file_atomically(
        cluster_path, [&](std::ostream& o) { o << cluster_yaml(calibration, figures, when, flags.quick); });
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
      "calibrate", "Measure this machine (GEMM rate by size, memory bandwidth, cores, memory; under mpirun with 2 "
                   "or more ranks also the MPI collectives) and write the device and cluster presets local-cpu");
  auto flags = std::make_shared<CalibrateFlags>();
  command->add_option("--out", flags->out,
                      "Presets folder to write devices/local-cpu.yaml and clusters/local-cpu.yaml into (default: "
                      "$MESHPLAN_USER_PRESETS, else $XDG_CONFIG_HOME/meshplan/presets, else "
                      "~/.config/meshplan/presets, which preset lookup searches first)");
  command->add_flag("--quick", flags->quick, "A run of a few seconds: small GEMMs and arrays (for tests; rougher figures)");
  command->add_flag("--json", flags->json, "Print the measurements and the written figures as one JSON object");
  return [flags]() { return run_calibrate(*flags); };
}

}  // namespace meshplan::cli
