"""``python -m kittens.bench rmsnorm|swiglu|lce``: the Llama kernels of issue 35 against PyTorch eager and
``torch.compile`` of the same code, on the same tensors, in one process.

* rmsnorm: the fused residual add + RMSNorm in Hugging Face's rounding order (``h = x + r``; ``y = w *
  (h·rsqrt(mean(h²) + eps)).to(bf16)`` in float32), forward (``kittens.ops.rmsnorm``: reads x, r, writes
  y, h) and backward (``kittens.ops.rmsnorm_backward``: reads dy, h, dh, writes dx; dweight is
  ``D`` values); PyTorch's backward is ``torch.autograd.grad`` of the same expression (eager, and the
  compiled expression's compiled backward) for the gradients of x and w.
* swiglu: ``silu(gate) * up`` with gate and up the halves of one (rows, 2F) tensor (a fused gate-and-up
  projection's output), forward (reads 2F, writes F per row) and backward (reads dy, gate, up, writes
  dgate, dup).
* lce: :func:`kittens.linear_cross_entropy` against ``F.cross_entropy(hidden @ weight.T, labels)``, forward
  and backward together (the fused loss computes its gradients in the forward pass): time (median of
  CUDA events) and peak memory above the inputs (``torch.cuda.max_memory_allocated``), against the size of
  the bf16 logits.

Bandwidth: the bytes a kernel must move (each input read once, each output written once) over its
median time, and that as a fraction of ``dst.copy_(src)``'s bandwidth measured in the same run
(``kittens.bench_mem.copy_bandwidth``). Timing as every bench: CUDA events, warm-up, median, the three
runs interleaved, the inputs rotated over copies spanning 4x the L2. Correctness on the first 256 rows:
ours against float64 by the FlashAttention rule (at most twice PyTorch eager's bf16 error + 1e-5).
"""

from __future__ import annotations

import math
from typing import List

from .bench_timing import L2_MULTIPLE, _l2_bytes, time_many
from .bench_mem import _judge, _rel, _row
from . import bench_variants

EPS = 1e-6


def _copies(torch, per: int) -> int:
    return max(2, math.ceil(L2_MULTIPLE * _l2_bytes(torch) / per))


def _rms_expr(torch):
    def expr(x, r, w):
        h = x + r
        hf = h.float()
        y = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + EPS)
        return w * y.to(torch.bfloat16), h

    return expr


def bench_rmsnorm(torch, kittens, args, copy_gbs: float) -> List[dict]:
    from . import ops

    expr = _rms_expr(torch)
    compiled = torch.compile(expr, dynamic=False)
    rows = []
    for rws, d in args.norm_shapes:
        g = torch.Generator(device="cuda").manual_seed(d)
        mk = lambda *s: torch.randn(*s, device="cuda", generator=g).to(torch.bfloat16)  # noqa: E731
        per = 2 * rws * d * 2
        copies = _copies(torch, per)
        xs, rs = [mk(rws, d) for _ in range(copies)], [mk(rws, d) for _ in range(copies)]
        dys, dhs = [mk(rws, d) for _ in range(copies)], [mk(rws, d) for _ in range(copies)]
        w = (torch.rand(d, device="cuda", generator=g) + 0.5).to(torch.bfloat16)
        # Forward: correctness on 256 rows, then the timing.
        y, h = ops.rmsnorm_eager(xs[0], rs[0], w, EPS)
        ye, _ = expr(xs[0], rs[0], w)
        s = slice(0, 256)
        hd = xs[0][s].double() + rs[0][s].double()
        yd = hd * torch.rsqrt(hd.pow(2).mean(-1, keepdim=True) + EPS) * w.double()
        check = _judge(torch, y[s], ye[s], yd)
        variants = bench_variants.fwd_fns(args, lambda i: ops.rmsnorm_eager(xs[i], rs[i], w, EPS))
        bench_variants.judge_all(check, variants, lambda fn: _judge(torch, fn(0)[0][s], ye[s], yd))
        times = time_many(torch, {
            "ours": lambda i: ops.rmsnorm_eager(xs[i], rs[i], w, EPS),
            "eager": lambda i: expr(xs[i], rs[i], w),
            "compiled": lambda i: compiled(xs[i], rs[i], w),
            **variants,
        }, copies, args.warmup, args.iters)
        row = _row(f"rmsnorm fwd rows {rws} D {d}", 4 * rws * d * 2, times, copy_gbs)
        row.update(check)
        rows.append(row)
        # Backward of the same expression: dx from (dy, dh) at h, and dweight.
        hs = [(xs[i] + rs[i]) for i in range(copies)]
        dx, _ = ops.rmsnorm_backward(dys[0], hs[0], w, dhs[0], EPS)
        graphs = {}
        for name, f in (("eager", expr), ("compiled", compiled)):
            gs = []
            for i in range(copies):
                x = xs[i].detach().requires_grad_()
                ww = w.detach().requires_grad_()
                yy, hh = f(x, rs[i], ww)
                gs.append((yy, hh, x, ww))
            graphs[name] = gs

        def grad(name, i):
            yy, hh, x, ww = graphs[name][i]
            return torch.autograd.grad((yy, hh), (x, ww), (dys[i], dhs[i]), retain_graph=True)

        dxe = grad("eager", 0)[0]
        hd = hs[0][s].double().requires_grad_()
        yd = hd * torch.rsqrt(hd.pow(2).mean(-1, keepdim=True) + EPS) * w.double()
        (dxd,) = torch.autograd.grad((yd, hd), (hd,), (dys[0][s].double(), dhs[0][s].double()))
        check = _judge(torch, dx[s], dxe[s], dxd)
        variants = bench_variants.fns(args, lambda i: ops.rmsnorm_backward(dys[i], hs[i], w, dhs[i], EPS))
        bench_variants.judge_all(check, variants, lambda fn: _judge(torch, fn(0)[0][s], dxe[s], dxd))
        times = time_many(torch, {
            "ours": lambda i: ops.rmsnorm_backward(dys[i], hs[i], w, dhs[i], EPS),
            "eager": lambda i: grad("eager", i),
            "compiled": lambda i: grad("compiled", i),
            **variants,
        }, copies, args.warmup, args.iters)
        row = _row(f"rmsnorm bwd rows {rws} D {d}", 4 * rws * d * 2, times, copy_gbs)
        row.update(check)
        rows.append(row)
        xs = rs = dys = dhs = hs = graphs = None
        torch.cuda.empty_cache()
    return rows


def bench_swiglu(torch, kittens, args, copy_gbs: float) -> List[dict]:
    # The backward through _dispatch: the packed kernel reads the halves in place and writes one (rows, 2F)
    # gradient (the op copies packed inputs, since one op's outputs may not alias).
    from . import _dispatch, ops

    F = torch.nn.functional

    def expr(g, u):
        return F.silu(g) * u

    compiled = torch.compile(expr, dynamic=False)
    rows = []
    for rws, f in args.glu_shapes:
        gen = torch.Generator(device="cuda").manual_seed(f)
        mk = lambda *s: (torch.randn(*s, device="cuda", generator=gen) * 2).to(torch.bfloat16)  # noqa: E731
        per = 3 * rws * f * 2
        copies = _copies(torch, per)
        packs = [mk(rws, 2 * f) for _ in range(copies)]
        halves = [p.chunk(2, -1) for p in packs]
        dys = [mk(rws, f) for _ in range(copies)]
        out = ops.swiglu_eager(*halves[0])
        g0, u0 = halves[0]
        s = slice(0, 256)
        gd, ud = g0[s].double(), u0[s].double()
        check = _judge(torch, out[s], expr(g0, u0)[s], F.silu(gd) * ud)
        variants = bench_variants.swiglu_fns(args, lambda i: ops.swiglu_eager(*halves[i]))
        bench_variants.judge_all(check, variants, lambda fn: _judge(torch, fn(0)[s], expr(g0, u0)[s], F.silu(gd) * ud))
        times = time_many(torch, {
            "ours": lambda i: ops.swiglu_eager(*halves[i]),
            "eager": lambda i: expr(*halves[i]),
            "compiled": lambda i: compiled(*halves[i]),
            **variants,
        }, copies, args.warmup, args.iters)
        row = _row(f"swiglu fwd rows {rws} F {f} (packed)", 3 * rws * f * 2, times, copy_gbs)
        row.update(check)
        rows.append(row)
        graphs = {}
        for name, fn in (("eager", expr), ("compiled", compiled)):
            gs = []
            for i in range(copies):
                g, u = (t.detach().requires_grad_() for t in halves[i])
                gs.append((fn(g, u), g, u))
            graphs[name] = gs

        def grad(name, i):
            o, g, u = graphs[name][i]
            return torch.autograd.grad(o, (g, u), dys[i], retain_graph=True)

        dg, du = _dispatch.swiglu_backward(dys[0], g0, u0)
        dge = grad("eager", 0)[0]
        gd = gd.requires_grad_()
        (dgd,) = torch.autograd.grad(F.silu(gd) * ud, (gd,), dys[0][s].double())
        check = _judge(torch, dg[s], dge[s], dgd)
        check["dup_rel_err"] = _rel(du[s], dys[0][s].double() * F.silu(gd.detach()))
        variants = bench_variants.swiglu_fns(args, lambda i: _dispatch.swiglu_backward(dys[i], *halves[i]))
        bench_variants.judge_all(check, variants, lambda fn: _judge(torch, fn(0)[0][s], dge[s], dgd))
        times = time_many(torch, {
            "ours": lambda i: _dispatch.swiglu_backward(dys[i], *halves[i]),
            "eager": lambda i: grad("eager", i),
            "compiled": lambda i: grad("compiled", i),
            **variants,
        }, copies, args.warmup, args.iters)
        row = _row(f"swiglu bwd rows {rws} F {f} (packed)", 5 * rws * f * 2, times, copy_gbs)
        row.update(check)
        rows.append(row)
        packs = halves = dys = graphs = None
        torch.cuda.empty_cache()
    return rows


def bench_lce(torch, kittens, args) -> List[dict]:
    """Fused linear + cross-entropy against the unfused matmul + F.cross_entropy, forward and backward."""
    F = torch.nn.functional
    rows = []
    for n, h, v in args.lce_shapes:
        gen = torch.Generator(device="cuda").manual_seed(v)
        hid = (torch.randn(n, h, device="cuda", generator=gen)).to(torch.bfloat16).requires_grad_()
        w = (torch.randn(v, h, device="cuda", generator=gen) / math.sqrt(h) * 4).to(torch.bfloat16).requires_grad_()
        y = torch.randint(0, v, (n,), device="cuda", generator=gen)
        y[::17] = -100

        def fused(i=0):
            hid.grad = w.grad = None
            kittens.linear_cross_entropy(hid, w, y).backward()

        def unfused(i=0):
            hid.grad = w.grad = None
            F.cross_entropy(hid @ w.T, y).backward()

        peak = {}
        grads = {}
        for name, fn in (("fused", fused), ("unfused", unfused)):
            fn()
            torch.cuda.synchronize()
            hid.grad = w.grad = None
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            fn()
            torch.cuda.synchronize()
            peak[name] = torch.cuda.max_memory_allocated() - base
            grads[name] = (hid.grad.clone(), w.grad.clone())
        times = time_many(torch, {"fused": fused, "unfused": unfused}, 1, args.warmup, max(5, args.iters // 10))
        # Correctness on 256 rows: loss and d_hidden against float64 by the rule.
        s = slice(0, 256)
        hs = hid.detach()[s]
        lo = kittens.linear_cross_entropy(hs, w.detach(), y[s]).float()
        lt = F.cross_entropy(hs @ w.detach().T, y[s]).float()
        ld = F.cross_entropy(hs.double() @ w.detach().double().T, y[s])
        e_ours, e_torch = abs(lo.item() - ld.item()) / abs(ld.item()), abs(lt.item() - ld.item()) / abs(ld.item())
        logits = n * v * 2
        rows.append({
            "shape": f"lce N {n} H {h} V {v}", "fused_ms": times["fused"], "unfused_ms": times["unfused"],
            "vs_unfused": times["unfused"] / times["fused"],
            "fused_peak_mib": peak["fused"] / 2**20, "unfused_peak_mib": peak["unfused"] / 2**20,
            "logits_mib": logits / 2**20, "fused_peak_of_logits": peak["fused"] / logits,
            "d_hidden_rel_diff_vs_torch": _rel(grads["fused"][0], grads["unfused"][0].double()),
            "d_weight_rel_diff_vs_torch": _rel(grads["fused"][1], grads["unfused"][1].double()),
            "loss_rel_err_ours": e_ours, "loss_rel_err_torch": e_torch,
            "passed": math.isfinite(e_ours) and e_ours <= 2 * e_torch + 1e-5,
        })
        hid = w = None
        torch.cuda.empty_cache()
    return rows


def print_lce(rows: List[dict]) -> None:
    print(f"{'shape':<28} {'fused ms':>9} {'unfused ms':>10} {'speed':>6} {'fused MiB':>10} {'unfused MiB':>11} "
          f"{'logits MiB':>10} {'check':>6}")
    for r in rows:
        print(f"{r['shape']:<28} {r['fused_ms']:>9.2f} {r['unfused_ms']:>10.2f} {r['vs_unfused']:>5.2f}x "
              f"{r['fused_peak_mib']:>10.0f} {r['unfused_peak_mib']:>11.0f} {r['logits_mib']:>10.0f} "
              f"{'ok' if r['passed'] else 'FAIL':>6}")
