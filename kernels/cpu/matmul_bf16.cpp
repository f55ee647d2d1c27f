// The bf16 matmuls of matmul.hpp on oneDNN's matmul primitive. A GEMM
// C[M,N] = op(A)[M,K] . op(B)[K,N] + beta C (row-major, as cblas) is a matmul
// whose memory descriptors carry the strides, so a transposed operand is a
// stride swap, never a copy; beta = 1 is a "sum" post-op. Primitives are
// JIT-compiled per shape, so they are kept per thread by (M, N, K, layout,
// beta). oneDNN reports failures as dnnl::error exceptions; on a CPU that
// bf16_matmul_support() accepted they cannot happen for valid shapes, so one
// is an invariant failure: printed with file and line, then abort.
#include "kernels/cpu/matmul.hpp"

#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <tuple>

#ifdef MESHPLAN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace meshplan::kernels {

void round_to_bf16(Bf16Bits* out, const float* in, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = round_to_bf16_bits(in[i]);
}

std::int64_t matmul_bf16_workspace_elements(std::int64_t N, std::int64_t C, std::int64_t OC) {
  return N * C + OC * C + N * OC;
}

namespace {

Bf16Support detect_bf16_support() {
#ifndef MESHPLAN_HAVE_DNNL
  return {false, "this build has no bf16 GEMM (configure with oneDNN: install libdnnl-dev)"};
#else
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16") && !__builtin_cpu_supports("amx-bf16"))
    return {false, "this CPU has neither AVX512-BF16 nor AMX-BF16 (cpuid flags avx512_bf16, amx_bf16)"};
  return {true, ""};
#endif
}

#ifdef MESHPLAN_HAVE_DNNL

enum class Op { none, transpose };

struct Dnnl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, Op, Op, bool>,
           dnnl::matmul>
      primitives;
};

Dnnl& dnnl_state() {
  thread_local Dnnl state;
  return state;
}

// C[M,N] = op(A) . op(B) + beta C with beta 0 or 1; row strides lda, ldb, ldc.
void gemm_bf16(Op op_a, Op op_b, std::int64_t M, std::int64_t N, std::int64_t K, const Bf16Bits* A, std::int64_t lda,
               const Bf16Bits* B, std::int64_t ldb, bool accumulate, float* C, std::int64_t ldc) {
  using dnnl::memory;
  Dnnl& d = dnnl_state();
  try {
    const auto key = std::make_tuple(M, N, K, lda, ldb, ldc, op_a, op_b, accumulate);
    const memory::desc a_desc({M, K}, memory::data_type::bf16,
                              op_a == Op::none ? memory::dims{lda, 1} : memory::dims{1, lda});
    const memory::desc b_desc({K, N}, memory::data_type::bf16,
                              op_b == Op::none ? memory::dims{ldb, 1} : memory::dims{1, ldb});
    const memory::desc c_desc({M, N}, memory::data_type::f32, memory::dims{ldc, 1});
    auto found = d.primitives.find(key);
    if (found == d.primitives.end()) {
      dnnl::primitive_attr attr;
      if (accumulate) {
        dnnl::post_ops ops;
        ops.append_sum(1.0f);
        attr.set_post_ops(ops);
      }
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_desc, b_desc, c_desc), attr, d.engine);
      found = d.primitives.emplace(key, dnnl::matmul(pd)).first;
    }
    memory a(a_desc, d.engine, const_cast<Bf16Bits*>(A));
    memory b(b_desc, d.engine, const_cast<Bf16Bits*>(B));
    memory c(c_desc, d.engine, C);
    found->second.execute(d.stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    d.stream.wait();
  } catch (const dnnl::error& e) {
    std::fprintf(stderr, "%s:%d: oneDNN bf16 matmul %lldx%lldx%lld failed: %s\n", __FILE__, __LINE__,
                 static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K), e.what());
    std::abort();
  }
}

#endif

}  // namespace

const Bf16Support& bf16_matmul_support() {
  static const Bf16Support support = detect_bf16_support();
  return support;
}

#ifdef MESHPLAN_HAVE_DNNL

void matmul_forward_bf16(float* out, const float* inp, const float* weight, const float* bias, std::int64_t N,
                         std::int64_t C, std::int64_t OC, Bf16Bits* workspace) {
  if (N == 0 || OC == 0) return;
  if (bias != nullptr) {
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t o = 0; o < OC; ++o) out[n * OC + o] = bias[o];
  } else if (C == 0) {
    for (std::int64_t i = 0; i < N * OC; ++i) out[i] = 0.0f;
  }
  if (C == 0) return;
  Bf16Bits* inp16 = workspace;
  Bf16Bits* weight16 = inp16 + N * C;
  round_to_bf16(inp16, inp, N * C);
  round_to_bf16(weight16, weight, OC * C);
  // out[N, OC] (+)= inp[N, C] . weight[OC, C]^T
  gemm_bf16(Op::none, Op::transpose, N, OC, C, inp16, C, weight16, C, bias != nullptr, out, OC);
}

void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, std::int64_t N, std::int64_t C, std::int64_t OC, Bf16Bits* workspace) {
  if (N == 0 || OC == 0) return;
  if (C > 0 && (dinp != nullptr || dweight != nullptr)) {
    Bf16Bits* inp16 = workspace;
    Bf16Bits* weight16 = inp16 + N * C;
    Bf16Bits* dout16 = weight16 + OC * C;
    round_to_bf16(dout16, dout, N * OC);
    if (dinp != nullptr) {
      round_to_bf16(weight16, weight, OC * C);
      // dinp[N, C] += dout[N, OC] . weight[OC, C]
      gemm_bf16(Op::none, Op::none, N, C, OC, dout16, OC, weight16, C, true, dinp, C);
    }
    if (dweight != nullptr) {
      round_to_bf16(inp16, inp, N * C);
      // dweight[OC, C] += dout[N, OC]^T . inp[N, C]
      gemm_bf16(Op::transpose, Op::none, OC, C, N, dout16, OC, inp16, C, true, dweight, C);
    }
  }
  if (dbias != nullptr) {
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t o = 0; o < OC; ++o) dbias[o] += dout[n * OC + o];
  }
}

#else

void matmul_forward_bf16(float*, const float*, const float*, const float*, std::int64_t, std::int64_t, std::int64_t,
                         Bf16Bits*) {
  std::fprintf(stderr, "%s:%d: matmul_forward_bf16 called in a build without oneDNN\n", __FILE__, __LINE__);
  std::abort();
}

void matmul_backward_bf16(float*, float*, float*, const float*, const float*, const float*, std::int64_t,
                          std::int64_t, std::int64_t, Bf16Bits*) {
  std::fprintf(stderr, "%s:%d: matmul_backward_bf16 called in a build without oneDNN\n", __FILE__, __LINE__);
  std::abort();
}

#endif

}  // namespace meshplan::kernels
