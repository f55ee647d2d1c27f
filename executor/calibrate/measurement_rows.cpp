// The measured rows as JSON Lines (measurement_rows.hpp), and the base
// preset a GPU's name maps to.
#include "executor/calibrate/measurement_rows.hpp"

#include <nlohmann/json.hpp>

#include "model/measured_device.hpp"

namespace meshplan::exec {
namespace {

MeasurementRow row(const char* section, std::vector<MeasurementField> fields) { return {section, std::move(fields)}; }

constexpr double kTera = 1e12;
constexpr double kGiga = 1e9;

double gemm_flops(std::int64_t m, std::int64_t k, std::int64_t n) {
  return 2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n);
}

}  // namespace

MeasurementRow device_row(const std::string& name, std::int64_t sms, std::int64_t mem_bytes, std::int64_t l2_bytes,
                          const std::string& stack) {
  return row("device", {{"name", name}, {"sms", sms}, {"mem_bytes", mem_bytes}, {"l2_bytes", l2_bytes}, {"stack", stack}});
}

MeasurementRow gemm_ceiling_row(double median_s, double best_s) {
  const double flops = gemm_flops(8192, 8192, 8192);
  return row("ceiling", {{"what", std::string("bf16_gemm_8192")},
                         {"tflops_med", flops / median_s / kTera},
                         {"tflops_best", flops / best_s / kTera}});
}

MeasurementRow copy_ceiling_row(std::int64_t bytes, double median_s, double best_s) {
  const double moved = 2.0 * static_cast<double>(bytes);  // read + written
  return row("ceiling", {{"what", std::string("d2d_copy_1GiB")},
                         {"gb_per_s_med", moved / median_s / kGiga},
                         {"gb_per_s_best", moved / best_s / kGiga},
                         {"bytes", bytes}});
}

MeasurementRow gemm_row(std::int64_t m, std::int64_t k, std::int64_t n, double median_s, double best_s) {
  const double flops = gemm_flops(m, k, n);
  return row("gemm", {{"m", m},
                      {"k", k},
                      {"n", n},
                      {"s_med", median_s},
                      {"tflops_med", flops / median_s / kTera},
                      {"tflops_best", flops / best_s / kTera}});
}

MeasurementRow attention_row(std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t D, double forward_s,
                             double forward_backward_s) {
  // The FLOP count calibrate --from reads these rows with (model/measured_device.hpp).
  DeviceMeasurements::Attention shape;
  shape.batch = B;
  shape.heads = H;
  shape.seq = T;
  shape.head_dim = D;
  const double flops = shape.forward_flops();
  return row("attention", {{"B", B},
                           {"H", H},
                           {"T", T},
                           {"D", D},
                           {"fwd_s", forward_s},
                           {"fwd_bwd_s", forward_backward_s},
                           {"fwd_tflops", flops / forward_s / kTera},
                           {"fwd_bwd_tflops", (1.0 + DeviceMeasurements::Attention::kBackwardFlopRatio) * flops / forward_backward_s / kTera},
                           {"dtype", std::string("bf16")}});
}

MeasurementRow token_op_row(const std::string& op, std::int64_t tokens, std::int64_t d, double forward_s,
                            double forward_backward_s, const std::string& dtype) {
  return row("op", {{"op", op},
                    {"tokens", tokens},
                    {"d", d},
                    {"fwd_s", forward_s},
                    {"fwd_bwd_s", forward_backward_s},
                    {"dtype", dtype}});
}

MeasurementRow cross_entropy_row(std::int64_t tokens, std::int64_t vocab, double forward_s, double forward_backward_s,
                                 const std::string& kernel) {
  return row("op", {{"op", std::string("cross_entropy_compiled")},
                    {"tokens", tokens},
                    {"vocab", vocab},
                    {"fwd_s", forward_s},
                    {"fwd_bwd_s", forward_backward_s},
                    {"dtype", std::string("bf16 logits, fp32 arithmetic")},
                    {"kernel", kernel}});
}

MeasurementRow adamw_row(std::int64_t params, std::int64_t tensors, double step_s) {
  // 16 bytes per parameter as measure_device.py writes gb_per_s (the parser counts 28 for the class).
  return row("op", {{"op", std::string("adamw_fused_fp32")},
                    {"params", params},
                    {"s", step_s},
                    {"gb_per_s", 16.0 * static_cast<double>(params) / step_s / kGiga},
                    {"tensors", tensors}});
}

std::string to_jsonl(const std::vector<MeasurementRow>& rows) {
  std::string text;
  for (const auto& r : rows) {
    nlohmann::ordered_json line;
    line["section"] = r.section;
    for (const auto& f : r.fields) {
      std::visit([&](const auto& value) { line[f.key] = value; }, f.value);
    }
    text += line.dump() + "\n";
  }
  return text;
}

std::string base_preset_for_gpu(const std::string& name, std::int64_t mem_bytes) {
  auto has = [&](const char* part) { return name.find(part) != std::string::npos; };
  constexpr double gib = 1024.0 * 1024 * 1024;
  if (has("H200")) return "h200";
  if (has("H100")) return has("PCIe") || has("NVL") ? "" : "h100-sxm";
  if (has("A100")) return static_cast<double>(mem_bytes) > 60 * gib ? "a100-80g" : "a100-40g";
  if (has("V100")) return static_cast<double>(mem_bytes) > 20 * gib ? "v100-32g" : "";
  return "";
}

}  // namespace meshplan::exec
