// Fuzz target: a model preset (YAML) as `meshplan --model FILE` reads it
// (load_model_text = load_model without the file lookup). Accepted models
// must satisfy what the layer graph relies on; rejected ones must name
// "fuzz-model.yaml" (with line and key where there is one).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_common.hpp"
#include "model/model_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto model = load_model_text(text, "fuzz-model.yaml");
  fuzz::check_loaded(model, "fuzz-model.yaml");
  if (!model.ok()) return 0;
  const ModelSpec& m = model.value;
  switch (m.kind) {
    case ModelKind::transformer: {
      const TransformerDims& t = m.transformer;
      fuzz::require(t.layers >= 1 && t.hidden >= 1 && t.ffn >= 1 && t.vocab >= 1 && t.seq_len >= 1, "dimensions >= 1");
      fuzz::require(t.heads >= 1 && t.kv_heads >= 1 && t.heads % t.kv_heads == 0, "heads a multiple of kv_heads >= 1");
      fuzz::require(t.head_dim >= 1, "head_dim >= 1");
      fuzz::require(t.experts >= 0 && t.top_k >= 1 && (t.experts == 0 || t.top_k <= t.experts), "1 <= top_k <= experts");
      fuzz::require(t.dropout >= 0 && t.dropout < 1, "dropout in [0, 1)");
      break;
    }
    case ModelKind::mlp:
      fuzz::require(m.mlp.layer_sizes.size() >= 2, "an MLP has input and output sizes");
      for (const auto n : m.mlp.layer_sizes) fuzz::require(n >= 1, "MLP layer sizes >= 1");
      break;
    case ModelKind::cnn:
      fuzz::require(!m.cnn.stage_blocks.empty() && m.cnn.stage_blocks.size() == m.cnn.stage_channels.size(),
                    "one channel count per CNN stage");
      break;
  }
  fuzz::require(m.default_seq_len() >= 1, "default_seq_len >= 1");
  return 0;
}
