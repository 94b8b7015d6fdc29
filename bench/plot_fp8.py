#!/usr/bin/env python3
"""Plot `kittens bench gemm_fp8 --json` output as an SVG (no third-party packages): TFLOP/s of ours,
cuBLASLt (default accumulation) and cuBLASLt with fast accumulation per size, grouped bars, with the
ratio to the default written over each group (rows that did not run plot as empty groups). Usage:
plot_fp8.py RESULT.json OUT.svg"""
import json
import sys


def main(src: str, dst: str) -> None:
    rep = json.load(open(src))["report"]
    rows = rep["rows"]
    # Fast-accumulation figures exist for the rows that ran: matched by shape; null (NaN) plots as 0.
    fast = {(f["m"], f["n"], f["k"]): f for f in rep["fast_accum"]}
    num = lambda v: v if isinstance(v, (int, float)) else 0.0  # noqa: E731
    shape = lambda r: (r["m"], r["n"], r["k"])  # noqa: E731
    series = [
        ("kittens gemm_fp8 (lowered tile program)", "#c0392b", [num(r["ours_tflops"]) for r in rows]),
        ("cuBLASLt fp8, default accumulation", "#76b900", [num(r["cublas_tflops"]) for r in rows]),
        ("cuBLASLt fp8, fast accumulation", "#3c7a00",
         [num(fast.get(shape(r), {}).get("cublaslt_fast_tflops")) for r in rows]),
    ]
    top = max(max(v) for _, _, v in series) * 1.15 or 1.0
    w, h, left, bottom, plot_h = 760, 420, 70, 60, 300
    group_w = (w - left - 20) / len(rows)
    bar_w = group_w / (len(series) + 1)
    y = lambda v: bottom + plot_h - v / top * plot_h  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="13">FP8 GEMM on {rep["device"]}: '
           f'C = (sa·A)·(sb·B)ᵀ, e4m3 in, bf16 out</text>']
    for t in range(0, int(top), 250):
        out.append(f'<line x1="{left}" x2="{w - 20}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#ddd"/>'
                   f'<text x="{left - 6}" y="{y(t) + 4:.1f}" text-anchor="end">{t}</text>')
    out.append(f'<text x="16" y="{bottom + plot_h / 2}" transform="rotate(-90 16 {bottom + plot_h / 2})" '
               f'text-anchor="middle">TFLOP/s</text>')
    for i, r in enumerate(rows):
        x0 = left + i * group_w + bar_w / 2
        for j, (_, color, vals) in enumerate(series):
            v = vals[i]
            out.append(f'<rect x="{x0 + j * bar_w:.1f}" y="{y(v):.1f}" width="{bar_w * 0.9:.1f}" '
                       f'height="{bottom + plot_h - y(v):.1f}" fill="{color}"/>')
        mark = "" if r["passed"] else " (check failed)"
        out.append(f'<text x="{x0 + 1.5 * bar_w:.1f}" y="{y(max(s[2][i] for s in series)) - 6:.1f}" '
                   f'text-anchor="middle">{num(r["ratio"]):.2f}x{mark}</text>')
        m, n, k = shape(r)
        label = f"{m}³" if m == n == k else f"{m}x{n}x{k}"
        out.append(f'<text x="{x0 + 1.5 * bar_w:.1f}" y="{bottom + plot_h + 16}" text-anchor="middle">'
                   f'{label}</text>')
    for j, (name, color, _) in enumerate(series):
        ly = bottom + plot_h + 34 + 0 * j
        lx = left + j * 230
        out.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{lx + 14}" y="{ly}">{name}</text>')
    out.append("</svg>")
    open(dst, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
