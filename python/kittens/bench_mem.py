"""The memory-bound benchmarks of ``python -m kittens.bench layernorm|rotary``: kittens against PyTorch
eager and ``torch.compile`` of the same expression, on the same tensors, in one process, with the
device's copy bandwidth measured in the same run.

* layernorm: ``h = residual + dropout(x, p)``, ``y = layer_norm(h) * weight + bias``, returning y and h
  (a prenorm Transformer block's entry, HipKittens Fig. 9). Timed at ``p = 0`` so every output compares
  (against float64 by the FlashAttention rule, and against torch); with ``p > 0`` ours is checked by
  its mask statistics and, bit for bit, against our own CPU interpreter on the first rows.
* rotary: GPT-NeoX rotary embedding of q (B, H, N, D) stored as (B, N, H, D), tables (N, D/2); torch's
  expression is the usual ``q * cos + rotate_half(q) * sin``. At the first shape also GPT-J (pairs
  ``(2i, 2i + 1)``: torch's expression splits even and odd elements and interleaves the results) and
  GPT-NeoX on a dense (B, H, N, D) tensor. ``rotary --backward`` adds each shape's backward (dq from the
  output gradient) against torch eager's and torch.compile's backward and against our own forward.

Bandwidth: bytes a kernel must move (each input read once, each output written once) over its median
time; ``copy`` is ``dst.copy_(src)`` of a 1 GiB buffer (read + write), the device's practical peak.
"""

from __future__ import annotations

import math
from typing import Dict, List

from .bench_timing import L2_MULTIPLE, _l2_bytes, time_many
from . import bench_variants

FLOOR = 1e-5


def copy_bandwidth(torch, iters: int = 30) -> float:
    """GB/s of ``dst.copy_(src)`` on a 1 GiB bf16 buffer (bytes read + bytes written)."""
    n = 2**29
    src = torch.empty(n, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    t = time_many(torch, {"copy": lambda i: dst.copy_(src)}, 1, 3, iters)["copy"]
    return 2 * n * 2 / t / 1e6


def _rel(x, ref) -> float:
    d = (x.double() - ref).norm().item()
    r = ref.norm().item()
    return d / r if r > 0 else d


def _judge(torch, ours, theirs, ref) -> dict:
    e_ours, e_theirs = _rel(ours, ref), _rel(theirs, ref)
    finite = bool(torch.isfinite(ours).all().item())
    return {"rel_err_ours": e_ours, "rel_err_torch": e_theirs, "bit_identical": bool(torch.equal(ours, theirs)),
            "rel_err_vs_torch": _rel(ours, theirs.double()),
            "passed": finite and e_ours <= 2 * e_theirs + FLOOR}


def _row(name: str, nbytes: int, times: Dict[str, float], copy_gbs: float) -> dict:
    gbs = {k: nbytes / t / 1e6 for k, t in times.items()}
    return {"shape": name, "bytes": nbytes,
            **{f"{k}_ms": t for k, t in times.items()},
            **{f"{k}_gbs": g for k, g in gbs.items()},
            **{f"{k}_of_copy": g / copy_gbs for k, g in gbs.items()},
            "vs_eager": times["eager"] / times["ours"], "vs_compiled": times["compiled"] / times["ours"]}


def bench_layernorm(torch, kittens, args, copy_gbs: float) -> List[dict]:
    F = torch.nn.functional
    rows = []
    l2 = _l2_bytes(torch)

    def expr(x, r, w, b, p):
        h = r + F.dropout(x, p, training=True) if p > 0 else r + x
        return F.layer_norm(h, (h.shape[-1],), w, b, 1e-5), h

    compiled = torch.compile(expr, dynamic=False)
    for shape in args.ln_shapes:
        bsz, n, d = shape
        g = torch.Generator(device="cuda").manual_seed(d)
        mk = lambda *s: torch.randn(*s, device="cuda", generator=g).to(torch.bfloat16)  # noqa: E731
        x0, r0, w, b = mk(bsz, n, d), mk(bsz, n, d), mk(d), mk(d)
        per = 2 * bsz * n * d * 2
        copies = max(2, math.ceil(L2_MULTIPLE * l2 / per))
        xs = [x0] + [x0.clone() for _ in range(copies - 1)]
        rs = [r0] + [r0.clone() for _ in range(copies - 1)]
        out = torch.empty((2, bsz, n, d), dtype=torch.bfloat16, device="cuda")
        y, h = kittens.layernorm(x0, r0, w, b, p=0.0, out=out)
        ye, he = expr(x0, r0, w, b, 0.0)
        compiled(x0, r0, w, b, 0.0)
        # float64 reference on the first 256 rows.
        sel = (slice(0, 1), slice(0, 256))
        hd = r0[sel].double() + x0[sel].double()
        mu = hd.mean(-1, keepdim=True)
        yd = (hd - mu) / torch.sqrt(((hd - mu) ** 2).mean(-1, keepdim=True) + 1e-5) * w.double() + b.double()
        check = _judge(torch, y[sel], ye[sel], yd)
        check["residual_rel_err"] = _rel(h[sel], hd)
        variants = bench_variants.fwd_fns(args, lambda i: kittens.layernorm(xs[i], rs[i], w, b, p=0.0, out=out))
        bench_variants.judge_all(check, variants, lambda fn: _judge(torch, fn(0)[0][sel], ye[sel], yd))
        times = time_many(torch, {
            "ours": lambda i: kittens.layernorm(xs[i], rs[i], w, b, p=0.0, out=out),
            "eager": lambda i: expr(xs[i], rs[i], w, b, 0.0),
            "compiled": lambda i: compiled(xs[i], rs[i], w, b, 0.0),
            **variants,
        }, copies, args.warmup, args.iters)
        row = _row(f"B{bsz} N{n} D{d} p=0", 2 * per, times, copy_gbs)
        row.update(check)
        rows.append(row)
        if args.p > 0 and shape == args.ln_shapes[0]:
            rows.append(dropout_row(torch, kittens, expr, compiled, xs, rs, w, b, args, copies, per, copy_gbs,
                                    (bsz, n, d)))
        xs = rs = None
        torch.cuda.empty_cache()
    return rows


def dropout_row(torch, kittens, expr, compiled, xs, rs, w, b, args, copies, per, copy_gbs, shape) -> dict:
    """p > 0: our mask's dropped fraction, and our first rows against the CPU interpreter bit for bit
    (same seed and offset: the same Philox stream indices)."""
    bsz, n, d = shape
    p, seed, offset = args.p, 0x5EED_2A2A_0123_4567, 12345
    out = torch.empty((2, bsz, n, d), dtype=torch.bfloat16, device="cuda")
    y, h = kittens.layernorm(xs[0], rs[0], w, b, p=p, seed=seed, offset=offset, out=out)
    x0, r0 = xs[0], rs[0]
    dropped = ((h == r0) & (x0 != 0)).double().mean().item()
    k = 8
    xc, rc = x0[0, :k].cpu(), r0[0, :k].cpu()
    yc, hc = kittens.layernorm(xc, rc, w.cpu(), b.cpu(), p=p, seed=seed, offset=offset)
    same_h = bool(torch.equal(hc, h[0, :k].cpu()))
    y_diff = (yc.double() - y[0, :k].cpu().double()).abs().max().item() / yc.double().abs().max().item()
    times = time_many(torch, {
        "ours": lambda i: kittens.layernorm(xs[i], rs[i], w, b, p=p, seed=seed, offset=offset, out=out),
        "eager": lambda i: expr(xs[i], rs[i], w, b, p),
        "compiled": lambda i: compiled(xs[i], rs[i], w, b, p),
    }, copies, args.warmup, args.iters)
    row = _row(f"B{bsz} N{n} D{d} p={p}", 2 * per, times, copy_gbs)
    row.update({"dropped_fraction": dropped, "residual_matches_cpu_interpreter": same_h,
                "out_max_rel_diff_vs_cpu_interpreter": y_diff,
                "passed": same_h and abs(dropped - p) < 0.01 and y_diff <= 2**-7})
    return row


def bench_rotary(torch, kittens, args, copy_gbs: float) -> List[dict]:
    """GPT-NeoX in (B, N, H, D) storage at every shape; at the first shape also GPT-J (interleaved
    pairs) in the same storage and GPT-NeoX in dense (B, H, N, D). With ``--backward``, each shape's
    backward row follows its forward's (:func:`rotary_backward_row`)."""
    rows = []
    for i, shape in enumerate(args.rope_shapes):
        variants = [(False, False)] + ([(True, False), (False, True)] if i == 0 else [])
        for interleaved, bhsd in variants:
            rows.append(rotary_row(torch, kittens, args, copy_gbs, shape, interleaved, bhsd))
            torch.cuda.empty_cache()
            if getattr(args, "backward", False):
                rows.append(rotary_backward_row(torch, kittens, args, copy_gbs, shape, interleaved, bhsd))
                torch.cuda.empty_cache()
    return rows


def _rope_exprs(torch):
    """torch's GPT-NeoX and GPT-J expressions of the rotation (tables (N, D/2))."""

    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    def neox(q, cos, sin):
        c = torch.cat((cos, cos), -1)
        s = torch.cat((sin, sin), -1)
        return q * c + rotate_half(q) * s

    def gptj(q, cos, sin):
        x0, x1 = q[..., 0::2], q[..., 1::2]
        return torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), -1).flatten(-2)

    return neox, gptj


def rotary_backward_row(torch, kittens, args, copy_gbs, shape, interleaved: bool, bhsd: bool) -> dict:
    """The rotary backward (dq from the output gradient, as autograd runs it: kittens' is the forward
    kernel with -sin) against torch eager's and torch.compile's backward of the same expression, and
    against our own forward on the same tensors, all in this process. Each side's graph is built once
    per input copy outside the timing (``retain_graph``), so a timed call is the backward alone; the
    tables take no gradient. Bytes: dO read and dq written once, the tables read once (the forward's)."""
    bsz, h, n, d = shape
    l2 = _l2_bytes(torch)
    expr = _rope_exprs(torch)[1 if interleaved else 0]
    compiled = torch.compile(expr, dynamic=False)
    g = torch.Generator(device="cuda").manual_seed(n + d + 1)

    def mk():
        if bhsd:
            return torch.randn(bsz, h, n, d, device="cuda", generator=g).to(torch.bfloat16)
        return torch.randn(bsz, n, h, d, device="cuda", generator=g).to(torch.bfloat16).transpose(1, 2)

    ang = torch.rand(n, d // 2, device="cuda", generator=g, dtype=torch.float64) * 6.283
    cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
    per = bsz * h * n * d * 2
    copies = max(2, math.ceil(L2_MULTIPLE * l2 / per))
    qs = [mk().requires_grad_() for _ in range(copies)]
    dos = [mk() for _ in range(copies)]
    graphs = {name: [f(q, cos, sin) for q in qs] for name, f in
              (("ours", lambda q, c, s: kittens.rotary(q, c, s, interleaved=interleaved)),
               ("eager", expr), ("compiled", compiled))}

    def bwd(name):
        return lambda i: torch.autograd.grad(graphs[name][i], qs[i], dos[i], retain_graph=True)[0]

    out, fwd_in = torch.empty_like(qs[0]), [q.detach() for q in qs]
    dq, dq_eager = bwd("ours")(0), bwd("eager")(0)
    sel = (slice(0, 1), slice(None), slice(0, 256))
    ref = expr(dos[0][sel].double(), cos[:256].double(), -sin[:256].double())  # the inverse rotation
    check = _judge(torch, dq[sel], dq_eager[sel], ref)
    times = time_many(torch, {
        "ours": bwd("ours"),
        "ours_fwd": lambda i: kittens.rotary(fwd_in[i], cos, sin, interleaved=interleaved, out=out),
        "eager": bwd("eager"),
        "compiled": bwd("compiled"),
    }, copies, args.warmup, args.iters)
    name = f"B{bsz} H{h} N{n} D{d}" + (" GPT-J" if interleaved else "") + (" BHSD" if bhsd else "") + " backward"
    row = _row(name, 2 * per + 2 * n * d, times, copy_gbs)
    row.update(check)
    row.update({"interleaved": interleaved, "layout": "bhsd" if bhsd else "bshd", "backward": True,
                "bwd_vs_fwd": times["ours_fwd"] / times["ours"]})
    return row


def rotary_row(torch, kittens, args, copy_gbs, shape, interleaved: bool, bhsd: bool) -> dict:
    bsz, h, n, d = shape
    l2 = _l2_bytes(torch)

    expr = _rope_exprs(torch)[1 if interleaved else 0]
    compiled = torch.compile(expr, dynamic=False)
    g = torch.Generator(device="cuda").manual_seed(n + d)
    if bhsd:
        mk = lambda: torch.randn(bsz, h, n, d, device="cuda", generator=g).to(torch.bfloat16)  # noqa: E731
    else:
        mk = lambda: torch.randn(bsz, n, h, d, device="cuda", generator=g).to(torch.bfloat16).transpose(1, 2)  # noqa: E731
    q0 = mk()
    ang = torch.rand(n, d // 2, device="cuda", generator=g, dtype=torch.float64) * 6.283
    cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
    per = bsz * h * n * d * 2
    copies = max(2, math.ceil(L2_MULTIPLE * l2 / per))
    qs = [q0] + [mk().copy_(q0) for _ in range(copies - 1)]
    out = torch.empty_like(qs[0])
    o = kittens.rotary(q0, cos, sin, interleaved=interleaved, out=out)
    oe = expr(q0, cos, sin)
    compiled(q0, cos, sin)
    sel = (slice(0, 1), slice(None), slice(0, 256))
    ref = expr(q0[sel].double(), cos[:256].double(), sin[:256].double())
    check = _judge(torch, o[sel], oe[sel], ref)
    times = time_many(torch, {
        "ours": lambda i: kittens.rotary(qs[i], cos, sin, interleaved=interleaved, out=out),
        "eager": lambda i: expr(qs[i], cos, sin),
        "compiled": lambda i: compiled(qs[i], cos, sin),
    }, copies, args.warmup, args.iters)
    name = f"B{bsz} H{h} N{n} D{d}" + (" GPT-J" if interleaved else "") + (" BHSD" if bhsd else "")
    row = _row(name, 2 * per + 2 * n * d, times, copy_gbs)
    row.update(check)
    row.update({"interleaved": interleaved, "layout": "bhsd" if bhsd else "bshd"})
    return row


def print_rows(rows: List[dict], copy_gbs: float) -> None:
    print(f"copy bandwidth {copy_gbs:.0f} GB/s")
    print(f"{'shape':<26} {'ours GB/s':>10} {'eager':>8} {'compiled':>9} {'ours/copy':>10} {'vs compiled':>12}  check")
    for r in rows:
        if "rel_err_ours" in r:
            check = (f"{'ok' if r['passed'] else 'FAILED'}: err {r['rel_err_ours']:.2e} vs torch "
                     f"{r['rel_err_torch']:.2e}")
        else:
            check = (f"{'ok' if r['passed'] else 'FAILED'}: dropped {r['dropped_fraction']:.4f}, residual "
                     f"{'=' if r['residual_matches_cpu_interpreter'] else '!='} CPU interpreter")
        if "bwd_vs_fwd" in r:
            check += f"; our forward {r['ours_fwd_gbs']:.0f} GB/s, backward/forward speed {r['bwd_vs_fwd']:.2f}"
        print(f"{r['shape']:<26} {r['ours_gbs']:10.0f} {r['eager_gbs']:8.0f} {r['compiled_gbs']:9.0f} "
              f"{r['ours_of_copy']:10.2f} {r['vs_compiled']:12.2f}  {check}")


def plot(rows: List[dict], path: str, title: str, copy_gbs: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r["shape"] for r in rows]
    x = list(range(len(rows)))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(rows) + 2), 4.5))
    for j, (k, lab) in enumerate((("ours", "kittens"), ("eager", "torch eager"), ("compiled", "torch.compile"))):
        ax.bar([i + (j - 1) * 0.27 for i in x], [r[f"{k}_gbs"] for r in rows], 0.27, label=lab)
    ax.axhline(copy_gbs, color="gray", ls="--", lw=1, label=f"copy {copy_gbs:.0f} GB/s")
    ax.set_ylabel("GB/s")
    ax.set_title(title)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=20, ha="right")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
