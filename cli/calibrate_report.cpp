// The table and the JSON of `meshplan calibrate` (calibrate_report.hpp).
#include "cli/calibrate_report.hpp"

#include <cblas.h>

#include <algorithm>

#include "cli/text_report.hpp"

namespace meshplan::cli {

using exec::best_rate;
using exec::Calibration;
using exec::cold_method;
using exec::GemmResult;
using exec::MachineInfo;
using exec::native_bf16_text;
using exec::op_class_row;
using exec::PresetFigures;
using exec::six_digits;
using exec::theoretical_fp32_flops_per_cycle;
using exec::theoretical_fp32_per_core;
using exec::threads_text;

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
  out << "  native bf16 instructions: " << native_bf16_text(c.bf16_native_flags) << "\n";
  out << "\nmemory bandwidth (STREAM, float64)   copy GB/s  triad GB/s\n";
  for (const auto* b : {&c.bandwidth_one_thread, &c.bandwidth_all_cpus}) {
    if (!*b) continue;
    const std::string name = format("%.0f MiB arrays, ", (*b)->array_bytes / 1048576.0) + threads_text((*b)->threads);
    out << "  " << name << std::string(name.size() < 34 ? 34 - name.size() : 1, ' ')
        << format("%9.1f", (*b)->copy_bytes_per_s / 1e9) << format("  %10.1f", (*b)->triad_bytes_per_s / 1e9) << "\n";
  }
  if (!c.gemm_cold.empty()) {
    out << "\nGEMM by arithmetic intensity (cold operands, every core busy)\n"
        << "  " << cold_method(c.cold, "\n  ") << "\n"
        << "  shape (M x N x K)        I  GFLOP/s  of peak\n";
    for (const auto& g : c.gemm_cold) {
      out << "  " << g.shape.label << std::string(g.shape.label.size() < 17 ? 17 - g.shape.label.size() : 1, ' ')
          << format("%7.1f", g.intensity()) << format("  %7.1f", g.flops_per_s() / 1e9)
          << format("  %6.1f%%", 100 * g.flops_per_s() / f.fp32_flops_per_s) << "\n";
    }
    out << "  gemm_curve written:";
    for (const auto& p : f.gemm_curve) out << " [" << six_digits(p.intensity) << ", " << six_digits(p.fraction) << "]";
    out << "\n";
  }
  if (!c.op_classes.empty()) {
    out << "\nop classes (cold, every core busy; GB/s of the traffic the cost model counts)\n"
        << "  class       kernel                                       elements   ms fwd   ms bwd  GB/s counted\n";
    for (const auto& r : c.op_classes) out << "  " << op_class_row(r) << "\n";
  }
  if (f.threaded_threads > 1) {
    const double threads = f.threaded_threads;
    out << "\none process of " << f.threaded_threads << " threads (cold; wall clock, median repeat; per core = process / "
        << f.threaded_threads << ")\n"
        << "  shape                  I  GFLOP/s per core  of peak\n";
    for (const auto& g : c.gemm_threaded) {
      out << "  " << g.shape.label << std::string(g.shape.label.size() < 17 ? 17 - g.shape.label.size() : 1, ' ')
          << format("%7.1f", g.intensity()) << format("  %16.1f", g.flops_per_s() / threads / 1e9)
          << format("  %6.1f%%", 100 * g.flops_per_s() / threads / f.fp32_flops_per_s) << "\n";
    }
    for (const auto& r : c.op_classes_threaded) {
      out << "  " << to_string(r.op_class) << std::string(to_string(r.op_class).size() < 12 ? 12 - to_string(r.op_class).size() : 1, ' ')
          << format("%.2f", r.counted_bytes_per_s() / threads / 1e9) << " GB/s counted per core\n";
    }
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

namespace {

// The cold-cache GEMMs and op classes (thread CPU clock), and the threaded ones (wall clock).
void add_cold_and_threaded(nlohmann::ordered_json& j, const Calibration& c, const PresetFigures& f) {
  using Json = nlohmann::ordered_json;
  j["cold"] = {{"threads", c.cold.threads}, {"evict_bytes", c.cold.evict_bytes}, {"repeats", c.cold.repeats},
               {"statistic", "median over threads of each thread's median repeat"}, {"clock", "thread-cpu"}};
  Json gemm_cold = Json::array();
  for (const auto& g : c.gemm_cold) {
    gemm_cold.push_back({{"label", g.shape.label},
                         {"m", g.shape.rows},
                         {"n", g.shape.out_features},
                         {"k", g.shape.in_features},
                         {"intensity", g.intensity()},
                         {"calls_per_repeat", g.calls_per_repeat},
                         {"call_s", g.call_s},
                         {"flops_per_s", g.flops_per_s()},
                         {"fraction_of_peak", g.flops_per_s() / f.fp32_flops_per_s}});
  }
  j["gemm_cold"] = gemm_cold;
  Json op_classes = Json::array();
  for (const auto& r : c.op_classes) {
    op_classes.push_back({{"class", to_string(r.op_class)},
                          {"kernel", r.kernel},
                          {"elements", r.elements},
                          {"forward_s", r.forward_s},
                          {"backward_s", r.backward_s},
                          {"counted_forward_bytes", r.counted_forward_bytes},
                          {"counted_bytes_per_s", r.counted_bytes_per_s()}});
  }
  j["op_classes"] = op_classes;
  if (c.threaded) {
    Json threaded_gemm = Json::array();
    for (const auto& g : c.gemm_threaded) {
      threaded_gemm.push_back({{"label", g.shape.label},
                               {"intensity", g.intensity()},
                               {"call_s", g.call_s},
                               {"flops_per_s", g.flops_per_s()},
                               {"fraction_of_threads_x_peak", g.flops_per_s() / (c.threaded->threads * f.fp32_flops_per_s)}});
    }
    Json threaded_ops = Json::array();
    for (const auto& r : c.op_classes_threaded) {
      threaded_ops.push_back({{"class", to_string(r.op_class)},
                              {"forward_s", r.forward_s},
                              {"backward_s", r.backward_s},
                              {"counted_bytes_per_s", r.counted_bytes_per_s()}});
    }
    j["threaded"] = {{"threads", c.threaded->threads}, {"clock", "wall"}, {"statistic", "median repeat"},
                     {"gemm", threaded_gemm}, {"op_classes", threaded_ops}};
  }
}

}  // namespace

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
  j["bf16_native_flags"] = c.bf16_native_flags;
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
  add_cold_and_threaded(j, c, f);
  Json curve = Json::array();
  for (const auto& p : f.gemm_curve) curve.push_back({p.intensity, p.fraction});
  j["device"]["gemm_curve"] = curve;
  Json op_rates = Json::object();
  for (const auto& [op, rate] : f.op_bandwidth_bytes_per_s) op_rates[to_string(op)] = rate;
  j["device"]["op_bandwidth_bytes_per_s"] = op_rates;
  j["theoretical_fp32_flops_per_s_per_core"] = theoretical_fp32_per_core(m);
  j["files"] = files;
  return j;
}

}  // namespace meshplan::cli
