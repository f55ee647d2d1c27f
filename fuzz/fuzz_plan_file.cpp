// Fuzz target: a plan file (JSON) as `meshplan train --plan FILE` and the
// simulator read it (parse_plan_file = read_plan_file without the file):
// the embedded model (back through the preset loader), cluster, device,
// plan and prediction, then the plan's validation. Rejected files must name
// "fuzz-plan.json" (with the line for malformed JSON, the key otherwise);
// an accepted plan must be internally consistent, and writing it back and
// reading that again must be accepted too.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_common.hpp"
#include "model/plan_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto file = parse_plan_file(text, "fuzz-plan.json");
  fuzz::check_loaded(file, "fuzz-plan.json");
  if (!file.ok()) return 0;
  const PlanFile& f = file.value;
  fuzz::require(f.world_size >= 1 && f.plan.mesh.world_size() == f.world_size, "mesh product == world_size");
  fuzz::require(f.plan.micro_batch >= 1 && f.plan.global_batch >= 1, "batches >= 1");
  const std::string again = plan_file_to_json(f).dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  const auto reread = parse_plan_file(again, "fuzz-plan-again.json");
  if (!reread.ok()) {
    fuzz::fail("an accepted plan file, written back, is refused", reread.problems.front());
  }
  return 0;
}
