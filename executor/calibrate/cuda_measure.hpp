// `meshplan calibrate --backend cuda`: one GPU measured with meshplan's own
// CUDA code (issue 16): the cuBLASLt GEMMs (kernels/cuda/gemm_lt.hpp) and
// the kernels of kernels/cuda/kernels.hpp, timed as the executor runs them,
// so the preset made from the rows describes that executor on that GPU. The
// rows are those of scripts/gpu/measure_device.py (measurement_rows.hpp),
// with the same shapes, so `calibrate --from`'s derivation
// (model/measured_device.hpp) turns them into a device preset.
//
// How each call is timed: operands filled with uniform random values
// (random_fill.hpp), 3 warm-up calls, then kRepeats calls each between two
// CUDA events on one stream; the median (and the best, where the format has
// it). GEMMs rotate over three operand sets, as measure_device.py, so a
// repeat does not find its operands in the L2.
//
// What runs (full run; --quick in brackets). Aimed at under 2 minutes on an
// H100: at the times of h100-measured.jsonl the GEMM and attention calls sum
// to about 4 s (18 calls each), the rest being fills, allocation and the
// 1.5B-parameter AdamW; not yet timed on a GPU. --quick: a few seconds:
//   device     cudaGetDeviceProperties: name, SMs, memory, L2
//   ceiling    bf16 8192^3 GEMM; cudaMemcpy device to device of 1 GiB (2 x bytes counted)
//   gemm       bf16 C[m,n] = A[m,k] B[k,n]: the 25 (k, n) of measure_device.py x
//              m in {1024, 2048, 4096, 8192, 16384} [8 (k, n) x m in {1024, 4096}]
//   attention  flash_attention_forward / _backward, causal, bf16, KVH = NH, the 6
//              shapes of measure_device.py [2]; D other than 64 or 128: skipped, noted
//   op         layernorm, gelu_tanh, residual_add (fp32 kernels, "dtype": "fp32"),
//              forward and forward + backward, [tokens, d] in {8192x768, 8192x1600,
//              16384x4096, 8192x8192} [the first two]; softmax_cross_entropy (bf16
//              logits; loss and gradient in one kernel) at 8192x50257 and 16384x128256
//              [the first]; adamw_update_multi over 124M and 1.5B fp32 parameters in
//              tensors of 10M [124M]
// A shape whose buffers do not fit in free device memory is skipped with a note.
//
// Built only with CUDA (MESHPLAN_HAVE_CUDA), as the library meshplan_cuda_calibrate.
//
// defines: kCudaWarmups, kCudaRepeats, CudaDeviceInfo, probe_cuda_device, CudaMeasureOptions,
// CudaMeasurement, measure_cuda_device
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "executor/calibrate/measurement_rows.hpp"

namespace meshplan::exec {

inline constexpr int kCudaWarmups = 3;
inline constexpr int kCudaRepeats = 15;

// What the CLI needs before measuring (the base preset is picked by name).
struct CudaDeviceInfo {
  std::string name;               // cudaGetDeviceProperties' name, "NVIDIA H100 80GB HBM3"
  std::int64_t memory_bytes = 0;  // its totalGlobalMem
};
// Throws std::runtime_error naming the failed call (no such device).
CudaDeviceInfo probe_cuda_device(int device);

struct CudaMeasureOptions {
  int device = 0;
  bool quick = false;
  std::function<void(const std::string& line)> say;  // progress, one line at a time; may be empty
};

struct CudaMeasurement {
  std::string device_name;            // cudaGetDeviceProperties' name
  std::int64_t memory_bytes = 0;      // its totalGlobalMem
  std::vector<MeasurementRow> rows;   // in the order measured
  std::vector<std::string> notes;     // shapes skipped, and why
};

// Measures device `options.device` (0 <= device < CudaBackend::device_count()).
// Throws std::runtime_error naming the failed CUDA or cuBLASLt call.
CudaMeasurement measure_cuda_device(const CudaMeasureOptions& options);

}  // namespace meshplan::exec
