"""kittens.tile: write a tile kernel in Python, run it on CPU arrays, lower it, launch it on torch tensors.

The builder is the Rust ``kittens_ir::KernelBuilder`` itself (through the extension), op for op with
the Rust names (``global_`` for the keyword), so a Python program builds exactly the IR a Rust one does
and a build error is the Rust error, raised as ``ValueError``. Enums are strings: dtypes ``"bf16"``,
``"f32"``; access ``"read"``, ``"write"``; layouts ``"row"``, ``"col"``; base shapes ``"strip"``,
``"16x16"``...; the grid order ``"row_major"``. See docs/writing-kernels.md ("From Python")::

    from kittens import tile
    k = tile.Builder("scale", waves=4)
    rows = k.param("rows")
    x = k.global_("x", "bf16", [("row", rows), ("col", 1024)], "read")
    ...
    kern = kittens.compile(k.finish())
    y = kern.run({"x": x_numpy}, rows=37)["y"]        # the CPU interpreter
    kern.report("sm_90a")                              # source, budgets, registers, spills
    kern({"x": x_cuda, "y": y_cuda}, rows=37)          # on the current CUDA stream
"""

from __future__ import annotations

import sys
from typing import Any, Dict, Mapping

from . import _kittens

Builder = _kittens.Builder
Expr = _kittens.Expr
Cond = _kittens.Cond
Program = _kittens.Program
Tile = _kittens.Tile
Global = _kittens.Global
Shared = _kittens.Shared
row_split = _kittens.row_split

# Configurations a kernel keeps prepared; past it its table starts over, so its memory is bounded.
_MAX_KEYS = 256


def _key(ts, count: int, params: Mapping[str, int]) -> tuple:
    """Everything a prepared launch depends on besides the program: the parameters, how many tensors
    were given, and each declared tensor's shape, strides, dtype and device (not its address or data)."""
    return (tuple(params.items()), count, *((t.shape, t.stride(), t.dtype, t.device) for t in ts))


def _stream(device: int) -> int:
    """The current CUDA stream of ``device`` (a ``cudaStream_t`` as an int), as the torch ops take it."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(device)
    return int(torch.cuda.current_stream(device).cuda_stream)


__all__ = ["Builder", "Expr", "Cond", "Program", "Tile", "Global", "Shared", "Kernel", "compile", "row_split"]


def _numpy(a: Any) -> Any:
    """A CPU array as numpy float32 (torch CPU tensors included; bf16 values are exact in f32)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        if a.device.type != "cpu":
            raise ValueError(f"run() takes CPU arrays; got a tensor on {a.device} (call the kernel instead)")
        return a.detach().float().numpy()
    return a


class Kernel:
    """A compiled tile program: ``run`` on CPU arrays (the interpreter), ``report`` per target,
    and a call on CUDA torch tensors (sm_90a) on the current stream."""

    def __init__(self, program: Program):
        if not isinstance(program, Program):
            raise TypeError(f"kittens.compile takes a tile Program (Builder.finish()), got {type(program).__name__}")
        self.program = program
        self._names = tuple(n for n, _, _ in program.tensors)
        # Prepared launches by configuration (``_key``), as python/kittens/_dispatch/ keeps the ops'.
        self._handles: Dict[tuple, Any] = {}

    @property
    def name(self) -> str:
        return self.program.name

    def run(self, tensors: Mapping[str, Any], **params: int) -> Dict[str, Any]:
        """Runs on the CPU interpreter (which first runs the race check and refuses a racy kernel);
        returns name -> float32 numpy array of every tensor the kernel writes."""
        return self.program.interpret({n: _numpy(a) for n, a in tensors.items()}, params)

    def race_check(self, **params: int) -> list:
        """The schedule analysis at these parameters: one line per hazard (empty: race-free)."""
        return self.program.race_check(params)

    def report(self, target: str) -> Dict[str, Any]:
        """The lowering for ``target`` ("sm_90a", "gfx942", "gfx950"): source, budgets and, where the
        compiler is installed, registers and spills. A budget overrun raises ValueError."""
        return self.program.lower(target)

    def _key(self, tensors: Mapping[str, Any], params: Mapping[str, int]) -> tuple:
        """The key of a call's prepared launch (see ``_key`` at module level)."""
        return _key([tensors[n] for n in self._names], len(tensors), params)

    def __call__(self, tensors: Mapping[str, Any], **params: int) -> None:
        """Launches on CUDA torch tensors (every tensor the kernel declares, by name) on the current
        stream of their device; outputs are written in place. The launch is prepared (lowered for
        sm_90a, compiled, loaded, the layouts checked) on the first call of a configuration (see
        ``_key``); later calls of it are one dictionary lookup and the launch."""
        try:
            ts = [tensors[n] for n in self._names]
            key = _key(ts, len(tensors), params)
            handle = self._handles.get(key)
        except (KeyError, AttributeError, TypeError):  # a tensor missing or not a tensor: say which
            key, handle = None, None
        if handle is None:
            handle = self._prepare(key, tensors, params)
            ts = [tensors[n] for n in self._names]
        handle.launch([t.data_ptr() for t in ts], _stream(ts[0].get_device()))

    def _prepare(self, key, tensors: Mapping[str, Any], params: Mapping[str, int]):
        """Checks the tensors (named errors), prepares their launch and keeps it under ``key``."""
        import torch

        from . import _find_nvrtc

        for n in tensors:
            if n not in self._names:
                raise ValueError(f"{self.name}: no tensor {n!r} (it takes {list(self._names)})")
        for n in self._names:
            if n not in tensors:
                raise ValueError(f"{self.name}: tensor `{n}` not given")
        ts = []
        for n in self._names:
            t = tensors[n]
            if not isinstance(t, torch.Tensor) or not t.is_cuda:
                raise ValueError(f"{self.name}: tensor `{n}` is not a CUDA tensor")
            if t.device != tensors[self._names[0]].device:
                raise ValueError(f"{self.name}: tensor `{n}` is on {t.device}, "
                                 f"`{self._names[0]}` on {tensors[self._names[0]].device}")
            ts.append((n, list(t.shape), list(t.stride()), str(t.dtype).removeprefix("torch.")))
        _find_nvrtc()
        handle = self.program.prepare(ts, dict(params), tensors[self._names[0]].get_device())
        if key is not None:
            if len(self._handles) >= _MAX_KEYS:
                self._handles.clear()
            self._handles[key] = handle
        return handle

    def __repr__(self) -> str:
        return f"kittens.Kernel({self.name})"


def compile(program: Program) -> Kernel:  # noqa: A001 (the name the issue asks for)
    """The kernel of a finished tile program (see :class:`Kernel`)."""
    return Kernel(program)
