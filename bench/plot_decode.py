#!/usr/bin/env python3
"""Plot `kittens bench attn_fwd --checks decode --json` results as an SVG (no third-party packages): per
decoding shape, the unsplit kernel's time and the key split's (with its merge), and the K/V bytes per
second each reaches. Usage: plot_decode.py OUT.svg decode.json"""
import json
import sys


def kv_bytes(case: dict) -> float:
    s = case["shape"]
    return 2.0 * s["batch"] * s["heads_kv"] * case["seq_kv"] * s["dim"] * 2  # K and V, bf16


def main(dst: str, src: str) -> None:
    rep = json.load(open(src))
    rows = []
    for r in rep["rows"]:
        c, s = r["case"], r["case"]["shape"]
        label = (f'B{s["batch"]} H{s["heads"]}/{s["heads_kv"]} D{s["dim"]}', f'Nq {s["seq"]}, Nkv {c["seq_kv"]}, mask {c["causal"]}')
        bars = [("unsplit", r["unsplit"]["ms"])]
        if r.get("split"):
            bars.append((f'split {r["split"]["kv_splits"]}', r["split"]["ms"]))
        rows.append((label, bars, kv_bytes(c)))
    top = max(ms for _, bars, _ in rows for _, ms in bars) * 1.25
    w, h, left, bottom, plot_h = 760, 400, 60, 40, 280
    group_w = (w - left - 20) / len(rows)
    bar_w = group_w / 3
    y = lambda v: bottom + plot_h - v / top * plot_h  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="10">',
           f'<text x="{left}" y="20" font-size="13">attn_fwd decoding on {rep.get("device", "the H100")}: unsplit vs key split '
           f'(commit {rep["commit"][:7]}, {rep["date"][:10]})</text>',
           f'<line x1="{left}" y1="{y(0)}" x2="{w - 20}" y2="{y(0)}" stroke="black"/>',
           f'<text x="10" y="{bottom + 10}">ms</text>']
    for i, (label, bars, nbytes) in enumerate(rows):
        x0 = left + i * group_w + bar_w / 2
        for j, (name, ms) in enumerate(bars):
            x = x0 + j * bar_w
            color = "#7f8c8d" if j == 0 else "#c0392b"
            out.append(f'<rect x="{x:.1f}" y="{y(ms):.1f}" width="{bar_w * 0.9:.1f}" height="{y(0) - y(ms):.1f}" fill="{color}"/>')
            out.append(f'<text x="{x:.1f}" y="{y(ms) - 14:.1f}">{name}</text>')
            out.append(f'<text x="{x:.1f}" y="{y(ms) - 3:.1f}">{ms:.3f} ms, {nbytes / ms / 1e9:.2f} TB/s</text>')
        for k, line in enumerate(label):
            out.append(f'<text x="{x0:.1f}" y="{y(0) + 16 + 13 * k:.1f}">{line}</text>')
    out.append("</svg>")
    open(dst, "w").write("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
