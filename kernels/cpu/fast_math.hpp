// exp and tanh for float that the compiler can vectorise. glibc's expf and
// tanhf are scalar calls unless the whole build is -ffast-math, so the
// softmax, cross-entropy and GELU loops spent most of their time in them
// (a GPT step here: about a fifth of its time in expm1f/tanhf, measured with
// perf). These are plain arithmetic in `#pragma omp simd` loops instead.
//
// exp: x = n ln 2 + r with n = round(x / ln 2) and |r| <= ln(2) / 2
// (Cody-Waite: ln 2 split into a high part exact in float and a low part), then
// e^r by its Taylor series to r^6 (truncation |r|^7 / 7! < 1.2e-7 relative,
// about one float ulp), scaled by 2^n built in the exponent bits. Inputs
// below -87 give 0 (e^-87 ~ 1.6e-38 is at the edge of normal floats), above
// 88 give e^88 (callers pass x - max <= 0, or bounded arguments).
// tanh(u) = sign(u) (1 - e) / (1 + e) with e = exp(-2 |u|) in (0, 1], so
// nothing overflows; near 0 the absolute error stays about one float ulp of 1.
// Both are checked against std::exp / std::tanh over their ranges in
// tests/test_kernels.cpp. The double instantiations of the kernels keep the
// std:: functions (they are the finite-difference oracles).
//
// defines: exp_approx, tanh_approx, exp_of, tanh_of
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace meshplan::kernels {

inline float exp_approx(float x) {
  constexpr float log2e = 1.44269504088896341f;
  constexpr float ln2_hi = 0.693145751953125f;    // 0x3F317200: 8 trailing zero bits, so n * ln2_hi is exact
  constexpr float ln2_lo = 1.428606765330187e-6f;  // ln 2 - ln2_hi
  const float clamped = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // Round to nearest by adding and removing 1.5 x 2^23 (the default rounding
  // mode does it; no SSE4.1 round instruction or libm call needed).
  constexpr float round_magic = 12582912.0f;
  const float n = (clamped * log2e + round_magic) - round_magic;
  const float r = (clamped - n * ln2_hi) - n * ln2_lo;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::int32_t exponent = (static_cast<std::int32_t>(n) + 127) << 23;
  const float scaled = p * std::bit_cast<float>(exponent);
  return x < -87.0f ? 0.0f : scaled;
}

inline float tanh_approx(float u) {
  const float e = exp_approx(-2.0f * std::fabs(u));
  const float t = (1.0f - e) / (1.0f + e);
  return std::copysign(t, u);
}

// The kernels' templates call these: the fast forms for float, std:: for double.
inline float exp_of(float x) { return exp_approx(x); }
inline double exp_of(double x) { return std::exp(x); }
inline float tanh_of(float x) { return tanh_approx(x); }
inline double tanh_of(double x) { return std::tanh(x); }

}  // namespace meshplan::kernels
