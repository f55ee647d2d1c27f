// Where each key of a JSON text is: nlohmann keeps no positions, and a
// problem in a long file (a plan file holds its model, cluster and device; a
// Hugging Face config.json) names the key's line, as a preset's does.
#pragma once

#include <map>
#include <string>

namespace meshplan {

// The 1-based line of every object key of a JSON text that has parsed, by its
// dotted path ("plan.micro_batch"; array items as "[i]"), the first occurrence
// of each.
std::map<std::string, int> json_key_lines(const std::string& text);

}  // namespace meshplan
