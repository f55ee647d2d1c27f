#!/usr/bin/env python3
"""Our CUDA kernels against PyTorch's on the same GPU, shape by shape.

Reads two files of measurement rows in the format `meshplan calibrate --from`
reads: OURS from `meshplan calibrate --backend cuda --jsonl OURS` (cuBLASLt
GEMMs, our flash attention, our memory-bound kernels, our multi-tensor AdamW)
and TORCH from `scripts/gpu/measure_device.py TORCH` (PyTorch's GEMMs, SDPA,
its ops, fused AdamW), measured on the same card in one run. Prints one
markdown table: the shape, both times and torch/ours (above 1: ours is
faster). Rows that only one side measured are left out and counted.

usage: compare_with_torch.py OURS.jsonl TORCH.jsonl
"""
import json
import statistics
import sys


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def keyed(rows):
    """(section, shape) -> {measure: seconds}. Our token ops run fp32 and PyTorch's bf16 (half the bytes):
    their ratio says how far ours are from PyTorch's, not which is the better kernel."""
    out = {}
    for r in rows:
        s = r.get("section")
        if s == "gemm":
            out[("gemm", f"{r['m']}x{r['k']}x{r['n']}")] = {"s": r["s_med"]}
        elif s == "attention":
            shape = f"B{r['B']} H{r['H']} T{r['T']} D{r['D']}"
            out[("attention", shape)] = {"fwd": r["fwd_s"], "fwd+bwd": r["fwd_bwd_s"]}
        elif s == "op" and "tokens" in r and "d" in r:
            out[("op " + r["op"], f"{r['tokens']}x{r['d']}")] = {"fwd": r["fwd_s"], "fwd+bwd": r["fwd_bwd_s"]}
        elif s == "op" and r.get("op") in ("cross_entropy_compiled", "cross_entropy_fp32"):
            out[("cross entropy", f"{r['tokens']}x{r['vocab']}")] = {"fwd": r["fwd_s"], "fwd+bwd": r["fwd_bwd_s"]}
        elif s == "op" and r.get("op") == "adamw_fused_fp32":
            out[("adamw", f"{r['params']} params")] = {"step": r["s"]}
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ours, torch = keyed(load(sys.argv[1])), keyed(load(sys.argv[2]))
    both = [k for k in ours if k in torch]
    print("| kernel | shape | measure | ours (ms) | PyTorch (ms) | PyTorch / ours |")
    print("|---|---|---|---:|---:|---:|")
    by_kind = {}
    for key in both:
        for measure, t_ours in ours[key].items():
            t_torch = torch[key].get(measure)
            if t_torch is None or t_ours <= 0:
                continue
            ratio = t_torch / t_ours
            by_kind.setdefault(key[0], []).append(ratio)
            print(f"| {key[0]} | {key[1]} | {measure} | {t_ours * 1e3:.4f} | {t_torch * 1e3:.4f} | {ratio:.2f} |")
    print()
    print("| kernel | rows | median PyTorch / ours | worst |")
    print("|---|---:|---:|---:|")
    for kind, ratios in sorted(by_kind.items()):
        print(f"| {kind} | {len(ratios)} | {statistics.median(ratios):.2f} | {min(ratios):.2f} |")
    only = len(set(ours) ^ set(torch))
    if only:
        print(f"\n{only} shapes measured on one side only, left out.")


if __name__ == "__main__":
    main()
