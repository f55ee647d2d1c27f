// The error measure of the host tests of the CUDA kernels' arithmetic
// (test_cross_entropy_rows.cpp, test_elementwise_rows.cpp): float results
// against a double reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace meshplan::testing_support {

// ||got - want|| / ||want|| in the 2-norm; infinite when `got` holds a NaN or an infinity.
inline double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

}  // namespace meshplan::testing_support
