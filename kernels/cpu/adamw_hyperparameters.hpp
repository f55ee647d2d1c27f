// AdamW's hyperparameters (adamw.hpp's step uses them), in a header of its
// own so that the CUDA kernels (C++17, kernels/cuda/kernels.hpp) take the
// same struct as the CPU step.
//
// Defines: AdamWHyperparameters.
#pragma once

namespace meshplan::kernels {

struct AdamWHyperparameters {
  double learning_rate = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

}  // namespace meshplan::kernels
