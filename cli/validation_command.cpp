// `meshplan validation`: the cost model against every published figure in
// model/published_cases.cpp, as the Markdown page docs/validation.md
// (regenerate with `meshplan validation > docs/validation.md`): Korthikanti,
// ZeRO, torchtitan's H100 peak memory, published multi-GPU throughputs as
// step times, the H100 section.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.hpp"
#include "model/collectives.hpp"
#include "model/overlap_switches.hpp"
#include "model/pipeline_time.hpp"
#include "model/presets.hpp"
#include "model/published_cases.hpp"
#include "model/stage_partition.hpp"

namespace meshplan::cli {
namespace {

std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

std::string describe_plan(const Plan& plan) {
  std::string text = plan.mesh.to_string() + ", b " + std::to_string(plan.micro_batch) + ", B " +
                     std::to_string(plan.global_batch) + ", " + to_string(plan.schedule);
  if (plan.zero_stage > 0) text += ", ZeRO " + std::to_string(plan.zero_stage);
  return text;
}

// One table; returns (mean |error|, worst |error|).
std::pair<double, double> table(std::ostream& out, const std::vector<PublishedResult>& results) {
  out << "| case | plan | published | predicted | error |\n|---|---|---:|---:|---:|\n";
  double sum = 0, worst = 0;
  for (const auto& r : results) {
    const std::string unit = unit_of(r.c.quantity);
    out << "| " << r.c.name << " | " << describe_plan(r.c.plan) << " | " << fixed(r.c.published, 2) << " " << unit << " | "
        << fixed(r.predicted, 2) << " " << unit << " | " << (r.error() >= 0 ? "+" : "") << fixed(100 * r.error(), 1)
        << "% |\n";
    sum += std::abs(r.error());
    worst = std::max(worst, std::abs(r.error()));
  }
  const double mean = results.empty() ? 0 : sum / static_cast<double>(results.size());
  out << "\nMean |error| " << fixed(100 * mean, 2) << "%, worst " << fixed(100 * worst, 2) << "%.\n\n";
  return {mean, worst};
}

// Mesh, stage layers when uneven, schedule, ZeRO, the tp and p2p overlaps and a precision other than
// bf16 or fp16: what the multi-GPU table's plan column says.
std::string describe_mesh(const Plan& plan) {
  std::string text = plan.mesh.to_string();
  if (plan.mesh.size(Axis::pp) > 1) text += ", " + to_string(plan.schedule);
  if (!plan.stage_layers.empty()) text += ", stage layers " + stage_layers_text(plan.stage_layers);
  if (plan.zero_stage > 0) text += ", ZeRO " + std::to_string(plan.zero_stage);
  if (plan.sequence_parallel) text += ", SP";
  for (const OverlapSwitch& s : kOverlapSwitches) {
    if (plan.*s.field) text += ", " + std::string(s.short_name);
  }
  if (plan.precision == Precision::fp8 || plan.precision == Precision::fp32) text += ", " + to_string(plan.precision);
  return text;
}

// Published multi-GPU runs: one row per case, its notes below the table, then
// the median and 90th percentile against issue 15's targets.
void multi_gpu_table(std::ostream& out, const std::vector<PublishedResult>& results) {
  out << "| # | case | source | plan | b, B x s | recompute | attention | published | implied step | predicted step | "
         "error | within 12% |\n|---:|---|---|---|---|---|---|---:|---:|---:|---:|---|\n";
  int row = 0;
  for (const auto& r : results) {
    const Plan& plan = r.c.plan;
    const std::int64_t seq = plan.seq_len > 0 ? plan.seq_len : r.c.model.default_seq_len();
    out << "| " << ++row << " | " << r.c.name << " | " << r.c.source << " | " << describe_mesh(plan) << " | "
        << plan.micro_batch << ", " << plan.global_batch << " x " << seq << " | " << to_string(plan.recompute) << " | "
        << to_string(plan.attention) << " | " << published_figure_text(r.c) << " | " << fixed(r.c.published, 2)
        << " s | " << fixed(r.predicted, 2) << " s | " << (r.error() >= 0 ? "+" : "") << fixed(100 * r.error(), 1)
        << "% | " << (std::abs(r.error()) <= kMultiGpuP90Target ? "yes" : "**no**") << " |\n";
  }
  out << "\nNotes (assumptions for what each source leaves unstated):\n\n";
  row = 0;
  for (const auto& r : results) {
    out << ++row << ". " << r.c.note << ".";
    if (std::abs(r.error()) > kMultiGpuP90Target) {
      out << " **Misses by " << fixed(100 * (std::abs(r.error()) - kMultiGpuP90Target), 1) << " points**; most likely: "
          << r.c.miss_reason << ".";
    }
    out << "\n";
  }
  const double median = error_quantile(results, 0.5), p90 = error_quantile(results, 0.9);
  out << "\nMedian |error| " << fixed(100 * median, 1) << "% (target " << fixed(100 * kMultiGpuMedianTarget, 0)
      << "%), 90th percentile " << fixed(100 * p90, 1) << "% (target " << fixed(100 * kMultiGpuP90Target, 0)
      << "%): target " << (median <= kMultiGpuMedianTarget && p90 <= kMultiGpuP90Target ? "met" : "**not met**")
      << ".\n\n";
}

// Whether two plans run the same pipeline on the same model: tp, pp, the
// micro-batch and how many of them each pipeline runs, recompute, schedule
// and sequence parallelism (the data-parallel width may differ).
bool same_pipeline(const PublishedCase& a, const PublishedCase& b) {
  const TransformerDims &x = a.model.transformer, &y = b.model.transformer;
  const Plan &p = a.plan, &q = b.plan;
  return a.model.kind == ModelKind::transformer && b.model.kind == ModelKind::transformer && x.layers == y.layers &&
         x.hidden == y.hidden && x.heads == y.heads && x.vocab == y.vocab && x.seq_len == y.seq_len &&
         p.mesh.size(Axis::tp) == q.mesh.size(Axis::tp) && p.mesh.size(Axis::pp) == q.mesh.size(Axis::pp) &&
         p.micro_batch == q.micro_batch && p.micro_batches() == q.micro_batches() && p.recompute == q.recompute &&
         p.schedule.kind == q.schedule.kind && p.schedule.virtual_stages == q.schedule.virtual_stages &&
         p.sequence_parallel == q.sequence_parallel;
}

// A multi-GPU row whose pipeline is a Table 5 row's: the two measurements,
// a year apart, bound how near any one cost model can come to both.
void same_pipeline_cross_check(std::ostream& out, const std::vector<PublishedResult>& multi,
                               const std::vector<PublishedResult>& table5) {
  bool any = false;
  int row = 0;
  for (const auto& r : multi) {
    ++row;
    for (const auto& k : table5) {
      if (!same_pipeline(r.c, k.c)) continue;
      if (!any) out << "Cross-check: rows whose pipeline, under the assumptions above, is one that\n"
                       "Korthikanti et al. 2022 (Table 5) also measured.\n\n";
      any = true;
      const double measured_gap = r.c.published / k.c.published - 1, predicted_gap = r.predicted / k.predicted - 1;
      out << "- Row " << row << " (" << r.c.name << ") runs the pipeline of \"" << k.c.name << "\" ("
          << k.c.plan.mesh.to_string() << ", b " << k.c.plan.micro_batch << ", " << k.c.plan.micro_batches()
          << " micro-batches per pipeline, " << to_string(k.c.plan.recompute) << " recompute, "
          << to_string(k.c.plan.schedule) << "), with " << r.c.plan.mesh.size(Axis::dp)
          << " data-parallel replicas instead of " << k.c.plan.mesh.size(Axis::dp) << ". Measured: "
          << fixed(r.c.published, 2) << " s (" << r.c.source << ") against " << fixed(k.c.published, 2) << " s ("
          << k.c.source << "), " << (measured_gap >= 0 ? "+" : "") << fixed(100 * measured_gap, 1)
          << "%. meshplan puts the difference at " << (predicted_gap >= 0 ? "+" : "") << fixed(100 * predicted_gap, 1)
          << "% (" << fixed(r.predicted, 2) << " s against " << fixed(k.predicted, 2)
          << " s: the data-parallel gradient reduction). A model that predicted the two rows' difference as "
             "meshplan does could not be within "
          << fixed(100 * std::abs(measured_gap - predicted_gap) / (2 + measured_gap + predicted_gap), 1)
          << "% of both.\n";
    }
  }
  if (any) out << "\n";
}

}  // namespace

void write_validation_report(std::ostream& out) {
  out << "# Validation: predicted against published figures\n\n"
         "Generated by `meshplan validation > docs/validation.md` from the cases in\n"
         "`model/published_cases.cpp` (sources: `../shared/reference/validation-visible.md`).\n"
         "No constant of the cost model was fitted to these rows: device and link\n"
         "efficiencies come from the presets, each with its own source or stated\n"
         "assumption (`presets/`), and were set before these comparisons were run,\n"
         "except the A100's L2 bandwidth (`l2_bandwidth_gb_per_s`), added after the\n"
         "iteration times below had been found short on every row: it is the A100\n"
         "whitepaper's ratio to the V100 times a published V100 measurement, not a\n"
         "value chosen to fit, and docs/cost-model.md (\"Tile traffic\") shows how\n"
         "the rows move with it.\n"
         "The same cases are golden tests (`tests/test_golden_*.cpp`).\n\n";

  out << "## Iteration time: Korthikanti et al. 2022, Table 5\n\n"
         "Megatron-LM on Selene (DGX A100 80GB, 8 x HDR InfiniBand per node), tp 8,\n"
         "sequence 2048, vocabulary 51200, bf16. Target: each row within 8%, mean within 5%\n"
         "(Calculon reports 3.65% mean and 8.87% worst on these eight rows).\n\n";
  const auto [time_mean, time_worst] = table(out, predict(korthikanti_iteration_time_cases()));
  out << "Target " << (time_mean <= 0.05 && time_worst <= 0.08 ? "met" : "**not met**") << ": mean "
      << fixed(100 * time_mean, 2) << "% (target 5%), worst " << fixed(100 * time_worst, 2) << "% (target 8%).\n"
      << "Every row is predicted faster than measured; see \"Known gaps\" in docs/cost-model.md.\n\n";

  out << "## Activation memory of the first pipeline stage: Korthikanti et al. 2022, Figure 1\n\n"
         "Read off the figure; target 5% per row. Our figures include the embedding and\n"
         "output-layer activations that the figure leaves out (Sec. 4.3).\n\n";
  table(out, predict(korthikanti_activation_cases()));

  out << "## Model states per device: ZeRO, Rajbhandari et al. 2020, Figure 1\n\n"
         "Psi = 7.5B parameters, N_d = 64, mixed-precision Adam (K = 12).\n\n";
  table(out, predict(zero_model_state_cases()));

  out << "## Peak memory per device: torchtitan on H100\n\n"
         "torchtitan's Llama 3.1 8B FSDP runs on 8 and 128 H100s (its December 2024\n"
         "benchmark page, the rows without torch.compile or Float8), as the caching\n"
         "allocator's peak reserved memory it logs; the prediction is the worst\n"
         "stage's total less the CUDA context, which the allocator does not see.\n"
         "Target: each row within 10% (issue 15's median for real steps).\n\n";
  const std::vector<PublishedResult> peaks = predict(torchtitan_h100_memory_cases());
  const auto [peak_mean, peak_worst] = table(out, peaks);
  if (!peaks.empty()) out << "Assumed for both rows: " << peaks.front().c.note << ".\n";
  out << "\nTarget " << (peak_worst <= kPeakMemoryTarget ? "met" : "**not met**") << ": worst "
      << fixed(100 * peak_worst, 2) << "% (target " << fixed(100 * kPeakMemoryTarget, 0) << "%), mean "
      << fixed(100 * peak_mean, 2) << "%.\n\n";

  out << "## Published multi-GPU runs: step time\n\n"
         "Each published throughput becomes the step time it implies for the stated\n"
         "batch and device count: tokens/s as B s / (X n); Megatron's TFLOP/s with\n"
         "Narayanan et al. 2021, Eq. 3; other TFLOP/s, where the source gives no\n"
         "formula, with meshplan's own model FLOPs (so that row compares MFU).\n"
         "Every row is a full plan; what the source leaves out is assumed and\n"
         "said in the row's note. Targets (issue 15): median |error| within 5%,\n"
         "90th percentile within 12%; a row outside 12% is marked, not tuned.\n"
         "torchtitan's tables are taken whole but for their two \"selective layer\"\n"
         "rows (every second layer checkpointed whole), which no plan states: a\n"
         "plan's recompute applies to every layer.\n\n";
  const std::vector<PublishedResult> multi_gpu = predict(published_multi_gpu_cases());
  multi_gpu_table(out, multi_gpu);
  same_pipeline_cross_check(out, multi_gpu, predict(korthikanti_iteration_time_cases()));

  out << "## Hopper, single GPU\n\n"
         "The `h100-sxm` preset is built from one H100 SXM measured through PyTorch\n"
         "2.11 (`../shared/reference/h100-measured.md`: bf16 GEMMs, fused attention,\n"
         "memory-bound op classes, fused AdamW), and `h200` from one H200 measured the\n"
         "same way (`tests/data/h200-measured.jsonl`, `scripts/gpu/measure_device.py`);\n"
         "those figures are inputs here, not checks. No published single-H100 training\n"
         "step with a fully stated plan (model, batch, sequence, recompute, attention and\n"
         "a per-step time or throughput) was found in the sources reachable when this\n"
         "page was written (llm.c's GPT-2 reproductions, discussions #481 and #677,\n"
         "state their runs on 8 A100 / 8 H100 nodes and were reachable only in part).\n\n"
         "Real steps measured on one H200 with PyTorch 2.11 (GPT-2 124M-1.5B and Llama\n"
         "3.2 1B/3B, sequence 1024-2048, with and without full recompute, fused\n"
         "attention, eager and torch.compile; 16 cases and 6 held out) are compared in\n"
         "[validation-h200.md](validation-h200.md), with the commands that measured and\n"
         "compared them (`scripts/gpu/measure.sh`, `scripts/gpu/compare_steps.py`); the\n"
         "golden test `GoldenH200Steps` checks the median errors there.\n\n";

  out << "## Closed forms of the pipeline and collective rules\n\n"
         "| figure | published | predicted |\n|---|---:|---:|\n";
  const std::vector<double> uniform(4, 1.0);
  for (std::int64_t m : {2, 8, 27}) {
    const double efficiency = static_cast<double>(m) / pipeline_timing(uniform, m, Schedule{}).step_s;
    const char* published = m == 2 ? "40%" : m == 8 ? "about 73%" : "90%";
    out << "| pipeline efficiency, 4 stages, " << m << " micro-batches | " << published << " | "
        << fixed(100 * efficiency, 1) << "% |\n";
  }
  out << "| all-reduce busbw / algbw, n = 8 | 2(n-1)/n = 1.75 | " << fixed(bus_bandwidth_factor(Collective::all_reduce, 8), 4)
      << " |\n"
      << "| all-gather busbw / algbw, n = 8 | (n-1)/n = 0.875 | "
      << fixed(bus_bandwidth_factor(Collective::all_gather, 8), 4) << " |\n"
      << "| reduce-scatter busbw / algbw, n = 8 | (n-1)/n = 0.875 | "
      << fixed(bus_bandwidth_factor(Collective::reduce_scatter, 8), 4) << " |\n";
}

Command add_validation_command(CLI::App& app) {
  app.add_subcommand("validation", "Print the cost model against published figures (Markdown; docs/validation.md)");
  return []() {
    // The published rows describe the published hardware: a user preset of the same name
    // (a calibrated a100-80g, or a broken one) must not replace it. Said when there is one.
    const std::string user = user_presets_dir();
    std::error_code error;
    if (!user.empty() && std::filesystem::is_directory(user, error) && !std::filesystem::is_empty(user, error)) {
      std::cerr << "meshplan validation: note: built-in presets only; the user presets in " << user << " are not used\n";
    }
    use_built_in_presets_only();
    write_validation_report(std::cout);
    return exit_ok;
  };
}

}  // namespace meshplan::cli
