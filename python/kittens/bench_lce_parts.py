"""``python -m kittens.bench lce --lce-chunks default,512,1024``: where the fused linear + cross-entropy's time
goes, per chunk size. For each shape and each chunk size (``default``: Liger's rows / ceil(V / H)):

* the whole fused pass (``kittens.linear_cross_entropy`` forward and backward), the same with PyTorch's
  GEMMs in place of the kittens GEMM (``kittens._lce.KITTENS_GEMM = False``), the op's body alone (no
  autograd, no backward scaling), and the fused pass's peak memory above
  the inputs, against the unfused ``matmul + F.cross_entropy`` (time and peak); ``extra``: the fused
  pass's peak beyond the inputs and the two gradients (the chunk of logits and small things), as a
  fraction of the logits (N x V bf16);
* its parts, each timed on its own over the same chunks and summed: the logits GEMM (``hidden_chunk @
  weight.T``), the ``cross_entropy`` kernel (in place on a chunk of logits), the ``d_hidden`` GEMM
  (``dlogits @ weight``) and ``d_weight.addmm_(dlogits.T, hidden_chunk)``; the two GEMMs also by
  ``torch.mm``; once a pass, the labels' preparation and the backward's scaling of both gradients.

The GEMMs' share grows where a chunk is short: ``d_hidden``'s output is one chunk of rows by H (few output
tiles for the SMs unless split over K), and ``addmm_`` reads and writes all of ``d_weight`` once per chunk.
Timing: CUDA events, warm-up, median (``kittens.bench_timing.time_many``).
"""

from __future__ import annotations

import math
from typing import List


def _chunks(spec: str, n: int, h: int, v: int) -> List[int]:
    from .loss import default_chunk_rows

    out = []
    for c in spec.split(","):
        c = c.strip()
        if c:
            out.append(default_chunk_rows(n, h, v) if c == "default" else int(c))
    return out


def _peak(torch, fn, device: str) -> float:
    """Bytes allocated at ``fn``'s peak beyond what was allocated before it (CUDA; NaN elsewhere)."""
    if device != "cuda":
        fn()
        return float("nan")
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return float(torch.cuda.max_memory_allocated() - base)


def lce_parts(torch, kittens, args, device: str = "cuda", timer=None) -> List[dict]:
    """The rows of the table. ``device``/``timer``: the CPU smoke test's (tests/test_lce_cpu.py) in place
    of CUDA and ``kittens.bench_timing.time_many``."""
    from . import _lce as loss_mod
    from ._lce import _labels_for_kernel, _mm, pitch_of
    from .ops import cross_entropy_

    if timer is None:
        from .bench_timing import time_many as timer
    F = torch.nn.functional
    rows = []
    iters = max(5, args.iters // 10)
    for n, h, v in args.lce_shapes:
        gen = torch.Generator(device=device).manual_seed(v)
        hid = torch.randn(n, h, device=device, generator=gen).to(torch.bfloat16).requires_grad_()
        w = (torch.randn(v, h, device=device, generator=gen) / math.sqrt(h) * 4).to(torch.bfloat16).requires_grad_()
        y = torch.randint(0, v, (n,), device=device, generator=gen)
        y[::17] = -100

        def unfused(i=0):
            hid.grad = w.grad = None
            F.cross_entropy(hid @ w.T, y).backward()

        unfused()
        hid.grad = w.grad = None
        grads_bytes = (n * h + v * h) * 2
        peak_unfused = _peak(torch, unfused, device)
        t_unfused = timer(torch, {"unfused": unfused}, 1, args.warmup, iters)["unfused"]
        for chunk in _chunks(args.lce_chunks, n, h, v):
            chunk = -(-chunk // 8) * 8

            def fused(i=0):
                hid.grad = w.grad = None
                kittens.linear_cross_entropy(hid, w, y, chunk_rows=chunk).backward()

            def op_alone(i=0):  # the op's body without autograd: every GEMM and kernel, no backward scaling
                loss_mod.lce_forward(hd, wd, y, scale, -100, 0.0, chunk, True, True)

            def fused_torch_gemm(i=0):
                loss_mod.KITTENS_GEMM = False
                try:
                    fused()
                finally:
                    loss_mod.KITTENS_GEMM = True

            fused()
            hid.grad = w.grad = None
            peak = _peak(torch, fused, device)
            hd, wd = hid.detach(), w.detach()
            scale = torch.full((1,), 1.0 / n, dtype=torch.float32, device=device)
            whole = timer(torch, {"fused": fused, "op_alone": op_alone, "fused_torch_gemm": fused_torch_gemm}, 1,
                          args.warmup, iters)
            t_fused = whole["fused"]
            # The parts on the first chunk (and on the last, shorter one where the rows do not divide).
            lab = _labels_for_kernel(y, -100, v)
            dwt = torch.zeros_like(wd)
            dht = torch.empty_like(hd)
            g = torch.ones((), dtype=torch.float32, device=device)
            parts = {"logits_gemm": 0.0, "ce_kernel": 0.0, "d_hidden_gemm": 0.0, "d_weight_addmm": 0.0}
            # Outside the chunk loop, once a pass: the labels' preparation and the backward's scaling.
            once = timer(torch, {
                "labels_prep": lambda i: (_labels_for_kernel(y, -100, v), (y != -100).sum().clamp_min(1)),
                "scale_grads": lambda i: (dht.mul_(g), dwt.mul_(g)),
            }, 1, args.warmup, iters)
            alt = {"logits_gemm_torch": 0.0, "d_hidden_gemm_torch": 0.0}
            full, rest = divmod(n, chunk)
            for rws, count in ((chunk, full), (rest, 1)):
                if rws == 0 or count == 0:
                    continue
                hc = hd[:rws]
                logits = _mm(hc, wd.t(), out=torch.empty(rws, pitch_of(v), dtype=hc.dtype, device=device)[:, :v])
                dh = torch.empty_like(hc)
                t = timer(torch, {
                    "logits_gemm": lambda i: _mm(hc, wd.t(), out=logits),
                    "ce_kernel": lambda i: cross_entropy_(logits, lab[:rws], scale, 0.0),
                    "d_hidden_gemm": lambda i: _mm(logits, wd, out=dh),
                    "d_weight_addmm": lambda i: dwt.addmm_(logits.t(), hc),
                    "logits_gemm_torch": lambda i: torch.mm(hc, wd.t(), out=logits),
                    "d_hidden_gemm_torch": lambda i: torch.mm(logits, wd, out=dh),
                }, 1, args.warmup, iters)
                for k in parts:
                    parts[k] += count * t[k]
                for k in alt:
                    alt[k] += count * t[k]
            rows.append({
                "shape": f"lce N {n} H {h} V {v}", "chunk_rows": chunk, "chunks": -(-n // chunk),
                "fused_ms": t_fused, "unfused_ms": t_unfused, "vs_unfused": t_unfused / t_fused,
                "fused_peak_mib": peak / 2**20, "unfused_peak_mib": peak_unfused / 2**20,
                "logits_mib": n * v * 2 / 2**20, "fused_peak_of_logits": peak / (n * v * 2),
                "fused_extra_of_logits": (peak - grads_bytes) / (n * v * 2), "chunk_of_logits": min(chunk, n) / n,
                **{f"{k}_ms": t for k, t in parts.items()},
                "parts_sum_ms": sum(parts.values()),
                **{f"{k}_ms": t for k, t in once.items()}, **{f"{k}_ms": t for k, t in alt.items()},
                "op_alone_ms": whole["op_alone"], "fused_torch_gemm_ms": whole["fused_torch_gemm"],
                "vs_unfused_torch_gemm": t_unfused / whole["fused_torch_gemm"],
            })
            dwt = dht = None
        hid = w = None
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


def print_parts(rows: List[dict]) -> None:
    print(f"{'shape':<28} {'chunk':>6} {'fused':>7} {'unfused':>8} {'speed':>6} {'peak/logits':>11} "
          f"{'extra':>6} {'logits':>7} {'CE':>6} {'d_hid':>7} {'d_w':>7} (ms)  | op alone, labels, scale; "
          f"torch GEMMs: fused, speed, logits, d_hid")
    for r in rows:
        print(f"{r['shape']:<28} {r['chunk_rows']:>6} {r['fused_ms']:>7.2f} {r['unfused_ms']:>8.2f} "
              f"{r['vs_unfused']:>5.2f}x {r['fused_peak_of_logits']:>11.3f} {r['fused_extra_of_logits']:>6.3f} "
              f"{r['logits_gemm_ms']:>7.2f} "
              f"{r['ce_kernel_ms']:>6.2f} {r['d_hidden_gemm_ms']:>7.2f} {r['d_weight_addmm_ms']:>7.2f}  | "
              f"{r['op_alone_ms']:.2f} {r['labels_prep_ms']:.2f} {r['scale_grads_ms']:.2f}; "
              f"{r['fused_torch_gemm_ms']:.2f} {r['vs_unfused_torch_gemm']:.2f}x {r['logits_gemm_torch_ms']:.2f} "
              f"{r['d_hidden_gemm_torch_ms']:.2f}")
