// The default global batch rule of default_batch.hpp, with its sources.
#include "model/default_batch.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/gpt3_sizes.hpp"

namespace meshplan {
namespace {

constexpr std::int64_t kResNetBatch = 256;  // He et al. 2016, section 3.4

std::string millions(double tokens) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", tokens / 1e6);
  return text;
}

}  // namespace

DefaultBatch default_global_batch(const ModelSpec& model, double parameter_count, std::int64_t seq_len,
                                  std::int64_t world_size) {
  DefaultBatch batch;
  if (model.kind == ModelKind::transformer) {
    const Gpt3Size* nearest = &nearest_gpt3_size(parameter_count);
    const double tokens = static_cast<double>(nearest->sequences_of_2048 * kGpt3Context);
    const std::int64_t length = std::max<std::int64_t>(seq_len, 1);
    batch.sequences = std::max<std::int64_t>(1, std::llround(tokens / static_cast<double>(length)));
    batch.rule = millions(tokens) + "M tokens, " + nearest->name + "'s batch (the GPT-3 size nearest this model's; Brown et al. 2020, Table 2.1), / " +
                 std::to_string(length) + " tokens per sequence";
  } else {
    batch.sequences = kResNetBatch;
    batch.rule = "256 samples, the ImageNet ResNet baseline (He et al. 2016, section 3.4)";
  }
  if (batch.sequences < world_size) {
    batch.sequences = world_size;
    batch.rule += ", raised to one per device";
  }
  return batch;
}

}  // namespace meshplan
