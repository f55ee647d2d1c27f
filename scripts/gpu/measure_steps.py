#!/usr/bin/env python3
"""Times real single-GPU training steps of meshplan's model presets with PyTorch,
for the validation page's single-GPU section (docs/validation.md).

Each case builds the preset's model (presets/models/NAME.yaml: the same layers,
widths, heads, kv heads, vocabulary, norm, MLP, positions, biases, tied head
and dropout meshplan plans with), and trains it the way people train on one
GPU today: fp32 master weights under torch.autocast(bfloat16), causal
scaled_dot_product_attention forced onto the flash kernel, fused AdamW, and
`--recompute full` as torch.utils.checkpoint around every block. One
micro-batch per step, no accumulation. After 3 warm-up steps it times 10
steps with CUDA events (median) and reads the caching allocator's peaks.

One JSON line per case: model, seq, micro_batch, recompute, mode (eager or
compile), step_s (median), peak_allocated_bytes, peak_reserved_bytes,
device_used_bytes (total minus free after the steps: context, allocator
reserve and library workspaces), or "error" (e.g. out of memory).

Usage: python3 scripts/gpu/measure_steps.py OUT.jsonl [--deadline SECONDS] [--cases FILE] [--device cpu]
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as ckpt
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
PRESETS = os.path.join(HERE, "..", "..", "presets", "models")

# (preset, sequence, micro-batch, recompute). Sequences 1024-2048, GPT-2
# 124M-1.5B and Llama-style 1B-3B, both recompute settings; the last GPT-2 row
# is sized near the H200's capacity to test the fit boundary.
DEFAULT_CASES = [
    ("gpt2-124m", 1024, 16, "none"), ("gpt2-124m", 1024, 16, "full"),
    ("gpt2-350m", 1024, 16, "none"), ("gpt2-350m", 1024, 16, "full"),
    ("gpt2-774m", 1024, 16, "none"), ("gpt2-774m", 2048, 8, "full"),
    ("gpt2-1.5b", 1024, 8, "none"), ("gpt2-1.5b", 1024, 8, "full"),
    ("gpt2-1.5b", 2048, 8, "none"), ("gpt2-1.5b", 2048, 8, "full"),
    ("gpt2-1.5b", 2048, 16, "none"),
    ("llama3.2-1b", 2048, 8, "none"), ("llama3.2-1b", 2048, 8, "full"),
    ("llama3.2-3b", 2048, 4, "none"), ("llama3.2-3b", 2048, 4, "full"),
    ("llama3.2-3b", 2048, 16, "full"),
]


def FLASH():
    if torch.cuda.is_available():
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel([SDPBackend.FLASH_ATTENTION])
    return contextlib.nullcontext()


def load_preset(name):
    with open(os.path.join(PRESETS, name + ".yaml")) as f:
        m = yaml.safe_load(f)
    m.setdefault("kv_heads", m["heads"])
    m.setdefault("head_dim", m["hidden"] // m["heads"])
    m.setdefault("dropout", 0.0)
    m.setdefault("rope_theta", 10000.0)
    return m


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, 1e-5)


def norm(m, d):
    return nn.LayerNorm(d, bias=m["bias"]) if m["norm"] == "layernorm" else RMSNorm(d)


def rotate(x, cos, sin):  # rotate-half RoPE, as in Hugging Face's Llama
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Block(nn.Module):
    def __init__(self, m):
        super().__init__()
        h, hd, nh, nkv, ffn, b = m["hidden"], m["head_dim"], m["heads"], m["kv_heads"], m["ffn"], m["bias"]
        self.m = m
        self.n1, self.n2 = norm(m, h), norm(m, h)
        self.qkv = nn.Linear(h, (nh + 2 * nkv) * hd, bias=b)
        self.proj = nn.Linear(nh * hd, h, bias=b)
        gated = m["mlp"] in ("swiglu", "geglu")
        self.up = nn.Linear(h, (2 if gated else 1) * ffn, bias=b)
        self.down = nn.Linear(ffn, h, bias=b)
        self.p = m["dropout"]

    def attention(self, x, rope):
        B, T, _ = x.shape
        m = self.m
        nh, nkv, hd = m["heads"], m["kv_heads"], m["head_dim"]
        q, k, v = self.qkv(x).split([nh * hd, nkv * hd, nkv * hd], dim=-1)
        q = q.view(B, T, nh, hd).transpose(1, 2)
        k = k.view(B, T, nkv, hd).transpose(1, 2)
        v = v.view(B, T, nkv, hd).transpose(1, 2)
        if rope is not None:
            q, k = rotate(q, *rope), rotate(k, *rope)
        if nkv != nh:
            k = k.repeat_interleave(nh // nkv, dim=1)
            v = v.repeat_interleave(nh // nkv, dim=1)
        # The flash kernel is forced here, not around the step, so that
        # checkpoint's recompute in the backward uses it too. Compiled blocks
        # leave the choice to Inductor (flash for causal bf16 on sm80+).
        with FLASH() if not torch.compiler.is_compiling() else contextlib.nullcontext():
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.p if self.training else 0.0)
        return F.dropout(self.proj(y.transpose(1, 2).reshape(B, T, nh * hd)), self.p, self.training)

    def mlp(self, x):
        u = self.up(x)
        act = self.m["mlp"]
        if act == "swiglu":
            g, u = u.chunk(2, dim=-1)
            u = F.silu(g) * u
        elif act == "geglu":
            g, u = u.chunk(2, dim=-1)
            u = F.gelu(g, approximate="tanh") * u
        elif act == "relu":
            u = F.relu(u)
        else:
            u = F.gelu(u, approximate="tanh")
        return F.dropout(self.down(u), self.p, self.training)

    def forward(self, x, rope):
        x = x + self.attention(self.n1(x), rope)
        return x + self.mlp(self.n2(x))


class Decoder(nn.Module):
    def __init__(self, m, seq, recompute):
        super().__init__()
        self.m, self.recompute = m, recompute
        h = m["hidden"]
        self.wte = nn.Embedding(m["vocab"], h)
        self.wpe = nn.Embedding(seq, h) if m["positions"] == "learned" else None
        self.blocks = nn.ModuleList(Block(m) for _ in range(m["layers"]))
        self.nf = norm(m, h)
        self.head = None if m["tied_embeddings"] else nn.Linear(h, m["vocab"], bias=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)
        self.rope = None
        if m["positions"] == "rotary":
            hd = m["head_dim"]
            inv = 1.0 / (float(m["rope_theta"]) ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
            ang = torch.outer(torch.arange(seq, dtype=torch.float32), inv)
            ang = torch.cat((ang, ang), dim=-1)
            self.register_buffer("cos", ang.cos(), persistent=False)
            self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, idx):
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        x = F.dropout(x, self.m["dropout"], self.training)
        rope = (self.cos, self.sin) if self.m["positions"] == "rotary" else None
        for blk in self.blocks:
            if self.recompute == "full":
                x = ckpt.checkpoint(blk, x, rope, use_reentrant=False)
            else:
                x = blk(x, rope)
        return x

    def loss(self, x, targets):
        """Final norm, output layer and cross-entropy (autocast runs it in fp32)."""
        x = self.nf(x)
        logits = F.linear(x, self.wte.weight) if self.head is None else self.head(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def run_case(model_name, seq, micro_batch, recompute, mode, dev, dropout=None):
    m = load_preset(model_name)
    if dropout is not None:
        m["dropout"] = dropout
    torch.manual_seed(0)
    with torch.device(dev):
        model = Decoder(m, seq, recompute)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=(dev == "cuda"))
    # compile: each block compiled on its own (as torchtitan does; one graph
    # serves every layer) and the loss (final norm, head, cross-entropy) as
    # one compiled function; compile-model: the whole model in one graph.
    loss_fn = model.loss
    step_model = model
    if mode == "compile":
        torch._dynamo.config.cache_size_limit = 256
        for blk in model.blocks:
            blk.compile()
        loss_fn = torch.compile(model.loss)
    elif mode == "compile-model":
        step_model = torch.compile(model)
    V = m["vocab"]
    gen = torch.Generator(device=dev).manual_seed(1)
    batches = [torch.randint(0, V, (micro_batch, seq + 1), device=dev, generator=gen) for _ in range(2)]
    cuda = dev == "cuda"

    def step(i):
        data = batches[i % 2]
        x, y = data[:, :-1], data[:, 1:]
        with torch.autocast(dev, dtype=torch.bfloat16):
            loss = loss_fn(step_model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    warmup, reps = (3, 10) if cuda else (1, 2)
    for i in range(warmup):
        loss = step(i)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(reps):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            loss = step(i)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        else:
            t = time.perf_counter()
            loss = step(i)
            times.append(time.perf_counter() - t)
    row = {"model": model_name, "seq": seq, "micro_batch": micro_batch, "recompute": recompute, "mode": mode,
           "dropout": m["dropout"], "params": n_params, "step_s": statistics.median(times), "step_s_min": min(times), "loss": float(loss.detach())}
    if cuda:
        free, total = torch.cuda.mem_get_info()
        row.update(peak_allocated_bytes=torch.cuda.max_memory_allocated(), peak_reserved_bytes=torch.cuda.max_memory_reserved(),
                   device_used_bytes=total - free)
    # Model FLOPs (6 N tokens + causal attention 6 L s^2 h_attn per sequence, forward+backward, no recompute).
    attn = 6 * m["layers"] * seq * seq * m["heads"] * m["head_dim"] * micro_batch
    row["model_tflops_per_s"] = (6 * n_params * seq * micro_batch + attn) / row["step_s"] / 1e12
    del model, opt, step_model, batches
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--deadline", type=float, default=330, help="seconds after which no further case starts")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--cases", help="JSON list of [model, seq, micro_batch, recompute] (default: the built-in list)")
    ap.add_argument("--dropout", type=float, help="override the presets' dropout (e.g. 0 to time GPT-2 without it)")
    ap.add_argument("--modes", default="eager,compile", help="comma-separated: eager, compile (per block), compile-model")
    args = ap.parse_args()
    cases = json.load(open(args.cases)) if args.cases else DEFAULT_CASES
    start = time.time()
    plan = [(c, mode) for mode in args.modes.split(",") for c in cases]
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.cuda.init()
        free, total = torch.cuda.mem_get_info()
        base = {"section": "device", "name": torch.cuda.get_device_name(0), "total_bytes": total,
                "used_after_init_bytes": total - free, "torch": torch.__version__}
    else:
        base = {"section": "device", "name": "cpu", "torch": torch.__version__}
    with open(args.out, "w") as out:
        out.write(json.dumps(base) + "\n")
        for (model_name, seq, mb, rc), mode in plan:
            if time.time() - start > args.deadline:
                print(f"deadline: skipping {model_name} s{seq} b{mb} {rc} {mode}", flush=True)
                continue
            t0 = time.time()
            try:
                row = run_case(model_name, seq, mb, rc, mode, args.device, args.dropout)
            except torch.OutOfMemoryError as e:
                row = {"model": model_name, "seq": seq, "micro_batch": mb, "recompute": rc, "mode": mode,
                       "error": "out of memory", "detail": str(e).splitlines()[0]}
            except Exception as e:  # reported, not hidden: the row says what failed
                row = {"model": model_name, "seq": seq, "micro_batch": mb, "recompute": rc, "mode": mode,
                       "error": type(e).__name__, "detail": str(e)[:300]}
            row["wall_s"] = time.time() - t0
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(json.dumps(row), flush=True)
            if args.device == "cuda":
                import gc
                gc.collect()
                torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
