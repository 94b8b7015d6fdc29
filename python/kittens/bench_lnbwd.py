"""``python -m kittens.bench layernorm --backward``: the backward of the fused dropout + residual + layernorm
(``h = residual + dropout(x)``, ``y = layer_norm(h) * weight + bias``, returning y and h) against the same
backward in PyTorch eager and under ``torch.compile``, on the same tensors, in one process.

* ours: ``kittens._dispatch.layernorm_backward`` (registry ``layernorm_bwd``, two launches): reads ``dy``,
  ``dh`` (the gradients of y and h), ``x``, ``residual``, writes ``dx``, ``dresidual``, and ``dweight``,
  ``dbias`` (``D`` values each); the dropout mask is drawn again from the Philox seed.
* PyTorch: ``torch.autograd.grad`` of the same expression for x, residual, weight and bias (eager, and the
  compiled expression's compiled backward). With dropout the expression multiplies by the kittens mask
  (``kittens.ops.dropout_keep``, a stored bool tensor that PyTorch's backward reads), so every side
  computes the same gradients.

Bandwidth: the bytes the backward must move (four ``[rows, D]`` bf16 tensors read, two written; the
``D``-long vectors and the scratch are not counted) over the median time, and that as a fraction of
``dst.copy_(src)``'s bandwidth measured in the same run. CUDA events, warm-up, median, the three runs
interleaved, the inputs rotated over copies spanning 4x the L2 (``kittens.bench_timing.time_many``). Correctness
on the first 256 rows: our ``dx`` and ``dresidual`` against float64 autograd by the FlashAttention rule
(at most twice PyTorch eager's bf16 error + 1e-5).
"""

from __future__ import annotations

import math
from typing import List

from .bench_timing import L2_MULTIPLE, _l2_bytes, time_many
from .bench_mem import _judge, _rel, _row
from . import bench_variants

EPS = 1e-5
SEED, OFFSET = 0x5EED_2A2A_0123_4567, 12345


def _expr(torch):
    F = torch.nn.functional

    def expr(x, r, w, b, keep, p):
        h = r + x * keep * (1.0 / (1.0 - p)) if p > 0 else r + x
        return F.layer_norm(h, (h.shape[-1],), w, b, EPS), h

    return expr


def bench_layernorm_backward(torch, kittens, args, copy_gbs: float) -> List[dict]:
    from . import _dispatch, ops

    expr = _expr(torch)
    compiled = torch.compile(expr, dynamic=False)
    cases = [(rows, d, 0.0) for rows, d in args.ln_bwd_shapes]
    if args.p > 0 and args.ln_bwd_shapes:
        rows, d = args.ln_bwd_shapes[0]
        cases.insert(1, (rows, d, args.p))
    out = []
    for rows, d, p in cases:
        gen = torch.Generator(device="cuda").manual_seed(d)
        mk = lambda *s, sc=1.0: (torch.randn(*s, device="cuda", generator=gen) * sc).to(torch.bfloat16)  # noqa: E731
        per = 6 * rows * d * 2
        copies = max(2, math.ceil(L2_MULTIPLE * _l2_bytes(torch) / per))
        xs, rs = [mk(rows, d, sc=2.0) for _ in range(copies)], [mk(rows, d, sc=2.0) for _ in range(copies)]
        dys, dhs = [mk(rows, d) for _ in range(copies)], [mk(rows, d) for _ in range(copies)]
        w, b = (torch.rand(d, device="cuda", generator=gen) + 0.5).to(torch.bfloat16), mk(d)
        keep = ops.dropout_keep(rows, d, p, SEED, OFFSET, xs[0].device).to(torch.bfloat16) if p > 0 else None

        def ours(i):
            return _dispatch.layernorm_backward(dys[i], dhs[i], xs[i], rs[i], w, p, SEED, OFFSET, EPS)

        # The backward from the forward's own h (its second plane, which autograd keeps, as
        # torch.compile's backward reads the h its forward saved): h, dy, dh read, dresidual written (and dx
        # with dropout; without, dx is dresidual).
        hs = [_dispatch.layernorm(xs[i], rs[i], w, b, p, SEED, OFFSET, EPS)[1] for i in range(copies)]

        def ours_h(i):
            return _dispatch.layernorm_backward_h(dys[i], dhs[i], hs[i], w, p, SEED, OFFSET, EPS)

        graphs = {}
        for name, f in (("eager", expr), ("compiled", compiled)):
            gs = []
            for i in range(copies):
                leaves = [t.detach().requires_grad_() for t in (xs[i], rs[i], w, b)]
                y, h = f(*leaves, keep, p)
                gs.append(((y, h), leaves))
            graphs[name] = gs

        def grad(name, i):
            outs, leaves = graphs[name][i]
            return torch.autograd.grad(outs, leaves, (dys[i], dhs[i]), retain_graph=True)

        # Correctness on 256 rows: dx and dresidual against float64 autograd.
        s = slice(0, 256)
        dx, dres, dw, db = ours(0)
        e = grad("eager", 0)
        leaves = [t.double().requires_grad_() for t in (xs[0][s], rs[0][s], w, b)]
        kd = keep[s].double() if keep is not None else None
        y64, h64 = expr(*leaves, kd, p)
        d64 = torch.autograd.grad((y64, h64), leaves, (dys[0][s].double(), dhs[0][s].double()))
        check = _judge(torch, dx[s], e[0][s], d64[0])
        res_check = _judge(torch, dres[s], e[1][s], d64[1])
        check["dresidual_rel_err"] = res_check["rel_err_ours"]
        check["passed"] = check["passed"] and res_check["passed"]
        # dweight and dbias over every row: against PyTorch eager's (both bf16 results of f32 sums).
        check["dweight_rel_diff_vs_torch"] = _rel(dw, e[2].double())
        check["dbias_rel_diff_vs_torch"] = _rel(db, e[3].double())
        variants = bench_variants.fns(args, ours)
        variants["from_h"] = ours_h
        variants.update({f"h:{k[2:]}": f for k, f in bench_variants.fns(args, ours_h).items()})

        def judge(fn):
            vx, vres, vw, vb = fn(0)
            c = _judge(torch, vx[s], e[0][s], d64[0])
            c["passed"] = c["passed"] and _judge(torch, vres[s], e[1][s], d64[1])["passed"]
            # The same sums in another order: within bf16's rounding of PyTorch's.
            c["passed"] = c["passed"] and max(_rel(vw, e[2].double()), _rel(vb, e[3].double())) < 2e-2
            return c

        bench_variants.judge_all(check, variants, judge)
        times = time_many(torch, {
            "ours": ours,
            "eager": lambda i: grad("eager", i),
            "compiled": lambda i: grad("compiled", i),
            **variants,
        }, copies, args.warmup, args.iters)
        row = _row(f"layernorm bwd rows {rows} D {d} p={p}", per, times, copy_gbs)
        row.update(check)
        # The from-h forms against the bytes they must move themselves (not the x form's six tensors).
        h_bytes = (3 + (2 if p > 0 else 1)) * rows * d * 2
        row["from_h_bytes"] = h_bytes
        for k in [k for k in times if k == "from_h" or k.startswith("h:")]:
            row[f"{k}_own_of_copy"] = h_bytes / times[k] / 1e6 / copy_gbs
            print(f"  {row['shape']:<40} {k:<34} {row[k + '_own_of_copy']:.3f} of copy (own bytes)  "
                  f"{times['ours'] / times[k]:.3f}x x-form  {times['compiled'] / times[k]:.3f}x compiled  "
                  f"{'ok' if check.get(k + '_passed') else 'FAILED'}", flush=True)
        out.append(row)
        xs = rs = dys = dhs = graphs = None
        torch.cuda.empty_cache()
    return out
