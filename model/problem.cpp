#include "model/problem.hpp"

#include <algorithm>
#include <cstdio>

namespace meshplan {

std::string describe(const Problem& problem) {
  const std::string raw = problem.where.empty() ? problem.message : problem.where + ": " + problem.message;
  // A message quotes what it refuses; control bytes from a binary file (an escape sequence) are shown
  // as \xNN, not sent to the terminal.
  std::string text = problem.severity == Severity::warning ? "warning: " : "";
  for (const char c : raw) {
    const auto byte = static_cast<unsigned char>(c);
    if ((byte < 0x20 && c != '\n' && c != '\t') || byte == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      text += escaped;
    } else {
      text += c;
    }
  }
  return text;
}

bool has_errors(const Problems& problems) {
  return std::any_of(problems.begin(), problems.end(),
                     [](const Problem& p) { return p.severity == Severity::error; });
}

}  // namespace meshplan
