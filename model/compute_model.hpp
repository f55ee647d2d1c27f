// How long one op takes on one device: a roofline (Williams et al. 2009)
// per GEMM, at the device's achievable GEMM rate, corrected for tile and wave
// quantization (NVIDIA, "Matrix Multiplication Background User's Guide",
// 2023, Ch. 3), and memory-bound ops at the achievable memory bandwidth.
// Formulas: docs/cost-model.md, "Compute".
#pragma once

#include <cstdint>

#include "model/device_spec.hpp"
#include "model/precision.hpp"

namespace meshplan {

struct ComputeRates {
  double peak_flops_per_s = 0;          // dense peak at the GEMM dtype
  double gemm_efficiency = 0.8;         // large-GEMM fraction of peak
  double memory_bytes_per_s = 0;        // achievable memory bandwidth
  std::int64_t compute_units = 0;       // SMs; 0 disables wave quantization
};

// Rates for GEMMs at `precision`; peak 0 when the device lacks the dtype.
ComputeRates rates_for(const DeviceSpec& device, Precision precision);

// Fraction of a full wave of full tiles that an (m x n) x batch output keeps
// busy, for the best of cuBLAS's common tile shapes (in (0, 1]).
double tile_wave_efficiency(double m, double n, double batch, std::int64_t compute_units);

// Seconds for batch x (m x k) . (k x n) with `element_bytes` operands:
// max(compute at peak x efficiency x tile/wave, operand + result traffic at memory bandwidth).
double gemm_time_s(double m, double n, double k, double batch, double element_bytes, const ComputeRates& rates);

// Seconds to stream `bytes` through memory.
inline double memory_time_s(double bytes, const ComputeRates& rates) {
  return rates.memory_bytes_per_s > 0 ? bytes / rates.memory_bytes_per_s : 0;
}

}  // namespace meshplan
