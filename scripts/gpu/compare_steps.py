#!/usr/bin/env python3
"""Compares measured single-GPU training steps (scripts/gpu/measure_steps.py)
with `meshplan explain` on the same model, sequence, micro-batch, recompute
and attention, and prints a Markdown table: step time and peak memory,
measured and predicted, and the errors (predicted over measured, minus one).

Peak memory measured is the device's used memory at the end of the steps
(torch.cuda.mem_get_info: the CUDA context, the caching allocator's
reserved pool and library workspaces), which is what meshplan's `total`
counts; the allocator's own peaks are printed beside it.

Usage: scripts/gpu/compare_steps.py STEPS.jsonl [--meshplan build/release/cli/meshplan] [--cluster dgx-h200] [--json OUT]
"""
import argparse
import json
import statistics
import os
import re
import subprocess
import sys
import tempfile

GIB = 1024.0 ** 3
PRESETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "presets", "models")


def model_arg(row, tmp):
    """The preset, or a copy whose learned position table is as long as the
    measured sequence (what measure_steps.py builds: wpe has seq rows)."""
    path = os.path.join(PRESETS, row["model"] + ".yaml")
    text = open(path).read()
    m = re.search(r"^seq_len:\s*(\d+)", text, re.M)
    if m and int(m.group(1)) >= row["seq"]:
        return row["model"]
    copy = os.path.join(tmp, f"{row['model']}-seq{row['seq']}.yaml")
    with open(copy, "w") as f:
        f.write(re.sub(r"^seq_len:.*$", f"seq_len: {row['seq']}", text, flags=re.M))
    return copy


def explain(meshplan, cluster, row, tmp, loss="eager"):
    b = str(row["micro_batch"])
    cmd = [meshplan, "explain", "--model", model_arg(row, tmp), "--cluster", cluster, "--gpus", "1", "--mesh", "dp=1",
           "--micro-batch", b, "--global-batch", b, "--seq", str(row["seq"]), "--recompute", row["recompute"],
           "--attention", "fused", "--precision", "bf16", "--loss", loss, "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr}")
    return cmd, json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("steps")
    ap.add_argument("--meshplan", default="build/release/cli/meshplan")
    ap.add_argument("--cluster", default=None, help="default: dgx-h200 for an H200, dgx-h100 otherwise")
    ap.add_argument("--json", help="also write the rows with predictions as JSON lines")
    args = ap.parse_args()
    rows = [json.loads(l) for l in open(args.steps) if l.strip()]
    device = rows[0]
    cluster = args.cluster or ("dgx-h200" if "H200" in device.get("name", "") else "dgx-h100")
    # Step time: the fastest of eager and compiled for each case, as the
    # validation target asks. Memory: the eager run (the unfused stack the
    # memory model describes) and the fastest run, both shown.
    # Memory of the "compile" run (every block and the loss compiled) against
    # the prediction with --loss fused: the compiled loss keeps bf16 logits.
    best, eager, compiled = {}, {}, {}
    failed = []
    for r in rows[1:]:
        key = (r["model"], r["seq"], r["micro_batch"], r["recompute"])
        if "error" in r:
            failed.append(r)
            continue
        if key not in best or r["step_s"] < best[key]["step_s"]:
            best[key] = r
        if r["mode"] == "eager":
            eager[key] = r
        if r["mode"] == "compile":
            compiled[key] = r
    print(f"Device: {device.get('name')}, torch {device.get('torch')}; meshplan cluster {cluster}\n")
    print("| model | seq | b | recompute | fastest | step measured | predicted | error | memory eager (GiB) | "
          "predicted, eager loss | error | memory compiled | predicted, fused loss | error | fits? |")
    print("|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    t_err, m_err, m_fused_err, out = [], [], [], []
    tmp = tempfile.mkdtemp(prefix="compare_steps.")
    for key, r in best.items():
        cmd, j = explain(args.meshplan, cluster, r, tmp)
        t_pred = j["time_s"]["step"]
        m_pred = j["memory_bytes"]["total"]
        te = t_pred / r["step_s"] - 1
        if r["mode"] != "eager":  # an eager-only case is not "the faster of eager and compiled"
            t_err.append(abs(te))
        e = eager.get(key)
        me = m_pred / e["device_used_bytes"] - 1 if e else None
        if me is not None:
            m_err.append(abs(me))
        c = compiled.get(key)
        m_fused = explain(args.meshplan, cluster, r, tmp, "fused")[1]["memory_bytes"]["total"] if c else None
        mc = m_fused / c["device_used_bytes"] - 1 if c else None
        if mc is not None:
            m_fused_err.append(abs(mc))
        fits = "yes" if j.get("fits_memory", True) else "**no**"
        cells = [r["model"], r["seq"], r["micro_batch"], r["recompute"], r["mode"], f"{r['step_s']*1e3:.1f} ms",
                 f"{t_pred*1e3:.1f} ms", f"{te*100:+.1f}%",
                 f"{e['device_used_bytes']/GIB:.2f}" if e else "-", f"{m_pred/GIB:.2f}",
                 f"{me*100:+.1f}%" if me is not None else "-",
                 f"{c['device_used_bytes']/GIB:.2f}" if c else "-", f"{m_fused/GIB:.2f}" if c else "-",
                 f"{mc*100:+.1f}%" if mc is not None else "-", fits]
        print("| " + " | ".join(str(x) for x in cells) + " |")
        out.append(dict(r, predicted_step_s=t_pred, predicted_memory_bytes=m_pred,
                        predicted_memory_fused_loss_bytes=m_fused, explain=" ".join(cmd[1:])))
    for r in failed:
        print(f"| {r['model']} | {r['seq']} | {r['micro_batch']} | {r['recompute']} | {r['mode']}: {r['error']} | | | | | | | | |")
    if t_err:
        print(f"\nStep time against the faster of eager and compiled ({len(t_err)} cases with both): median |error| "
              f"{statistics.median(t_err)*100:.1f}%, worst {max(t_err)*100:.1f}%.", end="")
    if m_err:
        print(f" Peak memory against the eager run (--loss eager): median |error| {statistics.median(m_err)*100:.1f}%, "
              f"worst {max(m_err)*100:.1f}% ({len(m_err)} cases).", end="")
    if m_fused_err:
        print(f" Against the compiled run (--loss fused): median |error| {statistics.median(m_fused_err)*100:.1f}%, "
              f"worst {max(m_fused_err)*100:.1f}% ({len(m_fused_err)} cases).", end="")
    print()
    if args.json:
        with open(args.json, "w") as f:
            for o in out:
                f.write(json.dumps(o) + "\n")


if __name__ == "__main__":
    main()
