// Row copies and row adds; no BLAS, no clever tricks. The scatter-add is done
// serially, so repeated tokens need no atomics and the result is
// deterministic (the same order of additions every run).
#include "kernels/cpu/embedding.hpp"

namespace meshplan::kernels {

template <typename T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, std::int64_t B,
                       std::int64_t T_len, std::int64_t C) {
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t t = 0; t < T_len; ++t) {
      T* o = out + (b * T_len + t) * C;
      const T* token_row = wte + static_cast<std::int64_t>(tokens[b * T_len + t]) * C;
      const T* position_row = wpe + t * C;
      for (std::int64_t c = 0; c < C; ++c) o[c] = token_row[c] + position_row[c];
    }
  }
}

template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const std::int32_t* tokens, std::int64_t B,
                        std::int64_t T_len, std::int64_t C) {
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t t = 0; t < T_len; ++t) {
      const T* d = dout + (b * T_len + t) * C;
      T* dtoken_row = dwte + static_cast<std::int64_t>(tokens[b * T_len + t]) * C;
      for (std::int64_t c = 0; c < C; ++c) dtoken_row[c] += d[c];
      if (dwpe != nullptr) {
        T* dposition_row = dwpe + t * C;
        for (std::int64_t c = 0; c < C; ++c) dposition_row[c] += d[c];
      }
    }
  }
}

template void embedding_forward<float>(float*, const std::int32_t*, const float*, const float*, std::int64_t,
                                       std::int64_t, std::int64_t);
template void embedding_forward<double>(double*, const std::int32_t*, const double*, const double*, std::int64_t,
                                        std::int64_t, std::int64_t);
template void embedding_backward<float>(float*, float*, const float*, const std::int32_t*, std::int64_t,
                                        std::int64_t, std::int64_t);
template void embedding_backward<double>(double*, double*, const double*, const std::int32_t*, std::int64_t,
                                         std::int64_t, std::int64_t);

}  // namespace meshplan::kernels
