#include "model/yaml_reader.hpp"

#include <yaml-cpp/eventhandler.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "model/atomic_file.hpp"
#include "model/text.hpp"

namespace meshplan {
namespace {

std::string location(const std::string& file, int line) {
  return line > 0 ? file + ":" + std::to_string(line) : file;
}

std::string scalar_text(const YAML::Node& node) {
  return node.IsScalar() ? "'" + node.Scalar() + "'" : std::string(node.IsSequence() ? "a list" : "a map");
}

// YAML 1.1 reads `010` as octal 8 and `0x10` as 16 (yaml-cpp does), while `0200.0` and the same digits
// in a number are decimal: a whole number is written in decimal digits, with no leading zero, and a
// number does not start with a zero followed by a digit. The message says why; empty when fine.
std::string non_decimal_problem(const std::string& text, bool whole) {
  if (!plain_decimal(text, whole)) {
    return "'" + text + "': write " + (whole ? "whole numbers" : "numbers") +
           " in decimal digits without a leading zero (YAML reads 010 as octal 8 and 0x10 as 16)";
  }
  return "";
}

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

// Counts the documents of a YAML text that yaml-cpp's parser hands over,
// without building them. Only document starts matter.
struct DocumentStarts : YAML::EventHandler {
  std::vector<int> lines;  // 1-based line of each document's start
  void OnDocumentStart(const YAML::Mark& mark) override { lines.push_back(mark.line + 1); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

Loaded<YAML::Node> parse(std::istream& in, const std::string& display_name) {
  Loaded<YAML::Node> result;
  std::ostringstream whole;
  whole << in.rdbuf();
  const std::string text = whole.str();
  try {
    std::istringstream first(text);
    result.value = YAML::Load(first);
  } catch (const YAML::ParserException& e) {
    result.problems.push_back({Severity::error, location(display_name, e.mark.line + 1),
                               "malformed YAML: " + e.msg});
    return result;
  }
  if (!result.value.IsMap()) {
    result.problems.push_back({Severity::error, display_name,
                               "expected a YAML map of keys (one object per file)"});
    return result;
  }
  // YAML::Load reads the first document and drops the rest. Two calls at most: yaml-cpp's LoadAll
  // never returns on some malformed text (",": a null document again and again; fuzz_device_yaml).
  try {
    std::istringstream again(text);
    YAML::Parser parser(again);
    DocumentStarts starts;
    if (parser.HandleNextDocument(starts) && parser.HandleNextDocument(starts) && starts.lines.size() > 1) {
      result.problems.push_back({Severity::error, location(display_name, starts.lines[1]),
                                 "a second YAML document ('---'): a preset file holds one"});
    }
  } catch (const YAML::ParserException& e) {  // malformed after the first document
    result.problems.push_back({Severity::error, location(display_name, e.mark.line + 1), "malformed YAML: " + e.msg});
  }
  return result;
}

}  // namespace

Loaded<YAML::Node> load_yaml_file(const std::string& path, const std::string& display_name) {
  if (const auto why = why_unreadable(path)) return {{}, {{Severity::error, display_name, *why}}};
  std::ifstream in(path);
  if (!in) {
    return {{}, {{Severity::error, display_name, "cannot open file"}}};
  }
  return parse(in, display_name);
}

Loaded<YAML::Node> load_yaml_text(const std::string& text, const std::string& display_name) {
  std::istringstream in(text);
  return parse(in, display_name);
}

YamlMap::YamlMap(YAML::Node node, std::string file, std::string prefix, Problems& problems)
    : node_(std::move(node)), file_(std::move(file)), prefix_(std::move(prefix)), problems_(&problems) {
  is_map_ = node_.IsMap();
}

int YamlMap::line_of(const YAML::Node& node) const {
  const auto mark = node.Mark();
  return mark.is_null() ? 0 : mark.line + 1;
}

std::string YamlMap::where(std::string_view key) const {
  int line = line_of(node_);
  if (is_map_) {
    for (const auto& entry : node_) {
      if (entry.first.IsScalar() && entry.first.Scalar() == key) {
        line = line_of(entry.first);
        break;
      }
    }
  }
  return location(file_, line) + " key '" + prefix_ + std::string(key) + "'";
}

void YamlMap::add_problem(std::string_view key, std::string message) {
  refused_.emplace(key);
  problems_->push_back({Severity::error, where(key), std::move(message)});
}

std::optional<YAML::Node> YamlMap::find(std::string_view key, Need need) {
  asked_.emplace(key);
  if (is_map_) {
    for (const auto& entry : node_) {
      if (entry.first.IsScalar() && entry.first.Scalar() == key) {
        if (entry.second.IsNull()) {  // `key:`, `key: ~`, `key: null`: not the same as leaving it out
          refused_.emplace(key);
          problems_->push_back({Severity::error, location(file_, line_of(entry.first)) + " key '" + prefix_ + std::string(key) + "'",
                                "has no value (empty, ~ or null); give one, or leave the key out"});
          return std::nullopt;
        }
        return entry.second;
      }
    }
  }
  if (need == Need::required) {
    problems_->push_back({Severity::error, location(file_, line_of(node_)),
                          "missing required key '" + prefix_ + std::string(key) + "'"});
  }
  return std::nullopt;
}

std::optional<std::int64_t> YamlMap::integer(std::string_view key, Need need, std::int64_t min_value,
                                             std::int64_t max_value) {
  auto node = find(key, need);
  if (!node) return std::nullopt;
  std::int64_t value = 0;
  if (!node->IsScalar() || !YAML::convert<std::int64_t>::decode(*node, value)) {
    // All digits, past int64: out of range, not "not a whole number".
    const bool digits = node->IsScalar() && non_decimal_problem(node->Scalar(), true).empty();
    add_problem(key, digits ? "must be between " + std::to_string(min_value) + " and " + std::to_string(max_value) +
                                  ", got " + node->Scalar()
                            : "expected a whole number, got " + scalar_text(*node));
    return std::nullopt;
  }
  if (const std::string problem = non_decimal_problem(node->Scalar(), true); !problem.empty()) {
    add_problem(key, problem);
    return std::nullopt;
  }
  if (value < min_value || value > max_value) {
    add_problem(key, "must be between " + std::to_string(min_value) + " and " +
                         std::to_string(max_value) + ", got " + node->Scalar());
    return std::nullopt;
  }
  return value;
}

std::optional<double> YamlMap::number(std::string_view key, Need need, double min_value, double max_value) {
  auto node = find(key, need);
  if (!node) return std::nullopt;
  double value = 0;
  if (!node->IsScalar() || !YAML::convert<double>::decode(*node, value) || value != value) {
    add_problem(key, "expected a number, got " + scalar_text(*node));
    return std::nullopt;
  }
  if (const std::string problem = non_decimal_problem(node->Scalar(), false); !problem.empty()) {
    add_problem(key, problem);
    return std::nullopt;
  }
  if (value < min_value || value > max_value) {
    std::ostringstream msg;
    msg << "must be between " << min_value << " and " << max_value << ", got " << node->Scalar();  // as written
    add_problem(key, msg.str());
    return std::nullopt;
  }
  return value;
}

std::optional<bool> YamlMap::boolean(std::string_view key, Need need) {
  auto node = find(key, need);
  if (!node) return std::nullopt;
  bool value = false;
  if (!node->IsScalar() || !YAML::convert<bool>::decode(*node, value)) {
    add_problem(key, "expected true or false, got " + scalar_text(*node));
    return std::nullopt;
  }
  return value;
}

std::optional<std::string> YamlMap::text(std::string_view key, Need need) {
  auto node = find(key, need);
  if (!node) return std::nullopt;
  if (!node->IsScalar()) {
    add_problem(key, "expected text, got " + scalar_text(*node));
    return std::nullopt;
  }
  if (need == Need::required && trim(node->Scalar()).empty()) {
    add_problem(key, "is empty");
    return std::nullopt;
  }
  return node->Scalar();
}

std::optional<std::string> YamlMap::choice(std::string_view key, Need need,
                                           const std::vector<std::string>& allowed) {
  auto value = text(key, need);
  if (!value) return std::nullopt;
  for (const auto& word : allowed) {
    if (word == *value) return value;
  }
  add_problem(key, "'" + *value + "' is not one of: " + join(allowed));
  return std::nullopt;
}

std::optional<std::vector<std::int64_t>> YamlMap::integer_list(std::string_view key, Need need,
                                                               std::int64_t min_value,
                                                               std::int64_t max_value) {
  auto node = find(key, need);
  if (!node) return std::nullopt;
  if (!node->IsSequence() || node->size() == 0) {
    add_problem(key, "expected a non-empty list of whole numbers, got " + scalar_text(*node));
    return std::nullopt;
  }
  std::vector<std::int64_t> values;
  for (std::size_t i = 0; i < node->size(); ++i) {
    std::int64_t value = 0;
    const YAML::Node item = (*node)[i];
    if (!item.IsScalar() || !YAML::convert<std::int64_t>::decode(item, value)) {
      add_problem(key, "item " + std::to_string(i + 1) + ": expected a whole number, got " + scalar_text(item));
      return std::nullopt;
    }
    if (const std::string problem = non_decimal_problem(item.Scalar(), true); !problem.empty()) {
      add_problem(key, "item " + std::to_string(i + 1) + ": " + problem);
      return std::nullopt;
    }
    if (value < min_value || value > max_value) {
      add_problem(key, "item " + std::to_string(i + 1) + " must be between " + std::to_string(min_value) +
                           " and " + std::to_string(max_value) + ", got " + std::to_string(value));
      return std::nullopt;
    }
    values.push_back(value);
  }
  return values;
}

std::optional<std::vector<std::pair<double, double>>> YamlMap::number_pairs(std::string_view key, Need need) {
  auto node = find(key, need);
  if (!node) return std::nullopt;
  if (!node->IsSequence() || node->size() == 0) {
    add_problem(key, "expected a non-empty list of [number, number] pairs, got " + scalar_text(*node));
    return std::nullopt;
  }
  std::vector<std::pair<double, double>> values;
  for (std::size_t i = 0; i < node->size(); ++i) {
    const YAML::Node item = (*node)[i];
    double a = 0, b = 0;
    if (!item.IsSequence() || item.size() != 2 || !item[0].IsScalar() || !item[1].IsScalar() ||
        !YAML::convert<double>::decode(item[0], a) || !YAML::convert<double>::decode(item[1], b)) {
      add_problem(key, "item " + std::to_string(i + 1) + ": expected a pair of numbers [a, b], got " +
                           (item.IsSequence() && item.size() != 2 ? "a list of " + std::to_string(item.size())
                                                                  : scalar_text(item)));
      return std::nullopt;
    }
    if (!std::isfinite(a) || !std::isfinite(b)) {
      add_problem(key, "item " + std::to_string(i + 1) + ": [" + item[0].Scalar() + ", " + item[1].Scalar() +
                           "]: both numbers must be finite (not .nan or .inf)");
      return std::nullopt;
    }
    for (const YAML::Node& number : {item[0], item[1]}) {
      if (const std::string problem = non_decimal_problem(number.Scalar(), false); !problem.empty()) {
        add_problem(key, "item " + std::to_string(i + 1) + ": " + problem);
        return std::nullopt;
      }
    }
    values.emplace_back(a, b);
  }
  return values;
}

std::optional<YamlMap> YamlMap::map(std::string_view key, Need need) {
  auto node = find(key, need);
  if (!node) return std::nullopt;
  if (!node->IsMap()) {
    add_problem(key, "expected a map of keys, got " + scalar_text(*node));
    return std::nullopt;
  }
  return YamlMap(*node, file_, prefix_ + std::string(key) + ".", *problems_);
}

void YamlMap::finish() {
  if (!is_map_) return;
  std::map<std::string, int, std::less<>> first_line;  // yaml-cpp keeps a repeated key; its reads see the first
  for (const auto& entry : node_) {
    const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : std::string("?");
    if (const auto [it, added] = first_line.emplace(key, line_of(entry.first)); !added) {
      problems_->push_back({Severity::error, location(file_, line_of(entry.first)) + " key '" + prefix_ + key + "'",
                            "given twice (first on line " + std::to_string(it->second) + "); keep one"});
      continue;
    }
    if (!asked_.contains(key)) {
      std::string allowed;
      for (const auto& k : asked_) allowed += (allowed.empty() ? "" : ", ") + k;
      problems_->push_back({Severity::error,
                            location(file_, line_of(entry.first)) + " key '" + prefix_ + key + "'",
                            "unknown key (allowed here: " + allowed + ")"});
    }
  }
}

}  // namespace meshplan
