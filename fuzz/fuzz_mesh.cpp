// Fuzz target: the mesh flags, `--mesh dp=16,tp=8` (parse_mesh) and
// `--mesh-shape '[[4, 2], ["fsdp", "tp"]]'` (parse_mesh_shape), on the same
// input, and the word flags read with them (--schedule, --recompute,
// --precision). A rejected mesh names its flag; an accepted one has axes of
// size >= 1, each once, and a world size and data-parallel size that can be
// computed (the planner multiplies the axes: UBSan reports an overflow).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_common.hpp"
#include "model/mesh.hpp"
#include "model/plan.hpp"
#include "model/precision.hpp"

namespace {

void check_mesh(const meshplan::Loaded<meshplan::Mesh>& mesh, const std::string& flag) {
  using namespace meshplan;
  fuzz::check_loaded(mesh, flag);
  if (!mesh.ok()) return;
  fuzz::require(!mesh.value.axes.empty() || flag == "--mesh-shape", "a parsed --mesh has an axis");
  for (std::size_t i = 0; i < mesh.value.axes.size(); ++i) {
    fuzz::require(mesh.value.axes[i].size >= 1, "axis sizes >= 1");
    for (std::size_t j = 0; j < i; ++j) fuzz::require(mesh.value.axes[i].axis != mesh.value.axes[j].axis, "axes once");
  }
  const std::int64_t world = mesh.value.world_size();
  fuzz::require(world >= 1 && mesh.value.data_parallel_size() <= world, "1 <= data-parallel size <= world size");
  (void)mesh.value.coordinates(world - 1);
  // What the CLI prints back must parse to the same mesh.
  const auto again = parse_mesh(mesh.value.to_string(), "--mesh");
  fuzz::require(again.ok() && again.value.to_string() == mesh.value.to_string(), "to_string round-trips");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  check_mesh(parse_mesh(text, "--mesh"), "--mesh");
  check_mesh(parse_mesh_shape(text, "--mesh-shape"), "--mesh-shape");
  const std::string word(text);
  (void)parse_schedule(word);
  (void)parse_recompute(word);
  (void)parse_precision(word);
  return 0;
}
