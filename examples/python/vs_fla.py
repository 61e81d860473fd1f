#!/usr/bin/env python3
"""One Gated DeltaNet layer through ssmstate and through fla-core, on the GPU.

The same inputs (raw x, gate input a and beta input b, bf16; fp32 weights) go
through a CUDA context of ssmstate, whose kernels do the whole layer (short
conv, SiLU, q/k normalization, gates, recurrence), and through fla-core's
kernels, fed by a torch prologue computing the same conv and gates:
  prefill  B rows of P tokens   ssmstate prefill  vs  chunk_gated_delta_rule
  decode   N steps of T = 1     ssmstate decode   vs  fused_recurrent_gated_delta_rule
  verify   one round of T = 4   ssmstate verify + commit (all accepted)  vs  fused_recurrent
Prints the relative RMS difference of every output and of the final states,
then the time of each call (median of CUDA-event intervals; decode steps as
CUDA-graph replays for both). fla's times are its kernels alone, without the
torch prologue (reported apart); ssmstate's include its own prologue.

usage: vs_fla.py [--mode native|compact|replay] [--rows B] [--prompt P] [--steps N]
                 [--state f32|bf16] [--reps R]
Shape: Qwen3-Next's GDN layer (H 16, HV 32, K = V = 128, W 4).
Each difference is held to what the numerics contract (docs/numerics.md) allows
the two libraries together: each may be 5e-3 from fp64 after a chunked prefill
(fla's own numerics), and every later step carries that state, so outputs and
final states may differ by 1e-2 (2e-2 with a bf16 state, which the contract
allows 1e-2 from fp64 on its own); the conv windows are the raw inputs and
must be identical. A last line says whether they agree.
Exit status: 0 they agree, 1 a difference past its bound, 2 bad usage,
77 torch, a GPU, fla-core or a CUDA build of libssmstate is missing (says which).
"""
import argparse
import os
import statistics
import sys

H, HV, K, V, W = 16, 32, 128, 128, 4
D = 2 * H * K + HV * V
T_VERIFY = 4
# What the numerics contract lets the two libraries differ by (the docstring):
# twice the chunked prefill's 5e-3 from fp64, or twice a bf16 state's 1e-2.
AGREE_F32, AGREE_BF16 = 1e-2, 2e-2


def skip(why):
    print(f"vs_fla: skipped: {why}")
    sys.exit(77)


try:
    import torch
    import torch.nn.functional as F
except ImportError:
    skip("torch is not installed")
if not torch.cuda.is_available():
    skip("no CUDA GPU visible to torch")


def load_fla():
    """fla-core's two GDN kernels; when fla.ops as a whole fails to import (an
    unrelated op), its gated_delta_rule modules are loaded alone."""
    import importlib
    import types
    try:
        from fla.ops.gated_delta_rule import (chunk_gated_delta_rule,
                                              fused_recurrent_gated_delta_rule)
        return chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
    except ModuleNotFoundError as e:
        if e.name == "fla":  # not installed
            raise
    except Exception:  # some other op of fla.ops failed to import
        pass
    for m in [m for m in sys.modules if m.startswith("fla.ops")]:
        del sys.modules[m]
    root = os.path.dirname(importlib.import_module("fla").__file__)
    for pkg in ("fla.ops", "fla.ops.gated_delta_rule"):
        sys.modules[pkg] = mod = types.ModuleType(pkg)
        mod.__path__ = [os.path.join(root, *pkg.split(".")[1:])]
    chunk = importlib.import_module("fla.ops.gated_delta_rule.chunk")
    rec = importlib.import_module("fla.ops.gated_delta_rule.fused_recurrent")
    return chunk.chunk_gated_delta_rule, rec.fused_recurrent_gated_delta_rule


try:
    chunk_gated_delta_rule, fused_recurrent_gated_delta_rule = load_fla()
except Exception as e:  # not installed, or not importable here
    skip(f"fla-core is not usable ({type(e).__name__}: {e}); pip install fla-core")
try:
    import ssmstate
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "python"))
    import ssmstate

INI = """\
[model]
kind = gdn
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
max_requests = {rows}
max_draft_tokens = {drafts}
"""


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


class FlaLayer:
    """fla-core's kernels behind a torch prologue that computes what ssmstate's does:
    causal depthwise conv over [window; tokens], SiLU, rounded to bf16, split into
    q, k, v; g = -exp(A_log) softplus(a + dt_bias); beta = sigmoid(b)."""

    def __init__(self, w, rows):
        self.w = w
        self.window = torch.zeros(rows, W - 1, D, dtype=torch.bfloat16, device="cuda")
        self.state = None
        self.repeat = False  # q and k repeated to HV heads if the kernel wants them so

    def prologue(self, x, a, b):
        """x [B][n][D], a and b [B][n][HV]: the kernels' inputs, and the new window."""
        n = x.shape[1]
        xs = torch.cat([self.window, x], dim=1).float()
        conv = sum(xs[:, i:i + n] * self.w["conv_weight"][:, i] for i in range(W))
        c = F.silu(conv + self.w["conv_bias"]).to(torch.bfloat16)
        q = c[..., :H * K].reshape(-1, n, H, K).contiguous()
        k = c[..., H * K:2 * H * K].reshape(-1, n, H, K).contiguous()
        v = c[..., 2 * H * K:].reshape(-1, n, HV, V).contiguous()
        g = -torch.exp(self.w["a_log"]) * F.softplus(a.float() + self.w["dt_bias"])
        beta = torch.sigmoid(b.float())
        return (q, k, v, g, beta), xs[:, -(W - 1):].to(torch.bfloat16)

    def run(self, kernel, args, keep_state=True):
        q, k, v, g, beta = args
        if self.repeat:
            q, k = (t.repeat_interleave(HV // H, dim=2) for t in (q, k))
        o, s = kernel(q, k, v, g=g, beta=beta, scale=K ** -0.5, initial_state=self.state,
                      output_final_state=True, use_qk_l2norm_in_kernel=True)
        if keep_state:
            self.state = s
        return o

    def step(self, kernel, x, a, b):
        args, window = self.prologue(x, a, b)
        try:
            o = self.run(kernel, args)
        except Exception:
            if self.repeat or H == HV:
                raise
            self.repeat = True
            o = self.run(kernel, args)
        self.window = window
        return o, args


def timed(fn, reps, graph):
    """Median ms of fn over reps, each between two CUDA events; with graph, fn is
    captured once and replayed."""
    fn()
    torch.cuda.synchronize()
    run, how = fn, "plain"
    if graph:
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fn()
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
            run, how = g.replay, "graph"
        except Exception as e:
            torch.cuda.synchronize()
            how = f"plain (capture failed: {type(e).__name__})"
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), how


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", default="native")
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--state", choices=("f32", "bf16"), default="f32")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    B, P = args.rows, args.prompt
    if B < 1 or P < 1 or args.steps < 0 or args.reps < 1:
        p.error("--rows, --prompt and --reps need at least 1")
    try:
        ctx = ssmstate.Context.from_string(INI.format(H=H, HV=HV, K=K, V=V, W=W, mode=args.mode,
                                                      state=args.state, rows=B,
                                                      drafts=T_VERIFY - 1))
    except ssmstate.LibraryNotFoundError as e:
        skip(str(e))
    except ssmstate.SsmError as e:
        if e.code == ssmstate.Status.ERR_CONFIG and "CUDA" in e.message:
            skip(f"libssmstate has no CUDA ({e.message})")
        print(f"vs_fla: {e}", file=sys.stderr)
        return 2

    torch.manual_seed(args.seed)
    dev = dict(device="cuda")
    w = {"conv_weight": torch.randn(D, W, **dev) / W ** 0.5,
         "conv_bias": 0.1 * torch.randn(D, **dev),
         "a_log": torch.empty(HV, **dev).uniform_(1, 16).log(),
         "dt_bias": -2 + 0.5 * torch.randn(HV, **dev)}
    weights = ctx.layer_weights(**w)
    fla = FlaLayer(w, B)

    def inputs(n):
        r = lambda *s: torch.randn(*s, **dev).to(torch.bfloat16)  # noqa: E731
        return r(B, n, D), r(B, n, HV), (1.5 * torch.randn(B, n, HV, **dev)).to(torch.bfloat16)

    host_slots = [ctx.acquire() for _ in range(B)]
    import numpy as np
    slots_h = np.array(host_slots, np.int32)
    slots = torch.tensor(host_slots, dtype=torch.int32, **dev)
    offsets_h = np.arange(B + 1, dtype=np.int32) * P
    pb = ctx.prefill_batch(slots, torch.from_numpy(offsets_h).cuda(), slots_host=slots_h,
                           token_offsets_host=offsets_h)
    report = []

    # prefill
    x, a, b = inputs(P)
    out = torch.empty(B, P, HV, V, dtype=torch.bfloat16, **dev)
    io = ctx.step_io(x, a, b, out)
    ctx.prefill(0, pb, weights, io)
    o_fla, _ = fla.step(chunk_gated_delta_rule, x, a, b)
    torch.cuda.synchronize()
    report.append(("prefill outputs", rel(out, o_fla)))

    # decode steps
    one = ctx.batch(slots, slots_host=slots_h)
    diffs = []
    for _ in range(args.steps):
        x1, a1, b1 = inputs(1)
        out1 = torch.empty(B, 1, HV, V, dtype=torch.bfloat16, **dev)
        ctx.decode(0, one, weights, ctx.step_io(x1, a1, b1, out1))
        o1, _ = fla.step(fused_recurrent_gated_delta_rule, x1, a1, b1)
        torch.cuda.synchronize()
        diffs.append(rel(out1, o1))
    if diffs:
        report.append((f"decode outputs (max of {len(diffs)} steps)", max(diffs)))

    # one verify round, every draft accepted
    xv, av, bv = inputs(T_VERIFY)
    outv = torch.empty(B, T_VERIFY, HV, V, dtype=torch.bfloat16, **dev)
    vb = ctx.batch(slots, tokens=T_VERIFY, slots_host=slots_h)
    ticket = ctx.verify(0, vb, weights, ctx.step_io(xv, av, bv, outv))
    ctx.commit(ticket, torch.full((B,), T_VERIFY, dtype=torch.int32, **dev))
    ov, _ = fla.step(fused_recurrent_gated_delta_rule, xv, av, bv)
    torch.cuda.synchronize()
    report.append(("verify outputs (T = 4)", rel(outv, ov)))

    # final states: ssmstate [HV][V][K], fla [HV][K][V]
    sd = torch.float32 if args.state == "f32" else torch.bfloat16
    conv = torch.empty(B, 1, W - 1, D, dtype=torch.bfloat16, **dev)
    state = torch.empty(B, 1, HV, V, K, dtype=sd, **dev)
    for r in range(B):
        ctx.export_canonical(host_slots[r], conv[r], state[r])
    torch.cuda.synchronize()
    report.append(("final states", rel(state[:, 0], fla.state.transpose(-1, -2))))
    report.append(("conv windows", rel(conv[:, 0], fla.window)))

    print(f"GDN layer H {H}, HV {HV}, K {K}, V {V}, W {W}; ssmstate {args.mode} "
          f"({args.state} state, bf16 activations), fla-core on {torch.cuda.get_device_name()}")
    print(f"B {B}, prompt {P}, {args.steps} decode steps, one verify round of {T_VERIFY}")
    bound = AGREE_F32 if args.state == "f32" else AGREE_BF16
    agree = True
    for what, d in report:
        limit = 0.0 if what == "conv windows" else bound
        ok = d <= limit  # NaN never passes
        agree = agree and ok
        print(f"  relative RMS difference, {what:38s} {d:.2e}  (bound {limit:.0e}: "
              f"{'within' if ok else 'PAST IT'})")
    print(f"ssmstate and fla-core {'agree' if agree else 'DISAGREE'} within the numerics contract")

    # times
    fargs, _ = fla.prologue(x, a, b)
    kernel_pre = (lambda: fla.run(chunk_gated_delta_rule, fargs, keep_state=False))
    x1, a1, b1 = inputs(1)
    out1 = torch.empty(B, 1, HV, V, dtype=torch.bfloat16, **dev)
    io1 = ctx.step_io(x1, a1, b1, out1)
    f1, _ = fla.prologue(x1, a1, b1)
    calls = [
        ("prefill", "ssmstate", lambda: ctx.prefill(0, pb, weights, io), args.reps, False),
        ("prefill", "fla chunk kernel", kernel_pre, args.reps, False),
        ("prefill", "fla torch prologue", lambda: fla.prologue(x, a, b), args.reps, False),
        ("decode", "ssmstate", lambda: ctx.decode(0, one, weights, io1), args.reps * 5, True),
        ("decode", "fla fused_recurrent",
         lambda: fla.run(fused_recurrent_gated_delta_rule, f1, keep_state=False),
         args.reps * 5, True),
        ("decode", "fla torch prologue", lambda: fla.prologue(x1, a1, b1), args.reps * 5, True),
    ]
    print(f"{'call':8s} {'what':22s} {'median ms':>10s}  timing")
    for call, what, fn, reps, graph in calls:  # each line as soon as it is measured
        ms, how = timed(fn, reps, graph)
        print(f"{call:8s} {what:22s} {ms:10.4f}  {how}", flush=True)
    ctx.close()
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
