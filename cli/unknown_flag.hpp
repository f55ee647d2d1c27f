// A flag the command does not know, named with the nearest one it has: one
// rule for meshplan's own parse errors (cli/main.cpp) and for `launch`'s
// check of the flags it passes on to train (cli/train_flags.hpp).
//
// defines: first_unknown_flag, unknown_flag_message
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace meshplan::cli {

// The first of `args` that is written as a flag (-x, --name, --name=value)
// and that `command` does not know, without its value; nullopt when there
// is none (the unexpected argument was a value). After "--" every argument
// is positional.
std::optional<std::string> first_unknown_flag(const CLI::App& command, std::span<const std::string_view> args);

// "unknown flag --microbatch (did you mean --micro-batch?)": the nearest of
// `command`'s long option names, when one is near enough.
std::string unknown_flag_message(const CLI::App& command, const std::string& flag);

}  // namespace meshplan::cli
