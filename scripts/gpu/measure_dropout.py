#!/usr/bin/env python3
"""What dropout costs on a GPU, in the JSON-lines format of measure_device.py
(`meshplan calibrate --from` reads the attention_dropout rows): causal
scaled_dot_product_attention with dropout_p 0.1 and without, on the same
shapes, each on the backend PyTorch picks for it (without dropout the
fastest it has, e.g. cuDNN's on Hopper; with dropout one that can draw the
mask, the flash kernel), which is what a training step gets; and eager
dropout (mask drawn, applied, saved for the backward) as a memory-bound op.

Usage: python3 scripts/gpu/measure_dropout.py OUT.jsonl
"""
import json
import sys

import torch
import torch.nn.functional as F

from measure_device import ATTENTION, OP_SIZES, time_ms

DEV = "cuda"


def main():
    out = open(sys.argv[1], "w")
    torch.manual_seed(0)
    for B, H, T, D in ATTENTION + [(8, 25, 2048, 64), (16, 12, 1024, 64)]:
        q, k, v = (torch.randn(B, H, T, D, device=DEV, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        g = torch.randn(B, H, T, D, device=DEV, dtype=torch.bfloat16)
        times = {}
        for p in (0.0, 0.1):
            def fwd(p=p):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)

            def fwd_bwd(p=p):
                torch.autograd.grad(fwd(p), (q, k, v), g)

            times[p] = (time_ms(fwd)[0] / 1e3, time_ms(fwd_bwd)[0] / 1e3)
        row = {"section": "attention_dropout", "B": B, "H": H, "T": T, "D": D, "dropout": 0.1,
               "fwd_s": times[0.0][0], "fwd_bwd_s": times[0.0][1], "dropout_fwd_s": times[0.1][0],
               "dropout_fwd_bwd_s": times[0.1][1]}
        out.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
    for tokens, d in OP_SIZES:
        x = torch.randn(tokens, d, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        g = torch.randn(tokens, d, device=DEV, dtype=torch.bfloat16)
        with torch.no_grad():
            f_med, _ = time_ms(lambda: F.dropout(x, 0.1, training=True))
        fb_med, _ = time_ms(lambda: torch.autograd.grad(F.dropout(x, 0.1, training=True), (x,), g))
        row = {"section": "op", "op": "dropout", "tokens": tokens, "d": d, "fwd_s": f_med / 1e3, "fwd_bwd_s": fb_med / 1e3}
        out.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
