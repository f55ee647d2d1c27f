// Each output element is one explicitly written sum. Read these against the
// formulas in the headers; nothing here is tuned.
#include "kernels/cpu/reference.hpp"

#include <algorithm>
#include <cmath>
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

}  // namespace meshplan::kernels
