// GPT-3's eight model sizes as Brown et al. 2020 ("Language Models are
// Few-Shot Learners", arXiv 2005.14165) list them in Table 2.1, with the two
// columns meshplan reads: the batch (default_batch.cpp, the default global
// batch) and the peak learning rate (executor/train/lr_schedule.cpp, the
// default --lr and its warning). One table for both, and one rule for which
// of its sizes a model is (nearest_gpt3_size).
//
// defines: Gpt3Size, kGpt3Sizes, kGpt3Context, nearest_gpt3_size, within_gpt3_sizes
#pragma once

#include <cmath>
#include <cstdint>

namespace meshplan {

struct Gpt3Size {
  const char* name;        // the paper's model name, "GPT-3 Small"
  const char* size;        // its size as the paper rounds it, "125M"
  double parameters;       // that size in parameters
  // "Batch Size" in tokens; the table rounds (0.5M, 1M, 2M, 3.2M): with GPT-3's
  // 2048-token context these are 256, 512, 1024 and 1536 sequences.
  std::int64_t sequences_of_2048;
  double learning_rate;    // "Learning Rate", the peak of AdamW with warm-up and cosine decay
};

inline constexpr Gpt3Size kGpt3Sizes[] = {
    {"GPT-3 Small", "125M", 125e6, 256, 6.0e-4}, {"GPT-3 Medium", "350M", 350e6, 256, 3.0e-4},
    {"GPT-3 Large", "760M", 760e6, 256, 2.5e-4}, {"GPT-3 XL", "1.3B", 1.3e9, 512, 2.0e-4},
    {"GPT-3 2.7B", "2.7B", 2.7e9, 512, 1.6e-4},  {"GPT-3 6.7B", "6.7B", 6.7e9, 1024, 1.2e-4},
    {"GPT-3 13B", "13B", 13e9, 1024, 1.0e-4},    {"GPT-3 175B", "175B", 175e9, 1536, 0.6e-4},
};
inline constexpr std::int64_t kGpt3Context = 2048;

// The size nearest a model of `parameters` by ratio (the least |ln(size /
// parameters)|; ties to the smaller): GPT-2 small (124.4M) is GPT-3 Small,
// GPT-2 1.5B (1.56B) GPT-3 XL, Llama 3 8B GPT-3 6.7B, a 10B model GPT-3 13B.
inline const Gpt3Size& nearest_gpt3_size(double parameters) {
  const double size = parameters > 1 ? parameters : 1;
  const Gpt3Size* nearest = &kGpt3Sizes[0];
  for (const Gpt3Size& row : kGpt3Sizes) {
    if (std::abs(std::log(row.parameters / size)) < std::abs(std::log(nearest->parameters / size))) nearest = &row;
  }
  return *nearest;
}

// Whether the table speaks for a model of `parameters`: from 0.9 x its
// smallest size up (the table rounds its sizes, "125M"; GPT-2 small, the same
// shape as GPT-3 Small, has 124.4M). Smaller models are nearest GPT-3 Small
// all the same; the learning rate does not take that row's rate for them.
inline bool within_gpt3_sizes(double parameters) { return parameters >= 0.9 * kGpt3Sizes[0].parameters; }

}  // namespace meshplan
