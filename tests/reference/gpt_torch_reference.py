#!/usr/bin/python3
"""An independent reference for the executor's GPT: the same model in PyTorch.

The executor's half (gpt_reference_dump.cpp) writes a checkpoint of a tiny
transformer trained by the executor's GPT on one rank, its softmax
probabilities, loss and every gradient for one batch, and the loss, learning
rate and gradient norm of ten optimizer steps of the real trainer. This
script builds the same model from plain PyTorch modules, as the model in
reference.json says: GPT-2 (nn.Embedding with learned positions, nn.LayerNorm,
nn.Linear with biases, GELU with approximate='tanh' as
kernels/cpu/activation.cpp computes it, the output layer tied to wte) or the
Llama family (RMSNorm written out, rotary positions in Hugging Face's
rotate_half convention, grouped-query attention by repeating each key/value
head over its group, SwiGLU or GeGLU, head_dim as stated, no biases, a tied
or untied output layer); loads the weights by reading the checkpoint files as
docs/formats.md "Checkpoints" describes them (checksums and the COMPLETE seal
checked), redoes the batch and the ten steps with torch.optim.AdamW (weight
decay on tensors of rank >= 2 only, clip_grad_norm_, the warmup + cosine
learning rate of executor/train/lr_schedule.hpp), and compares.

Tolerances, all fp32 (relative errors; "rel norm" is |ours - torch| / |torch|
over a whole tensor):
  probabilities rel norm <= 1e-5
  batch loss   rel      <= 1e-5
  gradients    rel norm <= 1e-4 per tensor
  10-step losses rel    <= 1e-5 per step
  gradient norms (before clipping) rel <= 1e-4 per step
  learning rates rel    <= 1e-12 per step (both are the same formula in double)
The batch is also run in float64 to show how far each fp32 implementation is
from the exact value (printed, not asserted).

Exit status: 0 all within tolerance, 1 a difference beyond it or unreadable
output, 77 PyTorch is not importable (CTest reports the test as skipped).
Run with Debian's /usr/bin/python3 (python3-torch).
"""

import argparse
import copy
import json
import math
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

SKIP_EXIT = 77

TOLERANCES = {
    "probs": 1e-5,
    "batch loss": 1e-5,
    "gradient": 1e-4,
    "train loss": 1e-5,
    "grad norm": 1e-4,
    "lr": 1e-12,
}

DUMP_OUTPUTS = ["reference.json", "batch_tokens.i32", "batch_targets.i32", "probs.f32", "grads.f32",
                "train_tokens.i32", "train_targets.i32"]


class ReferenceError(Exception):
    """A dump or checkpoint that cannot be read; the message names the file."""


# ---------------------------------------------------------------- checkpoint

def crc32_text(data):
    return "crc32:%08x" % (zlib.crc32(data) & 0xFFFFFFFF)


def read_checkpoint(directory, np):
    """Reads `directory` (a step-NNNNNN checkpoint) as docs/formats.md describes
    it: COMPLETE present and sealing the manifest's CRC-32, manifest version 1,
    each tensor file of `bytes` bytes with the stated checksum, raw little-endian
    float32 of the full shape. Returns (manifest, {name: ndarray})."""
    directory = Path(directory)
    complete = directory / "COMPLETE"
    if not complete.is_file():
        raise ReferenceError(f"{directory}: incomplete checkpoint (no COMPLETE marker)")
    manifest_path = directory / "manifest.json"
    manifest_bytes = manifest_path.read_bytes()
    sealed = [line[len("manifest "):] for line in complete.read_text().splitlines() if line.startswith("manifest ")]
    if sealed and sealed[0] != crc32_text(manifest_bytes):
        raise ReferenceError(f"{manifest_path}: checksum {crc32_text(manifest_bytes)} does not match COMPLETE's {sealed[0]}")
    manifest = json.loads(manifest_bytes)
    if manifest.get("version") != 1:
        raise ReferenceError(f"{manifest_path}: manifest version {manifest.get('version')!r}, this reader knows 1")
    tensors = {}
    for entry in manifest["tensors"]:
        path = directory / entry["file"]
        if entry["dtype"] != "float32":
            raise ReferenceError(f"{manifest_path}: tensor {entry['name']} has dtype {entry['dtype']}")
        count = math.prod(entry["shape"])
        data = path.read_bytes()
        if len(data) != entry["bytes"] or len(data) != 4 * count:
            raise ReferenceError(f"{path}: {len(data)} bytes, manifest says {entry['bytes']} for shape {entry['shape']}")
        if crc32_text(data) != entry["checksum"]:
            raise ReferenceError(f"{path}: checksum {crc32_text(data)} does not match the manifest's {entry['checksum']}")
        tensors[entry["name"]] = np.frombuffer(data, dtype="<f4").reshape(entry["shape"]).copy()
    return manifest, tensors


# ---------------------------------------------------------------- the model

def build_model_classes(torch):
    nn = torch.nn
    F = torch.nn.functional

    class RMSNorm(nn.Module):
        """x / sqrt(mean(x^2) + eps) * weight (Zhang & Sennrich 2019), as Llama's."""

        def __init__(self, C, eps):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(C))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def make_norm(m):
        C = m["hidden"]
        return RMSNorm(C, m["norm_eps"]) if m["norm"] == "rmsnorm" else nn.LayerNorm(C, eps=m["norm_eps"])

    def rotate(x, theta):
        """Rotary positions on [B, H, T, D], Hugging Face's rotate_half pairing (i, i + D/2)."""
        T, D = x.shape[2], x.shape[3]
        inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
        angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)  # [T, D/2]
        cos = torch.cat((angles.cos(), angles.cos()), dim=-1).to(x.dtype)
        sin = torch.cat((angles.sin(), angles.sin()), dim=-1).to(x.dtype)
        half = torch.cat((-x[..., D // 2:], x[..., :D // 2]), dim=-1)
        return x * cos + half * sin

    class CausalSelfAttention(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.NH, self.KVH, self.D = m["heads"], m["kv_heads"], m["head_dim"]
            self.rotary = m["positions"] == "rotary"
            self.theta = m["rope_theta"]
            Q, K = self.NH * self.D, self.KVH * self.D
            self.qkv = nn.Linear(m["hidden"], Q + 2 * K, bias=m["bias"])
            self.attn_out = nn.Linear(Q, m["hidden"], bias=m["bias"])

        def forward(self, x):
            B, T, _ = x.shape
            Q, K = self.NH * self.D, self.KVH * self.D
            q, k, v = self.qkv(x).split([Q, K, K], dim=2)
            q = q.view(B, T, self.NH, self.D).transpose(1, 2)  # [B, NH, T, D]
            k, v = (t.view(B, T, self.KVH, self.D).transpose(1, 2) for t in (k, v))
            if self.rotary:
                q, k = rotate(q, self.theta), rotate(k, self.theta)
            group = self.NH // self.KVH  # query head h reads key/value head h // group
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.D))
            future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            att = F.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, Q)
            return self.attn_out(y)

    class Block(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.gated = m["mlp"] in ("swiglu", "geglu")
            self.glu_activation = (lambda g: F.gelu(g, approximate="tanh")) if m["mlp"] == "geglu" else F.silu
            FF = m["ffn"]
            self.ln1 = make_norm(m)
            self.attn = CausalSelfAttention(m)
            self.ln2 = make_norm(m)
            self.fc = nn.Linear(m["hidden"], 2 * FF if self.gated else FF, bias=m["bias"])
            self.fc_out = nn.Linear(FF, m["hidden"], bias=m["bias"])

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            h = self.fc(self.ln2(x))
            if self.gated:
                gate, up = h.chunk(2, dim=-1)  # fc's rows: the gate rows, then the up rows
                h = self.glu_activation(gate) * up
            else:
                h = F.gelu(h, approximate="tanh")
            return x + self.fc_out(h)

    class Gpt(nn.Module):
        """A pre-norm decoder: token embedding (plus learned positions for
        GPT-2), the blocks, a final norm, and the output layer (tied to the
        token embedding, or its own lm_head)."""

        def __init__(self, m):
            super().__init__()
            self.m = m
            self.wte = nn.Embedding(m["vocab"], m["hidden"])
            self.wpe = nn.Embedding(m["seq_len"], m["hidden"]) if m["positions"] == "learned" else None
            self.blocks = nn.ModuleList(Block(m) for _ in range(m["layers"]))
            self.ln_f = make_norm(m)
            self.lm_head = None if m["tied_embeddings"] else nn.Linear(m["hidden"], m["vocab"], bias=False)

        def forward(self, tokens):
            T = tokens.shape[1]
            x = self.wte(tokens)
            if self.wpe is not None:
                x = x + self.wpe(torch.arange(T, device=tokens.device))
            for block in self.blocks:
                x = block(x)
            out = self.wte.weight if self.lm_head is None else self.lm_head.weight
            return F.linear(self.ln_f(x), out)

        def by_checkpoint_name(self):
            """Parameter for each tensor name of executor/model/parameters.hpp."""
            named = {"wte": self.wte.weight}
            if self.wpe is not None:
                named["wpe"] = self.wpe.weight
            for l, b in enumerate(self.blocks):
                for short, module in (("ln1", b.ln1), ("qkv", b.attn.qkv), ("attn_out", b.attn.attn_out),
                                      ("ln2", b.ln2), ("fc", b.fc), ("fc_out", b.fc_out)):
                    named[f"layer{l}.{short}.w"] = module.weight
                    if getattr(module, "bias", None) is not None:
                        named[f"layer{l}.{short}.b"] = module.bias
            named["ln_f.w"] = self.ln_f.weight
            if getattr(self.ln_f, "bias", None) is not None:
                named["ln_f.b"] = self.ln_f.bias
            if self.lm_head is not None:
                named["lm_head.w"] = self.lm_head.weight
            return named

    return Gpt


def load_weights(model, tensors, torch):
    named = model.by_checkpoint_name()
    assert len({id(p) for p in named.values()}) == len(list(model.parameters())), "a parameter has no checkpoint name"
    stored = {name for name in tensors if not name.endswith((".adam_m", ".adam_v"))}
    if stored != set(named):
        raise ReferenceError(f"checkpoint tensors {sorted(stored ^ set(named))} do not match the PyTorch model's")
    with torch.no_grad():
        for name, parameter in named.items():
            value = torch.from_numpy(tensors[name])
            if tuple(value.shape) != tuple(parameter.shape):
                raise ReferenceError(f"tensor {name}: checkpoint shape {list(value.shape)}, "
                                     f"PyTorch shape {list(parameter.shape)}")
            parameter.copy_(value)
            for moment in (".adam_m", ".adam_v"):  # a fresh run: AdamW state starts at zero in both
                if tensors[name + moment].any():
                    raise ReferenceError(f"tensor {name}{moment} is not zero at step 0")


def learning_rate_at(step, max_lr, warmup, total, min_lr_fraction):
    """executor/train/lr_schedule.hpp, written again from its comment."""
    min_lr = min_lr_fraction * max_lr
    if step < warmup:
        return max_lr * (step + 1) / warmup
    decay_steps = total - 1 - warmup
    if decay_steps <= 0:
        return min_lr if step >= total else max_lr
    ratio = min(1.0, (step - warmup) / decay_steps)
    return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * ratio))


# ---------------------------------------------------------------- comparison

def rel_norm(ours, reference, np):
    ours, reference = np.asarray(ours, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    scale = np.linalg.norm(reference)
    difference = np.linalg.norm(ours - reference)
    return difference / scale if scale > 0 else (0.0 if difference == 0 else math.inf)


def rel(ours, reference):
    return abs(ours - reference) / abs(reference) if reference != 0 else (0.0 if ours == 0 else math.inf)


def compare(work, torch, np):
    F = torch.nn.functional
    torch.manual_seed(0)
    reference = json.loads((work / "reference.json").read_text())
    m = reference["model"]
    B, T = reference["batch"]["samples"], reference["batch"]["seq_len"]
    V = m["vocab"]
    checkpoints = sorted((work / "checkpoint").glob("step-*"))
    if len(checkpoints) != 1:
        raise ReferenceError(f"{work / 'checkpoint'}: expected one checkpoint, found {len(checkpoints)}")
    manifest, tensors = read_checkpoint(checkpoints[0], np)
    if manifest["step"] != 0 or manifest["extra"]["model"] != m:
        raise ReferenceError(f"{checkpoints[0]}: step {manifest['step']} / model {manifest['extra'].get('model')} "
                             f"is not the dump's step 0 / {m}")

    def ints(name, shape):
        return torch.from_numpy(np.fromfile(work / name, dtype="<i4").reshape(shape).astype(np.int64))

    Gpt = build_model_classes(torch)

    def fresh_model(dtype):
        model = Gpt(m)
        load_weights(model, tensors, torch)
        return model.to(dtype)

    measured = []  # (quantity, measured, tolerance key)

    # One batch: probabilities, loss, gradients; in fp32, and in fp64 for scale.
    tokens, targets = ints("batch_tokens.i32", (B, T)), ints("batch_targets.i32", (B, T))
    our_probs = np.fromfile(work / "probs.f32", dtype="<f4").reshape(B, T, V)
    our_grads_flat = np.fromfile(work / "grads.f32", dtype="<f4")
    runs = {}
    for dtype in (torch.float32, torch.float64):
        model = fresh_model(dtype)
        logits = model(tokens)
        loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
        loss.backward()
        grads = {name: p.grad.detach().numpy().copy() for name, p in model.by_checkpoint_name().items()}
        runs[dtype] = (F.softmax(logits, dim=-1).detach().numpy(), loss.item(), grads)
    torch_probs, torch_loss, torch_grads = runs[torch.float32]
    exact_probs, exact_loss, exact_grads = runs[torch.float64]
    our_loss = reference["batch"]["loss"]

    def our_grad(entry):
        start = entry["offset"]
        return our_grads_flat[start:start + math.prod(entry["shape"])].reshape(entry["shape"])

    gradient_rows = []
    for entry in reference["grads"]:
        name = entry["name"]
        ours = our_grad(entry)
        gradient_rows.append((name, rel_norm(ours, torch_grads[name], np), rel_norm(ours, exact_grads[name], np),
                              rel_norm(torch_grads[name], exact_grads[name], np)))
    if {row[0] for row in gradient_rows} != set(torch_grads):
        raise ReferenceError(f"{work / 'reference.json'}: the gradient layout does not name every parameter")

    measured.append(("probabilities (rel norm)", rel_norm(our_probs, torch_probs, np), "probs",
                     rel_norm(our_probs, exact_probs, np), rel_norm(torch_probs, exact_probs, np)))
    measured.append(("batch loss (rel)", rel(our_loss, torch_loss), "batch loss",
                     rel(our_loss, exact_loss), rel(torch_loss, exact_loss)))
    worst = max(gradient_rows, key=lambda row: row[1])
    measured.append((f"gradients, worst tensor {worst[0]} (rel norm)", worst[1], "gradient",
                     max(row[2] for row in gradient_rows), max(row[3] for row in gradient_rows)))

    # Ten AdamW steps on the recorded batches.
    t = reference["train"]
    steps, M, micro = t["steps"], t["micro_batches"], t["micro_batch"]
    train_tokens = ints("train_tokens.i32", (steps, M, micro, T))
    train_targets = ints("train_targets.i32", (steps, M, micro, T))
    model = fresh_model(torch.float32)
    named = model.by_checkpoint_name()
    decay = [p for p in named.values() if p.dim() >= 2]
    no_decay = [p for p in named.values() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": t["weight_decay"]},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=t["learning_rate"], betas=(t["beta1"], t["beta2"]), eps=t["eps"])
    step_rows = []
    for step in range(steps):
        lr = learning_rate_at(step, t["learning_rate"], t["warmup_steps"], steps, t["min_lr_fraction"])
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=False)
        loss_sum = 0.0
        for k in range(M):
            logits = model(train_tokens[step, k])
            loss = F.cross_entropy(logits.reshape(-1, V), train_targets[step, k].reshape(-1))
            (loss / M).backward()
            loss_sum += loss.item()
        norm = torch.nn.utils.clip_grad_norm_(list(named.values()), t["max_grad_norm"]).item()
        optimizer.step()
        record = t["records"][step]
        if record["step"] != step:
            raise ReferenceError(f"{work / 'reference.json'}: train record {step} is for step {record['step']}")
        step_rows.append((step, record["loss"], loss_sum / M, record["lr"], lr, record["grad_norm"], norm))
    if len(t["records"]) != steps:
        raise ReferenceError(f"{work / 'reference.json'}: {len(t['records'])} train records for {steps} steps")
    measured.append(("10-step losses (rel, worst step)", max(rel(r[1], r[2]) for r in step_rows), "train loss"))
    measured.append(("gradient norms before clipping (rel)", max(rel(r[5], r[6]) for r in step_rows), "grad norm"))
    measured.append(("learning rates (rel)", max(rel(r[3], r[4]) for r in step_rows), "lr"))
    return measured, gradient_rows, step_rows, our_loss


def print_report(measured, gradient_rows, step_rows, our_loss):
    print(f"batch loss: executor {our_loss:.9g}")
    print("\nper-tensor gradients, rel norm error: executor vs torch fp32 | executor vs fp64 | torch fp32 vs fp64")
    for name, vs_torch, ours_exact, torch_exact in gradient_rows:
        print(f"  {name:<22} {vs_torch:10.3e}   {ours_exact:10.3e}   {torch_exact:10.3e}")
    clipped = sum(1 for r in step_rows if r[5] > 1.0)
    print(f"\ntraining steps (AdamW; {clipped} of {len(step_rows)} steps clipped):")
    print(f"  {'step':>4} {'loss executor':>15} {'loss torch':>15} {'rel':>10} {'lr':>11} {'norm executor':>14} {'norm torch':>12}")
    for step, ours, theirs, lr, _, norm_ours, norm_theirs in step_rows:
        print(f"  {step:>4} {ours:15.9f} {theirs:15.9f} {rel(ours, theirs):10.3e} {lr:11.4e} {norm_ours:14.7f} {norm_theirs:12.7f}")
    print("\nmeasured maxima (executor vs PyTorch fp32; fp64 columns for scale, not asserted):")
    print(f"  {'quantity':<52} {'measured':>10} {'tolerance':>10}  {'ok':<4} {'ours-fp64':>10} {'torch-fp64':>10}")
    failed = []
    for row in measured:
        quantity, value, key = row[:3]
        ok = value <= TOLERANCES[key]
        extra = f"{row[3]:10.3e} {row[4]:10.3e}" if len(row) > 3 else ""
        print(f"  {quantity:<52} {value:10.3e} {TOLERANCES[key]:10.1e}  {'yes' if ok else 'NO':<4} {extra}")
        if not ok:
            failed.append(quantity)
    worst_gradients = [name for name, vs_torch, *_ in gradient_rows if vs_torch > TOLERANCES["gradient"]]
    if worst_gradients:
        print(f"\ngradients beyond {TOLERANCES['gradient']:g}: {', '.join(worst_gradients)}")
    return failed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump-program", help="gpt_reference_dump; run first, writing into --work-dir")
    parser.add_argument("--model", help="model YAML for the dump program")
    parser.add_argument("--work-dir", required=True, help="where the dump is (or is written)")
    args = parser.parse_args()

    try:
        import numpy as np
        import torch
    except ImportError as error:
        print(f"SKIPPED: PyTorch is not importable from {sys.executable} ({error}); "
              "install Debian's python3-torch (scripts/install-deps.sh does)")
        return SKIP_EXIT
    torch.set_num_threads(1)

    work = Path(args.work_dir)
    if args.dump_program:
        if not args.model:
            parser.error("--dump-program needs --model")
        shutil.rmtree(work / "checkpoint", ignore_errors=True)
        for name in DUMP_OUTPUTS:
            (work / name).unlink(missing_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([args.dump_program, args.model, str(work)])
        if done.returncode == SKIP_EXIT:  # the GPU build without a GPU: it said why
            return SKIP_EXIT
        if done.returncode != 0:
            print(f"FAILED: {args.dump_program} exited with {done.returncode}")
            return 1
    try:
        measured, gradient_rows, step_rows, our_loss = compare(work, torch, np)
    except (ReferenceError, OSError, KeyError, ValueError) as error:
        print(f"FAILED: cannot read the executor's output: {error!r}")
        return 1
    failed = print_report(measured, gradient_rows, step_rows, our_loss)
    if failed:
        print(f"\nFAILED: beyond tolerance: {'; '.join(failed)}")
        return 1
    print(f"\nPASSED: torch {torch.__version__}, every quantity within tolerance")
    return 0


if __name__ == "__main__":
    sys.exit(main())
