"""Shared helpers of the Python tests: configs as INI text, random weights and
inputs in NumPy, and a float64 NumPy reference of the layer (written from the
definition of the recurrence, sharing no code with the library)."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

import ssmstate

MODES = ("native", "compact", "replay")


def ini(mode: str = "native", kind: str = "gdn", layers: int = 2, heads: int = 2,
        value_heads: int = 4, key_dim: int = 16, value_dim: int = 16, conv_width: int = 4,
        state: str = "f32", act: str = "f32", device: str = "cpu", max_requests: int = 4,
        max_draft: int = 3, lower_bound: Optional[float] = None, extra: str = "") -> str:
    """A whole config file as text."""
    lb = f"lower_bound = {lower_bound}\n" if lower_bound is not None else ""
    return (f"[model]\nkind = {kind}\nlayers = {layers}\nheads = {heads}\n"
            f"value_heads = {value_heads}\nkey_dim = {key_dim}\nvalue_dim = {value_dim}\n"
            f"conv_width = {conv_width}\n{lb}\n"
            f"[state]\nmode = {mode}\nstate_dtype = {state}\nactivation_dtype = {act}\n"
            f"device = {device}\nmax_requests = {max_requests}\n"
            f"max_draft_tokens = {max_draft}\n{extra}")


class World:
    """Random fp32 weights per layer and random inputs for a context's model; inputs
    are made in float64 and stored in the activation dtype (bf16 as uint16 bits)."""

    def __init__(self, ctx: ssmstate.Context, seed: int = 1, bind: bool = True):
        """bind=False leaves the weights unbound (a CUDA context binds device copies)."""
        self.ctx = ctx
        self.m = ctx.model
        self.rng = np.random.default_rng(seed)
        self.act_bf16 = ctx.config.activation_dtype == "bf16"
        shapes = self.m.weight_shapes()
        self.weights: List[Dict[str, np.ndarray]] = []
        for _ in range(self.m.layers):
            w = {
                "conv_weight": (self.rng.standard_normal(shapes["conv_weight"])
                                / np.sqrt(self.m.conv_width)).astype(np.float32),
                "conv_bias": (0.1 * self.rng.standard_normal(shapes["conv_bias"])
                              ).astype(np.float32),
                "a_log": np.log1p(15 * self.rng.random(shapes["a_log"])).astype(np.float32),
                "dt_bias": (-2 + 0.5 * self.rng.standard_normal(shapes["dt_bias"])
                            ).astype(np.float32),
            }
            self.weights.append(w)
        self.bound = [ctx.layer_weights(**w) for w in self.weights] if bind else []

    def store(self, a: np.ndarray) -> np.ndarray:
        """float values in the activation dtype."""
        return ssmstate.to_bf16(a) if self.act_bf16 else np.ascontiguousarray(a, np.float32)

    def load(self, a: np.ndarray) -> np.ndarray:
        """Activation-dtype values as float64."""
        return (ssmstate.from_bf16(a) if self.act_bf16 else a).astype(np.float64)

    def inputs(self, n: int) -> Dict[str, np.ndarray]:
        """Random inputs of n tokens for one layer (x, gate, beta) and a zeroed out."""
        s = self.m.io_shapes(n)
        return {"x": self.store(self.rng.standard_normal(s["x"])),
                "gate": self.store(self.rng.standard_normal(s["gate"])),
                "beta": self.store(1.5 * self.rng.standard_normal(s["beta"])),
                "out": self.store(np.zeros(s["out"]))}

    def layer_inputs(self, n: int) -> List[Dict[str, np.ndarray]]:
        return [self.inputs(n) for _ in range(self.m.layers)]


def reference(m: ssmstate.ModelInfo, w: Dict[str, np.ndarray], x: np.ndarray, gate: np.ndarray,
              beta: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n tokens of one request through one layer from a fresh state, in float64 with
    no rounding. Returns (outputs [n][HV][V], final state [HV][V][K], window [W-1][D])."""
    H, HV, K, V, W = m.heads, m.value_heads, m.key_dim, m.value_dim, m.conv_width
    D = m.conv_channels
    n = x.shape[0]
    x = x.reshape(n, D)
    hist = np.concatenate([np.zeros((W - 1, D)), x], axis=0)
    conv = np.zeros((n, D))
    for i in range(W):
        conv += hist[i:i + n] * w["conv_weight"][:, i].astype(np.float64)
    conv += w["conv_bias"].astype(np.float64)
    c = conv / (1 + np.exp(-conv))

    def l2n(a: np.ndarray, scale: float) -> np.ndarray:
        return a / np.sqrt(np.sum(a * a, axis=-1, keepdims=True) + 1e-6) * scale

    q = np.repeat(l2n(c[:, :H * K].reshape(n, H, K), K ** -0.5), HV // H, axis=1)
    k = np.repeat(l2n(c[:, H * K:2 * H * K].reshape(n, H, K), 1.0), HV // H, axis=1)
    v = c[:, 2 * H * K:].reshape(n, HV, V)
    a_exp = np.exp(w["a_log"].astype(np.float64))

    def softplus(z: np.ndarray) -> np.ndarray:
        return np.where(z > 20, z, np.log1p(np.exp(np.minimum(z, 20))))

    if m.kind == "kda":
        f = gate.reshape(n, HV, K) + w["dt_bias"].reshape(HV, K).astype(np.float64)
        if m.lower_bound is not None:
            g = m.lower_bound / (1 + np.exp(-a_exp[:, None] * f))
        else:
            g = -a_exp[:, None] * softplus(f)
        decay = np.exp(np.maximum(g, -128))[:, :, None, :]
    else:
        g = -a_exp * softplus(gate.reshape(n, HV) + w["dt_bias"].astype(np.float64))
        decay = np.exp(np.maximum(g, -128))[:, :, None, None]
    b = 1 / (1 + np.exp(-beta.reshape(n, HV)))
    S = np.zeros((HV, V, K))
    out = np.zeros((n, HV, V))
    for t in range(n):
        S = S * decay[t]
        r = np.einsum("hvk,hk->hv", S, k[t])
        S = S + (b[t][:, None] * (v[t] - r))[:, :, None] * k[t][:, None, :]
        out[t] = np.einsum("hvk,hk->hv", S, q[t])
    return out, S, hist[n:]


def rel_rms(got: np.ndarray, ref: np.ndarray) -> float:
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    norm = np.linalg.norm(ref)
    return float(np.linalg.norm(got - ref) / norm) if norm else float(np.linalg.norm(got))
