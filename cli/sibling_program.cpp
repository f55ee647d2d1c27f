// exec_beside_meshplan (sibling_program.hpp).
#include "cli/sibling_program.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

namespace meshplan::cli {

std::string exec_beside_meshplan(const std::string& program, const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  const fs::path path = self.parent_path() / program;
  if (error || !fs::exists(path)) {
    return "its program " + program + " is not beside this meshplan (" + (error ? error.message() : path.string()) + ")";
  }
  std::vector<std::string> words{path.string()};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  std::cout.flush();
  std::cerr.flush();
  ::execv(argv[0], argv.data());
  return "could not start " + path.string() + ": " + std::strerror(errno);
}

}  // namespace meshplan::cli
