"""The C library through ctypes: finding it, its structs, its prototypes, errors.

Everything here mirrors ``include/ssmstate/ssmstate.h`` and ``types.h``
field for field; ``tests/python/test_abi.py`` compiles the headers and checks
every size and offset.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import enum
import os
import shutil
import subprocess
import threading
from ctypes import (POINTER, Structure, c_char, c_char_p, c_float, c_int, c_int32,
                    c_size_t, c_uint32, c_uint64, c_void_p)
from typing import List, Optional

#: The library's soname major version this package speaks (libssmstate.so.N).
SONAME_MAJOR = 0

# ------------------------------------------------------------------ enums


class Status(enum.IntEnum):
    """``ssm_status``: what every fallible C call returns (0 is success)."""
    OK = 0
    ERR_INVALID_ARGUMENT = 1
    ERR_CONFIG = 2
    ERR_PLUGIN = 3
    ERR_UNSUPPORTED = 4
    ERR_OUT_OF_MEMORY = 5
    ERR_POOL_EXHAUSTED = 6
    ERR_SLOT_RANGE = 7
    ERR_SLOT_NOT_ACQUIRED = 8
    ERR_VERIFY_PENDING = 9
    ERR_ACCEPTED_RANGE = 10
    ERR_TICKET_STALE = 11
    ERR_TICKET_FOREIGN = 12
    ERR_TICKET_REPEATED = 13
    ERR_TICKET_INCOMPLETE = 14
    ERR_PAGE_INVALID = 15
    ERR_DEVICE = 16
    ERR_INTERNAL = 17


class ModelKind(enum.IntEnum):
    """``ssm_model_kind``."""
    GDN = 1
    KDA = 2


class DType(enum.IntEnum):
    """``ssm_dtype``: how states and activations are stored."""
    F32 = 1
    BF16 = 2
    F16 = 3

    @property
    def itemsize(self) -> int:
        """Bytes of one element (``ssm_dtype_size``)."""
        return 4 if self is DType.F32 else 2

    @property
    def label(self) -> str:
        """The name the config file and ``ssm_dtype_name`` use ("f32", "bf16")."""
        return {DType.F32: "f32", DType.BF16: "bf16", DType.F16: "f16"}[self]


class DeviceType(enum.IntEnum):
    """``ssm_device_type``."""
    CPU = 1
    CUDA = 2


class Flag(enum.IntFlag):
    """``SSM_FLAG_*``: what past steps raised on a slot (``Context.slot_flags``)."""
    NONFINITE_INPUT = 1 << 0
    BAD_ACCEPTED = 1 << 1
    BAD_SLOT = 1 << 2
    PAGE_REFUSED = 1 << 3


class PageStatus(enum.IntEnum):
    """``ssm_page_status``: why a device page was or was not loaded."""
    ACCEPTED = 0
    BAD_MAGIC = 1
    BAD_VERSION = 2
    HEADER_CHECKSUM = 3
    MALFORMED = 4
    BAD_LENGTH = 5
    BAD_MODEL = 6
    BAD_DTYPE = 7
    BAD_HEADS = 8
    PAYLOAD_CHECKSUM = 9
    NOT_LOADED = 10


class TuningMode(enum.IntEnum):
    """``ssm_tuning_mode``."""
    OFF = 0
    CACHED = 1
    TUNE = 2


# ---------------------------------------------------------------- errors


class SsmError(Exception):
    """Every error of this package: a C call that failed, or an argument refused
    before the call.

    ``code`` is the :class:`Status` (``SSM_ERR_*``) and ``message`` the text of
    ``ssm_last_error()`` (for a C failure) or what the package found wrong (an
    argument refused in Python carries ``ERR_INVALID_ARGUMENT`` and names the
    argument).
    """

    def __init__(self, code: int, message: str):
        try:
            code = Status(code)
        except ValueError:
            pass
        self.code = code
        self.message = message
        super().__init__(f"{self.name}: {message}")

    @property
    def name(self) -> str:
        """The stable name of the code ("SSM_ERR_TICKET_STALE")."""
        if isinstance(self.code, Status):
            return "SSM_" + self.code.name
        return f"SSM_STATUS_{int(self.code)}"


class LibraryNotFoundError(SsmError, OSError):
    """``libssmstate`` could not be loaded; the message lists every place tried."""

    def __init__(self, tried: List[str]):
        self.tried = list(tried)
        lines = "\n".join("  - " + t for t in tried) or "  (nothing)"
        msg = ("cannot load libssmstate (libssmstate.so.%d); tried, in order:\n%s\n"
               "Set SSMSTATE_LIBRARY to the library file (a build tree's "
               ".libs/libssmstate.so.%d, or $libdir/libssmstate.so.%d of an install), "
               "or make pkg-config find ssmstate.pc (PKG_CONFIG_PATH)."
               % (SONAME_MAJOR, lines, SONAME_MAJOR, SONAME_MAJOR))
        SsmError.__init__(self, Status.ERR_PLUGIN, msg)
        self.args = (msg,)

    def __str__(self) -> str:
        return self.message


def invalid(message: str) -> SsmError:
    """An argument refused before any C call (``ERR_INVALID_ARGUMENT``)."""
    return SsmError(Status.ERR_INVALID_ARGUMENT, message)


# ---------------------------------------------------------------- structs
# Field for field as in the headers (ctypes lays them out as the C compiler does).


class ModelDims(Structure):
    """``ssm_model_dims``."""
    _fields_ = [("kind", c_int), ("layers", c_int32), ("heads", c_int32),
                ("value_heads", c_int32), ("key_dim", c_int32), ("value_dim", c_int32),
                ("conv_width", c_int32), ("has_lower_bound", c_int32), ("lower_bound", c_float)]


class Device(Structure):
    """``ssm_device``."""
    _fields_ = [("type", c_int), ("index", c_int32)]


class ModeOption(Structure):
    """``ssm_mode_option``."""
    _fields_ = [("key", c_char_p), ("value", c_char_p), ("line", c_int32)]


class HeadSlice(Structure):
    """``ssm_head_slice``."""
    _fields_ = [("heads", c_int32), ("value_heads", c_int32), ("first", c_int32)]


class TuningConfig(Structure):
    """``ssm_tuning_config``."""
    _fields_ = [("mode", c_int), ("cache", c_char_p), ("budget_ms", c_int32)]


class Config(Structure):
    """``ssm_config``."""
    _fields_ = [("model", ModelDims), ("mode", c_char_p), ("state_dtype", c_int),
                ("activation_dtype", c_int), ("device", Device), ("max_requests", c_int32),
                ("max_draft_tokens", c_int32), ("plugin_dir", c_char_p),
                ("mode_sections_count", c_int32), ("mode_section_names", POINTER(c_char_p)),
                ("mode_section_lines", POINTER(c_int32)),
                ("mode_options_count", POINTER(c_int32)),
                ("mode_options", POINTER(POINTER(ModeOption))), ("source", c_char_p),
                ("head_slice", HeadSlice), ("tuning", TuningConfig),
                ("prefill_precision", c_int)]


class Plan(Structure):
    """``ssm_plan``."""
    _fields_ = [("state_bytes_per_slot", c_uint64), ("conv_bytes_per_slot", c_uint64),
                ("scratch_bytes_per_slot", c_uint64), ("bytes_per_slot", c_uint64),
                ("shared_bytes", c_uint64), ("pool_bytes", c_uint64), ("capacity", c_int32)]


class PoolStats(Structure):
    """``ssm_pool_stats``."""
    _fields_ = [("capacity", c_int32), ("used", c_int32), ("free", c_int32)]


class Batch(Structure):
    """``ssm_batch``."""
    _fields_ = [("rows", c_int32), ("tokens", c_int32), ("slots", c_void_p),
                ("slots_host", c_void_p)]


class PrefillBatch(Structure):
    """``ssm_prefill_batch``."""
    _fields_ = [("rows", c_int32), ("slots", c_void_p), ("token_offsets", c_void_p),
                ("max_row_tokens", c_int32), ("slots_host", c_void_p),
                ("token_offsets_host", c_void_p)]


class Ticket(Structure):
    """``ssm_ticket``."""
    _fields_ = [("context_id", c_uint64), ("forward", c_uint64), ("rows", c_int32),
                ("tokens", c_int32), ("layout", c_uint32)]


class LayerWeights(Structure):
    """``ssm_layer_weights``."""
    _fields_ = [("conv_weight", c_void_p), ("conv_bias", c_void_p), ("a_log", c_void_p),
                ("dt_bias", c_void_p)]


class StepIO(Structure):
    """``ssm_step_io``."""
    _fields_ = [("x", c_void_p), ("gate", c_void_p), ("beta", c_void_p), ("out", c_void_p)]


class PageInfo(Structure):
    """``ssm_page_info``."""
    _fields_ = [("format_version", c_uint32), ("library_version", c_uint32),
                ("model", ModelDims), ("state_dtype", c_int), ("activation_dtype", c_int),
                ("head_first", c_int32), ("head_end", c_int32), ("payload_bytes", c_uint64),
                ("page_bytes", c_uint64), ("payload_crc", c_uint32)]


class CtxReport(Structure):
    """``ssm_ctx_report``."""
    _fields_ = [("flags", c_uint32), ("flagged_slots", c_int32), ("first_flagged", c_int32)]


class TuneReport(Structure):
    """``ssm_tune_report``."""
    _fields_ = [("tuned", c_int32), ("cached", c_int32), ("skipped_failed", c_int32),
                ("failed", c_int32), ("untuned", c_int32), ("saved", c_int32)]


class PluginInfo(Structure):
    """``ssm_plugin_info``."""
    _fields_ = [("name", c_char * 64), ("path", c_char * 4096), ("abi_version", c_uint32),
                ("mode_version", c_uint32), ("capabilities", c_uint64), ("status", c_int),
                ("error", c_char * 512)]


#: Every mirrored struct by its C name (tests/python/test_abi.py checks them).
STRUCTS = {
    "ssm_model_dims": ModelDims, "ssm_device": Device, "ssm_mode_option": ModeOption,
    "ssm_head_slice": HeadSlice, "ssm_tuning_config": TuningConfig,
    "ssm_config": Config, "ssm_plan": Plan, "ssm_pool_stats": PoolStats, "ssm_batch": Batch,
    "ssm_prefill_batch": PrefillBatch, "ssm_ticket": Ticket,
    "ssm_layer_weights": LayerWeights, "ssm_step_io": StepIO, "ssm_page_info": PageInfo,
    "ssm_ctx_report": CtxReport, "ssm_tune_report": TuneReport,
    "ssm_plugin_info": PluginInfo,
}

# ------------------------------------------------------------- prototypes

_p = POINTER
_vp = c_void_p
_st = c_int  # ssm_status
_PROTOTYPES = {
    "ssm_config_load": (_st, [c_char_p, _p(_p(Config))]),
    "ssm_config_free": (None, [_p(Config)]),
    "ssm_config_defaults": (None, [_p(Config)]),
    "ssm_ctx_create": (_st, [_p(Config), _p(_vp)]),
    "ssm_ctx_create_from_file": (_st, [c_char_p, _p(_vp)]),
    "ssm_ctx_destroy": (None, [_vp]),
    "ssm_config_plan": (_st, [_p(Config), _p(Plan)]),
    "ssm_ctx_plan": (_st, [_vp, _p(Plan)]),
    "ssm_ctx_config": (_p(Config), [_vp]),
    "ssm_ctx_plugin_path": (c_char_p, [_vp]),
    "ssm_slot_acquire": (_st, [_vp, _p(c_int32)]),
    "ssm_slot_release": (_st, [_vp, c_int32]),
    "ssm_slot_reset": (_st, [_vp, c_int32, _vp]),
    "ssm_pool_query": (_st, [_vp, _p(PoolStats)]),
    "ssm_prefill": (_st, [_vp, c_int32, _p(PrefillBatch), _p(LayerWeights), _p(StepIO), _vp]),
    "ssm_decode": (_st, [_vp, c_int32, _p(Batch), _p(LayerWeights), _p(StepIO), _vp]),
    "ssm_verify": (_st, [_vp, c_int32, _p(Batch), _p(LayerWeights), _p(StepIO), _p(Ticket),
                         _vp]),
    "ssm_commit": (_st, [_vp, _p(Ticket), _vp, _vp]),
    "ssm_forward_abort": (_st, [_vp, _p(Ticket), _vp]),
    "ssm_slot_export_canonical": (_st, [_vp, c_int32, _p(_vp), _p(_vp), _vp]),
    "ssm_slot_copy": (_st, [_vp, c_int32, c_int32, _vp]),
    "ssm_page_bytes": (c_size_t, [_vp]),
    "ssm_slot_export_page": (_st, [_vp, c_int32, _vp, c_size_t]),
    "ssm_slot_import_page": (_st, [_vp, c_int32, _vp, c_size_t]),
    "ssm_slots_export_pages": (_st, [_vp, c_int32, _vp, _vp, c_size_t]),
    "ssm_slots_import_pages": (_st, [_vp, c_int32, _vp, _vp, c_size_t]),
    "ssm_slots_export_pages_device": (_st, [_vp, c_int32, _vp, _vp, c_size_t, _vp]),
    "ssm_slots_import_pages_device": (_st, [_vp, c_int32, _vp, _vp, c_size_t, _vp, _vp]),
    "ssm_page_slice": (_st, [_vp, c_size_t, c_int32, c_int32, _vp, c_size_t, _p(c_size_t)]),
    "ssm_page_merge": (_st, [_p(_vp), _p(c_size_t), c_int32, _vp, c_size_t, _p(c_size_t)]),
    "ssm_page_inspect": (_st, [_vp, c_size_t, _p(PageInfo)]),
    "ssm_page_read_header": (_st, [_vp, c_size_t, _p(PageInfo)]),
    "ssm_ctx_status": (_st, [_vp, _p(CtxReport)]),
    "ssm_slot_flags": (_st, [_vp, c_int32, _p(c_uint32)]),
    "ssm_tune": (_st, [_vp, _vp, _p(TuneReport)]),
    "ssm_ctx_tune_report": (_st, [_vp, _p(TuneReport)]),
    "ssm_plugins_list": (_st, [c_char_p, _p(PluginInfo), c_int32, _p(c_int32)]),
    "ssm_last_error": (c_char_p, []),
    "ssm_status_name": (c_char_p, [c_int]),
    "ssm_dtype_name": (c_char_p, [c_int]),
    "ssm_model_kind_name": (c_char_p, [c_int]),
}

# ---------------------------------------------------------------- loading

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None


def _pkg_config_libdir(tried: List[str]) -> Optional[str]:
    exe = shutil.which("pkg-config")
    if not exe:
        tried.append("pkg-config --variable=libdir ssmstate: pkg-config is not installed")
        return None
    try:
        r = subprocess.run([exe, "--variable=libdir", "ssmstate"], capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        tried.append(f"pkg-config --variable=libdir ssmstate: {e}")
        return None
    libdir = r.stdout.strip()
    if r.returncode != 0 or not libdir:
        why = (r.stderr.strip().splitlines() or ["ssmstate.pc not found"])[0]
        tried.append(f"pkg-config --variable=libdir ssmstate: {why}")
        return None
    return libdir


def _try(path: str, tried: List[str], what: str) -> Optional[ctypes.CDLL]:
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        why = str(e)
        tried.append(f"{what}: {why}" if why.startswith(path) else f"{what}: {path}: {why}")
        return None
    if not hasattr(lib, "ssm_last_error"):
        tried.append(f"{what}: {path}: not libssmstate (no ssm_last_error)")
        return None
    return lib


def _find(explicit: Optional[str]) -> "tuple[ctypes.CDLL, str]":
    tried: List[str] = []
    soname = f"libssmstate.so.{SONAME_MAJOR}"
    if explicit:
        lib = _try(explicit, tried, "the path given")
        if lib is None:
            raise LibraryNotFoundError(tried)
        return lib, explicit
    env = os.environ.get("SSMSTATE_LIBRARY")
    if env:
        # An explicit setting is final: a wrong one is an error, never a silent fallback.
        lib = _try(env, tried, "SSMSTATE_LIBRARY")
        if lib is None:
            raise LibraryNotFoundError(tried)
        return lib, env
    tried.append("SSMSTATE_LIBRARY: not set")
    libdir = _pkg_config_libdir(tried)
    if libdir:
        path = os.path.join(libdir, soname)
        lib = _try(path, tried, "pkg-config's libdir")
        if lib is not None:
            return lib, path
    found = ctypes.util.find_library("ssmstate")
    if found:
        lib = _try(found, tried, "ctypes.util.find_library('ssmstate')")
        if lib is not None:
            return lib, found
    else:
        tried.append("ctypes.util.find_library('ssmstate'): nothing found")
    lib = _try(soname, tried, "the dynamic loader's path (LD_LIBRARY_PATH, ld.so.cache)")
    if lib is not None:
        return lib, soname
    raise LibraryNotFoundError(tried)


def load_library(path: Optional[str] = None) -> ctypes.CDLL:
    """Loads ``libssmstate`` (once per process) and returns it.

    Search order: ``path`` when given; else ``$SSMSTATE_LIBRARY`` (a file;
    when set, it is the only place tried); else the ``libdir`` that
    ``pkg-config --variable=libdir ssmstate`` prints; else
    ``ctypes.util.find_library("ssmstate")``; else ``libssmstate.so.N`` through
    the dynamic loader. Raises :class:`LibraryNotFoundError` listing every
    place tried. Later calls return the library already loaded (a different
    ``path`` then is an error).
    """
    global _lib, _lib_path
    with _lock:
        if _lib is not None:
            if path and os.path.realpath(path) != os.path.realpath(_lib_path or ""):
                raise SsmError(Status.ERR_INVALID_ARGUMENT,
                               f"libssmstate is already loaded from {_lib_path}")
            return _lib
        lib, where = _find(path)
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(lib, name, None)
            if fn is None:
                continue  # an older library: the call raises when used
            fn.restype = restype
            fn.argtypes = argtypes
        _lib, _lib_path = lib, where
        return lib


def lib() -> ctypes.CDLL:
    """The loaded library (loading it on first use)."""
    return _lib if _lib is not None else load_library()


def library_path() -> str:
    """Where the loaded library came from (loads it first)."""
    lib()
    assert _lib_path is not None
    return _lib_path


def fn(name: str):
    """A C function by name; ``ERR_UNSUPPORTED`` when the loaded library lacks it."""
    f = getattr(lib(), name, None)
    if f is None:
        raise SsmError(Status.ERR_UNSUPPORTED,
                       f"{name} is not in {_lib_path} (an older libssmstate)")
    return f


def last_error() -> str:
    """``ssm_last_error()``: this thread's last error message."""
    msg = lib().ssm_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def check(status: int) -> None:
    """Raises :class:`SsmError` with ``ssm_last_error()`` unless ``status`` is 0."""
    if status:
        raise SsmError(status, last_error())


def text(p: Optional[bytes]) -> Optional[str]:
    return None if p is None else p.decode("utf-8", "replace")
