// `calibrate --backend cuda`'s measurement on a GPU (executor/calibrate/cuda_measure.hpp):
// the quick run's rows are all there, every number positive and finite, and
// within physical bounds: no GEMM above the dense bf16 peak of the built-in
// preset for this GPU's name (or 5 PFLOP/s when none is known), no copy
// above 10 TB/s, attention forward + backward longer than the forward; and
// calibrate --from's parser reads them without an error. These are bounds,
// not speed targets (benchmarks are separate programs).
// Without a usable GPU the program prints why and exits 77 (ctest: skipped).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <variant>

#include "executor/backend/cuda_backend.hpp"
#include "executor/calibrate/cuda_measure.hpp"
#include "executor/calibrate/measurement_rows.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "tests/cuda/cuda_test_support.hpp"
#include "model/device_spec.hpp"
#include "model/measured_device.hpp"
#include "model/presets.hpp"

namespace meshplan::exec {
namespace {

const CudaMeasurement& quick_measurement() {
  static const CudaMeasurement measured = [] {
    CudaMeasureOptions options;
    options.quick = true;
    options.say = [](const std::string& line) { std::printf("measure: %s\n", line.c_str()); };
    return measure_cuda_device(options);
  }();
  return measured;
}

double number(const MeasurementRow& row, const std::string& key) {
  for (const auto& f : row.fields) {
    if (f.key != key) continue;
    if (const auto* d = std::get_if<double>(&f.value)) return *d;
    if (const auto* i = std::get_if<std::int64_t>(&f.value)) return static_cast<double>(*i);
  }
  ADD_FAILURE() << "row '" << row.section << "' has no number '" << key << "'";
  return 0;
}

// The dense bf16 peak bounding every GEMM: the built-in preset's for this GPU, else 5 PFLOP/s.
double peak_bf16_flops(const CudaMeasurement& m) {
  const std::string base = base_preset_for_gpu(m.device_name, m.memory_bytes);
  if (!base.empty()) {
    const auto device = load_device(base);
    if (device.ok()) {
      if (const auto peak = device.value.peak_for(Dtype::bf16)) return *peak;
    }
  }
  return 5000e12;
}

TEST(CudaCalibrate, QuickRowsArePositiveAndWithinPhysicalBounds) {
  const CudaMeasurement& m = quick_measurement();
  for (const auto& note : m.notes) std::printf("note: %s\n", note.c_str());
  std::map<std::string, int> sections;
  const double peak = peak_bf16_flops(m);
  for (const auto& row : m.rows) {
    ++sections[row.section];
    for (const auto& f : row.fields) {
      if (const auto* d = std::get_if<double>(&f.value)) {
        EXPECT_TRUE(std::isfinite(*d) && *d > 0) << row.section << " " << f.key << " = " << *d;
      }
      if (const auto* i = std::get_if<std::int64_t>(&f.value)) {
        EXPECT_GT(*i, 0) << row.section << " " << f.key;
      }
    }
    if (row.section == "gemm") {
      EXPECT_LT(number(row, "tflops_med") * 1e12, peak) << to_jsonl({row});
    }
    if (row.section == "attention") {
      EXPECT_GT(number(row, "fwd_bwd_s"), number(row, "fwd_s")) << to_jsonl({row});
    }
  }
  EXPECT_EQ(sections["device"], 1);
  EXPECT_EQ(sections["ceiling"], 2);
  EXPECT_EQ(sections["gemm"], 16);
  EXPECT_EQ(sections["attention"], 2);
  EXPECT_EQ(sections["op"], 2 * 3 + 1 + 1);  // 3 kernels at 2 sizes, the loss, AdamW
  const auto measured = parse_device_measurements(to_jsonl(m.rows), "quick.jsonl");
  for (const auto& p : measured.problems) ADD_FAILURE() << describe(p);
  EXPECT_LT(measured.value.gemm_ceiling_flops_per_s, peak);
  EXPECT_GT(measured.value.copy_bytes_per_s, 0);
  EXPECT_LT(measured.value.copy_bytes_per_s, 10e12);  // read + written
}

}  // namespace
}  // namespace meshplan::exec

int main(int argc, char** argv) {
  return meshplan::kernels::cuda::test_support::run_gpu_tests(argc, argv, "cuda_calibrate_tests");
}
