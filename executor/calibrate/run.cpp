// The phases of `meshplan calibrate` on this machine (run.hpp): what is
// measured at which sizes, in which order, and the collectives under MPI.
#include "executor/calibrate/run.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "executor/comm/collective_bench.hpp"
#include "model/text.hpp"

namespace meshplan::exec {
namespace {
namespace fs = std::filesystem;

std::string gib(double bytes) { return format("%.2f", bytes / (1024.0 * 1024 * 1024)); }

}  // namespace

namespace {

// How much to measure: the full ladder, or a few seconds' worth (--quick).
struct Settings {
  std::vector<GemmShape> fp32_shapes;
  GemmShape all_cores_shape;
  double min_seconds = 0;
  int min_repeats = 0;
  double array_bytes = 0;
  int bandwidth_repeats = 0;
  // Cold operands, every core busy (the achievable: refinements).
  std::vector<GemmShape> cold_shapes;
  ColdSettings cold;
  std::int64_t elementwise_elements = 0;  // GELU and residual
  std::int64_t norm_rows = 0, norm_channels = 0;
  std::int64_t optimizer_parameters = 0;
};

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

  // Intensities (2mnk / (mk + kn + mn)) from ~10 to ~1400: squares, and the
  // skinny shapes of small models: mlp-fashion's last layer, an attention
  // score GEMM of one head (T = 128, head size 64), and a GPT block of
  // gpt-byte-10m at 512 rows (C = 384: qkv, MLP up and down projections).
  const std::vector<std::int64_t> cold_squares = quick ? std::vector<std::int64_t>{16, 32, 64, 128, 256, 512}
                                                       : std::vector<std::int64_t>{16, 32, 64, 128, 256, 512, 1024, 2048};
  for (auto n : cold_squares) s.cold_shapes.push_back({std::to_string(n) + "x" + std::to_string(n) + "x" + std::to_string(n), n, n, n});
  // GemmShape is {label, M = rows, K = in_features, N = out_features}; labels say M x N x K.
  s.cold_shapes.push_back({"128x10x256", 128, 256, 10});
  s.cold_shapes.push_back({"128x64x128", 128, 128, 64});
  s.cold_shapes.push_back({"512x64x512", 512, 512, 64});
  if (!quick) {
    s.cold_shapes.push_back({"512x1152x384", 512, 384, 1152});
    s.cold_shapes.push_back({"512x1536x384", 512, 384, 1536});
    s.cold_shapes.push_back({"512x384x1536", 512, 1536, 384});
  }
  s.cold.threads = static_cast<int>(std::max<std::int64_t>(1, machine.physical_cores));
  s.cold.evict_bytes = eviction_bytes_for(machine.last_level_cache_bytes, kEvictionCapBytes);
  s.cold.repeats = quick ? 3 : 11;
  s.elementwise_elements = quick ? (1 << 20) : (1 << 22);
  s.norm_rows = quick ? 1024 : 4096;
  s.norm_channels = 768;
  s.optimizer_parameters = quick ? (1 << 20) : (1 << 23);
  // Every core holds its own buffers at once: keep them all within a quarter
  // of the free memory (a many-core machine with little memory gets smaller ones).
  const double per_thread_bytes = machine.memory_available_bytes / 4 / s.cold.threads - s.cold.evict_bytes;
  constexpr double kFloat = sizeof(float);
  while (s.optimizer_parameters > (1 << 16) && 4 * kFloat * static_cast<double>(s.optimizer_parameters) > per_thread_bytes) {
    s.optimizer_parameters /= 2;  // parameters, gradients, two moments
  }
  while (s.elementwise_elements > (1 << 16) && 6 * kFloat * static_cast<double>(s.elementwise_elements) > per_thread_bytes) {
    s.elementwise_elements /= 2;  // the residual's six buffers (GELU has four)
  }
  while (s.norm_rows > 64 && 4 * kFloat * static_cast<double>(s.norm_rows * s.norm_channels) > per_thread_bytes) {
    s.norm_rows /= 2;  // inp, out, dout, dinp
  }
  return s;
}

}  // namespace

// The collectives phase: every rank of `world` calls it. Groups of 2 ranks
// and of all of them (the first k world ranks), all_reduce, all_gather,
// reduce_scatter and send/recv from 1 KiB up; the fit is over every sample.
void time_collectives(comm::Communicator& world, bool quick, Calibration& c, const Say& say) {
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
          const auto t = comm::measure_collective(*group, collective, bytes, iterations, quick ? 1 : 3);
          c.collectives.push_back(t);
          samples.push_back({collective, k, static_cast<double>(t.bytes), t.time_s});
          if (leader) {
            say(to_string(collective) + " " + std::to_string(k) + " ranks " + format("%.0f", static_cast<double>(t.bytes)) +
                " B: " + format("%.1f", t.time_s * 1e6) + " us, busbw " + format("%.2f", t.busbw_bytes_per_s / 1e9) +
                " GB/s" + (t.correct ? "" : " (WRONG RESULT)"));
          }
        }
      }
    }
    world.barrier();
  }
  c.intra_link = fit_link(samples);
  if (leader && c.intra_link->ok) {
    say("intra-node link fit: latency " + format("%.2f", c.intra_link->latency_s * 1e6) + " us, bus bandwidth " +
        format("%.2f", c.intra_link->bandwidth_bytes_per_s / 1e9) + " GB/s (median error " +
        format("%.0f%%", 100 * c.intra_link->median_relative_error) + ", worst " +
        format("%.0f%%", 100 * c.intra_link->worst_relative_error) + ")");
  }
}

// A rank other than 0 after the collectives: waits for rank 0's word that the
// files are written, polling every 20 ms so that it leaves the cores to rank
// 0's GEMM and bandwidth measurements (an MPI receive would spin).
void wait_for_leader(comm::Communicator& world) {
  std::int32_t status = 0;
  auto request = world.irecv(&status, 1, comm::DataType::i32, 0, 7);
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

std::vector<Phase> phases(const Say& say) {
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
         c.bf16_native_flags = native_bf16_flags(c.machine.cpu_flags);
         say("native bf16 instructions: " + native_bf16_text(c.bf16_native_flags));
         if (const std::string reason = bf16_gemm_unavailable_reason(); !reason.empty()) {
           c.bf16_note = "not measured: " + reason;
           say("bf16 GEMM " + c.bf16_note);
           return;
         }
         const Settings s = settings_for(quick, c.machine);
         for (const auto& shape : s.fp32_shapes) {
           if (shape.label.rfind("square", 0) != 0) continue;
           if (auto r = time_gemm_bf16(shape, 1, s.min_seconds, s.min_repeats)) {
             c.bf16.push_back(*r);
             say("bf16 GEMM " + shape.label + ": " + format("%.1f", r->flops_per_s() / 1e9) + " GFLOP/s (1 thread, oneDNN)");
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
      {"cold, every core",
       [say](bool quick, Calibration& c) {
         const Settings s = settings_for(quick, c.machine);
         c.cold = s.cold;
         for (const auto& shape : s.cold_shapes) {
           c.gemm_cold.push_back(time_gemm_cold(shape, s.cold));
           say("cold fp32 GEMM " + shape.label + format(" (I = %.1f)", c.gemm_cold.back().intensity()) + ": " +
               format("%.1f", c.gemm_cold.back().flops_per_s() / 1e9) + " GFLOP/s per core, " + threads_text(s.cold.threads));
         }
         auto keep = [&](OpClassResult r) {
           say("cold " + to_string(r.op_class) + " (" + r.kernel + "): " + format("%.2f", r.counted_bytes_per_s() / 1e9) +
               " GB/s counted per core");
           c.op_classes.push_back(std::move(r));
         };
         keep(time_activation_cold(s.elementwise_elements, s.cold));
         keep(time_norm_cold(s.norm_rows, s.norm_channels, s.cold));
         keep(time_elementwise_cold(s.elementwise_elements, s.cold));
         keep(time_optimizer_cold(s.optimizer_parameters, s.cold));
       }},
      {"cold, one process of every core's threads",
       [say](bool quick, Calibration& c) {
         const Settings s = settings_for(quick, c.machine);
         if (s.cold.threads < 2) return;  // one core: a rank never runs several threads
         ColdSettings threaded = s.cold;
         threaded.one_process = true;
         c.threaded = threaded;
         const double cores = threaded.threads;
         for (const auto& shape : s.cold_shapes) {
           c.gemm_threaded.push_back(time_gemm_cold(shape, threaded));
           say("cold fp32 GEMM " + shape.label + ", one process of " + threads_text(threaded.threads) + ": " +
               format("%.1f", c.gemm_threaded.back().flops_per_s() / cores / 1e9) + " GFLOP/s per core");
         }
         auto keep = [&](OpClassResult r) {
           say("cold " + to_string(r.op_class) + ", one process of " + threads_text(threaded.threads) + ": " +
               format("%.2f", r.counted_bytes_per_s() / cores / 1e9) + " GB/s counted per core");
           c.op_classes_threaded.push_back(std::move(r));
         };
         keep(time_activation_cold(s.elementwise_elements, threaded));
         keep(time_norm_cold(s.norm_rows, s.norm_channels, threaded));
         keep(time_elementwise_cold(s.elementwise_elements, threaded));
         keep(time_optimizer_cold(s.optimizer_parameters, threaded));
       }},
  };
}

}  // namespace meshplan::exec
