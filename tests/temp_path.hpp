// A folder of this test process's files, removed when the process ends:
// temp_path(name) is a path in it. Shared by the CLI tests (cli_runner.hpp)
// and the tests that write files of their own.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace meshplan::testing_support {

struct TempFolder {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("meshplan-test-" + std::to_string(::getpid()));
  TempFolder() { std::filesystem::create_directories(path); }
  ~TempFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

inline std::filesystem::path temp_path(const std::string& name) {
  static const TempFolder folder;
  return folder.path / name;
}

}  // namespace meshplan::testing_support
