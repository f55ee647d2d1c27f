// Learning rate per step: linear warmup, then cosine decay to a floor, the
// schedule GPT-2-style training uses (Loshchilov & Hutter 2017, SGDR, for the
// cosine; Goyal et al. 2017 for the warmup; llm.c's get_learning_rate and
// nanoGPT's get_lr). Steps count from 0.
//
//   step < W:            lr * (step + 1) / W          (reaches lr at step W - 1)
//   W <= step <= S - 1:  min_lr + (lr - min_lr) * 0.5 * (1 + cos(pi * r)),
//                        r = (step - W) / (S - 1 - W)  (lr at step W, min_lr at step S - 1)
//   min_lr = min_lr_fraction * lr  (0.1 by default)
//
// Unlike llm.c, whose cosine ends one step past the last one, the floor is
// reached exactly at the last step, so "min_lr at the end" is true as stated.
//
// defines: LrSchedule, learning_rate_at, DefaultLearningRate, default_learning_rate, learning_rate_warnings
#pragma once

#include <cstdint>
#include <string>

#include "model/problem.hpp"

namespace meshplan::exec {

struct LrSchedule {
  double max_lr = 1e-3;           // lr
  std::int64_t warmup_steps = 0;  // W (0: start at lr)
  std::int64_t total_steps = 1;   // S
  double min_lr_fraction = 0.1;
};

// The learning rate of step `step` (0 <= step < total_steps; later steps get min_lr).
double learning_rate_at(const LrSchedule& schedule, std::int64_t step);

// GPT-3's peak learning rates by model size (Brown et al. 2020, "Language Models are Few-Shot
// Learners", arXiv 2005.14165, Table 2.1; AdamW with linear warm-up and cosine decay) are the yardstick
// for transformers. A model is of the size nearest its parameter count by ratio, the rule the default
// batch reads too (nearest_gpt3_size, model/gpt3_sizes.hpp), from 0.9 x the smallest size up (the table
// names rounded sizes, "125M", and GPT-2 small, the same shape as GPT-3 Small, has 124.4M).

// The peak rate `train` uses when --lr is not given, and why, in words for the run's log.
struct DefaultLearningRate {
  double learning_rate = 1e-3;
  std::string why;
};
// Transformers of a size of the table: that size's published peak rate (GPT-2 1.5B: the 1.3B row's
// 2.0e-4; at the former default of 1e-3 with no warm-up it diverged, loss 10.9 -> 15.9 in two steps on an
// H200, 2026-11-28). Smaller transformers, and every MLP: 1e-3, nanoGPT's rate for its small
// character-level GPT ("with baby networks can afford to go a bit higher", config/train_shakespeare_char.py).
DefaultLearningRate default_learning_rate(double parameters, bool transformer);

// A warning (flag --lr) when a transformer's `lr` is more than twice the peak rate of its size in GPT-3's
// table (above); below the table's smallest size, and for other models, when `lr` is above 1 (AdamW
// moves a weight by about the rate per step). Larger models want smaller rates, and a run at several
// times the published one, above all without warm-up, can diverge. Empty otherwise. Training goes on
// either way.
Problems learning_rate_warnings(double parameters, bool transformer, double lr, std::int64_t warmup_steps);

}  // namespace meshplan::exec
