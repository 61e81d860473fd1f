#!/usr/bin/env python3
"""fla-core peer benchmark for ssmstate.

Times fla-core's recurrent Triton kernels (PyPI `fla-core`) at the shapes of the C benchmark so that
its table can be joined against this one (keys model, batch, tokens, plus variant):
  gdn: Qwen3-Next, H=16, HV=32, K=V=128      kda: Kimi-Linear, H=HV=32, K=V=128
fp32 state in the serving layout [HV][V][K] (fla: state_v_first=True), bf16 q/k/v and raw gate/beta
inputs; l2norm of q/k, gate and beta sigmoid are fused in the kernel (use_*_in_kernel=True).
Variants (per model):
  cb_inplace   T=1  decode the serving-engine way: fla.ops.kda.fused_recurrent.fused_recurrent_kda_fwd
               (fla's copy of vLLM's decode kernel) on a state pool indexed by request
               (ssm_state_indices, a random permutation), state read and written once, in place.
               For gdn the scalar gate is broadcast over K (g [B,T,HV,K], dt_bias [HV,K]): same math,
               fla 0.6.0 has no continuous-batching GDN-1 recurrent kernel.
  cb_pertoken  T=4  native MTP verify: same kernel, ssm_state_indices [B,T], one state written per
               token into its own pool slot (read S, write T*S).
  recurrent    T=1,4  the public ops fused_recurrent_gated_delta_rule / fused_recurrent_kda: read
               initial_state, write the final state once into a new tensor (out of place, no
               per-token states).
bytes = state bytes that must cross memory (other traffic < 1%): 2*S for decode and final-only,
(1+T)*S per-token, S = B*HV*V*K*4. A device-to-device copy (dst.copy_(src)) of exactly S bytes is
timed the same way in the same run (copy_gbps, counting read+write), plus one 1 GiB copy (copy_ref).
Timing: warm-up, then CUDA-graph replay for B <= --graph-max-batch (plain launches above); each
repetition sits behind a GPU sleep kernel so host launch cost stays out; median of --reps
(>= 50) torch.cuda.Event intervals. No L2 flush: rows whose state footprint fits in L2 (~50 MB,
small B) are marked 'L2' and measure the cache, not HBM. Before timing, each variant is checked
once (B=2) against an fp32 torch reference of the recurrence. Failures are printed and the run goes
on (exit 0).
Usage: python3 bench/fla_bench.py [--out FILE.json] [--quick]   (from the repository root)
fla-core comes from the environment, else from .device/wheels/fla_core-*.whl, installed offline into
/tmp/fla_site by this script (pip --no-index --no-deps; its needs einops, packaging, triton are there).
"""
import argparse
import json
import os
import statistics
import sys

SHAPES = {"gdn": (16, 32, 128, 128), "kda": (32, 32, 128, 128)}  # H, HV, K, V
BATCHES = [1, 8, 32, 64, 128, 256]
VARIANTS = [("cb_inplace", 1), ("cb_pertoken", 4), ("recurrent", 1), ("recurrent", 4)]
SPACER_CYCLES = 1_000_000  # ~0.5 ms GPU sleep before each timed repetition
DEVICE, torch = "cuda", None


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Time fla-core recurrent GDN/KDA kernels against a copy.")
    p.add_argument("--out", help="write results as JSON to FILE (default: $OUT/fla_bench.json if $OUT set)")
    p.add_argument("--quick", action="store_true", help="B in {1, 256} and 50 repetitions only")
    p.add_argument("--reps", type=int, default=100, help="timed repetitions per case (>= 50)")
    p.add_argument("--batches", help="comma-separated batch sizes (default 1,8,32,64,128,256)")
    p.add_argument("--graph-max-batch", type=int, default=32,
                   help="use CUDA-graph replay up to this batch size (default 32)")
    return p.parse_args(argv)


def load_fla():
    """Return ({name: function}, version, note); ({}, None, reason) when fla cannot be used."""
    import glob, importlib, importlib.util, subprocess
    if importlib.util.find_spec("fla") is None:  # not installed: install the carried wheel, offline
        whl = sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".device",
                                            "wheels", "fla_core-*.whl")))[-1:]
        if whl:
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                            "--no-compile", "--target", "/tmp/fla_site", *whl], check=False)
            sys.path.insert(0, "/tmp/fla_site")
    names = {"gdn": ("fla.ops.gated_delta_rule.fused_recurrent", "fused_recurrent_gated_delta_rule"),
             "kda": ("fla.ops.kda.fused_recurrent", "fused_recurrent_kda"),
             "kda_fwd": ("fla.ops.kda.fused_recurrent", "fused_recurrent_kda_fwd")}
    note, api = "", {}
    try:
        importlib.import_module("fla.ops")
    except Exception as e:  # some unrelated op failed to import: skip the fla.ops package __init__ files
        import types
        note = f"fla.ops import failed ({type(e).__name__}: {e}); loaded the two modules alone"
        if importlib.util.find_spec("fla") is None:
            return {}, None, f"fla not found ({type(e).__name__}: {e})"
        for m in [m for m in sys.modules if m.startswith("fla.ops")]:
            del sys.modules[m]
        root = os.path.dirname(importlib.import_module("fla").__file__)
        for pkg in ("fla.ops", "fla.ops.gated_delta_rule", "fla.ops.kda"):
            sys.modules[pkg] = mod = types.ModuleType(pkg)
            mod.__path__ = [os.path.join(root, *pkg.split(".")[1:])]
    for key, (mod, fn) in names.items():
        try:
            api[key] = getattr(importlib.import_module(mod), fn)
        except Exception as e:
            note += f" [{mod}.{fn} unavailable: {type(e).__name__}: {e}]"
    try:
        ver = importlib.import_module("importlib.metadata").version("fla-core")
    except Exception:
        ver = getattr(sys.modules.get("fla"), "__version__", "unknown")
    return api, ver, note.strip()


def inputs(model, B, T, dev):
    H, HV, K, V = SHAPES[model]
    r = lambda *shape: torch.randn(*shape, device=dev, dtype=torch.bfloat16)  # never zeros
    x = dict(q=r(B, T, H, K), k=r(B, T, H, K), v=r(B, T, HV, V), b=r(B, T, HV),
             a=r(B, T, HV) if model == "gdn" else r(B, T, HV, K))  # raw gate input: a (GDN) / f (KDA)
    x["A_log"] = torch.empty(HV, device=dev).uniform_(1, 16).log()
    dt = torch.empty((HV,) if model == "gdn" else (HV, K), device=dev).uniform_(1e-3, 0.1)
    x["dt_bias"] = torch.log(torch.expm1(dt))  # softplus(dt_bias) = dt
    x["S0"] = 0.1 * torch.randn(B, HV, V, K, device=dev)
    return x


def reference(model, x, T):
    """fp32 torch recurrence (norms, gates, update) from the same inputs: (o [B,T,HV,V], [S after token t])."""
    H, HV, K, V = SHAPES[model]
    q, k = (x[n].float().repeat_interleave(HV // H, dim=2) for n in "qk")  # key head h // (HV/H)
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * K ** -0.5
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    beta = torch.sigmoid(x["b"].float())
    S, outs, states = x["S0"].clone(), [], []
    for t in range(T):
        a = x["a"][:, t].float() + x["dt_bias"]
        g = -torch.exp(x["A_log"]).view(HV, *([1] * (a.dim() - 2))) * torch.nn.functional.softplus(a)
        g = g.unsqueeze(-1) if model == "gdn" else g  # [B,HV,1] or [B,HV,K]
        S = S * torch.exp(g).unsqueeze(2)  # S[v][k] *= exp(g[k])
        kt, qt = k[:, t].unsqueeze(2), q[:, t].unsqueeze(2)
        u = beta[:, t].unsqueeze(-1) * (x["v"][:, t].float() - (S * kt).sum(-1))
        S = S + u.unsqueeze(-1) * kt
        outs.append((S * qt).sum(-1))
        states.append(S)
    return torch.stack(outs, 1), states


def build(api, model, variant, B, T, dev):
    """Return (fn, states(out) -> [state after each stored token], x, bytes moved, L2 footprint)."""
    H, HV, K, V = SHAPES[model]
    x = inputs(model, B, T, dev)
    S = B * HV * V * K * 4
    kw = dict(A_log=x["A_log"], use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
              use_beta_sigmoid_in_kernel=True, state_v_first=True)
    if variant == "recurrent":
        f, pool = api["gdn" if model == "gdn" else "kda"], x["S0"].clone()

        def fn():
            return f(x["q"], x["k"], x["v"], g=x["a"], beta=x["b"], dt_bias=x["dt_bias"], scale=K ** -0.5,
                     initial_state=pool, output_final_state=True, **kw)
        return fn, (lambda out: [out[1]]), x, 2 * S, 2 * S
    if variant == "cb_inplace" and T != 1:
        raise ValueError("cb_inplace is T=1 only (1-D ssm_state_indices)")
    f = api["kda_fwd"]
    g = x["a"] if model == "kda" else x["a"].unsqueeze(-1).expand(B, T, HV, K).contiguous()
    dtb = x["dt_bias"] if model == "kda" else x["dt_bias"].unsqueeze(-1).expand(HV, K).contiguous()
    idx2 = torch.randperm(B * T, device=dev).to(torch.int32).view(B, T)
    idx = idx2.view(B) if T == 1 else idx2  # [N] decode; [N, T] per-token slots
    pool = 0.1 * torch.randn(B * T, HV, V, K, device=dev)
    pool[idx2[:, 0].long()] = x["S0"]  # token 0 reads its request's slot (num_accepted_tokens=None)
    out = torch.empty_like(x["v"])

    def fn():
        return f(x["q"], x["k"], x["v"], g, x["b"], dt_bias=dtb, initial_state=pool, scale=K ** -0.5,
                 inplace_final_state=True, ssm_state_indices=idx, out=out, **kw)
    return fn, (lambda o: [pool[idx2[:, t].long()] for t in range(T)]), x, (1 + T) * S, T * S


def check(api, model, variant, T, dev):
    fn, states, x, _, _ = build(api, model, variant, 2, T, dev)
    out = fn()
    o_ref, s_ref = reference(model, x, T)
    rel = lambda a, b: ((a.float() - b).norm() / b.norm()).item()
    s_got = states(out)
    s_ref = s_ref[-len(s_got):]  # final-only variants return the last state alone
    eo, es = rel(out[0], o_ref), max(rel(a, b) for a, b in zip(s_got, s_ref))
    return f"{'ok' if eo < 2e-2 and es < 1e-3 else 'FAIL'} o {eo:.1e} S {es:.1e}"


def bench(fn, reps, use_graph):
    """(median us, method, p10 us, p90 us) of fn: graph replay if use_graph and capturable, else plain."""
    [fn() for _ in range(3)]  # warm-up (Triton compiles on the first call)
    torch.cuda.synchronize()
    run, method, graph = fn, "plain", None
    if use_graph:
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                fn()
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn()
            graph.replay()
            torch.cuda.synchronize()
            run, method = graph.replay, "graph"
        except Exception as e:
            print(f"    graph capture failed ({type(e).__name__}: {e}); timing plain launches")
            torch.cuda.synchronize()
    sleep = getattr(torch.cuda, "_sleep", lambda n: None)
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in ev:
        sleep(SPACER_CYCLES)  # keeps the GPU busy while the host enqueues: host cost stays out
        a.record(), run(), b.record()
    torch.cuda.synchronize()
    t = sorted(a.elapsed_time(b) * 1e3 for a, b in ev)
    del graph
    return statistics.median(t), method, t[len(t) // 10], t[-1 - len(t) // 10]


def main(argv=None):
    args = parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")] if args.batches else [1, 256] if args.quick else BATCHES
    reps = 50 if args.quick else max(50, args.reps)
    out_path = args.out or (os.path.join(os.environ["OUT"], "fla_bench.json") if os.environ.get("OUT") else None)
    meta, rows = {"reps": reps, "state_dtype": "fp32", "act_dtype": "bf16", "layout": "[HV][V][K]"}, []

    def save():
        if out_path:
            with open(out_path, "w") as fh:
                json.dump({"meta": meta, "results": rows}, fh, indent=1)
    global torch
    try:
        import torch as _torch
        torch = _torch
        assert torch.cuda.is_available(), "no CUDA device visible"
    except Exception as e:
        meta["error"] = f"torch/CUDA unavailable: {type(e).__name__}: {e}"
        return print(meta["error"]) or save() or 0
    dev = torch.device(DEVICE)
    prop = torch.cuda.get_device_properties(dev)
    l2 = getattr(prop, "L2_cache_size", 50 << 20)
    api, ver, note = load_fla()
    meta.update(device=prop.name, sms=prop.multi_processor_count, l2_bytes=l2, torch=torch.__version__,
                fla_core=ver, fla_note=note)
    meta["triton"] = getattr(sys.modules.get("triton"), "__version__", "not loaded")
    print(f"# {prop.name}, torch {torch.__version__}, triton {meta['triton']}, fla-core {ver}, L2 {l2 >> 20} MiB")
    if note or not api:
        print(f"# fla: {note or 'not importable'}")
    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    copy_cache = {}  # (bytes, graph) -> GB/s of dst.copy_(src), counting read + write

    def copy_gbps(nbytes, use_graph, reps_=reps):
        key = (nbytes, use_graph)
        if key not in copy_cache:
            src = torch.randn(nbytes // 4, device=dev)
            dst = torch.empty_like(src)
            us = bench(lambda: dst.copy_(src), reps_, use_graph)[0]
            copy_cache[key] = 2 * nbytes / us / 1e3
        return copy_cache[key]
    try:
        meta["copy_ref_gbps"] = copy_gbps(1 << 30, False, 20)
        print(f"# 1 GiB device-to-device copy: {meta['copy_ref_gbps']:.0f} GB/s (read+write)")
    except Exception as e:
        meta["copy_ref_gbps"] = None
        print(f"# reference copy failed: {type(e).__name__}: {e}")
    print(f"{'model':5} {'variant':11} {'B':>4} {'T':>2} {'method':6} {'median_us':>10} {'MB moved':>9} "
          f"{'GB/s':>7} {'copy GB/s':>9} {'%copy':>6} {'%ref':>5}  note")
    for model in ("gdn", "kda"):
        for variant, T in VARIANTS:
            need = "kda_fwd" if variant.startswith("cb") else ("gdn" if model == "gdn" else "kda")
            chk = "fla function unavailable"
            if need in api:
                try:
                    chk = check(api, model, variant, T, dev)
                except Exception as e:
                    chk = f"check error {type(e).__name__}: {str(e)[:160]}"
            print(f"# {model} {variant} T={T}: {chk}")
            for B in batches:
                H, HV, K, V = SHAPES[model]
                S = B * HV * V * K * 4
                row = dict(model=model, variant=variant, state="f32", batch=B, tokens=T, state_bytes=S, check=chk,
                           state_writes={"cb_inplace": "in_place", "cb_pertoken": "per_token"}.get(variant, "final_only"))
                try:
                    if need not in api:
                        raise RuntimeError(chk)
                    use_graph = B <= args.graph_max_batch
                    fn, _, x, moved, foot = build(api, model, variant, B, T, dev)
                    us, method, p10, p90 = bench(fn, reps, use_graph)
                    cg = copy_gbps(S, use_graph)
                    gbps = moved / us / 1e3
                    ref = meta.get("copy_ref_gbps")
                    row.update(median_us=us, p10_us=p10, p90_us=p90, bytes=moved, gbps=gbps, copy_gbps=cg,
                               pct_copy=100 * gbps / cg, pct_copy_ref=(100 * gbps / ref) if ref else None,
                               method=method, l2_resident=foot <= l2)
                    print(f"{model:5} {variant:11} {B:>4} {T:>2} {method:6} {us:>10.2f} {moved / 1e6:>9.1f} "
                          f"{gbps:>7.0f} {cg:>9.0f} {row['pct_copy']:>5.1f}% "
                          f"{row['pct_copy_ref'] or 0:>4.0f}%  {'L2' if foot <= l2 else ''}")
                    del fn, x
                except Exception as e:
                    row["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
                    print(f"{model:5} {variant:11} {B:>4} {T:>2} FAILED {row['error'][:150]}")
                rows.append(row)
                save()
                torch.cuda.empty_cache()
    print("# %copy: vs a copy of the same state bytes timed the same way; %ref: vs the 1 GiB copy; "
          "L2: state footprint fits in L2 (cache, not HBM). recurrent rows write the final state only.")
    if out_path:
        print(f"# wrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
