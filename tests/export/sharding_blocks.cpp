// The block of every exported array that each device holds, as meshplan's
// ShardingSpec says (block_of_device, split_extents): for each of PARAMS,
// GRADS, OPT_STATE and ACTIVATIONS of `meshplan export --to jax`, each
// array's shape and, per rank, one [start, stop) per dimension. JSON on
// stdout; tests/export/jax_check.py compares it with what JAX places.
//
//   sharding_blocks PLAN.json
#include <iostream>
#include <nlohmann/json.hpp>

#include "model/export.hpp"
#include "model/plan_file.hpp"

namespace {

using meshplan::ExportedArray;

nlohmann::json blocks(const std::vector<ExportedArray>& arrays, const meshplan::Mesh& mesh) {
  nlohmann::json out = nlohmann::json::object();
  for (const ExportedArray& a : arrays) {
    nlohmann::json ranks = nlohmann::json::object();
    for (std::int64_t rank = 0; rank < mesh.world_size(); ++rank) {
      const auto block = meshplan::block_of_device(a.spec, mesh, rank);
      if (!block) continue;
      nlohmann::json bounds = nlohmann::json::array();
      for (std::size_t d = 0; d < a.spec.dims.size(); ++d) {
        const std::vector<std::int64_t> extents = meshplan::split_extents(a.shape[d], a.spec.splits(mesh, d));
        std::int64_t start = 0;
        for (std::int64_t b = 0; b < (*block)[d]; ++b) start += extents[static_cast<std::size_t>(b)];
        bounds.push_back({start, start + extents[static_cast<std::size_t>((*block)[d])]});
      }
      ranks[std::to_string(rank)] = bounds;
    }
    out[a.name] = {{"shape", a.shape}, {"blocks", ranks}};
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: sharding_blocks PLAN.json\n";
    return 2;
  }
  const auto file = meshplan::read_plan_file(argv[1]);
  if (!file.ok()) {
    for (const auto& p : file.problems) std::cerr << meshplan::describe(p) << "\n";
    return 2;
  }
  const std::pair<const char*, meshplan::TensorRole> kRoles[] = {{"PARAMS", meshplan::TensorRole::parameters},
                                                                  {"GRADS", meshplan::TensorRole::gradients},
                                                                  {"OPT_STATE", meshplan::TensorRole::optimizer_moment}};
  nlohmann::json out;
  for (const auto& [name, role] : kRoles) {
    const auto arrays = meshplan::exported_weights(file.value, role);
    if (!arrays.ok()) return 2;
    out[name] = blocks(arrays.value, file.value.plan.mesh);
  }
  const auto activations = meshplan::exported_activations(file.value);
  if (!activations.ok()) return 2;
  out["ACTIVATIONS"] = blocks(activations.value, file.value.plan.mesh);
  std::cout << out.dump() << "\n";
  return 0;
}
