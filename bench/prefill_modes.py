#!/usr/bin/env python3
"""ssmstate's prefill through the library on the prefill benchmark's shapes, per mode and pool size.

What an engine calls: ssm_prefill of one layer (conv, SiLU, norms, gates and the chunked
recurrence, every kernel of it) on bf16 inputs, from a fresh state, through the Python package on
a CUDA context, captured in a CUDA graph and replayed; median of --reps CUDA-event intervals, and
tokens/s per layer. The shapes are bench/fla_prefill.py's (1 x 4096, 8 x 1024, 8 varlen rows of
8192 tokens, 4 x 512; Qwen3-Next's GDN layer and Kimi-Linear's KDA layer), so the two print side
by side; bench/bench_chunk.cu times the chunk kernels alone. The pool size matters: the prefill's
scratch holds min(slots, 64) chunks, and a pass runs that many chunks over the step's rows.
Usage: python3 bench/prefill_modes.py [--modes native,...] [--slots 8,256] [--state f32,bf16]
                                       [--precision high,fast] [--only gdn|kda] [--reps N]
Exit 77 when torch, a GPU or a CUDA build of libssmstate is missing.
"""
import argparse
import os
import statistics
import sys

SHAPES = [("gdn", 16, 32, 1, 4096), ("gdn", 16, 32, 8, 1024), ("gdn", 16, 32, 8, "varlen"),
          ("gdn", 16, 32, 4, 512),
          ("kda", 32, 32, 1, 4096), ("kda", 32, 32, 8, 1024), ("kda", 32, 32, 8, "varlen"),
          ("kda", 32, 32, 4, 512)]
VARLEN_ROWS = [2048, 512, 1536, 256, 1024, 768, 1280, 768]  # bench_chunk.cu's (8192 tokens)
K = V = 128
W = 4

INI = """\
[model]
kind = {kind}
layers = 1
heads = {H}
value_heads = {HV}
key_dim = {K}
value_dim = {V}
conv_width = {W}

[state]
mode = {mode}
state_dtype = {state}
activation_dtype = bf16
device = cuda
max_requests = {slots}
max_draft_tokens = 3
prefill_precision = {precision}
"""


def skip(why):
    print(f"prefill_modes: skipped: {why}")
    sys.exit(77)


def graph_median_ms(torch, fn, reps):
    """fn captured in a CUDA graph (after a warm-up on a side stream), replayed reps times."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def one_shape(torch, ssmstate, np, kind, H, HV, B, T, mode, state, slots, precision, reps):
    lengths = VARLEN_ROWS[:B] if T == "varlen" else [T] * B
    if slots < B:
        return None
    ctx = ssmstate.Context.from_string(INI.format(kind=kind, H=H, HV=HV, K=K, V=V, W=W, mode=mode,
                                                  state=state, slots=slots,
                                                  precision=precision))
    with ctx:
        dev = dict(device="cuda")
        D, GW = 2 * H * K + HV * V, HV * K if kind == "kda" else HV
        weights = ctx.layer_weights(conv_weight=torch.randn(D, W, **dev) / W ** 0.5,
                                    a_log=torch.empty(HV, **dev).uniform_(1, 16).log(),
                                    dt_bias=-2 + 0.5 * torch.randn(GW, **dev),
                                    conv_bias=0.1 * torch.randn(D, **dev))
        host_slots = [ctx.acquire() for _ in range(B)]
        slots_h = np.array(host_slots, np.int32)
        offsets_h = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        n = int(offsets_h[-1])
        batch = ctx.prefill_batch(torch.from_numpy(slots_h).cuda(), torch.from_numpy(offsets_h).cuda(),
                                  slots_host=slots_h, token_offsets_host=offsets_h)
        bf = dict(device="cuda", dtype=torch.bfloat16)
        io = ctx.step_io(torch.randn(n, D, **bf), torch.randn(n, GW, **bf),
                         torch.randn(n, HV, **bf), torch.empty(n, HV, V, **bf))
        ms = graph_median_ms(torch, lambda: ctx.prefill(0, batch, weights, io), reps)
        return ms, n


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modes", default="native")
    p.add_argument("--slots", default="8,256")
    p.add_argument("--state", default="f32")
    p.add_argument("--precision", default="high", help="[state] prefill_precision, a list")
    p.add_argument("--only", choices=("gdn", "kda"))
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()
    try:
        import numpy as np
        import torch
    except ImportError as e:
        skip(f"{e.name} is not installed")
    if not torch.cuda.is_available():
        skip("no CUDA GPU visible to torch")
    try:
        import ssmstate
    except ImportError:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
        import ssmstate
    print(f"{'model':6s} {'B x T':>12s} {'mode':8s} {'state':5s} {'prec':4s} {'slots':>5s} "
          f"{'median ms':>10s} {'tokens/s/layer':>15s}", flush=True)
    for kind, H, HV, B, T in SHAPES:
        if args.only and kind != args.only:
            continue
        label = f"{B:4d} varlen" if T == "varlen" else f"{B:4d} x {T:<5d}"
        for mode in args.modes.split(","):
            for state, precision, slots in ((s, p, int(n)) for s in args.state.split(",")
                                            for p in args.precision.split(",")
                                            for n in args.slots.split(",")):
                    try:
                        got = one_shape(torch, ssmstate, np, kind, H, HV, B, T, mode, state, slots,
                                        precision, args.reps)
                    except ssmstate.LibraryNotFoundError as e:
                        skip(str(e))
                    except ssmstate.SsmError as e:
                        if e.code == ssmstate.Status.ERR_CONFIG and "CUDA" in e.message:
                            skip(f"libssmstate has no CUDA ({e.message})")
                        print(f"# {kind} {label} {mode} {state} {precision} {slots}: {e}",
                              flush=True)
                        continue
                    if got is None:
                        continue
                    ms, n = got
                    print(f"{kind:6s} {label:>12s} {mode:8s} {state:5s} {precision:4s} {slots:5d} "
                          f"{ms:10.3f} {n / ms / 1e3:14.2f}M", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
