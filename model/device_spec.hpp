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

// The same measured figures for one process running `threads` threads (one
// per core), per core: what a rank of that many threads reaches of each core.
// The CPU executor's small GEMMs and element-wise ops do not speed up by the
// thread count, so such a rank is not `threads` independent devices.
struct ThreadedRates {
  int threads = 0;
  std::vector<GemmCurvePoint> gemm_curve;
  std::array<double, kStreamOps> op_bandwidth_bytes_per_s{};
};

struct DeviceSpec {
  std::string name;
  std::string source;
  std::map<Dtype, double> peak_flops_per_s;  // dense peak; absent = unsupported
  double memory_bytes = 0;                   // capacity
  double memory_bandwidth_bytes_per_s = 0;
  // Achievable rates (compute_model.hpp): the fraction of dense peak a large
  // GEMM reaches, the fraction of memory bandwidth a streaming kernel reaches,
  // and the number of parallel compute units (SMs) for wave quantization
  // (0 = not modelled).
  double gemm_efficiency = 0.8;
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

  std::optional<double> peak_for(Dtype dtype) const;
};

// What is wrong with a GEMM curve as the schema allows it (at most 16
// points, intensities positive and strictly increasing, fractions in
// (0, 1.5]): "item 3: ..." for the first bad point, "" when it is good.
std::string gemm_curve_problem(const std::vector<GemmCurvePoint>& curve);

// The device a process running `threads` threads on as many cores is, for a
// one-core device (local-cpu): peaks, memory bandwidth and op-class rates x
// threads; the GEMM curve and op-class rates of `threaded` first when it was
// measured at this thread count (`used_threaded` says whether it was).
DeviceSpec device_for_threads(const DeviceSpec& core, int threads, bool* used_threaded = nullptr);

// `name_or_path` as in find_preset().
Loaded<DeviceSpec> load_device(const std::string& name_or_path);
// The same, from YAML text (tests, fuzzing); `display_name` names it in messages.
Loaded<DeviceSpec> load_device_text(const std::string& yaml_text, const std::string& display_name);

}  // namespace meshplan
