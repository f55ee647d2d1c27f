// A whole file as a string, for tests that read data files and outputs.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace meshplan::testing_support {

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace meshplan::testing_support
