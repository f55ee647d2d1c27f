// One softmax row per (batch, head, query position t), over key positions
// t2 <= t, with the row maximum subtracted before exp (the softmax is
// invariant to it and exp cannot overflow). Backward, per row, with
// s = q . k / sqrt(HS) the pre-softmax score and p = att:
//   dp[t2]  = dout[t] . v[t2]               dv[t2] += p[t2] * dout[t]
//   ds[t2]  = p[t2] * (dp[t2] - sum_j p[j] dp[j])      (softmax Jacobian)
//   dq[t]  += sum_t2 ds[t2] k[t2] / sqrt(HS)  dk[t2] += ds[t2] q[t] / sqrt(HS)
#include "kernels/cpu/attention.hpp"

#include <cassert>
#include <cmath>
#include <limits>
#include <vector>

namespace meshplan::kernels {

template <typename T>
void attention_forward(T* out, T* att, const T* qkv, std::int64_t B, std::int64_t T_len, std::int64_t C,
                       std::int64_t NH) {
  assert(NH > 0 && C % NH == 0 && "heads must divide channels");
  const std::int64_t HS = C / NH;
  const std::int64_t C3 = 3 * C;
  const T scale = T(1) / std::sqrt(static_cast<T>(HS));
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < NH; ++h) {
      for (std::int64_t t = 0; t < T_len; ++t) {
        const T* q = qkv + (b * T_len + t) * C3 + h * HS;
        T* p = att + ((b * NH + h) * T_len + t) * T_len;
        T row_max = -std::numeric_limits<T>::infinity();
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          const T* k = qkv + (b * T_len + t2) * C3 + C + h * HS;
          T dot = T(0);
          for (std::int64_t i = 0; i < HS; ++i) dot += q[i] * k[i];
          p[t2] = dot * scale;
          if (p[t2] > row_max) row_max = p[t2];
        }
        T sum = T(0);
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          p[t2] = std::exp(p[t2] - row_max);
          sum += p[t2];
        }
        const T inv_sum = T(1) / sum;
        for (std::int64_t t2 = 0; t2 <= t; ++t2) p[t2] *= inv_sum;
        for (std::int64_t t2 = t + 1; t2 < T_len; ++t2) p[t2] = T(0);

        T* o = out + (b * T_len + t) * C + h * HS;
        for (std::int64_t i = 0; i < HS; ++i) o[i] = T(0);
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          const T* v = qkv + (b * T_len + t2) * C3 + 2 * C + h * HS;
          for (std::int64_t i = 0; i < HS; ++i) o[i] += p[t2] * v[i];
        }
      }
    }
  }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, std::int64_t B, std::int64_t T_len,
                        std::int64_t C, std::int64_t NH) {
  assert(NH > 0 && C % NH == 0 && "heads must divide channels");
  const std::int64_t HS = C / NH;
  const std::int64_t C3 = 3 * C;
  const T scale = T(1) / std::sqrt(static_cast<T>(HS));
  std::vector<T> dp(static_cast<std::size_t>(T_len));
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < NH; ++h) {
      for (std::int64_t t = 0; t < T_len; ++t) {
        const T* p = att + ((b * NH + h) * T_len + t) * T_len;
        const T* dout_row = dout + (b * T_len + t) * C + h * HS;
        const T* q = qkv + (b * T_len + t) * C3 + h * HS;
        T* dq = dqkv + (b * T_len + t) * C3 + h * HS;

        T p_dot_dp = T(0);
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          const T* v = qkv + (b * T_len + t2) * C3 + 2 * C + h * HS;
          T* dv = dqkv + (b * T_len + t2) * C3 + 2 * C + h * HS;
          T dot = T(0);
          for (std::int64_t i = 0; i < HS; ++i) {
            dot += dout_row[i] * v[i];
            dv[i] += p[t2] * dout_row[i];
          }
          dp[static_cast<std::size_t>(t2)] = dot;
          p_dot_dp += p[t2] * dot;
        }
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          const T ds = p[t2] * (dp[static_cast<std::size_t>(t2)] - p_dot_dp) * scale;
          const T* k = qkv + (b * T_len + t2) * C3 + C + h * HS;
          T* dk = dqkv + (b * T_len + t2) * C3 + C + h * HS;
          for (std::int64_t i = 0; i < HS; ++i) {
            dq[i] += ds * k[i];
            dk[i] += ds * q[i];
          }
        }
      }
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, std::int64_t, std::int64_t, std::int64_t,
                                       std::int64_t);
template void attention_forward<double>(double*, double*, const double*, std::int64_t, std::int64_t, std::int64_t,
                                        std::int64_t);
template void attention_backward<float>(float*, const float*, const float*, const float*, std::int64_t,
                                        std::int64_t, std::int64_t, std::int64_t);
template void attention_backward<double>(double*, const double*, const double*, const double*, std::int64_t,
                                         std::int64_t, std::int64_t, std::int64_t);

}  // namespace meshplan::kernels
