// What `meshplan calibrate` prints for a calibration of this machine: the
// measurements and the written figures as a table on stdout, or as the
// --json object. The measuring and the preset files are library code
// (executor/calibrate/); this file only prints.
//
// Defines: print_table, to_json.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "executor/calibrate/local_preset.hpp"

namespace meshplan::cli {

// The measurements and figures as a table, then the files written.
void print_table(std::ostream& out, const exec::Calibration& c, const exec::PresetFigures& f,
                 const std::vector<std::string>& files);
nlohmann::ordered_json to_json(const exec::Calibration& c, const exec::PresetFigures& f,
                               const std::vector<std::string>& files);

}  // namespace meshplan::cli
