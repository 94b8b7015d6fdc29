"""``python -m kittens.bench host [--device meta|cuda] [--calls N] [--json F] [--profile]``: the host (Python)
time of kittens' torch layer per call, with every kernel launch replaced by a no-op.

What it measures, and only that: the Python between the caller and the extension's launch — the public
function, ``kittens.ops.call``, the op's body, the prepared-call lookup in ``kittens._dispatch`` (key, table,
output allocation, addresses) — per public op on the model path (matmul, ``kittens.nn.Linear`` forward and
forward + backward, RMSNorm, rotary, SwiGLU, attention, decoding with a KV cache (paged and contiguous),
the Hugging Face integration's rotary and attention, one patched
``LlamaDecoderLayer`` and a whole patched 125M Llama forward). Nothing is compiled and nothing runs on a
GPU: ``kittens._dispatch._core._prepare`` is replaced by one that stores a handle whose ``launch`` does
nothing, so the extension's own launch cost (argument conversion, the driver's enqueue, a few µs) is
*not* in these figures; ``python -m kittens.bench overhead`` and ``model`` measure the real calls.

``--device meta`` (the default; any machine, no GPU): the tensors are ``meta`` tensors (shapes, strides,
dtypes, no memory) routed down the CUDA path (``Tensor.is_cuda`` answers True for them, the device check of
``kittens.nn`` passes them); torch's own ops on meta tensors (the model's residual adds, for example) run
torch's Python meta functions, slower than a CUDA launch, so the layer and model rows are upper bounds of
the model's host time, the per-op rows are kittens' own. ``--device cuda``: real CUDA tensors and the
caching allocator (on a GPU machine), the launches still no-ops.

Each row: ``--rounds`` loops of ``--calls`` calls after a warm-up, the median round's µs per call (and the
fastest round's); on meta tensors the thread's CPU time, on CUDA the wall time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple


class _NoLaunch:
    """A prepared handle whose launch does nothing (no scratch: the scratch allocation is not timed)."""

    scratch = ()

    def launch(self, ptrs, stream, free=()):
        return None


@contextlib.contextmanager
def no_launch(torch, device: str):
    """Every kittens CUDA call prepares a :class:`_NoLaunch` handle and launches nothing; ``meta`` tensors
    take the CUDA path. Restores everything on exit."""
    from . import _dispatch, _ops_attention, nn as knn, ops
    from ._dispatch import _core

    saved = [(_core, "_prepare", _core._prepare), (_core, "_raw_stream", _core._raw_stream),
             (ops, "_dispatch", getattr(ops, "_dispatch", None)),
             (_ops_attention, "_dispatch", getattr(_ops_attention, "_dispatch", None)),
             (knn, "device_why", knn.device_why)]
    had_is_cuda = "is_cuda" in torch.Tensor.__dict__
    old_is_cuda = torch.Tensor.__dict__.get("is_cuda")
    saved_handles = dict(_core._HANDLES)

    def prepare(key, entry, problem, tensors, device_index, free=(), extra=None):
        return _core._store(key, (_NoLaunch(), (0, ()), extra))

    why = knn.device_why
    try:
        _core._prepare = prepare
        _core._raw_stream = lambda index: 0
        ops._dispatch = _ops_attention._dispatch = _dispatch
        _core._HANDLES.clear()
        if device == "meta":
            torch.Tensor.is_cuda = property(lambda t: t.device.type in ("cuda", "meta"))
            knn.device_why = lambda t: None if t.device.type == "meta" else why(t)
        yield
    finally:
        for mod, name, value in saved:
            setattr(mod, name, value)
        if device == "meta":
            if had_is_cuda:
                torch.Tensor.is_cuda = old_is_cuda
            else:
                del torch.Tensor.is_cuda
        _core._HANDLES.clear()
        _core._HANDLES.update(saved_handles)
        getattr(knn, "_DEVICE_WHY", {}).clear()  # the meta device's answer was the patched one


def _llama_config(transformers, layers: int = 12):
    return transformers.LlamaConfig(vocab_size=32000, hidden_size=768, num_hidden_layers=layers,
                                    num_attention_heads=12, num_key_value_heads=4, head_dim=64,
                                    intermediate_size=2048, max_position_embeddings=4096)


def cases(torch, device: str, batch: int = 8, seq: int = 1024) -> List[Tuple[str, Callable[[], object]]]:
    """The timed calls: a 125M Llama's shapes (hidden 768, 12 heads of 64, 4 KV heads, MLP 2048) at
    ``batch`` x ``seq`` tokens."""
    import kittens
    from . import nn as knn

    bf = torch.bfloat16
    rows, hid, inter, heads, kvh, d = batch * seq, 768, 2048, 12, 4, 64

    def t(*shape, grad=False):
        x = torch.empty(*shape, dtype=bf, device=device)
        return x.requires_grad_(grad)

    a, w = t(rows, hid), t(inter, hid)
    lin = knn.Linear(hid, inter, bias=False, device=device, dtype=bf)
    x3 = t(batch, seq, hid)
    xg = t(batch, seq, hid, grad=True)
    gy = t(batch, seq, inter)
    norm_w = t(hid)
    gate, up = t(batch, seq, inter), t(batch, seq, inter)
    q = t(batch, seq, heads, d).transpose(1, 2)
    k = t(batch, seq, kvh, d).transpose(1, 2)
    v = t(batch, seq, kvh, d).transpose(1, 2)
    cos, sin = t(1, seq, d), t(1, seq, d)
    half_cos, half_sin = t(seq, d // 2), t(seq, d // 2)

    def linear_train():
        y = lin(xg)
        y.backward(gy)

    out = [
        ("matmul (8192x768 @ w.T)", lambda: kittens.matmul(a, w.t())),
        ("nn.Linear forward, no grad", lambda: _no_grad(torch, lin, x3)),
        ("nn.Linear forward + backward", linear_train),
        ("rms_norm (HF order)", lambda: _no_grad(torch, knn.rms_norm, x3, norm_w, 1e-6, None, True)),
        ("apply_rotary (N, D/2 tables)", lambda: _no_grad(torch, knn.apply_rotary, q, half_cos, half_sin)),
        ("swiglu", lambda: _no_grad(torch, knn.swiglu, gate, up)),
        ("nn.attention (causal, GQA)", lambda: _no_grad(torch, knn.attention, q, k, v, True, 0.125)),
    ]
    # Decoding with a KV cache (FlashAttention's interface): one query per sequence, GQA 32/8, head dim 128,
    # a paged cache (pages of 256) and a contiguous one, 4096 keys each.
    from .kvcache import flash_attn_with_kvcache

    qd = t(8, 1, 32, 128)
    pages = t(8 * 16, 256, 8, 128)
    table = torch.empty(8, 16, dtype=torch.int32, device=device)
    dense = t(8, 4096, 8, 128)
    lens = torch.empty(8, dtype=torch.int32, device=device)
    out.append(("flash_attn_with_kvcache, paged", lambda: flash_attn_with_kvcache(
        qd, pages, pages, cache_seqlens=lens, block_table=table)))
    out.append(("flash_attn_with_kvcache, contiguous", lambda: flash_attn_with_kvcache(
        qd, dense, dense, cache_seqlens=lens)))
    try:
        import transformers  # noqa: F401
    except ImportError:
        return out
    from .integrations import transformers as kt

    out.append(("integration rotary_pair (q and k)", lambda: _no_grad(torch, kt.rotary_pair, q, k, cos, sin)))

    class _Module:
        is_causal = True

    out.append(("integration attention_forward",
                lambda: _no_grad(torch, kt.attention_forward, _Module(), q, k, v, None, 0.0, 0.125)))
    layer, emb = _decoder_layer(torch, device, batch, seq)
    x = t(batch, seq, hid)
    out.append(("integration LlamaDecoderLayer forward", lambda: _no_grad(
        torch, layer, x, attention_mask=None, position_embeddings=emb)))
    return out


def _no_grad(torch, fn, *args, **kw):
    with torch.no_grad():
        return fn(*args, **kw)


def _decoder_layer(torch, device: str, batch: int, seq: int):
    """One ``LlamaDecoderLayer`` of the 125M model through ``apply`` (attention set to kittens') and its
    rotary tables, as the model's rotary embedding hands them (1, N, D)."""
    import transformers
    from transformers.models.llama import modeling_llama as llama

    from .integrations import transformers as kt

    cfg = _llama_config(transformers, layers=1)
    cfg._attn_implementation = kt.NAME
    kt.register()
    with torch.device(device):
        layer = llama.LlamaDecoderLayer(cfg, 0).to(torch.bfloat16).eval()
        rope = llama.LlamaRotaryEmbedding(cfg)
    kt.apply(layer, attention=False)
    pos = torch.arange(seq, device=device)[None]
    x = torch.empty(1, seq, 768, dtype=torch.bfloat16, device=device)
    with torch.no_grad():
        cos, sin = rope(x, pos)
    return layer, (cos.to(torch.bfloat16), sin.to(torch.bfloat16))


def model_case(torch, device: str, batch: int = 8, seq: int = 1024):
    """A whole 125M Llama forward (``use_cache=False``) patched by ``apply``. On meta tensors
    transformers' packed-sequence test reads data, so it is skipped (it finds none for these ids)."""
    import transformers
    import transformers.masking_utils as mu

    from .integrations import transformers as kt

    cfg = _llama_config(transformers)
    with torch.device(device):
        model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    kt.apply(model)
    ids = torch.zeros(batch, seq, dtype=torch.long, device=device)
    restore = None
    if device == "meta":
        restore = mu.find_packed_sequence_indices
        mu.find_packed_sequence_indices = lambda *a, **k: None

    def run():
        with torch.no_grad():
            return model(input_ids=ids, use_cache=False)

    return run, (lambda: setattr(mu, "find_packed_sequence_indices", restore)) if restore else (lambda: None)


def _loop(torch, fn, calls: int, device: str) -> float:
    """µs per call of ``calls`` calls: wall time with a synchronisation at each end on CUDA; on meta tensors
    the thread's CPU time (nothing runs elsewhere, and other processes of a shared machine do not count)."""
    if device == "cuda":
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / calls * 1e6
    t0 = time.thread_time()
    for _ in range(calls):
        fn()
    return (time.thread_time() - t0) / calls * 1e6


def measure(torch, device: str, calls: int, rounds: int, model: bool = True) -> List[Dict]:
    rows = []
    with no_launch(torch, device):
        named = cases(torch, device)
        undo = None
        if model:
            try:
                run, undo = model_case(torch, device)
                named.append(("integration 125M Llama forward (8x1024)", run))
            except ImportError:
                pass
        try:
            for name, fn in named:
                n = max(3, calls // 40) if "Llama" in name else calls
                row: Dict = {"case": name, "calls": n, "rounds": rounds}
                try:
                    _loop(torch, fn, 3, device)
                    r = [_loop(torch, fn, n, device) for _ in range(rounds)]
                    row["us_per_call"] = sorted(r)[len(r) // 2]
                    row["min_us"] = min(r)
                    row["rounds_us"] = r
                except Exception as e:  # one case's failure is reported, not fatal
                    row["error"] = f"{type(e).__name__}: {e}"[:500]
                rows.append(row)
        finally:
            if undo is not None:
                undo()
    return rows


def profile_model(torch, device: str, top: int = 30) -> None:
    """cProfile of three whole-model forwards (launches no-ops), by internal time."""
    import cProfile
    import pstats

    with no_launch(torch, device):
        run, undo = model_case(torch, device)
        try:
            run()
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(3):
                run()
            pr.disable()
        finally:
            undo()
    pstats.Stats(pr).sort_stats("tottime").print_stats(top)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kittens.bench host", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["meta", "cuda"], default="meta")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--no-model", action="store_true", help="skip the whole-model row")
    p.add_argument("--profile", action="store_true", help="print a cProfile of the whole-model forward too")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("kittens.bench host --device cuda: torch sees no CUDA device", file=sys.stderr)
        return 2
    rows = measure(torch, args.device, args.calls, args.rounds, model=not args.no_model)
    print(f"kittens host time per call, launches replaced by no-ops ({args.device} tensors; the Python layer "
          "only, not the extension's launch)")
    for r in rows:
        fig = (f"{r['us_per_call']:10.1f} us (min {r['min_us']:.1f})" if "us_per_call" in r
               else f"ERROR {r['error']}")
        print(f"  {r['case']:<44} {fig}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"what": "host", "device": args.device, "torch": torch.__version__, "rows": rows}, f, indent=1)
    if args.profile:
        profile_model(torch, args.device)
    return 0 if all("us_per_call" in r for r in rows) else 1
