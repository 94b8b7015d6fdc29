"""``python -m kittens.bench attn --backward``: the attention backward, kittens against
``F.scaled_dot_product_attention``'s cuDNN and FlashAttention-2 (``flash``) backends on the same tensors.

Per shape: the three backward passes timed with CUDA events (median; ``--timing interleaved``, the
default, runs one of each in turn per iteration so that all see the same clocks; the backends' backward is
``torch.autograd.grad`` of their own forward's output, the forward outside the timing; ours is
``kittens._attention_backward`` in each form ``--bwd-form`` names: ``auto`` (the library's default,
resolved per head dim), ``two`` launches, FlashAttention-3's ``atomic`` three, or ``both`` in the same
process), and every
gradient of batch 0's first KV head group checked against float64 autograd by the FlashAttention rule
(ours at most twice the error of PyTorch's bf16 SDPA backward on that slice plus a floor). TFLOP/s count the backward's five matrix products,
``2.5 x`` the forward's ``4 B H N² D`` (halved under the causal mask), as FlashAttention reports them.
Forward + backward: ours is ``kittens.attention(..., return_lse=True)`` then the backward; the backends'
is their forward then ``torch.autograd.grad`` (FLOPs 3.5x the forward's).

Row keys: ``{form}_ms``, ``{form}_tflops``, ``{form}_ratio_cudnn`` (cuDNN's time over ours),
``{form}_{dq,dk,dv}_err``, ``{form}_passed``, ``fwd_bwd_{form}_ms`` and ``fwd_bwd_{form}_ratio_{cudnn,flash}``
per form, ``{cudnn,flash}_ms`` and ``fwd_bwd_{cudnn,flash}_ms`` per backend, and the unprefixed
``ours_*``, ``ratio_*``, ``*_err``, ``fwd_bwd_*`` keys of the first form named (``two`` with ``both``);
with both, ``atomic_speedup_vs_two`` is the two-launch time over the atomic one.
"""

import math
from typing import List

from ._backward import _form
from .bench_timing import FLOOR, _rel, _with_backend, time_many


def _grads(torch, q, k, v, do, causal, dtype):
    """Autograd gradients of SDPA in `dtype` on one batch and one KV head group (float64: the math
    path, the reference; bfloat16: PyTorch's own choice of backend, the rule's baseline)."""
    F = torch.nn.functional
    g = q.shape[1] // k.shape[1]
    q, k, v = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
    o = F.scaled_dot_product_attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), is_causal=causal)
    return torch.autograd.grad(o, (q, k, v), do.to(dtype))


FORMS = {"two": ("two",), "atomic": ("atomic",), "both": ("two", "atomic")}


def bench_attn_backward(torch, kittens, args) -> List[dict]:
    F = torch.nn.functional
    choice = getattr(args, "bwd_form", "auto")
    rows = []
    shapes = [(args.batch, args.heads, args.heads_kv, n, args.dim) for n in args.seqs] + list(args.extra)
    for b, h, hk, n, d in shapes:
        forms = (_form("auto", d),) if choice == "auto" else FORMS[choice]
        for causal in (False, True):
            gen = torch.Generator(device="cuda").manual_seed(n + d + hk)
            mk = lambda hh: torch.randn(b, n, hh, d, device="cuda", generator=gen).to(torch.bfloat16).transpose(1, 2)  # noqa: E731
            q, k, v, do = mk(h), mk(hk), mk(hk), mk(h)
            gqa = {"enable_gqa": True} if hk != h else {}
            row = {"shape": f"B{b} H{h}/{hk} N{n} D{d}{' causal' if causal else ''}", "batch": b, "heads": h,
                   "heads_kv": hk, "seq": n, "dim": d, "causal": causal}
            flop = 2.5 * 4.0 * b * h * n * n * d / (2 if causal else 1)
            with torch.no_grad():
                out, lse = kittens.attention(q, k, v, causal=causal, return_lse=True)
            sel_q, sel_kv = (slice(0, 1), slice(0, h // hk)), (slice(0, 1), slice(0, 1))
            ref = _grads(torch, q[sel_q], k[sel_kv], v[sel_kv], do[sel_q], causal, torch.float64)
            base = _grads(torch, q[sel_q], k[sel_kv], v[sel_kv], do[sel_q], causal, torch.bfloat16)
            ours = {f: (lambda i, f=f: kittens._attention_backward(q, k, v, out, do, lse, causal, form=f))
                    for f in forms}
            mine = {}
            for f in forms:
                mine[f] = ours[f](0)
                for name, x, y, r in zip(("dq", "dk", "dv"), mine[f], base, ref):
                    sel = sel_q if name == "dq" else sel_kv
                    e_o, e_t = _rel(x[sel], r), _rel(y, r)
                    row[f"{f}_{name}_err"], row[f"{name}_err_torch"] = e_o, e_t
                    row[f"{f}_{name}_passed"] = bool(torch.isfinite(x).all().item()) and e_o <= 2 * e_t + FLOOR
                row[f"{f}_passed"] = all(row[f"{f}_{g}_passed"] for g in ("dq", "dk", "dv"))

            # Forward + backward: ours from scratch each time; the backends' forward and backward.
            def ours_fb(i, f):
                with torch.no_grad():
                    o, l = kittens.attention(q, k, v, causal=causal, return_lse=True)
                return kittens._attention_backward(q, k, v, o, do, l, causal, form=f)

            bwd = dict(ours)
            fwd_bwd = {f: (lambda i, f=f: ours_fb(i, f)) for f in forms}
            for backend in ("cudnn", "flash"):
                qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
                fwd = _with_backend(torch, backend, lambda i, qq=qq, kk=kk, vv=vv: F.scaled_dot_product_attention(
                    qq, kk, vv, is_causal=causal, **gqa))
                try:
                    o_t = fwd(0)
                    theirs = lambda i, o_t=o_t, g=(qq, kk, vv): torch.autograd.grad(o_t, g, do, retain_graph=True)  # noqa: E731
                    g_t = theirs(0)
                except RuntimeError as e:
                    row[f"{backend}_error"] = str(e).split("\n")[0]
                    continue
                bwd[backend] = theirs
                # Forward + backward: the backend's forward, then the gradients through its own backward.
                fwd_bwd[backend] = lambda i, fwd=fwd, g=(qq, kk, vv): torch.autograd.grad(fwd(i), g, do)  # noqa: E731
                if backend == "cudnn":
                    for f in forms:
                        row[f"{f}_rel_diff_vs_cudnn"] = [_rel(x, y.double()) for x, y in zip(mine[f], g_t)]
                del g_t
            timing = getattr(args, "timing", "interleaved")
            t_bwd = time_many(torch, bwd, 1, args.warmup, args.iters, timing)
            t_fb = time_many(torch, fwd_bwd, 1, args.warmup, args.iters, timing)
            del bwd, fwd_bwd
            for name, t in t_bwd.items():
                row.update({f"{name}_ms": t, f"{name}_tflops": flop / t / 1e9})
            for name, t in t_fb.items():
                row.update({f"fwd_bwd_{name}_ms": t, f"fwd_bwd_{name}_tflops": 1.4 * flop / t / 1e9})
            for f in forms:
                for backend in ("cudnn", "flash"):
                    if row.get(f"{backend}_ms"):
                        row[f"{f}_ratio_{backend}"] = row[f"{backend}_ms"] / row[f"{f}_ms"]
                    if row.get(f"fwd_bwd_{backend}_ms"):
                        row[f"fwd_bwd_{f}_ratio_{backend}"] = row[f"fwd_bwd_{backend}_ms"] / row[f"fwd_bwd_{f}_ms"]
            row["passed"] = all(row[f"{f}_passed"] for f in forms)
            first = forms[0]
            row["form"] = first
            row.update({"ours_ms": row.get(f"{first}_ms"), "ours_tflops": row.get(f"{first}_tflops"),
                        "fwd_bwd_ours_ms": row[f"fwd_bwd_{first}_ms"],
                        "fwd_bwd_ours_tflops": row[f"fwd_bwd_{first}_tflops"]})
            for g in ("dq", "dk", "dv"):
                row[f"{g}_err"], row[f"{g}_passed"] = row[f"{first}_{g}_err"], row[f"{first}_{g}_passed"]
            if f"{first}_rel_diff_vs_cudnn" in row:
                row["rel_diff_vs_cudnn"] = row[f"{first}_rel_diff_vs_cudnn"]
            for backend in ("cudnn", "flash"):
                if row.get(f"{first}_ratio_{backend}"):
                    row[f"ratio_{backend}"] = row[f"{first}_ratio_{backend}"]
                if row.get(f"fwd_bwd_{first}_ratio_{backend}"):
                    row[f"fwd_bwd_ratio_{backend}"] = row[f"fwd_bwd_{first}_ratio_{backend}"]
            if len(forms) == 2:
                row["atomic_speedup_vs_two"] = row["two_ms"] / row["atomic_ms"]
                row["fwd_bwd_atomic_speedup_vs_two"] = row["fwd_bwd_two_ms"] / row["fwd_bwd_atomic_ms"]
            rows.append(row)
            del q, k, v, do, out, lse, mine, ref, base
            torch.cuda.empty_cache()
    return rows


def _geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summary(rows) -> dict:
    """The done-bar's figures: geomean ratios over D128, N >= 2048, causal and not."""
    sel = [r for r in rows if r["dim"] == 128 and r["seq"] >= 2048 and r["heads"] == r["heads_kv"]]
    out = {
        "geomean_vs_cudnn_d128_n2048plus": _geomean([r.get("ratio_cudnn") for r in sel]),
        "geomean_vs_flash_d128_n2048plus": _geomean([r.get("ratio_flash") for r in sel]),
        "fwd_bwd_geomean_vs_cudnn_d128_n2048plus": _geomean([r.get("fwd_bwd_ratio_cudnn") for r in sel]),
        "fwd_bwd_geomean_vs_flash_d128_n2048plus": _geomean([r.get("fwd_bwd_ratio_flash") for r in sel]),
        "min_vs_cudnn_d128_n2048plus": min((r["ratio_cudnn"] for r in sel if r.get("ratio_cudnn")), default=None),
        "all_passed": all(r["passed"] for r in rows),
    }
    forms = [f for f in FORMS["both"] if any(f"{f}_ms" in r for r in rows)]
    for f in forms:
        out[f"{f}_geomean_vs_cudnn_d128_n2048plus"] = _geomean([r.get(f"{f}_ratio_cudnn") for r in sel])
        out[f"{f}_geomean_vs_flash_d128_n2048plus"] = _geomean([r.get(f"{f}_ratio_flash") for r in sel])
        out[f"{f}_all_passed"] = all(r[f"{f}_passed"] for r in rows if f"{f}_passed" in r)
    if len(forms) == 2:
        out["atomic_speedup_vs_two_geomean_all"] = _geomean([r.get("atomic_speedup_vs_two") for r in rows])
        out["atomic_speedup_vs_two_geomean_d128_n2048plus"] = _geomean(
            [r.get("atomic_speedup_vs_two") for r in sel])
    return out


def print_table(rows) -> None:
    f = lambda x, s: "-" if x is None else format(x, s)  # noqa: E731
    print(f"{'shape':<30} {'form':>6} {'ours TF/s':>9} {'cuDNN':>7} {'FA2':>7} {'x cuDNN':>8} {'x FA2':>6} "
          f"{'f+b x cuDNN':>11} {'f+b x FA2':>9}  rel err dq/dk/dv (ours | torch bf16)")
    for r in rows:
        errs = " ".join(f"{f(r.get(g + '_err'), '.1e')}|{f(r.get(g + '_err_torch'), '.1e')}" for g in ("dq", "dk", "dv"))
        print(f"{r['shape']:<30} {r.get('form', '-'):>6} {f(r.get('ours_tflops'), '9.1f')} {f(r.get('cudnn_tflops'), '7.1f')} "
              f"{f(r.get('flash_tflops'), '7.1f')} {f(r.get('ratio_cudnn'), '8.3f')} {f(r.get('ratio_flash'), '6.2f')} "
              f"{f(r.get('fwd_bwd_ratio_cudnn'), '11.3f')} {f(r.get('fwd_bwd_ratio_flash'), '9.2f')}  "
              f"{errs} {'ok' if r['passed'] else 'FAILED'}")
    if not any("atomic_speedup_vs_two" in r for r in rows):
        return
    print(f"\n{'shape':<30} {'form':>6} {'TF/s':>6} {'x cuDNN':>8} {'x FA2':>6} {'f+b ms':>8} {'x two':>6}  "
          "rel err dq/dk/dv")
    for r in rows:
        for fm in FORMS["both"]:
            errs = " ".join(f(r.get(f"{fm}_{g}_err"), ".1e") for g in ("dq", "dk", "dv"))
            speed = r["atomic_speedup_vs_two"] if fm == "atomic" else 1.0
            print(f"{r['shape']:<30} {fm:>6} {f(r.get(fm + '_tflops'), '6.1f')} "
                  f"{f(r.get(fm + '_ratio_cudnn'), '8.3f')} {f(r.get(fm + '_ratio_flash'), '6.2f')} "
                  f"{f(r.get('fwd_bwd_' + fm + '_ms'), '8.3f')} {speed:6.3f}  {errs} "
                  f"{'ok' if r.get(fm + '_passed') else 'FAILED'}")


def plot(rows, path, title) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.5))
    xs = range(len(rows))
    w = 0.27
    for j, (key, label) in enumerate((("ours_tflops", "kittens"), ("cudnn_tflops", "SDPA cuDNN"),
                                      ("flash_tflops", "SDPA flash (FA2)"))):
        ax.bar([x + (j - 1) * w for x in xs], [r.get(key) or 0 for r in rows], w, label=label)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([r["shape"].replace(" causal", "\ncausal") for r in rows], rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("backward TFLOP/s")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
