// The global batch used when none is given: a stated rule, not one model's
// number for every model. Why a rule: model presets carry architecture only
// (their sources publish dimensions; few publish the batch they trained
// with), and GPT-3's 1536 sequences is 12.6 M tokens for Llama 3's 8192-token
// sequences but 1.6 M for GPT-2's 1024.
//
// The rule (docs/cost-model.md, "Default global batch"):
//   * transformers: the batch in tokens that GPT-3 used for the model size
//     nearest (on a log scale) to this model's parameter count (Brown et al.
//     2020, "Language Models are Few-Shot Learners", Table 2.1: 0.5M tokens
//     for 125M-760M parameters, 1M for 1.3B-2.7B, 2M for 6.7B-13B, 3.2M for
//     175B; taken as 256, 512, 1024 and 1536 sequences of GPT-3's 2048
//     tokens), divided by the training sequence length;
//   * MLPs and CNNs: 256 samples, the ImageNet ResNet baseline (He et al.
//     2016, "Deep Residual Learning", section 3.4: "mini-batch size of 256";
//     Goyal et al. 2017 take it as their reference batch);
//   * then at least one sequence (or sample) per device, so that plain data
//     parallelism over every device is a candidate.
//
// Defines: DefaultBatch, default_global_batch.
#pragma once

#include <cstdint>
#include <string>

#include "model/model_spec.hpp"

namespace meshplan {

struct DefaultBatch {
  std::int64_t sequences = 1;  // sequences (transformers) or samples per optimizer step
  std::string rule;            // how it was chosen, for the user: "3.2M tokens (GPT-3 175B's batch, ...) / 2048 tokens"
};

// `parameter_count` from the layer graph; `seq_len` the training length
// (tokens; 1 for MLPs and CNNs); `world_size` the devices in the job.
DefaultBatch default_global_batch(const ModelSpec& model, double parameter_count, std::int64_t seq_len,
                                  std::int64_t world_size);

}  // namespace meshplan
