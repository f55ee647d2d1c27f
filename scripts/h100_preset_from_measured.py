#!/usr/bin/env python3
"""Derives presets/devices/h100-sxm.yaml's measured curves from the raw rows of
one H100 SXM (../shared/reference/h100-measured.jsonl), so that every number in
the preset can be re-derived: docs/cost-model.md, "Measured device curves".

Reductions (no figure here is compared with, or fitted to, a training run):
- launch floor: the shortest timed call of any kind (GEMM or memory-bound op);
  calls this short do not shrink with their size, so their time is the host's.
- gemm_fraction: the 8192^3 bf16 ceiling / the datasheet's dense peak.
- gemm_curve: for every GEMM timed above twice the launch floor, the measured
  rate / (peak x gemm_fraction x the model's wave-quantization efficiency,
  compute_model.cpp tile_efficiency); the median of that residual and of the
  intensities in each of 8 bins of equal count, in order of intensity.
- attention curves: forward and backward-only rates by forward GFLOP per call
  (causal FLOPs as measured: 2 B H T^2 D forward, 2.5x that backward).
- op-class rates: the traffic the cost model counts for the class, forward
  plus backward (3x forward: layer_graph.hpp, evaluate.cpp), over the measured
  forward + backward time, median over the measured rows whose tensors are the
  largest measured (tokens x d = 2^26), where the launch floor is < 10%.
Usage: scripts/h100_preset_from_measured.py path/to/h100-measured.jsonl
"""
import json
import math
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1] if len(sys.argv) > 1 else "../shared/reference/h100-measured.jsonl")]
PEAK = 989.4e12  # dense bf16, H100 whitepaper 2022
SMS = 132
ceiling = next(r for r in rows if r.get("what") == "bf16_gemm_8192")["tflops_med"] * 1e12
gemm_fraction = ceiling / PEAK
timed = [r["s_med"] for r in rows if r["section"] == "gemm"] + [r["fwd_s"] for r in rows if r["section"] == "op" and "fwd_s" in r]
floor_s = min(timed)
print(f"launch_overhead_us: {floor_s * 1e6:.1f}")
print(f"gemm_fraction: {gemm_fraction:.4f}")
copy = next(r for r in rows if r.get("what") == "d2d_copy_1GiB")["gb_per_s_med"]
print(f"memory_bandwidth_fraction: {copy / 3350:.3f}  (1 GiB device copy {copy:.0f} GB/s / 3350)")

TILES = [(256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64)]
def tile_efficiency(m, n):
    best = 0
    for bm, bn in TILES:
        count = math.ceil(m / bm) * math.ceil(n / bn)
        waves = math.ceil(count / SMS)
        best = max(best, m * n / (waves * SMS * bm * bn))
    return best

points = []
for r in rows:
    if r["section"] != "gemm" or r["s_med"] < 2 * floor_s:
        continue
    m, n, k = r["m"], r["n"], r["k"]
    intensity = 2 * m * n * k / (m * k + k * n + m * n)
    residual = r["tflops_med"] * 1e12 / (PEAK * gemm_fraction * tile_efficiency(m, n))
    points.append((intensity, residual))
points.sort()
bins = 8
print(f"gemm_curve from {len(points)} GEMMs:")
curve = []
for b in range(bins):
    chunk = points[b * len(points) // bins:(b + 1) * len(points) // bins]
    curve.append((statistics.median(p[0] for p in chunk), statistics.median(p[1] for p in chunk)))
print("  gemm_curve: [" + ", ".join(f"[{i:.0f}, {f:.3f}]" for i, f in curve) + "]")

att = sorted((r for r in rows if r["section"] == "attention"), key=lambda r: 2 * r["B"] * r["H"] * r["T"] ** 2 * r["D"])
fwd, bwd = [], []
for r in att:
    flops = 2 * r["B"] * r["H"] * r["T"] ** 2 * r["D"]  # causal forward
    fwd.append((flops / 1e9, flops / r["fwd_s"] / 1e12))
    bwd.append((flops / 1e9, 2.5 * flops / (r["fwd_bwd_s"] - r["fwd_s"]) / 1e12))
print("  attention_forward_curve: [" + ", ".join(f"[{g:.1f}, {t:.0f}]" for g, t in fwd) + "]")
print("  attention_backward_curve: [" + ", ".join(f"[{g:.1f}, {t:.0f}]" for g, t in bwd) + "]")

# Counted traffic per element of [tokens, d], forward (layer_graph.hpp, bf16 = 2 bytes):
# norm reads x writes y (2); activation (GELU) reads and writes (2);
# elementwise (fused bias + dropout + residual add) reads two, writes one (3).
COUNTED = {"layernorm": ("norm", 2), "rmsnorm": ("norm", 2), "gelu_tanh": ("activation", 2), "silu": ("activation", 2),
           "residual_add": ("elementwise", 3)}
largest = max(r["tokens"] * r["d"] for r in rows if r["section"] == "op" and "d" in r)
rates = {}
for r in rows:
    if r["section"] != "op" or r["op"] not in COUNTED or r["tokens"] * r["d"] != largest:
        continue
    cls, elements = COUNTED[r["op"]]
    traffic = 3 * elements * 2 * r["tokens"] * r["d"]
    rates.setdefault(cls, []).append(traffic / r["fwd_bwd_s"] / 1e9)
for cls, values in rates.items():
    print(f"  {cls}: {statistics.median(values):.0f}  ({', '.join(f'{v:.0f}' for v in values)})")
ce = [3 * 10 * r["tokens"] * r["vocab"] / r["fwd_bwd_s"] / 1e9 for r in rows if r.get("op") == "cross_entropy_fp32"]
print(f"  cross_entropy: {statistics.median(ce):.0f}  ({', '.join(f'{v:.0f}' for v in ce)}; 10 bytes per logit forward: bf16 read + fp32 write + fp32 re-read)")
# Optimizer traffic the model counts per parameter (evaluate.cpp): 2 x 12 (master + moments, read and write) + 2 (bf16 gradient) + 2 (bf16 weights) = 28 bytes.
# The measurement ran fp32 params/grads/moments: 16 bytes read-or-written 4 ways counted as 16 per parameter by the benchmark;
# its real traffic is 4 tensors read + 3 written = 28 bytes per parameter.
opt = [28 * r["params"] / r["s"] / 1e9 for r in rows if r.get("op") == "adamw_fused_fp32"]
print(f"  optimizer: {statistics.median(opt):.0f}  ({', '.join(f'{v:.0f}' for v in opt)}; 28 bytes per parameter)")
