// The subcommands of `meshplan`. Each registers its flags on the app and
// returns the function main() runs when it was chosen; the function returns
// the exit status: 0 success, 1 a valid question whose answer is "no" (the
// plan does not fit, no plan fits), 2 bad input (flags, presets, an invalid
// plan), 130 stopped by Ctrl-C (128 + SIGINT, as shells report it).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace meshplan::cli {

inline constexpr int exit_ok = 0;
inline constexpr int exit_does_not_fit = 1;
inline constexpr int exit_bad_input = 2;
inline constexpr int exit_interrupted = 130;

using Command = std::function<int()>;

// A whole-number flag of at least `least`: "must be at least 1, got 0"
// (CLI::PositiveNumber says "Value 0 not in range 0.000000 to 1.79e308").
inline CLI::Validator at_least(long long least) {
  return CLI::Validator(
      [least](std::string& value) -> std::string {
        long long n = 0;
        if (!CLI::detail::lexical_cast(value, n)) return "'" + value + "' is not a whole number";
        if (n < least) return "must be at least " + std::to_string(least) + ", got " + value;
        return {};
      },
      ">=" + std::to_string(least));
}

Command add_calibrate_command(CLI::App& app);
Command add_commbench_command(CLI::App& app);
Command add_explain_command(CLI::App& app);
Command add_export_command(CLI::App& app);
Command add_launch_command(CLI::App& app);
Command add_plan_command(CLI::App& app);
Command add_plot_command(CLI::App& app);
Command add_presets_command(CLI::App& app);
Command add_simulate_command(CLI::App& app);
Command add_sweep_command(CLI::App& app);
Command add_train_command(CLI::App& app);
Command add_validation_command(CLI::App& app);

}  // namespace meshplan::cli
