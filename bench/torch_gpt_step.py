#!/usr/bin/python3
"""One training step of a GPT-2-small-shaped model in PyTorch, in tokens/s.

The PyTorch side of bench/compare_gpt_step.sh; bench/bench_gpt_step.cpp is the
executor's. The model is the class the reference test
(tests/reference/gpt_torch_reference.py) checks against the executor to 1e-4,
so both programs time the same computation: fp32, dropout off, tied output
layer, GELU tanh; the step is forward, cross-entropy, backward,
clip_grad_norm_(1.0) and torch.optim.AdamW (weight decay 0.1 on rank >= 2
tensors) on uniform random tokens, as the executor's trainer does it.
torch.set_num_threads(--threads); the compare script also sets
OMP_NUM_THREADS and OPENBLAS_NUM_THREADS (PyTorch's matmuls run in the same
OpenBLAS as the executor's on Debian).

Prints a table and a last line "result: tokens_per_s=... step_s=...".
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "reference"))
from gpt_torch_reference import build_model_classes  # noqa: E402

GPT2_SMALL = {"layers": 12, "hidden": 768, "heads": 12, "ffn": 3072, "vocab": 50257, "seq_len": 1024}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)

    m = GPT2_SMALL
    Gpt = build_model_classes(torch)
    model = Gpt(m["vocab"], m["seq_len"], m["layers"], m["heads"], m["hidden"], m["ffn"])
    params = list(model.by_checkpoint_name().values())
    with torch.no_grad():  # GPT-2's initialisation, as the executor's (N(0, 0.02) matrices); keeps the loss sane
        for p in params:
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
    optimizer = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                                   {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                                  lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    V = m["vocab"]
    times, cpu_times = [], []
    for step in range(args.warmup + args.steps):
        start, cpu_start = time.perf_counter(), time.process_time()
        tokens = torch.randint(V, (args.batch, args.seq))
        targets = torch.randint(V, (args.batch, args.seq))
        optimizer.zero_grad(set_to_none=False)
        loss = torch.nn.functional.cross_entropy(model(tokens).reshape(-1, V), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        print(f"  step {step}: {seconds:.3f} s, loss {loss.item():.4f}", file=sys.stderr)
        if step >= args.warmup:
            times.append(seconds)
            cpu_times.append(cpu_seconds)
    median, median_cpu = statistics.median(times), statistics.median(cpu_times)
    tokens_per_step = args.batch * args.seq
    count = sum(p.numel() for p in params)
    print(f"{'impl':<10} {'model':<12} {'params':>10} {'B':>3} {'T':>5} {'threads':>8} {'steps':>6} "
          f"{'min_step_s':>12} {'median_s':>12} {'cpu_s':>12} {'tokens_per_s':>14}")
    print(f"{'pytorch':<10} {'gpt2-124m':<12} {count / 1e6:9.1f}M {args.batch:>3} {args.seq:>5} "
          f"{torch.get_num_threads():>8} {len(times):>6} {min(times):12.3f} {median:12.3f} {median_cpu:12.3f} "
          f"{tokens_per_step / median:14.1f}")
    print(f"result: tokens_per_s={tokens_per_step / median:.1f} step_s={median:.4f} min_step_s={min(times):.4f} "
          f"cpu_s={median_cpu:.4f} torch={torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
