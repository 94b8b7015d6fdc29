"""What every op of :mod:`kittens.ops` is made with: the dense attention layouts the real and the fake
implementations share, and one ``torch.library`` custom op called three ways (:func:`_op`,
:func:`_autograd`, :func:`call`)."""

from __future__ import annotations

from typing import Callable, Dict, Sequence, Tuple

import torch
from torch import Tensor

# -- helpers shared by the real and the fake implementations -------------------------------------------

_BSHD = (0, 2, 1, 3)


def _layouts(t: Tensor) -> Tuple[str, ...]:
    """The dense layouts of attention a 4-D tensor is in: "bhsd" (dense (B, H, N, D)) and/or "bshd"
    (a (B, N, H, D) buffer seen through ``.transpose(1, 2)``); size-1 dimensions match any stride."""
    b, h, n, d = t.shape
    s = t.stride()
    got = []
    for name, want in (("bhsd", (h * n * d, n * d, d, 1)), ("bshd", (n * h * d, d, h * d, 1))):
        if all(size <= 1 or st == w for st, w, size in zip(s, want, (b, h, n, d))):
            got.append(name)
    return tuple(got)


def _in_layout(t: Tensor, layout: str) -> Tensor:
    """``t`` itself if it is dense in ``layout``, else a copy that is."""
    if layout in _layouts(t):
        return t
    if layout == "bshd":
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    return t.contiguous()


def _layout_like(t: Tensor) -> str:
    """The layout of a new attention tensor made like ``t`` (the forward's output like q, each gradient
    like its input): t's own dense layout where it has one, else (B, H, N, D); as the kernels' calls
    allocate it (``kittens._dispatch._layout_like``, the CPU path's ``kittens._attn_order``)."""
    lt = _layouts(t)
    return "bshd" if "bshd" in lt and "bhsd" not in lt else "bhsd"


def _empty(shape: Sequence[int], layout: str, like: Tensor, dtype=torch.bfloat16) -> Tensor:
    if layout == "bshd":
        b, h, n, d = shape
        return like.new_empty((b, n, h, d), dtype=dtype).transpose(1, 2)
    return like.new_empty(tuple(shape), dtype=dtype)


def _bf16(name: str, t: Tensor) -> None:
    if t.dtype != torch.bfloat16:
        raise TypeError(f"{name} has dtype {t.dtype}; kittens' kernels take bfloat16")


def seed_arg(x: int) -> int:
    """A 64-bit seed or counter as the signed int64 the op schemas carry (the ops take it back mod 2^64)."""
    x = int(x) % 2**64
    return x - 2**64 if x >= 2**63 else x


# -- one operator, called three ways --------------------------------------------------------------------
# Each kernel is a ``torch.library`` custom op (what torch.compile traces, with the fake and the autograd
# formula below it). Its Python dispatch costs tens of microseconds a call in eager mode (more with an
# input that requires grad) — more than a small kernel's launch, and a model makes hundreds of such calls
# a step. So an eager call goes around it (:func:`call`): without a gradient to take, straight to the
# op's body; with one, through a ``torch.autograd.Function`` made from the op's own body, setup and
# backward formula (one formula, two registrations). Traced calls (torch.compile, FakeTensor) take the op.

_BODIES: Dict[str, Callable] = {}
_FUNCTIONS: Dict[str, type] = {}
_PLAIN = (Tensor, torch.nn.Parameter)
# The other argument types of the ops' schemas, told apart by type alone: ``isinstance(x, Tensor)`` of a
# non-tensor goes through the tensor metaclass' instance check, slower than the rest of the test.
_SCALARS = frozenset((int, float, bool, str, list, tuple, type(None)))


def _op(name: str, mutates: Tuple[str, ...] = ()):
    """Decorator: ``kittens::<name>`` defined with the decorated function as its body (kept for
    :func:`call`); ``mutates``: the arguments it writes in place."""

    def define(body: Callable):
        _BODIES[name] = body
        return torch.library.custom_op(f"kittens::{name}", mutates_args=mutates)(body)

    return define


def _autograd(name: str, op, grad: Callable, setup: Callable) -> None:
    """``op.register_autograd(grad, setup_context=setup)`` and the same formula as the autograd.Function
    eager calls of ``name`` use. Its forward takes ``ctx`` and calls ``setup`` itself: a Function with a
    ``setup_context`` binds its arguments through ``inspect.signature`` on every call (tens of
    microseconds, the cost this avoids)."""
    op.register_autograd(grad, setup_context=setup)
    body = _BODIES[name]

    def forward(ctx, *args):
        out = body(*args)
        setup(ctx, args, out)
        return out

    _FUNCTIONS[name] = type(f"{name}_function", (torch.autograd.Function,), {
        "forward": staticmethod(forward),
        "backward": staticmethod(grad),
    })
    _direct_autograd(name, op)


# -- the dispatched call's own cost (compiled graphs) -----------------------------------------------------
# A compiled graph (torch.compile, AOTAutograd) calls each kittens op through the dispatcher, with grad mode
# off and plain tensors. ``torch.library.custom_op`` answers such a call with four layers of Python before
# the body: its autograd kernel (which finds no gradient to record and redispatches below autograd), the
# redispatch, its backend wrapper (a ``torch._disable_dynamo`` wrapper and a per-call check that the output
# aliases no input), more host time than a small op's body (docs/performance.md, "The torch layer's host
# time"). The kernel below sits on the per-device autograd keys (AutogradCPU, AutogradCUDA: more specific
# than custom_op's ``Autograd``, so the dispatcher picks it) and calls the body directly when nothing is
# traced and no gradient is to be recorded; otherwise it hands the call to custom_op's own autograd kernel
# (tracing, FakeTensor, functionalization and eager gradients unchanged). Ops that mutate an argument keep
# custom_op's path alone (its ADInplaceOrView kernel bumps their version counters).
_DIRECT_LIB = None
# Keys present when the call is traced or seen through a mode: the op must reach its fake and the tracer.
_TRACED_KEYS = tuple(getattr(torch._C.DispatchKey, k) for k in ("Python", "PythonTLSSnapshot", "Functionalize",
                                                                "PythonDispatcher")
                     if hasattr(torch._C.DispatchKey, k))
_any_requires_grad = getattr(torch._C, "_any_requires_grad", None)


def _direct_autograd(name: str, op) -> None:
    global _DIRECT_LIB
    try:
        from torch._library.autograd import make_autograd_impl

        slow = make_autograd_impl(op._opoverload, op)
    except (ImportError, AttributeError, TypeError):  # another torch's internals: custom_op's path alone
        return
    if _any_requires_grad is None or op._opoverload._schema.is_mutable:
        return
    body = _BODIES[name]
    traced = _TRACED_KEYS
    grad_enabled = torch.is_grad_enabled

    def kernel(keyset, *args, **kwargs):
        for k in traced:
            if keyset.has(k):
                return slow(keyset, *args, **kwargs)
        if grad_enabled() and _any_requires_grad(*args, **kwargs):
            return slow(keyset, *args, **kwargs)
        return body(*args, **kwargs)

    if _DIRECT_LIB is None:
        _DIRECT_LIB = torch.library.Library("kittens", "IMPL")
    for key in ("AutogradCPU", "AutogradCUDA"):
        _DIRECT_LIB.impl(name, kernel, key, with_keyset=True)


_compiling = torch.compiler.is_compiling


def call(name: str, *args):
    """``torch.ops.kittens.<name>(*args)`` at the least cost the call allows (positional arguments, as
    the schema orders them): the op when traced, else the body, or the autograd.Function when an input
    requires grad. One pass over the arguments (this runs on every eager call of every op)."""
    if _compiling():
        return getattr(torch.ops.kittens, name)(*args)
    grad = False
    for a in args:
        t = type(a)
        if t in _PLAIN:
            grad = grad or a.requires_grad
        elif t not in _SCALARS and isinstance(a, Tensor):
            # A tensor subclass (FakeTensor, a wrapper): the op's own dispatch.
            return getattr(torch.ops.kittens, name)(*args)
    if grad and torch.is_grad_enabled():
        return _FUNCTIONS[name].apply(*args)
    return _BODIES[name](*args)


