// `meshplan sweep`: the search of `meshplan plan` over the cross product of
// models, clusters, GPU counts and global batches, with one row per
// candidate, feasible or not (or only the feasible ones, --feasible-only),
// to CSV or JSON Lines, gzipped when the name ends in .gz (docs/formats.md,
// "Sweeps").
//
// Why rows as they come: a sweep can run for minutes and be stopped. Rows
// are written from search()'s on_candidate callback in a deterministic
// order, each as a whole line; Ctrl-C sets the search's cancel flag, so the
// file keeps every row written so far, flushed (a .gz file is finished with
// its trailer: cli/gzip_output.hpp), and the command exits 130.
#include <nlohmann/json.hpp>

#include <atomic>
#include <charconv>
#include <csignal>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/commands.hpp"
#include "cli/gzip_output.hpp"
#include "cli/progress.hpp"
#include "cli/search_options.hpp"
#include "model/search.hpp"

namespace meshplan::cli {
namespace {

struct SweepFlags {
  JobFlags job;
  SearchFlags search;
  std::string out = "-";
  bool feasible_only = false;
  bool no_progress = false;  // --no-progress (a plain flag: CLI11's "!--no-progress" shows as --no-progress{false} in --help)
};

// Set by SIGINT or SIGTERM (`timeout`, Slurm and systemd stop a job with it); read by the search between meshes.
std::atomic<bool> interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the SIGINT handler needs a lock-free flag");

extern "C" void on_sigint(int) { interrupted.store(true); }

// Ctrl-C once: stop cleanly. The handler resets itself, so a second Ctrl-C kills.
class SigintGuard {
 public:
  SigintGuard() {
    struct sigaction action {};
    action.sa_handler = on_sigint;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND | SA_RESTART;
    sigaction(SIGINT, &action, &previous_);
    sigaction(SIGTERM, &action, &previous_term_);
  }
  ~SigintGuard() {
    sigaction(SIGINT, &previous_, nullptr);
    sigaction(SIGTERM, &previous_term_, nullptr);
  }
  SigintGuard(const SigintGuard&) = delete;
  SigintGuard& operator=(const SigintGuard&) = delete;

 private:
  struct sigaction previous_ {};
  struct sigaction previous_term_ {};
};

// The overlap switches' columns (model/overlap_switches.hpp) stand after ep_dispatch, in the table's order.
std::vector<std::string> columns() {
  std::vector<std::string> names = {
      "model", "cluster", "world_size", "global_batch", "mesh", "dp", "fsdp", "tp", "pp", "cp", "ep", "micro_batch",
      "micro_batches", "zero", "recompute", "recompute_modules", "sequence_parallel", "schedule", "precision",
      "attention", "cp_comm", "fp32_gradients", "bf16_moments", "loss", "expert_tensor_parallel", "ep_dispatch"};
  for (const OverlapSwitch& s : kOverlapSwitches) names.emplace_back(s.key);
  names.insert(names.end(), {"stage_layers", "feasible", "reason", "memory_total_bytes", "memory_parameters_bytes",
                             "memory_gradients_bytes", "memory_optimizer_bytes", "memory_activations_bytes",
                             "memory_buffers_bytes", "step_s", "compute_s", "communication_s", "communication_exposed_s",
                             "bubble_s", "tokens_per_s", "mfu", "hfu"});
  return names;
}
const std::vector<std::string> kColumns = columns();

// A cell: text, a whole number, a real number or empty (not evaluated).
struct Cell {
  enum Kind { text, integer, real, boolean, empty } kind = empty;
  std::string text_value;
  std::int64_t integer_value = 0;
  double real_value = 0;
  bool boolean_value = false;
};

Cell text_cell(std::string value) { return {Cell::text, std::move(value), 0, 0, false}; }
Cell int_cell(std::int64_t value) { return {Cell::integer, {}, value, 0, false}; }
Cell real_cell(double value) { return {Cell::real, {}, 0, value, false}; }
Cell bool_cell(bool value) { return {Cell::boolean, {}, 0, 0, value}; }

// Shortest text that reads back as the same double.
std::string real_text(double value) {
  char buffer[32];
  const auto end = std::to_chars(buffer, buffer + sizeof buffer, value).ptr;
  return std::string(buffer, end);
}

std::vector<Cell> row_cells(const Job& job, const Candidate& c, double usable_bytes) {
  const Plan& plan = c.plan;
  const bool evaluated = c.rejection == Rejection::none || c.rejection == Rejection::out_of_memory;
  std::vector<Cell> row = {text_cell(job.model.name), text_cell(job.cluster.name), int_cell(job.world_size),
                           int_cell(job.global_batch), text_cell(plan.mesh.to_string())};
  for (Axis axis : all_axes) row.push_back(int_cell(plan.mesh.size(axis)));
  row.push_back(int_cell(plan.micro_batch));
  row.push_back(int_cell(plan.micro_batches()));
  row.push_back(int_cell(plan.zero_stage));
  row.push_back(text_cell(to_string(plan.recompute)));
  row.push_back(text_cell(plan.recompute == Recompute::selective ? recompute_modules_text(plan.recompute_modules) : ""));
  row.push_back(bool_cell(plan.sequence_parallel));
  row.push_back(text_cell(to_string(plan.schedule)));
  row.push_back(text_cell(to_string(plan.precision)));
  row.push_back(text_cell(to_string(plan.attention)));
  row.push_back(text_cell(to_string(plan.cp_comm)));
  row.push_back(bool_cell(plan.fp32_gradients));
  row.push_back(bool_cell(plan.bf16_moments));
  row.push_back(text_cell(to_string(plan.loss)));
  row.push_back(int_cell(expert_split(plan).tp));  // what splits each expert's width: tp, or 1 when the experts leave it
  row.push_back(text_cell(to_string(plan.ep_dispatch)));
  for (const OverlapSwitch& s : kOverlapSwitches) row.push_back(bool_cell(plan.*s.field));
  std::string stage_layers;  // as --stage-layers takes it; empty for an even split
  for (std::int64_t n : plan.stage_layers) stage_layers += (stage_layers.empty() ? "" : ",") + std::to_string(n);
  row.push_back(text_cell(stage_layers));
  row.push_back(bool_cell(c.rejection == Rejection::none));
  row.push_back(c.rejection == Rejection::none
                    ? Cell{}
                    : text_cell(to_string(c.rejection) + ": " + explain_rejection(c.rejection, job.model, usable_bytes)));
  if (!evaluated) {
    row.resize(kColumns.size());
    return row;
  }
  const MemoryBreakdown& m = c.estimate.worst_memory;
  const TimeEstimate& t = c.estimate.time;
  for (double value : {m.total_bytes(), m.parameters_bytes, m.gradients_bytes, m.optimizer_bytes, m.activations_bytes,
                       m.buffers_bytes, t.step_s, t.compute_s, t.communication_s, t.communication_exposed_s, t.bubble_s,
                       t.tokens_per_s, t.mfu, t.hfu}) {
    row.push_back(real_cell(value));
  }
  return row;
}

// CSV (RFC 4180: a field with a comma, quote or line break is quoted, quotes doubled) or JSON Lines.
class RowWriter {
 public:
  RowWriter(std::ostream& out, bool jsonl) : out_(out), jsonl_(jsonl) {
    if (!jsonl_) {
      std::string header;
      for (const auto& c : kColumns) header += (header.empty() ? "" : ",") + csv_field(c);
      out_ << header << "\n";
    }
  }

  void write(const std::vector<Cell>& row) {
    line_.clear();
    if (jsonl_) {
      nlohmann::ordered_json j;
      for (std::size_t i = 0; i < kColumns.size(); ++i) {
        const Cell& cell = row[i];
        switch (cell.kind) {
          case Cell::text: j[kColumns[i]] = cell.text_value; break;
          case Cell::integer: j[kColumns[i]] = cell.integer_value; break;
          case Cell::real: j[kColumns[i]] = cell.real_value; break;
          case Cell::boolean: j[kColumns[i]] = cell.boolean_value; break;
          case Cell::empty: j[kColumns[i]] = nullptr; break;
        }
      }
      line_ = j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    } else {
      for (std::size_t i = 0; i < kColumns.size(); ++i) {
        if (i) line_ += ',';
        const Cell& cell = row[i];
        switch (cell.kind) {
          case Cell::text: line_ += csv_field(cell.text_value); break;
          case Cell::integer: line_ += std::to_string(cell.integer_value); break;
          case Cell::real: line_ += real_text(cell.real_value); break;
          case Cell::boolean: line_ += cell.boolean_value ? "true" : "false"; break;
          case Cell::empty: break;
        }
      }
    }
    line_ += '\n';
    out_.write(line_.data(), static_cast<std::streamsize>(line_.size()));
  }

  static std::string csv_field(const std::string& text) {
    if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
    std::string quoted = "\"";
    for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + "\"";
  }

 private:
  std::ostream& out_;
  bool jsonl_;
  std::string line_;
};

// The output's format from its name: .csv, .jsonl, either + .gz, or - (CSV on stdout).
struct OutputFormat {
  bool jsonl = false;
  bool gzip = false;
};

std::optional<OutputFormat> output_format(const std::string& name) {
  if (name == "-") return OutputFormat{};
  const bool gzip = name.ends_with(".gz");
  const std::string base = gzip ? name.substr(0, name.size() - 3) : name;
  if (base.ends_with(".jsonl")) return OutputFormat{true, gzip};
  if (base.ends_with(".csv")) return OutputFormat{false, gzip};
  return std::nullopt;
}

int run_sweep(const SweepFlags& f) {
  Problems problems;
  const bool to_stdout = f.out == "-";
  const std::optional<OutputFormat> format = output_format(f.out);
  if (!format) {
    problems.push_back({Severity::error, "--out", "'" + f.out + "': the format comes from the extension: .csv or .jsonl, "
                                                  "with .gz to compress (or - for CSV on stdout)"});
  }
  auto jobs = resolve_jobs(f.job, f.search, true);
  problems.insert(problems.end(), jobs.problems.begin(), jobs.problems.end());
  if (has_errors(problems) || jobs.value.empty()) {
    for (const auto& p : problems) std::cerr << "meshplan sweep: " << describe(p) << "\n";
    return exit_bad_input;
  }
  for (const auto& p : problems) std::cerr << "meshplan sweep: " << describe(p) << "\n";  // warnings only here
  for (const Job& job : jobs.value)
    if (!job.batch_note.empty()) std::cerr << "meshplan sweep: note: " << job.batch_note << "\n";

  interrupted.store(false);
  const SigintGuard guard;
  std::ofstream file;
  std::unique_ptr<GzipOutputFile> gzip_file;
  if (format->gzip) {
    gzip_file = std::make_unique<GzipOutputFile>(f.out);
  } else if (!to_stdout) {
    file.open(f.out, std::ios::binary | std::ios::trunc);
  }
  if ((format->gzip && !gzip_file->is_open()) || (!format->gzip && !to_stdout && !file)) {
    std::cerr << "meshplan sweep: --out " << f.out << ": cannot open for writing\n";
    return exit_bad_input;
  }
  std::ostream& out = gzip_file ? *gzip_file : to_stdout ? std::cout : static_cast<std::ostream&>(file);
  RowWriter writer(out, format->jsonl);

  // Progress counts meshes over all jobs; enumerating them is cheap.
  std::vector<std::int64_t> meshes_per_job;
  std::int64_t meshes_total = 0;
  for (const Job& job : jobs.value) {
    meshes_per_job.push_back(static_cast<std::int64_t>(enumerate_meshes(job.world_size, job.space, job.cluster.devices_per_node).size()));
    meshes_total += meshes_per_job.back();
  }
  Progress progress(std::cerr, stderr_is_terminal());
  std::int64_t candidates = 0, rows = 0, feasible = 0, meshes_before = 0, plans_before = 0;
  std::vector<Cell> cells;

  for (std::size_t j = 0; j < jobs.value.size() && !interrupted.load(); ++j) {
    const Job& job = jobs.value[j];
    const Evaluator evaluator(job.model, job.cluster, job.world_size, job.seq_len);
    const double usable = job.cluster.device.memory_bytes * (1 - job.space.memory_headroom);
    SearchOptions options;
    options.threads = static_cast<int>(f.search.threads);
    options.keep_ranked = false;
    options.cancel = &interrupted;
    options.on_candidate = [&](const Candidate& candidate) {
      ++candidates;
      const bool fits = candidate.rejection == Rejection::none;
      if (fits) ++feasible;
      if (f.feasible_only && !fits) return;
      writer.write(row_cells(job, candidate, usable));
      ++rows;
    };
    if (!f.no_progress) {
      options.on_progress = [&](std::int64_t plans, std::int64_t meshes_done, std::int64_t) {
        const double fraction = meshes_total > 0 ? static_cast<double>(meshes_before + meshes_done) / static_cast<double>(meshes_total) : 1;
        progress.update(fraction, plans_before + plans);
      };
    }
    const SearchResult result = search(evaluator, job.global_batch, job.space, options);
    meshes_before += meshes_per_job[j];
    plans_before += result.stats.plans;
  }
  out.flush();
  if (gzip_file) gzip_file->close();  // the trailer (CRC-32, length): a whole gzip stream, also after Ctrl-C
  progress.finish();
  const std::string where = to_stdout ? "stdout" : f.out;
  if (!out) {
    std::cerr << "meshplan sweep: --out " << where << ": write failed after " << rows << " rows (disk full?)\n";
    return exit_bad_input;
  }
  char summary[200];
  std::snprintf(summary, sizeof summary, "%lld rows (%lld feasible of %lld candidates%s) in %.2f s",
                static_cast<long long>(rows), static_cast<long long>(feasible), static_cast<long long>(candidates),
                f.feasible_only ? "; the others left out, --feasible-only" : "", progress.elapsed_s());
  if (interrupted.load()) {
    std::cerr << "meshplan sweep: interrupted; kept " << rows << " rows in " << where << " (" << summary << ")\n";
    return exit_interrupted;
  }
  std::cerr << "meshplan sweep: " << summary << " -> " << where << "\n";
  return exit_ok;
}

}  // namespace

Command add_sweep_command(CLI::App& app) {
  auto* command = app.add_subcommand(
      "sweep", "Search plans for every combination of models, clusters, GPU counts and batches; one row per candidate");
  command->footer(
      "Example: meshplan sweep --model gpt3-175b,llama2-70b --gpus 512,1024 --global-batch 1024,1536 --out sweep.csv\n"
      "Most rows are rejected candidates: --feasible-only leaves them out. --out sweep.csv.gz (or .jsonl.gz)\n"
      "writes gzip (the README's two-model sweep: 137 MB of CSV, 28 MB feasible only, 12 MB gzipped, 4.4 MB both).\n"
      "Ctrl-C stops early and keeps every row written so far (exit status 130).\n"
      "Exit status: 0 done, 2 bad input, 130 interrupted.");
  auto flags = std::make_shared<SweepFlags>();
  add_job_flags(*command, flags->job, true);
  add_search_flags(*command, flags->search);
  command->add_option("--out", flags->out, "Output file: .csv or .jsonl, + .gz for gzip (sweep.csv.gz), or - for CSV on stdout")
      ->capture_default_str();
  command->add_flag("--feasible-only", flags->feasible_only,
                    "Write only the candidates that fit (the summary still counts every candidate)");
  command->add_flag("--no-progress", flags->no_progress, "Do not show the progress line on stderr");
  return [flags]() { return run_sweep(*flags); };
}

}  // namespace meshplan::cli
