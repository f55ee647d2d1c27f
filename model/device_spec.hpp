// One accelerator (or CPU) as the cost model sees it: peak FLOP/s per numeric
// format, memory capacity and bandwidth. Loaded from presets/devices/*.yaml,
// whose every figure cites its datasheet.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/precision.hpp"
#include "model/problem.hpp"

namespace meshplan {

// Classes of memory-bound (non-GEMM) ops. A device may carry a measured
// rate per class (`achievable.op_bandwidth_gb_per_s`), for devices where such
// ops are not bound by memory bandwidth: on a CPU core a GELU is bound by its
// tanh, not by DRAM (docs/cost-model.md, "Compute").
enum class StreamOp { activation, norm, softmax, elementwise, cross_entropy, embedding, optimizer };
inline constexpr std::size_t kStreamOps = 7;
std::string to_string(StreamOp op);
std::optional<StreamOp> parse_stream_op(const std::string& text);

// One measured point of the GEMM efficiency curve: a GEMM whose arithmetic
// intensity is `intensity` = 2 m n k / (m k + k n + m n) (FLOPs per element of
// its operands and result) reaches `fraction` of peak x gemm_efficiency.
// The most points a curve may have (compute_model.hpp keeps it in a fixed array).
inline constexpr std::size_t kMaxGemmCurvePoints = 16;

struct GemmCurvePoint {
  double intensity = 0;
  double fraction = 1;
};

// One measured point of a fused-attention rate curve: a causal fused
// attention call (FlashAttention-2 / cuDNN / SDPA) of `forward_flops` FLOPs
// (2 b heads s^2 head_dim: the causal half of Q K^T and P V) runs at
// `flops_per_s`; its backward (2.5x the forward FLOPs) at its own curve.
struct AttentionRatePoint {
  double forward_flops = 0;
  double flops_per_s = 0;
};

// The same measured figures for one process running `threads` threads (one
// per core), per core: what a rank of that many threads reaches of each core.
// The CPU executor's small GEMMs and element-wise ops do not speed up by the
// thread count, so such a rank is not `threads` independent devices.
struct ThreadedRates {
  int threads = 0;
  std::vector<GemmCurvePoint> gemm_curve;
  std::array<double, kStreamOps> op_bandwidth_bytes_per_s{};
};

// What processor a device is, so that `meshplan train` knows which backend
// can run a plan made for it (docs/presets.md, "kind"): a CPU, an NVIDIA GPU
// (the CUDA backend), or a TPU (planned for, not trained on). Presets
// written before the field existed read as unspecified.
enum class DeviceKind { unspecified, cpu, nvidia_gpu, tpu };
std::string to_string(DeviceKind kind);
std::optional<DeviceKind> parse_device_kind(const std::string& text);
// The names a preset or plan file may give `kind` ("cpu", "nvidia-gpu", "tpu").
std::vector<std::string> device_kind_names();

struct DeviceSpec {
  std::string name;
  std::string source;
  DeviceKind kind = DeviceKind::unspecified;
  std::map<Dtype, double> peak_flops_per_s;  // dense peak; absent = unsupported
  double memory_bytes = 0;                   // capacity
  double memory_bandwidth_bytes_per_s = 0;
  // Achievable rates (compute_model.hpp): the fraction of dense peak a large
  // GEMM reaches, the fraction of memory bandwidth a streaming kernel reaches,
  // and the number of parallel compute units (SMs) for wave quantization
  // (0 = not modelled).
  double gemm_efficiency = 0.8;
  // An fp8 GEMM's large-GEMM fraction of the fp8 peak, where measured
  // (achievable.fp8_gemm_fraction); 0: gemm_efficiency, as bf16's.
  double fp8_gemm_efficiency = 0;
  double memory_efficiency = 0.85;
  std::int64_t compute_units = 0;
  // Achievable bandwidth from the L2 cache into the SMs' shared memory, all
  // SMs together (0 = not modelled). Bounds the rate of a GEMM by the operand
  // traffic of its output tile (compute_model.hpp, tile_rate_fraction).
  double l2_bandwidth_bytes_per_s = 0;
  // Optional measured refinements (`meshplan calibrate` writes them for
  // local-cpu; empty / 0 = not modelled): the GEMM efficiency curve by
  // arithmetic intensity, strictly increasing in intensity, and the achieved
  // rate of each memory-bound op class in bytes/s of the traffic the cost
  // model counts for it (0 = memory bandwidth x memory_efficiency).
  std::vector<GemmCurvePoint> gemm_curve;
  std::array<double, kStreamOps> op_bandwidth_bytes_per_s{};
  std::optional<ThreadedRates> threaded;  // `achievable.threaded`
  // Fused attention by forward FLOPs per call, strictly increasing (empty =
  // the fallback of compute_model.hpp, fused_attention_time_s).
  std::vector<AttentionRatePoint> attention_forward_curve;
  std::vector<AttentionRatePoint> attention_backward_curve;
  // Fused attention with dropout (p > 0) over the same call without it:
  // the stack runs a kernel that can draw the mask (an in-kernel RNG in the
  // forward and again in the backward, Dao 2023, FlashAttention-2, Sec. 3.1),
  // which in PyTorch 2.11 is the flash kernel, slower than the one it picks
  // without dropout (docs/cost-model.md). {forward, backward}; {1, 1} = not
  // modelled.
  std::array<double, 2> attention_dropout_slowdown{1, 1};

  // The software stack on the device (`runtime:`; docs/cost-model.md, "Peak
  // memory" and "Launch floor"; 0 = not modelled, as on a CPU):
  double launch_overhead_s = 0;            // host time per kernel: a block's kernels take at least count x this
  double context_bytes = 0;                // CUDA context and loaded modules, outside the caching allocator
  double workspace_bytes = 0;              // cuBLAS(Lt) / cuDNN workspaces held by the stack
  double allocator_reserve_fraction = 0;   // caching allocator: reserved beyond the allocated peak, as a fraction of it

  std::optional<double> peak_for(Dtype dtype) const;
};

// What is wrong with a GEMM curve as the schema allows it (at most 16
// points, intensities positive and strictly increasing, fractions in
// [kGemmCurveFractionMin, kGemmCurveFractionMax]): "item 3: ..." for the
// first bad point, "" when it is good.
std::string gemm_curve_problem(const std::vector<GemmCurvePoint>& curve);
// The same for an attention curve (FLOPs positive and strictly increasing,
// rates from kPeakTflopsMin up to `peak_flops_per_s`, the device's dense
// 16-bit peak, when it is given (> 0)).
std::string attention_curve_problem(const std::vector<AttentionRatePoint>& curve, double peak_flops_per_s = 0);
// The dense 16-bit peak a fused attention kernel runs under: bf16's, else fp16's, else 0.
double attention_peak_flops_per_s(const DeviceSpec& device);

// The device a process running `threads` threads on as many cores is, for a
// one-core device (local-cpu): peaks, memory bandwidth and op-class rates x
// threads; the GEMM curve and op-class rates of `threaded` first when it was
// measured at this thread count (`used_threaded` says whether it was).
DeviceSpec device_for_threads(const DeviceSpec& core, int threads, bool* used_threaded = nullptr);

// Why a plan in `dtype` has no price on `device` (its preset lists no peak
// for it), for plan validation and `train`'s note. For an accelerator the
// preset lists what its datasheet gives: "a100-40g has no fp8 support (it
// has: ...)". For local-cpu and bf16 the preset is the answer, not the
// hardware: the built-in placeholder has no bf16 figure (not every AVX-512
// core has bf16) and `meshplan calibrate` measures the CPU's rate through
// the oneDNN path `train --precision bf16` runs and writes it; a calibrated
// preset without one says in its comments why calibrate wrote none.
std::string missing_peak_message(const DeviceSpec& device, Dtype dtype);

// What a device preset accepts (read_device), for the code that writes
// presets too (calibrate): peak_tflops entries, memory_gib and
// memory_bandwidth_gb_per_s (GB/s) within [min, max].
inline constexpr double kPeakTflopsMin = 1e-6, kPeakTflopsMax = 1e6;
inline constexpr double kMemoryGibMin = 1e-3, kMemoryGibMax = 1e6;
inline constexpr double kMemoryBandwidthGbPerSMin = 1e-3, kMemoryBandwidthGbPerSMax = 1e6;
// achievable.attention_dropout_slowdown's forward and backward factors.
inline constexpr double kDropoutSlowdownMin = 1.0, kDropoutSlowdownMax = 10.0;
// achievable.gemm_fraction and memory_bandwidth_fraction, in [min, 1].
inline constexpr double kAchievableFractionMin = 0.01;
// A GEMM curve's points (residual multipliers on peak x gemm_fraction x tiles) lie in
// [kGemmCurveFractionMin, kGemmCurveFractionMax]: above 1 where a measured shape beats the tile model.
inline constexpr double kGemmCurveFractionMin = 1e-4, kGemmCurveFractionMax = 1.5;
// achievable.op_bandwidth_gb_per_s entries (GB/s) and runtime.launch_overhead_us.
inline constexpr double kOpBandwidthGbPerSMin = 1e-6, kOpBandwidthGbPerSMax = 1e6;
inline constexpr double kLaunchOverheadUsMax = 1e6;
// compute_units (streaming multiprocessors, cores) within [1, max].
inline constexpr std::int64_t kComputeUnitsMax = std::int64_t{1} << 20;

// `name_or_path` as in find_preset().
Loaded<DeviceSpec> load_device(const std::string& name_or_path);
// The same, from YAML text (tests, fuzzing); `display_name` names it in messages.
Loaded<DeviceSpec> load_device_text(const std::string& yaml_text, const std::string& display_name);

}  // namespace meshplan
