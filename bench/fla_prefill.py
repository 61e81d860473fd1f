#!/usr/bin/env python3
"""fla-core's chunked prefill kernels on the prefill benchmark's shapes, for bench/bench_chunk.cu to be read against.

Times chunk_gated_delta_rule (Qwen3-Next: H 16, HV 32, K = V = 128) and chunk_kda (Kimi-Linear:
H = HV = 32) on 1 x 4096, 8 x 1024 and 4 x 512 (the serving benchmark's prefill chunk) tokens and
bench_chunk.cu's variable-length batch (8 rows, 8192 tokens, packed and split by cu_seqlens), one
layer: bf16 q/k/v, fp32 log-decays and beta as
the prologue leaves them (q and k normalized in the kernel), an fp32 initial state, the final state
returned. When the GDN kernel refuses more value heads than key heads, q and k are repeated per
value head (noted). Two timings per shape, median of --reps torch.cuda.Event intervals after
warm-up, tokens/s per layer from the first:
  median ms   the call captured in a CUDA graph and replayed, each repetition behind a GPU sleep
              kernel (bench/fla_bench.py's bench()): fla's kernels without the host's launch cost,
              as bench_chunk.cu times ssmstate's (plain launches, still behind the sleep, when the
              capture fails; the note says so). This is the number to compare.
  eager ms    one Python call between two events, synchronized after each: what the earlier
              passes printed. Host-bound when the host is slow (1.6 ms at every shape in one
              call of 2026-11-30, against 0.7 to 0.8 ms in another), so it is for reference only.
  + conv ms   fla's causal_conv1d (width 4, SiLU, over the D = 2 H K + HV V projection channels,
              the window returned) and the chunk call captured together, as the graph above: what
              ssmstate's prefill computes (it takes the conv from the projections), less the
              gates' few elementwise operations. The conv's output is not fed to the chunk call
              (timing only: same shapes and bytes).
  --kernels   after a shape's timings, fla's chunk call under torch.profiler: each GPU kernel it
              launches, with its mean time a call, to read how fla splits the work.
Usage: python3 bench/fla_prefill.py [--reps N] [--only gdn|kda] [--kernels]  (fla-core as fla_bench.py finds it)
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fla_bench  # noqa: E402  (its load_fla installs the carried wheel)

SHAPES = [("gdn", 16, 32, 1, 4096), ("gdn", 16, 32, 8, 1024), ("gdn", 16, 32, 8, "varlen"),
          ("gdn", 16, 32, 4, 512),
          ("kda", 32, 32, 1, 4096), ("kda", 32, 32, 8, 1024), ("kda", 32, 32, 8, "varlen"),
          ("kda", 32, 32, 4, 512)]
# model, H, HV, B, T; "varlen": bench_chunk.cu's rows (8192 tokens), packed with cu_seqlens
VARLEN_ROWS = [2048, 512, 1536, 256, 1024, 768, 1280, 768]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--only", choices=("gdn", "kda"), help="time one model (Triton compiles take minutes)")
    p.add_argument("--kernels", action="store_true", help="each kernel of fla's chunk call, profiled")
    args = p.parse_args()
    import importlib
    import torch
    fla_bench.load_fla()
    fla_bench.torch = torch  # its bench() uses the module's torch
    fns = {}
    for model, mod, name in (("gdn", "fla.ops.gated_delta_rule", "chunk_gated_delta_rule"),
                             ("kda", "fla.ops.kda", "chunk_kda")):
        try:
            fns[model] = getattr(importlib.import_module(mod), name)
        except Exception as e:  # report and go on
            print(f"# {mod}.{name} unavailable: {type(e).__name__}: {e}")
    try:
        conv_fn = importlib.import_module("fla.modules.causal_conv1d").causal_conv1d
    except Exception as e:  # report and go on
        conv_fn = None
        print(f"# fla.modules.causal_conv1d unavailable: {type(e).__name__}: {e}")
    print(f"{'model':8s} {'B x T':>10s} {'median ms':>10s} {'tokens/s/layer':>15s} {'eager ms':>9s}"
          f" {'+ conv ms':>10s}  note", flush=True)
    dev, K, V = "cuda", 128, 128
    for model, H, HV, B, T in SHAPES:
        if model not in fns or (args.only and model != args.only):
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
        eager = statistics.median(times)
        us, method, _, _ = fla_bench.bench(call, args.reps, use_graph=True)
        ms = us / 1e3
        if method != "graph":
            note = (note + "; " if note else "") + "plain launches (capture failed)"
        with_conv = "-"
        if conv_fn is not None:
            D = 2 * H * K + HV * V
            x = torch.randn(B, T, D, **bf)
            weight = 0.5 * torch.randn(D, 4, **bf)
            conv_extra = {key: extra[key] for key in ("cu_seqlens", "cu_seqlens_cpu") if key in extra}

            def call_conv(chunk=call):
                conv_fn(x, weight, activation="silu", output_final_state=True, **conv_extra)
                return chunk()
            try:
                call_conv()
                us2, method2, _, _ = fla_bench.bench(call_conv, args.reps, use_graph=True)
                with_conv = f"{us2 / 1e3:.3f}" + ("" if method2 == "graph" else "*")
            except Exception as e:  # report and go on
                note = (note + "; " if note else "") + f"conv: {type(e).__name__}"
        print(f"{model:8s} {label} {ms:10.3f} {B * T / ms / 1e3:14.2f}M {eager:9.3f} {with_conv:>10s}"
              f"  {note}", flush=True)
        if args.kernels:
            kernel_times(torch, call, args.reps)


def kernel_times(torch, call, reps):
    """Each GPU kernel of `reps` calls under torch.profiler: mean microseconds a call."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            call()
        torch.cuda.synchronize()
    total = 0.0
    for e in prof.key_averages():
        us = getattr(e, "device_time_total", getattr(e, "cuda_time_total", 0.0)) / reps
        if us <= 0:
            continue
        total += us
        print(f"    kernel {us:9.1f} us  x{e.count / reps:.0f}  {e.key[:90]}", flush=True)
    print(f"    kernels {total:9.1f} us a call", flush=True)


if __name__ == "__main__":
    main()
