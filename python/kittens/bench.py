"""``python -m kittens.bench gemm|attn|layernorm|rotary|rmsnorm|swiglu|lce|overhead|model [--json F] [--plot F.png]``:
kittens against PyTorch's own kernels on the same tensors, in one process.

* gemm: ``kittens.matmul(a, w.T)`` against ``torch.matmul(a, w.T)`` (cuBLAS); ``--order`` stores A
  and B otherwise (``a.T``, row-major ``b``), both sides reading the same views.
* attn: ``kittens.attention`` against ``F.scaled_dot_product_attention`` (cuDNN / FlashAttention);
  ``--options``: soft cap, sliding window, ALiBi and head dims (``kittens.bench_attn_opts``).
* overhead: per-call time of a loop of calls, host included, against PyTorch's op (``kittens.bench_overhead``).
* layernorm, rotary: against PyTorch eager and ``torch.compile`` of the same expression, in GB/s and as
  a fraction of the copy bandwidth measured in the same run (``kittens.bench_mem``); rmsnorm and swiglu
  the same, forward and backward (``kittens.bench_norms``); ``layernorm --backward`` the fused
  dropout-residual-layernorm's backward (``kittens.bench_lnbwd``); ``rotary --backward`` each shape's
  backward beside its forward, against torch eager's and torch.compile's backward, in one process.
* lce: the fused linear + cross-entropy against matmul + ``F.cross_entropy``, forward and backward: time
  and peak memory (``kittens.bench_norms``).
* host: the Python layer's own time per call with the launches replaced by no-ops, on any machine
  (``kittens.bench_host``, its own options: ``host --help``).
* model: a Hugging Face Llama trained and generating with and without
  ``kittens.integrations.transformers.apply`` (``kittens.bench_model``, its own options: ``model --help``).

Timing: CUDA events around every launch, warm-up first, the median of ``--iters`` launches; the inputs
rotate over enough copies that together they span 4x the L2 (each launch reads operands the previous
ones evicted); ``--timing interleaved`` (ours, theirs, ours, ...: the same clocks for both, as
``kittens bench gemm``'s default; the turn starts one further each iteration) or ``blocked`` (all of
ours, then all of theirs). An H100 runs these benches at its power cap, and its clock follows what ran
in the last milliseconds: blocked, the library timed first gains (5% on the attention backward,
docs/performance.md, "Method").

Correctness, on the first input copy of every shape: ours against theirs (bit-identical or not), and
both against a float64 reference (all of C up to 4096^2 outputs, else 256 sampled rows): the
FlashAttention rule, our error <= 2x PyTorch's bf16 error + 1e-5.

Without a CUDA GPU it says so, runs a small correctness check on the CPU interpreter (labelled as such,
no timing) and exits with status 2.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
from typing import List, Optional

from .bench_timing import (
    FLOOR,
    L2_MULTIPLE,
    _commit,
    _l2_bytes,
    _with_backend,
    compare,
    time_one,
    time_pair,
)


def gemm_operands(torch, m, n, k, g, order):
    """The stored operands of ``a @ b`` in ``order`` (``--order``: A stored ``mk`` or ``km``, B ``nk``
    (a linear layer's ``w``, ``b = w.T``) or ``kn``), and how to view them as (M, K) and (K, N)."""
    a_order, b_order = order.split(",")

    def stored(rows, cols):
        return torch.randn(rows, cols, device="cuda", generator=g).to(torch.bfloat16)

    a = stored(m, k) if a_order == "mk" else stored(k, m)
    b = stored(n, k) if b_order == "nk" else stored(k, n)

    def views(x, y):
        return (x if a_order == "mk" else x.T), (y.T if b_order == "nk" else y)

    return a, b, views


def check_gemm(torch, kittens, m, n, k, order="mk,nk") -> dict:
    """A correctness-only shape (partial tiles, one K step, ...): all of C against float64."""
    g = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
    x, y, views = gemm_operands(torch, m, n, k, g, order)
    a, b = views(x, y)
    ours = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kittens.matmul(a, b, out=ours)
    row = {"shape": f"{m}x{n}x{k}", "m": m, "n": n, "k": k, "ours_ms": None, "torch_ms": None,
           "ours_tflops": None, "torch_tflops": None, "ratio": None}
    row.update(compare(torch, ours, torch.matmul(a, b), a.double() @ b.double()))
    return row


def bench_gemm(torch, kittens, args) -> List[dict]:
    rows = [check_gemm(torch, kittens, *c, order=args.order) for c in args.checks]
    l2 = _l2_bytes(torch)
    for size in args.sizes:
        m = n = k = size
        g = torch.Generator(device="cuda").manual_seed(size)
        a0, w0, views = gemm_operands(torch, m, n, k, g, args.order)
        copies = max(2, math.ceil(L2_MULTIPLE * l2 / ((m + n) * k * 2)))
        ops = [views(a0, w0)] + [views(a0.clone(), w0.clone()) for _ in range(copies - 1)]
        c_ours = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        c_theirs = torch.empty_like(c_ours)
        kittens.matmul(*ops[0], out=c_ours)
        torch.matmul(*ops[0], out=c_theirs)
        torch.cuda.synchronize()
        a_v, b_v = ops[0]
        if m * n <= 4096 * 4096:
            ours_s, theirs_s, ref = c_ours, c_theirs, a_v.double() @ b_v.double()
        else:
            rows_idx = torch.randperm(m, device="cuda", generator=g)[:256]
            ours_s, theirs_s = c_ours[rows_idx], c_theirs[rows_idx]
            ref = a_v[rows_idx].double() @ b_v.double()
        check = compare(torch, ours_s, theirs_s, ref)
        del ref
        t_ours, t_theirs = time_pair(
            torch,
            lambda i: kittens.matmul(*ops[i], out=c_ours),
            lambda i: torch.matmul(*ops[i], out=c_theirs),
            copies, args.warmup, args.iters, args.timing,
        )
        flop = 2.0 * m * n * k
        rows.append({
            "shape": f"{m}x{n}x{k}", "m": m, "n": n, "k": k,
            "ours_ms": t_ours, "torch_ms": t_theirs,
            "ours_tflops": flop / t_ours / 1e9, "torch_tflops": flop / t_theirs / 1e9,
            "ratio": t_theirs / t_ours, "input_copies": copies, **check,
        })
        ops = None  # free the copies before the next size allocates its own
        torch.cuda.empty_cache()
    return rows


def attention_ref(torch, q, k, v, causal):
    group = q.shape[1] // k.shape[1]
    k = k.double().repeat_interleave(group, 1)
    v = v.double().repeat_interleave(group, 1)
    return torch.nn.functional.scaled_dot_product_attention(q.double(), k, v, is_causal=causal)


def bench_attn(torch, kittens, args) -> List[dict]:
    F = torch.nn.functional
    rows = []
    l2 = _l2_bytes(torch)
    for seq in args.seqs:
        for causal in (False, True):
            b, h, hk, d = args.batch, args.heads, args.heads_kv, args.dim
            g = torch.Generator(device="cuda").manual_seed(seq)
            # (B, N, H, D) buffers seen as (B, H, N, D): the projection layout both sides read in place.
            mk = lambda hh: torch.randn(b, seq, hh, d, device="cuda", generator=g).to(torch.bfloat16).transpose(1, 2)  # noqa: E731
            q0, k0, v0 = mk(h), mk(hk), mk(hk)
            copies = max(2, math.ceil(L2_MULTIPLE * l2 / ((2 * h + 2 * hk) * b * seq * d * 2)))
            qs = [q0] + [mk(h).copy_(q0) for _ in range(copies - 1)]
            ks = [k0] + [mk(hk).copy_(k0) for _ in range(copies - 1)]
            vs = [v0] + [mk(hk).copy_(v0) for _ in range(copies - 1)]
            gqa = {"enable_gqa": True} if hk != h else {}
            sdpa = lambda i: F.scaled_dot_product_attention(qs[i], ks[i], vs[i], is_causal=causal, **gqa)  # noqa: E731
            theirs = sdpa if args.backend == "default" else _with_backend(torch, args.backend, sdpa)
            ours = lambda i: kittens.attention(qs[i], ks[i], vs[i], causal=causal)  # noqa: E731
            flop = 4.0 * b * h * seq * seq * d / (2 if causal else 1)
            row = {"shape": f"B{b} H{h}/{hk} N{seq} D{d}{' causal' if causal else ''}", "batch": b,
                   "heads": h, "heads_kv": hk, "seq": seq, "dim": d, "causal": causal, "input_copies": copies}
            o_theirs = theirs(0)
            try:
                o_ours = ours(0)
            except RuntimeError as e:
                t_theirs = time_one(torch, theirs, copies, args.warmup, args.iters)
                row.update({"ours_ms": None, "torch_ms": t_theirs, "ours_tflops": None,
                            "torch_tflops": flop / t_theirs / 1e9, "ratio": None, "passed": False,
                            "error": str(e)})
                rows.append(row)
                continue
            # Reference on batch 0's first 512 queries (float64 scores of all of them would not fit).
            sel = (slice(0, 1), slice(None), slice(0, min(seq, 512)))
            keys = sel if causal else (slice(0, 1),)  # causal: those queries see only the first keys
            ref = attention_ref(torch, q0[sel], k0[keys], v0[keys], causal)
            row.update(compare(torch, o_ours[sel], o_theirs[sel], ref))
            t_ours, t_theirs = time_pair(torch, ours, theirs, copies, args.warmup, args.iters, args.timing)
            row.update({"ours_ms": t_ours, "torch_ms": t_theirs, "ours_tflops": flop / t_ours / 1e9,
                        "torch_tflops": flop / t_theirs / 1e9, "ratio": t_theirs / t_ours})
            rows.append(row)
    return rows


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def print_table(rows: List[dict], theirs: str) -> None:
    print(f"{'shape':<28} {'ours TF/s':>10} {theirs + ' TF/s':>14} {'ratio':>7}  check")
    for r in rows:
        if r.get("error"):
            check = "ours not run: " + r["error"].split(";")[0]
        elif r["bit_identical"]:
            check = "bit-identical" + ("" if r["passed"] else " FAILED")
        else:
            check = (f"{'ok' if r['passed'] else 'FAILED'}: err {r['rel_err_ours']:.2e} vs "
                     f"{theirs} {r['rel_err_torch']:.2e} (diff {r['rel_err_vs_torch']:.1e})")
        print(f"{r['shape']:<28} {_fmt(r['ours_tflops'], '10.1f')} {_fmt(r['torch_tflops'], '14.1f')} "
              f"{_fmt(r['ratio'], '7.3f')}  {check}")


def plot(rows: List[dict], path: str, title: str, theirs: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Check-only shapes (correctness, no timing) stay in the table and the JSON, not in the picture.
    rows = [r for r in rows if r["torch_tflops"] is not None]
    if not rows:
        return
    labels = [r["shape"] for r in rows]
    x = list(range(len(rows)))
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(max(6, 1.2 * len(rows) + 2), 7), sharex=True)
    ours = [r["ours_tflops"] or 0 for r in rows]
    th = [r["torch_tflops"] or 0 for r in rows]
    ax.bar([i - 0.2 for i in x], ours, 0.4, label="kittens")  # a shape ours did not run plots as 0
    ax.bar([i + 0.2 for i in x], th, 0.4, label=theirs)
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title)
    ax.legend()
    ax2.plot(x, [r["ratio"] if r["ratio"] is not None else float("nan") for r in rows], "o-")
    ax2.axhline(1.0, color="gray", lw=0.8)
    ax2.set_ylabel(f"kittens / {theirs}")
    ax2.set_xticks(x)
    ax2.set_xticklabels(labels, rotation=30, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def cpu_check(kittens) -> None:
    """No GPU: correctness of the CPU interpreter path on small shapes (no timing)."""
    import ml_dtypes
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (67, 96)).astype(ml_dtypes.bfloat16)
    w = rng.uniform(-1, 1, (40, 96)).astype(ml_dtypes.bfloat16)
    ref = a.astype(np.float64) @ w.astype(np.float64).T
    c = kittens.matmul(a, w.T).astype(np.float64)
    print(f"  CPU interpreter, matmul 67x40x96: rel_err vs float64 {np.linalg.norm(c - ref) / np.linalg.norm(ref):.2e}")


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["model"]:  # a whole model, its own options (kittens.bench_model)
        from . import bench_model

        return bench_model.main(argv[1:])
    if argv[:1] == ["host"]:  # the Python layer's own time per call, launches no-ops (kittens.bench_host)
        from . import bench_host

        return bench_host.main(argv[1:])
    p = argparse.ArgumentParser(prog="python -m kittens.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=["gemm", "attn", "layernorm", "rotary", "rmsnorm", "swiglu", "lce", "overhead",
                                    "model"])
    p.add_argument("--norm-shapes", default="16384x4096,16384x8192,16384x3080,4096x768",
                   help="rmsnorm: ROWSxD,...")
    p.add_argument("--glu-shapes", default="8192x14336,16384x11008,4096x2824", help="swiglu: ROWSxF,...")
    p.add_argument("--lce-shapes", default="8192x4096x128256,8192x2048x32000,4096x768x50257",
                   help="lce: NxHxV,...")
    p.add_argument("--lce-chunks", default=None,
                   help="lce: time the fused pass and its parts (logits GEMM, kernel, d_hidden GEMM, d_weight "
                        "addmm_) at these chunk sizes, e.g. default,512,1024 (kittens.bench_lce_parts)")
    p.add_argument("--calls", type=int, default=300, help="overhead: calls per timed loop (at least 200)")
    p.add_argument("--rounds", type=int, default=7, help="overhead: timed loops per side")
    p.add_argument("--ln-shapes", default="16x4096x2048,4x4096x8192,16x4096x768",
                   help="layernorm: BxNxD (rows = B*N)")
    p.add_argument("--p", type=float, default=0.1, help="layernorm: dropout of the extra p > 0 row (0: none)")
    p.add_argument("--ln-bwd-shapes", default="4133x4096,16384x4096,16384x3080,16384x8192,4096x768",
                   help="layernorm --backward: ROWSxD,...")
    p.add_argument("--norm-bwd-variants", default="",
                   help="layernorm --backward, rmsnorm: KITTENS_NORM_BWD settings timed beside the default in the "
                        "same run, ';'-separated (e.g. 'shared_acc=1,resident=2,prefetch=0;blocks=1056')")
    p.add_argument("--norm-fwd-variants", default="",
                   help="layernorm, rmsnorm: KITTENS_NORM_FWD settings (per_lane=N) timed beside the default forward "
                        "in the same run, ';'-separated")
    p.add_argument("--swiglu-variants", default="",
                   help="swiglu: KITTENS_SWIGLU settings (waves=N,chunks=C) timed beside the default forward and "
                        "backward in the same run, ';'-separated")
    p.add_argument("--rope-shapes", default="16x16x4096x128,16x16x8192x128,16x32x4096x64",
                   help="rotary: BxHxNxD")
    p.add_argument("--sizes", default="2048,4096,8192,16384", help="gemm: square sizes M=N=K")
    p.add_argument("--order", default="mk,nk", choices=["mk,nk", "mk,kn", "km,kn", "km,nk"],
                   help="gemm: how A and B are stored (A mk or km = a.T; B nk = w, b = w.T, or kn): the "
                        "backward's dA = dC·Bᵀ is mk,nk or mk,kn, its dB = Aᵀ·dC km,kn")
    p.add_argument("--checks", default="1000x1032x520,129x264x72,128x256x64,1x8x8,256x8x8192",
                   help="gemm: correctness-only shapes MxNxK (untimed), or 'none'")
    p.add_argument("--seqs", default="1024,2048,4096,8192", help="attn: sequence lengths")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--heads-kv", type=int, default=16)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--backend", choices=["default", "cudnn", "flash"], default="default",
                   help="attn: the SDPA backend to compare with (default: PyTorch's choice)")
    p.add_argument("--options", action="store_true",
                   help="attn: FlashAttention's options (softcap, window, alibi, head dims) against PyTorch "
                        "(kittens.bench_attn_opts)")
    p.add_argument("--opt-seq", type=int, default=4096, help="attn --options: the sequence length")
    p.add_argument("--paged", action="store_true",
                   help="attn: decoding against a paged KV cache (flash_attn_with_kvcache with block_table) "
                        "vs SDPA on the gathered cache, gather not timed for SDPA (kittens.bench_paged)")
    p.add_argument("--backward", action="store_true",
                   help="attn: the backward against SDPA's cuDNN and flash backends (kittens.bench_bwd); "
                        "layernorm: the backward against torch eager and torch.compile (kittens.bench_lnbwd); "
                        "rotary: each shape's backward beside its forward, against torch eager's and "
                        "torch.compile's backward and our own forward (kittens.bench_mem)")
    p.add_argument("--bwd-form", choices=["auto", "two", "atomic", "both"], default="auto",
                   help="attn --backward: our launches: auto (the library's choice per head dim), two (query then "
                        "key blocks), FlashAttention-3's atomic three (dQ added in f32 by the key blocks), or both "
                        "timed in the same process")
    p.add_argument("--extra", default="16x16x4x4096x128,16x16x16x4096x64",
                   help="attn --backward: more shapes BxHxH_kvxNxD (GQA, head dim 64)")
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--timing", choices=["interleaved", "blocked"], default="interleaved")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--plot", help="write a PNG of TFLOP/s and ratio per shape here")
    args = p.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    args.ln_shapes = [tuple(int(x) for x in c.split("x")) for c in args.ln_shapes.split(",") if c]
    args.rope_shapes = [tuple(int(x) for x in c.split("x")) for c in args.rope_shapes.split(",") if c]
    args.norm_shapes = [tuple(int(x) for x in c.split("x")) for c in args.norm_shapes.split(",") if c]
    args.ln_bwd_shapes = [tuple(int(x) for x in c.split("x")) for c in args.ln_bwd_shapes.split(",") if c]
    args.glu_shapes = [tuple(int(x) for x in c.split("x")) for c in args.glu_shapes.split(",") if c]
    args.lce_shapes = [tuple(int(x) for x in c.split("x")) for c in args.lce_shapes.split(",") if c]
    args.seqs = [int(s) for s in args.seqs.split(",") if s]
    args.extra = [tuple(int(x) for x in c.split("x")) for c in args.extra.split(",") if c]
    args.checks = [] if args.checks == "none" else [
        tuple(int(x) for x in c.split("x")) for c in args.checks.split(",") if c]

    import kittens

    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        why = "torch is not installed" if torch is None else "torch sees no CUDA device"
        print(f"kittens.bench: no GPU benchmark ({why}). Correctness check on the CPU interpreter instead "
              "(not a benchmark):")
        cpu_check(kittens)
        return 2
    if args.what in ("layernorm", "rotary", "rmsnorm", "swiglu"):
        return main_mem(torch, kittens, args)
    if args.what == "lce":
        return main_lce(torch, kittens, args)
    if args.what == "overhead":
        return main_overhead(torch, kittens, args)
    if args.what == "attn" and args.backward:
        return main_backward(torch, kittens, args)
    if args.what == "attn" and args.paged:
        from . import bench_paged

        return bench_paged.main_paged(torch, kittens, args)
    if args.what == "attn" and args.options:
        from . import bench_attn_opts

        return bench_attn_opts.main_options(torch, kittens, args, _header(torch, kittens, args))
    if args.what == "gemm":
        rows = bench_gemm(torch, kittens, args)
        theirs, title = "torch.matmul", "bf16 GEMM, C = A·Wᵀ: kittens vs torch.matmul (cuBLAS)"
    else:
        rows = bench_attn(torch, kittens, args)
        theirs = "SDPA" if args.backend == "default" else f"SDPA-{args.backend}"
        title = f"attention forward: kittens vs F.scaled_dot_product_attention ({args.backend} backend)"
    report = _header(torch, kittens, args)
    report.update({
        "backend": args.backend if args.what == "attn" else None,
        "rule": f"bit-identical, or rel_err(ours, f64) <= 2 * rel_err(torch, f64) + {FLOOR}",
        "rows": rows,
    })
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    print(f"{props.name}, torch {torch.__version__}, commit {report['commit']}, {report['date']}, "
          f"timing {args.timing}, median of {args.iters}")
    print_table(rows, theirs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    if args.plot:
        plot(rows, args.plot, f"{title}\n{props.name}, {report['date']}", theirs)
    ok = all(r.get("passed") for r in rows)
    if not ok:
        print("kittens.bench: some shapes failed the check or did not run (see above)", file=sys.stderr)
    return 0 if ok else 1


def main_backward(torch, kittens, args) -> int:
    from . import bench_bwd

    rows = bench_bwd.bench_attn_backward(torch, kittens, args)
    report = _header(torch, kittens, args)
    report.update({
        "backward": True,
        "rule": f"per gradient on batch 0's first KV head group: rel_err(ours, f64) <= 2 * rel_err(torch bf16 SDPA, f64) + {FLOOR}",
        "summary": bench_bwd.summary(rows),
        "rows": rows,
    })
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    print(f"{props.name}, torch {torch.__version__}, commit {report['commit']}, {report['date']}, "
          f"timing {args.timing}, median of {args.iters}")
    bench_bwd.print_table(rows)
    print(json.dumps(report["summary"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    if args.plot:
        bench_bwd.plot(rows, args.plot, f"attention backward: kittens vs SDPA cuDNN / flash\n{props.name}, "
                                        f"{report['date']}, timed {args.timing}")
    return 0 if report["summary"]["all_passed"] else 1


def main_overhead(torch, kittens, args) -> int:
    """Per-call host time of a loop of calls, ours against PyTorch's op (``kittens.bench_overhead``)."""
    from . import bench_overhead

    if args.calls < 200:
        print("kittens.bench overhead: --calls must be at least 200", file=sys.stderr)
        return 2
    rows = bench_overhead.bench_overhead(torch, kittens, args.calls, args.rounds)
    report = _header(torch, kittens, args)
    report.update({"rows": rows, "method": bench_overhead.__doc__})
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    print(f"{props.name}, torch {torch.__version__}, commit {report['commit']}, {report['date']}, "
          f"{args.calls} calls per loop, median of {args.rounds} loops per side")
    bench_overhead.print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    if args.plot:
        bench_overhead.plot(rows, args.plot, f"per-call time, host included: kittens vs torch\n{props.name}, "
                                             f"{report['date']}")
    return 0 if all("ratio" in r for r in rows) else 1


def _header(torch, kittens, args) -> dict:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {
        "what": args.what,
        "commit": _commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": props.name,
        "compute_capability": list(torch.cuda.get_device_capability()),
        "multiprocessors": props.multi_processor_count,
        "l2_bytes": _l2_bytes(torch),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "kittens": kittens.__version__,
        "timing": args.timing,
        "warmup": args.warmup,
        "iters": args.iters,
    }


def main_mem(torch, kittens, args) -> int:
    """layernorm / rotary: ours, torch eager and torch.compile, and the copy bandwidth, in one run."""
    from . import bench_mem

    from . import bench_norms, bench_variants

    copy_gbs = bench_mem.copy_bandwidth(torch)
    if args.what == "rmsnorm":
        rows = bench_norms.bench_rmsnorm(torch, kittens, args, copy_gbs)
        title = "residual add + RMSNorm (bf16), forward and backward: kittens vs torch eager and torch.compile"
    elif args.what == "swiglu":
        rows = bench_norms.bench_swiglu(torch, kittens, args, copy_gbs)
        title = "SwiGLU (bf16, packed), forward and backward: kittens vs torch eager and torch.compile"
    elif args.what == "layernorm" and args.backward:
        from . import bench_lnbwd

        rows = bench_lnbwd.bench_layernorm_backward(torch, kittens, args, copy_gbs)
        title = "dropout + residual + layernorm backward (bf16): kittens vs torch eager and torch.compile"
    elif args.what == "layernorm":
        rows = bench_mem.bench_layernorm(torch, kittens, args, copy_gbs)
        title = "dropout + residual + layernorm (bf16): kittens vs torch eager and torch.compile"
    else:
        rows = bench_mem.bench_rotary(torch, kittens, args, copy_gbs)
        title = ("rotary embedding (bf16, GPT-NeoX)" + (", forward and backward" if args.backward else "")
                 + ": kittens vs torch eager and torch.compile")
    report = _header(torch, kittens, args)
    report.update({
        "timing": "interleaved (ours, eager, compiled)",
        "copy_gbs": copy_gbs,
        "rule": f"rel_err(ours, f64) <= 2 * rel_err(torch eager, f64) + {FLOOR}; p > 0: dropped fraction "
                "within 0.01 of p and the residual bit-identical to the CPU interpreter's",
        "rows": rows,
    })
    print(f"{report['device']}, torch {torch.__version__}, commit {report['commit']}, {report['date']}, "
          f"median of {args.iters}")
    bench_mem.print_rows(rows, copy_gbs)
    bench_variants.print_variants(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    if args.plot:
        bench_mem.plot(rows, args.plot, f"{title}\n{report['device']}, {report['date']}", copy_gbs)
    ok = all(r.get("passed") for r in rows)
    if not ok:
        print("kittens.bench: some shapes failed the check (see above)", file=sys.stderr)
    return 0 if ok else 1


def main_lce(torch, kittens, args) -> int:
    """Fused linear + cross-entropy against matmul + F.cross_entropy: time and peak memory."""
    from . import bench_norms

    if args.lce_chunks:
        from . import bench_lce_parts

        rows = bench_lce_parts.lce_parts(torch, kittens, args)
        report = _header(torch, kittens, args)
        report.update({"rows": rows, "method": bench_lce_parts.__doc__})
        print(f"{report['device']}, torch {torch.__version__}, commit {report['commit']}, {report['date']}")
        bench_lce_parts.print_parts(rows)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=2)
        return 0
    rows = bench_norms.bench_lce(torch, kittens, args)
    report = _header(torch, kittens, args)
    report.update({"rows": rows, "rule": "loss on 256 rows: rel_err(ours, f64) <= 2 * rel_err(torch bf16, f64) "
                                         f"+ {FLOOR}"})
    print(f"{report['device']}, torch {torch.__version__}, commit {report['commit']}, {report['date']}")
    bench_norms.print_lce(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0 if all(r.get("passed") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
