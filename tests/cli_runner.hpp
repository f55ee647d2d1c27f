// Runs the built `meshplan` binary as a user would (argument list, no shell
// expansion of arguments) and captures exit status, stdout and stderr; shared
// by the CLI test programs.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "read_text.hpp"
#include "temp_path.hpp"

namespace meshplan::testing_support {

struct CliRun {
  int status = -1;
  std::string out;
  std::string err;
};

inline std::string shell_quote(const std::string& arg) {
  std::string q = "'";
  for (char c : arg) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `prefix... meshplan args...` (e.g. prefix = mpirun -np 2); every
// word is quoted, so no argument is expanded by the shell.
inline CliRun run_under(const std::vector<std::string>& prefix, const std::vector<std::string>& args) {
  static int counter = 0;
  const auto err_path = temp_path("run-" + std::to_string(counter++) + ".err");
  std::string command;
  for (const auto& p : prefix) command += shell_quote(p) + " ";
  command += shell_quote(MESHPLAN_BINARY);
  for (const auto& a : args) command += " " + shell_quote(a);
  command += " 2>" + shell_quote(err_path.string());
  CliRun result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) result.out.append(buffer, n);
  const int raw = ::pclose(pipe);
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  result.err = read_text(err_path);
  std::filesystem::remove(err_path);
  return result;
}

inline CliRun run(const std::vector<std::string>& args) { return run_under({}, args); }

// No crash, no C++ exception text, on either stream.
inline void expect_no_crash_text(const CliRun& r) {
  for (const char* bad : {"terminate", "what()", "std::", "exception", "Aborted", "Segmentation", "internal error"}) {
    EXPECT_EQ(r.err.find(bad), std::string::npos) << bad << " in: " << r.err;
    EXPECT_EQ(r.out.find(bad), std::string::npos) << bad << " in: " << r.out;
  }
}

}  // namespace meshplan::testing_support
