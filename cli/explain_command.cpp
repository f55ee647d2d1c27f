// `meshplan explain`: one plan's validity and per-device memory, as a table
// or (--json) one JSON object; --emit-plan also writes it as a plan file.
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/plan_options.hpp"
#include "cli/text_report.hpp"
#include "model/explain.hpp"
#include "model/plan_file.hpp"
#include "model/report_json.hpp"

namespace meshplan::cli {

Command add_explain_command(CLI::App& app) {
  auto* command = app.add_subcommand("explain", "Validate one plan and break down its memory per device");
  command->footer(
      "Defaults: GPT-3 175B on 1024 A100s (dgx-a100), dp=16,pp=8,tp=8, micro-batch 1, global batch 1536,\n"
      "selective recompute with sequence parallelism, 1F1B, bf16, ZeRO-1.\n"
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
    Explanation ex = explain_plan(in.model, in.cluster, in.deployment, in.plan);
    ex.deployment.rank = flags->rank;  // -1: report the worst device
    ex.problems.insert(ex.problems.begin(), inputs.problems.begin(), inputs.problems.end());  // warnings
    if (*json) {
      std::cout << explanation_to_json(in.model, in.cluster, in.plan, ex).dump(2) << "\n";
    } else {
      print_explanation(std::cout, in.model, in.cluster, in.plan, ex);
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
      const Problems written = write_plan_file(*emit_plan, in.model, in.cluster, in.deployment.world_size, in.plan, ex);
      if (has_errors(written)) {
        for (const auto& p : written) std::cerr << "meshplan explain: --emit-plan " << describe(p) << "\n";
        return exit_bad_input;
      }
      std::cerr << "meshplan explain: wrote " << *emit_plan
                << (ex.fits_memory() ? "\n" : " (note: the plan does not fit in device memory)\n");
    }
    return ex.fits_memory() ? exit_ok : exit_does_not_fit;
  };
}

}  // namespace meshplan::cli
