// `meshplan plan`: search every plan for one model on one cluster and show
// the best ones, the trade-off between speed and memory, why the rest were
// turned down, and a decision guide (model/decision_guide.hpp); or (--json) the top plans as
// the objects `meshplan explain --json` prints; or (--emit-plan) write the
// chosen plan as a plan file for `meshplan train` (cli/emit_plan.hpp). When
// no plan fits, it says how much memory a device would need and the fewest
// devices that fit (model/fit_search.hpp).
//
// The ranking comes from the fast evaluator inside search(); the JSON and
// the plan file come from explain_plan() on those few plans, so they carry
// the same per-stage memory breakdown `meshplan explain` would print.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include "cli/commands.hpp"
#include "cli/decision_guide.hpp"
#include "cli/emit_plan.hpp"
#include "cli/progress.hpp"
#include "cli/search_options.hpp"
#include "cli/text_report.hpp"
#include "model/explain.hpp"
#include "model/fit_search.hpp"
#include "model/plan_file.hpp"
#include "model/report_json.hpp"
#include "model/search.hpp"
#include "model/stage_partition.hpp"

namespace meshplan::cli {
namespace {

struct PlanCommandFlags {
  JobFlags job;
  SearchFlags search;
  std::int64_t top = 10;
  bool json = false;
  std::string emit_plan;
  std::int64_t pick = 1;
  bool guide_only = false;
};


// A text table: columns sized to their widest cell, numbers right-aligned.
class Table {
 public:
  explicit Table(std::vector<std::pair<std::string, bool>> columns) : columns_(std::move(columns)) {}  // (header, right-aligned)
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& out, const std::string& indent) const {
    std::vector<std::size_t> width(columns_.size());
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      width[c] = columns_[c].first.size();
      for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
    }
    auto line = [&](auto cell_of) {
      std::string text = indent;
      for (std::size_t c = 0; c < columns_.size(); ++c) {
        const std::string cell = cell_of(c);
        const std::string fill(width[c] - cell.size(), ' ');
        text += (c ? "  " : "") + (columns_[c].second ? fill + cell : cell + fill);
      }
      while (!text.empty() && text.back() == ' ') text.pop_back();
      out << text << "\n";
    };
    line([&](std::size_t c) { return columns_[c].first; });
    for (const auto& row : rows_) line([&](std::size_t c) { return row[c]; });
  }

 private:
  std::vector<std::pair<std::string, bool>> columns_;
  std::vector<std::vector<std::string>> rows_;
};

std::string batch_split(const Plan& plan) {
  return std::to_string(plan.micro_batch) + " x " + std::to_string(plan.micro_batches());
}

Explanation explain_candidate(const Job& job, const Plan& plan) {
  Explanation ex = explain_plan(job.model, job.cluster, Deployment{job.world_size, 0}, plan);
  ex.deployment.rank = -1;  // report the worst device, as `meshplan explain` does without --rank
  return ex;
}

// The search leaves seq_len at 0 (the evaluator holds the length); say it
// explicitly when --seq was given, so explain_plan costs the same sequence.
Plan plan_of(const Job& job, const Candidate& candidate) {
  Plan plan = candidate.plan;
  plan.seq_len = job.seq_flag;
  return plan;
}

double usable_bytes(const Job& job) { return job.cluster.device.memory_bytes * (1 - job.space.memory_headroom); }

// "16338 feasible of 90291 candidates; 22881 exceed the 76.0 GiB usable per device; ..."
std::string rejection_summary(const Job& job, const SearchStats& stats, const std::string& separator) {
  const bool only_transformer_recompute =
      std::all_of(job.space.recomputes.begin(), job.space.recomputes.end(), recompute_of_transformer_layers);
  if (stats.plans == 0 && job.model.kind != ModelKind::transformer && only_transformer_recompute) {
    std::string modes;
    for (Recompute r : job.space.recomputes) modes += (modes.empty() ? "" : ",") + to_string(r);
    return "no candidates: --recompute " + modes + " applies to transformer layers; " + to_string(job.model.kind) +
           " models recompute none or full";
  }
  if (stats.plans == 0) {
    std::string axes;
    for (Axis a : job.space.axes) axes += (axes.empty() ? "" : ",") + to_string(a);
    const std::int64_t max_tp = job.space.max_tp > 0 ? job.space.max_tp : job.cluster.devices_per_node;
    std::string text = "no candidates: no mesh over the axes " + axes + " has " + std::to_string(job.world_size) +
                       " devices with tp <= " + std::to_string(max_tp);
    if (job.space.max_pp > 0) text += " and pp <= " + std::to_string(job.space.max_pp);
    return text + " and micro-batches that fit the global batch " + std::to_string(job.global_batch);
  }
  std::string text = std::to_string(stats.feasible) + " feasible of " + std::to_string(stats.plans) + " candidates";
  std::vector<std::pair<std::int64_t, Rejection>> counts;
  for (std::size_t r = 1; r < stats.rejected.size(); ++r) {
    if (stats.rejected[r] > 0) counts.push_back({stats.rejected[r], static_cast<Rejection>(r)});
  }
  std::stable_sort(counts.begin(), counts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [count, rejection] : counts) {
    text += separator + std::to_string(count) + " " + explain_rejection(rejection, job.model, usable_bytes(job));
  }
  return text;
}

void print_header(std::ostream& out, const Job& job) {
  const std::int64_t per_node = job.cluster.devices_per_node;
  const std::int64_t nodes = (job.world_size + per_node - 1) / per_node;
  out << "meshplan plan: " << job.model.name << " on " << job.world_size << " x " << job.cluster.device.name << " ("
      << job.cluster.name << ": " << nodes << (nodes == 1 ? " node" : " nodes") << " of " << per_node
      << "); global batch " << job.global_batch;
  if (job.model.kind == ModelKind::transformer) out << " x " << job.seq_len << " tokens";
  out << "\nsearch: " << describe_space(job.space) << "; headroom " << format("%g", 100 * job.space.memory_headroom)
      << "%\n";
}

// Whether any of `indices` into `ranked` has an uneven stage split: only then
// do the tables get a "stage layers" column.
bool any_uneven(const std::vector<Candidate>& ranked, const std::vector<std::size_t>& indices) {
  return std::any_of(indices.begin(), indices.end(), [&](std::size_t i) { return !ranked[i].plan.stage_layers.empty(); });
}

std::string layers_cell(const Plan& plan) {
  return plan.stage_layers.empty() ? "even" : stage_layers_text(plan.stage_layers);
}

void print_ranked(std::ostream& out, const Job& job, const SearchResult& result, std::size_t top) {
  const bool tokens = job.model.kind == ModelKind::transformer;
  std::vector<std::size_t> shown;
  for (std::size_t i = 0; i < std::min(top, result.ranked.size()); ++i) shown.push_back(i);
  const bool uneven = any_uneven(result.ranked, shown);
  const bool attentions = job.space.attentions.size() > 1;  // --attention fused,unfused: tell the rows apart
  const bool experts = std::any_of(shown.begin(), shown.end(), [&](std::size_t i) {  // some rows run experts out of tp
    return expert_split(result.ranked[i].plan).tokens > 1;
  });
  std::vector<std::pair<std::string, bool>> columns = {{"rank", true},
                                                       {"mesh", false},
                                                       {"micro-batch", true},
                                                       {"zero", true},
                                                       {"recompute", false},
                                                       {"sp", false},
                                                       {"schedule", false}};
  if (attentions) columns.push_back({"attention", false});
  if (experts) columns.push_back({"expert tp", false});
  if (uneven) columns.push_back({"stage layers", false});
  for (auto column : std::vector<std::pair<std::string, bool>>{{"GiB/device", true},
                                                                 {"step s", true},
                                                                 {"MFU %", true},
                                                                 {tokens ? "tokens/s" : "samples/s", true},
                                                                 {"exposed comm s", true},
                                                                 {"bubble s", true}}) {
    columns.push_back(column);
  }
  Table table(columns);
  for (std::size_t i : shown) {
    const Candidate& c = result.ranked[i];
    const TimeEstimate& t = c.estimate.time;
    std::vector<std::string> row = {std::to_string(i + 1), c.plan.mesh.to_string(), batch_split(c.plan),
                                    std::to_string(c.plan.zero_stage), to_string(c.plan.recompute),
                                    c.plan.sequence_parallel ? "on" : "off", to_string(c.plan.schedule)};
    if (attentions) row.push_back(to_string(c.plan.attention));
    if (experts) row.push_back(std::to_string(expert_split(c.plan).tp));
    if (uneven) row.push_back(layers_cell(c.plan));
    for (std::string cell : {gib(c.estimate.worst_memory.total_bytes()), format("%.3f", t.step_s),
                             format("%.1f", 100 * t.mfu), format("%.0f", t.tokens_per_s),
                             format("%.3f", t.communication_exposed_s), format("%.3f", t.bubble_s)}) {
      row.push_back(std::move(cell));
    }
    table.add(std::move(row));
  }
  out << "\ntop " << std::min(top, result.ranked.size()) << " of " << result.ranked.size()
      << " feasible plans (fastest first; micro-batch = size x micro-batches per step; GiB of the worst device)\n";
  table.print(out, "  ");
}

void print_pareto(std::ostream& out, const Job& job, const SearchResult& result) {
  constexpr std::size_t kShown = 12;
  std::vector<std::size_t> shown = result.pareto;
  if (shown.size() > kShown) {  // evenly spaced, both ends kept
    std::vector<std::size_t> picked;
    for (std::size_t i = 0; i < kShown; ++i) picked.push_back(result.pareto[i * (result.pareto.size() - 1) / (kShown - 1)]);
    shown = picked;
  }
  const bool uneven = any_uneven(result.ranked, shown);
  std::vector<std::pair<std::string, bool>> columns = {{"step s", true},     {"GiB/device", true}, {"rank", true},
                                                       {"mesh", false},      {"micro-batch", true}, {"zero", true},
                                                       {"recompute", false}, {"schedule", false}};
  const bool attentions = job.space.attentions.size() > 1;
  if (attentions) columns.push_back({"attention", false});
  if (uneven) columns.push_back({"stage layers", false});
  Table table(columns);
  for (std::size_t index : shown) {
    const Candidate& c = result.ranked[index];
    std::vector<std::string> row = {format("%.3f", c.estimate.time.step_s), gib(c.estimate.worst_memory.total_bytes()),
                                    std::to_string(index + 1), c.plan.mesh.to_string(), batch_split(c.plan),
                                    std::to_string(c.plan.zero_stage), to_string(c.plan.recompute),
                                    to_string(c.plan.schedule)};
    if (attentions) row.push_back(to_string(c.plan.attention));
    if (uneven) row.push_back(layers_cell(c.plan));
    table.add(std::move(row));
  }
  out << "\nPareto front, step time vs memory per device ("
      << (result.pareto.size() == 1 ? std::string("1 plan no other plan beats on both")
                                     : std::to_string(result.pareto.size()) + " plans no other plan beats on both");
  if (shown.size() < result.pareto.size()) out << "; " << shown.size() << " shown";
  out << ")\n";
  table.print(out, "  ");
}

void print_stats(std::ostream& out, const SearchStats& stats, int threads) {
  out << "\nsearch: " << count_of(static_cast<double>(stats.meshes), "mesh", "meshes") << ", "
      << count_of(static_cast<double>(stats.plans), "candidate", "candidates") << ", " << stats.evaluated
      << " evaluated in " << format("%.3f", stats.wall_s) << " s (" << format("%.0f", stats.wall_s > 0 ? static_cast<double>(stats.evaluated) / stats.wall_s : 0)
      << " evaluations/s, " << threads << (threads == 1 ? " thread" : " threads") << ")\n";
}

int run_plan(const PlanCommandFlags& f) {
  Problems problems;
  if (f.top < 1) problems.push_back({Severity::error, "--top", "must be at least 1, got " + std::to_string(f.top)});
  if (f.pick < 1) problems.push_back({Severity::error, "--pick", "must be at least 1 (1 is the fastest plan), got " + std::to_string(f.pick)});
  if (!f.emit_plan.empty()) {
    const auto folder = std::filesystem::path(f.emit_plan).parent_path();
    std::error_code error;
    if (!folder.empty() && !std::filesystem::is_directory(folder, error)) {
      problems.push_back({Severity::error, "--emit-plan " + f.emit_plan, "no folder '" + folder.string() + "' to write it in"});
    }
  }
  auto jobs = resolve_jobs(f.job, f.search, false);
  problems.insert(problems.end(), jobs.problems.begin(), jobs.problems.end());
  if (has_errors(problems) || jobs.value.empty()) {
    for (const auto& p : problems) std::cerr << "meshplan plan: " << describe(p) << "\n";
    return exit_bad_input;
  }
  for (const auto& p : problems) std::cerr << "meshplan plan: " << describe(p) << "\n";  // warnings only here
  const Job& job = jobs.value.front();
  if (!job.batch_note.empty()) std::cerr << "meshplan plan: note: " << job.batch_note << "\n";
  const Precision guide_precision = job.space.precisions.front();
  if (f.guide_only) {
    print_header(std::cout, job);
    std::cout << "\n";
    print_decision_guide(std::cout, build_decision_guide(job.model, job.cluster, job.world_size, job.global_batch,
                                                         job.seq_flag, guide_precision, job.space.memory_headroom));
    return exit_ok;
  }

  const Evaluator evaluator(job.model, job.cluster, job.world_size, job.seq_len);
  SearchOptions options;
  options.threads = static_cast<int>(f.search.threads);
  // A search of a million devices over every axis runs for minutes: the progress line of sweep,
  // drawn after 0.1 s on a terminal and every 2 s in a log, so a quick search prints nothing.
  Progress progress(std::cerr, stderr_is_terminal());
  options.on_progress = [&](std::int64_t plans, std::int64_t meshes_done, std::int64_t meshes) {
    progress.update(meshes > 0 ? static_cast<double>(meshes_done) / static_cast<double>(meshes) : 1.0, plans);
  };
  const SearchResult result = search(evaluator, job.global_batch, job.space, options);
  progress.finish();
  const int threads = options.threads > 0 ? options.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const auto top = static_cast<std::size_t>(f.top);
  const auto pick = static_cast<std::size_t>(f.pick);

  if (!f.emit_plan.empty() && !result.ranked.empty() && pick > result.ranked.size()) {
    std::cerr << "meshplan plan: --pick: " << f.pick << " is past the last of the " << result.ranked.size()
              << " feasible plans\n";
    return exit_bad_input;
  }

  // Nothing fits: how much memory a device would need here, and how many devices would do.
  std::optional<WhatWouldFit> fit;
  if (result.ranked.empty() && result.stats.plans > 0) {
    fit = what_would_fit(job.model, job.cluster, job.world_size, job.seq_len, job.global_batch, job.space, options.threads);
  }

  if (f.json) {
    nlohmann::ordered_json array = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < std::min(top, result.ranked.size()); ++i) {
      const Plan plan = plan_of(job, result.ranked[i]);
      array.push_back(explanation_to_json(job.model, job.cluster, plan, explain_candidate(job, plan)));
    }
    std::cout << array.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  } else {
    print_header(std::cout, job);
    if (result.ranked.empty()) {
      std::cout << "\nno feasible plan: " << rejection_summary(job, result.stats, ";\n  ") << "\n";
      if (fit) print_what_would_fit(std::cout, job.cluster, job.space, *fit);
    } else {
      print_ranked(std::cout, job, result, top);
      print_pareto(std::cout, job, result);
      std::cout << "\ncandidates: " << rejection_summary(job, result.stats, ";\n  ") << "\n";
    }
    print_stats(std::cout, result.stats, threads);
    std::cout << "\n";
    print_decision_guide(std::cout, build_decision_guide(job.model, job.cluster, job.world_size, job.global_batch,
                                                         job.seq_flag, guide_precision, job.space.memory_headroom));
  }

  if (result.ranked.empty()) {
    std::cerr << "meshplan plan: no feasible plan: " << rejection_summary(job, result.stats, "; ") << "\n";
    if (fit && fit->here.smallest_peak) {
      std::cerr << "meshplan plan: the least memory a plan needs at " << job.world_size << " devices is "
                << gib(fit->here.smallest_peak->estimate.worst_memory.total_bytes()) << " GiB per device";
      if (fit->more && fit->more->world_size) {
        std::cerr << "; the fewest devices that fit: " << *fit->more->world_size << " (" << fit->more->below << " do not)";
      }
      std::cerr << "\n";
    }
    if (!f.emit_plan.empty()) std::cerr << "meshplan plan: --emit-plan: nothing written\n";
    return exit_does_not_fit;
  }
  if (!f.emit_plan.empty()) {
    const Plan plan = plan_of(job, result.ranked[pick - 1]);
    const Explanation ex = explain_candidate(job, plan);
    const Problems emitted = emit_plan_file(f.emit_plan, job.model, job.cluster, job.world_size, plan, ex);
    for (const auto& p : emitted) std::cerr << "meshplan plan: " << describe(p) << "\n";
    if (has_errors(emitted)) return exit_bad_input;
    std::cerr << "meshplan plan: wrote plan " << f.pick << " (" << plan.mesh.to_string() << ", micro-batch "
              << batch_split(plan) << ", " << to_string(plan.schedule)
              << (plan.stage_layers.empty() ? "" : ", layers per chunk " + stage_layers_text(plan.stage_layers))
              << ") to " << f.emit_plan << "\n";
  }
  return exit_ok;
}

}  // namespace

Command add_plan_command(CLI::App& app) {
  auto* command = app.add_subcommand("plan", "Search every parallel plan for a model on a cluster and rank them");
  command->footer(
      "Defaults: GPT-3 175B on 1024 A100s (dgx-a100), global batch 1536, axes dp,fsdp,tp,pp.\n"
      "Exit status: 0 a feasible plan exists, 1 none fits, 2 bad input.");
  auto flags = std::make_shared<PlanCommandFlags>();
  add_job_flags(*command, flags->job, false);
  add_search_flags(*command, flags->search);
  command->add_option("--top", flags->top, "Plans to show (or print as JSON)")->capture_default_str();
  command->add_flag("--json", flags->json, "Print the top plans as a JSON array of `meshplan explain --json` objects");
  command->add_option("--emit-plan", flags->emit_plan, "Write the chosen plan to this plan file (JSON)");
  command->add_option("--pick", flags->pick, "Which ranked plan --emit-plan writes (1: the fastest)")->capture_default_str();
  command->add_flag("--guide-only", flags->guide_only, "Print only the decision guide (no search)");
  return [flags]() { return run_plan(*flags); };
}

}  // namespace meshplan::cli
