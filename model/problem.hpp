// Problems are values, not exceptions: parsing and validation collect every
// problem they find, each naming where it was found (file:line, flag or plan
// field) and the rule it breaks, so a user fixes them all in one go. Only
// main() turns problems into an exit status.
#pragma once

#include <string>
#include <vector>

namespace meshplan {

enum class Severity { error, warning };

struct Problem {
  Severity severity = Severity::error;
  std::string where;    // "presets/models/x.yaml:12 key 'heads'", "--mesh", "plan.tp"
  std::string message;  // the rule, with the offending and allowed values
};

// "where: message" (or just the message when `where` is empty).
std::string describe(const Problem& problem);

using Problems = std::vector<Problem>;

bool has_errors(const Problems& problems);

// A value or the problems that prevented it; `value` is meaningful only when
// ok(). Deliberately tiny: C++20 has no std::expected.
template <typename T>
struct Loaded {
  T value{};
  Problems problems;
  bool ok() const { return !has_errors(problems); }
};

}  // namespace meshplan
