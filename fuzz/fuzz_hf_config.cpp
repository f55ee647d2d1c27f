// Fuzz target: `meshplan presets --from-hf config.json` (read_hf_config_text,
// model/hf_config.hpp). A rejected config names the file (and key); from an
// accepted one, the preset printed loads back as a model preset, the same
// model.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_common.hpp"
#include "model/hf_config.hpp"
#include "model/model_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string file = "fuzz-config.json";
  const auto hf = read_hf_config_text(text, file);
  fuzz::check_loaded(hf, file);
  if (!hf.ok()) return 0;
  const std::string yaml = hf_model_yaml(hf.value);
  const auto again = load_model_text(yaml, "printed preset");
  fuzz::require_no_errors(again.problems, "the preset printed from an accepted config does not load");
  fuzz::require(again.value.transformer.layers == hf.value.model.transformer.layers &&
                    again.value.transformer.hidden == hf.value.model.transformer.hidden &&
                    again.value.transformer.vocab == hf.value.model.transformer.vocab,
                "the printed preset is the same model");
  return 0;
}
