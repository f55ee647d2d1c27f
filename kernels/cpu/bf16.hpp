// bfloat16 (1 sign, 8 exponent, 7 mantissa bits: the top half of an IEEE
// float32) as raw 16-bit patterns, the form BLAS-like libraries take. Rounding
// from float is round-to-nearest-even on the dropped 16 bits, as hardware
// conversion (VCVTNEPS2BF16) and PyTorch do; NaN stays a (quiet) NaN,
// infinities stay infinite, and finite values past the largest bf16 round to
// infinity. kernels/cpu/reference.hpp has an independent rounding to test against.
//
// defines: Bf16Bits, round_to_bf16_bits, bf16_bits_to_float, round_to_bf16
#pragma once

#include <bit>
#include <cstdint>

namespace meshplan::kernels {

using Bf16Bits = std::uint16_t;

inline Bf16Bits round_to_bf16_bits(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<Bf16Bits>((bits >> 16) | 0x0040u);  // quiet NaN
  // Adding 0x7fff plus the lowest kept bit rounds half to even (and carries into the exponent as it should).
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<Bf16Bits>((bits + rounding) >> 16);
}

inline float bf16_bits_to_float(Bf16Bits bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

// out[i] = round_to_bf16_bits(in[i]) for i < n.
void round_to_bf16(Bf16Bits* out, const float* in, std::int64_t n);

}  // namespace meshplan::kernels
