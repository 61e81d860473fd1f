"""ssmstate for Python: the recurrent state of hybrid linear-attention LLMs.

A thin binding of ``libssmstate`` through ctypes (no compiled extension). The
library is found through ``$SSMSTATE_LIBRARY``, then
``pkg-config --variable=libdir ssmstate``, then the dynamic loader's usual
paths; see :func:`load_library`.

    import ssmstate
    with ssmstate.Context.from_file("examples/quickstart.ini") as ctx:
        slot = ctx.acquire()
        ...
        ticket = None
        for layer in range(ctx.model.layers):
            ticket = ctx.verify(layer, batch, weights[layer], io[layer], ticket)
        ctx.commit(ticket, accepted)

Tensors are any object speaking ``__array_interface__`` (NumPy),
``__cuda_array_interface__`` (CuPy, PyTorch CUDA) or DLPack (PyTorch, JAX,
...), used in place. bf16 tensors may be torch/JAX/ml_dtypes bfloat16 or the
raw bits as (u)int16 (:func:`to_bf16`, :func:`from_bf16` convert NumPy
arrays). Every error is an :class:`SsmError` carrying the C status code and
message. docs/python.md has the whole guide.
"""
from __future__ import annotations

from typing import Any

from ._context import (Batch, ConfigInfo, Context, LayerWeights, ModelInfo, PageInfo, Plan,
                       PluginInfo, PoolStats, PrefillBatch, Report, StepIO, Ticket, TuneReport,
                       inspect_page, merge_pages, plan, plugins, read_page_header, slice_page,
                       status_name, stream_handle)
from ._lib import (DType, Flag, LibraryNotFoundError, ModelKind, PageStatus, SsmError, Status,
                   library_path, load_library)
from ._tensor import View, view

__version__ = "0.1.0"


def to_bf16(a: Any) -> Any:
    """A NumPy float array as bf16 bits (uint16), rounded to nearest even, as the
    library rounds."""
    import numpy as np
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bias = np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))
    return ((bits + bias) >> np.uint64(16)).astype(np.uint16)


def from_bf16(bits: Any) -> Any:
    """bf16 bits (uint16 NumPy array) as float32."""
    import numpy as np
    return (np.ascontiguousarray(bits, dtype=np.uint16).astype(np.uint32)
            << np.uint32(16)).view(np.float32)


__all__ = ["Batch", "ConfigInfo", "Context", "DType", "Flag", "LayerWeights",
           "LibraryNotFoundError", "ModelInfo", "ModelKind", "PageInfo", "PageStatus", "Plan",
           "PluginInfo", "PoolStats", "PrefillBatch", "Report", "SsmError", "Status", "StepIO",
           "Ticket", "TuneReport", "View", "from_bf16", "inspect_page", "library_path",
           "load_library", "merge_pages", "plan", "plugins", "read_page_header", "slice_page",
           "status_name",
           "stream_handle", "to_bf16", "view"]
