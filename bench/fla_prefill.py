#!/usr/bin/env python3
"""fla-core's chunked prefill kernels on issue 5's shapes, for bench/bench_chunk.cu to be read against.

Times chunk_gated_delta_rule (Qwen3-Next: H 16, HV 32, K = V = 128) and chunk_kda (Kimi-Linear:
H = HV = 32) on 1 x 4096 and 8 x 1024 tokens and bench_chunk.cu's variable-length batch (8 rows,
8192 tokens, packed and split by cu_seqlens), one layer: bf16 q/k/v, fp32 log-decays and beta as
the prologue leaves them (q and k normalized in the kernel), an fp32 initial state, the final state
returned. Median of --reps torch.cuda.Event intervals after warm-up; tokens/s per layer. When the
GDN kernel refuses more value heads than key heads, q and k are repeated per value head (noted).
Usage: python3 bench/fla_prefill.py [--reps N]   (fla-core as bench/fla_bench.py finds it)
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fla_bench  # noqa: E402  (its load_fla installs the carried wheel)

SHAPES = [("gdn", 16, 32, 1, 4096), ("gdn", 16, 32, 8, 1024), ("gdn", 16, 32, 8, "varlen"),
          ("kda", 32, 32, 1, 4096), ("kda", 32, 32, 8, 1024), ("kda", 32, 32, 8, "varlen")]
# model, H, HV, B, T; "varlen": bench_chunk.cu's rows (8192 tokens), packed with cu_seqlens
VARLEN_ROWS = [2048, 512, 1536, 256, 1024, 768, 1280, 768]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()
    import importlib
    import torch
    fla_bench.load_fla()
    fns = {}
    for model, mod, name in (("gdn", "fla.ops.gated_delta_rule", "chunk_gated_delta_rule"),
                             ("kda", "fla.ops.kda", "chunk_kda")):
        try:
            fns[model] = getattr(importlib.import_module(mod), name)
        except Exception as e:  # report and go on
            print(f"# {mod}.{name} unavailable: {type(e).__name__}: {e}")
    print(f"{'model':8s} {'B x T':>10s} {'median ms':>10s} {'tokens/s/layer':>15s}  note")
    dev, K, V = "cuda", 128, 128
    for model, H, HV, B, T in SHAPES:
        if model not in fns:
            continue
        bf = dict(device=dev, dtype=torch.bfloat16)
        rows, extra = B, {}
        if T == "varlen":  # one packed sequence of all rows, split by cu_seqlens
            offsets = [0]
            for n in VARLEN_ROWS[:B]:
                offsets.append(offsets[-1] + n)
            extra["cu_seqlens"] = torch.tensor(offsets, device=dev, dtype=torch.long)
            extra["cu_seqlens_cpu"] = torch.tensor(offsets, dtype=torch.long)  # no device read
            B, T = 1, offsets[-1]
        q, k = torch.randn(B, T, H, K, **bf), torch.randn(B, T, H, K, **bf)
        v = torch.randn(B, T, HV, V, **bf)
        g = -torch.rand(B, T, HV, *(() if model == "gdn" else (K,)), device=dev) * 0.1
        beta = torch.rand(B, T, HV, device=dev)
        S0 = 0.1 * torch.randn(rows, HV, K, V, device=dev)
        note = "varlen" if extra else ""
        label = f"{rows:4d} varlen" if extra else f"{B:4d} x {T:<5d}"

        def call(q=q, k=k):
            return fns[model](q, k, v, g=g, beta=beta, scale=K ** -0.5, initial_state=S0,
                              output_final_state=True, use_qk_l2norm_in_kernel=True, **extra)
        try:
            call()
        except Exception as e:
            if H == HV:
                print(f"# {model} {label}: {type(e).__name__}: {e}")
                continue
            qr, kr = (x.repeat_interleave(HV // H, dim=2) for x in (q, k))
            note = (note + "; " if note else "") + f"q, k repeated to {HV} heads ({type(e).__name__})"
            call = (lambda qr=qr, kr=kr, c=call: c(qr, kr))
            call()
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        times = []
        for _ in range(args.reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            call()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        ms = statistics.median(times)
        print(f"{model:8s} {label} {ms:10.3f} {B * T / ms / 1e3:14.2f}M  {note}")


if __name__ == "__main__":
    main()
