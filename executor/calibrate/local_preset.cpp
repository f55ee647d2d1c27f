#include "executor/calibrate/local_preset.hpp"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <limits>
#include <sstream>

#include "model/text.hpp"


namespace meshplan::exec {

std::string threads_text(int threads) { return std::to_string(threads) + (threads == 1 ? " thread" : " threads"); }

std::string native_bf16_text(const std::vector<std::string>& flags) {
  if (flags.empty()) return "none (no avx512_bf16 or amx_bf16 in /proc/cpuinfo)";
  std::string text;
  for (const auto& flag : flags) text += (text.empty() ? "" : ", ") + flag;
  return text;
}

std::string six_digits(double value) { return format("%.6g", value); }
double as_written(double value) { return std::stod(six_digits(value)); }

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
  // Fractions of the peak as written (gemm_fraction is 1).
  std::vector<GemmCurvePoint> measured;
  for (const auto& g : c.gemm_cold) measured.push_back({g.intensity(), g.flops_per_s() / f.fp32_flops_per_s});
  for (const auto& point : build_gemm_curve(measured, kCurveMergeRelative, kCurveMaxPoints)) {
    f.gemm_curve.push_back({as_written(point.intensity), as_written(point.fraction)});
  }
  for (const auto& r : c.op_classes) {
    if (r.counted_bytes_per_s() > 0) f.op_bandwidth_bytes_per_s.push_back({r.op_class, as_written(r.counted_bytes_per_s() / 1e9) * 1e9});
  }
  if (c.threaded && !c.gemm_threaded.empty()) {
    // Per core: the process's rate over threads x one core's peak, its class rates / threads.
    const double threads = c.threaded->threads;
    f.threaded_threads = c.threaded->threads;
    std::vector<GemmCurvePoint> points;
    for (const auto& g : c.gemm_threaded) points.push_back({g.intensity(), g.flops_per_s() / (threads * f.fp32_flops_per_s)});
    for (const auto& point : build_gemm_curve(points, kCurveMergeRelative, kCurveMaxPoints)) {
      f.threaded_gemm_curve.push_back({as_written(point.intensity), as_written(point.fraction)});
    }
    for (const auto& r : c.op_classes_threaded) {
      if (r.counted_bytes_per_s() > 0)
        f.threaded_op_bandwidth_bytes_per_s.push_back({r.op_class, as_written(r.counted_bytes_per_s() / threads / 1e9) * 1e9});
    }
  }
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

static std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "this machine";
  return name;
}

// The measurements as a '#' comment block, so the preset carries its evidence.
static std::string measurement_comment(const Calibration& c) {
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
  if (!c.bf16.empty()) {
    out << "# bf16 GEMM, kernels::matmul_forward_bf16 (operands rounded to bf16 each call, then oneDNN's bf16 matmul\n"
        << "# with fp32 accumulation: what `meshplan train --precision bf16` runs), 1 thread:\n";
  }
  for (const auto& r : c.bf16) row(r, "bf16");
  out << "# native bf16 instructions: " << native_bf16_text(c.bf16_native_flags) << "\n";
  if (!c.bf16_note.empty()) out << "# bf16 GEMM " << c.bf16_note << "\n";
  for (const auto* b : {&c.bandwidth_one_thread, &c.bandwidth_all_cpus}) {
    if (!*b) continue;
    out << "# STREAM float64, " << format("%.0f", (*b)->array_bytes / 1048576.0) << " MiB arrays, "
        << threads_text((*b)->threads) << ": copy " << format("%.1f", (*b)->copy_bytes_per_s / 1e9) << " GB/s, triad "
        << format("%.1f", (*b)->triad_bytes_per_s / 1e9) << " GB/s\n";
  }
  return out.str();
}

// How the cold measurements ran, in three lines joined by `line_break` (comment and table say the same).
std::string cold_method(const ColdSettings& cold, const std::string& line_break) {
  return threads_text(cold.threads) + " at once (one per physical core, OpenBLAS and OpenMP at 1 thread each)," +
         line_break + "each call after streaming through a private " + format("%.0f", cold.evict_bytes / 1048576.0) +
         " MiB buffer (2x the last-level cache, at most " + format("%.0f", kEvictionCapBytes / 1048576.0) + " MiB);" +
         line_break + "median over threads of each thread's median of " + std::to_string(cold.repeats) +
         " repeats, thread CPU time";
}

std::string op_class_row(const OpClassResult& r) {
  const std::string name = to_string(r.op_class);
  return name + std::string(name.size() < 12 ? 12 - name.size() : 1, ' ') + r.kernel +
         std::string(r.kernel.size() < 44 ? 44 - r.kernel.size() : 1, ' ') +
         format("%9.0f", static_cast<double>(r.elements)) + format("  %7.2f", r.forward_s * 1e3) +
         format("  %7.2f", r.backward_s * 1e3) + format("  %8.2f", r.counted_bytes_per_s() / 1e9);
}

// The cold measurements behind gemm_curve and op_bandwidth_gb_per_s.
static std::string cold_comment(const Calibration& c, const PresetFigures& f) {
  std::ostringstream out;
  if (c.gemm_cold.empty() && c.op_classes.empty()) return out.str();
  out << "# Cold operands, every core busy: " << cold_method(c.cold, "\n# ") << ".\n"
      << "# fp32 GEMM by arithmetic intensity I = 2mnk / (mk + kn + mn), rate per core, fraction of peak_tflops.fp32:\n"
      << "#   M x N x K            I  GFLOP/s  of peak\n";
  for (const auto& g : c.gemm_cold) {
    out << "#   " << g.shape.label << std::string(g.shape.label.size() < 14 ? 14 - g.shape.label.size() : 1, ' ')
        << format("%7.1f", g.intensity()) << format("  %7.1f", g.flops_per_s() / 1e9)
        << format("  %7.3f", g.flops_per_s() / f.fp32_flops_per_s) << "\n";
  }
  out << "# Op classes: forward + backward of the executor's kernel, GB/s of the traffic the cost model counts\n"
      << "# (3 x counted forward bytes / (fwd + bwd), as the model prices a backward at 2x the forward;\n"
      << "# optimizer: counted bytes of the whole step / its time):\n"
      << "#   class       kernel                                       elements   ms fwd   ms bwd  GB/s counted\n";
  for (const auto& r : c.op_classes) out << "#   " << op_class_row(r) << "\n";
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
    << measurement_comment(c) << cold_comment(c, f) << "name: local-cpu\n"
    << "source: \"meshplan calibrate" << (quick ? " --quick" : "") << ", " << when << ", " << host_name() << "\"\n"
    << "kind: cpu   # this machine's cores: meshplan train runs its plans on the CPU backend\n"
    << "peak_tflops:\n"
    << "  fp32: " << six_digits(f.fp32_flops_per_s / 1e12)
    << "   # measured: best one-thread fp32 GEMM rate above (not a datasheet peak)";
  if (theoretical > 0) {
    y << "; for reference " << format("%.3f", theoretical / 1e12) << " TFLOP/s = " << format("%.0f MHz x ", m.cpu_mhz)
      << theoretical_fp32_flops_per_cycle(m.cpu_flags) << " FLOP/cycle (assumed from the CPU flags)";
  }
  y << "\n";
  if (f.bf16_flops_per_s) {
    y << "  bf16: " << six_digits(*f.bf16_flops_per_s / 1e12)
      << "   # measured: best one-thread oneDNN bf16 GEMM rate above (native: " << native_bf16_text(c.bf16_native_flags)
      << ")\n";
  } else if (!c.bf16.empty()) {
    y << "  # bf16 omitted: oneDNN's bf16 GEMM measured " << format("%.4f", best_rate(c.bf16) / 1e12)
      << " TFLOP/s, slower than fp32 here, so plans should not pick it\n";
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
  if (!f.gemm_curve.empty()) {
    y << "  # measured: fraction of peak x gemm_fraction the cold GEMMs above reach, by arithmetic\n"
      << "  # intensity (points within " << format("%.0f%%", 100 * kCurveMergeRelative)
      << " merged); interpolated in log(I), clamped at both ends\n"
      << "  gemm_curve:\n";
    for (const auto& p : f.gemm_curve) y << "    - [" << six_digits(p.intensity) << ", " << six_digits(p.fraction) << "]\n";
  }
  if (!f.op_bandwidth_bytes_per_s.empty()) {
    y << "  # measured: the cold op classes above, every core busy; absent classes use the memory bandwidth\n"
      << "  op_bandwidth_gb_per_s:\n";
    for (const auto& [op, rate] : f.op_bandwidth_bytes_per_s) {
      y << "    " << to_string(op) << ": " << six_digits(rate / 1e9) << "\n";
    }
  }
  if (f.threaded_threads > 1) {
    y << "  # measured: the same ladder and op classes as one process of " << f.threaded_threads
      << " OpenBLAS/OpenMP threads, per core\n"
      << "  # (the process's rate / threads); used for a rank that runs that many threads\n"
      << "  threaded:\n"
      << "    threads: " << f.threaded_threads << "\n";
    if (!f.threaded_gemm_curve.empty()) {
      y << "    gemm_curve:\n";
      for (const auto& p : f.threaded_gemm_curve) y << "      - [" << six_digits(p.intensity) << ", " << six_digits(p.fraction) << "]\n";
    }
    if (!f.threaded_op_bandwidth_bytes_per_s.empty()) {
      y << "    op_bandwidth_gb_per_s:\n";
      for (const auto& [op, rate] : f.threaded_op_bandwidth_bytes_per_s) {
        y << "      " << to_string(op) << ": " << six_digits(rate / 1e9) << "\n";
      }
    }
  }
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
    << "  kind: shared-memory\n"
    << "  overlaps_compute: false   # MPI over shared memory copies with the cores that compute: nothing hides\n";
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

}  // namespace meshplan::exec
