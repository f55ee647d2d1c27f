#include "model/problem.hpp"

#include <algorithm>

namespace meshplan {

std::string describe(const Problem& problem) {
  std::string text = problem.where.empty() ? problem.message : problem.where + ": " + problem.message;
  if (problem.severity == Severity::warning) text = "warning: " + text;
  return text;
}

bool has_errors(const Problems& problems) {
  return std::any_of(problems.begin(), problems.end(),
                     [](const Problem& p) { return p.severity == Severity::error; });
}

}  // namespace meshplan
