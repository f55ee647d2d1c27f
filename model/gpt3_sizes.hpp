// GPT-3's eight model sizes as Brown et al. 2020 ("Language Models are
// Few-Shot Learners", arXiv 2005.14165) list them in Table 2.1, with the two
// columns meshplan reads: the batch (default_batch.cpp, the default global
// batch) and the peak learning rate (executor/train/lr_schedule.cpp, the
// default --lr and its warning). One table for both.
//
// defines: Gpt3Size, kGpt3Sizes, kGpt3Context
#pragma once

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

}  // namespace meshplan
