// The line of each object key of a JSON text (json_lines.hpp).
#include "model/json_lines.hpp"

#include <cstdint>
#include <vector>

namespace meshplan {

std::map<std::string, int> json_key_lines(const std::string& text) {
  struct Frame {
    bool object = false;
    std::string key;        // the current key (objects)
    std::int64_t index = 0; // the current item (arrays)
    bool expect_key = true;
  };
  std::map<std::string, int> lines;
  std::vector<Frame> stack;
  const auto prefix = [&]() {
    std::string path;
    for (const Frame& f : stack) {
      if (&f == &stack.back()) break;
      if (f.object) {
        path += (path.empty() ? "" : ".") + f.key;
      } else {
        path += "[" + std::to_string(f.index) + "]";
      }
    }
    return path;
  };
  int line = 1;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
    } else if (c == '{' || c == '[') {
      stack.push_back({c == '{', "", 0, true});
    } else if ((c == '}' || c == ']') && !stack.empty()) {
      stack.pop_back();
    } else if (c == ',' && !stack.empty()) {
      if (stack.back().object) {
        stack.back().expect_key = true;
      } else {
        ++stack.back().index;
      }
    } else if (c == '"') {
      std::string token;
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\' && i + 1 < text.size()) ++i;  // escapes keep their byte; keys are plain words
        token += text[i];
      }
      if (!stack.empty() && stack.back().object && stack.back().expect_key) {
        stack.back().key = token;
        stack.back().expect_key = false;
        const std::string before = prefix();
        lines.emplace(before.empty() ? token : before + "." + token, line);
      }
    }
  }
  return lines;
}

}  // namespace meshplan
