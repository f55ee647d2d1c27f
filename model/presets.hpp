// Finding presets. A preset is named (`gpt3-175b`) or given as a path
// (`./my-model.yaml`): anything with a '/' or ending in .yaml is a path.
// Named presets are looked up first in the user's presets folder (where
// `meshplan calibrate` writes this machine's `local-cpu`, so a measured
// preset overrides the built-in placeholder of the same name), then in the
// built-in folder: $MESHPLAN_PRESETS, the source tree the binary was built
// from, or the installed share/ folder, the first that exists.
#pragma once

#include <string>
#include <vector>

#include "model/problem.hpp"

namespace YAML {
class Node;
}

namespace meshplan {

enum class PresetKind { model, device, cluster };

std::string folder_name(PresetKind kind);  // "models", "devices", "clusters"

struct PresetFile {
  std::string path;          // to open
  std::string display_name;  // for messages: "presets/models/gpt3-175b.yaml", a user preset's full path, or the user's path
  bool from_user_folder = false;  // found in user_presets_dir()
  std::string requested_name;     // the name it was found by (its file's stem); empty when given as a path
};

// A preset found by name whose 'name:' is another: it is chosen by its file's
// name but reports say the other, which no --model/--device/--cluster finds.
// A warning at the file's 'name' key; nothing for a preset given as a path.
void add_name_mismatch(const PresetFile& file, const YAML::Node& document, const std::string& name_in_file,
                       Problems& problems);

// Warnings for the user folder's entries of `kind` that end in .yaml but are
// no file to read (a folder, a broken or looping link): listings skip them.
Problems user_preset_folder_problems(PresetKind kind);

// The file for a name or path; a problem listing the known names otherwise.
Loaded<PresetFile> find_preset(PresetKind kind, const std::string& name_or_path);

// Names of all presets of a kind (user folder and built-in folder), sorted, each once.
std::vector<std::string> list_presets(PresetKind kind);

// The built-in folder presets are read from (first that exists), or "" when none.
std::string presets_root();

// The user's presets folder, searched before presets_root():
// $MESHPLAN_USER_PRESETS, else $XDG_CONFIG_HOME/meshplan/presets, else
// $HOME/.config/meshplan/presets; "" when none of these variables is set.
// The folder need not exist.
std::string user_presets_dir();

// From now on this process reads built-in presets only (user_presets_dir()
// is ""): `meshplan validation` compares published figures with the presets
// that describe the published hardware, not a user's copy of the same name.
void use_built_in_presets_only();

}  // namespace meshplan
