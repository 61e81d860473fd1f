"""The engine API: contexts, slots, step calls, tickets, copies, pages.

Each method is one C call of ``include/ssmstate/ssmstate.h`` (named in its
docstring) with its arguments checked first: dtype, element count,
contiguity and memory space of every tensor, each error naming the argument.
"""
from __future__ import annotations

import ctypes
import os
import sys
import tempfile
from ctypes import byref, c_int32, c_size_t, c_uint32, c_void_p
from typing import (Any, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union)

from . import _lib as _c
from . import _tensor as _t
from ._lib import DType, ModelKind, SsmError, Status, check, invalid

PathLike = Union[str, "os.PathLike[str]"]

# ------------------------------------------------------------ plain records


class ModelInfo(NamedTuple):
    """``ssm_model_dims`` of a context, with the widths its tensors derive from."""
    kind: str  #: "gdn" or "kda"
    layers: int
    heads: int  #: H, query/key heads
    value_heads: int  #: HV
    key_dim: int  #: K
    value_dim: int  #: V
    conv_width: int  #: W
    lower_bound: Optional[float]  #: KDA's gate lower bound, or None

    @property
    def conv_channels(self) -> int:
        """D = 2 H K + HV V: channels of ``x`` and of the conv window."""
        return 2 * self.heads * self.key_dim + self.value_heads * self.value_dim

    @property
    def gate_width(self) -> int:
        """Gate inputs per token: HV (GDN) or HV K (KDA)."""
        return self.value_heads * (self.key_dim if self.kind == "kda" else 1)

    def io_shapes(self, tokens: int) -> dict:
        """Shapes of a step's tensors for `tokens` tokens: x, gate, beta, out."""
        gate = ((tokens, self.value_heads, self.key_dim) if self.kind == "kda"
                else (tokens, self.value_heads))
        return {"x": (tokens, self.conv_channels), "gate": gate,
                "beta": (tokens, self.value_heads),
                "out": (tokens, self.value_heads, self.value_dim)}

    def weight_shapes(self) -> dict:
        """Shapes of a layer's fp32 weights: conv_weight, conv_bias, a_log, dt_bias."""
        dt = ((self.value_heads, self.key_dim) if self.kind == "kda" else (self.value_heads,))
        return {"conv_weight": (self.conv_channels, self.conv_width),
                "conv_bias": (self.conv_channels,), "a_log": (self.value_heads,),
                "dt_bias": dt}

    def canonical_shapes(self) -> dict:
        """Shapes of one layer's canonical form: conv window and matrix state."""
        return {"conv": (self.conv_width - 1, self.conv_channels),
                "state": (self.value_heads, self.value_dim, self.key_dim)}


class ConfigInfo(NamedTuple):
    """The resolved configuration of a context (``ssm_ctx_config``)."""
    model: ModelInfo
    mode: str
    state_dtype: str  #: "f32" or "bf16"
    activation_dtype: str
    device: str  #: "cpu" or "cuda:N"
    max_requests: int
    max_draft_tokens: int
    plugin_dir: Optional[str]
    head_slice: Optional[Tuple[int, int, int]]  #: (heads, value_heads, first) or None
    source: Optional[str]
    prefill_precision: str  #: "fast" or "high"


class Plan(NamedTuple):
    """``ssm_plan``: what a configuration costs (per-slot numbers cover all layers)."""
    state_bytes_per_slot: int
    conv_bytes_per_slot: int
    scratch_bytes_per_slot: int
    bytes_per_slot: int
    shared_bytes: int
    pool_bytes: int
    capacity: int


class PoolStats(NamedTuple):
    """``ssm_pool_stats``."""
    capacity: int
    used: int
    free: int


class Report(NamedTuple):
    """``ssm_ctx_report``: flags raised by past steps."""
    flags: _c.Flag
    flagged_slots: int
    first_flagged: int


class TuneReport(NamedTuple):
    """``ssm_tune_report``."""
    tuned: int
    cached: int
    skipped_failed: int
    failed: int
    untuned: int
    saved: int


class PageInfo(NamedTuple):
    """``ssm_page_info``: a page's header, its checksums verified."""
    format_version: int
    library_version: int
    model: ModelInfo
    state_dtype: str
    activation_dtype: str
    head_first: int
    head_end: int
    payload_bytes: int
    page_bytes: int
    payload_crc: int


class PluginInfo(NamedTuple):
    """``ssm_plugin_info``: one mode plugin found on the search path."""
    name: str
    path: str
    abi_version: int
    mode_version: int
    capabilities: int
    status: Status
    error: str

    @property
    def ok(self) -> bool:
        """The plugin can be used."""
        return self.status == Status.OK


def _dtype_name(v: int) -> str:
    try:
        return DType(v).label
    except ValueError:
        return f"dtype{v}"


def _model_info(m: _c.ModelDims) -> ModelInfo:
    kind = {1: "gdn", 2: "kda"}.get(m.kind, f"kind{m.kind}")
    return ModelInfo(kind, m.layers, m.heads, m.value_heads, m.key_dim, m.value_dim,
                     m.conv_width, float(m.lower_bound) if m.has_lower_bound else None)


def _config_info(c: _c.Config) -> ConfigInfo:
    dev = "cpu" if c.device.type == 1 else f"cuda:{c.device.index}"
    hs = c.head_slice
    head_slice = None if (hs.heads, hs.value_heads, hs.first) == (0, 0, 0) else (
        hs.heads, hs.value_heads, hs.first)
    return ConfigInfo(_model_info(c.model), _c.text(c.mode) or "", _dtype_name(c.state_dtype),
                      _dtype_name(c.activation_dtype), dev, c.max_requests, c.max_draft_tokens,
                      _c.text(c.plugin_dir) or None, head_slice, _c.text(c.source),
                      "high" if c.prefill_precision == 1 else "fast")


def _plan(p: _c.Plan) -> Plan:
    return Plan(p.state_bytes_per_slot, p.conv_bytes_per_slot, p.scratch_bytes_per_slot,
                p.bytes_per_slot, p.shared_bytes, p.pool_bytes, p.capacity)


# ------------------------------------------------------------------ streams


def stream_handle(stream: Any) -> Optional[int]:
    """A raw ``cudaStream_t`` from an int, a torch stream (``.cuda_stream``) or a CuPy
    stream (``.ptr``); None for None."""
    if stream is None:
        return None
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):
        h = getattr(stream, attr, None)
        if isinstance(h, int):
            return h
    raise invalid(f"stream: {type(stream).__name__} is not a stream (pass an int handle, "
                  "a torch.cuda.Stream or a CuPy stream)")


# --------------------------------------------------------------- host ints


def _int32_host(values: Any, name: str) -> Tuple[int, int, Any]:
    """(pointer, elements, keepalive) of int32 host data: an array object in host
    memory (used in place) or a sequence of ints (copied into a new array)."""
    if isinstance(values, (list, tuple, range)):
        arr = (c_int32 * max(1, len(values)))(*values)
        return ctypes.addressof(arr), len(values), arr
    v = _t.view(values, name)
    _t.check_dtype(v, name, _t.I32, "int32")
    if v.device != "cpu":
        raise invalid(f"{name}: must be in host memory")
    return v.ptr, v.size, v


def _read_ints(ptr: int, n: int) -> List[int]:
    return list((c_int32 * n).from_address(ptr)) if n > 0 and ptr else []


# --------------------------------------------------------- bound arguments


class Ticket:
    """``ssm_ticket``: proof of a verify, presented at commit.

    A new ticket is empty (``SSM_TICKET_INIT``). :meth:`Context.verify`
    returns one filled by the forward's first layer; pass it to the verifies
    of the other layers, then to :meth:`Context.commit` or
    :meth:`Context.abort`. The library checks it there (foreign, stale,
    repeated, incomplete). A ticket keeps its forward's :class:`Batch` alive:
    the library reads the slot buffers again at commit.
    """
    __slots__ = ("_c", "_ref", "_batch")

    def __init__(self) -> None:
        self._c = _c.Ticket()
        self._ref = byref(self._c)
        self._batch: Optional[Batch] = None

    context_id = property(lambda self: int(self._c.context_id), doc="issuing context's id")
    forward = property(lambda self: int(self._c.forward), doc="the forward's number")
    rows = property(lambda self: int(self._c.rows), doc="rows of the forward")
    tokens = property(lambda self: int(self._c.tokens), doc="T of the forward")
    layout = property(lambda self: int(self._c.layout), doc="the verify's update layout")

    @property
    def empty(self) -> bool:
        """No verify has filled it yet."""
        c = self._c
        return not (c.context_id or c.forward or c.rows or c.tokens or c.layout)

    def copy(self) -> "Ticket":
        """An independent ticket with the same fields."""
        t = Ticket()
        ctypes.memmove(ctypes.addressof(t._c), ctypes.addressof(self._c),
                       ctypes.sizeof(_c.Ticket))
        return t

    def __repr__(self) -> str:
        return (f"Ticket(context_id={self.context_id}, forward={self.forward}, "
                f"rows={self.rows}, tokens={self.tokens}, layout={self.layout})")


class Batch:
    """``ssm_batch``: the rows of a decode or verify, bound once and reusable.

    Made by :meth:`Context.batch`. ``slots`` (int32, the context's memory
    space) is used in place: write new slot numbers into it between steps
    (-1 marks a padding row). A CUDA context also needs ``slots_host``, the
    same slots in host memory (a NumPy int32 array is used in place, a
    sequence is copied). ``rows`` may be lowered or raised up to the buffers'
    length between steps.
    """
    __slots__ = ("_ctx", "_c", "_ref", "_keep", "_capacity", "slots", "slots_host")

    def __init__(self, ctx: "Context", slots: Any, tokens: int = 1, rows: Optional[int] = None,
                 slots_host: Any = None):
        self._ctx = ctx
        self._c = _c.Batch()
        keep: List[Any] = []
        if ctx.is_cuda:
            sv = ctx._tensor(slots, "batch.slots", _t.I32, "int32")
            if slots_host is None:
                raise invalid("batch.slots_host: a CUDA context needs the slots in host memory "
                              "too (a NumPy int32 array or a sequence of ints)")
            hptr, hn, hkeep = _int32_host(slots_host, "batch.slots_host")
            self._c.slots, self._c.slots_host = sv.ptr, hptr
            keep += [sv, hkeep]
            capacity = min(sv.size, hn)
        else:
            if isinstance(slots, (list, tuple, range)):
                ptr, n, k = _int32_host(slots, "batch.slots")
            else:
                v = ctx._tensor(slots, "batch.slots", _t.I32, "int32")
                ptr, n, k = v.ptr, v.size, v
            self._c.slots = ptr
            keep.append(k)
            capacity = n
        self._keep = keep
        self._capacity = capacity
        self.slots, self.slots_host = slots, slots_host
        self._c.tokens = int(tokens)
        self.rows = capacity if rows is None else rows
        self._ref = byref(self._c)

    @property
    def rows(self) -> int:
        """Rows of the next call (at most the slot buffers' length)."""
        return self._c.rows

    @rows.setter
    def rows(self, rows: int) -> None:
        if not 0 <= rows <= self._capacity:
            raise invalid(f"batch.rows = {rows}: the slot buffers hold {self._capacity} rows")
        self._c.rows = rows

    @property
    def tokens(self) -> int:
        """T: tokens per row (1 for decode)."""
        return self._c.tokens

    @tokens.setter
    def tokens(self, tokens: int) -> None:
        self._c.tokens = int(tokens)

    def __repr__(self) -> str:
        return f"Batch(rows={self.rows}, tokens={self.tokens})"


class PrefillBatch:
    """``ssm_prefill_batch``: the rows of a prefill, bound once and reusable.

    Made by :meth:`Context.prefill_batch`. Row r holds tokens
    ``token_offsets[r] .. token_offsets[r+1]-1``. A CUDA context also needs
    host copies (``slots_host``, ``token_offsets_host``). ``max_row_tokens``
    left None is recomputed from the host offsets at every call.
    """
    __slots__ = ("_ctx", "_c", "_ref", "_keep", "_capacity", "_offsets_host", "_auto_max",
                 "slots", "token_offsets")

    def __init__(self, ctx: "Context", slots: Any, token_offsets: Any, rows: Optional[int] = None,
                 max_row_tokens: Optional[int] = None, slots_host: Any = None,
                 token_offsets_host: Any = None):
        self._ctx = ctx
        self._c = _c.PrefillBatch()
        keep: List[Any] = []
        if ctx.is_cuda:
            sv = ctx._tensor(slots, "batch.slots", _t.I32, "int32")
            ov = ctx._tensor(token_offsets, "batch.token_offsets", _t.I32, "int32")
            for n, v in (("slots_host", slots_host), ("token_offsets_host", token_offsets_host)):
                if v is None:
                    raise invalid(f"batch.{n}: a CUDA context needs the slots and token offsets "
                                  "in host memory too")
            hs, hsn, hsk = _int32_host(slots_host, "batch.slots_host")
            ho, hon, hok = _int32_host(token_offsets_host, "batch.token_offsets_host")
            self._c.slots, self._c.token_offsets = sv.ptr, ov.ptr
            self._c.slots_host, self._c.token_offsets_host = hs, ho
            keep += [sv, ov, hsk, hok]
            capacity = min(sv.size, hsn, ov.size - 1, hon - 1)
            self._offsets_host = ho
        else:
            ptrs = []
            sizes = []
            for name, val in (("batch.slots", slots), ("batch.token_offsets", token_offsets)):
                if isinstance(val, (list, tuple, range)):
                    p, n, k = _int32_host(val, name)
                else:
                    v = ctx._tensor(val, name, _t.I32, "int32")
                    p, n, k = v.ptr, v.size, v
                ptrs.append(p)
                sizes.append(n)
                keep.append(k)
            self._c.slots, self._c.token_offsets = ptrs
            capacity = min(sizes[0], sizes[1] - 1)
            self._offsets_host = ptrs[1]
        if capacity < 0:
            raise invalid("batch.token_offsets: needs rows + 1 entries")
        self._keep = keep
        self._capacity = capacity
        self.slots, self.token_offsets = slots, token_offsets
        self.rows = capacity if rows is None else rows
        self._auto_max = max_row_tokens is None
        if max_row_tokens is not None:
            self._c.max_row_tokens = int(max_row_tokens)
        self._ref = byref(self._c)

    @property
    def rows(self) -> int:
        """Rows of the next call (at most the buffers' length)."""
        return self._c.rows

    @rows.setter
    def rows(self, rows: int) -> None:
        if not 0 <= rows <= self._capacity:
            raise invalid(f"batch.rows = {rows}: the buffers hold {self._capacity} rows")
        self._c.rows = rows

    @property
    def max_row_tokens(self) -> int:
        """The longest row's tokens, as passed to the library."""
        return self._c.max_row_tokens

    @max_row_tokens.setter
    def max_row_tokens(self, n: Optional[int]) -> None:
        self._auto_max = n is None
        if n is not None:
            self._c.max_row_tokens = int(n)

    def _tokens(self) -> int:
        """Tokens of the next call (host offsets), updating max_row_tokens if automatic."""
        offs = _read_ints(self._offsets_host, self._c.rows + 1)
        if not offs:
            return 0
        if self._auto_max:
            self._c.max_row_tokens = max([b - a for a, b in zip(offs, offs[1:])] or [0])
        return offs[-1]

    def __repr__(self) -> str:
        return f"PrefillBatch(rows={self.rows}, max_row_tokens={self.max_row_tokens})"


class LayerWeights:
    """``ssm_layer_weights``: one layer's fp32 parameters, bound once.

    Shapes: conv_weight [D][W], conv_bias [D] or None, a_log [HV], dt_bias
    [HV] (GDN) or [HV][K] (KDA); in the context's memory space.
    """
    __slots__ = ("_ctx", "_c", "_ref", "_keep")

    def __init__(self, ctx: "Context", conv_weight: Any, a_log: Any, dt_bias: Any,
                 conv_bias: Any = None):
        self._ctx = ctx
        m = ctx.model
        shapes = m.weight_shapes()
        self._c = _c.LayerWeights()
        keep = []
        for name, obj in (("conv_weight", conv_weight), ("conv_bias", conv_bias),
                          ("a_log", a_log), ("dt_bias", dt_bias)):
            if obj is None:
                if name != "conv_bias":
                    raise invalid(f"weights.{name}: required")
                continue
            v = ctx._tensor(obj, f"weights.{name}", _t.F32, "float32")
            want = 1
            for s in shapes[name]:
                want *= s
            if v.size != want:
                raise invalid(f"weights.{name}: {v.size} elements (shape {v.shape}), expected "
                              f"{want} (shape {shapes[name]})")
            setattr(self._c, name, v.ptr)
            keep.append(v)
        self._keep = keep
        self._ref = byref(self._c)


class StepIO:
    """``ssm_step_io``: a step's inputs and outputs, bound once and reusable.

    All in the activation dtype, token-major: x [n][D], gate [n][HV] (GDN) or
    [n][HV][K] (KDA), beta [n][HV], out [n][HV][V]. A buffer may hold more
    tokens than a call uses (the first ones are used); ``tokens`` is the
    least any of the four holds.
    """
    __slots__ = ("_ctx", "_c", "_ref", "_keep", "tokens")

    def __init__(self, ctx: "Context", x: Any, gate: Any, beta: Any, out: Any):
        self._ctx = ctx
        m = ctx.model
        widths = {"x": m.conv_channels, "gate": m.gate_width, "beta": m.value_heads,
                  "out": m.value_heads * m.value_dim}
        act = ctx._act_dtypes
        self._c = _c.StepIO()
        keep = []
        tokens = None
        for name, obj in (("x", x), ("gate", gate), ("beta", beta), ("out", out)):
            v = ctx._tensor(obj, f"io.{name}", act, ctx.config.activation_dtype)
            if name == "out" and v.readonly:
                raise invalid("io.out: read-only")
            w = widths[name]
            if v.size % w:
                raise invalid(f"io.{name}: {v.size} elements (shape {v.shape}) is not a whole "
                              f"number of tokens of {w} ({ctx.model.io_shapes(1)[name][1:]} "
                              "per token)")
            n = v.size // w
            tokens = n if tokens is None else min(tokens, n)
            setattr(self._c, name, v.ptr)
            keep.append(v)
        self._keep = keep
        self.tokens: int = tokens or 0
        self._ref = byref(self._c)


# -------------------------------------------------------------------- context


class Context:
    """``ssm_ctx``: the recurrent state of every linear-attention layer for a pool of
    request slots, in one state mode.

    Create with :meth:`from_file` or :meth:`from_string`; a context manager
    (``with Context.from_file(...) as ctx:``) or :meth:`close` destroys it.
    Not thread-safe (as the C context). Step calls on a CUDA context take
    ``stream=`` (an int handle, a torch or CuPy stream); left out, the
    current torch stream of the context's device when torch is imported,
    else the legacy default stream. On a CPU context the stream is ignored
    (NULL is passed) and calls run to completion.
    """

    def __init__(self, handle: int):
        """Wraps a raw ``ssm_ctx *`` (use :meth:`from_file` / :meth:`from_string`)."""
        self._h: Optional[int] = handle
        lib = _c.lib()
        self._lib = lib
        cfg = lib.ssm_ctx_config(handle).contents
        self._config = _config_info(cfg)
        self.model: ModelInfo = self._config.model
        self.is_cuda: bool = cfg.device.type == _c.DeviceType.CUDA
        self.device_index: int = cfg.device.index
        self._memory = "cuda" if self.is_cuda else "cpu"
        self._act_dtypes = _t.F32 if cfg.activation_dtype == DType.F32 else _t.BF16
        self._state_dtypes = _t.F32 if cfg.state_dtype == DType.F32 else _t.BF16
        self._act_size = DType(cfg.activation_dtype).itemsize
        self._state_size = DType(cfg.state_dtype).itemsize
        # the step path's C functions, looked up once
        self._prefill = lib.ssm_prefill
        self._decode = lib.ssm_decode
        self._verify = lib.ssm_verify
        self._commit = lib.ssm_commit

    # ------------------------------------------------------------ creation

    @classmethod
    def from_file(cls, path: PathLike) -> "Context":
        """``ssm_ctx_create_from_file``: loads and checks the INI file, loads the mode
        plugin, allocates the whole pool."""
        lib = _c.lib()
        h = c_void_p()
        check(lib.ssm_ctx_create_from_file(os.fsencode(path), byref(h)))
        return cls(h.value)

    @classmethod
    def from_string(cls, text: str, source: str = "<string>") -> "Context":
        """As :meth:`from_file`, from the INI text itself. A relative ``plugin_dir`` or
        ``[tuning] cache`` is taken from the current directory. Messages name
        `source` instead of a file."""
        with _LoadedText(text, source) as loaded:
            h = c_void_p()
            loaded.check(_c.lib().ssm_ctx_create(byref(loaded.cfg), byref(h)))
            return cls(h.value)

    def close(self) -> None:
        """``ssm_ctx_destroy``. Waits for nothing: synchronize the context's streams
        first. Calling it again does nothing."""
        h, self._h = self._h, None
        if h:
            self._lib.ssm_ctx_destroy(h)

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    @property
    def closed(self) -> bool:
        return self._h is None

    def _handle(self) -> int:
        if self._h is None:
            raise invalid("the context is closed")
        return self._h

    def __repr__(self) -> str:
        c = self._config
        state = "closed" if self._h is None else f"{c.max_requests} slots"
        return f"<ssmstate.Context {c.mode} {c.model.kind} {c.device} {state}>"

    # ---------------------------------------------------------- what it is

    @property
    def config(self) -> ConfigInfo:
        """``ssm_ctx_config``: the configuration the context was created from."""
        return self._config

    @property
    def plugin_path(self) -> str:
        """``ssm_ctx_plugin_path``: the file the mode plugin was loaded from."""
        return _c.text(self._lib.ssm_ctx_plugin_path(self._handle())) or ""

    def plan(self) -> Plan:
        """``ssm_ctx_plan``: bytes per slot, pool bytes, capacity."""
        p = _c.Plan()
        check(self._lib.ssm_ctx_plan(self._handle(), byref(p)))
        return _plan(p)

    def pool(self) -> PoolStats:
        """``ssm_pool_query``: capacity, used and free slots."""
        s = _c.PoolStats()
        check(self._lib.ssm_pool_query(self._handle(), byref(s)))
        return PoolStats(s.capacity, s.used, s.free)

    # ---------------------------------------------------------- tensors

    def _tensor(self, obj: Any, name: str, dtypes: Sequence[_t.DTypeKey], want: str) -> _t.View:
        v = _t.view(obj, name)
        _t.check_dtype(v, name, dtypes, want)
        _t.check_device(v, name, self._memory, self.device_index)
        return v

    def batch(self, slots: Any, tokens: int = 1, rows: Optional[int] = None,
              slots_host: Any = None) -> Batch:
        """A :class:`Batch` (``ssm_batch``) of decode (``tokens=1``) or verify rows."""
        return Batch(self, slots, tokens, rows, slots_host)

    def prefill_batch(self, slots: Any, token_offsets: Any, rows: Optional[int] = None,
                      max_row_tokens: Optional[int] = None, slots_host: Any = None,
                      token_offsets_host: Any = None) -> PrefillBatch:
        """A :class:`PrefillBatch` (``ssm_prefill_batch``)."""
        return PrefillBatch(self, slots, token_offsets, rows, max_row_tokens, slots_host,
                            token_offsets_host)

    def layer_weights(self, conv_weight: Any, a_log: Any, dt_bias: Any,
                      conv_bias: Any = None) -> LayerWeights:
        """:class:`LayerWeights` (``ssm_layer_weights``) of one layer."""
        return LayerWeights(self, conv_weight, a_log, dt_bias, conv_bias)

    def step_io(self, x: Any, gate: Any, beta: Any, out: Any) -> StepIO:
        """:class:`StepIO` (``ssm_step_io``): a step's tensors."""
        return StepIO(self, x, gate, beta, out)

    def _weights_arg(self, w: Any) -> LayerWeights:
        if type(w) is LayerWeights and w._ctx is self:
            return w
        if isinstance(w, LayerWeights):
            raise invalid("weights: bound to another context")
        if isinstance(w, Mapping):
            return LayerWeights(self, **w)
        if isinstance(w, (tuple, list)) and len(w) in (3, 4):
            return LayerWeights(self, *w)
        raise invalid("weights: expected LayerWeights, a mapping (conv_weight, a_log, dt_bias, "
                      f"conv_bias) or a tuple, not {type(w).__name__}")

    def _io_arg(self, io: Any) -> StepIO:
        if type(io) is StepIO and io._ctx is self:
            return io
        if isinstance(io, StepIO):
            raise invalid("io: bound to another context")
        if isinstance(io, Mapping):
            return StepIO(self, **io)
        if isinstance(io, (tuple, list)) and len(io) == 4:
            return StepIO(self, *io)
        raise invalid("io: expected StepIO, a mapping (x, gate, beta, out) or a 4-tuple, "
                      f"not {type(io).__name__}")

    def _batch_arg(self, b: Any, what: str) -> Batch:
        if type(b) is Batch and b._ctx is self:
            return b
        raise invalid(f"{what}: batch must be a Batch of this context (Context.batch)")

    # ------------------------------------------------------------ streams

    def _stream(self, stream: Any) -> Optional[int]:
        if not self.is_cuda:
            return None
        if stream is None:
            torch = sys.modules.get("torch")
            if torch is not None:
                return torch.cuda.current_stream(self.device_index).cuda_stream
            return None
        return stream_handle(stream)

    # ------------------------------------------------------------- slots

    def acquire(self) -> int:
        """``ssm_slot_acquire``: a fresh slot from the pool
        (``ERR_POOL_EXHAUSTED`` when none is free)."""
        s = c_int32()
        check(self._lib.ssm_slot_acquire(self._handle(), byref(s)))
        return s.value

    def release(self, slot: int) -> None:
        """``ssm_slot_release``: returns a slot to the pool, made fresh. On a CUDA context
        it waits for the device (not a step call: never inside graph capture)."""
        check(self._lib.ssm_slot_release(self._handle(), int(slot)))

    def reset(self, slot: int, stream: Any = None) -> None:
        """``ssm_slot_reset``: makes an acquired slot fresh. Stream-ordered."""
        check(self._lib.ssm_slot_reset(self._handle(), int(slot), self._stream(stream)))

    def slot_copy(self, src: int, dst: int, stream: Any = None) -> None:
        """``ssm_slot_copy``: makes acquired slot `dst` a copy of `src` (prefix sharing).
        Stream-ordered."""
        check(self._lib.ssm_slot_copy(self._handle(), int(src), int(dst),
                                      self._stream(stream)))

    # ------------------------------------------------------------- steps

    def prefill(self, layer: int, batch: PrefillBatch, weights: Any, io: Any,
                stream: Any = None) -> None:
        """``ssm_prefill``: one layer of a chunk of prompt for every row; writes
        ``io.out`` for every token. Call it for every layer."""
        if type(batch) is not PrefillBatch or batch._ctx is not self:
            raise invalid("prefill: batch must be a PrefillBatch of this context "
                          "(Context.prefill_batch)")
        w = self._weights_arg(weights)
        s = self._io_arg(io)
        need = batch._tokens()
        if s.tokens < need:
            raise invalid(f"prefill: io holds {s.tokens} tokens, the batch needs {need} "
                          f"(token_offsets[{batch.rows}])")
        st = self._prefill(self._h, layer, batch._ref, w._ref, s._ref, self._stream(stream))
        if st:
            raise SsmError(st, _c.last_error())

    def decode(self, layer: int, batch: Batch, weights: Any, io: Any,
               stream: Any = None) -> None:
        """``ssm_decode``: one token per row for one layer, committed at once
        (``batch.tokens`` must be 1). No allocation, no synchronization: with bound
        arguments (:meth:`batch`, :meth:`layer_weights`, :meth:`step_io`) it is one
        C call and can be captured in a CUDA graph."""
        b = self._batch_arg(batch, "decode")
        w = self._weights_arg(weights)
        s = self._io_arg(io)
        if s.tokens < b._c.rows * b._c.tokens:
            raise invalid(f"decode: io holds {s.tokens} tokens, the batch needs "
                          f"{b._c.rows * b._c.tokens} ({b._c.rows} rows x {b._c.tokens})")
        st = self._decode(self._h, layer, b._ref, w._ref, s._ref, self._stream(stream))
        if st:
            raise SsmError(st, _c.last_error())

    def verify(self, layer: int, batch: Batch, weights: Any, io: Any,
               ticket: Optional[Ticket] = None, stream: Any = None) -> Ticket:
        """``ssm_verify``: T = ``batch.tokens`` tokens per row for one layer; all T outputs
        written, the state change waits for :meth:`commit`.

        Without `ticket` (or with an empty one) it opens a forward and returns
        its new :class:`Ticket`; pass that ticket to the other layers' verifies
        (each layer once), then to :meth:`commit`. Every layer and the commit must
        see the same slot buffer: pass the same :class:`Batch` to every layer."""
        b = self._batch_arg(batch, "verify")
        w = self._weights_arg(weights)
        s = self._io_arg(io)
        if s.tokens < b._c.rows * b._c.tokens:
            raise invalid(f"verify: io holds {s.tokens} tokens, the batch needs "
                          f"{b._c.rows * b._c.tokens} ({b._c.rows} rows x {b._c.tokens})")
        if ticket is None:
            ticket = Ticket()
        elif type(ticket) is not Ticket:
            raise invalid(f"verify: ticket must be a Ticket, not {type(ticket).__name__}")
        st = self._verify(self._h, layer, b._ref, w._ref, s._ref, ticket._ref,
                          self._stream(stream))
        if st:
            raise SsmError(st, _c.last_error())
        ticket._batch = b
        return ticket

    def commit(self, ticket: Ticket, accepted: Any, stream: Any = None) -> None:
        """``ssm_commit``: keeps the first ``accepted[r]`` verified tokens of row r
        (1 <= accepted[r] <= T) for every layer and closes the forward.

        `accepted` is int32 in the context's memory space (on a CPU context a
        sequence of ints is accepted too; on a CUDA context the kernel checks
        the values and flags a bad row, see :meth:`slot_flags`)."""
        if type(ticket) is not Ticket:
            raise invalid(f"commit: ticket must be a Ticket, not {type(ticket).__name__}")
        if accepted is None:
            ptr, n, keep = None, 0, None
        elif not self.is_cuda and isinstance(accepted, (list, tuple, range)):
            ptr, n, keep = _int32_host(accepted, "accepted")
        else:
            v = self._tensor(accepted, "accepted", _t.I32, "int32")
            ptr, n, keep = v.ptr, v.size, v
        if accepted is not None and n < ticket._c.rows:
            raise invalid(f"commit: accepted holds {n} values, the forward has "
                          f"{ticket._c.rows} rows")
        st = self._commit(self._h, ticket._ref, ptr, self._stream(stream))
        del keep  # the values stay alive through the call
        if st:
            raise SsmError(st, _c.last_error())

    def abort(self, ticket: Ticket, stream: Any = None) -> None:
        """``ssm_forward_abort``: ends an open forward without committing it; every slot
        of the forward is made fresh and the ticket becomes stale."""
        if type(ticket) is not Ticket:
            raise invalid(f"abort: ticket must be a Ticket, not {type(ticket).__name__}")
        check(self._lib.ssm_forward_abort(self._handle(), ticket._ref, self._stream(stream)))

    # ---------------------------------------------------------- transfers

    def export_canonical(self, slot: int, conv: Any = None, state: Any = None,
                         stream: Any = None) -> Tuple[Any, Any]:
        """``ssm_slot_export_canonical``: copies a slot's canonical form, per layer the
        conv window [W-1][D] (activation dtype) and the state [HV][V][K] (state
        dtype), into `conv` and `state`: each either one tensor [layers][...] or a
        sequence of one tensor per layer, in the context's memory space. Left
        None on a CPU context, NumPy arrays are made ([layers][...]; bf16 as its
        uint16 bits). Returns (conv, state). Stream-ordered."""
        m = self.model
        shapes = m.canonical_shapes()
        if conv is None or state is None:
            if self.is_cuda:
                raise invalid("export_canonical: pass conv= and state= device tensors on a "
                              "CUDA context")
            np = _numpy("export_canonical without conv= and state=")
            act = np.float32 if self._act_size == 4 else np.uint16
            sd = np.float32 if self._state_size == 4 else np.uint16
            if conv is None:
                conv = np.zeros((m.layers,) + shapes["conv"], dtype=act)
            if state is None:
                state = np.zeros((m.layers,) + shapes["state"], dtype=sd)
        keep: List[Any] = []
        conv_ptrs = self._layer_ptrs(conv, "conv", shapes["conv"], self._act_dtypes,
                                     self._act_size, keep)
        state_ptrs = self._layer_ptrs(state, "state", shapes["state"], self._state_dtypes,
                                      self._state_size, keep)
        check(self._lib.ssm_slot_export_canonical(self._handle(), int(slot), conv_ptrs,
                                                  state_ptrs, self._stream(stream)))
        return conv, state

    def _layer_ptrs(self, obj: Any, name: str, shape: Tuple[int, ...],
                    dtypes: Sequence[_t.DTypeKey], itemsize: int, keep: List[Any]) -> Any:
        layers = self.model.layers
        per = 1
        for s in shape:
            per *= s
        ptrs = (c_void_p * layers)()
        want = "float32" if dtypes is _t.F32 else "bf16"
        if isinstance(obj, (list, tuple)):
            if len(obj) != layers:
                raise invalid(f"{name}: {len(obj)} tensors, the model has {layers} layers")
            for i, o in enumerate(obj):
                v = self._tensor(o, f"{name}[{i}]", dtypes, want)
                if v.size != per or v.readonly:
                    raise invalid(f"{name}[{i}]: {v.size} elements (shape {v.shape}), expected a "
                                  f"writable {shape}")
                ptrs[i] = v.ptr
                keep.append(v)
        else:
            v = self._tensor(obj, name, dtypes, want)
            if v.size != per * layers or v.readonly:
                raise invalid(f"{name}: {v.size} elements (shape {v.shape}), expected a "
                              f"writable {(layers,) + shape}")
            for i in range(layers):
                ptrs[i] = v.ptr + i * per * itemsize
            keep.append(v)
        return ptrs

    # ------------------------------------------------------------- pages

    @property
    def page_bytes(self) -> int:
        """``ssm_page_bytes``: bytes of one slot's page."""
        return int(self._lib.ssm_page_bytes(self._handle()))

    def export_page(self, slot: int) -> bytes:
        """``ssm_slot_export_page``: the slot's page (a self-describing, checksummed copy
        of its state; the slot does not change). Synchronous on a CUDA context."""
        n = self.page_bytes
        buf = ctypes.create_string_buffer(n)
        check(self._lib.ssm_slot_export_page(self._handle(), int(slot), buf, n))
        return buf.raw

    def import_page(self, slot: int, page: Any) -> None:
        """``ssm_slot_import_page``: loads a page (bytes-like, host memory) into acquired
        `slot`, from any mode of the same model and dtypes."""
        v = _host_bytes(page, "page")
        check(self._lib.ssm_slot_import_page(self._handle(), int(slot), v.ptr, v.nbytes))

    def export_pages(self, slots: Iterable[int]) -> List[bytes]:
        """``ssm_slots_export_pages``: one page per slot, in one call."""
        slots = list(slots)
        n, count = self.page_bytes, len(slots)
        arr = (c_int32 * max(1, count))(*slots)
        buf = ctypes.create_string_buffer(max(1, n * count))
        check(self._lib.ssm_slots_export_pages(self._handle(), count, arr, buf, n))
        raw = buf.raw
        return [raw[i * n:(i + 1) * n] for i in range(count)]

    def import_pages(self, slots: Iterable[int], pages: Any, stride: Optional[int] = None) -> None:
        """``ssm_slots_import_pages``: all the pages or, on any error, none. `pages` is
        a sequence of bytes-likes (one per slot), or one bytes-like holding page k
        at ``k * stride``."""
        slots = list(slots)
        count = len(slots)
        arr = (c_int32 * max(1, count))(*slots)
        if stride is None:
            if isinstance(pages, (bytes, bytearray, memoryview)):
                raise invalid("import_pages: one buffer of pages needs stride=")
            pages = [bytes(memoryview(p)) for p in pages]
            stride = max([self.page_bytes] + [len(p) for p in pages])
            buf = bytearray(stride * max(1, len(pages)))
            for i, p in enumerate(pages):
                buf[i * stride:i * stride + len(p)] = p
            if len(pages) != count:
                raise invalid(f"import_pages: {len(pages)} pages for {count} slots")
            v = _host_bytes(bytes(buf), "pages")
        else:
            v = _host_bytes(pages, "pages")
            if v.nbytes < count * stride:
                raise invalid(f"import_pages: pages holds {v.nbytes} bytes, {count} pages of "
                              f"stride {stride} need {count * stride}")
        check(self._lib.ssm_slots_import_pages(self._handle(), count, arr, v.ptr, int(stride)))

    def _device_pages(self, what: str, slots: Any, pages: Any, stride: Optional[int]
                      ) -> Tuple[int, int, Any, int, _t.View]:
        ptr, count, keep = _int32_host(slots, "slots")
        if stride is None:
            stride = (self.page_bytes + 7) // 8 * 8
        v = self._tensor(pages, "pages", _ANY_DTYPE, "any dtype")
        if v.nbytes < count * stride:
            raise invalid(f"{what}: pages holds {v.nbytes} bytes, {count} pages of stride "
                          f"{stride} need {count * stride}")
        return ptr, count, keep, int(stride), v

    def export_pages_device(self, slots: Any, pages: Any, stride: Optional[int] = None,
                            stream: Any = None) -> int:
        """``ssm_slots_export_pages_device``: each slot's page into device memory
        `pages` (a contiguous device tensor of any dtype, page k at byte
        ``k * stride``; stride defaults to the page size rounded up to 8),
        stream-ordered, no host synchronization. `slots` are host ints. CUDA
        contexts only. Returns the stride used."""
        ptr, count, keep, stride, v = self._device_pages("export_pages_device", slots, pages,
                                                         stride)
        check(self._lib.ssm_slots_export_pages_device(self._handle(), count, ptr, v.ptr, stride,
                                                      self._stream(stream)))
        return stride

    def import_pages_device(self, slots: Any, pages: Any, status: Any,
                            stride: Optional[int] = None, stream: Any = None) -> int:
        """``ssm_slots_import_pages_device``: loads device pages into the slots, all or
        none, every check on the device; ``status[k]`` (int32 device tensor) gets
        page k's :class:`PageStatus` on the stream. Returns the stride used."""
        ptr, count, keep, stride, v = self._device_pages("import_pages_device", slots, pages,
                                                         stride)
        sv = self._tensor(status, "status", _t.I32, "int32")
        if sv.size < count:
            raise invalid(f"import_pages_device: status holds {sv.size} values for {count} "
                          "pages")
        check(self._lib.ssm_slots_import_pages_device(self._handle(), count, ptr, v.ptr, stride,
                                                      sv.ptr, self._stream(stream)))
        return stride

    # ------------------------------------------------------------ status

    def status(self) -> Report:
        """``ssm_ctx_status``: flags raised by past steps (on a CUDA context this waits
        for the device: not during graph capture)."""
        r = _c.CtxReport()
        check(self._lib.ssm_ctx_status(self._handle(), byref(r)))
        return Report(_c.Flag(r.flags), r.flagged_slots, r.first_flagged)

    def slot_flags(self, slot: int) -> _c.Flag:
        """``ssm_slot_flags``: one slot's :class:`Flag` bits."""
        f = c_uint32()
        check(self._lib.ssm_slot_flags(self._handle(), int(slot), byref(f)))
        return _c.Flag(f.value)

    def tune(self, stream: Any = None) -> TuneReport:
        """``ssm_tune``: tunes launch choices as ``[tuning]`` says (nothing on a CPU
        context). Synchronizes: not a step call."""
        r = _c.TuneReport()
        check(self._lib.ssm_tune(self._handle(), self._stream(stream), byref(r)))
        return TuneReport(r.tuned, r.cached, r.skipped_failed, r.failed, r.untuned, r.saved)

    def tune_report(self) -> TuneReport:
        """``ssm_ctx_tune_report``: the latest tuning pass's report."""
        r = _c.TuneReport()
        check(self._lib.ssm_ctx_tune_report(self._handle(), byref(r)))
        return TuneReport(r.tuned, r.cached, r.skipped_failed, r.failed, r.untuned, r.saved)


_ANY_DTYPE = [(k, b) for k in ("f", "bf", "i", "u", "b", "V", "c") for b in (8, 16, 32, 64, 128)]


def _numpy(what: str) -> Any:
    try:
        import numpy
    except ImportError:
        raise invalid(f"{what} needs NumPy") from None
    return numpy


def _host_bytes(obj: Any, name: str) -> _t.View:
    v = _t.view(obj, name)
    if v.device != "cpu":
        raise invalid(f"{name}: must be in host memory")
    return v


# ------------------------------------------------------------ config text


class _LoadedText:
    """``ssm_config_load`` of INI text through a private temporary file. Inside the
    ``with``, ``cfg`` is a copy of the loaded config whose relative paths
    (``plugin_dir``, ``[tuning] cache``) point at the current directory and whose
    source is the caller's name, and :meth:`error` raises a C failure with the
    temporary file's name replaced by that source. Everything is freed on exit."""

    def __init__(self, text: Optional[str], source: str, path: Optional[PathLike] = None):
        self.text, self.source = text, source
        self.file = path
        self.ptr = ctypes.POINTER(_c.Config)()
        self.keep: List[bytes] = []
        self.dir = self.path = ""

    def __enter__(self) -> "_LoadedText":
        lib = _c.lib()
        if self.file is not None:  # a file: loaded as it is
            self.check(lib.ssm_config_load(os.fsencode(self.file), byref(self.ptr)))
            self.cfg = _c.Config.from_buffer_copy(self.ptr.contents)
            return self
        self.dir = tempfile.mkdtemp(prefix="ssmstate-")
        self.path = os.path.join(self.dir, "config.ini")
        try:
            with open(self.path, "w", encoding="utf-8") as f:
                f.write(self.text or "")
            self.check(lib.ssm_config_load(os.fsencode(self.path), byref(self.ptr)))
        except BaseException:
            self.__exit__()
            raise
        cfg = _c.Config.from_buffer_copy(self.ptr.contents)
        prefix = os.fsencode(self.dir) + b"/"
        cwd = os.fsencode(os.getcwd()).rstrip(b"/") + b"/"
        self.keep.append(os.fsencode(self.source))
        cfg.source = self.keep[-1]
        for obj, field in ((cfg, "plugin_dir"), (cfg.tuning, "cache")):
            value = getattr(obj, field)
            if value and value.startswith(prefix):
                self.keep.append(cwd + value[len(prefix):])
                setattr(obj, field, self.keep[-1])
        self.cfg = cfg
        return self

    def check(self, status: int) -> None:
        """:func:`check`, naming the source instead of the temporary file."""
        if status:
            msg = _c.last_error()
            raise SsmError(status, msg.replace(self.path, self.source) if self.path else msg)

    def __exit__(self, *exc: Any) -> None:
        if self.ptr:
            _c.lib().ssm_config_free(self.ptr)
            self.ptr = ctypes.POINTER(_c.Config)()
        if self.dir:
            for f in (lambda: os.unlink(self.path), lambda: os.rmdir(self.dir)):
                try:
                    f()
                except OSError:
                    pass


# ------------------------------------------------------------ module-level


def plan(path: Optional[PathLike] = None, *, text: Optional[str] = None) -> Plan:
    """``ssm_config_load`` + ``ssm_config_plan``: what a configuration (a file, or
    INI `text`) costs, without allocating the pool (its mode plugin is loaded to
    ask it)."""
    if (path is None) == (text is None):
        raise invalid("plan: give a path or text=, not both")
    with _LoadedText(text, "<string>", path) as loaded:
        p = _c.Plan()
        loaded.check(_c.lib().ssm_config_plan(byref(loaded.cfg), byref(p)))
        return _plan(p)


def plugins(plugin_dir: Optional[PathLike] = None) -> List[PluginInfo]:
    """``ssm_plugins_list``: the mode plugins on the search path (`plugin_dir`, the
    installed directory, ``$SSMSTATE_PLUGIN_PATH``), each with why it cannot be
    used when it cannot."""
    lib = _c.lib()
    d = os.fsencode(plugin_dir) if plugin_dir is not None else None
    count = c_int32()
    cap = 16
    while True:
        arr = (_c.PluginInfo * cap)()
        check(lib.ssm_plugins_list(d, arr, cap, byref(count)))
        if count.value <= cap:
            break
        cap = count.value
    out = []
    for i in range(count.value):
        p = arr[i]
        try:
            st = Status(p.status)
        except ValueError:
            st = p.status
        out.append(PluginInfo(p.name.decode("utf-8", "replace"),
                              p.path.decode("utf-8", "replace"), p.abi_version, p.mode_version,
                              p.capabilities, st, p.error.decode("utf-8", "replace")))
    return out


def inspect_page(page: Any) -> PageInfo:
    """``ssm_page_inspect``: a page's header, both checksums verified
    (``ERR_PAGE_INVALID`` otherwise). `page` is exactly one page."""
    return _page_info("ssm_page_inspect", page)


def read_page_header(header: Any) -> PageInfo:
    """``ssm_page_read_header``: the header checks alone, on a page's first bytes (at
    least 96): ``page_bytes`` says how long the whole page is before it is read."""
    return _page_info("ssm_page_read_header", header)


def _page_info(fn_name: str, page: Any) -> PageInfo:
    v = _host_bytes(page, "page")
    info = _c.PageInfo()
    check(_c.fn(fn_name)(v.ptr, v.nbytes, byref(info)))
    return PageInfo(info.format_version, info.library_version, _model_info(info.model),
                    _dtype_name(info.state_dtype), _dtype_name(info.activation_dtype),
                    info.head_first, info.head_end, info.payload_bytes, info.page_bytes,
                    info.payload_crc)


def slice_page(page: Any, first: int, end: int) -> bytes:
    """``ssm_page_slice``: the page of value heads [first, end) of `page` (a
    tensor-parallel rank's share)."""
    v = _host_bytes(page, "page")
    cap = max(v.nbytes, 4096)
    out = ctypes.create_string_buffer(cap)
    written = c_size_t()
    check(_c.lib().ssm_page_slice(v.ptr, v.nbytes, int(first), int(end), out, cap,
                                  byref(written)))
    return out.raw[:written.value]


def merge_pages(pages: Sequence[Any]) -> bytes:
    """``ssm_page_merge``: the page of the union of ranks' pages (any order)."""
    views = [_host_bytes(p, f"pages[{i}]") for i, p in enumerate(pages)]
    n = len(views)
    ptrs = (c_void_p * max(1, n))(*[v.ptr for v in views])
    sizes = (c_size_t * max(1, n))(*[v.nbytes for v in views])
    cap = sum(v.nbytes for v in views) + 4096
    out = ctypes.create_string_buffer(cap)
    written = c_size_t()
    check(_c.lib().ssm_page_merge(ptrs, sizes, n, out, cap, byref(written)))
    return out.raw[:written.value]


def status_name(code: int) -> str:
    """``ssm_status_name``: the stable name of a status code."""
    return _c.text(_c.lib().ssm_status_name(int(code))) or ""


__all__ = ["Batch", "ConfigInfo", "Context", "LayerWeights", "ModelInfo", "PageInfo", "Plan",
           "PluginInfo", "PoolStats", "PrefillBatch", "Report", "StepIO", "Ticket",
           "TuneReport", "inspect_page", "merge_pages", "plan", "plugins", "read_page_header",
           "slice_page",
           "status_name", "stream_handle", "ModelKind"]
