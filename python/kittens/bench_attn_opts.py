"""``python -m kittens.bench attn --options``: FlashAttention's options (soft cap, sliding window, ALiBi,
head dims) on the attention forward, each against PyTorch in the same process.

Per row: our kernel with the option, our dense kernel at the same shape (the issue's bar: the option's
TF/s on the work it keeps at least 0.95 of the dense kernel's, ``vs_dense``), and PyTorch's closest
kernel (``theirs``):

* softcap: ``F.scaled_dot_product_attention`` has none; FlexAttention's ``score_mod`` when torch has it
  (compiled in this process), else the dense SDPA (labelled so);
* window: SDPA with the window as a boolean ``attn_mask`` (PyTorch's memory-efficient kernel), and
  FlexAttention's block mask when torch has it;
* alibi: SDPA with the bias as a bf16 ``attn_mask`` (FlashAttention's ``-slope * |i + N_k - N_q - j|``);
* varlen: ``flash_attn_varlen_func`` on B·N tokens packed as documents of uneven lengths (causal), against
  SDPA on the documents padded to the longest (a boolean mask hides the padding) and FlexAttention's
  document mask over the packed tokens when torch has it;
* head dims 64, 96, 128, 192, 256: the dense forward against SDPA held to cuDNN.

TF/s count the kept (query, key) pairs only (a window keeps few). Correctness on batch 0's last 256
queries: ours against a float64 reference of the same option, by the FlashAttention rule against
the same computation in bfloat16. A kernel that refuses the option or shape is a row with the error
(``ours not run``), timed on their side only.
"""

from __future__ import annotations

import math
from typing import List, Optional

from .bench_timing import FLOOR, _rel, time_many, time_one

ROWS = 256


def kept_mask(torch, nq: int, nk: int, causal: bool, window, device):
    """FlashAttention's kept (query, key) pairs: bottom-right causal, ``window=(left, right)``."""
    i = torch.arange(nq, device=device).view(-1, 1)
    j = torch.arange(nk, device=device).view(1, -1)
    diag = i + nk - nq
    keep = torch.ones(nq, nk, dtype=torch.bool, device=device)
    left, right = window if window is not None else (-1, -1)
    if causal:
        right = 0 if right < 0 else min(right, 0)
    if right >= 0:
        keep &= j <= diag + right
    if left >= 0:
        keep &= j >= diag - left
    return keep


def alibi_bias(torch, slopes, nq: int, nk: int, device, dtype):
    """``-slope_h * |i + N_k - N_q - j|`` as a (1, H, N_q, N_k) tensor (FlashAttention's ALiBi)."""
    i = torch.arange(nq, device=device).view(-1, 1)
    j = torch.arange(nk, device=device).view(1, -1)
    dist = (i + nk - nq - j).abs().to(torch.float32)
    return (-slopes.view(1, -1, 1, 1).float() * dist).to(dtype)


def reference(torch, q, k, v, causal, window=None, softcap=None, slopes=None):
    """Attention of q (B, H, Nq, D) over k, v (B, H_kv, Nk, D) in q's dtype with every option; a query
    that keeps no key gives a zero row."""
    h, hk = q.shape[1], k.shape[1]
    k, v = k.repeat_interleave(h // hk, 1), v.repeat_interleave(h // hk, 1)
    nq, nk = q.shape[2], k.shape[2]
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    if slopes is not None:
        s = s + alibi_bias(torch, slopes, nq, nk, q.device, s.dtype)
    s = s.masked_fill(~kept_mask(torch, nq, nk, causal, window, q.device), float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    den = e.sum(-1, keepdim=True)
    return (e / torch.where(den == 0, torch.ones_like(den), den)) @ v


def _flex(torch):
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return None
    return torch.compile(flex_attention), create_block_mask


def bench_attn_options(torch, kittens, args) -> List[dict]:
    F = torch.nn.functional
    b, h, hk, n = args.batch, args.heads, args.heads_kv, args.opt_seq
    dev = getattr(args, "device", "cuda")
    flex = _flex(torch)
    rows = []

    def inputs(d, seed):
        g = torch.Generator(device=dev).manual_seed(seed)
        mk = lambda hh: torch.randn(b, n, hh, d, device=dev, generator=g).to(torch.bfloat16).transpose(1, 2)  # noqa: E731
        return mk(h), mk(hk), mk(hk)

    def row(name, d, causal, ours, theirs, theirs_name, kept, check, dense=None):
        flop = 4.0 * b * h * kept * d
        r = {"shape": f"{name} B{b} H{h}/{hk} N{n} D{d}{' causal' if causal else ''}", "feature": name,
             "dim": d, "causal": causal, "theirs": theirs_name}
        try:
            ours(0)
        except (RuntimeError, ValueError, NotImplementedError) as e:
            t = time_one(torch, theirs, 1, args.warmup, args.iters)
            r.update({"ours_ms": None, "torch_ms": t, "ours_tflops": None, "torch_tflops": flop / t / 1e9,
                      "ratio": None, "passed": False, "error": f"{type(e).__name__}: {e}"})
            return rows.append(r)
        fns = {"ours": ours, "theirs": theirs}
        if dense is not None:
            fns["dense"] = dense
        t = time_many(torch, fns, 1, args.warmup, args.iters, args.timing)
        r.update({"ours_ms": t["ours"], "torch_ms": t["theirs"], "ours_tflops": flop / t["ours"] / 1e9,
                  "torch_tflops": flop / t["theirs"] / 1e9, "ratio": t["theirs"] / t["ours"], **check()})
        if dense is not None:
            dense_tf = 4.0 * b * h * n * n * d / (2 if causal else 1) / t["dense"] / 1e9
            r.update({"dense_tflops": dense_tf, "vs_dense": r["ours_tflops"] / dense_tf})
        rows.append(r)

    def checker(out, q, k, v, causal, **kw):
        def check():
            # the last rows: with FlashAttention's bottom-right alignment a reference over the last r
            # queries and every key keeps the same pairs as the whole problem does for those rows
            sel = (slice(0, 1), slice(None), slice(max(0, n - ROWS), n))
            o = out()[sel]
            exact = reference(torch, q[sel].double(), k[:1].double(), v[:1].double(), causal, **kw)
            base = reference(torch, q[sel], k[:1], v[:1], causal, **kw)
            e_ours, e_base = _rel(o, exact), _rel(base, exact)
            return {"rel_err_ours": e_ours, "rel_err_torch": e_base, "bit_identical": False,
                    "rel_err_vs_torch": _rel(o, base.double()), "all_finite": bool(torch.isfinite(o).all()),
                    "passed": bool(torch.isfinite(o).all()) and e_ours <= 2 * e_base + FLOOR}
        return check

    d = args.dim
    q, k, v = inputs(d, 1)
    gqa = {"enable_gqa": True} if hk != h else {}
    align = lambda c: "bottom_right" if c else "top_left"  # noqa: E731
    dense = lambda i, c=False: kittens.attention(q, k, v, causal=c, causal_align=align(c))  # noqa: E731
    sdpa = lambda i: F.scaled_dot_product_attention(q, k, v, **gqa)  # noqa: E731
    for cap in (30.0, 5.0):
        ours = lambda i, cap=cap: kittens.attention(q, k, v, softcap=cap)  # noqa: E731
        if flex is not None:
            fa, _ = flex
            mod = lambda s, bb, hh, i, j, cap=cap: cap * torch.tanh(s / cap)  # noqa: E731
            theirs, name = (lambda i, mod=mod: fa(q, k, v, score_mod=mod, enable_gqa=hk != h)), "flex score_mod"
        else:
            theirs, name = sdpa, "SDPA dense (no softcap)"
        row(f"softcap {cap:g}", d, False, ours, theirs, name, n * n,
            checker(lambda cap=cap: ours(0, cap), q, k, v, False, softcap=cap), dense)
    for window, causal in (((256, 0), True), ((1024, 0), True), ((512, 512), False)):
        keep = kept_mask(torch, n, n, causal, window, dev)
        kept = int(keep.sum())
        ours = lambda i, w=window, c=causal: kittens.attention(q, k, v, causal=c, causal_align=align(c), window=w)  # noqa: E731
        theirs = lambda i, m=keep: F.scaled_dot_product_attention(q, k, v, attn_mask=m, **gqa)  # noqa: E731
        row(f"window {window}", d, causal, ours, theirs, "SDPA bool mask", kept,
            checker(lambda w=window, c=causal: ours(0, w, c), q, k, v, causal, window=window),
            lambda i, c=causal: dense(i, c))
        if flex is not None:
            fa, block_mask = flex
            left, right = window
            mod = lambda bb, hh, i, j, l=left, r=right: (j >= i - l) & (j <= i + r)  # noqa: E731
            bm = block_mask(mod, None, None, n, n, device=dev)
            row(f"window {window} vs flex", d, causal, ours,
                lambda i, bm=bm: fa(q, k, v, block_mask=bm, enable_gqa=hk != h), "flex block mask", kept,
                checker(lambda w=window, c=causal: ours(0, w, c), q, k, v, causal, window=window))
    slopes = torch.tensor([2 ** (-8 * (i + 1) / h) for i in range(h)], device=dev, dtype=torch.float32)
    bias = alibi_bias(torch, slopes, n, n, dev, torch.bfloat16)
    from .flash_attn import flash_attn_func

    ours = lambda i: flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), alibi_slopes=slopes)  # noqa: E731
    row("alibi", d, False, ours, lambda i: F.scaled_dot_product_attention(q, k, v, attn_mask=bias, **gqa),
        "SDPA bf16 bias", n * n,
        checker(lambda: ours(0).transpose(1, 2), q, k, v, False, slopes=slopes), dense)
    for r in varlen_rows(torch, b, n, h, hk, d, dev, flex):
        row(*r)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for dim in (64, 96, 128, 192, 256):
        qd, kd, vd = inputs(dim, dim)
        for causal in (False, True):
            def cudnn(i, qd=qd, kd=kd, vd=vd, c=causal):
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(qd, kd, vd, is_causal=c, **gqa)

            ours = lambda i, qd=qd, kd=kd, vd=vd, c=causal: kittens.attention(qd, kd, vd, causal=c)  # noqa: E731
            kept = n * n // 2 if causal else n * n
            row(f"head dim {dim}", dim, causal, ours, cudnn, "SDPA cuDNN", kept,
                checker(lambda o=ours: o(0), qd, kd, vd, causal))
    return rows


def doc_lengths(total: int) -> List[int]:
    """``total`` tokens as documents of uneven lengths (about 11/32, 7/32, ... of the whole, the last
    taking the rest), none empty."""
    lens = [max(1, total * w // 32) for w in (11, 7, 5, 4, 3)]
    return lens + [max(1, total - sum(lens))]


def varlen_rows(torch, b: int, n: int, h: int, hk: int, d: int, dev, flex):
    """The varlen rows' arguments for ``row``: ``(name, d, causal, ours, theirs, theirs_name, kept, check)``
    for B·N tokens, ``kept`` the documents' kept pairs over B (``row`` counts B·H·kept). Ours:
    ``kittens.flash_attn_varlen_func`` on the packed tokens;
    theirs: SDPA on the padded documents, and FlexAttention's document mask when ``flex`` is given. The
    check: the last document's rows against float64 by the FlashAttention rule."""
    F = torch.nn.functional
    from .varlen import flash_attn_varlen_func

    lens = doc_lengths(b * n)
    total = sum(lens)
    g = torch.Generator(device=dev).manual_seed(7)
    mk = lambda hh: torch.randn(total, hh, d, device=dev, generator=g).to(torch.bfloat16)  # noqa: E731
    q, k, v = mk(h), mk(hk), mk(hk)
    cu = torch.tensor([0] + lens, device=dev).cumsum(0).to(torch.int32)
    top = max(lens)
    ours = lambda i: flash_attn_varlen_func(q, k, v, cu, cu, top, top, causal=True)  # noqa: E731
    # The documents padded to the longest, (docs, H, top, D); a query keeps keys j <= i inside its document.
    pad = lambda t: torch.stack([F.pad(t[a:a + m], (0, 0, 0, 0, 0, top - m))  # noqa: E731
                                 for a, m in zip(cu[:-1].tolist(), lens)]).transpose(1, 2)
    qp, kp, vp = pad(q), pad(k), pad(v)
    j = torch.arange(top, device=dev)
    valid = j.view(1, -1) < torch.tensor(lens, device=dev).view(-1, 1)  # (docs, top) keys present
    mask = (j.view(-1, 1) >= j.view(1, -1)).view(1, top, top) & valid.view(-1, 1, top)
    gqa = {"enable_gqa": True} if hk != h else {}
    sdpa = lambda i: F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask[:, None], **gqa)  # noqa: E731
    kept = sum(m * (m + 1) // 2 for m in lens) / b

    def check():
        a, m = int(cu[-2]), lens[-1]
        sel = lambda t: t[a:a + m].transpose(0, 1)[None]  # noqa: E731  (1, H, m, D)
        o = ours(0)[a:a + m].transpose(0, 1)[None]
        exact = reference(torch, sel(q).double(), sel(k).double(), sel(v).double(), True)
        base = reference(torch, sel(q), sel(k), sel(v), True)
        e_ours, e_base = _rel(o, exact), _rel(base, exact)
        return {"rel_err_ours": e_ours, "rel_err_torch": e_base, "bit_identical": False,
                "rel_err_vs_torch": _rel(o, base.double()), "all_finite": bool(torch.isfinite(o).all()),
                "passed": bool(torch.isfinite(o).all()) and e_ours <= 2 * e_base + FLOOR}

    name = f"varlen {len(lens)} docs {min(lens)}-{top}"
    rows = [(name, d, True, ours, sdpa, "SDPA padded bool mask", kept, check)]
    if flex is not None:
        fa, block_mask = flex
        doc = torch.repeat_interleave(torch.arange(len(lens), device=dev), torch.tensor(lens, device=dev))
        mod = lambda bb, hh, i, jj: (doc[i] == doc[jj]) & (jj <= i)  # noqa: E731
        bm = block_mask(mod, None, None, total, total, device=dev)
        qf, kf, vf = (t.transpose(0, 1)[None] for t in (q, k, v))
        rows.append((name + " vs flex", d, True, ours,
                     lambda i: fa(qf, kf, vf, block_mask=bm, enable_gqa=hk != h), "flex document mask", kept,
                     check))
    return rows


def print_rows(rows: List[dict]) -> None:
    fmt = lambda x, s: "-" if x is None else format(x, s)  # noqa: E731
    print(f"{'shape':<48} {'ours TF/s':>10} {'theirs TF/s':>12} {'ratio':>7} {'vs dense':>9}  theirs / check")
    for r in rows:
        if r.get("error"):
            check = "ours not run: " + r["error"].split(";")[0]
        else:
            check = (f"{'ok' if r['passed'] else 'FAILED'}: err {r['rel_err_ours']:.2e} vs bf16 "
                     f"{r['rel_err_torch']:.2e}")
        print(f"{r['shape']:<48} {fmt(r['ours_tflops'], '10.1f')} {fmt(r['torch_tflops'], '12.1f')} "
              f"{fmt(r['ratio'], '7.3f')} {fmt(r.get('vs_dense'), '9.3f')}  {r['theirs']} / {check}")


def main_options(torch, kittens, args, header: Optional[dict] = None) -> int:
    import json

    rows = bench_attn_options(torch, kittens, args)
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    print(f"{props.name}, torch {torch.__version__}: attention options, timing {args.timing}, median of "
          f"{args.iters}")
    print_rows(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**(header or {}), "rows": rows}, f, indent=2)
    return 0 if all(r.get("passed") for r in rows) else 1
