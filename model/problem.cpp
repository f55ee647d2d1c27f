#include "model/problem.hpp"

#include <algorithm>
#include <cstdio>

namespace meshplan {

std::string describe(const Problem& problem) {
  const std::string raw = problem.where.empty() ? problem.message : problem.where + ": " + problem.message;
  // A message quotes what it refuses; control bytes from a binary file (an escape sequence) are shown
  // as \xNN, not sent to the terminal.
  // So are bytes that are not UTF-8 (a binary .yaml's bytes reached the terminal as replacement marks).
  std::string text = problem.severity == Severity::warning ? "warning: " : "";
  const auto escape = [&](unsigned char byte) {
    char escaped[8];
    std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
    text += escaped;
  };
  for (std::size_t i = 0; i < raw.size();) {
    const auto byte = static_cast<unsigned char>(raw[i]);
    if (byte < 0x80) {
      if ((byte < 0x20 && byte != '\n' && byte != '\t') || byte == 0x7f) {
        escape(byte);
      } else {
        text += raw[i];
      }
      ++i;
      continue;
    }
    const std::size_t length = byte >= 0xc2 && byte <= 0xdf ? 2 : byte >= 0xe0 && byte <= 0xef ? 3 : byte >= 0xf0 && byte <= 0xf4 ? 4 : 0;
    bool whole = length > 0 && i + length <= raw.size();
    for (std::size_t j = 1; whole && j < length; ++j) {
      const auto next = static_cast<unsigned char>(raw[i + j]);
      whole = next >= 0x80 && next <= 0xbf;
    }
    if (whole) {
      text.append(raw, i, length);
      i += length;
    } else {
      escape(byte);
      ++i;
    }
  }
  return text;
}

bool has_errors(const Problems& problems) {
  return std::any_of(problems.begin(), problems.end(),
                     [](const Problem& p) { return p.severity == Severity::error; });
}

}  // namespace meshplan
