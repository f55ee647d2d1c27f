// The CUDA measurements of `calibrate --backend cuda` (cuda_measure.hpp):
// one timing loop (time_calls), and one function per section that sets up
// operands, times the kernel and makes the row (measurement_rows.hpp).
#include "executor/calibrate/cuda_measure.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "executor/backend/cuda_backend.hpp"
#include "executor/calibrate/random_fill.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/cuda/kernels.hpp"

namespace meshplan::exec {
namespace {

namespace kc = kernels::cuda;
using cuda_calibrate::fill_uniform_bf16;
using cuda_calibrate::fill_uniform_f32;

// The shapes of scripts/gpu/measure_device.py (h100-measured.md): GEMM (k, n)
// of GPT-2 to Llama-3-70B layers, by token count m.
constexpr std::pair<std::int64_t, std::int64_t> kGemmShapes[] = {
    {768, 768},     {768, 2304},   {3072, 768},   {768, 3072},   {1024, 3072},  {4096, 1024},  {1024, 4096},
    {1600, 4800},   {1600, 6400},  {6400, 1600},  {4096, 4096},  {1536, 12288}, {4096, 6144},  {768, 50304},
    {12288, 4608},  {14336, 4096}, {6144, 12288}, {12288, 6144}, {1600, 50304}, {8192, 10240}, {4096, 28672},
    {12288, 12288}, {28672, 8192}, {12288, 36864}, {8192, 57344}};
constexpr std::int64_t kGemmTokens[] = {1024, 2048, 4096, 8192, 16384};
constexpr std::pair<std::int64_t, std::int64_t> kQuickGemmShapes[] = {
    {768, 768}, {768, 2304}, {3072, 768}, {1024, 4096}, {1600, 6400}, {4096, 4096}, {12288, 4608}, {8192, 10240}};
constexpr std::int64_t kQuickGemmTokens[] = {1024, 4096};
constexpr std::int64_t kAttention[][4] = {{8, 12, 1024, 64},  {4, 16, 2048, 64}, {8, 25, 1024, 64},
                                          {2, 32, 4096, 128}, {1, 64, 8192, 128}, {2, 96, 2048, 128}};
constexpr std::size_t kQuickAttention[] = {0, 3};  // indices into kAttention
constexpr std::pair<std::int64_t, std::int64_t> kOpSizes[] = {{8192, 768}, {8192, 1600}, {16384, 4096}, {8192, 8192}};
constexpr std::size_t kQuickOpSizes = 2;
constexpr std::pair<std::int64_t, std::int64_t> kLossSizes[] = {{8192, 50257}, {16384, 128256}};
constexpr std::int64_t kAdamWParameters[] = {124'000'000, 1'500'000'000};
constexpr std::int64_t kAdamWTensorElements = 10'000'000;  // one tensor per 10M parameters, as measure_device.py
constexpr std::int64_t kCopyBytes = std::int64_t{1} << 30;

// A shape whose buffers do not fit in the device's free memory.
struct DoesNotFit : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Device memory from the backend's allocator, handed back when it goes.
class DeviceArray {
 public:
  DeviceArray(CudaBackend& backend, std::int64_t bytes)
      : backend_(backend), bytes_(static_cast<std::size_t>(bytes)), pointer_(backend.allocate(bytes_, MemoryCategory::workspace)) {
    if (pointer_ == nullptr) {
      throw DoesNotFit("does not fit: " + std::to_string(bytes_ >> 20) + " MiB more device memory");
    }
  }
  ~DeviceArray() { backend_.deallocate(pointer_, bytes_, MemoryCategory::workspace); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  template <typename T>
  T* as() const {
    return static_cast<T*>(pointer_);
  }

 private:
  CudaBackend& backend_;
  std::size_t bytes_;
  void* pointer_;
};

DeviceArray bf16_array(CudaBackend& b, std::int64_t n) { return DeviceArray(b, n * 2); }
DeviceArray f32_array(CudaBackend& b, std::int64_t n) { return DeviceArray(b, n * 4); }

class Event {
 public:
  Event() { MESHPLAN_CUDA_CHECK(cudaEventCreate(&event_)); }
  ~Event() { static_cast<void>(cudaEventDestroy(event_)); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

struct Timing {
  double median_s = 0;
  double best_s = 0;
};

// kCudaWarmups calls, then kCudaRepeats calls each between two events; `call(i)`
// enqueues call i on `stream`.
template <typename Call>
Timing time_calls(cudaStream_t stream, Call&& call) {
  int i = 0;
  for (; i < kCudaWarmups; ++i) call(i);
  MESHPLAN_CUDA_CHECK(cudaStreamSynchronize(stream));
  Event start, stop;
  std::vector<double> seconds;
  for (int r = 0; r < kCudaRepeats; ++r, ++i) {
    MESHPLAN_CUDA_CHECK(cudaEventRecord(start.get(), stream));
    call(i);
    MESHPLAN_CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    MESHPLAN_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float ms = 0;
    MESHPLAN_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    seconds.push_back(static_cast<double>(ms) * 1e-3);
  }
  std::sort(seconds.begin(), seconds.end());
  const std::size_t n = seconds.size();
  return {n % 2 == 1 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2, seconds.front()};
}

struct Context {
  CudaBackend& backend;
  cudaStream_t stream;
  kc::GemmLt& gemm;
  CudaMeasurement& result;
  const CudaMeasureOptions& options;
  std::uint64_t seed = 1;

  void say(const std::string& line) const {
    if (options.say) options.say(line);
  }
  std::uint64_t next_seed() { return seed++; }
};

// bf16 C[m, n] = A[m, k] B[k, n] over three operand sets.
Timing time_gemm(Context& c, std::int64_t m, std::int64_t k, std::int64_t n) {
  constexpr int kSets = 3;
  const std::int64_t set = m * k + k * n;
  DeviceArray operands = bf16_array(c.backend, kSets * set);
  DeviceArray out = bf16_array(c.backend, m * n);
  fill_uniform_bf16(operands.as<__nv_bfloat16>(), kSets * set, c.next_seed(), c.stream);
  return time_calls(c.stream, [&](int i) {
    const __nv_bfloat16* a = operands.as<__nv_bfloat16>() + (i % kSets) * set;
    kc::GemmArgs g;
    g.type = kc::GemmType::kBf16;
    g.M = m;
    g.N = n;
    g.K = k;
    g.a = a;
    g.b = a + m * k;
    g.d = out.as<void>();
    c.gemm.run(g, c.stream);
  });
}

// Runs `measure`; a shape that does not fit becomes a note.
template <typename Measure>
void skip_if_too_big(Context& c, const std::string& what, Measure&& measure) {
  try {
    measure();
  } catch (const DoesNotFit& e) {
    c.result.notes.push_back(what + " skipped: " + e.what());
  }
}

void measure_device_row(Context& c) {
  cudaDeviceProp p{};
  MESHPLAN_CUDA_CHECK(cudaGetDeviceProperties(&p, c.options.device));
  int runtime = 0, driver = 0;
  MESHPLAN_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  MESHPLAN_CUDA_CHECK(cudaDriverGetVersion(&driver));
  auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  c.result.device_name = p.name;
  c.result.memory_bytes = static_cast<std::int64_t>(p.totalGlobalMem);
  c.result.rows.push_back(device_row(p.name, p.multiProcessorCount, static_cast<std::int64_t>(p.totalGlobalMem),
                                     p.l2CacheSize,
                                     "meshplan CUDA kernels and cuBLASLt, CUDA runtime " + version(runtime) + ", driver " +
                                         version(driver)));
  c.say(std::string("device: ") + p.name + ", " + std::to_string(p.multiProcessorCount) + " SMs, " +
        std::to_string(p.totalGlobalMem >> 20) + " MiB");
}

void measure_ceilings(Context& c) {
  skip_if_too_big(c, "bf16 GEMM 8192^3", [&] {
    const Timing t = time_gemm(c, 8192, 8192, 8192);
    c.result.rows.push_back(gemm_ceiling_row(t.median_s, t.best_s));
    c.say("ceiling: bf16 GEMM 8192^3 " + std::to_string(2.0 * 8192 * 8192 * 8192 / t.median_s / 1e12) + " TFLOP/s");
  });
  skip_if_too_big(c, "1 GiB device copy", [&] {
    DeviceArray source(c.backend, kCopyBytes), destination(c.backend, kCopyBytes);
    fill_uniform_f32(source.as<float>(), kCopyBytes / 4, c.next_seed(), c.stream);
    const Timing t = time_calls(c.stream, [&](int) {
      MESHPLAN_CUDA_CHECK(cudaMemcpyAsync(destination.as<void>(), source.as<void>(), static_cast<std::size_t>(kCopyBytes),
                                          cudaMemcpyDeviceToDevice, c.stream));
    });
    c.result.rows.push_back(copy_ceiling_row(kCopyBytes, t.median_s, t.best_s));
    c.say("ceiling: 1 GiB device copy " + std::to_string(2.0 * static_cast<double>(kCopyBytes) / t.median_s / 1e9) +
          " GB/s (read + written)");
  });
}

void measure_gemms(Context& c) {
  std::vector<std::pair<std::int64_t, std::int64_t>> shapes;
  std::vector<std::int64_t> tokens;
  if (c.options.quick) {
    shapes.assign(std::begin(kQuickGemmShapes), std::end(kQuickGemmShapes));
    tokens.assign(std::begin(kQuickGemmTokens), std::end(kQuickGemmTokens));
  } else {
    shapes.assign(std::begin(kGemmShapes), std::end(kGemmShapes));
    tokens.assign(std::begin(kGemmTokens), std::end(kGemmTokens));
  }
  for (const std::int64_t m : tokens) {
    for (const auto& [k, n] : shapes) {
      const std::string what = "GEMM " + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
      skip_if_too_big(c, what, [&] {
        const Timing t = time_gemm(c, m, k, n);
        c.result.rows.push_back(gemm_row(m, k, n, t.median_s, t.best_s));
      });
    }
    c.backend.empty_cache();
    c.say("gemm: m = " + std::to_string(m) + ", " + std::to_string(shapes.size()) + " shapes");
  }
}

void measure_attention(Context& c) {
  std::vector<std::size_t> which;
  for (std::size_t i = 0; i < std::size(kAttention); ++i) which.push_back(i);
  if (c.options.quick) which.assign(std::begin(kQuickAttention), std::end(kQuickAttention));
  for (const std::size_t i : which) {
    const std::int64_t B = kAttention[i][0], H = kAttention[i][1], T = kAttention[i][2], D = kAttention[i][3];
    const std::string what = "attention " + std::to_string(B) + "x" + std::to_string(H) + "x" + std::to_string(T) + "x" +
                             std::to_string(D);
    if (D != 64 && D != 128) {  // flash_attention_forward runs D 64 and 128 only
      c.result.notes.push_back(what + " skipped: the flash attention kernel runs D 64 or 128");
      continue;
    }
    skip_if_too_big(c, what, [&] {
      const std::int64_t rows = B * T, heads_rows = B * H * T;
      DeviceArray qkv = bf16_array(c.backend, rows * 3 * H * D), out = bf16_array(c.backend, rows * H * D);
      DeviceArray dout = bf16_array(c.backend, rows * H * D), dqkv = bf16_array(c.backend, rows * 3 * H * D);
      DeviceArray lse = f32_array(c.backend, heads_rows), delta = f32_array(c.backend, heads_rows);
      fill_uniform_bf16(qkv.as<__nv_bfloat16>(), rows * 3 * H * D, c.next_seed(), c.stream);
      fill_uniform_bf16(dout.as<__nv_bfloat16>(), rows * H * D, c.next_seed(), c.stream);
      auto forward = [&] {
        kc::flash_attention_forward(out.as<__nv_bfloat16>(), lse.as<float>(), qkv.as<__nv_bfloat16>(), B, T, H, H, D, c.stream);
      };
      const Timing f = time_calls(c.stream, [&](int) { forward(); });
      const Timing fb = time_calls(c.stream, [&](int) {
        forward();
        kc::flash_attention_backward(dqkv.as<__nv_bfloat16>(), delta.as<float>(), dout.as<__nv_bfloat16>(),
                                     qkv.as<__nv_bfloat16>(), out.as<__nv_bfloat16>(), lse.as<float>(), B, T, H, H, D,
                                     c.stream);
      });
      c.result.rows.push_back(attention_row(B, H, T, D, f.median_s, fb.median_s));
    });
  }
  c.backend.empty_cache();
  c.say("attention: " + std::to_string(which.size()) + " shapes");
}

void measure_token_ops(Context& c) {
  const std::size_t sizes = c.options.quick ? kQuickOpSizes : std::size(kOpSizes);
  for (std::size_t s = 0; s < sizes; ++s) {
    const std::int64_t N = kOpSizes[s].first, C = kOpSizes[s].second;
    const std::int64_t n = N * C;
    skip_if_too_big(c, "ops at " + std::to_string(N) + "x" + std::to_string(C), [&] {
      DeviceArray x = f32_array(c.backend, n), y = f32_array(c.backend, n), out = f32_array(c.backend, n);
      DeviceArray dout = f32_array(c.backend, n), dx = f32_array(c.backend, n), dy = f32_array(c.backend, n);
      DeviceArray weight = f32_array(c.backend, C), bias = f32_array(c.backend, C), dweight = f32_array(c.backend, C),
                  dbias = f32_array(c.backend, C), mean = f32_array(c.backend, N), rstd = f32_array(c.backend, N);
      for (float* p : {x.as<float>(), y.as<float>(), dout.as<float>(), dx.as<float>(), dy.as<float>()}) {
        fill_uniform_f32(p, n, c.next_seed(), c.stream);
      }
      for (float* p : {weight.as<float>(), bias.as<float>(), dweight.as<float>(), dbias.as<float>()}) {
        fill_uniform_f32(p, C, c.next_seed(), c.stream);
      }
      auto row = [&](const char* op, auto forward, auto backward) {
        const Timing f = time_calls(c.stream, [&](int) { forward(); });
        const Timing fb = time_calls(c.stream, [&](int) {
          forward();
          backward();
        });
        c.result.rows.push_back(token_op_row(op, N, C, f.median_s, fb.median_s, "fp32"));
      };
      row(
          "layernorm",
          [&] {
            kc::layernorm_forward(out.as<float>(), mean.as<float>(), rstd.as<float>(), x.as<float>(), weight.as<float>(),
                                  bias.as<float>(), N, C, c.stream);
          },
          [&] {
            kc::layernorm_backward(dx.as<float>(), dweight.as<float>(), dbias.as<float>(), dout.as<float>(), x.as<float>(),
                                   weight.as<float>(), mean.as<float>(), rstd.as<float>(), N, C, c.stream);
          });
      row(
          "gelu_tanh", [&] { kc::gelu_forward(out.as<float>(), x.as<float>(), n, c.stream); },
          [&] { kc::gelu_backward(dx.as<float>(), x.as<float>(), dout.as<float>(), n, c.stream); });
      row(
          "residual_add", [&] { kc::residual_forward(out.as<float>(), x.as<float>(), y.as<float>(), n, c.stream); },
          [&] { kc::residual_backward(dx.as<float>(), dy.as<float>(), dout.as<float>(), n, c.stream); });
    });
  }
  c.backend.empty_cache();
  c.say("op: layernorm, gelu_tanh, residual_add at " + std::to_string(sizes) + " sizes (fp32 kernels)");
}

void measure_loss(Context& c) {
  const std::size_t sizes = c.options.quick ? 1 : std::size(kLossSizes);
  for (std::size_t s = 0; s < sizes; ++s) {
    const std::int64_t N = kLossSizes[s].first, V = kLossSizes[s].second;
    skip_if_too_big(c, "cross-entropy " + std::to_string(N) + "x" + std::to_string(V), [&] {
      DeviceArray logits = bf16_array(c.backend, N * V), dlogits = bf16_array(c.backend, N * V);
      DeviceArray losses = f32_array(c.backend, N), targets(c.backend, N * 4);
      fill_uniform_bf16(logits.as<__nv_bfloat16>(), N * V, c.next_seed(), c.stream);
      std::mt19937 random(static_cast<std::uint32_t>(c.next_seed()));
      std::uniform_int_distribution<std::int32_t> token(0, static_cast<std::int32_t>(V - 1));
      std::vector<std::int32_t> host(static_cast<std::size_t>(N));
      for (auto& t : host) t = token(random);
      MESHPLAN_CUDA_CHECK(cudaMemcpyAsync(targets.as<void>(), host.data(), host.size() * sizeof(std::int32_t),
                                          cudaMemcpyHostToDevice, c.stream));
      const Timing t = time_calls(c.stream, [&](int) {
        kc::softmax_cross_entropy(dlogits.as<__nv_bfloat16>(), losses.as<float>(), logits.as<__nv_bfloat16>(),
                                  targets.as<std::int32_t>(), N, V, 1.0f, c.stream);
      });
      c.result.rows.push_back(cross_entropy_row(N, V, t.median_s, t.median_s,
                                                "meshplan softmax_cross_entropy: loss and gradient in one kernel, "
                                                "so fwd_s = fwd_bwd_s"));
    });
  }
  c.backend.empty_cache();
  c.say("op: cross-entropy at " + std::to_string(sizes) + " sizes");
}

void measure_optimizer(Context& c) {
  const std::size_t sizes = c.options.quick ? 1 : std::size(kAdamWParameters);
  for (std::size_t s = 0; s < sizes; ++s) {
    const std::int64_t P = kAdamWParameters[s];
    skip_if_too_big(c, "AdamW over " + std::to_string(P) + " parameters", [&] {
      DeviceArray params = f32_array(c.backend, P), grads = f32_array(c.backend, P), m = f32_array(c.backend, P),
                  v = f32_array(c.backend, P);
      fill_uniform_f32(params.as<float>(), P, c.next_seed(), c.stream);
      fill_uniform_f32(grads.as<float>(), P, c.next_seed(), c.stream);
      MESHPLAN_CUDA_CHECK(cudaMemsetAsync(m.as<void>(), 0, static_cast<std::size_t>(P) * 4, c.stream));
      MESHPLAN_CUDA_CHECK(cudaMemsetAsync(v.as<void>(), 0, static_cast<std::size_t>(P) * 4, c.stream));
      MESHPLAN_CUDA_CHECK(cudaStreamSynchronize(c.stream));  // the list's constructor copies on the legacy stream
      std::vector<kc::AdamWTensor> tensors;
      for (std::int64_t start = 0; start < P; start += kAdamWTensorElements) {
        tensors.push_back({params.as<float>() + start, grads.as<float>() + start, m.as<float>() + start,
                           v.as<float>() + start, std::min(kAdamWTensorElements, P - start)});
      }
      const kc::AdamWTensorList list(tensors);
      const kernels::AdamWHyperparameters hp;
      const Timing t = time_calls(c.stream, [&](int i) { kc::adamw_update_multi(list, i + 1, hp, 1.0f, c.stream); });
      c.result.rows.push_back(adamw_row(P, static_cast<std::int64_t>(tensors.size()), t.median_s));
    });
  }
  c.backend.empty_cache();
  c.say("op: fused AdamW at " + std::to_string(sizes) + " parameter counts");
}

}  // namespace

CudaDeviceInfo probe_cuda_device(int device) {
  cudaDeviceProp p{};
  MESHPLAN_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  return {p.name, static_cast<std::int64_t>(p.totalGlobalMem)};
}

CudaMeasurement measure_cuda_device(const CudaMeasureOptions& options) {
  CudaMeasurement result;
  CudaBackend backend(options.device);  // throws naming the device when there is none
  MESHPLAN_CUDA_CHECK(cudaSetDevice(options.device));
  kc::GemmLt gemm;
  Context c{backend, backend.cuda_default_context().stream(), gemm, result, options};
  measure_device_row(c);
  measure_ceilings(c);
  measure_gemms(c);
  measure_attention(c);
  measure_token_ops(c);
  measure_loss(c);
  measure_optimizer(c);
  MESHPLAN_CUDA_CHECK(cudaStreamSynchronize(c.stream));
  return result;
}

}  // namespace meshplan::exec
