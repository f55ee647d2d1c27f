// GEMM throughput of the training matmuls: kernels::matmul_forward and
// matmul_backward against a plain cblas_sgemm with exactly the same M, N, K,
// transposes and beta, on the same OpenBLAS threads, for every linear layer
// of three models the executor trains:
//   gpt2-124m     N = B x T = 4 x 256 rows, C = 768: qkv C->3C, attn proj C->C,
//                 fc C->4C, fc proj 4C->C, lm head C->50257 (tied, no bias);
//   gpt-byte-10m  N = 8 x 256 rows, C = 384, the same layers, vocab 256;
//   mlp-fashion   N = 128 rows (micro-batch), 784->256, 256->10.
// Target (issue "Executor core", Must show): ours >= 85% of the BLAS's own
// rate for the same sizes. Each iteration runs ours and the BLAS back to
// back, so both see the same machine load; the rates use each side's best
// iteration (other processes only ever slow a call down).
//
// Parts: "fwd" = bias broadcast + GEMM (NoTrans, Trans); "dinp" and "dweight"
// = one accumulating GEMM each (beta = 1); "dbias" = the row reduction alone,
// reported in GB/s (no BLAS counterpart); "bwd" = all three, against the two
// BLAS GEMMs. `--table` prints a summary table after Google Benchmark's
// output: shape, ours GFLOP/s, BLAS GFLOP/s, ratio.
//
// `--cpu-clock` is for a busy machine: one OpenBLAS thread (which then runs
// in the calling thread) timed by that thread's CPU clock, so time slices
// given to other processes count for neither side. Without it: wall time on
// OpenBLAS's default threads, as the trainer runs.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "kernels/cpu/matmul.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Layer {
  std::string model;
  std::string name;
  std::int64_t N = 0;   // rows
  std::int64_t C = 0;   // in features
  std::int64_t OC = 0;  // out features
  bool bias = true;
};

std::vector<Layer> layers() {
  std::vector<Layer> all;
  auto transformer = [&](const std::string& model, std::int64_t N, std::int64_t C, std::int64_t vocab) {
    all.push_back({model, "qkv", N, C, 3 * C, true});
    all.push_back({model, "attn proj", N, C, C, true});
    all.push_back({model, "fc", N, C, 4 * C, true});
    all.push_back({model, "fc proj", N, 4 * C, C, true});
    all.push_back({model, "lm head", N, C, vocab, false});
  };
  transformer("gpt2-124m", 4 * 256, 768, 50257);
  transformer("gpt-byte-10m", 8 * 256, 384, 256);
  all.push_back({"mlp-fashion", "fc1", 128, 784, 256, true});
  all.push_back({"mlp-fashion", "fc2", 128, 256, 10, true});
  return all;
}

enum class Part { forward, dinp, dweight, dbias, backward };
const char* part_name(Part p) {
  switch (p) {
    case Part::forward: return "fwd";
    case Part::dinp: return "dinp";
    case Part::dweight: return "dweight";
    case Part::dbias: return "dbias";
    case Part::backward: return "bwd";
  }
  return "";
}

struct Buffers {
  std::vector<float> inp, weight, bias, out, dout, dinp, dweight, dbias;
  explicit Buffers(const Layer& l) {
    auto filled = [](std::int64_t n, float scale) {
      std::vector<float> v(static_cast<std::size_t>(n));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(static_cast<int>(i % 97) - 48) / 48.0f;
      return v;
    };
    inp = filled(l.N * l.C, 1.0f);
    weight = filled(l.OC * l.C, 0.02f);
    bias = filled(l.OC, 0.1f);
    out = filled(l.N * l.OC, 0.0f);
    dout = filled(l.N * l.OC, 0.01f);
    dinp = filled(l.N * l.C, 0.0f);
    dweight = filled(l.OC * l.C, 0.0f);
    dbias = filled(l.OC, 0.0f);
  }
};

int to_blas(std::int64_t n) { return static_cast<int>(n); }

void ours(Part part, const Layer& l, Buffers& b) {
  using namespace meshplan::kernels;
  const float* bias = l.bias ? b.bias.data() : nullptr;
  switch (part) {
    case Part::forward: matmul_forward<float>(b.out.data(), b.inp.data(), b.weight.data(), bias, l.N, l.C, l.OC); break;
    case Part::dinp:
      matmul_backward<float>(b.dinp.data(), nullptr, nullptr, b.dout.data(), b.inp.data(), b.weight.data(), l.N, l.C, l.OC);
      break;
    case Part::dweight:
      matmul_backward<float>(nullptr, b.dweight.data(), nullptr, b.dout.data(), b.inp.data(), b.weight.data(), l.N, l.C, l.OC);
      break;
    case Part::dbias:
      matmul_backward<float>(nullptr, nullptr, b.dbias.data(), b.dout.data(), b.inp.data(), b.weight.data(), l.N, l.C, l.OC);
      break;
    case Part::backward:
      matmul_backward<float>(b.dinp.data(), b.dweight.data(), l.bias ? b.dbias.data() : nullptr, b.dout.data(), b.inp.data(),
                             b.weight.data(), l.N, l.C, l.OC);
      break;
  }
}

// The same GEMMs straight through CBLAS (row-major, as kernels/cpu/matmul.cpp calls it).
void blas(Part part, const Layer& l, Buffers& b) {
  const int N = to_blas(l.N), C = to_blas(l.C), OC = to_blas(l.OC);
  const bool dinp = part == Part::dinp || part == Part::backward;
  const bool dweight = part == Part::dweight || part == Part::backward;
  if (part == Part::forward) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, b.inp.data(), C, b.weight.data(), C,
                l.bias ? 1.0f : 0.0f, b.out.data(), OC);
  }
  if (dinp) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, b.dout.data(), OC, b.weight.data(), C, 1.0f,
                b.dinp.data(), C);
  }
  if (dweight) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, b.dout.data(), OC, b.inp.data(), C, 1.0f,
                b.dweight.data(), C);
  }
}

double gemm_flops(Part part, const Layer& l) {
  const double one = 2.0 * static_cast<double>(l.N) * static_cast<double>(l.C) * static_cast<double>(l.OC);
  switch (part) {
    case Part::forward:
    case Part::dinp:
    case Part::dweight: return one;
    case Part::dbias: return 0;
    case Part::backward: return 2 * one;
  }
  return 0;
}

struct Row {
  std::string label;
  double ours_flops_per_s = 0;
  double blas_flops_per_s = 0;
  double dbias_bytes_per_s = 0;
  double ours_best_s = 0;
  double blas_best_s = 0;
};
std::map<std::string, Row>& rows() {
  static std::map<std::string, Row> r;
  return r;
}
std::vector<std::string>& row_order() {
  static std::vector<std::string> order;
  return order;
}

bool use_cpu_clock = false;

double now_s() {
  if (use_cpu_clock) {
    timespec t{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  }
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}
double seconds(double t0) { return now_s() - t0; }

void BM_Matmul(benchmark::State& state, Layer layer, Part part) {
  Buffers buffers(layer);
  ours(part, layer, buffers);  // warm-up: page faults, BLAS buffers
  if (part != Part::dbias) blas(part, layer, buffers);
  double best_ours = std::numeric_limits<double>::infinity();
  double best_blas = std::numeric_limits<double>::infinity();
  bool ours_first = true;
  for (auto _ : state) {
    for (int side = 0; side < 2; ++side) {
      const bool run_ours = (side == 0) == ours_first;
      if (!run_ours && part == Part::dbias) continue;
      const double t0 = now_s();
      if (run_ours) {
        ours(part, layer, buffers);
        best_ours = std::min(best_ours, seconds(t0));
      } else {
        blas(part, layer, buffers);
        best_blas = std::min(best_blas, seconds(t0));
      }
    }
    ours_first = !ours_first;
    benchmark::ClobberMemory();
  }
  const double flops = gemm_flops(part, layer);
  Row row;
  row.label = layer.model + " " + layer.name + " " + part_name(part) + " " + std::to_string(layer.N) + "x" +
              std::to_string(layer.C) + "->" + std::to_string(layer.OC);
  row.ours_best_s = best_ours;
  row.blas_best_s = part == Part::dbias ? 0 : best_blas;
  if (part == Part::dbias) {
    // Reads dout once, reads and writes dbias (negligible): N x OC floats.
    row.dbias_bytes_per_s = static_cast<double>(layer.N * layer.OC) * sizeof(float) / best_ours;
    state.counters["GB/s"] = row.dbias_bytes_per_s / 1e9;
  } else {
    row.ours_flops_per_s = flops / best_ours;
    row.blas_flops_per_s = flops / best_blas;
    state.counters["ours_GFLOP/s"] = row.ours_flops_per_s / 1e9;
    state.counters["blas_GFLOP/s"] = row.blas_flops_per_s / 1e9;
    state.counters["ratio"] = best_blas / best_ours;
  }
  if (!rows().count(row.label)) row_order().push_back(row.label);
  rows()[row.label] = row;
}

void print_table() {
  std::printf("\nGEMM throughput of the training matmuls, %d OpenBLAS threads, %s (%s)\n", openblas_get_num_threads(),
              use_cpu_clock ? "thread CPU clock" : "wall clock", openblas_get_config());
  std::printf("best iteration of each; ratio = BLAS time / ours for the same GEMMs; target >= 0.85\n");
  std::printf("%-44s %10s %10s %7s %10s\n", "shape (rows x in -> out)", "ours GF/s", "BLAS GF/s", "ratio", "dbias GB/s");
  for (const auto& label : row_order()) {
    const Row& r = rows()[label];
    if (r.dbias_bytes_per_s > 0) {
      std::printf("%-44s %10s %10s %7s %10.1f\n", label.c_str(), "", "", "", r.dbias_bytes_per_s / 1e9);
    } else {
      std::printf("%-44s %10.1f %10.1f %7.3f%s\n", label.c_str(), r.ours_flops_per_s / 1e9, r.blas_flops_per_s / 1e9,
                  r.blas_best_s / r.ours_best_s, r.blas_best_s / r.ours_best_s < 0.85 ? "  < 0.85" : "");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool table = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--table") == 0) {
      table = true;
    } else if (std::strcmp(argv[i], "--cpu-clock") == 0) {
      use_cpu_clock = true;
      openblas_set_num_threads(1);
    } else {
      args.push_back(argv[i]);
    }
  }
  for (const Layer& layer : layers()) {
    for (Part part : {Part::forward, Part::dinp, Part::dweight, Part::dbias, Part::backward}) {
      if (part == Part::dbias && !layer.bias) continue;
      const std::string name = "BM_Matmul/" + layer.model + "/" + layer.name + "/" + part_name(part);
      benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, layer, part)->Unit(benchmark::kMillisecond)->MinTime(0.3);
    }
  }
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (table) print_table();
  return 0;
}
