#!/usr/bin/env python3
"""What the loss costs on a GPU in eager and compiled PyTorch: cross-entropy
over bf16 logits (upcast to fp32, as autocast does), forward and forward +
backward, eager and under torch.compile (one fused kernel that never writes
fp32 logits), with the peak memory each allocates beyond its inputs.

Rows: {"section": "op", "op": "cross_entropy_fp32" | "cross_entropy_compiled",
tokens, vocab, fwd_s, fwd_bwd_s, extra_bytes}. `meshplan calibrate --from`
reads the first; the second is recorded for the cost model's known gaps
(docs/validation-h200.md).

Usage: python3 scripts/gpu/measure_loss.py OUT.jsonl
"""
import json
import sys

import torch
import torch.nn.functional as F

from measure_device import time_ms

DEV = "cuda"


def loss(logits, target):
    return F.cross_entropy(logits.float(), target)


def main():
    out = open(sys.argv[1], "w")
    compiled = torch.compile(loss)
    for tokens, vocab in [(8192, 50257), (16384, 50257), (16384, 128256)]:
        logits = torch.randn(tokens, vocab, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        target = torch.randint(0, vocab, (tokens,), device=DEV)
        for name, fn in (("cross_entropy_fp32", loss), ("cross_entropy_compiled", compiled)):
            def fwd_bwd(fn=fn):
                torch.autograd.grad(fn(logits, target), (logits,))

            fwd_bwd()  # compiles, for the compiled one
            with torch.no_grad():
                f_med, _ = time_ms(lambda: fn(logits, target), reps=10)
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            fb_med, _ = time_ms(fwd_bwd, reps=10)
            extra = torch.cuda.max_memory_allocated() - base
            row = {"section": "op", "op": name, "tokens": tokens, "vocab": vocab, "fwd_s": f_med / 1e3,
                   "fwd_bwd_s": fb_med / 1e3, "extra_bytes": extra}
            out.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
        del logits
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
