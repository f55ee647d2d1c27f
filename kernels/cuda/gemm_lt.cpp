// GemmLt's cuBLASLt calls (gemm_lt.hpp). A call shape's plan (the matmul
// descriptor with its transposes and epilogue, three matrix layouts and the
// algorithm the heuristic returned) is built on first use and kept: the
// heuristic costs microseconds of host time per query, a training step asks
// for the same few shapes thousands of times. The key holds each pointer's
// alignment (the largest power of two up to 256 dividing its address),
// given to the heuristic as CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES as
// PyTorch does (ATen/cuda/CUDABlas.cpp): an algorithm chosen for 256-byte
// aligned buffers, cuBLASLt's default assumption, may not run on a view
// that starts one element in.
//
// Every cuBLASLt status is checked and a failure thrown as
// std::runtime_error with the call, file, line and cuBLASLt's status name.
#include "kernels/cuda/gemm_lt.hpp"

#include <cublasLt.h>

#include <compare>
#include <map>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.hpp"

namespace meshplan::kernels::cuda {
namespace {

void cublaslt_check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                             cublasLtGetStatusName(status) + ": " + cublasLtGetStatusString(status));
  }
}

#define MESHPLAN_CUBLASLT_CHECK(call) cublaslt_check((call), #call, __FILE__, __LINE__)

struct TypeInfo {
  cudaDataType_t inputs;  // A and B
  cudaDataType_t output;  // C and D, the bias and the saved GELU input
  cublasComputeType_t compute;
};

TypeInfo type_info(GemmType type) {
  switch (type) {
    case GemmType::kBf16: return {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    case GemmType::kBf16ToFp32: return {CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case GemmType::kFp32: return {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case GemmType::kTf32: return {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32};
  }
  throw std::invalid_argument("GemmLt: unknown GemmType " + std::to_string(static_cast<int>(type)));
}

cublasLtEpilogue_t lt_epilogue(GemmEpilogue epilogue) {
  switch (epilogue) {
    case GemmEpilogue::kNone: return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::kGelu: return CUBLASLT_EPILOGUE_GELU;
    case GemmEpilogue::kGeluBias: return CUBLASLT_EPILOGUE_GELU_BIAS;
    case GemmEpilogue::kGeluAux: return CUBLASLT_EPILOGUE_GELU_AUX;
    case GemmEpilogue::kGeluAuxBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  }
  throw std::invalid_argument("GemmLt: unknown GemmEpilogue " + std::to_string(static_cast<int>(epilogue)));
}

bool adds_bias(GemmEpilogue e) {
  return e == GemmEpilogue::kBias || e == GemmEpilogue::kGeluBias || e == GemmEpilogue::kGeluAuxBias;
}
bool saves_pre_gelu(GemmEpilogue e) { return e == GemmEpilogue::kGeluAux || e == GemmEpilogue::kGeluAuxBias; }

std::uint32_t alignment_bytes(const void* pointer) {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  std::uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

std::string describe(const GemmArgs& g) {
  return std::string(gemm_type_name(g.type)) + " M " + std::to_string(g.M) + " N " + std::to_string(g.N) + " K " +
         std::to_string(g.K) + (g.transpose_a ? " A^T" : "") + (g.transpose_b ? " B^T" : "") + " epilogue " +
         gemm_epilogue_name(g.epilogue);
}

void validate(const GemmArgs& g) {
  const auto bad = [&](const std::string& why) { throw std::invalid_argument("GemmLt: " + why + " (" + describe(g) + ")"); };
  if (g.M < 1 || g.N < 1 || g.K < 1) bad("M, N and K must be >= 1");
  if (g.a == nullptr || g.b == nullptr || g.d == nullptr) bad("a, b and d must not be null");
  if (adds_bias(g.epilogue) != (g.bias != nullptr)) bad(g.bias == nullptr ? "the epilogue needs a bias" : "a bias but an epilogue without one");
  if (saves_pre_gelu(g.epilogue) != (g.pre_gelu != nullptr))
    bad(g.pre_gelu == nullptr ? "the epilogue needs pre_gelu" : "pre_gelu but an epilogue that does not write it");
  if (saves_pre_gelu(g.epilogue) && g.N % 8 != 0) bad("pre_gelu needs N a multiple of 8");
}

// What selects a plan: the shape, types, epilogue and pointer alignments.
struct PlanKey {
  GemmType type;
  GemmEpilogue epilogue;
  std::int64_t M, N, K;
  bool transpose_a, transpose_b;
  std::uint32_t align_a, align_b, align_d, align_bias, align_pre_gelu;
  auto operator<=>(const PlanKey&) const = default;
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  // Column-major layouts in cuBLAS's order: first = our B, second = our A, out = D (and C).
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {  // statuses ignored: a destructor cannot throw, and nothing is left to do on failure
    if (first != nullptr) cublasLtMatrixLayoutDestroy(first);
    if (second != nullptr) cublasLtMatrixLayoutDestroy(second);
    if (out != nullptr) cublasLtMatrixLayoutDestroy(out);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

struct Preference {
  cublasLtMatmulPreference_t handle = nullptr;
  Preference() { MESHPLAN_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&handle)); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  ~Preference() { cublasLtMatmulPreferenceDestroy(handle); }
  void set(cublasLtMatmulPreferenceAttributes_t attribute, const void* value, std::size_t bytes) {
    MESHPLAN_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(handle, attribute, value, bytes));
  }
};

template <typename T>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  MESHPLAN_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value));
}

// The pointers the epilogue reads or writes live in the descriptor; set on every call.
void set_epilogue_pointers(cublasLtMatmulDesc_t desc, const GemmArgs& g) {
  if (adds_bias(g.epilogue)) set_attribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  if (saves_pre_gelu(g.epilogue)) set_attribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.pre_gelu);
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, std::int64_t rows, std::int64_t cols) {
  cublasLtMatrixLayout_t layout = nullptr;
  MESHPLAN_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&layout, type, static_cast<std::uint64_t>(rows),
                                                     static_cast<std::uint64_t>(cols), rows));
  return layout;
}

std::unique_ptr<Plan> make_plan(cublasLtHandle_t handle, const GemmArgs& g, const PlanKey& key) {
  const TypeInfo types = type_info(g.type);
  auto plan = std::make_unique<Plan>();
  MESHPLAN_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&plan->desc, types.compute, CUDA_R_32F));
  // D^T [N, M] = op(B)^T op(A)^T, column-major: cuBLAS's A is our B, each with its own flag.
  const cublasOperation_t op_first = g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, op_first);
  set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, op_second);
  set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(g.epilogue));
  if (saves_pre_gelu(g.epilogue)) set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.N);
  set_epilogue_pointers(plan->desc, g);  // the heuristic reads their alignment from the values

  // A row-major [r, c] buffer is column-major [c, r] with leading dimension c:
  // B is [K, N] (or [N, K] transposed), A is [M, K] (or [K, M]), D is [M, N].
  plan->first = make_layout(types.inputs, g.transpose_b ? g.K : g.N, g.transpose_b ? g.N : g.K);
  plan->second = make_layout(types.inputs, g.transpose_a ? g.M : g.K, g.transpose_a ? g.K : g.M);
  plan->out = make_layout(types.output, g.N, g.M);

  Preference preference;
  const std::uint64_t workspace_bytes = GemmLt::kWorkspaceBytes;
  preference.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof workspace_bytes);
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.align_b, sizeof key.align_b);
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.align_a, sizeof key.align_a);
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.align_d, sizeof key.align_d);
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.align_d, sizeof key.align_d);

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle, plan->desc, plan->first, plan->second,
                                                               plan->out, plan->out, preference.handle, 1, &result, &found);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
    throw std::runtime_error("cublasLtMatmulAlgoGetHeuristic found no algorithm for " + describe(g) +
                             " (alignments a " + std::to_string(key.align_a) + " b " + std::to_string(key.align_b) +
                             " d " + std::to_string(key.align_d) + " bytes): " + cublasLtGetStatusName(status) + ": " +
                             cublasLtGetStatusString(status));
  }
  plan->algo = result.algo;
  return plan;
}

}  // namespace

const char* gemm_type_name(GemmType type) {
  switch (type) {
    case GemmType::kBf16: return "bf16";
    case GemmType::kBf16ToFp32: return "bf16->fp32";
    case GemmType::kFp32: return "fp32";
    case GemmType::kTf32: return "tf32";
  }
  return "unknown";
}

const char* gemm_epilogue_name(GemmEpilogue epilogue) {
  switch (epilogue) {
    case GemmEpilogue::kNone: return "none";
    case GemmEpilogue::kBias: return "bias";
    case GemmEpilogue::kGelu: return "gelu";
    case GemmEpilogue::kGeluBias: return "gelu_bias";
    case GemmEpilogue::kGeluAux: return "gelu_aux";
    case GemmEpilogue::kGeluAuxBias: return "gelu_aux_bias";
  }
  return "unknown";
}

struct GemmLt::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;

  Impl() {
    MESHPLAN_CUBLASLT_CHECK(cublasLtCreate(&handle));
    const cudaError_t status = cudaMalloc(&workspace, kWorkspaceBytes);
    if (status != cudaSuccess) {
      cublasLtDestroy(handle);
      MESHPLAN_CUDA_CHECK(status);
    }
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    plans.clear();  // descriptors before the handle
    cudaFree(workspace);
    cublasLtDestroy(handle);
  }
};

GemmLt::GemmLt() : impl_(std::make_unique<Impl>()) {}
GemmLt::~GemmLt() = default;

std::size_t GemmLt::cached_plans() const { return impl_->plans.size(); }

void GemmLt::run(const GemmArgs& g, cudaStream_t stream) {
  validate(g);
  const PlanKey key{g.type,
                    g.epilogue,
                    g.M,
                    g.N,
                    g.K,
                    g.transpose_a,
                    g.transpose_b,
                    alignment_bytes(g.a),
                    alignment_bytes(g.b),
                    alignment_bytes(g.d),
                    alignment_bytes(g.bias),
                    alignment_bytes(g.pre_gelu)};
  auto found = impl_->plans.find(key);
  if (found == impl_->plans.end()) found = impl_->plans.emplace(key, make_plan(impl_->handle, g, key)).first;
  const Plan& plan = *found->second;
  set_epilogue_pointers(plan.desc, g);
  MESHPLAN_CUBLASLT_CHECK(cublasLtMatmul(impl_->handle, plan.desc, &g.alpha, g.b, plan.first, g.a, plan.second, &g.beta,
                                         g.d, plan.out, g.d, plan.out, &plan.algo, impl_->workspace, kWorkspaceBytes,
                                         stream));
}

}  // namespace meshplan::kernels::cuda
