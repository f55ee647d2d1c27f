// Training precision and the bytes it costs per parameter and per activation.
//
// Mixed precision follows Micikevicius et al. 2018 and ZeRO (Rajbhandari et
// al. 2020, Sec. 3.1): 16-bit weights (2 B) and gradients (2 B) plus an fp32
// master copy and two fp32 Adam moments (K = 12 B) = 16 B per parameter.
// Pure fp32 keeps 4 + 4 + 8 = 16 B too (the common rule of thumb "4x the fp32 model size").
// fp8 (Transformer Engine style) keeps the bf16 weights and adds a 1-byte fp8
// copy of each weight for the GEMMs: 17 B per parameter.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace meshplan {

enum class Precision { fp32, bf16, fp16, fp8 };

// Numeric formats a device advertises peak throughput for.
enum class Dtype { fp32, tf32, bf16, fp16, fp8 };

std::string to_string(Precision precision);
std::string to_string(Dtype dtype);
std::optional<Precision> parse_precision(std::string_view text);
inline constexpr std::string_view precision_choices = "fp32, bf16, fp16, fp8";

struct PrecisionBytes {
  double weight_bytes_per_parameter;     // the copy used by forward/backward
  double gradient_bytes_per_parameter;
  double optimizer_bytes_per_parameter;  // master weights (if any) + Adam m + v
  double activation_bytes_per_element;   // activations saved for backward
  // The weights' 16-bit (fp32: 32-bit) copy: what the all-gathers of sharded
  // weights move and the optimizer writes. Of fp8's 3 bytes a parameter, the
  // 1-byte copy is made by the forward's casts (stage_cost.hpp, fp8_cast_bytes).
  double gathered_bytes_per_parameter;
};

PrecisionBytes bytes_for(Precision precision);
// The same with gradients kept and reduced in fp32 when fp32_gradients
// (Plan::fp32_gradients): 4 bytes per parameter whatever the precision.
PrecisionBytes bytes_for(Precision precision, bool fp32_gradients);
// And with Adam's two moments kept in bf16 when bf16_moments (Plan::bf16_moments):
// 2 bytes each instead of fp32's 4.
PrecisionBytes bytes_for(Precision precision, bool fp32_gradients, bool bf16_moments);

// The dtype whose peak the GEMMs run at under this precision.
Dtype gemm_dtype(Precision precision);
// The precision of the GEMMs a plan does not quantize: bf16 under fp8 (the
// LM head, the attention core, the MoE router: stage_cost.hpp, gemm_in_fp8),
// else the plan's own.
inline Precision unquantized(Precision precision) { return precision == Precision::fp8 ? Precision::bf16 : precision; }

}  // namespace meshplan
