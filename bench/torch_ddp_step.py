#!/usr/bin/python3
"""Data-parallel GPT training steps in PyTorch DistributedDataParallel (gloo), in tokens/s.

The PyTorch side of bench/ddp_compare.sh; `meshplan train` on a dp plan under
mpirun is the executor's. The model is the class the reference test
(tests/reference/gpt_torch_reference.py) checks against the executor, built at
the shape of presets/models/gpt-byte-10m.yaml by default: fp32, dropout off,
tied output layer, GELU tanh. Each of --ranks processes (torch.multiprocessing
spawn, gloo over localhost) runs forward, cross-entropy, backward (DDP's
bucketed all-reduce, bucket_cap_mb 25, overlapping the backward),
clip_grad_norm_(1.0) and AdamW on uniform random tokens (throughput only), its
share --global-batch / --ranks of the sequences, with torch.set_num_threads(--threads).

Rank 0 times each step (the ranks end a step together: DDP's all-reduce waits
for both) and prints a table and a last line "result: tokens_per_s=... step_s=...".
"""

import argparse
import os
import socket
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "reference"))
from gpt_torch_reference import build_model_classes  # noqa: E402

GPT_BYTE_10M = {"layers": 6, "hidden": 384, "heads": 6, "ffn": 1536, "vocab": 256, "seq_len": 256}


def worker(rank, args, port, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    m = GPT_BYTE_10M
    Gpt = build_model_classes(torch)
    model = Gpt(m["vocab"], m["seq_len"], m["layers"], m["heads"], m["hidden"], m["ffn"])
    with torch.no_grad():  # GPT-2's initialisation, as the executor's (N(0, 0.02) matrices)
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    params = list(ddp.parameters())
    optimizer = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": args.weight_decay},
                                   {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    V, T = m["vocab"], args.seq
    local_batch = args.global_batch // args.ranks
    generator = torch.Generator().manual_seed(100 + rank)
    times = []
    for step in range(args.warmup + args.steps):
        tokens = torch.randint(V, (local_batch, T), generator=generator)
        targets = torch.randint(V, (local_batch, T), generator=generator)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=False)
        loss = torch.nn.functional.cross_entropy(ddp(tokens).reshape(-1, V), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        seconds = time.perf_counter() - start
        if rank == 0:
            print(f"  step {step}: {seconds:.3f} s, loss {loss.item():.4f}", file=sys.stderr)
        if step >= args.warmup:
            times.append(seconds)
    if rank == 0:
        queue.put((times, sum(p.numel() for p in model.parameters())))
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--global-batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1, help="per rank")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=0.0)
    args = parser.parse_args()
    if args.global_batch % args.ranks != 0:
        parser.error("--global-batch must be a multiple of --ranks")
    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    mp.start_processes(worker, args=(args, free_port(), queue), nprocs=args.ranks, join=True, start_method="spawn")
    times, count = queue.get()
    median = statistics.median(times)
    tokens_per_step = args.global_batch * args.seq
    print(f"{'impl':<12} {'params':>8} {'ranks':>5} {'batch':>5} {'T':>5} {'threads':>7} {'steps':>5} "
          f"{'min_step_s':>10} {'median_s':>9} {'tokens_per_s':>12}")
    print(f"{'pytorch-ddp':<12} {count / 1e6:7.2f}M {args.ranks:>5} {args.global_batch:>5} {args.seq:>5} "
          f"{args.threads:>7} {len(times):>5} {min(times):10.3f} {median:9.3f} {tokens_per_step / median:12.1f}")
    print(f"result: tokens_per_s={tokens_per_step / median:.1f} step_s={median:.4f} min_step_s={min(times):.4f} "
          f"torch={torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
