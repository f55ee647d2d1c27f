#include "model/suggest.hpp"

#include <algorithm>
#include <cctype>
#include <limits>

namespace meshplan {
namespace {

char folded(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

}  // namespace

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // d[i][j] = edits between a[0, i) and b[0, j); three rows suffice.
  const std::size_t n = b.size();
  std::vector<std::size_t> before(n + 1), previous(n + 1), current(n + 1);
  for (std::size_t j = 0; j <= n; ++j) previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= n; ++j) {
      const bool same = folded(a[i - 1]) == folded(b[j - 1]);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (same ? 0 : 1)});
      if (i > 1 && j > 1 && folded(a[i - 1]) == folded(b[j - 2]) && folded(a[i - 2]) == folded(b[j - 1])) {
        current[j] = std::min(current[j], before[j - 2] + 1);  // adjacent transposition
      }
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[n];
}

std::optional<std::string> nearest_name(std::string_view word, const std::vector<std::string>& candidates) {
  if (word.empty()) return std::nullopt;
  std::optional<std::string> best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  std::optional<std::string> only_prefix;
  int prefixes = 0;
  for (const auto& candidate : candidates) {
    if (candidate == word) return std::nullopt;
    const std::size_t d = edit_distance(word, candidate);
    const std::size_t shorter = std::min(word.size(), candidate.size());
    const std::size_t allowed = std::max<std::size_t>(1, shorter / 3);
    if (d <= allowed && d < shorter && d < best_distance) {
      best = candidate;
      best_distance = d;
    }
    if (word.size() >= 3 && candidate.size() > word.size() &&
        edit_distance(word, std::string_view(candidate).substr(0, word.size())) == 0) {
      ++prefixes;
      only_prefix = candidate;
    }
  }
  if (best) return best;
  if (prefixes == 1) return only_prefix;
  return std::nullopt;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  const auto name = nearest_name(word, candidates);
  return name ? " (did you mean " + *name + "?)" : "";
}

std::vector<std::string> choice_words(std::string_view list) {
  std::vector<std::string> words;
  std::string word, previous;
  bool in_note = false;  // inside parentheses only "or X" names a choice
  auto finish = [&]() {
    const bool named = !in_note || previous == "or";
    if (named && !word.empty() && word != "or" && word.find_first_of("<=>") == std::string::npos) words.push_back(word);
    if (!word.empty()) previous = word;
    word.clear();
  };
  for (char c : list) {
    if (c == ',' || c == '(' || c == ')' || std::isspace(static_cast<unsigned char>(c))) {
      finish();
      if (c == '(') in_note = true;
      if (c == ')') in_note = false;
    } else {
      word += c;
    }
  }
  finish();
  return words;
}

}  // namespace meshplan
