// A table of cos and sin per (position, pair), computed in double (pair 0's
// angle is the position itself, and a float near 2048 is only good to 1e-4
// radians), then one pass over the rows: each pair is four multiplies and
// two adds, in a loop the compiler vectorises (the two halves
// of a head are contiguous runs). Rows are independent, so they run in
// OpenMP threads when there is enough work.
#include "kernels/cpu/rope.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <vector>

namespace meshplan::kernels {

template <typename T>
void rope_apply(T* x, std::int64_t rows, std::int64_t seq_len, std::int64_t heads, std::int64_t head_dim,
                std::int64_t row_stride, double theta, bool inverse) {
  assert(seq_len > 0 && head_dim % 2 == 0 && "RoPE pairs the two halves of each head");
  const std::int64_t half = head_dim / 2;
  const std::int64_t positions = std::min(rows, seq_len);
  std::vector<T> cos_table(static_cast<std::size_t>(positions * half));
  std::vector<T> sin_table(cos_table.size());
  const double sign = inverse ? -1.0 : 1.0;
  for (std::int64_t i = 0; i < half; ++i) {
    const double freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    for (std::int64_t p = 0; p < positions; ++p) {
      const double angle = static_cast<double>(p) * freq;
      cos_table[static_cast<std::size_t>(p * half + i)] = static_cast<T>(std::cos(angle));
      sin_table[static_cast<std::size_t>(p * half + i)] = static_cast<T>(sign * std::sin(angle));
    }
  }
#pragma omp parallel for schedule(static) if (rows * heads * head_dim >= (1 << 17))
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* c = cos_table.data() + (r % seq_len) * half;
    const T* s = sin_table.data() + (r % seq_len) * half;
    for (std::int64_t h = 0; h < heads; ++h) {
      T* lo = x + r * row_stride + h * head_dim;
      T* hi = lo + half;
#pragma omp simd
      for (std::int64_t i = 0; i < half; ++i) {
        const T a = lo[i], b = hi[i];
        lo[i] = a * c[i] - b * s[i];
        hi[i] = b * c[i] + a * s[i];
      }
    }
  }
}

template void rope_apply<float>(float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, double,
                                bool);
template void rope_apply<double>(double*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                 double, bool);

}  // namespace meshplan::kernels
