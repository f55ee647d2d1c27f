// meshplan: plan, explain, simulate, train and plot parallel training
// jobs. main() only composes the subcommands and decides the exit status.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <iostream>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.hpp"
#include "cli/openmp_env.hpp"
#include "cli/unknown_flag.hpp"
#include "model/atomic_file.hpp"
#include "model/suggest.hpp"

namespace {

// How CLI11 2.1 reads number flags, checked before it does. It reads an
// integer past the int64 range as the range's end (`--steps
// 99999999999999999999` became 9223372036854775807, and the command ran on a
// number nobody typed), and a negative one into an unsigned flag modulo 2^64.
// It detects the base: `--global-batch 010` was 8 (octal) on explain, while
// plan's comma lists read 10; `--gpus 0x8` was 8. The first number-typed flag
// of `command`, from argv[first] on, whose value is one of these, as the
// message to print; nullopt when there is none.
std::optional<std::string> number_flag_problem(const CLI::App& command, int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 3 || arg[0] != '-' || arg[1] != '-') continue;
    const std::size_t equals = arg.find('=');
    const CLI::Option* option = command.get_option_no_throw(std::string(arg.substr(0, equals)));
    if (option == nullptr) continue;
    const std::string type = option->get_type_name();
    const bool is_unsigned = type.rfind("UINT", 0) == 0;
    const bool is_integer = is_unsigned || type.rfind("INT", 0) == 0;
    if (!is_integer && type.rfind("FLOAT", 0) != 0) continue;
    std::string_view value;
    if (equals != std::string_view::npos) {
      value = arg.substr(equals + 1);
    } else if (i + 1 < argc) {
      value = argv[i + 1];
    }
    const std::string flag(arg.substr(0, equals));
    std::string_view digits = value.substr(!value.empty() && (value[0] == '-' || value[0] == '+') ? 1 : 0);
    if (digits.size() > 1 && digits[0] == '0' && std::string_view("0123456789xXbBoO").find(digits[1]) != std::string_view::npos) {
      return flag + ": '" + std::string(value) +
             "': write numbers in decimal, without leading zeros (a leading 0 would be read as octal, 0x as hexadecimal)";
    }
    const bool integer = !digits.empty() && digits.find_first_not_of("0123456789") == std::string_view::npos;
    if (!is_integer || !integer) continue;
    // CLI11 reads a negative number into an unsigned flag modulo 2^64 (--seed -1 was 18446744073709551615).
    if (is_unsigned && value[0] == '-') return flag + ": '" + std::string(value) + "' is below 0";
    const char* begin = value.data() + (value[0] == '+' ? 1 : 0);
    std::int64_t parsed = 0;
    std::uint64_t parsed_unsigned = 0;
    const auto result = is_unsigned ? std::from_chars(begin, value.data() + value.size(), parsed_unsigned)
                                    : std::from_chars(begin, value.data() + value.size(), parsed);
    if (result.ec == std::errc::result_out_of_range) return flag + ": '" + std::string(value) + "' is out of range";
  }
  return std::nullopt;
}

// A value flag given an empty value (`--plan ""`, `--global-batch=`): CLI11
// accepts it, and a command would read it as the flag not given and carry
// on with its default. The first such flag of `command`, or nullopt.
std::optional<std::string> empty_value(const CLI::App& command) {
  for (const CLI::Option* option : command.get_options()) {
    if (option->get_type_size() == 0) continue;  // a switch: no value
    for (const std::string& value : option->results()) {
      if (value.find_first_not_of(" \t\n") == std::string::npos) return option->get_name();
    }
  }
  return std::nullopt;
}

// An output flag naming the same file as an input flag of `command`
// (`export --plan p.json -o p.json`, `calibrate --from m.jsonl -o m.jsonl`):
// the output would replace what it was made from. The message, or nullopt.
std::optional<std::string> output_over_input(const CLI::App& command) {
  const auto value_of = [&](const char* flag) -> std::string {
    const CLI::Option* option = command.get_option_no_throw(flag);
    if (option == nullptr || option->results().empty()) return {};
    std::string value = option->results().front();
    for (const char* scheme : {"hf:", "text:"}) {  // --model hf:PATH, --data text:PATH
      if (value.rfind(scheme, 0) == 0) value = value.substr(std::string(scheme).size());
    }
    return value;
  };
  // One file, whether both exist (equivalent: links too) or not yet (the same absolute path).
  const auto same_file = [](const std::string& a, const std::string& b) {
    std::error_code error;
    if (std::filesystem::equivalent(a, b, error)) return true;
    // Absolute first: weakly_canonical leaves a relative path whose first part does not exist relative.
    const auto a_path = std::filesystem::weakly_canonical(std::filesystem::absolute(a, error), error);
    if (error) return false;
    const auto b_path = std::filesystem::weakly_canonical(std::filesystem::absolute(b, error), error);
    return !error && a_path == b_path;
  };
  const bool plot = command.get_name() == "plot";  // its --report is an input
  static constexpr const char* kOutputs[] = {"--out", "--output", "--emit-plan", "--trace", "--report", "--script", "--metrics"};
  for (const char* output : kOutputs) {
    if (plot && std::string_view(output) == "--report") continue;
    const std::string out = value_of(output);
    if (out.empty() || out == "-" || meshplan::special_file(out)) continue;  // /dev/null may take every output
    for (const char* input : {"--plan", "--model", "--cluster", "--from", "--data", "--hostfile", "--report"}) {
      if (!plot && std::string_view(input) == "--report") continue;
      const std::string in = value_of(input);
      if (!in.empty() && same_file(out, in)) {
        return std::string(output) + " " + out + " is the file " + input + " reads; the output would replace it: write elsewhere";
      }
    }
    for (const char* other : kOutputs) {  // train --metrics m.jsonl --report m.jsonl: one replaced the other
      if (std::string_view(other) <= std::string_view(output) || (plot && std::string_view(other) == "--report")) continue;
      const std::string second = value_of(other);
      if (!second.empty() && second != "-" && same_file(out, second)) {
        return std::string(output) + " and " + other + " name one file, " + out + ": give each its own";
      }
    }
    const std::string checkpoints = value_of("--checkpoint-dir");  // a checkpoint's own files are not outputs
    if (!checkpoints.empty()) {
      std::error_code error;
      const auto folder = std::filesystem::weakly_canonical(std::filesystem::absolute(checkpoints, error), error);
      const auto file = std::filesystem::weakly_canonical(std::filesystem::absolute(out, error), error);
      if (!error && std::mismatch(folder.begin(), folder.end(), file.begin(), file.end()).first == folder.end()) {
        return std::string(output) + " " + out + " is inside --checkpoint-dir " + checkpoints +
               ", which holds the checkpoints only: write elsewhere";
      }
    }
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace meshplan::cli;
  // argv[first..argc) as views, for the checks that read the arguments before CLI11 does.
  const std::vector<std::string_view> all_arguments(argv, argv + argc);
  auto arguments = [&](int first) { return std::span<const std::string_view>(all_arguments).subspan(std::min<std::size_t>(first, all_arguments.size())); };
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
  const Command export_plan = add_export_command(app);

  // CLI11 reports a mistyped command as "a subcommand is required"; name it instead.
  CLI::App* chosen = &app;
  std::string chosen_name = "meshplan";
  if (argc > 1 && argv[1][0] != '-') {
    std::string known;
    std::vector<std::string> names;
    for (auto* sub : app.get_subcommands({})) {
      known += (known.empty() ? "" : ", ") + sub->get_name();
      names.push_back(sub->get_name());
      if (sub->get_name() == argv[1]) chosen = sub;
    }
    if (chosen == &app) {
      const auto near = meshplan::nearest_name(argv[1], names);
      std::cerr << "meshplan: unknown command '" << argv[1] << "'"
                << (near ? " (did you mean " + *near + "?)" : std::string()) << "; commands: " << known
                << "; see meshplan --help\n";
      return exit_bad_input;
    }
    chosen_name = "meshplan " + chosen->get_name();
  } else if (const auto flag = first_unknown_flag(app, arguments(1)); flag && argc > 1 && argv[1] == *flag) {
    // Before a command: CLI11 would only say that a subcommand is required.
    std::cerr << "meshplan: " << unknown_flag_message(app, *flag) << "; see meshplan --help\n";
    return exit_bad_input;
  }

  if (const auto problem = number_flag_problem(*chosen, argc, argv, chosen == &app ? 1 : 2)) {
    std::cerr << chosen_name << ": " << *problem << "; see " << chosen_name << " --help\n";
    return exit_bad_input;
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ExtrasError& e) {
    // CLI11 says "The following arguments were not expected: 2 --microbatch":
    // name the command and the flag, and suggest the nearest one it has.
    if (const auto flag = first_unknown_flag(*chosen, arguments(chosen == &app ? 1 : 2))) {
      std::cerr << chosen_name << ": " << unknown_flag_message(*chosen, *flag) << "; see " << chosen_name << " --help\n";
    } else {
      std::cerr << chosen_name << ": " << e.what() << "; see " << chosen_name << " --help\n";
    }
    return exit_bad_input;
  } catch (const CLI::ParseError& e) {
    std::cerr << chosen_name << ": " << e.what() << "; see " << chosen_name << " --help\n";
    return exit_bad_input;
  }

  if (const auto clash = output_over_input(*chosen)) {
    std::cerr << chosen_name << ": " << *clash << "\n";
    return exit_bad_input;
  }
  if (const auto flag = empty_value(*chosen)) {
    std::cerr << chosen_name << ": " << *flag << ": empty value; give one, or leave the flag out for its default; see "
              << chosen_name << " --help\n";
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
    if (app.got_subcommand("export")) return export_plan();
  } catch (const std::bad_alloc&) {
    // Not a bug in itself: what was asked for is larger than this machine (docs/formats.md, "Exit statuses").
    std::cerr << "meshplan: out of memory: this machine could not give the memory the command needed; "
                 "ask for less (fewer devices, micro-batches or sizes) or run it where there is more\n";
    return 71;
  } catch (const std::exception& e) {
    std::cerr << "meshplan: internal error: " << e.what() << "\n";
    return 70;
  }
  return exit_bad_input;
}
