// Small text helpers shared by the parsers of flags, presets and /proc files.
//
// defines: trim
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace meshplan {

// `text` without leading and trailing white space (spaces, tabs, newlines).
inline std::string trim(std::string_view text) {
  std::size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return std::string(text.substr(begin, end - begin));
}

}  // namespace meshplan
