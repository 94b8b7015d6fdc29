#!/usr/bin/env python3
"""Plot `kittens bench gemm --json` output: TFLOP/s against size for gemm_bf16 and cuBLAS, with the ratio
of the two (measured in the same run) written over each size. Usage: plot_gemm.py RESULT.json OUT.png"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src: str, dst: str) -> None:
    doc = json.load(open(src))
    rep = doc["report"]
    rows = rep["rows"]
    sizes = [r["m"] for r in rows]
    ours = [r["ours_tflops"] for r in rows]
    ref = [r["cublas_tflops"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    ax.plot(sizes, ref, "o-", color="#76b900", label="cuBLAS (cublasGemmEx, bf16, fp32 accumulate)")
    ax.plot(sizes, ours, "s-", color="#c0392b", label=f"kittens gemm_bf16 ({rep['kernel']})")
    for s, o, r, row in zip(sizes, ours, ref, rows):
        mark = "" if row["passed"] else " FAILED"
        ax.annotate(f"{o / r:.2f}x{mark}", (s, max(o, r)), textcoords="offset points", xytext=(0, 8),
                    ha="center", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(s) for s in sizes])
    ax.set_xlabel("M = N = K")
    ax.set_ylabel("TFLOP/s (median of CUDA-event timings)")
    ax.set_ylim(0, max(ours + ref) * 1.18)
    ax.grid(alpha=0.3)
    ax.set_title(f"BF16 GEMM C = A·Bᵀ on {rep['device']}\n{doc['date']}, commit {doc['commit'][:10]}", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(dst)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
