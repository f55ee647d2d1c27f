// The models' one entry to the linear-layer GEMMs, so the compute precision
// is a setting of the model, not of every call site: fp32 runs
// kernels::matmul_forward/backward in T's own arithmetic (the default, and
// the only choice for T = double); bf16 runs the bf16 variants (operands
// rounded to bfloat16, fp32 accumulation, fp32 master weights untouched).
// The bf16 operand copies live in a workspace allocated from the model's
// backend (MemoryCategory::workspace), grown to the largest matmul seen.
//
// defines: MatmulRunner
#pragma once

#include <cstdint>
#include <type_traits>

#include "executor/backend/tracked_allocator.hpp"
#include "kernels/cpu/matmul.hpp"
#include "model/precision.hpp"
#include "model/problem.hpp"

namespace meshplan::exec {

template <typename T>
class MatmulRunner {
 public:
  explicit MatmulRunner(Backend& backend) : workspace_(TrackedAllocator<kernels::Bf16Bits>(MemoryCategory::workspace, backend)) {}

  // fp32 or bf16; problems (field "--precision") for other precisions, for
  // bf16 with T = double, and for bf16 where kernels::bf16_matmul_support()
  // says no. The precision is unchanged when there are problems.
  Problems set_precision(Precision precision) {
    Problems problems;
    if (precision != Precision::fp32 && precision != Precision::bf16)
      problems.push_back({Severity::error, "--precision",
                          "the CPU executor computes in fp32 or bf16, not " + to_string(precision)});
    else if (precision == Precision::bf16 && !std::is_same_v<T, float>)
      problems.push_back({Severity::error, "--precision", "bf16 compute needs float master weights"});
    else if (precision == Precision::bf16 && !kernels::bf16_matmul_support().supported)
      problems.push_back({Severity::error, "--precision",
                          "bf16 is not available: " + kernels::bf16_matmul_support().reason});
    if (problems.empty()) precision_ = precision;
    return problems;
  }
  Precision precision() const { return precision_; }

  void forward(T* out, const T* inp, const T* weight, const T* bias, std::int64_t N, std::int64_t C, std::int64_t OC) {
    if constexpr (std::is_same_v<T, float>) {
      if (precision_ == Precision::bf16) {
        kernels::matmul_forward_bf16(out, inp, weight, bias, N, C, OC, workspace_for(N, C, OC));
        return;
      }
    }
    kernels::matmul_forward(out, inp, weight, bias, N, C, OC);
  }

  void backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, std::int64_t N,
                std::int64_t C, std::int64_t OC) {
    if constexpr (std::is_same_v<T, float>) {
      if (precision_ == Precision::bf16) {
        kernels::matmul_backward_bf16(dinp, dweight, dbias, dout, inp, weight, N, C, OC, workspace_for(N, C, OC));
        return;
      }
    }
    kernels::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  }

 private:
  kernels::Bf16Bits* workspace_for(std::int64_t N, std::int64_t C, std::int64_t OC) {
    const auto needed = static_cast<std::size_t>(kernels::matmul_bf16_workspace_elements(N, C, OC));
    if (workspace_.size() < needed) {
      // Free the old block first and allocate exactly `needed` (resize alone may over-allocate).
      TrackedVector<kernels::Bf16Bits>(workspace_.get_allocator()).swap(workspace_);
      workspace_.reserve(needed);
      workspace_.resize(needed);
    }
    return workspace_.data();
  }

  Precision precision_ = Precision::fp32;
  TrackedVector<kernels::Bf16Bits> workspace_;
};

}  // namespace meshplan::exec
