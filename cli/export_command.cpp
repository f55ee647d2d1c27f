// `meshplan export --plan p.json --to jax|megatron|torchtitan|deepspeed [-o FILE]`:
// the plan in a training framework's own configuration (model/export.hpp,
// docs/export.md). What the framework cannot express is refused (exit 2),
// each reason naming the plan field; what it expresses only approximately is
// written with a warning on stderr.
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "model/atomic_file.hpp"
#include "model/export.hpp"
#include "model/plan_file.hpp"
#include "model/suggest.hpp"

namespace meshplan::cli {

Command add_export_command(CLI::App& app) {
  auto* command = app.add_subcommand("export", "Write a plan file as a framework's configuration: a JAX module, Megatron-LM "
                                               "arguments, a torchtitan TOML or a DeepSpeed JSON (docs/export.md)");
  struct Flags {
    std::string plan, to, out;
  };
  auto f = std::make_shared<Flags>();
  command->add_option("--plan", f->plan, "The plan file (explain/plan --emit-plan)")->required();
  command->add_option("--to", f->to, std::string("The framework: ") + export_target_choices)->required();
  command->add_option("-o,--out", f->out, "Write to this file instead of the standard output (- : the standard output)");
  return [f]() {
    const auto target = parse_export_target(f->to);
    if (!target) {
      std::cerr << "meshplan export: --to '" << f->to << "' is not one of: " << export_target_choices
                << did_you_mean(f->to, {"jax", "megatron", "torchtitan", "deepspeed"}) << "\n";
      return exit_bad_input;
    }
    const Loaded<PlanFile> file = read_plan_file(f->plan);
    for (const auto& p : file.problems) std::cerr << "meshplan export: " << describe(p) << "\n";
    if (!file.ok()) return exit_bad_input;
    const Loaded<std::string> text = export_plan(file.value, *target);
    for (const auto& p : text.problems) {
      std::cerr << "meshplan export: " << (p.severity == Severity::error ? "cannot export to " + f->to + ": " : "")
                << describe(p) << "\n";
    }
    if (!text.ok()) return exit_bad_input;
    if (f->out.empty() || f->out == "-") {
      std::cout << text.value;
      return exit_ok;
    }
    const std::string& body = text.value;
    if (const Problems written = write_file_atomically(f->out, [&](std::ostream& out) { out << body; }); !written.empty()) {
      for (const auto& p : written) std::cerr << "meshplan export: " << describe(p) << "\n";
      return exit_bad_input;
    }
    std::cerr << "meshplan export: wrote " << f->out << "\n";
    return exit_ok;
  };
}

}  // namespace meshplan::cli
