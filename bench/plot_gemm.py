#!/usr/bin/env python3
"""Plot `kittens bench gemm_bf16 --json` output: per timed shape, the ratio of gemm_bf16's throughput to
cuBLAS's (measured in the same run) for the block the shape-aware configuration chose, with the TFLOP/s of
both beside it, the geometric mean in the title, and 1.0 and 0.85 marked. With several blocks per shape
(`--tiles all`) every block is drawn as a dot, the chosen one as the bar. Usage: plot_gemm.py RESULT.json OUT.png"""
import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src: str, dst: str) -> None:
    doc = json.load(open(src))
    rep = doc["report"]
    rows = rep["rows"]
    shapes = []
    for r in rows:
        s = (r["m"], r["n"], r["k"])
        if s not in shapes:
            shapes.append(s)
    chosen = {(r["m"], r["n"], r["k"]): r for r in rows if r["chosen"]}
    fig, ax = plt.subplots(figsize=(max(7, 0.32 * len(shapes) + 2), 4.8), dpi=120)
    xs = range(len(shapes))
    ratios = [chosen[s]["ratio"] if s in chosen and chosen[s]["ratio"] is not None else math.nan for s in shapes]
    colors = ["#c0392b" if (s in chosen and not chosen[s]["passed"]) else "#2e86c1" for s in shapes]
    ax.bar(xs, [0 if math.isnan(x) else x for x in ratios], color=colors, width=0.7, label="chosen block")
    tiles = sorted({r["tile"] for r in rows if r["tile"]})
    if len(tiles) > 1:
        marks = "o^sdvx"
        for j, t in enumerate(tiles):
            pts = [(shapes.index((r["m"], r["n"], r["k"])), r["ratio"]) for r in rows
                   if r["tile"] == t and r["ratio"] is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marks[j % len(marks)], ms=4, label=t, alpha=0.8)
    ax.axhline(1.0, color="#555", lw=0.8)
    ax.axhline(0.85, color="#c0392b", lw=0.8, ls="--")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([f"{m}x{n}x{k}" for m, n, k in shapes], rotation=90, fontsize=6)
    ax.set_ylabel("ours / cuBLAS (TFLOP/s, same run)")
    g, lo = rep["summary"]["geomean_ratio"], rep["summary"]["min_ratio"]
    gm = f"geometric mean {g:.3f}, lowest {lo:.3f}" if g is not None else "no timed rows"
    ax.set_title(f"BF16 GEMM C = A·Bᵀ on {rep['device']}: {gm}\n"
                 f"{doc['date']}, commit {doc['commit'][:10]}", fontsize=9)
    ax.set_ylim(0, max([x for x in ratios if not math.isnan(x)] + [1.2]) * 1.1)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(dst)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
