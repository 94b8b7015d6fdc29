"""Reading the caller's arrays (torch tensors, numpy arrays, any ``__dlpack__`` object) into what the
extension module needs — address, shape, strides in elements, dtype, device — and making outputs of
the caller's kind.

Nothing here copies data: an array the kernel cannot read in place is refused by the extension module
with a message saying what layout it needs.
"""

from __future__ import annotations

import ctypes
import operator
import sys
from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple


def _torch():
    """torch if the caller has imported it (kittens never imports torch on its own for array checks)."""
    return sys.modules.get("torch")


def _is_torch(x: Any) -> bool:
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


@dataclass
class Array:
    """One array as the extension module sees it, and how to make outputs like it."""

    obj: Any
    kind: str  # "torch", "numpy" or "dlpack"
    ptr: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]
    dtype: str
    device: str  # "cpu", "cuda" or another framework's name (refused later)
    index: int
    keep: List[Any] = field(default_factory=list)  # objects that keep the memory alive

    def args(self):
        return (self.ptr, list(self.shape), list(self.strides), self.dtype, self.device, self.index)

    def where(self) -> str:
        return self.device if self.device == "cpu" else f"{self.device}:{self.index}"


def as_bool(value: Any, name: str) -> bool:
    """``value`` if it is a bool (Python's or numpy's); a TypeError otherwise, never a truthiness
    coercion (``interleaved='no'`` is not True)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")


def as_int(value: Any, name: str, lo: int, hi: Optional[int] = None) -> int:
    """``value`` as an exact integer in ``[lo, hi)`` (``hi`` None: no upper bound): floats are a
    TypeError (``1.5`` and ``3.7`` are not truncated), bools too, and out-of-range values a ValueError
    (``-1`` and ``2**64`` are not wrapped)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        raise TypeError(f"{name} must be an integer, got a bool")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}") from None
    if v < lo or (hi is not None and v >= hi):
        upper = "" if hi is None else f" and below {hi}"
        raise ValueError(f"{name} = {v} must be at least {lo}{upper}")
    return v


def adapt(x: Any, name: str, writable: bool = False) -> Array:
    if _is_torch(x):
        return _from_torch(x, name)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(x, np.ndarray):
        return _from_numpy(x, name, writable)
    if hasattr(x, "__dlpack__"):
        return _from_dlpack(x, name, writable)
    raise TypeError(
        f"{name} is a {type(x).__module__}.{type(x).__qualname__}; kittens takes torch tensors, numpy "
        "arrays (dtype ml_dtypes.bfloat16) and objects with __dlpack__"
    )


_TORCH_DTYPES: dict = {}


def _from_torch(x, name: str) -> Array:
    # Every CUDA call reads its tensors here: the common cases without building a torch.device.
    if x.is_cuda:
        kind, index = "cuda", x.get_device()
    else:
        dev = x.device
        kind, index = dev.type, dev.index if dev.index is not None else 0
    dtype = _TORCH_DTYPES.get(x.dtype)
    if dtype is None:
        dtype = _TORCH_DTYPES.setdefault(x.dtype, str(x.dtype).replace("torch.", ""))
    ptr = x.data_ptr() if kind in ("cpu", "cuda") else 0
    return Array(x, "torch", ptr, tuple(x.shape), tuple(x.stride()), dtype, kind, index)


def _numpy_dtype_name(x) -> str:
    return "bfloat16" if x.dtype.name == "bfloat16" else str(x.dtype)


def _from_numpy(x, name: str, writable: bool) -> Array:
    if writable and not x.flags.writeable:
        raise ValueError(f"{name} is a read-only numpy array")
    item = x.itemsize
    if any(s % item for s in x.strides):
        raise ValueError(f"{name}: strides {x.strides} bytes are not multiples of the item size {item}")
    strides = tuple(s // item for s in x.strides)
    ptr = x.__array_interface__["data"][0]
    return Array(x, "numpy", ptr, tuple(x.shape), strides, _numpy_dtype_name(x), "cpu", 0)


# DLPack (dlpack.h, v0.8 ABI of the unversioned "dltensor" capsule).
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensorVersioned(ctypes.Structure):
    """DLPack 1.0's versioned capsule ("dltensor_versioned"): the one that says whether the memory may
    be written (``flags`` bit 0, DLPACK_FLAG_BITMASK_READ_ONLY)."""

    _fields_ = [
        ("version_major", ctypes.c_uint32),
        ("version_minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_DL_READ_ONLY = 1
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
_DL_CODES = {0: "int", 1: "uint", 2: "float", 4: "bfloat"}


def _dlpack_device(x) -> Tuple[int, int]:
    try:
        t, i = x.__dlpack_device__()
        return int(t), int(i)
    except Exception:  # an older producer: ask the capsule itself
        return (-1, -1)


def _from_dlpack(x, name: str, writable: bool) -> Array:
    dev_type, _ = _dlpack_device(x)
    if dev_type in (_DL_CUDA, _DL_CUDA_MANAGED):
        # A CUDA array from another framework: torch imports it (honouring the DLPack stream protocol on
        # torch's current stream) and allocates the output; without torch there is nothing to allocate
        # the output with.
        torch = _torch()
        if torch is None:
            try:
                import torch  # noqa: F811
            except ImportError:
                raise RuntimeError(
                    f"{name} is a CUDA array of {type(x).__module__}; kittens needs torch to run on CUDA "
                    "arrays other than torch tensors"
                ) from None
        a = _from_torch(torch.from_dlpack(x), name)
        a.keep.append(x)
        return a
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    if writable:
        t, capsule = _writable_dlpack(x, name, get)
    else:
        capsule = x.__dlpack__()
        ptr = get(capsule, b"dltensor")  # raises ValueError if it is not an unconsumed DLPack capsule
        t = _DLTensor.from_address(ptr)
    ndim = t.ndim
    shape = tuple(t.shape[i] for i in range(ndim))
    if t.strides:
        strides = tuple(t.strides[i] for i in range(ndim))
    else:  # NULL strides: compact row-major
        strides, acc = [], 1
        for d in reversed(shape):
            strides.append(acc)
            acc *= d
        strides = tuple(reversed(strides))
    code = _DL_CODES.get(t.dtype.code, f"code{t.dtype.code}")
    dtype = f"{code}{t.dtype.bits}" + (f"x{t.dtype.lanes}" if t.dtype.lanes != 1 else "")
    dt = t.device.device_type
    device = "cpu" if dt in (_DL_CPU, _DL_CUDA_HOST) else f"dlpack-device-{dt}"
    data = (t.data or 0) + t.byte_offset
    # The capsule is not consumed (not renamed): its destructor frees the producer's tensor once the call
    # is over and the capsule is dropped; until then `keep` holds it.
    return Array(x, "dlpack", data, shape, strides, dtype, device, t.device.device_id, keep=[capsule])


def _writable_dlpack(x, name: str, get):
    """``(DLTensor, capsule)`` of an output passed through DLPack, from a DLPack 1.0 capsule whose flags say the
    memory may be written; a read-only one, or a producer that cannot say (the unversioned capsule
    carries no such flag), is a ValueError: kittens never writes memory it may not."""
    try:
        capsule = x.__dlpack__(max_version=(1, 0))
    except TypeError:
        capsule = None
    name_of = ctypes.pythonapi.PyCapsule_GetName
    name_of.restype = ctypes.c_char_p
    name_of.argtypes = [ctypes.py_object]
    if capsule is None or name_of(capsule) != b"dltensor_versioned":
        raise ValueError(
            f"{name}: this DLPack producer does not say whether its memory may be written (it gives no "
            "DLPack 1.0 capsule); pass a writable numpy array or torch tensor as the output"
        )
    m = _DLManagedTensorVersioned.from_address(get(capsule, b"dltensor_versioned"))
    if m.flags & _DL_READ_ONLY:
        raise ValueError(f"{name} is a read-only DLPack array; kittens writes its output there")
    return m.dl_tensor, capsule


def new_like(ref: Array, shape: Tuple[int, ...], order: Optional[Tuple[int, ...]] = None):
    """A new bf16 array of `ref`'s kind and device with logical `shape`; `order` is the permutation of
    a contiguous allocation that gives the wanted strides (e.g. (0, 2, 1, 3) for a (B, N, H, D) buffer
    seen as (B, H, N, D))."""
    order = order or tuple(range(len(shape)))
    storage = tuple(shape[i] for i in _inverse(order))
    if ref.kind == "torch":
        torch = _torch()
        t = torch.empty(storage, dtype=torch.bfloat16, device=ref.obj.device)
        return t.permute(*order) if order != tuple(range(len(shape))) else t
    import ml_dtypes
    import numpy as np

    a = np.empty(storage, dtype=ml_dtypes.bfloat16)
    return a.transpose(order) if order != tuple(range(len(shape))) else a


def _inverse(order: Tuple[int, ...]) -> Tuple[int, ...]:
    inv = [0] * len(order)
    for i, o in enumerate(order):
        inv[o] = i
    return tuple(inv)


def matmul_operand(shape, strides) -> Optional[Tuple[bool, int]]:
    """How a matmul operand of 2-D ``shape`` (rows, cols) is stored, as the GEMM kernel reads it in
    place: ``(False, ld)`` row-major with rows ``ld ≥ cols`` elements apart (a slice of a bigger
    matrix), ``(True, ld)`` the transpose of a row-major (cols, rows) array with rows ``ld ≥ rows``
    apart (``x.T``, or a slice of one); ``None`` for any other strides. The CPU path's check
    (``view::operand`` in the extension module) takes the same rule."""
    # Compared, never converted with int(): under torch.compile(dynamic=True) the sizes are SymInts, and
    # int() would specialise the graph to this call's sizes (a recompile per sequence length).
    rows, cols = shape
    s0, s1 = strides
    if rows == 0 or cols == 0:
        return False, cols

    def lead(n, s, c):
        return c if n <= 1 else (s if s >= c else None)

    if cols <= 1 or s1 == 1:
        ld = lead(rows, s0, cols)
        if ld is not None:
            return False, ld
    if rows <= 1 or s0 == 1:
        ld = lead(cols, s1, rows)
        if ld is not None:
            return True, ld
    return None
