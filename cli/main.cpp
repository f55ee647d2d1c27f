// meshplan: plan, explain and (later) simulate and train parallel training
// jobs. main() only composes the subcommands and decides the exit status.
#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>
#include <string_view>

#include "cli/commands.hpp"
#include "cli/openmp_env.hpp"

int main(int argc, char** argv) {
  using namespace meshplan::cli;
  // The commands that run OpenMP kernels: bound libgomp's spinning first (cli/openmp_env.hpp).
  if (argc > 1 && (std::string_view(argv[1]) == "train" || std::string_view(argv[1]) == "calibrate")) {
    reexec_with_openmp_spin_limit(argv);
  }
  CLI::App app{"meshplan: decide how to parallelise a training job, and check the decision"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("meshplan 0.1.0"));
  const Command plan = add_plan_command(app);
  const Command sweep = add_sweep_command(app);
  const Command explain = add_explain_command(app);
  const Command presets = add_presets_command(app);
  const Command simulate = add_simulate_command(app);
  const Command validation = add_validation_command(app);
  const Command train = add_train_command(app);
  const Command commbench = add_commbench_command(app);
  const Command launch = add_launch_command(app);
  const Command calibrate = add_calibrate_command(app);
  const Command plot = add_plot_command(app);

  // CLI11 reports a mistyped command as "a subcommand is required"; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (const auto* sub : app.get_subcommands({})) {
      known += (known.empty() ? "" : ", ") + sub->get_name();
      found = found || sub->get_name() == argv[1];
    }
    if (!found) {
      std::cerr << "meshplan: unknown command '" << argv[1] << "' (commands: " << known << "; see meshplan --help)\n";
      return exit_bad_input;
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "meshplan: " << e.what() << "\n(run with --help for usage)\n";
    return exit_bad_input;
  }

  try {
    if (app.got_subcommand("plan")) return plan();
    if (app.got_subcommand("sweep")) return sweep();
    if (app.got_subcommand("explain")) return explain();
    if (app.got_subcommand("presets")) return presets();
    if (app.got_subcommand("simulate")) return simulate();
    if (app.got_subcommand("validation")) return validation();
    if (app.got_subcommand("train")) return train();
    if (app.got_subcommand("commbench")) return commbench();
    if (app.got_subcommand("launch")) return launch();
    if (app.got_subcommand("calibrate")) return calibrate();
    if (app.got_subcommand("plot")) return plot();
  } catch (const std::exception& e) {
    std::cerr << "meshplan: internal error: " << e.what() << "\n";
    return 70;
  }
  return exit_bad_input;
}
