#include "model/precision.hpp"

namespace meshplan {

std::string to_string(Precision precision) {
  switch (precision) {
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
    case Precision::fp8: return "fp8";
  }
  return "?";
}

std::string to_string(Dtype dtype) {
  switch (dtype) {
    case Dtype::fp32: return "fp32";
    case Dtype::tf32: return "tf32";
    case Dtype::bf16: return "bf16";
    case Dtype::fp16: return "fp16";
    case Dtype::fp8: return "fp8";
  }
  return "?";
}

std::optional<Precision> parse_precision(std::string_view text) {
  if (text == "fp32") return Precision::fp32;
  if (text == "bf16") return Precision::bf16;
  if (text == "fp16") return Precision::fp16;
  if (text == "fp8") return Precision::fp8;
  return std::nullopt;
}

PrecisionBytes bytes_for(Precision precision) {
  switch (precision) {
    case Precision::fp32: return {4, 4, 8, 4, 4};
    case Precision::bf16:
    case Precision::fp16: return {2, 2, 12, 2, 2};
    case Precision::fp8: return {3, 2, 12, 2, 2};
  }
  return {4, 4, 8, 4, 4};
}

PrecisionBytes bytes_for(Precision precision, bool fp32_gradients) {
  PrecisionBytes bytes = bytes_for(precision);
  if (fp32_gradients) bytes.gradient_bytes_per_parameter = 4;
  return bytes;
}

PrecisionBytes bytes_for(Precision precision, bool fp32_gradients, bool bf16_moments) {
  PrecisionBytes bytes = bytes_for(precision, fp32_gradients);
  if (bf16_moments) bytes.optimizer_bytes_per_parameter -= 2 * (4 - 2);
  return bytes;
}

Dtype gemm_dtype(Precision precision) {
  switch (precision) {
    case Precision::fp32: return Dtype::fp32;
    case Precision::bf16: return Dtype::bf16;
    case Precision::fp16: return Dtype::fp16;
    case Precision::fp8: return Dtype::fp8;
  }
  return Dtype::fp32;
}

}  // namespace meshplan
