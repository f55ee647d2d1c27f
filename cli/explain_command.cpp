// `meshplan explain`: one plan's validity, per-device memory, time and the
// link each mesh axis rides, as a table or (--json) one JSON object;
// --emit-plan also writes it as a plan file (with a warning when train will
// refuse it, not at all for a CNN: cli/emit_plan.hpp). Without --mesh the
// plan is the search's first (cli/plan_options.hpp); when the plan does not
// fit, it says what would (model/fit_search.hpp).
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/emit_plan.hpp"
#include "cli/plan_options.hpp"
#include "cli/text_report.hpp"
#include "model/explain.hpp"
#include "model/fit_search.hpp"
#include "model/plan_file.hpp"
#include "model/report_json.hpp"

namespace meshplan::cli {
namespace {

nlohmann::ordered_json candidate_to_json(const std::optional<Candidate>& c) {
  if (!c) return nullptr;
  nlohmann::ordered_json j = plan_to_json(c->plan);
  return {{"plan", j}, {"memory_bytes", c->estimate.worst_memory.total_bytes()}, {"step_s", c->estimate.time.step_s}};
}

nlohmann::ordered_json what_would_fit_to_json(const WhatWouldFit& fit) {
  nlohmann::ordered_json j;
  j["world_size"] = fit.world_size;
  j["global_batch"] = fit.global_batch;
  j["plans_that_fit"] = fit.here.stats.feasible;
  j["fastest"] = candidate_to_json(fit.here.fastest);
  j["smallest_peak"] = candidate_to_json(fit.here.smallest_peak);
  if (fit.more) {
    j["smallest_fitting_world_size"] = fit.more->world_size ? nlohmann::ordered_json(*fit.more->world_size) : nullptr;
    j["largest_not_fitting_world_size"] = fit.more->below;
    j["fastest_at_smallest_fitting"] = candidate_to_json(fit.more->fastest);
    j["searched_up_to"] = fit.more->limit;
  }
  return j;
}

}  // namespace

Command add_explain_command(CLI::App& app) {
  auto* command = app.add_subcommand("explain", "Validate one plan and break down its memory per device and its step time (communication by axis, compute by kind)");
  command->footer(
      "Defaults: GPT-3 175B on 1024 A100s (dgx-a100). Without --mesh: the plan `meshplan plan` ranks first,\n"
      "searched with the plan flags given held fixed. Without --global-batch: GPT-3's batch in tokens for the\n"
      "nearest GPT-3 size (Brown et al. 2020, Table 2.1) / the sequence length (1536 for GPT-3 175B), 256 samples\n"
      "for MLPs and CNNs, at least one per device. With --mesh: micro-batch 1, selective recompute, sequence\n"
      "parallelism when tp > 1, 1F1B, bf16 where the device has it, ZeRO-1 when dp x ep > 1. Both defaults\n"
      "are named on stderr.\n"
      "Exit status: 0 fits, 1 valid but does not fit in memory, 2 bad input or invalid plan.");
  auto flags = std::make_shared<PlanFlags>();
  auto json = std::make_shared<bool>(false);
  auto emit_plan = std::make_shared<std::string>();
  add_plan_flags(*command, *flags);
  command->add_flag("--json", *json, "Print one JSON object instead of the table");
  command->add_option("--emit-plan", *emit_plan, "Also write the plan as a plan file (JSON), when it is valid");

  return [flags, json, emit_plan]() {
    auto inputs = resolve_plan_flags(*flags);
    if (!inputs.ok()) {
      for (const auto& p : inputs.problems) std::cerr << "meshplan explain: " << describe(p) << "\n";
      return exit_bad_input;
    }
    const PlanInputs& in = inputs.value;
    for (const auto& note : in.notes) std::cerr << "meshplan explain: note: " << note << "\n";
    Explanation ex = explain_plan(in.model, in.cluster, in.deployment, in.plan);
    ex.deployment.rank = flags->rank.value_or(-1);  // -1: report the worst device
    ex.problems.insert(ex.problems.begin(), inputs.problems.begin(), inputs.problems.end());  // warnings
    std::optional<WhatWouldFit> fit;
    if (ex.valid && !ex.fits_memory()) {
      fit = what_would_fit(in.model, in.cluster, in.deployment.world_size, ex.seq_len, in.plan.global_batch, in.space);
    }
    if (*json) {
      nlohmann::ordered_json j = explanation_to_json(in.model, in.cluster, in.plan, ex);
      j["mesh_searched"] = in.mesh_searched;
      j["what_would_fit"] = fit ? what_would_fit_to_json(*fit) : nlohmann::ordered_json();
      std::cout << j.dump(2) << "\n";
    } else {
      print_explanation(std::cout, in.model, in.cluster, in.plan, ex);
      if (fit) print_what_would_fit(std::cout, in.cluster, in.space, *fit);
    }
    if (!ex.valid) {
      for (const auto& p : ex.problems) {
        if (p.severity == Severity::error && p.where != "memory") {
          std::cerr << "meshplan explain: " << flag_for_field(p.where) << ": " << p.message << "\n";
        }
      }
      if (!emit_plan->empty()) std::cerr << "meshplan explain: --emit-plan: nothing written (the plan is not valid)\n";
      return exit_bad_input;
    }
    if (!emit_plan->empty()) {
      const Problems emitted = emit_plan_file(*emit_plan, in.model, in.cluster, in.deployment.world_size, in.plan, ex);
      for (const auto& p : emitted) std::cerr << "meshplan explain: " << describe(p) << "\n";
      if (has_errors(emitted)) return exit_bad_input;
      std::cerr << "meshplan explain: wrote " << *emit_plan
                << (ex.fits_memory() ? "\n" : " (note: the plan does not fit in device memory)\n");
    }
    return ex.fits_memory() ? exit_ok : exit_does_not_fit;
  };
}

}  // namespace meshplan::cli
