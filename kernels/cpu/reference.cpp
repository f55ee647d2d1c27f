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

void reference_rmsnorm_forward(double* out, double* rstd, const double* inp, const double* weight, std::int64_t N,
                               std::int64_t C, double eps) {
  for (std::int64_t n = 0; n < N; ++n) {
    double mean_square = 0.0;
    for (std::int64_t c = 0; c < C; ++c) mean_square += inp[n * C + c] * inp[n * C + c];
    mean_square /= static_cast<double>(C);
    const double rms = std::sqrt(mean_square + eps);
    for (std::int64_t c = 0; c < C; ++c) out[n * C + c] = inp[n * C + c] / rms * weight[c];
    rstd[n] = 1.0 / rms;
  }
}

void reference_rmsnorm_backward(double* dinp, double* dweight, const double* dout, const double* inp,
                                const double* weight, std::int64_t N, std::int64_t C, double eps) {
  for (std::int64_t n = 0; n < N; ++n) {
    const double* x = inp + n * C;
    const double* dy = dout + n * C;
    double mean_square = 0.0;
    for (std::int64_t c = 0; c < C; ++c) mean_square += x[c] * x[c];
    mean_square /= static_cast<double>(C);
    const double s = 1.0 / std::sqrt(mean_square + eps);
    // out[c] = x[c] s w[c], s = (sum_j x[j]^2 / C + eps)^(-1/2), ds/dx[j] = -s^3 x[j] / C:
    // d out[c] / d x[j] = w[c] (delta(c, j) s - x[c] s^3 x[j] / C).
    for (std::int64_t j = 0; j < C; ++j) {
      double sum = 0.0;
      for (std::int64_t c = 0; c < C; ++c) {
        const double jacobian = weight[c] * ((c == j ? s : 0.0) - x[c] * s * s * s * x[j] / static_cast<double>(C));
        sum += dy[c] * jacobian;
      }
      dinp[n * C + j] += sum;
    }
    for (std::int64_t c = 0; c < C; ++c) dweight[c] += dy[c] * x[c] * s;
  }
}

void reference_rope_apply(double* x, std::int64_t rows, std::int64_t seq_len, std::int64_t heads,
                          std::int64_t head_dim, std::int64_t row_stride, double theta, bool inverse) {
  const std::int64_t D = head_dim, half = head_dim / 2;
  std::vector<double> rotation(static_cast<std::size_t>(D * D)), rotated(static_cast<std::size_t>(D));
  auto R = [&](std::int64_t i, std::int64_t j) -> double& { return rotation[static_cast<std::size_t>(i * D + j)]; };
  for (std::int64_t r = 0; r < rows; ++r) {
    const double position = static_cast<double>(r % seq_len);
    std::fill(rotation.begin(), rotation.end(), 0.0);
    for (std::int64_t i = 0; i < half; ++i) {
      // Hugging Face's inv_freq = 1 / theta^(2i / D); the plane of (i, i + D/2).
      const double angle = position / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(D));
      R(i, i) = std::cos(angle);
      R(i, i + half) = -std::sin(angle);
      R(i + half, i) = std::sin(angle);
      R(i + half, i + half) = std::cos(angle);
    }
    for (std::int64_t h = 0; h < heads; ++h) {
      double* head = x + r * row_stride + h * D;
      for (std::int64_t i = 0; i < D; ++i) {
        double sum = 0.0;
        for (std::int64_t j = 0; j < D; ++j) sum += (inverse ? R(j, i) : R(i, j)) * head[j];
        rotated[static_cast<std::size_t>(i)] = sum;
      }
      for (std::int64_t i = 0; i < D; ++i) head[i] = rotated[static_cast<std::size_t>(i)];
    }
  }
}

void reference_geglu_forward(double* out, const double* inp, std::int64_t N, std::int64_t F) {
  const double pi = 3.14159265358979323846;
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t f = 0; f < F; ++f) {
      const double gate = inp[n * 2 * F + f], up = inp[n * 2 * F + F + f];
      const double gelu = 0.5 * gate * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (gate + 0.044715 * gate * gate * gate)));
      out[n * F + f] = gelu * up;
    }
}

void reference_swiglu_forward(double* out, const double* inp, std::int64_t N, std::int64_t F) {
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t f = 0; f < F; ++f) {
      const double gate = inp[n * 2 * F + f], up = inp[n * 2 * F + F + f];
      const double sigmoid = 1.0 / (1.0 + std::exp(-gate));
      out[n * F + f] = gate * sigmoid * up;
    }
}

void reference_gqa_attention_forward(double* out, double* att, const double* qkv, std::int64_t B, std::int64_t T_len,
                                     std::int64_t NH, std::int64_t KVH, std::int64_t D) {
  const std::int64_t W = (NH + 2 * KVH) * D, heads_per_group = NH / KVH;
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(D));
  auto q = [&](std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t i) {
    return qkv[(b * T_len + t) * W + h * D + i];
  };
  auto k = [&](std::int64_t b, std::int64_t t, std::int64_t g, std::int64_t i) {
    return qkv[(b * T_len + t) * W + NH * D + g * D + i];
  };
  auto v = [&](std::int64_t b, std::int64_t t, std::int64_t g, std::int64_t i) {
    return qkv[(b * T_len + t) * W + (NH + KVH) * D + g * D + i];
  };
  std::vector<double> scores(static_cast<std::size_t>(T_len));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < NH; ++h) {
      const std::int64_t g = h / heads_per_group;  // this query head's key/value head
      for (std::int64_t t = 0; t < T_len; ++t) {
        for (std::int64_t t2 = 0; t2 < T_len; ++t2) {
          double s = 0.0;
          for (std::int64_t i = 0; i < D; ++i) s += q(b, t, h, i) * k(b, t2, g, i);
          scores[static_cast<std::size_t>(t2)] = t2 <= t ? s * inv_sqrt_d : -std::numeric_limits<double>::infinity();
        }
        const double row_max = *std::max_element(scores.begin(), scores.end());
        double sum = 0.0;
        for (const double s : scores) sum += std::exp(s - row_max);
        double* p = att + ((b * NH + h) * T_len + t) * T_len;
        for (std::int64_t t2 = 0; t2 < T_len; ++t2)
          p[t2] = std::exp(scores[static_cast<std::size_t>(t2)] - row_max) / sum;
        for (std::int64_t i = 0; i < D; ++i) {
          double o = 0.0;
          for (std::int64_t t2 = 0; t2 < T_len; ++t2) o += p[t2] * v(b, t2, g, i);
          out[(b * T_len + t) * NH * D + h * D + i] = o;
        }
      }
    }
}

void reference_gqa_attention_backward(double* dqkv, const double* dout, const double* qkv, const double* att,
                                      std::int64_t B, std::int64_t T_len, std::int64_t NH, std::int64_t KVH,
                                      std::int64_t D) {
  const std::int64_t W = (NH + 2 * KVH) * D, heads_per_group = NH / KVH;
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(D));
  auto q_at = [&](std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t i) {
    return (b * T_len + t) * W + h * D + i;
  };
  auto k_at = [&](std::int64_t b, std::int64_t t, std::int64_t g, std::int64_t i) {
    return (b * T_len + t) * W + NH * D + g * D + i;
  };
  auto v_at = [&](std::int64_t b, std::int64_t t, std::int64_t g, std::int64_t i) {
    return (b * T_len + t) * W + (NH + KVH) * D + g * D + i;
  };
  std::vector<double> dp(static_cast<std::size_t>(T_len));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < NH; ++h) {
      const std::int64_t g = h / heads_per_group;
      for (std::int64_t t = 0; t < T_len; ++t) {
        const double* p = att + ((b * NH + h) * T_len + t) * T_len;
        const double* go = dout + (b * T_len + t) * NH * D + h * D;
        // out[t] = sum_t2 p[t2] v[t2]:  dp[t2] = go . v[t2],  dv[t2] += p[t2] go
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          double sum = 0.0;
          for (std::int64_t i = 0; i < D; ++i) {
            sum += go[i] * qkv[v_at(b, t2, g, i)];
            dqkv[v_at(b, t2, g, i)] += p[t2] * go[i];
          }
          dp[static_cast<std::size_t>(t2)] = sum;
        }
        // p = softmax(s):  ds[t2] = sum_j dp[j] p[j] (delta(j, t2) - p[t2])
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          double ds = 0.0;
          for (std::int64_t j = 0; j <= t; ++j)
            ds += dp[static_cast<std::size_t>(j)] * p[j] * ((j == t2 ? 1.0 : 0.0) - p[t2]);
          // s[t2] = q[t] . k[t2] / sqrt(D)
          for (std::int64_t i = 0; i < D; ++i) {
            dqkv[q_at(b, t, h, i)] += ds * qkv[k_at(b, t2, g, i)] * inv_sqrt_d;
            dqkv[k_at(b, t2, g, i)] += ds * qkv[q_at(b, t, h, i)] * inv_sqrt_d;
          }
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
