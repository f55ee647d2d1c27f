// Strict reading of YAML presets. yaml-cpp parses; this layer checks what the
// parse means: required keys, types, ranges, allowed words, and keys nobody
// asked for (an unknown key is an error: a typo such as `kv_haeds` must not be
// silently ignored). Every problem names the file, the line and the key.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/problem.hpp"

namespace meshplan {

enum class Need { required, optional };

// Parses a whole file; `display_name` is what messages call it.
Loaded<YAML::Node> load_yaml_file(const std::string& path, const std::string& display_name);
// Parses text (tests and fuzzing); `display_name` stands in for a file name.
Loaded<YAML::Node> load_yaml_text(const std::string& text, const std::string& display_name);

class YamlMap {
 public:
  // `prefix` is prepended to key names in messages ("intra_node.").
  YamlMap(YAML::Node node, std::string file, std::string prefix, Problems& problems);

  std::optional<std::int64_t> integer(std::string_view key, Need need, std::int64_t min_value,
                                      std::int64_t max_value);
  std::optional<double> number(std::string_view key, Need need, double min_value, double max_value);
  std::optional<bool> boolean(std::string_view key, Need need);
  std::optional<std::string> text(std::string_view key, Need need);
  // One word out of `allowed`; the message lists them.
  std::optional<std::string> choice(std::string_view key, Need need,
                                    const std::vector<std::string>& allowed);
  std::optional<std::vector<std::int64_t>> integer_list(std::string_view key, Need need,
                                                        std::int64_t min_value, std::int64_t max_value);
  // A non-empty list of two-number lists, e.g. [[21.3, 0.24], [42.7, 0.47]];
  // each number finite (range checks are the caller's: it knows the meaning).
  std::optional<std::vector<std::pair<double, double>>> number_pairs(std::string_view key, Need need);
  // A nested map; read its keys through the returned reader, then finish() it.
  std::optional<YamlMap> map(std::string_view key, Need need);

  // Reports every key that no accessor asked for. Call once, after all reads.
  void finish();

  // "file:line key 'name'" for messages about a key's value.
  std::string where(std::string_view key) const;
  void add_problem(std::string_view key, std::string message);
  // Whether `key` was given and refused (out of range, malformed, no value): a check that depends on
  // it skips, rather than read the refused key as absent ("experts: 1048577" was then "dense").
  bool refused(std::string_view key) const { return refused_.contains(key); }

 private:
  std::optional<YAML::Node> find(std::string_view key, Need need);
  int line_of(const YAML::Node& node) const;

  YAML::Node node_;
  std::string file_;
  std::string prefix_;
  Problems* problems_;
  bool is_map_ = false;
  std::set<std::string, std::less<>> asked_;
  std::set<std::string, std::less<>> refused_;
};

}  // namespace meshplan
