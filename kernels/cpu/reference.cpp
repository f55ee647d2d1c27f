// Each output element is one explicitly written sum. Read these against the
// formulas in the headers; nothing here is tuned.
#include "kernels/cpu/reference.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace meshplan::kernels {

void reference_matmul_forward(double* out, const double* inp, const double* weight, const double* bias,
                              std::int64_t N, std::int64_t C, std::int64_t OC) {
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < OC; ++o) {
      double sum = bias != nullptr ? bias[o] : 0.0;
      for (std::int64_t c = 0; c < C; ++c) sum += inp[n * C + c] * weight[o * C + c];
      out[n * OC + o] = sum;
    }
}

void reference_matmul_backward(double* dinp, double* dweight, double* dbias, const double* dout, const double* inp,
                               const double* weight, std::int64_t N, std::int64_t C, std::int64_t OC) {
  if (dinp != nullptr)
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t c = 0; c < C; ++c) {
        double sum = 0.0;
        for (std::int64_t o = 0; o < OC; ++o) sum += dout[n * OC + o] * weight[o * C + c];
        dinp[n * C + c] += sum;
      }
  if (dweight != nullptr)
    for (std::int64_t o = 0; o < OC; ++o)
      for (std::int64_t c = 0; c < C; ++c) {
        double sum = 0.0;
        for (std::int64_t n = 0; n < N; ++n) sum += dout[n * OC + o] * inp[n * C + c];
        dweight[o * C + c] += sum;
      }
  if (dbias != nullptr)
    for (std::int64_t o = 0; o < OC; ++o) {
      double sum = 0.0;
      for (std::int64_t n = 0; n < N; ++n) sum += dout[n * OC + o];
      dbias[o] += sum;
    }
}

void reference_attention_forward(double* out, double* att, const double* qkv, std::int64_t B, std::int64_t T_len,
                                 std::int64_t C, std::int64_t NH) {
  const std::int64_t HS = C / NH;
  const double inv_sqrt_hs = 1.0 / std::sqrt(static_cast<double>(HS));
  auto q = [&](std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t i) {
    return qkv[(b * T_len + t) * 3 * C + h * HS + i];
  };
  auto k = [&](std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t i) {
    return qkv[(b * T_len + t) * 3 * C + C + h * HS + i];
  };
  auto v = [&](std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t i) {
    return qkv[(b * T_len + t) * 3 * C + 2 * C + h * HS + i];
  };
  std::vector<double> scores(static_cast<std::size_t>(T_len * T_len));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < NH; ++h) {
      // Full T x T score matrix, future positions masked to -infinity.
      for (std::int64_t t = 0; t < T_len; ++t)
        for (std::int64_t t2 = 0; t2 < T_len; ++t2) {
          double s = 0.0;
          for (std::int64_t i = 0; i < HS; ++i) s += q(b, t, h, i) * k(b, t2, h, i);
          scores[static_cast<std::size_t>(t * T_len + t2)] =
              t2 <= t ? s * inv_sqrt_hs : -std::numeric_limits<double>::infinity();
        }
      for (std::int64_t t = 0; t < T_len; ++t) {
        double row_max = -std::numeric_limits<double>::infinity();
        for (std::int64_t t2 = 0; t2 < T_len; ++t2)
          row_max = std::max(row_max, scores[static_cast<std::size_t>(t * T_len + t2)]);
        double sum = 0.0;
        for (std::int64_t t2 = 0; t2 < T_len; ++t2)
          sum += std::exp(scores[static_cast<std::size_t>(t * T_len + t2)] - row_max);
        double* p = att + ((b * NH + h) * T_len + t) * T_len;
        for (std::int64_t t2 = 0; t2 < T_len; ++t2)
          p[t2] = std::exp(scores[static_cast<std::size_t>(t * T_len + t2)] - row_max) / sum;
        for (std::int64_t i = 0; i < HS; ++i) {
          double o = 0.0;
          for (std::int64_t t2 = 0; t2 < T_len; ++t2) o += p[t2] * v(b, t2, h, i);
          out[(b * T_len + t) * C + h * HS + i] = o;
        }
      }
    }
}

void reference_attention_backward(double* dqkv, const double* dout, const double* qkv, const double* att,
                                  std::int64_t B, std::int64_t T_len, std::int64_t C, std::int64_t NH) {
  const std::int64_t HS = C / NH;
  const double inv_sqrt_hs = 1.0 / std::sqrt(static_cast<double>(HS));
  auto at = [&](std::int64_t b, std::int64_t t, std::int64_t part, std::int64_t h, std::int64_t i) {
    return (b * T_len + t) * 3 * C + part * C + h * HS + i;  // part 0 q, 1 k, 2 v
  };
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < NH; ++h)
      for (std::int64_t t = 0; t < T_len; ++t) {
        const double* p = att + ((b * NH + h) * T_len + t) * T_len;
        const double* go = dout + (b * T_len + t) * C + h * HS;
        // out[t] = sum_t2 p[t2] v[t2]:  dp[t2] = go . v[t2],  dv[t2] += p[t2] go
        std::vector<double> dp(static_cast<std::size_t>(T_len), 0.0);
        for (std::int64_t t2 = 0; t2 <= t; ++t2)
          for (std::int64_t i = 0; i < HS; ++i) {
            dp[static_cast<std::size_t>(t2)] += go[i] * qkv[at(b, t2, 2, h, i)];
            dqkv[at(b, t2, 2, h, i)] += p[t2] * go[i];
          }
        // p = softmax(s):  ds[t2] = sum_j dp[j] p[j] (delta(j, t2) - p[t2])
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          double ds = 0.0;
          for (std::int64_t j = 0; j <= t; ++j)
            ds += dp[static_cast<std::size_t>(j)] * p[j] * ((j == t2 ? 1.0 : 0.0) - p[t2]);
          // s[t2] = q[t] . k[t2] / sqrt(HS)
          for (std::int64_t i = 0; i < HS; ++i) {
            dqkv[at(b, t, 0, h, i)] += ds * qkv[at(b, t2, 1, h, i)] * inv_sqrt_hs;
            dqkv[at(b, t2, 1, h, i)] += ds * qkv[at(b, t, 0, h, i)] * inv_sqrt_hs;
          }
        }
      }
}

float reference_round_to_bf16(float value) {
  if (!std::isfinite(value)) return value;
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const float truncated = std::bit_cast<float>(bits & 0xffff0000u);  // the neighbour toward zero
  const double v = value, t = truncated;
  if (t == v) return truncated;
  // bf16 keeps 7 fraction bits: spacing 2^(e - 7) in the binade [2^e, 2^(e+1)), 2^-133 among subnormals.
  int exponent = 0;
  std::frexp(std::abs(v), &exponent);  // |v| = m 2^exponent, m in [0.5, 1)
  const double spacing = std::ldexp(1.0, std::max(exponent - 1, -126) - 7);
  const double away = t + (v > 0 ? spacing : -spacing);  // the neighbour away from zero
  const double to_truncated = std::abs(v - t), to_away = std::abs(away - v);
  const bool truncated_is_even = (bits & 0x10000u) == 0;
  if (to_truncated < to_away || (to_truncated == to_away && truncated_is_even)) return truncated;
  if (std::abs(away) >= std::ldexp(1.0, 128)) return std::copysign(std::numeric_limits<float>::infinity(), value);
  return static_cast<float>(away);
}

namespace {

std::vector<double> rounded_to_bf16(const float* values, std::int64_t n) {
  std::vector<double> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = reference_round_to_bf16(values[i]);
  return out;
}

}  // namespace

void reference_matmul_forward_bf16(double* out, const float* inp, const float* weight, const float* bias,
                                   std::int64_t N, std::int64_t C, std::int64_t OC) {
  const std::vector<double> inp16 = rounded_to_bf16(inp, N * C), weight16 = rounded_to_bf16(weight, OC * C);
  std::vector<double> bias64;
  if (bias != nullptr) bias64.assign(bias, bias + OC);
  reference_matmul_forward(out, inp16.data(), weight16.data(), bias != nullptr ? bias64.data() : nullptr, N, C, OC);
}

void reference_matmul_backward_bf16(double* dinp, double* dweight, double* dbias, const float* dout, const float* inp,
                                    const float* weight, std::int64_t N, std::int64_t C, std::int64_t OC) {
  const std::vector<double> dout16 = rounded_to_bf16(dout, N * OC), inp16 = rounded_to_bf16(inp, N * C),
                            weight16 = rounded_to_bf16(weight, OC * C);
  reference_matmul_backward(dinp, dweight, nullptr, dout16.data(), inp16.data(), weight16.data(), N, C, OC);
  if (dbias != nullptr) {  // from the unrounded dout, as the fast path sums it in fp32
    const std::vector<double> dout64(dout, dout + N * OC);
    reference_matmul_backward(nullptr, nullptr, dbias, dout64.data(), inp16.data(), weight16.data(), N, C, OC);
  }
}

}  // namespace meshplan::kernels
