// The rows `meshplan calibrate --backend cuda` measures, as the JSON Lines
// that `meshplan calibrate --from FILE` reads (model/measured_device.hpp; the
// format of tests/data/h100-measured.jsonl, written there by
// scripts/gpu/measure_device.py). Host code, built on every machine, so the
// format is tested where there is no GPU (tests/test_measurement_rows.cpp):
// the CUDA measurement (cuda_measure.hpp) only fills these rows with times.
//
// Each constructor takes what was timed (shapes, seconds) and adds the rate
// fields the format derives from them, with the same formulas as
// measure_device.py: GEMM 2mnk / s; attention 2 B H T^2 D forward FLOPs
// (causal); device copy 2 x bytes / s (read + written). Fields the parser
// does not read ("dtype", "kernel", "repeats") say what ran; it ignores them.
//
// Defines: MeasurementValue, MeasurementField, MeasurementRow, device_row,
// gemm_ceiling_row, copy_ceiling_row, gemm_row, attention_row, token_op_row,
// cross_entropy_row, adamw_row, to_jsonl, base_preset_for_gpu.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace meshplan::exec {

using MeasurementValue = std::variant<std::string, std::int64_t, double>;
struct MeasurementField {
  std::string key;
  MeasurementValue value;
};
// One line: its "section" and its fields, written in this order.
struct MeasurementRow {
  std::string section;
  std::vector<MeasurementField> fields;
};

// name from cudaGetDeviceProperties; sms, memory and L2 in bytes; `stack`:
// what measured, e.g. "meshplan CUDA kernels, CUDA runtime 12.8".
MeasurementRow device_row(const std::string& name, std::int64_t sms, std::int64_t mem_bytes, std::int64_t l2_bytes,
                          const std::string& stack);
// bf16 C[8192, 8192] = A B, median seconds of one call.
MeasurementRow gemm_ceiling_row(double median_s, double best_s);
// cudaMemcpy device to device of `bytes`, median seconds; counted 2 x bytes.
MeasurementRow copy_ceiling_row(std::int64_t bytes, double median_s, double best_s);
// bf16 C[m, n] = A[m, k] B[k, n], fp32 accumulation.
MeasurementRow gemm_row(std::int64_t m, std::int64_t k, std::int64_t n, double median_s, double best_s);
// Causal attention, bf16, [B, H, T, D]; forward, and forward + backward.
MeasurementRow attention_row(std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t D, double forward_s,
                             double forward_backward_s);
// A [tokens, d] kernel (layernorm, gelu_tanh, residual_add) in `dtype` ("fp32").
MeasurementRow token_op_row(const std::string& op, std::int64_t tokens, std::int64_t d, double forward_s,
                            double forward_backward_s, const std::string& dtype);
// The fused loss over [tokens, vocab] bf16 logits (op cross_entropy_compiled).
// `kernel` says what ran: ours computes loss and gradient in one kernel, so
// the caller gives that time as both forward_s and forward_backward_s.
MeasurementRow cross_entropy_row(std::int64_t tokens, std::int64_t vocab, double forward_s, double forward_backward_s,
                                 const std::string& kernel);
// One fused multi-tensor AdamW step over `params` fp32 parameters (op adamw_fused_fp32).
MeasurementRow adamw_row(std::int64_t params, std::int64_t tensors, double step_s);

// One JSON object per row, each on its own line ending in '\n'; numbers as
// nlohmann::json writes them (doubles in the shortest text that reads back exactly).
std::string to_jsonl(const std::vector<MeasurementRow>& rows);

// The built-in device preset whose datasheet figures (dense peaks, memory
// bandwidth) a GPU of this name and memory has: "h100-sxm", "h200",
// "a100-80g", "a100-40g", "v100-32g"; "" when none is known (give --base).
// PCIe and NVL H100s differ from the SXM part in peak and bandwidth: "".
std::string base_preset_for_gpu(const std::string& name, std::int64_t mem_bytes);

}  // namespace meshplan::exec
