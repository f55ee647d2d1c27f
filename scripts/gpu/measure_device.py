#!/usr/bin/env python3
"""Measures one CUDA GPU the way shared/reference/h100-measured.md was measured,
and writes the same JSON lines, which `meshplan calibrate --from FILE` reads.

Sections: device, ceiling (bf16, fp8 where the GPU has it, and tf32 GEMM
8192^3, device-to-device copy),
gemm (25 shapes x 5 token counts, bf16), attention (causal
scaled_dot_product_attention, bf16), op (memory-bound ops, cross-entropy,
fused AdamW). Timed with CUDA events after warm-up; the median of the timed
runs; random inputs (never zeros); GEMM inputs rotate over three sets so that
repeated runs do not time the L2.

Usage: python3 scripts/gpu/measure_device.py OUT.jsonl
"""
import json
import statistics
import sys

import torch
import torch.nn.functional as F

DEV = "cuda"


def time_ms(fn, warmup=3, reps=15):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), min(times)


GEMM_SHAPES = [  # (k, n), as in h100-measured.md
    (768, 768), (768, 2304), (3072, 768), (768, 3072), (1024, 3072), (4096, 1024), (1024, 4096),
    (1600, 4800), (1600, 6400), (6400, 1600), (4096, 4096), (1536, 12288), (4096, 6144), (768, 50304),
    (12288, 4608), (14336, 4096), (6144, 12288), (12288, 6144), (1600, 50304), (8192, 10240),
    (4096, 28672), (12288, 12288), (28672, 8192), (12288, 36864), (8192, 57344)]
GEMM_M = [1024, 2048, 4096, 8192, 16384]
ATTENTION = [(8, 12, 1024, 64), (4, 16, 2048, 64), (8, 25, 1024, 64), (2, 32, 4096, 128), (1, 64, 8192, 128),
             (2, 96, 2048, 128)]
OP_SIZES = [(8192, 768), (8192, 1600), (16384, 4096), (8192, 8192)]


def emit(out, row):
    out.write(json.dumps(row) + "\n")
    out.flush()


def gemm_row(m, k, n, dtype=torch.bfloat16):
    sets = [(torch.randn(m, k, device=DEV, dtype=dtype), torch.randn(k, n, device=DEV, dtype=dtype)) for _ in range(3)]
    c = torch.empty(m, n, device=DEV, dtype=dtype)
    i = [0]

    def run():
        a, b = sets[i[0] % 3]
        i[0] += 1
        torch.matmul(a, b, out=c)

    med, best = time_ms(run, warmup=3, reps=15)
    flops = 2.0 * m * n * k
    return med / 1e3, flops / (med / 1e3) / 1e12, flops / (best / 1e3) / 1e12


def fp8_gemm_row(m, k, n):
    """An e4m3 x e4m3 GEMM with tensorwise scales and a bf16 result (torch._scaled_mm,
    what torchao's Float8Linear runs); None where the GPU or PyTorch has none."""
    if torch.cuda.get_device_capability() < (8, 9) or not hasattr(torch, "_scaled_mm"):
        return None
    e4m3 = torch.float8_e4m3fn
    one = torch.ones((), device=DEV, dtype=torch.float32)
    sets = [(torch.randn(m, k, device=DEV).to(e4m3), torch.randn(n, k, device=DEV).to(e4m3).t()) for _ in range(3)]
    i = [0]

    def run():
        a, b = sets[i[0] % 3]
        i[0] += 1
        torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    try:
        run()
    except (RuntimeError, TypeError) as e:  # an older signature or an unsupported layout: say so, measure the rest
        print(f"fp8 GEMM not measured: {e}", flush=True)
        return None
    med, best = time_ms(run, warmup=3, reps=15)
    flops = 2.0 * m * n * k
    return flops / (med / 1e3) / 1e12, flops / (best / 1e3) / 1e12


def main():
    path = sys.argv[1]
    torch.manual_seed(0)
    p = torch.cuda.get_device_properties(0)
    with open(path, "w") as out:
        emit(out, {"section": "device", "name": p.name, "sms": p.multi_processor_count, "mem_bytes": p.total_memory,
                   "l2_bytes": getattr(p, "L2_cache_size", 0), "torch": torch.__version__})
        s, med, best = gemm_row(8192, 8192, 8192)
        emit(out, {"section": "ceiling", "what": "bf16_gemm_8192", "tflops_med": med, "tflops_best": best})
        fp8 = fp8_gemm_row(8192, 8192, 8192)
        if fp8 is not None:
            emit(out, {"section": "ceiling", "what": "fp8_gemm_8192", "tflops_med": fp8[0], "tflops_best": fp8[1]})
        torch.backends.cuda.matmul.allow_tf32 = True
        s, med, best = gemm_row(8192, 8192, 8192, torch.float32)
        torch.backends.cuda.matmul.allow_tf32 = False
        emit(out, {"section": "ceiling", "what": "tf32_gemm_8192", "tflops_med": med})
        src = torch.randn(1 << 28, device=DEV)  # 1 GiB of fp32
        dst = torch.empty_like(src)
        med, best = time_ms(lambda: dst.copy_(src), reps=10)
        emit(out, {"section": "ceiling", "what": "d2d_copy_1GiB", "gb_per_s_med": 2 * src.numel() * 4 / (med / 1e3) / 1e9,
                   "gb_per_s_best": 2 * src.numel() * 4 / (best / 1e3) / 1e9})
        del src, dst
        small = [torch.randn(1 << 22, device=DEV) for _ in range(50)]  # 16 MiB each
        sdst = torch.empty_like(small[0])

        def copies():
            for t in small:
                sdst.copy_(t)

        med, _ = time_ms(copies, reps=10)
        emit(out, {"section": "ceiling", "what": "copy_16MiB_x50", "gb_per_s_med": 50 * 2 * (1 << 22) * 4 / (med / 1e3) / 1e9})
        del small, sdst
        print("ceilings done", flush=True)

        for m in GEMM_M:
            for k, n in GEMM_SHAPES:
                s, med, best = gemm_row(m, k, n)
                emit(out, {"section": "gemm", "m": m, "k": k, "n": n, "s_med": s, "tflops_med": med, "tflops_best": best})
        torch.cuda.empty_cache()
        print("gemm done", flush=True)

        for B, H, T, D in ATTENTION:
            q, k_, v = (torch.randn(B, H, T, D, device=DEV, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
            g = torch.randn(B, H, T, D, device=DEV, dtype=torch.bfloat16)
            fwd = lambda: F.scaled_dot_product_attention(q, k_, v, is_causal=True)

            def fwd_bwd():
                o = F.scaled_dot_product_attention(q, k_, v, is_causal=True)
                torch.autograd.grad(o, (q, k_, v), g)

            with torch.no_grad():
                f_med, _ = time_ms(fwd)
            fb_med, _ = time_ms(fwd_bwd)
            flops = 4.0 * B * H * T * T * D / 2
            emit(out, {"section": "attention", "B": B, "H": H, "T": T, "D": D, "fwd_s": f_med / 1e3, "fwd_bwd_s": fb_med / 1e3,
                       "fwd_tflops": flops / (f_med / 1e3) / 1e12, "fwd_bwd_tflops": 3.5 * flops / (fb_med / 1e3) / 1e12})
        print("attention done", flush=True)

        for tokens, d in OP_SIZES:
            x = torch.randn(tokens, d, device=DEV, dtype=torch.bfloat16, requires_grad=True)
            y = torch.randn(tokens, d, device=DEV, dtype=torch.bfloat16, requires_grad=True)
            g = torch.randn(tokens, d, device=DEV, dtype=torch.bfloat16)
            w = torch.ones(d, device=DEV, dtype=torch.bfloat16, requires_grad=True)
            bias = torch.zeros(d, device=DEV, dtype=torch.bfloat16, requires_grad=True)
            ops = {
                "layernorm": (lambda: F.layer_norm(x, (d,), w, bias), (x, w, bias)),
                "rmsnorm": (lambda: F.rms_norm(x, (d,), w), (x, w)),
                "gelu_tanh": (lambda: F.gelu(x, approximate="tanh"), (x,)),
                "silu": (lambda: F.silu(x), (x,)),
                "residual_add": (lambda: x + y, (x, y)),
            }
            for name, (f, inputs) in ops.items():
                with torch.no_grad():
                    f_med, _ = time_ms(f)

                def fb(f=f, inputs=inputs):
                    torch.autograd.grad(f(), inputs, g)

                fb_med, _ = time_ms(fb)
                nbytes = tokens * d * 2
                emit(out, {"section": "op", "op": name, "tokens": tokens, "d": d, "fwd_s": f_med / 1e3, "fwd_bwd_s": fb_med / 1e3,
                           "fwd_gb_per_s": 2 * nbytes / (f_med / 1e3) / 1e9, "fwd_bwd_gb_per_s": 5 * nbytes / (fb_med / 1e3) / 1e9})
            del x, y, g
        for tokens, vocab in [(8192, 50257), (16384, 128256)]:
            logits = torch.randn(tokens, vocab, device=DEV, dtype=torch.bfloat16, requires_grad=True)
            target = torch.randint(0, vocab, (tokens,), device=DEV)
            with torch.no_grad():
                f_med, _ = time_ms(lambda: F.cross_entropy(logits.float(), target), reps=10)

            def ce_fb():
                loss = F.cross_entropy(logits.float(), target)
                torch.autograd.grad(loss, (logits,))

            fb_med, _ = time_ms(ce_fb, reps=10)
            emit(out, {"section": "op", "op": "cross_entropy_fp32", "tokens": tokens, "vocab": vocab, "fwd_s": f_med / 1e3,
                       "fwd_bwd_s": fb_med / 1e3})
            del logits
            torch.cuda.empty_cache()
        for count in [124_000_000, 1_500_000_000]:
            # One flat tensor per 10M parameters, like a model's tensors.
            sizes = [10_000_000] * (count // 10_000_000) + ([count % 10_000_000] if count % 10_000_000 else [])
            params = [torch.nn.Parameter(torch.randn(s, device=DEV)) for s in sizes]
            for t in params:
                t.grad = torch.randn_like(t)
            opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
            med, _ = time_ms(opt.step, reps=10)
            emit(out, {"section": "op", "op": "adamw_fused_fp32", "params": count, "s": med / 1e3,
                       "gb_per_s": 16 * count / (med / 1e3) / 1e9})
            del params, opt
            torch.cuda.empty_cache()
        print("ops done", flush=True)


if __name__ == "__main__":
    main()
