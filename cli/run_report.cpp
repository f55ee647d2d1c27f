// The run report of `meshplan train` (run_report.hpp says what it compares).
#include "cli/run_report.hpp"

#include <cblas.h>
#include <omp.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "cli/text_report.hpp"
#include "model/atomic_file.hpp"
#include "model/explain.hpp"
#include "model/validate.hpp"

namespace meshplan::cli {
namespace {

std::optional<int> positive_from_environment(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  if (end == value || parsed < 1 || parsed > 4096) return std::nullopt;
  return static_cast<int>(parsed);
}

// VmHWM ("peak resident set size") of this process, in bytes; 0 without it.
double vm_hwm_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    double kib = 0;
    fields >> kib;
    return kib * 1024.0;
  }
  return 0;
}

double load_average_1min() {
  std::ifstream loadavg("/proc/loadavg");
  double value = 0;
  loadavg >> value;
  return value;
}

std::string mib(double bytes) { return format("%.1f", bytes / (1024.0 * 1024.0)); }

// `text` right-aligned in `width` columns.
std::string pad(const std::string& text, std::size_t width) {
  return std::string(text.size() < width ? width - text.size() : 1, ' ') + text;
}

}  // namespace

int local_ranks_from_environment(int fallback) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "LOCAL_WORLD_SIZE"})
    if (const auto value = positive_from_environment(name)) return *value;
  return std::max(1, fallback);
}

ComputeThreads set_compute_threads(int local_ranks) {
  ComputeThreads t;
  // OpenBLAS reads OPENBLAS_NUM_THREADS before OMP_NUM_THREADS; the user's choice stands.
  for (const char* name : {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"}) {
    if (const auto value = positive_from_environment(name)) {
      t.threads = *value;
      t.source = std::string(name) + "=" + std::to_string(*value);
      break;
    }
  }
  if (t.source.empty()) {
    const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int ranks = std::max(1, local_ranks);
    cpu_set_t mask;
    CPU_ZERO(&mask);
    const int allowed = ::sched_getaffinity(0, sizeof mask, &mask) == 0 ? CPU_COUNT(&mask) : hardware;
    if (allowed < hardware) {  // the launcher bound this rank: it chose the rank's CPUs
      t.threads = std::max(1, allowed);
      t.source = std::to_string(allowed) + " CPU" + (allowed == 1 ? "" : "s") + " this rank is bound to";
    } else {
      t.threads = std::max(1, hardware / ranks);
      t.source = std::to_string(hardware) + " hardware threads / " + std::to_string(ranks) +
                 (ranks == 1 ? " rank" : " ranks") + " on this node";
    }
  }
  openblas_set_num_threads(t.threads);
  omp_set_num_threads(t.threads);
  return t;
}

double median_after_warmup(const std::vector<double>& step_seconds, std::int64_t* counted) {
  std::vector<double> timed(step_seconds.begin() + (step_seconds.size() >= 2 ? 1 : 0), step_seconds.end());
  if (counted != nullptr) *counted = static_cast<std::int64_t>(timed.size());
  if (timed.empty()) return 0;
  std::sort(timed.begin(), timed.end());
  const std::size_t n = timed.size();
  return n % 2 == 1 ? timed[n / 2] : 0.5 * (timed[n / 2 - 1] + timed[n / 2]);
}

void StepRecorder::record(double step_s) {
  timespec now{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  step_seconds.push_back(step_s);
  cpu_clock_seconds.push_back(static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec));
}

RankMeasurement measure_rank(int rank, int threads, const StepRecorder& steps,
                             std::optional<double> ledger_peak_bytes) {
  RankMeasurement m;
  m.rank = rank;
  m.threads = threads;
  m.median_step_s = median_after_warmup(steps.step_seconds, &m.steps_timed);
  std::vector<double> shares = {0};  // element 0 stands for the warm-up step, which median_after_warmup drops
  for (std::size_t i = 1; i < steps.cpu_clock_seconds.size(); ++i) {
    const double wall = steps.step_seconds[i] * std::max(1, threads);
    if (wall > 0) shares.push_back((steps.cpu_clock_seconds[i] - steps.cpu_clock_seconds[i - 1]) / wall);
  }
  if (shares.size() >= 2) m.cpu_share = median_after_warmup(shares);
  m.vm_hwm_bytes = vm_hwm_bytes();
  if (ledger_peak_bytes) m.ledger_peak_bytes = *ledger_peak_bytes;
  return m;
}

Loaded<RunPrediction> predict_on_this_machine(const PlanFile& plan_file, int threads_per_rank, Precision compute,
                                              bool on_gpu, Attention attention) {
  Loaded<RunPrediction> out;
  ClusterSpec cluster = plan_file.cluster;
  bool threaded = false;
  if (!on_gpu) {
    auto local = load_cluster("local-cpu");
    if (!local.ok()) {
      out.problems = local.problems;
      return out;
    }
    cluster = local.value;
    cluster.device = device_for_threads(cluster.device, std::max(1, threads_per_rank), &threaded);
  }
  Plan plan = plan_file.plan;
  plan.precision = compute;
  plan.attention = attention;
  RunPrediction& p = out.value;
  p.cluster = cluster.name;
  p.cluster_source = cluster.source;
  p.on_gpu = on_gpu;
  p.threads_per_rank = threads_per_rank;
  p.threaded_rates = threaded;
  p.plan_file_cluster = plan_file.cluster.name;
  if (plan_file.prediction.time) p.plan_file_step_s = plan_file.prediction.time->step_s;
  const std::int64_t world = std::max<std::int64_t>(1, plan_file.plan.mesh.world_size());
  // The executor keeps every tensor in fp32 (parameters, gradients, Adam's
  // moments, activations, logits) and rounds GEMM operands to bf16 in a
  // workspace: its memory is the fp32 plan's, its time the compute precision's.
  Plan stored = plan;
  stored.precision = Precision::fp32;
  std::optional<MemoryEstimate> stored_memory;
  if (stored.precision != plan.precision) stored_memory = explain_plan(plan_file.model, cluster, Deployment{world, 0}, stored).memory;
  for (std::int64_t rank = 0; rank < world; ++rank) {
    const Explanation e = explain_plan(plan_file.model, cluster, Deployment{world, rank}, plan);
    if (!e.valid || !e.time || !e.memory) {
      out.problems = e.problems;
      out.problems.push_back({Severity::error, cluster.name,
                              "the plan cannot be priced on the " + cluster.name + " preset (" + cluster.source + ")"});
      return out;
    }
    if (rank == 0) {
      p.step_s = e.time->step_s;
      p.compute_s = e.time->compute_s;
      p.communication_exposed_s = e.time->communication_exposed_s;
      p.bubble_s = e.time->bubble_s;
      p.optimizer_s = e.time->optimizer_s;
    }
    p.stage.push_back(e.rank_stage);
    const MemoryEstimate& memory = stored_memory ? *stored_memory : *e.memory;
    const MemoryBreakdown& stage_memory = memory.stages.at(static_cast<std::size_t>(e.rank_stage)).memory;
    p.memory_bytes.push_back(stage_memory.total_bytes());
    p.ledger_bytes.push_back(stage_memory.allocated_peak_bytes() - stage_memory.workspace_bytes);
  }
  return out;
}

std::string default_report_path(const std::string& metrics_path) {
  if (metrics_path.empty()) return {};
  // Metrics sent to a device or a pipe (/dev/null, /dev/stdout) have no folder to keep a report
  // beside them: none is written (it was /dev/null.report.json).
  if (special_file(metrics_path)) return {};
  std::filesystem::path path(metrics_path);
  return (path.parent_path() / (path.stem().string() + ".report.json")).string();
}

namespace {

// Every rank's measurement, in rank order (collective over `world`; null: one rank).
std::vector<RankMeasurement> gather_measurements(exec::comm::Communicator* world, const RankMeasurement& mine) {
  constexpr int fields = 7;
  const double row[fields] = {static_cast<double>(mine.rank), static_cast<double>(mine.threads),
                              static_cast<double>(mine.steps_timed), mine.median_step_s, mine.vm_hwm_bytes,
                              mine.ledger_peak_bytes, mine.cpu_share};
  const int ranks = world != nullptr ? world->size() : 1;
  std::vector<double> all(static_cast<std::size_t>(fields * ranks));
  if (world != nullptr) {
    world->all_gather(row, all.data(), fields, exec::comm::DataType::f64);
  } else {
    std::copy(row, row + fields, all.begin());
  }
  std::vector<RankMeasurement> measured;
  for (int r = 0; r < ranks; ++r) {
    const double* v = all.data() + static_cast<std::ptrdiff_t>(r) * fields;
    RankMeasurement m;
    m.rank = static_cast<int>(v[0]);
    m.threads = static_cast<int>(v[1]);
    m.steps_timed = static_cast<std::int64_t>(v[2]);
    m.median_step_s = v[3];
    m.vm_hwm_bytes = v[4];
    m.ledger_peak_bytes = v[5];
    m.cpu_share = v[6];
    measured.push_back(m);
  }
  return measured;
}

}  // namespace

Problems write_run_report(exec::comm::Communicator* world, const PlanFile& plan_file, const std::string& data_spec,
                          const Loaded<RunPrediction>& prediction, const RankMeasurement& mine,
                          const ComputeThreads& threads, const std::string& json_path) {
  const std::vector<RankMeasurement> measured = gather_measurements(world, mine);
  if (world != nullptr && world->rank() != 0) return {};

  using Json = nlohmann::ordered_json;
  const bool priced = prediction.ok();
  const RunPrediction& p = prediction.value;
  Json j;
  j["plan"] = {{"model", plan_file.model.name},
               {"mesh", plan_file.plan.mesh.to_string()},
               {"world_size", plan_file.plan.mesh.world_size()},
               {"micro_batch", plan_file.plan.micro_batch},
               {"global_batch", plan_file.plan.global_batch},
               {"schedule", to_string(plan_file.plan.schedule)},
               {"zero_stage", plan_file.plan.zero_stage},
               {"data", data_spec}};
  auto environment = [](const char* name) -> Json {
    const char* value = std::getenv(name);
    return value ? Json(value) : Json(nullptr);
  };
  j["threads"] = {{"per_rank", threads.threads},
                  {"source", threads.source},
                  {"GOMP_SPINCOUNT", environment("GOMP_SPINCOUNT")},  // cli/openmp_env.hpp
                  {"OMP_WAIT_POLICY", environment("OMP_WAIT_POLICY")}};
  j["load_average_1min"] = load_average_1min();
  if (priced) {
    j["prediction"] = {{"cluster", p.cluster},
                       {"cluster_source", p.cluster_source},
                       {"backend", p.on_gpu ? "cuda" : "cpu"},
                       {"device_scaled_to_cores", p.threads_per_rank},
                       {"threaded_rates", p.threaded_rates},
                       {"step_s", p.step_s},
                       {"compute_s", p.compute_s},
                       {"communication_exposed_s", p.communication_exposed_s},
                       {"bubble_s", p.bubble_s},
                       {"optimizer_s", p.optimizer_s}};
  } else {
    std::string why;
    for (const auto& problem : prediction.problems) why += (why.empty() ? "" : "; ") + describe(problem);
    j["prediction"] = {{"cluster", p.cluster}, {"error", why}};
  }
  j["plan_file_prediction"] = {{"cluster", plan_file.cluster.name},
                               {"step_s", p.plan_file_step_s ? Json(*p.plan_file_step_s) : Json(nullptr)}};
  // The prediction a rank's measured memory is compared with: what the ledger can see, or the whole
  // process (VmHWM) against the model's total.
  const auto predicted_memory = [&](std::size_t index, bool ledger) {
    const std::vector<double>& v = ledger ? p.ledger_bytes : p.memory_bytes;
    return index < v.size() ? v[index] : 0.0;
  };
  Json rows = Json::array();
  for (const auto& m : measured) {
    const auto index = static_cast<std::size_t>(m.rank);
    const bool ledger = m.ledger_peak_bytes >= 0;
    Json r = {{"rank", m.rank},
              {"threads", m.threads},
              {"steps_timed", m.steps_timed},
              {"measured_median_step_s", m.median_step_s},
              {"cpu_share", m.cpu_share}};
    if (priced) {
      r["stage"] = index < p.stage.size() ? p.stage[index] : 0;
      r["predicted_step_s"] = p.step_s;
      r["measured_over_predicted"] = p.step_s > 0 ? m.median_step_s / p.step_s : 0;
      r["predicted_memory_bytes"] = predicted_memory(index, ledger);
      r["predicted_device_bytes"] = index < p.memory_bytes.size() ? p.memory_bytes[index] : 0;
    }
    r["measured_vm_hwm_bytes"] = m.vm_hwm_bytes;
    r["measured_ledger_peak_bytes"] = ledger ? Json(m.ledger_peak_bytes) : Json(nullptr);
    r["memory_compared"] = ledger ? "ledger" : "vm_hwm";
    rows.push_back(r);
  }
  j["ranks"] = rows;

  // The table (stdout, rank 0).
  std::cout << "\nmeasured vs predicted (" << p.cluster << ": " << (priced ? p.cluster_source : std::string("not priced"))
            << "; " << threads.threads << (threads.threads == 1 ? " thread" : " threads") << " per rank: "
            << threads.source << format("; load average %.2f)\n", load_average_1min());
  if (!priced) {
    for (const auto& problem : prediction.problems) std::cout << "  not priced: " << describe(problem) << "\n";
  } else {
    std::cout << format("  predicted step %.4g s = compute ", p.step_s) << format("%.4g", p.compute_s)
              << format(" + exposed communication %.4g", p.communication_exposed_s) << format(" + bubble %.4g", p.bubble_s)
              << format(" + optimizer %.4g s\n", p.optimizer_s);
    if (p.threads_per_rank > 1 && !p.on_gpu) {
      std::cout << "  each rank priced as " << p.threads_per_rank << " local-cpu cores"
                << (p.threaded_rates ? " at the rates calibrate measured for one process of that many threads\n"
                                     : " at one core's rates x threads (calibrate measured no rates for this thread count: "
                                       "an optimistic price)\n");
    }
  }
  std::cout << "  rank  stage  threads  steps  cpu share  predicted s  measured s  measured/predicted  predicted MiB  measured MiB\n";
  for (const auto& m : measured) {
    const auto index = static_cast<std::size_t>(m.rank);
    const bool ledger = m.ledger_peak_bytes >= 0;
    std::cout << format("  %4.0f", m.rank) << format("  %5.0f", priced && index < p.stage.size() ? static_cast<double>(p.stage[index]) : 0)
              << format("  %7.0f", m.threads) << format("  %5.0f", static_cast<double>(m.steps_timed))
              << format("  %9.2f", m.cpu_share)
              << (priced ? format("  %11.4g", p.step_s) : std::string("            -"))
              << format("  %10.4g", m.median_step_s)
              << (priced && p.step_s > 0 ? format("  %18.3f", m.median_step_s / p.step_s) : std::string("                   -"))
              << pad(priced && index < p.memory_bytes.size() ? mib(predicted_memory(index, ledger)) : std::string("-"), 15)
              << pad(mib(ledger ? m.ledger_peak_bytes : m.vm_hwm_bytes), 14) << (ledger ? " (ledger)" : " (VmHWM)") << "\n";
  }
  if (!json_path.empty()) {
    Problems problems = write_file_atomically(json_path, [&](std::ostream& o) { o << j.dump(2) << "\n"; });
    if (!has_errors(problems)) std::cout << "  report: " << json_path << "\n";
    return problems;
  }
  return {};
}

}  // namespace meshplan::cli
