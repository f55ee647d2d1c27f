// Small text helpers shared by the parsers of flags, presets and /proc files.
//
// defines: json_error_text, trim, scale_decimal, format, human_count, Lines
#pragma once

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <system_error>

namespace meshplan {

// nlohmann::json's exception message (`e.what()`) without its
// "[json.exception.parse_error.101] " tag, for a person to read. Any of its
// exceptions: a number past double's range ("1e400") is an out_of_range.
inline std::string json_error_text(std::string_view what) {
  const auto tag_end = what.find("] ");
  return std::string(tag_end == std::string_view::npos ? what : what.substr(tag_end + 2));
}

// `text` without leading and trailing white space (spaces, tabs, newlines).
// Whether `text` is written in decimal as meshplan reads numbers: no leading zero before a digit
// (octal to YAML 1.1 and to some readers: 010 is 8), and, for a whole number, only digits after an
// optional sign (no 0x, no exponent). A number may have a point and an exponent.
inline bool plain_decimal(std::string_view text, bool whole) {
  const std::size_t i = (!text.empty() && (text[0] == '+' || text[0] == '-')) ? 1 : 0;
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (text.size() > i + 1 && text[i] == '0' && digit(text[i + 1])) return false;
  if (!whole) return true;
  if (text.size() <= i) return false;
  for (std::size_t j = i; j < text.size(); ++j) {
    if (!digit(text[j])) return false;
  }
  return true;
}

inline std::string trim(std::string_view text) {
  std::size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return std::string(text.substr(begin, end - begin));
}

// `value` x 10^power as the decimal a person wrote: a preset's latency_us 5
// is 5e-06 s, where 5 * 1e-6 is 4.9999999999999996e-06 (1e-6 has no exact
// double) and plan files would carry that. The shortest decimal that reads
// back as `value` gets its exponent shifted and is read again; from_chars and
// to_chars, so no locale's decimal comma interferes.
inline double scale_decimal(double value, int power) {
  char text[64];
  const auto written = std::to_chars(text, text + sizeof text, value, std::chars_format::scientific);
  const std::string_view shortest(text, written.ptr - text);
  const auto e = shortest.find('e');
  if (written.ec != std::errc() || e == std::string_view::npos) return value * std::pow(10.0, power);  // inf, nan
  int exponent = 0;
  std::from_chars(shortest.data() + e + 1 + (shortest[e + 1] == '+' ? 1 : 0), shortest.data() + shortest.size(), exponent);
  const std::string shifted = std::string(shortest.substr(0, e + 1)) + std::to_string(exponent + power);
  double result = value;
  std::from_chars(shifted.data(), shifted.data() + shifted.size(), result);
  return result;
}

// `value` printed with one printf conversion (`fmt`, e.g. "%.3g"), for
// tables and generated preset files.
inline std::string format(const char* fmt, double value) {
  char text[64];
  std::snprintf(text, sizeof text, fmt, value);
  return text;
}

// A count with a magnitude suffix for people: "1.56 B", "124.44 M", "950".
inline std::string human_count(double count) {
  if (count >= 1e12) return format("%.2f T", count / 1e12);
  if (count >= 1e9) return format("%.2f B", count / 1e9);
  if (count >= 1e6) return format("%.2f M", count / 1e6);
  if (count >= 1e3) return format("%.1f K", count / 1e3);
  return format("%.0f", count);
}

// The lines of `text`, one per next() call ('\n' ends a line; a final line
// needs none), with their 1-based number for messages ("FILE:LINE").
class Lines {
 public:
  explicit Lines(std::string_view text) : text_(text) {}
  bool next(std::string_view& line) {
    if (start_ >= text_.size()) return false;
    std::size_t end = text_.find('\n', start_);
    if (end == std::string_view::npos) end = text_.size();
    line = text_.substr(start_, end - start_);
    start_ = end + 1;
    ++number_;
    return true;
  }
  int number() const { return number_; }

 private:
  std::string_view text_;
  std::size_t start_ = 0;
  int number_ = 0;
};

}  // namespace meshplan
