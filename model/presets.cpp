#include "model/presets.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "model/atomic_file.hpp"
#include "model/suggest.hpp"
#include "model/yaml_reader.hpp"

namespace meshplan {
namespace fs = std::filesystem;
namespace {

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::string(value) : std::string();
}

void add_names(const fs::path& folder, std::vector<std::string>& names) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    std::error_code kind_ec;
    if (entry.path().extension() == ".yaml" && entry.is_regular_file(kind_ec)) names.push_back(entry.path().stem().string());
  }
}

}  // namespace

std::string folder_name(PresetKind kind) {
  switch (kind) {
    case PresetKind::model: return "models";
    case PresetKind::device: return "devices";
    case PresetKind::cluster: return "clusters";
  }
  return "";
}

std::string presets_root() {
  std::vector<std::string> candidates;
  if (const std::string env = environment("MESHPLAN_PRESETS"); !env.empty()) candidates.push_back(env);
  candidates.emplace_back(MESHPLAN_SOURCE_PRESETS_DIR);
  candidates.emplace_back(MESHPLAN_INSTALLED_PRESETS_DIR);
  for (const auto& dir : candidates) {
    std::error_code ec;
    if (fs::is_directory(dir, ec)) return dir;
  }
  return "";
}

namespace {
bool built_in_only = false;  // set once, before any preset is read (validation)
}  // namespace

void use_built_in_presets_only() { built_in_only = true; }

std::string user_presets_dir() {
  if (built_in_only) return "";
  if (const std::string env = environment("MESHPLAN_USER_PRESETS"); !env.empty()) return env;
  if (const std::string xdg = environment("XDG_CONFIG_HOME"); !xdg.empty()) {
    return (fs::path(xdg) / "meshplan" / "presets").string();
  }
  if (const std::string home = environment("HOME"); !home.empty()) {
    return (fs::path(home) / ".config" / "meshplan" / "presets").string();
  }
  return "";
}

Problems user_preset_folder_problems(PresetKind kind) {
  Problems problems;
  const std::string user = user_presets_dir();
  if (user.empty()) return problems;
  std::error_code ec;
  const fs::path folder = fs::path(user) / folder_name(kind);
  std::vector<fs::path> odd;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    std::error_code kind_ec;
    if (entry.path().extension() == ".yaml" && !entry.is_regular_file(kind_ec)) odd.push_back(entry.path());
  }
  std::sort(odd.begin(), odd.end());
  for (const fs::path& path : odd) {
    const bool broken_link = fs::is_symlink(fs::symlink_status(path, ec)) && !fs::exists(path, ec);
    const auto why = why_unreadable(path.string());
    problems.push_back({Severity::warning, path.string(),
                        (broken_link ? std::string("is a symbolic link to nothing (a missing file, or a loop)")
                                     : why.value_or("is not a regular file")) +
                            "; not a preset"});
  }
  return problems;
}

std::vector<std::string> list_presets(PresetKind kind) {
  std::vector<std::string> names;
  if (const std::string user = user_presets_dir(); !user.empty()) add_names(fs::path(user) / folder_name(kind), names);
  if (const std::string root = presets_root(); !root.empty()) add_names(fs::path(root) / folder_name(kind), names);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

Loaded<PresetFile> find_preset(PresetKind kind, const std::string& name_or_path) {
  Loaded<PresetFile> result;
  const bool is_path = name_or_path.find('/') != std::string::npos ||
                       (name_or_path.size() > 5 && name_or_path.ends_with(".yaml")) ||
                       name_or_path.ends_with(".yml");
  if (is_path) {
    std::error_code ec;
    if (!fs::is_regular_file(name_or_path, ec)) {
      result.problems.push_back({Severity::error, name_or_path, why_unreadable(name_or_path).value_or("not a regular file")});
      return result;
    }
    result.value = {name_or_path, name_or_path, false, ""};
    return result;
  }
  const std::string kind_folder = folder_name(kind);
  const std::string file_name = name_or_path + ".yaml";
  if (const std::string user = user_presets_dir(); !user.empty()) {
    // A user preset is named by its full path in messages: it is not in the source tree.
    const fs::path path = fs::path(user) / kind_folder / file_name;
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) {
      result.value = {path.string(), path.string(), true, name_or_path};
      return result;
    }
    if (fs::exists(path, ec)) {  // a folder or a device named like a preset: say so, not "unknown"
      result.problems.push_back({Severity::error, path.string(), why_unreadable(path.string()).value_or("not a regular file")});
      return result;
    }
    if (fs::is_symlink(fs::symlink_status(path, ec))) {  // its target is missing, or links back to itself
      result.problems.push_back({Severity::error, path.string(), "is a symbolic link to nothing (a missing file, or a loop)"});
      return result;
    }
  }
  if (const std::string root = presets_root(); !root.empty()) {
    const fs::path path = fs::path(root) / kind_folder / file_name;
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) {
      result.value = {path.string(), "presets/" + kind_folder + "/" + file_name, false, name_or_path};
      return result;
    }
  }
  const std::vector<std::string> names = list_presets(kind);
  std::string known;
  for (const auto& name : names) known += (known.empty() ? "" : ", ") + name;
  const std::string kind_word = kind_folder.substr(0, kind_folder.size() - 1);
  const auto near = nearest_name(name_or_path, names);
  result.problems.push_back(
      {Severity::error, name_or_path,
       "unknown " + kind_word + " preset" + (near ? "; did you mean " + *near + "?" : std::string()) +
           (known.empty() ? std::string(" (no presets folder found; set MESHPLAN_PRESETS)")
                          : " (known: " + known + "; or give a path to a .yaml file)")});
  return result;
}

void add_name_mismatch(const PresetFile& file, const YAML::Node& document, const std::string& name_in_file,
                       Problems& problems) {
  if (file.requested_name.empty() || name_in_file.empty() || name_in_file == file.requested_name) return;
  Problems unused;
  problems.push_back({Severity::warning, YamlMap(document, file.display_name, "", unused).where("name"),
                      "'" + name_in_file + "' is not the file's name: the preset is chosen as '" + file.requested_name +
                          "', and reports and plan files will call it '" + name_in_file + "'; rename the file or the name"});
}

}  // namespace meshplan
