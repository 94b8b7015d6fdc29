#!/usr/bin/env python3
"""Plot `python -m kittens.bench attn --json` results as an SVG (no third-party packages): per shape,
TFLOP/s of ours and of SDPA with each backend found in the given files (grouped bars), with ours/SDPA
written over each group. Usage: plot_attn.py OUT.svg RESULT.json [RESULT.json ...]"""
import json
import sys


def main(dst: str, srcs: list) -> None:
    # shape label -> {"ours": [tflops...], backend: tflops}
    groups: dict = {}
    device = ""
    for src in srcs:
        rep = json.load(open(src))
        device = rep["device"]
        backend = rep.get("backend") or "default"
        for r in rep["rows"]:
            label = r["shape"] + (" causal" if r["causal"] else "")
            g = groups.setdefault(label, {"ours": []})
            g["ours"].append(r["ours_tflops"])
            g[backend] = r["torch_tflops"]
    backends = sorted({b for g in groups.values() for b in g if b != "ours"})
    colors = {"ours": "#c0392b", "cudnn": "#76b900", "flash": "#2e86c1", "default": "#7f8c8d"}
    labels = list(groups)
    top = max(max(max(g["ours"]), *(g.get(b, 0.0) for b in backends)) for g in groups.values()) * 1.15
    w, h, left, bottom, plot_h = max(760, 60 * len(labels) + 90), 470, 60, 50, 300
    group_w = (w - left - 20) / len(labels)
    bar_w = group_w / (len(backends) + 2)
    y = lambda v: bottom + plot_h - v / top * plot_h  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="10">',
           f'<text x="{w / 2}" y="18" text-anchor="middle" font-size="13">attention forward on {device}: '
           f'kittens.attention vs F.scaled_dot_product_attention, same process (TFLOP/s; ratio over cuDNN above)</text>']
    for t in range(0, int(top) + 1, 100):
        out.append(f'<line x1="{left}" x2="{w - 20}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#ddd"/>'
                   f'<text x="{left - 5}" y="{y(t) + 3:.1f}" text-anchor="end">{t}</text>')
    for i, label in enumerate(labels):
        g = groups[label]
        x0 = left + i * group_w + bar_w / 2
        ours = sum(g["ours"]) / len(g["ours"])
        for j, (name, v) in enumerate([("ours", ours)] + [(b, g.get(b, 0.0)) for b in backends]):
            out.append(f'<rect x="{x0 + j * bar_w:.1f}" y="{y(v):.1f}" width="{bar_w * 0.9:.1f}" '
                       f'height="{bottom + plot_h - y(v):.1f}" fill="{colors.get(name, "#999")}"/>')
        if g.get("cudnn"):
            out.append(f'<text x="{x0 + bar_w:.1f}" y="{y(max(ours, g["cudnn"])) - 4:.1f}" '
                       f'text-anchor="middle">{ours / g["cudnn"]:.2f}</text>')
        cx = left + (i + 0.5) * group_w
        out.append(f'<text transform="translate({cx:.1f},{bottom + plot_h + 8}) rotate(40)">{label}</text>')
    for j, name in enumerate(["ours"] + backends):
        out.append(f'<rect x="{left + j * 150}" y="{h - 18}" width="10" height="10" fill="{colors.get(name, "#999")}"/>'
                   f'<text x="{left + j * 150 + 14}" y="{h - 9}">{"kittens" if name == "ours" else "SDPA " + name}</text>')
    out.append("</svg>")
    open(dst, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
