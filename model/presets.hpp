// Finding presets. A preset is named (`gpt3-175b`) or given as a path
// (`./my-model.yaml`): anything with a '/' or ending in .yaml is a path.
// Named presets are looked up in, in order: $MESHPLAN_PRESETS, the source
// tree the binary was built from, and the installed share/ folder.
#pragma once

#include <string>
#include <vector>

#include "model/problem.hpp"

namespace meshplan {

enum class PresetKind { model, device, cluster };

std::string folder_name(PresetKind kind);  // "models", "devices", "clusters"

struct PresetFile {
  std::string path;          // to open
  std::string display_name;  // for messages: "presets/models/gpt3-175b.yaml" or the user's path
};

// The file for a name or path; a problem listing the known names otherwise.
Loaded<PresetFile> find_preset(PresetKind kind, const std::string& name_or_path);

// Names of all presets of a kind, sorted.
std::vector<std::string> list_presets(PresetKind kind);

// The folder presets are read from (first that exists), or "" when none.
std::string presets_root();

}  // namespace meshplan
