#include "model/presets.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

namespace meshplan {
namespace fs = std::filesystem;

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
  if (const char* env = std::getenv("MESHPLAN_PRESETS"); env && *env) candidates.emplace_back(env);
  candidates.emplace_back(MESHPLAN_SOURCE_PRESETS_DIR);
  candidates.emplace_back(MESHPLAN_INSTALLED_PRESETS_DIR);
  for (const auto& dir : candidates) {
    std::error_code ec;
    if (fs::is_directory(dir, ec)) return dir;
  }
  return "";
}

std::vector<std::string> list_presets(PresetKind kind) {
  std::vector<std::string> names;
  const std::string root = presets_root();
  if (root.empty()) return names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(root) / folder_name(kind), ec)) {
    if (entry.path().extension() == ".yaml") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
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
      result.problems.push_back({Severity::error, name_or_path, "no such file"});
      return result;
    }
    result.value = {name_or_path, name_or_path};
    return result;
  }
  const std::string root = presets_root();
  const std::string kind_folder = folder_name(kind);
  if (!root.empty()) {
    const fs::path path = fs::path(root) / kind_folder / (name_or_path + ".yaml");
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) {
      result.value = {path.string(), "presets/" + kind_folder + "/" + name_or_path + ".yaml"};
      return result;
    }
  }
  std::string known;
  for (const auto& name : list_presets(kind)) known += (known.empty() ? "" : ", ") + name;
  std::string kind_word = kind_folder.substr(0, kind_folder.size() - 1);
  result.problems.push_back(
      {Severity::error, name_or_path,
       "unknown " + kind_word + " preset" +
           (known.empty() ? std::string(" (no presets folder found; set MESHPLAN_PRESETS)")
                          : " (known: " + known + "; or give a path to a .yaml file)")});
  return result;
}

}  // namespace meshplan
