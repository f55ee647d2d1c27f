// The default global batch rule of default_batch.hpp, with its sources.
#include "model/default_batch.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace meshplan {
namespace {

// Brown et al. 2020, Table 2.1: model size and "Batch Size" in tokens. The
// table rounds (0.5M, 1M, 2M, 3.2M); with GPT-3's 2048-token context these
// are 256, 512, 1024 and 1536 sequences (1536 x 2048 is the 3.2M of GPT-3 175B).
struct Gpt3Row {
  const char* name;
  double parameters;
  std::int64_t sequences_of_2048;
};
constexpr Gpt3Row kGpt3Table[] = {
    {"GPT-3 Small", 125e6, 256},  {"GPT-3 Medium", 350e6, 256}, {"GPT-3 Large", 760e6, 256},
    {"GPT-3 XL", 1.3e9, 512},     {"GPT-3 2.7B", 2.7e9, 512},   {"GPT-3 6.7B", 6.7e9, 1024},
    {"GPT-3 13B", 13e9, 1024},    {"GPT-3 175B", 175e9, 1536},
};
constexpr std::int64_t kGpt3Context = 2048;
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
    const Gpt3Row* nearest = &kGpt3Table[0];
    const double size = std::max(parameter_count, 1.0);
    for (const Gpt3Row& row : kGpt3Table) {
      if (std::abs(std::log(row.parameters / size)) < std::abs(std::log(nearest->parameters / size))) nearest = &row;
    }
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
