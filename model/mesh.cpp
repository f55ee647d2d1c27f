#include "model/mesh.hpp"
#include "model/text.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <sstream>
#include <cctype>

namespace meshplan {
namespace {

constexpr std::int64_t kMaxAxisSize = kMaxMeshDevices;  // no axis is larger than the whole mesh

// Adds the axis, checking name, size and duplicates.
void add_axis(Mesh& mesh, std::string_view name, std::int64_t size, const std::string& flag, Problems& problems) {
  auto axis = parse_axis(name);
  if (!axis) {
    problems.push_back({Severity::error, flag,
                        "unknown mesh axis '" + std::string(name) +
                            "' (allowed: dp, fsdp, tp, pp, cp, ep; aliases data, model, tensor, pipeline, "
                            "context, expert)"});
    return;
  }
  if (size < 1 || size > kMaxAxisSize) {
    problems.push_back({Severity::error, flag,
                        "axis " + to_string(*axis) + " has size " + std::to_string(size) +
                            "; sizes must be between 1 and " + std::to_string(kMaxAxisSize)});
    return;
  }
  for (const auto& existing : mesh.axes) {
    if (existing.axis == *axis) {
      problems.push_back({Severity::error, flag, "axis " + to_string(*axis) + " is given twice"});
      return;
    }
  }
  // world_size() <= kMaxMeshDevices and size <= kMaxAxisSize: the product fits in int64.
  if (mesh.world_size() * size > kMaxMeshDevices) {
    problems.push_back({Severity::error, flag,
                        "axis " + to_string(*axis) + "=" + std::to_string(size) + " makes the mesh " +
                            std::to_string(mesh.world_size() * size) + " devices; a mesh has at most " +
                            std::to_string(kMaxMeshDevices)});
    return;
  }
  mesh.axes.push_back({*axis, size});
}


}  // namespace

std::string to_string(Axis axis) {
  switch (axis) {
    case Axis::dp: return "dp";
    case Axis::fsdp: return "fsdp";
    case Axis::tp: return "tp";
    case Axis::pp: return "pp";
    case Axis::cp: return "cp";
    case Axis::ep: return "ep";
  }
  return "?";
}

std::optional<Axis> parse_axis(std::string_view name) {
  if (name == "dp" || name == "data") return Axis::dp;
  if (name == "fsdp") return Axis::fsdp;
  if (name == "tp" || name == "model" || name == "tensor") return Axis::tp;
  if (name == "pp" || name == "pipeline") return Axis::pp;
  if (name == "cp" || name == "context") return Axis::cp;
  if (name == "ep" || name == "expert") return Axis::ep;
  return std::nullopt;
}

std::vector<std::int64_t> Mesh::coordinates(std::int64_t rank) const {
  std::vector<std::int64_t> coords(axes.size(), 0);
  for (std::size_t i = axes.size(); i-- > 0;) {
    coords[i] = rank % axes[i].size;
    rank /= axes[i].size;
  }
  return coords;
}

std::int64_t Mesh::coordinate(std::int64_t rank, Axis axis) const {
  const auto coords = coordinates(rank);
  for (std::size_t i = 0; i < axes.size(); ++i) {
    if (axes[i].axis == axis) return coords[i];
  }
  return 0;
}

std::string Mesh::to_string() const {
  std::string out;
  for (const auto& a : axes) {
    out += (out.empty() ? "" : ",") + meshplan::to_string(a.axis) + "=" + std::to_string(a.size);
  }
  return out.empty() ? "dp=1" : out;
}

Loaded<Mesh> parse_mesh(std::string_view text, const std::string& flag) {
  Loaded<Mesh> result;
  // Items are separated by commas, or by spaces within a comma's piece ("dp=16, tp=8", "dp=16 tp=8");
  // an empty piece ("dp=8,", ",,") is a typo, not nothing.
  std::vector<std::string> items;
  const std::string whole = trim(text);
  for (std::size_t start = 0; !whole.empty() && start <= whole.size();) {
    std::size_t end = whole.find(',', start);
    if (end == std::string::npos) end = whole.size();
    std::istringstream piece(std::string(whole.substr(start, end - start)));
    start = end + 1;
    std::string item;
    bool in_piece = false;
    while (piece >> item) {
      items.push_back(item);
      in_piece = true;
    }
    if (!in_piece) {
      result.problems.push_back({Severity::error, flag, "'" + whole + "' has an empty item (two commas, or one at an end)"});
      return result;
    }
  }
  bool any = false;
  for (const std::string& item : items) {
    any = true;
    auto sep = item.find_first_of("=:");
    if (sep == std::string::npos) {
      result.problems.push_back({Severity::error, flag, "'" + item + "' is not of the form axis=size (e.g. dp=16,tp=8)"});
      continue;
    }
    const std::string name = trim(item.substr(0, sep));
    const std::string size_text = trim(item.substr(sep + 1));
    std::int64_t size = 0;
    const bool digits = !size_text.empty() && size_text.size() <= 9 &&
                        std::all_of(size_text.begin(), size_text.end(), [](unsigned char c) { return std::isdigit(c); });
    if (digits && !plain_decimal(size_text, true)) {  // as --gpus 08 is refused: octal to some readers
      result.problems.push_back({Severity::error, flag, "size of axis '" + name + "' is '" + size_text +
                                                            "': write sizes in decimal digits without a leading zero"});
      continue;
    }
    if (!digits) {
      const bool all_digits = !size_text.empty() && std::all_of(size_text.begin() + (size_text[0] == '-' ? 1 : 0), size_text.end(),
                                                                 [](unsigned char c) { return std::isdigit(c); });
      const std::string why = !all_digits || size_text == "-" ? "not a whole number"
                              : size_text[0] == '-'           ? "below 1"
                                                              : "out of range (a mesh holds at most " +
                                                                    std::to_string(kMaxMeshDevices) + " devices)";
      result.problems.push_back({Severity::error, flag, "size of axis '" + name + "' is '" + size_text + "', " + why});
      continue;
    }
    size = std::stoll(size_text);
    add_axis(result.value, name, size, flag, result.problems);
  }
  if (!any) result.problems.push_back({Severity::error, flag, "empty mesh; give axes as axis=size, e.g. dp=16,tp=8"});
  return result;
}

Loaded<Mesh> parse_mesh_shape(std::string_view text, const std::string& flag) {
  Loaded<Mesh> result;
  const char* form = "expected [[sizes...], [\"axis\", ...]], e.g. '[[4, 2], [\"fsdp\", \"tp\"]]'";
  // Accept the YAML flow style with single quotes too.
  std::string json_text(text);
  std::replace(json_text.begin(), json_text.end(), '\'', '"');
  auto parsed = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_array() || parsed.size() != 2 || !parsed[0].is_array() ||
      !parsed[1].is_array()) {
    result.problems.push_back({Severity::error, flag, form});
    return result;
  }
  const auto& sizes = parsed[0];
  const auto& names = parsed[1];
  if (sizes.empty() && names.empty()) {
    result.problems.push_back({Severity::error, flag, "names no axes; " + std::string(form)});
    return result;
  }
  if (sizes.size() != names.size()) {
    result.problems.push_back({Severity::error, flag,
                               "has " + std::to_string(sizes.size()) + " sizes but " +
                                   std::to_string(names.size()) + " axis names; " + form});
    return result;
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (!names[i].is_string()) {
      result.problems.push_back({Severity::error, flag, "axis name " + std::to_string(i + 1) + ", " + names[i].dump() +
                                                            ", is not a string"});
      continue;
    }
    if (!sizes[i].is_number_integer()) {
      result.problems.push_back({Severity::error, flag, "size " + std::to_string(i + 1) + " (of axis " + names[i].dump() +
                                                            "), " + sizes[i].dump() + ", is not a whole number"});
      continue;
    }
    add_axis(result.value, names[i].get<std::string>(), sizes[i].get<std::int64_t>(), flag, result.problems);
  }
  return result;
}

}  // namespace meshplan
