#!/usr/bin/env python3
"""A small engine loop over ssmstate: one Gated DeltaNet layer, in every mode.

Requests arrive with prompts of mixed lengths. Each forward admits waiting
requests into free slots, prefills the next prompt chunk of every request
still in its prompt, runs one MTP verify round (T = 4: the token and 3
drafts) for every request past its prompt, draws how many drafts were
accepted (seeded), commits, and releases the slots of finished requests,
which the next requests reuse. The same workload then runs in each mode; the
only thing that changes between modes is the `mode =` line of the INI file,
and every mode must agree with native on the same device: compact's outputs
bit for bit, replay's within the numerics contract (its identity form sums
in another order: relative RMS at most 2e-4 for bf16 outputs).

On a GPU (torch with CUDA, and libssmstate built with CUDA) the layer has
Qwen3-Next's shape (H 16, HV 32, K = V = 128) and tensors are torch tensors;
otherwise everything runs on the CPU with NumPy arrays and a small shape
(--shape qwen3-next forces the real one there too, at a few seconds a mode).

usage: decode_loop.py [--device auto|cpu|cuda] [--shape auto|small|qwen3-next]
                      [--modes native,compact,replay] [--requests N] [--slots N]
                      [--rounds N] [--acceptance P] [--seed S]
Needs: NumPy; the ssmstate package (pip install ./python, or PYTHONPATH=python)
and libssmstate (SSMSTATE_LIBRARY=build/.libs/libssmstate.so.0 and
SSMSTATE_PLUGIN_PATH=build/.libs from a build tree, or an install).
Exit status: 0 every mode ran and matched native, 1 a mismatch, 2 bad usage.
"""
import argparse
import os
import re
import sys
import tempfile
import time

import numpy as np

try:
    import ssmstate
except ImportError:  # run from the source tree without installing the package
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "python"))
    import ssmstate

SHAPES = {"small": dict(heads=2, value_heads=4, key_dim=32, value_dim=32),
          "qwen3-next": dict(heads=16, value_heads=32, key_dim=128, value_dim=128)}
T = 4             # tokens per verify row: 1 + max_draft_tokens
PREFILL_CHUNK = 64

INI = """\
; one Gated DeltaNet layer; the loop switches modes by editing `mode =` alone
[model]
kind = gdn
layers = 1
heads = {heads}
value_heads = {value_heads}
key_dim = {key_dim}
value_dim = {value_dim}
conv_width = 4

[state]
mode = native
state_dtype = f32
activation_dtype = bf16
device = {device}
max_requests = {slots}
max_draft_tokens = 3
"""


class Request:
    def __init__(self, rid, prompt):
        self.id, self.prompt, self.committed, self.rounds = rid, prompt, 0, 0
        self.slot = -1
        self.kept = []  # every kept output block, in order (bf16 bits)


class Device:
    """Where the tensors live: NumPy arrays for a CPU context, torch tensors for a
    CUDA one. Host arrays are made in NumPy either way and copied in."""

    def __init__(self, cuda):
        self.cuda = cuda
        if cuda:
            import torch
            self.torch = torch

    def zeros(self, shape, dtype):
        if not self.cuda:
            return np.zeros(shape, dtype)
        torch = self.torch
        tdtype = {np.int32: torch.int32, np.float32: torch.float32,
                  np.uint16: torch.bfloat16}[dtype]
        return torch.zeros(shape, dtype=tdtype, device="cuda")

    def put(self, dst, src):
        """Copies host array `src` into the first elements of `dst`."""
        n = src.size
        if not self.cuda:
            dst.reshape(-1)[:n] = src.reshape(-1)
            return
        src = np.ascontiguousarray(src).reshape(-1)
        if dst.dtype == self.torch.bfloat16:  # bf16 bits: uint16 in NumPy, int16 in torch
            t = self.torch.from_numpy(src.view(np.int16)).view(self.torch.bfloat16)
        else:
            t = self.torch.from_numpy(src)
        dst.view(-1)[:n].copy_(t)

    def get(self, src, n):
        """The first n elements of `src` as host bytes."""
        if not self.cuda:
            return src.reshape(-1)[:n].tobytes()
        flat = src.view(-1)[:n]
        if flat.dtype == self.torch.bfloat16:
            flat = flat.view(self.torch.int16)
        return flat.cpu().numpy().tobytes()


def token_inputs(m, seed, rid, pos, n):
    """Inputs of tokens pos .. pos+n-1 of request rid: a function of the seed only,
    so every mode sees the same stream. bf16 as raw bits."""
    out = {"x": [], "gate": [], "beta": []}
    for p in range(pos, pos + n):
        rng = np.random.default_rng([seed, rid, p])
        out["x"].append(rng.standard_normal(m.conv_channels, dtype=np.float32))
        out["gate"].append(rng.standard_normal(m.value_heads, dtype=np.float32))
        out["beta"].append(1.5 * rng.standard_normal(m.value_heads, dtype=np.float32))
    return {k: ssmstate.to_bf16(np.stack(v)) for k, v in out.items()}


def layer_weights(ctx, dev, seed):
    m = ctx.model
    rng = np.random.default_rng([seed, 1 << 20])
    shapes = m.weight_shapes()
    host = {"conv_weight": rng.standard_normal(shapes["conv_weight"], dtype=np.float32) / 2,
            "conv_bias": 0.1 * rng.standard_normal(shapes["conv_bias"], dtype=np.float32),
            "a_log": np.log1p(15 * rng.random(shapes["a_log"], dtype=np.float32)),
            "dt_bias": -2 + 0.5 * rng.standard_normal(shapes["dt_bias"], dtype=np.float32)}
    bufs = {}
    for k, v in host.items():
        bufs[k] = dev.zeros(v.shape, np.float32)
        dev.put(bufs[k], v.astype(np.float32))
    return ctx.layer_weights(**bufs), bufs


def serve(ctx, dev, args):
    """The whole workload through `ctx`; returns (stats, {request id: kept outputs})."""
    m = ctx.model
    rng = np.random.default_rng(args.seed)
    prompts = rng.integers(8, 8 * PREFILL_CHUNK // 2, size=args.requests)
    waiting = [Request(i, int(p)) for i, p in enumerate(prompts)]
    waiting.reverse()
    lanes = ctx.config.max_requests
    weights, keep = layer_weights(ctx, dev, args.seed)

    # Bound once: every buffer at its largest, rows lowered per call.
    def io_buffers(tokens):
        shapes = m.io_shapes(tokens)
        bufs = {k: dev.zeros(s, np.uint16) for k, s in shapes.items()}
        return bufs, ctx.step_io(**bufs)
    pre_bufs, pre_io = io_buffers(lanes * PREFILL_CHUNK)
    ver_bufs, ver_io = io_buffers(lanes * T)
    host = {"pre_slots": np.zeros(lanes, np.int32), "offsets": np.zeros(lanes + 1, np.int32),
            "ver_slots": np.zeros(lanes, np.int32), "accepted": np.ones(lanes, np.int32)}
    if dev.cuda:
        devb = {k: dev.zeros(v.shape, np.int32) for k, v in host.items()}
        pre_batch = ctx.prefill_batch(devb["pre_slots"], devb["offsets"],
                                      slots_host=host["pre_slots"],
                                      token_offsets_host=host["offsets"])
        ver_batch = ctx.batch(devb["ver_slots"], tokens=T, slots_host=host["ver_slots"])
        accepted = devb["accepted"]
    else:
        devb = host
        pre_batch = ctx.prefill_batch(host["pre_slots"], host["offsets"])
        ver_batch = ctx.batch(host["ver_slots"], tokens=T)
        accepted = host["accepted"]
    out_width = m.value_heads * m.value_dim

    running, done = [], {}
    stats = dict(forwards=0, prefill_tokens=0, rounds=0, kept=0, reused=0, seconds=0.0)
    used_slots = set()
    while waiting or running:
        while waiting and len(running) < lanes:  # admit into free slots
            req = waiting.pop()
            req.slot = ctx.acquire()
            stats["reused"] += req.slot in used_slots
            used_slots.add(req.slot)
            running.append(req)
        prefill = [r for r in running if r.committed < r.prompt]
        rounds = [r for r in running if r.committed >= r.prompt]

        # inputs of this forward, written into the bound buffers
        if prefill:
            chunks = [min(PREFILL_CHUNK, r.prompt - r.committed) for r in prefill]
            host["offsets"][0] = 0
            for i, (r, n) in enumerate(zip(prefill, chunks)):
                host["pre_slots"][i] = r.slot
                host["offsets"][i + 1] = host["offsets"][i] + n
            x = [token_inputs(m, args.seed, r.id, r.committed, n) for r, n in zip(prefill, chunks)]
            for k in ("x", "gate", "beta"):
                dev.put(pre_bufs[k], np.concatenate([d[k] for d in x]))
            if dev.cuda:
                dev.put(devb["pre_slots"], host["pre_slots"])
                dev.put(devb["offsets"], host["offsets"])
            pre_batch.rows = len(prefill)
        if rounds:
            for i, r in enumerate(rounds):
                host["ver_slots"][i] = r.slot
                # seeded acceptance: the token, then each draft while they hold
                draw = np.random.default_rng([args.seed, r.id, r.rounds, 7]).random(T - 1)
                host["accepted"][i] = 1 + int(np.argmin(np.append(draw < args.acceptance,
                                                                  False)))
            x = [token_inputs(m, args.seed, r.id, r.committed, T) for r in rounds]
            for k in ("x", "gate", "beta"):
                dev.put(ver_bufs[k], np.concatenate([d[k] for d in x]))
            if dev.cuda:
                dev.put(devb["ver_slots"], host["ver_slots"])
                dev.put(devb["accepted"], host["accepted"])
            ver_batch.rows = len(rounds)

        # the forward: every layer (here one), then one commit
        t0 = time.perf_counter()
        ticket = None
        for layer in range(m.layers):
            if prefill:
                ctx.prefill(layer, pre_batch, weights, pre_io)
            if rounds:
                ticket = ctx.verify(layer, ver_batch, weights, ver_io, ticket)
        if rounds:
            ctx.commit(ticket, accepted)
        if dev.cuda:
            dev.torch.cuda.synchronize()
        stats["seconds"] += time.perf_counter() - t0

        # bookkeeping: kept outputs into each request's list, finished ones out
        if prefill:
            for i, (r, n) in enumerate(zip(prefill, chunks)):
                a = int(host["offsets"][i]) * out_width
                r.kept.append(dev.get(pre_bufs["out"], a + n * out_width)[a * 2:])
                r.committed += n
                stats["prefill_tokens"] += n
        for i, r in enumerate(rounds):
            keep_n = int(host["accepted"][i])
            a = i * T * out_width
            r.kept.append(dev.get(ver_bufs["out"], a + keep_n * out_width)[a * 2:])
            r.committed += keep_n
            r.rounds += 1
            stats["rounds"] += 1
            stats["kept"] += keep_n
        stats["forwards"] += 1
        for r in [r for r in running if r.rounds >= args.rounds]:
            ctx.release(r.slot)  # made fresh; the next request may get it
            running.remove(r)
            done[r.id] = b"".join(r.kept)
    return stats, done


# Replay's outputs against native's, bf16 outputs (the numerics contract).
REPLAY_BOUND = 2e-4


def bf16_to_float(raw):
    """bf16 bits (bytes) as float32 values."""
    return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)


def agreement(mode, outputs, reference):
    """(words, ok): how one mode's kept outputs compare with the reference's.
    Compact must match bit for bit; replay within REPLAY_BOUND (relative RMS
    over every kept output). NaN never passes."""
    if outputs.keys() != reference.keys():
        return "for other requests than", False
    if all(outputs[i] == reference[i] for i in reference):
        return "identical to", True
    got = np.concatenate([bf16_to_float(outputs[i]) for i in sorted(reference)]).astype(np.float64)
    ref = np.concatenate([bf16_to_float(reference[i]) for i in sorted(reference)]).astype(np.float64)
    if got.shape != ref.shape:
        return "of other lengths than", False
    rms = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)
    ok = mode == "replay" and bool(np.isfinite(rms)) and rms <= REPLAY_BOUND
    return f"{'within' if ok else 'OUTSIDE'} {REPLAY_BOUND:g} (relative RMS {rms:.2e}) of", ok


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--shape", choices=("auto", "small", "qwen3-next"), default="auto")
    p.add_argument("--modes", default="native,compact,replay")
    p.add_argument("--requests", type=int, default=10)
    p.add_argument("--slots", type=int, default=4, help="max_requests: slots in the pool")
    p.add_argument("--rounds", type=int, default=6, help="verify rounds per request")
    p.add_argument("--acceptance", type=float, default=0.7)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    modes = [x for x in args.modes.split(",") if x]
    if not modes or args.requests < 1 or args.slots < 1 or args.rounds < 1:
        p.error("--modes, --requests, --slots and --rounds need at least one")

    cuda = args.device == "cuda"
    if args.device == "auto":
        try:
            import torch
            cuda = torch.cuda.is_available()
        except ImportError:
            cuda = False
    if cuda:
        try:
            import torch  # noqa: F401  (the tensors of a CUDA context)
        except ImportError:
            print("decode_loop: --device cuda needs torch", file=sys.stderr)
            return 2
    shape = args.shape if args.shape != "auto" else ("qwen3-next" if cuda else "small")
    with tempfile.TemporaryDirectory(prefix="decode_loop-") as workdir:
        return run_modes(args, modes, cuda, shape, os.path.join(workdir, "layer.ini"))


def run_modes(args, modes, cuda, shape, ini_path):
    text = INI.format(device="cuda" if cuda else "cpu", slots=args.slots, **SHAPES[shape])
    try:
        with open(ini_path, "w") as f:
            f.write(text)
        ssmstate.Context.from_file(ini_path).close()
    except ssmstate.SsmError as e:
        if not cuda or args.device == "cuda":
            print(f"decode_loop: {e}", file=sys.stderr)
            return 2
        print(f"decode_loop: no CUDA context ({e.message}); running on the CPU")
        cuda, shape = False, (args.shape if args.shape != "auto" else "small")
        text = INI.format(device="cpu", slots=args.slots, **SHAPES[shape])
    dev = Device(cuda)
    print(f"one GDN layer {SHAPES[shape]} on {'cuda' if cuda else 'the CPU'}: "
          f"{args.requests} requests, {args.slots} slots, {args.rounds} rounds of T = {T}")

    reference, status = None, 0
    for mode in modes:
        # the only change between modes: the INI file's `mode =` line
        text = re.sub(r"(?m)^mode = \w+", f"mode = {mode}", text)
        with open(ini_path, "w") as f:
            f.write(text)
        with ssmstate.Context.from_file(ini_path) as ctx:
            stats, outputs = serve(ctx, dev, args)
            plan = ctx.plan()
            flags = ctx.status().flags
        tokens = stats["prefill_tokens"] + stats["kept"]
        same = ""
        if reference is None:
            reference = (mode, outputs)
        else:
            verdict, ok = agreement(mode, outputs, reference[1])
            same = f", outputs {verdict} {reference[0]}'s"
            status |= not ok
        if flags:
            status = 1
        print(f"{mode:8s} {stats['forwards']:4d} forwards, {stats['rounds']:4d} rounds "
              f"({stats['kept'] / max(1, stats['rounds']):.2f} kept of {T}), "
              f"{stats['reused']} slot reuses, {plan.bytes_per_slot / 1024:.0f} KiB/slot, "
              f"{tokens / max(stats['seconds'], 1e-9):,.0f} tokens/s{same}"
              f"{', flags %s' % flags if flags else ''}")
    return status


if __name__ == "__main__":
    sys.exit(main())
