// The GPU executor's GEMMs, through cuBLASLt (issue 16): NVIDIA's tuned
// kernels, with the bias add and GELU fused into the GEMM's epilogue, where
// a kernel of our own would be hundreds of lines for a few per cent. One
// GemmLt owns a cuBLASLt handle and a 32 MiB workspace, the size the cuBLAS
// documentation recommends for Hopper (cublasSetWorkspace; PyTorch and
// llm.c use the same; 4 MiB suffices before Hopper), and caches per call
// shape the descriptors and the algorithm cuBLASLt's heuristic picks.
//
// Row-major, as kernels/cpu/matmul.hpp: D[M, N] = epilogue(alpha op(A)
// op(B) + beta D), op(A) [M, K] and op(B) [K, N]. cuBLAS is column-major,
// and a row-major X [r, c] is the column-major X^T [c, r] with the same
// leading dimension c; so D^T = op(B)^T op(A)^T is one column-major GEMM
// with the operands swapped and each keeping its own transpose flag: m = N,
// n = M, k = K, cuBLAS's A is our B. The bias [N] is then a vector over the
// rows of cuBLAS's D, as its epilogues want. The executor's three GEMMs:
//   forward   out[N, OC] = inp[N, C] weight[OC, C]^T (+ bias)   M=N  N=OC K=C   transpose_b
//   dinp      dinp[N, C] += dout[N, OC] weight[OC, C]           M=N  N=C  K=OC  beta 1
//   dweight   dweight[OC, C] += dout^T inp                      M=OC N=C  K=N   transpose_a, beta 1
// (linear_forward, linear_backward_input, linear_backward_weight below).
//
// Types: bf16 A and B with fp32 accumulation (CUBLAS_COMPUTE_32F), D bf16 or
// fp32; or fp32 A, B and D, computed in fp32 (CUBLAS_COMPUTE_32F) or on the
// TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32: inputs rounded to 10
// mantissa bits, fp32 accumulation). The bias and the saved GELU input
// have D's type. GELU is cuBLASLt's (the epilogue's own approximation);
// tests/cuda/test_cuda_gemm.cpp holds it to GPT-2's tanh GELU.
// Left out: cuBLASLt's backward epilogues (DGELU, DGELU_BGRAD, BGRADA/B);
// the GELU backward is a kernel of its own on the saved input (pre_gelu),
// the bias gradient a reduction of its own.
//
// Not thread-safe: one GemmLt per stream (the workspace is shared by its calls).
//
// defines: GemmType, GemmEpilogue, GemmArgs, GemmLt, linear_forward,
// linear_backward_input, linear_backward_weight
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace meshplan::kernels::cuda {

enum class GemmType {
  kBf16,        // A, B, D bf16; fp32 accumulation
  kBf16ToFp32,  // A, B bf16, D fp32; fp32 accumulation
  kFp32,        // A, B, D fp32; fp32 arithmetic (CUBLAS_COMPUTE_32F)
  kTf32,        // A, B, D fp32; TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32)
};

enum class GemmEpilogue {
  kNone,
  kBias,         // + bias[N] on every row
  kGelu,         // GELU(x)
  kGeluBias,     // GELU(x + bias)
  kGeluAux,      // GELU(x); x also written to pre_gelu
  kGeluAuxBias,  // GELU(x + bias); x + bias also written to pre_gelu
};

const char* gemm_type_name(GemmType type);
const char* gemm_epilogue_name(GemmEpilogue epilogue);

// One row-major GEMM (see the top of this file). Pointers are device memory
// of the types GemmType names; d must not alias a or b.
struct GemmArgs {
  GemmType type = GemmType::kFp32;
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  std::int64_t M = 0, N = 0, K = 0;  // each >= 1
  bool transpose_a = false;          // A stored [K, M] (op(A) = A^T), else [M, K]
  bool transpose_b = false;          // B stored [N, K] (op(B) = B^T), else [K, N]
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;               // [M, N]; read as well when beta != 0
  const void* bias = nullptr;      // [N], the *Bias epilogues
  void* pre_gelu = nullptr;        // [M, N], the *Aux epilogues; N a multiple of 8 (cuBLASLt's rule for its leading dimension)
  float alpha = 1.0f;
  float beta = 0.0f;               // 0: D is written, not read (it may hold NaN)
};

class GemmLt {
 public:
  static constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

  // A handle and the workspace on the current device; throws
  // std::runtime_error naming the failed call.
  GemmLt();
  ~GemmLt();
  GemmLt(const GemmLt&) = delete;
  GemmLt& operator=(const GemmLt&) = delete;

  // Enqueues D on `stream`. Throws std::invalid_argument on a shape or
  // argument it cannot run (naming it), std::runtime_error naming the
  // cuBLASLt call and its status otherwise, or when cuBLASLt has no
  // algorithm for the case.
  void run(const GemmArgs& args, cudaStream_t stream);

  // Shapes (with types, epilogue, transposes and pointer alignments) seen so far.
  std::size_t cached_plans() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// out[rows, OC] = inp[rows, C] weight[OC, C]^T (+ bias[OC]): matmul_forward.
inline GemmArgs linear_forward(GemmType type, void* out, const void* inp, const void* weight, const void* bias,
                               std::int64_t rows, std::int64_t C, std::int64_t OC) {
  GemmArgs g;
  g.type = type;
  g.epilogue = bias != nullptr ? GemmEpilogue::kBias : GemmEpilogue::kNone;
  g.M = rows;
  g.N = OC;
  g.K = C;
  g.transpose_b = true;
  g.a = inp;
  g.b = weight;
  g.d = out;
  g.bias = bias;
  return g;
}

// dinp[rows, C] += dout[rows, OC] weight[OC, C]: matmul_backward's dinp.
inline GemmArgs linear_backward_input(GemmType type, void* dinp, const void* dout, const void* weight,
                                      std::int64_t rows, std::int64_t C, std::int64_t OC) {
  GemmArgs g;
  g.type = type;
  g.M = rows;
  g.N = C;
  g.K = OC;
  g.a = dout;
  g.b = weight;
  g.d = dinp;
  g.beta = 1.0f;
  return g;
}

// dweight[OC, C] += dout[rows, OC]^T inp[rows, C]: matmul_backward's dweight.
inline GemmArgs linear_backward_weight(GemmType type, void* dweight, const void* dout, const void* inp,
                                       std::int64_t rows, std::int64_t C, std::int64_t OC) {
  GemmArgs g;
  g.type = type;
  g.M = OC;
  g.N = C;
  g.K = rows;
  g.transpose_a = true;
  g.a = dout;
  g.b = inp;
  g.d = dweight;
  g.beta = 1.0f;
  return g;
}

}  // namespace meshplan::kernels::cuda
