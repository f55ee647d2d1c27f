// What every fuzz target checks besides "no crash, no sanitizer report":
// a rejected input is a list of problems, each with a non-empty message and a
// `where` that names the input (the file name the target gave the parser, or
// the flag), so a user can find the offending file, line or key. A violation
// prints the problem and aborts, which libFuzzer records as a crash with the
// input that caused it (docs/fuzzing.md, "What a target checks").
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "model/problem.hpp"

namespace meshplan::fuzz {

// Aborts with `why` and the problem when a check fails.
[[noreturn]] inline void fail(const char* why, const Problem& problem) {
  std::fprintf(stderr, "fuzz check failed: %s\n  where: '%s'\n  message: '%s'\n", why, problem.where.c_str(),
               problem.message.c_str());
  std::abort();
}

// Every problem names `expected_where_prefix` at the start of its `where` and says something.
inline void check_problems(const Problems& problems, std::string_view expected_where_prefix) {
  for (const Problem& problem : problems) {
    if (problem.message.empty()) fail("empty message", problem);
    if (problem.where.empty()) fail("empty where", problem);
    if (!std::string_view(problem.where).starts_with(expected_where_prefix)) {
      fail(("where does not start with '" + std::string(expected_where_prefix) + "'").c_str(), problem);
    }
  }
}

// An accepted input must not carry errors, a rejected one must say why.
template <typename T>
void check_loaded(const Loaded<T>& loaded, std::string_view expected_where_prefix) {
  check_problems(loaded.problems, expected_where_prefix);
}

// Reading back what an accepted input made (a preset written from it): any
// error aborts with `why` and the problem.
inline void require_no_errors(const Problems& problems, const char* why) {
  for (const Problem& problem : problems) {
    if (problem.severity == Severity::error) fail(why, problem);
  }
}

// A built-in preset a target starts from; when it does not load the build is
// broken, not the parser: abort before fuzzing anything.
template <typename T>
T must_load(Loaded<T> loaded) {
  if (!loaded.ok()) {
    std::fprintf(stderr, "fuzz setup: a built-in preset does not load\n");
    std::abort();
  }
  return std::move(loaded.value);
}

// A sanity check on an accepted value; aborts naming the broken invariant.
inline void require(bool condition, const char* invariant) {
  if (!condition) {
    std::fprintf(stderr, "fuzz check failed: accepted input breaks: %s\n", invariant);
    std::abort();
  }
}

}  // namespace meshplan::fuzz
