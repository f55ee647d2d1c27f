// The arithmetic of the CUDA flash attention (kernels/cuda/flash_attention_rows.hpp)
// on the host, with no GPU: a twin of each kernel (flash_attention.cu) runs the
// same row functions over the same tiles in the same order, block by block and
// thread by thread, with the shared-memory tiles poisoned (NaN) before every
// load so that a read past the loaded rows fails. Its output, log-sum-exp and
// gradients are compared with the CPU grouped-query attention kernels run in
// double (kernels/cpu/attention.hpp) on the same inputs, rounded to bf16 as
// the GPU's are. Shapes: sequences that end inside a tile, multi-head,
// grouped-query and multi-query attention, head dimensions 64 and 128.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/cuda/flash_attention_rows.hpp"

namespace meshplan::kernels::flash {
namespace {

struct Shape {
  int B, T, NH, KVH;
  long long width(int D) const { return static_cast<long long>(NH + 2 * KVH) * D; }
};

constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

int tiles(int n, int per) { return (n + per - 1) / per; }

// A value exactly representable in bf16 (8 significant bits), as the GPU's inputs are.
float bf16_value(std::mt19937_64& rng) {
  const float x = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  return std::ldexp(std::round(std::ldexp(x, 7)), -7);
}

// Cooperative load of a tile by `threads` threads, as the kernel's threads do it.
template <int D>
void block_load(std::vector<float>& tile, const std::vector<float>& packed, long long row_base, int first, int n, int rows,
                long long width, long long column, int threads) {
  std::fill(tile.begin(), tile.end(), kPoison);
  for (int t = 0; t < threads; ++t) load_rows<D>(tile.data(), packed.data(), row_base, first, n, rows, width, column, t, threads);
}

// Twin of load_key_value_tile: a query-row block's threads load the tiles.
template <int D>
void load_key_value_tile(std::vector<float>& k_tile, std::vector<float>& v_tile, const std::vector<float>& qkv,
                         long long row_base, int first_key, int n, const Shape& s, int g) {
  const long long width = s.width(D);
  block_load<D>(k_tile, qkv, row_base, first_key, n, s.T, width, static_cast<long long>(s.NH + g) * D, kQueryTile);
  block_load<D>(v_tile, qkv, row_base, first_key, n, s.T, width, static_cast<long long>(s.NH + s.KVH + g) * D, kQueryTile);
}

// Twin of forward_kernel.
template <int D>
void twin_forward(std::vector<float>& out, std::vector<float>& lse, const std::vector<float>& qkv, const Shape& s) {
  const long long width = s.width(D);
  std::vector<float> k_tile(kKeyTile * D), v_tile(kKeyTile * D);
  for (int bh = 0; bh < s.B * s.NH; ++bh) {
    const int b = bh / s.NH, h = bh % s.NH, g = h / (s.NH / s.KVH);
    const long long row_base = static_cast<long long>(b) * s.T;
    for (int block = 0; block < tiles(s.T, kQueryTile); ++block) {
      const int first_row = block * kQueryTile, last_row = std::min(first_row + kQueryTile, s.T) - 1;
      std::vector<std::array<float, D>> q(kQueryTile), acc(kQueryTile);
      std::vector<float> m(kQueryTile, -INFINITY), l(kQueryTile, 0.0f);
      for (int t = 0; t < kQueryTile; ++t) {
        acc[t].fill(0.0f);
        const int row = first_row + t;
        if (row < s.T) for (int d = 0; d < D; ++d) q[t][d] = qkv[(row_base + row) * width + h * D + d];
      }
      for (int first_key = 0; first_key <= last_row; first_key += kKeyTile) {
        const int n_tile = std::min(kKeyTile, s.T - first_key);
        load_key_value_tile<D>(k_tile, v_tile, qkv, row_base, first_key, n_tile, s, g);
        for (int t = 0; t < kQueryTile; ++t) {
          const int row = first_row + t;
          if (row < s.T) {
            forward_tile<D, kKeyTile>(m[t], l[t], acc[t].data(), q[t].data(), k_tile.data(), v_tile.data(),
                                      std::min(n_tile, row - first_key + 1), 1.0f / std::sqrt(static_cast<float>(D)));
          }
        }
      }
      for (int t = 0; t < kQueryTile; ++t) {
        const int row = first_row + t;
        if (row >= s.T) continue;
        forward_finish<D>(&out[(row_base + row) * s.NH * D + h * D], lse[(static_cast<long long>(b) * s.NH + h) * s.T + row],
                          m[t], l[t], acc[t].data());
      }
    }
  }
}

// Twin of delta_kernel, key_backward_kernel and query_backward_kernel.
template <int D>
void twin_backward(std::vector<float>& dqkv, const std::vector<float>& dout, const std::vector<float>& qkv,
                   const std::vector<float>& out, const std::vector<float>& lse, const Shape& s) {
  const long long width = s.width(D), out_width = static_cast<long long>(s.NH) * D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> delta(static_cast<std::size_t>(s.B) * s.NH * s.T);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int t = 0; t < s.T; ++t) {
        const long long offset = (static_cast<long long>(b) * s.T + t) * out_width + h * D;
        delta[(static_cast<std::size_t>(b) * s.NH + h) * s.T + t] = row_delta<D>(&dout[offset], &out[offset]);
      }
  const int group = s.NH / s.KVH;
  // dK, dV: a thread per key row.
  std::vector<float> q_tile(kBackwardQueryTile * D), dout_tile(kBackwardQueryTile * D);
  std::vector<float> lse_tile(kBackwardQueryTile), delta_tile(kBackwardQueryTile);
  for (int bg = 0; bg < s.B * s.KVH; ++bg) {
    const int b = bg / s.KVH, g = bg % s.KVH;
    const long long row_base = static_cast<long long>(b) * s.T;
    const long long k_column = static_cast<long long>(s.NH + g) * D, v_column = static_cast<long long>(s.NH + s.KVH + g) * D;
    for (int block = 0; block < tiles(s.T, kBackwardKeyTile); ++block) {
      const int first_key = block * kBackwardKeyTile;
      std::vector<std::array<float, D>> k(kBackwardKeyTile), v(kBackwardKeyTile), dk(kBackwardKeyTile), dv(kBackwardKeyTile);
      for (int t = 0; t < kBackwardKeyTile; ++t) {
        dk[t].fill(0.0f);
        dv[t].fill(0.0f);
        if (first_key + t >= s.T) continue;
        for (int d = 0; d < D; ++d) {
          k[t][d] = qkv[(row_base + first_key + t) * width + k_column + d];
          v[t][d] = qkv[(row_base + first_key + t) * width + v_column + d];
        }
      }
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const std::size_t stats = (static_cast<std::size_t>(b) * s.NH + h) * s.T;
        for (int first_query = first_key; first_query < s.T; first_query += kBackwardQueryTile) {
          const int n = std::min(kBackwardQueryTile, s.T - first_query);
          block_load<D>(q_tile, qkv, row_base, first_query, n, s.T, width, static_cast<long long>(h) * D, kBackwardKeyTile);
          block_load<D>(dout_tile, dout, row_base, first_query, n, s.T, out_width, static_cast<long long>(h) * D,
                        kBackwardKeyTile);
          std::fill(lse_tile.begin(), lse_tile.end(), kPoison);
          std::fill(delta_tile.begin(), delta_tile.end(), kPoison);
          for (int r = 0; r < n; ++r) {
            lse_tile[r] = lse[stats + first_query + r];
            delta_tile[r] = delta[stats + first_query + r];
          }
          for (int t = 0; t < kBackwardKeyTile; ++t) {
            const int key = first_key + t;
            if (key < s.T) {
              key_backward_tile<D>(dk[t].data(), dv[t].data(), k[t].data(), v[t].data(), key, q_tile.data(),
                                   dout_tile.data(), lse_tile.data(), delta_tile.data(), first_query, n, scale);
            }
          }
        }
      }
      for (int t = 0; t < kBackwardKeyTile; ++t) {
        if (first_key + t >= s.T) continue;
        for (int d = 0; d < D; ++d) {
          dqkv[(row_base + first_key + t) * width + k_column + d] = dk[t][d];
          dqkv[(row_base + first_key + t) * width + v_column + d] = dv[t][d];
        }
      }
    }
  }
  // dQ: a thread per query row.
  std::vector<float> k_tile(kKeyTile * D), v_tile(kKeyTile * D);
  for (int bh = 0; bh < s.B * s.NH; ++bh) {
    const int b = bh / s.NH, h = bh % s.NH, g = h / group;
    const long long row_base = static_cast<long long>(b) * s.T;
    for (int block = 0; block < tiles(s.T, kQueryTile); ++block) {
      const int first_row = block * kQueryTile, last_row = std::min(first_row + kQueryTile, s.T) - 1;
      std::vector<std::array<float, D>> q(kQueryTile), dout_row(kQueryTile), dq(kQueryTile);
      for (int t = 0; t < kQueryTile; ++t) {
        dq[t].fill(0.0f);
        const int row = first_row + t;
        if (row >= s.T) continue;
        for (int d = 0; d < D; ++d) {
          q[t][d] = qkv[(row_base + row) * width + h * D + d];
          dout_row[t][d] = dout[(row_base + row) * out_width + h * D + d];
        }
      }
      for (int first_key = 0; first_key <= last_row; first_key += kKeyTile) {
        const int n_tile = std::min(kKeyTile, s.T - first_key);
        load_key_value_tile<D>(k_tile, v_tile, qkv, row_base, first_key, n_tile, s, g);
        for (int t = 0; t < kQueryTile; ++t) {
          const int row = first_row + t;
          if (row >= s.T) continue;
          const std::size_t stat = (static_cast<std::size_t>(b) * s.NH + h) * s.T + row;
          query_backward_tile<D>(dq[t].data(), q[t].data(), dout_row[t].data(), lse[stat], delta[stat], row,
                                 k_tile.data(), v_tile.data(), first_key, n_tile, scale);
        }
      }
      for (int t = 0; t < kQueryTile; ++t) {
        const int row = first_row + t;
        if (row < s.T) for (int d = 0; d < D; ++d) dqkv[(row_base + row) * width + h * D + d] = dq[t][d];
      }
    }
  }
}

double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff / norm);
}

template <int D>
void check_against_cpu_attention(const Shape& s, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::size_t n_qkv = static_cast<std::size_t>(s.B) * s.T * s.width(D);
  const std::size_t n_out = static_cast<std::size_t>(s.B) * s.T * s.NH * D;
  std::vector<float> qkv(n_qkv), dout(n_out);
  for (float& x : qkv) x = bf16_value(rng);
  for (float& x : dout) x = bf16_value(rng);

  std::vector<float> out(n_out, kPoison), lse(static_cast<std::size_t>(s.B) * s.NH * s.T, kPoison);
  std::vector<float> dqkv(n_qkv, kPoison);
  twin_forward<D>(out, lse, qkv, s);
  twin_backward<D>(dqkv, dout, qkv, out, lse, s);

  // The reference: the CPU kernels in double on the same values.
  const std::vector<double> qkv_d(qkv.begin(), qkv.end()), dout_d(dout.begin(), dout.end());
  std::vector<double> out_d(n_out), att(static_cast<std::size_t>(s.B) * s.NH * s.T * s.T), dqkv_d(n_qkv, 0.0);
  gqa_attention_forward<double>(out_d.data(), att.data(), qkv_d.data(), s.B, s.T, s.NH, s.KVH, D);
  gqa_attention_backward<double>(dqkv_d.data(), dout_d.data(), qkv_d.data(), att.data(), s.B, s.T, s.NH, s.KVH, D);
  std::vector<double> lse_d(lse.size());
  const long long width = s.width(D);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int i = 0; i < s.T; ++i) {
        const int g = h / (s.NH / s.KVH);
        double max = -INFINITY;
        std::vector<double> scores(static_cast<std::size_t>(i) + 1);
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d) {
            dot += qkv_d[(static_cast<std::size_t>(b) * s.T + i) * width + h * D + d] *
                   qkv_d[(static_cast<std::size_t>(b) * s.T + j) * width + (s.NH + g) * D + d];
          }
          scores[j] = dot / std::sqrt(static_cast<double>(D));
          max = std::max(max, scores[j]);
        }
        double sum = 0;
        for (double x : scores) sum += std::exp(x - max);
        lse_d[(static_cast<std::size_t>(b) * s.NH + h) * s.T + i] = max + std::log(sum);
      }
  const double e_out = relative_error(out, out_d), e_lse = relative_error(lse, lse_d), e_dqkv = relative_error(dqkv, dqkv_d);
  std::printf("[ flash    ] B=%d T=%d NH=%d KVH=%d D=%d: out %.2e, lse %.2e, dqkv %.2e (relative 2-norm)\n", s.B, s.T,
              s.NH, s.KVH, D, e_out, e_lse, e_dqkv);
  EXPECT_LT(e_out, 1e-6);
  EXPECT_LT(e_lse, 5e-7);
  EXPECT_LT(e_dqkv, 2e-6);
}

TEST(FlashAttentionRows, MatchTheCpuAttentionAcrossTileEdges) {
  check_against_cpu_attention<64>(Shape{2, 77, 4, 2}, 1);   // grouped-query, T ends inside a tile
  check_against_cpu_attention<64>(Shape{1, 100, 3, 3}, 2);   // multi-head, T past three key tiles
  check_against_cpu_attention<128>(Shape{2, 45, 2, 1}, 3);  // multi-query, D = 128
  check_against_cpu_attention<128>(Shape{1, 1, 2, 2}, 4);   // one position
}

// The first key tile alone already holds a row's whole causal past for rows
// below kKeyTile; a row further down folds several tiles, the later ones with
// larger scores, so the running max and the rescale of acc and l are exercised.
TEST(FlashAttentionRows, OnlineSoftmaxRescalesWhenALaterTileHoldsTheMax) {
  constexpr int D = 64;
  std::vector<float> q(D, 0.0f), k(2 * D, 0.0f), v(2 * D, 0.0f), acc(D, 0.0f), out(D);
  q[0] = 8.0f;
  k[0] = 0.0f;       // key 0: score 0
  k[D] = 1.0f;       // key 1: score 8 / sqrt(64) = 1
  v[0] = 1.0f;       // value 0: e_0
  v[D + 1] = 1.0f;   // value 1: e_1
  float m = -INFINITY, l = 0, lse = 0;
  forward_tile<D, 1>(m, l, acc.data(), q.data(), k.data(), v.data(), 1, 1.0f / 8.0f);
  forward_tile<D, 1>(m, l, acc.data(), q.data(), k.data() + D, v.data() + D, 1, 1.0f / 8.0f);
  forward_finish<D>(out.data(), lse, m, l, acc.data());
  const double p1 = std::exp(1.0) / (1.0 + std::exp(1.0));
  EXPECT_NEAR(out[0], 1 - p1, 1e-6);
  EXPECT_NEAR(out[1], p1, 1e-6);
  EXPECT_NEAR(lse, std::log(1.0 + std::exp(1.0)), 1e-6);
}

}  // namespace
}  // namespace meshplan::kernels::flash
