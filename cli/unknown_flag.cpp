#include "cli/unknown_flag.hpp"

#include <cctype>
#include <vector>

#include "model/suggest.hpp"

namespace meshplan::cli {

std::optional<std::string> first_unknown_flag(const CLI::App& command, std::span<const std::string_view> args) {
  for (const std::string_view arg : args) {
    if (arg == "--") break;
    const bool looks_like_flag = arg.size() >= 2 && arg[0] == '-' && (std::isalpha(static_cast<unsigned char>(arg[1])) ||
                                                                       (arg[1] == '-' && arg.size() > 2));
    if (!looks_like_flag) continue;
    const std::string name(arg.substr(0, arg.find('=')));
    if (command.get_option_no_throw(name) == nullptr) return name;
  }
  return std::nullopt;
}

std::string unknown_flag_message(const CLI::App& command, const std::string& flag) {
  std::vector<std::string> names;  // long option names without the dashes ("micro-batch")
  for (const CLI::Option* option : command.get_options()) {
    for (const auto& name : option->get_lnames()) names.push_back(name);
  }
  const auto near = nearest_name(flag.substr(flag.find_first_not_of('-')), names);
  return "unknown flag " + flag + (near ? " (did you mean --" + *near + "?)" : std::string());
}

}  // namespace meshplan::cli
