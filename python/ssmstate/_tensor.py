"""Tensors without copies: a raw pointer, shape and dtype from any array object.

Tried in order, the first that the object offers and that answers:

1. ``__array_interface__`` (NumPy and anything that mimics it): host memory;
2. ``__cuda_array_interface__`` (CuPy, Numba, PyTorch CUDA tensors of dtypes
   it can describe): CUDA device memory;
3. ``__dlpack__`` (PyTorch CPU and CUDA tensors, bf16 included, JAX, CuPy,
   NumPy >= 1.22 ...), read through ``DLManagedTensorVersioned`` when the
   producer offers the versioned protocol, else ``DLManagedTensor``. The
   capsule is kept alive with the view and never consumed, so the producer's
   own capsule destructor frees it;
4. the buffer protocol (``bytes``, ``bytearray``, ``memoryview``, ctypes
   arrays): host memory.

Nothing is copied (save a read-only buffer that is not ``bytes``, which the
buffer route copies into ``bytes``) and nothing is synchronized: the pointer
is the object's own, valid while the object lives.
"""
from __future__ import annotations

import ctypes
from ctypes import (POINTER, Structure, c_int, c_int32, c_int64, c_uint8, c_uint16, c_uint32,
                    c_uint64, c_void_p)
from typing import Any, List, Optional, Sequence, Tuple

from ._lib import invalid

# dtype kinds: ("f", 32), ("bf", 16), ("i", 32), ("u", 16), ("b", 8), ("V", 2) ...
DTypeKey = Tuple[str, int]

# DLPack device types and dtype codes (dlpack.h)
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
_DL_HOST = (_DL_CPU, _DL_CUDA_HOST)
_DL_DEVICE = (_DL_CUDA, _DL_CUDA_MANAGED)
_DL_CODES = {0: "i", 1: "u", 2: "f", 4: "bf", 5: "c", 6: "b"}
_DL_FLAG_READ_ONLY = 1


class _DLDevice(Structure):
    _fields_ = [("device_type", c_int), ("device_id", c_int32)]


class _DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class _DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", _DLDevice), ("ndim", c_int32),
                ("dtype", _DLDataType), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class _DLManagedTensor(Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", c_void_p), ("deleter", c_void_p)]


class _DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class _DLManagedTensorVersioned(Structure):
    _fields_ = [("version", _DLPackVersion), ("manager_ctx", c_void_p), ("deleter", c_void_p),
                ("flags", c_uint64), ("dl_tensor", _DLTensor)]


_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = c_int
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


class View:
    """What a tensor argument resolves to: its address and description.

    ``device`` is "cpu" or "cuda"; ``device_id`` the CUDA ordinal when known
    (None when the interface does not say). ``keep`` holds what must live as
    long as the pointer is used (the object, a DLPack capsule).
    """
    __slots__ = ("ptr", "shape", "dtype", "itemsize", "device", "device_id", "readonly", "keep",
                 "route")

    def __init__(self, ptr: int, shape: Tuple[int, ...], dtype: DTypeKey, device: str,
                 device_id: Optional[int], readonly: bool, keep: Any, route: str):
        self.ptr = int(ptr or 0)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.itemsize = max(1, dtype[1] // 8)
        self.device = device
        self.device_id = device_id
        self.readonly = readonly
        self.keep = keep
        self.route = route

    @property
    def size(self) -> int:
        """Elements."""
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    def __repr__(self) -> str:
        return (f"View({self.route}, ptr={self.ptr:#x}, shape={self.shape}, "
                f"dtype={dtype_label(self.dtype)}, device={self.device}:{self.device_id})")


def dtype_label(d: DTypeKey) -> str:
    names = {"f": "float", "bf": "bfloat", "i": "int", "u": "uint", "b": "bool", "c": "complex",
             "V": "void"}
    return f"{names.get(d[0], d[0])}{d[1]}"


def _c_contiguous(shape: Sequence[int], strides: Optional[Sequence[int]], unit: int) -> bool:
    """strides (in units of `unit` bytes per element step) describe C order."""
    if strides is None:
        return True
    expect = unit
    for n, s in zip(reversed(list(shape)), reversed(list(strides))):
        if n == 0:
            return True
        if n != 1 and s != expect:
            return False
        expect *= n
    return True


def _typestr_key(typestr: str, obj: Any) -> DTypeKey:
    if typestr[0] not in "<|=" or len(typestr) < 3:
        raise ValueError(f"byte order or type {typestr!r} is not little-endian")
    kind, size = typestr[1], int(typestr[2:])
    if kind == "V" and size == 2 and "bfloat16" in str(getattr(obj, "dtype", "")):
        return ("bf", 16)  # ml_dtypes.bfloat16 NumPy arrays
    return (kind, size * 8)


def _from_interface(obj: Any, iface: dict, device: str, route: str) -> View:
    shape = tuple(iface["shape"])
    key = _typestr_key(iface["typestr"], obj)
    data = iface.get("data")
    if data is None:
        raise ValueError(f"{route} without a data pointer")
    ptr, readonly = (data if isinstance(data, tuple) else (data, False))
    if not _c_contiguous(shape, iface.get("strides"), key[1] // 8):
        raise ValueError("not C-contiguous")
    device_id = None
    if device == "cuda":
        device_id = _dlpack_device_id(obj)
    return View(ptr or 0, shape, key, device, device_id, bool(readonly), obj, route)


def _dlpack_device_id(obj: Any) -> Optional[int]:
    fn = getattr(obj, "__dlpack_device__", None)
    if fn is None:
        return None
    try:
        return int(fn()[1])
    except Exception:
        return None


def _from_dlpack(obj: Any) -> View:
    dev = None
    try:
        dev = obj.__dlpack_device__()
    except Exception:
        pass
    on_host = dev is None or int(dev[0]) in _DL_HOST
    # Device memory: stream -1 asks the producer for no synchronization at all.
    # Like the C API, the binding orders nothing: the caller's streams do (and
    # no event is recorded, which a stream being captured into a graph would
    # refuse).
    kw_stream = None if on_host else -1
    capsule, versioned = None, False
    errors: List[str] = []
    for kwargs in ({"stream": kw_stream, "max_version": (1, 0)}, {"stream": kw_stream}, {}):
        try:
            capsule = obj.__dlpack__(**kwargs)
            break
        except (TypeError, ValueError, BufferError) as e:  # an older producer
            errors.append(f"{type(e).__name__}: {e}")
            continue
    if capsule is None:
        raise ValueError("__dlpack__ refused: " + "; ".join(errors))
    if _capsule_valid(capsule, b"dltensor_versioned"):
        versioned = True
        mt = _DLManagedTensorVersioned.from_address(
            _capsule_pointer(capsule, b"dltensor_versioned"))
        t = mt.dl_tensor
        readonly = bool(mt.flags & _DL_FLAG_READ_ONLY)
    elif _capsule_valid(capsule, b"dltensor"):
        t = _DLManagedTensor.from_address(_capsule_pointer(capsule, b"dltensor")).dl_tensor
        readonly = False
    else:
        raise ValueError("__dlpack__ returned no valid DLPack capsule")
    if t.dtype.lanes != 1:
        raise ValueError(f"DLPack dtype with {t.dtype.lanes} lanes")
    key = (_DL_CODES.get(t.dtype.code, f"code{t.dtype.code}"), int(t.dtype.bits))
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = None if not t.strides else tuple(t.strides[i] for i in range(t.ndim))
    if not _c_contiguous(shape, strides, 1):
        raise ValueError("not C-contiguous")
    dtype_ = int(t.device.device_type)
    if dtype_ in _DL_HOST:
        device, device_id = "cpu", None
    elif dtype_ in _DL_DEVICE:
        device, device_id = "cuda", int(t.device.device_id)
    else:
        raise ValueError(f"DLPack device type {dtype_} (neither CPU nor CUDA)")
    ptr = (t.data or 0) + int(t.byte_offset)
    route = "__dlpack__ (versioned)" if versioned else "__dlpack__"
    return View(ptr, shape, key, device, device_id, readonly, (obj, capsule), route)


def _from_buffer(obj: Any) -> View:
    mv = memoryview(obj)
    if not mv.c_contiguous:
        raise ValueError("not C-contiguous")
    fmt = mv.format.lstrip("<=@")
    kinds = {"b": ("i", 8), "B": ("u", 8), "c": ("u", 8), "h": ("i", 16), "H": ("u", 16),
             "i": ("i", 32), "I": ("u", 32), "l": ("i", 8 * mv.itemsize),
             "L": ("u", 8 * mv.itemsize), "q": ("i", 64), "Q": ("u", 64), "f": ("f", 32),
             "d": ("f", 64), "e": ("f", 16)}
    key = kinds.get(fmt, ("u", 8) if mv.itemsize == 1 else ("V", 8 * mv.itemsize))
    shape = tuple(mv.shape) if mv.ndim else (1,)
    if mv.nbytes == 0:
        return View(0, shape, key, "cpu", None, mv.readonly, obj, "buffer")
    if not mv.readonly:
        arr = (ctypes.c_char * mv.nbytes).from_buffer(mv)
        return View(ctypes.addressof(arr), shape, key, "cpu", None, False, (obj, mv, arr),
                    "buffer")
    data = obj if isinstance(obj, bytes) else mv.tobytes()  # bytes: its own, immutable storage
    ptr = ctypes.cast(ctypes.c_char_p(data), c_void_p).value
    return View(ptr, shape, key, "cpu", None, True, (obj, data), "buffer")


def view(obj: Any, name: str = "array") -> View:
    """Resolves `obj` to a :class:`View`; :class:`SsmError` naming `name` when it cannot."""
    if isinstance(obj, View):
        return obj
    reasons: List[str] = []
    for attr, device in (("__array_interface__", "cpu"), ("__cuda_array_interface__", "cuda")):
        try:
            iface = getattr(obj, attr)
        except AttributeError:
            continue
        except Exception as e:  # e.g. torch: bf16 or requires_grad
            reasons.append(f"{attr}: {type(e).__name__}: {e}")
            continue
        try:
            return _from_interface(obj, iface, device, attr)
        except (ValueError, KeyError, TypeError) as e:
            raise invalid(f"{name}: {e} ({attr})") from None
    if hasattr(obj, "__dlpack__"):
        try:
            return _from_dlpack(obj)
        except ValueError as e:
            if "C-contiguous" in str(e):
                raise invalid(f"{name}: {e} (__dlpack__)") from None
            reasons.append(f"__dlpack__: {e}")
        except Exception as e:
            reasons.append(f"__dlpack__: {type(e).__name__}: {e}")
    try:
        return _from_buffer(obj)
    except TypeError:
        pass
    except ValueError as e:
        raise invalid(f"{name}: {e} (buffer protocol)") from None
    why = "; ".join(reasons) if reasons else (
        "it offers none of __array_interface__, __cuda_array_interface__, __dlpack__ "
        "or the buffer protocol")
    raise invalid(f"{name}: {type(obj).__name__} is not a usable array: {why}")


def check_dtype(v: View, name: str, accepted: Sequence[DTypeKey], want: str) -> None:
    if v.dtype not in accepted:
        raise invalid(f"{name}: dtype {dtype_label(v.dtype)}, expected {want}")


def check_device(v: View, name: str, device: str, device_id: int) -> None:
    """`v` lies in the memory space `device` ("cpu", or "cuda" with ordinal `device_id`)."""
    if v.device != device:
        where = "host memory" if device == "cpu" else f"CUDA device memory (cuda:{device_id})"
        got = "host memory" if v.device == "cpu" else "CUDA device memory"
        raise invalid(f"{name}: in {got}, this context needs {where}")
    if device == "cuda" and v.device_id is not None and v.device_id != device_id:
        raise invalid(f"{name}: on cuda:{v.device_id}, this context is on cuda:{device_id}")


#: Accepted dtypes by what the C API names.
F32: Sequence[DTypeKey] = (("f", 32),)
BF16: Sequence[DTypeKey] = (("bf", 16), ("u", 16), ("i", 16))  # raw bf16 bits as (u)int16 too
I32: Sequence[DTypeKey] = (("i", 32),)
