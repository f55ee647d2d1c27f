// bf16 against fp32 GEMM rate for the training matmuls: kernels::
// matmul_forward / matmul_backward (OpenBLAS sgemm) against
// matmul_forward_bf16 / matmul_backward_bf16 (operands rounded to bf16, then
// oneDNN's bf16 matmul with fp32 accumulation), on GPT-2-small's linear
// layers (N = B x T = 4 x 256 rows, C = 768: qkv C->3C, attn proj C->C, fc
// C->4C, fc proj 4C->C) and one large square GEMM. The bf16 time includes the
// rounding of the operands, as training pays it. Each iteration runs fp32 and
// bf16 back to back so both see the same machine load; rates use each side's
// best iteration. After Google Benchmark's output a table lists shape, fp32
// GFLOP/s, bf16 GFLOP/s and the speedup. On a CPU without bf16 support the
// program says so and measures nothing.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "kernels/cpu/matmul.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using meshplan::kernels::Bf16Bits;

struct Shape {
  std::string name;
  std::int64_t N, C, OC;
};

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> list = {{"gpt2 qkv", 1024, 768, 2304},
                                          {"gpt2 attn_proj", 1024, 768, 768},
                                          {"gpt2 fc", 1024, 768, 3072},
                                          {"gpt2 fc_proj", 1024, 3072, 768},
                                          {"square 2048", 2048, 2048, 2048}};
  return list;
}

struct Best {
  double fp32_s = std::numeric_limits<double>::infinity();
  double bf16_s = std::numeric_limits<double>::infinity();
  double flops = 0;
};
std::map<std::string, Best>& results() {
  static std::map<std::string, Best> r;
  return r;
}

std::vector<float> filled(std::int64_t n, float scale) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f * scale;
  return v;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

void BM_Forward(benchmark::State& state, const Shape& s) {
  const auto inp = filled(s.N * s.C, 1.0f), weight = filled(s.OC * s.C, 0.1f), bias = filled(s.OC, 0.1f);
  std::vector<float> out(static_cast<std::size_t>(s.N * s.OC));
  std::vector<Bf16Bits> workspace(static_cast<std::size_t>(meshplan::kernels::matmul_bf16_workspace_elements(s.N, s.C, s.OC)));
  Best& best = results()[s.name + " fwd"];
  best.flops = 2.0 * static_cast<double>(s.N * s.C * s.OC);
  for (auto _ : state) {
    auto start = Clock::now();
    meshplan::kernels::matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), s.N, s.C, s.OC);
    best.fp32_s = std::min(best.fp32_s, seconds_since(start));
    start = Clock::now();
    meshplan::kernels::matmul_forward_bf16(out.data(), inp.data(), weight.data(), bias.data(), s.N, s.C, s.OC,
                                           workspace.data());
    best.bf16_s = std::min(best.bf16_s, seconds_since(start));
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["fp32_GFLOP/s"] = best.flops / best.fp32_s / 1e9;
  state.counters["bf16_GFLOP/s"] = best.flops / best.bf16_s / 1e9;
}

void BM_Backward(benchmark::State& state, const Shape& s) {
  const auto inp = filled(s.N * s.C, 1.0f), weight = filled(s.OC * s.C, 0.1f), dout = filled(s.N * s.OC, 0.01f);
  std::vector<float> dinp(inp.size()), dweight(weight.size()), dbias(static_cast<std::size_t>(s.OC));
  std::vector<Bf16Bits> workspace(static_cast<std::size_t>(meshplan::kernels::matmul_bf16_workspace_elements(s.N, s.C, s.OC)));
  Best& best = results()[s.name + " bwd"];
  best.flops = 4.0 * static_cast<double>(s.N * s.C * s.OC);  // dinp and dweight GEMMs
  for (auto _ : state) {
    auto start = Clock::now();
    meshplan::kernels::matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                                       weight.data(), s.N, s.C, s.OC);
    best.fp32_s = std::min(best.fp32_s, seconds_since(start));
    start = Clock::now();
    meshplan::kernels::matmul_backward_bf16(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                                            weight.data(), s.N, s.C, s.OC, workspace.data());
    best.bf16_s = std::min(best.bf16_s, seconds_since(start));
    benchmark::DoNotOptimize(dweight.data());
  }
  state.counters["fp32_GFLOP/s"] = best.flops / best.fp32_s / 1e9;
  state.counters["bf16_GFLOP/s"] = best.flops / best.bf16_s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const auto& support = meshplan::kernels::bf16_matmul_support();
  if (!support.supported) {
    std::printf("bench_bf16: no bf16 matmul here: %s\n", support.reason.c_str());
    return 0;
  }
  for (const Shape& s : shapes()) {
    benchmark::RegisterBenchmark(("fwd/" + s.name).c_str(), BM_Forward, s)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("bwd/" + s.name).c_str(), BM_Backward, s)->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::printf("\n%-22s %12s %12s %8s\n", "shape (N, C, OC)", "fp32 GFLOP/s", "bf16 GFLOP/s", "speedup");
  for (const auto& [name, best] : results())
    std::printf("%-22s %12.1f %12.1f %7.2fx\n", name.c_str(), best.flops / best.fp32_s / 1e9,
                best.flops / best.bf16_s / 1e9, best.fp32_s / best.bf16_s);
  return 0;
}
