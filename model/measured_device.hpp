// A device preset from measurements made elsewhere: `meshplan calibrate
// --from FILE` reads one JSON object per line, as a PyTorch script on a GPU
// writes them (the format of ../shared/reference/h100-measured.jsonl, one
// H100 SXM; docs/presets.md, "Calibrating from measurements"), and derives
// the figures of presets/devices/h100-sxm.yaml the way docs/cost-model.md,
// "Measured device curves", states. A user with a GPU calibrates meshplan
// without a GPU backend here.
//
// Rows ("section" names the kind; times in seconds, medians of repeats):
//   device:    name, sms, mem_bytes, l2_bytes, torch or stack (the software that measured; all optional)
//   ceiling:   what = "bf16_gemm_8192" (tflops_med) | "d2d_copy_1GiB" (gb_per_s_med, read + written) | others (kept as comments)
//   gemm:      m, k, n, s_med, tflops_med              bf16 C[m,n] = A[m,k] B[k,n]
//   attention: B, H, T, D, fwd_s, fwd_bwd_s            causal fused attention, bf16
//   attention_dropout: B, H, T, D, dropout, fwd_s, fwd_bwd_s, dropout_fwd_s, dropout_fwd_bwd_s
//              the same kernel timed without and with dropout p = `dropout`
//   op:        op, and tokens, d, fwd_s, fwd_bwd_s     bf16 [tokens, d] kernels (layernorm, rmsnorm, gelu_tanh, silu, residual_add)
//              | op = cross_entropy_compiled: tokens, vocab, fwd_s, fwd_bwd_s   the fused loss
//              | op = cross_entropy_fp32: the same, eager (a warning: not used for the rate)
//              | op = adamw_fused_fp32: params, s
// Other sections and ops are reported as warnings and not used.
//
// The datasheet figures a measurement does not give (dense peaks, memory
// bandwidth; the stack's context and workspace) come from a base device.
//
// Defines: DeviceMeasurements, parse_device_measurements, OpClassFigure,
// MeasuredDeviceFigures, derive_device_figures, apply_measured_figures, yaml_line_comments,
// measured_device_yaml.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/device_spec.hpp"
#include "model/problem.hpp"

namespace meshplan {

struct DeviceMeasurements {
  std::string file;             // as given, for messages and the preset's header
  std::string device_name;      // "NVIDIA H100 80GB HBM3"
  std::string software;         // "torch 2.11.0+cu130"
  std::int64_t compute_units = 0;  // SMs; 0 when the file does not say
  double memory_bytes = 0;         // 0 when the file does not say
  double l2_bytes = 0;             // 0 when the file does not say
  double gemm_ceiling_flops_per_s = 0;  // bf16_gemm_8192, median
  double fp8_gemm_ceiling_flops_per_s = 0;  // fp8_gemm_8192 (e4m3 operands, bf16 result), median
  double copy_bytes_per_s = 0;          // d2d_copy_1GiB, median, read + written
  struct Gemm {
    std::int64_t m = 0, n = 0, k = 0;
    double time_s = 0, flops_per_s = 0;
  };
  struct Attention {
    std::int64_t batch = 0, heads = 0, seq = 0, head_dim = 0;
    double forward_s = 0, forward_backward_s = 0;
    double forward_flops() const;  // 2 B H T^2 D: the causal half of Q K^T and P V
    // The backward's FLOPs over the forward's: dV, dP, dQ, dK and the
    // recomputed scores, 2.5x (FlashAttention-2's count, as measure_device.py's 3.5x for both).
    static constexpr double kBackwardFlopRatio = 2.5;
  };
  struct Op {
    std::string op;
    std::int64_t tokens = 0, width = 0, vocab = 0, parameters = 0;
    double forward_s = 0, forward_backward_s = 0, step_s = 0;
  };
  std::vector<Gemm> gemms;
  std::vector<Attention> attention;
  struct AttentionDropout {
    Attention plain, dropped;  // the same call without and with dropout
    double dropout = 0;
  };
  std::vector<AttentionDropout> attention_dropout;
  std::vector<Op> ops;
};

// Problems name "FILE:LINE" and the field; a line that is not a JSON object,
// or a known row missing a positive number it needs, is an error; unknown
// sections and ops are warnings.
Loaded<DeviceMeasurements> parse_device_measurements(std::string_view text, const std::string& file);

struct OpClassFigure {
  StreamOp op_class = StreamOp::norm;
  double bytes_per_s = 0;            // the median of `rows_bytes_per_s`, as written
  std::vector<double> rows_bytes_per_s;
  std::string kernels;               // "layernorm and rmsnorm"
  std::string counted;               // what traffic is counted, for the comment
};

// The figures, each rounded as written in the preset.
struct MeasuredDeviceFigures {
  double peak_flops_per_s = 0;             // the bf16 dense peak they are fractions of (the base's)
  double memory_bandwidth_bytes_per_s = 0; // the base's
  std::int64_t compute_units = 0;          // the file's, else the base's (wave quantization)
  double launch_overhead_s = 0;
  std::string launch_floor_call;           // "GEMM 1024x768x3072"
  std::optional<double> gemm_fraction;     // ceiling / peak
  std::optional<double> fp8_gemm_fraction; // fp8 ceiling / the base's fp8 peak
  std::optional<double> memory_bandwidth_fraction;  // copy / bandwidth
  std::vector<GemmCurvePoint> gemm_curve;
  int gemm_curve_measured = 0;             // GEMMs timed above twice the launch floor
  std::vector<AttentionRatePoint> attention_forward_curve;
  std::vector<AttentionRatePoint> attention_backward_curve;
  // Median over attention_dropout rows of forward (with / without dropout)
  // and of backward-only; nullopt when the file has no such rows.
  std::optional<std::array<double, 2>> attention_dropout_slowdown;
  std::vector<OpClassFigure> op_classes;   // norm, activation, elementwise, cross_entropy, optimizer (those measured)
};

// The reductions of docs/cost-model.md, "Measured device curves":
// - launch floor: the shortest timed call of any kind (GEMM or op forward);
// - gemm_fraction: the bf16 8192^3 ceiling / the base's dense bf16 peak;
// - fp8_gemm_fraction: the fp8 8192^3 ceiling / the base's dense fp8 peak;
// - memory_bandwidth_fraction: the 1 GiB device copy / the base's bandwidth;
// - gemm_curve: for every GEMM timed above twice the launch floor, the rate /
//   (peak x gemm_fraction x tile_efficiency of compute_model.hpp, bf16), in
//   8 bins of equal count by intensity, the median intensity and residual of each;
// - attention curves: forward and backward-only (2.5x forward FLOPs over
//   fwd_bwd - fwd) rates by forward FLOPs;
// - attention_dropout_slowdown: the medians of forward time with dropout over
//   without, and of backward-only time likewise, over the attention_dropout rows;
// - op classes: the traffic the cost model counts, forward + backward (3x
//   forward), over the measured forward + backward time, median over the rows
//   at the largest measured tokens x d; the fused cross-entropy 4 bytes per
//   logit forward; the optimizer 28 bytes per parameter over the step.
// Errors when the base has no bf16 peak or memory bandwidth.
Loaded<MeasuredDeviceFigures> derive_device_figures(const DeviceMeasurements& measured, const DeviceSpec& base);

// `base` with the measured figures in place: its peaks, bandwidth and other
// figures kept; memory from the file when it says.
DeviceSpec apply_measured_figures(const DeviceSpec& base, const MeasuredDeviceFigures& figures,
                                  const DeviceMeasurements& measured);

// The end-of-line comments of a preset's text by key path ("peak_tflops.bf16",
// "memory_bandwidth_gb_per_s", "runtime.context_mib"; a map's own line under
// its name): how a kept figure's source travels from the base to the new file.
std::map<std::string, std::string> yaml_line_comments(std::string_view yaml_text);

// The device preset's YAML: every measured figure with the rows it came
// from as comments; every kept figure with the base's comment for it, else
// a note that it is the base's (`base_label`: what --base named, or
// "flags"). `command`: how it was made, for the header.
std::string measured_device_yaml(const DeviceSpec& device, const MeasuredDeviceFigures& figures,
                                 const DeviceMeasurements& measured, const std::string& base_label,
                                 const std::string& command, const std::map<std::string, std::string>& base_comments = {});

}  // namespace meshplan
