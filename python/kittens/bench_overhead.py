"""``python -m kittens.bench overhead [--json F] [--plot F.png]``: what a user's loop of calls costs, host
time included, ours against PyTorch's own op in the same process.

Each op is called in a loop of ``--calls`` calls (at least 200) with one ``torch.cuda.synchronize()`` at the
end; the wall clock of the loop over the calls is the per-call time. At these sizes the GPU work is a few
microseconds, so the figure is mostly what the host spends per call (argument checks, dispatch, the
launch). The loops alternate ours, theirs, ours, ... for ``--rounds`` rounds after a warm-up round (the
first call compiles or loads our kernel), and each side's median round is reported; the ratio is ours over
theirs (lower is better; 1.0 is PyTorch's per-call cost).
"""

from __future__ import annotations

import time
from typing import Callable, Dict, List, Tuple


def _cases(torch, kittens) -> List[Tuple[str, Callable[[], object], Callable[[], object]]]:
    F = torch.nn.functional
    dev, bf = "cuda", torch.bfloat16

    def rnd(*shape):
        return torch.randn(*shape, device=dev, dtype=bf)

    cases = []
    for n in (256, 1024):
        a, w = rnd(n, n), rnd(n, n)
        cases.append((f"matmul {n}^3", lambda a=a, w=w: kittens.matmul(a, w.T),
                      lambda a=a, w=w: torch.matmul(a, w.T)))
    q, k, v = rnd(4, 16, 512, 64), rnd(4, 16, 512, 64), rnd(4, 16, 512, 64)
    cases.append(("attention B4 H16 N512 D64 causal",
                  lambda: kittens.attention(q, k, v, causal=True),
                  lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)))
    qd, kd, vd = rnd(1, 32, 1, 128), rnd(1, 32, 4096, 128), rnd(1, 32, 4096, 128)
    cases.append(("decode B1 H32 N1 Nkv4096 D128",
                  lambda: kittens.attention(qd, kd, vd),
                  lambda: F.scaled_dot_product_attention(qd, kd, vd)))
    x, res = rnd(8, 1024, 2048), rnd(8, 1024, 2048)
    wt, bs = rnd(2048), rnd(2048)

    def torch_ln():
        h = res + F.dropout(x, 0.1)
        return F.layer_norm(h, (2048,), wt, bs), h

    cases.append(("layernorm 8x1024x2048 p=0.1",
                  lambda: kittens.layernorm(x, res, wt, bs, p=0.1, seed=1),
                  torch_ln))
    qr = rnd(4, 16, 512, 64)
    cos, sin = rnd(512, 32), rnd(512, 32)
    c2, s2 = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)

    def torch_rope():
        x1, x2 = qr[..., :32], qr[..., 32:]
        return qr * c2 + torch.cat([-x2, x1], -1) * s2

    cases.append(("rotary 4x16x512x64",
                  lambda: kittens.rotary(qr, cos, sin),
                  torch_rope))
    return cases


def _loop(torch, fn, calls: int) -> float:
    """Microseconds per call of a loop of `calls` calls with one synchronisation at the end."""
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / calls * 1e6


def _median(xs: List[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def bench_overhead(torch, kittens, calls: int, rounds: int) -> List[Dict]:
    rows = []
    for name, ours, theirs in _cases(torch, kittens):
        row: Dict = {"op": name, "calls": calls, "rounds": rounds}
        try:
            _loop(torch, ours, 3)  # compile or load, then warm
            _loop(torch, theirs, 3)
            _loop(torch, ours, calls)
            _loop(torch, theirs, calls)
            mine, base = [], []
            for _ in range(rounds):
                mine.append(_loop(torch, ours, calls))
                base.append(_loop(torch, theirs, calls))
            row.update({"ours_us": _median(mine), "torch_us": _median(base),
                        "ours_rounds_us": mine, "torch_rounds_us": base})
            row["ratio"] = row["ours_us"] / row["torch_us"]
        except Exception as e:  # one failing op must not hide the others' figures
            row["error"] = f"{type(e).__name__}: {e}"
        rows.append(row)
    return rows


def print_table(rows: List[Dict]) -> None:
    print(f"{'op':<34} {'kittens us/call':>16} {'torch us/call':>14} {'ratio':>7}")
    for r in rows:
        if "error" in r:
            print(f"{r['op']:<34} ERROR {r['error']}")
            continue
        print(f"{r['op']:<34} {r['ours_us']:>16.1f} {r['torch_us']:>14.1f} {r['ratio']:>7.2f}")


def plot(rows: List[Dict], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if "ratio" in r]
    fig, ax = plt.subplots(figsize=(9, 4))
    names = [r["op"] for r in ok]
    xs = range(len(ok))
    ax.bar([x - 0.2 for x in xs], [r["ours_us"] for r in ok], width=0.4, label="kittens")
    ax.bar([x + 0.2 for x in xs], [r["torch_us"] for r in ok], width=0.4, label="torch")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("µs per call (loop, one sync)")
    for x, r in zip(xs, ok):
        ax.text(x, max(r["ours_us"], r["torch_us"]), f"{r['ratio']:.2f}x", ha="center", va="bottom", fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
