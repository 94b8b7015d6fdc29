"""``python -m kittens.train_demo``: a small GPT trained twice on the same data in the same order, once
from ``torch.nn`` modules with ``F.scaled_dot_product_attention`` and once from :mod:`kittens.nn`
(``Linear`` on the GEMM kernel, ``LayerNorm`` on the layernorm kernel, :func:`kittens.nn.attention` on
the attention kernels; the same parameters and state-dict keys); the two loss curves in one plot,
tokens/s of each, and whether the final losses agree within 1%. The default width (768, 12 heads of
64) is one the layernorm kernel takes (768 to 8192); a width it does not take runs PyTorch's layernorm
with a warning saying so.

The text is the repository's own: ``--text FILE``, else README.md and docs/*.md of the checkout this
package sits in, else the README, docs and Rust sources compiled into the extension module when the
wheel was built — so it runs offline anywhere. Tokens are bytes (vocabulary 256).

The kittens arm needs ``kittens.attention`` forward on the GPU and its backward kernel; until they exist
the arm is reported as not run, with the reason, and the SDPA arm runs alone.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import List, Optional, Tuple


def load_text(path: Optional[str]) -> Tuple[bytes, str]:
    if path:
        with open(path, "rb") as f:
            return f.read(), path
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(os.path.join(here, "..", ".."))
    docs = os.path.join(root, "docs")
    if os.path.isfile(os.path.join(root, "README.md")) and os.path.isdir(docs):
        parts = [os.path.join(root, "README.md")] + sorted(
            os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
        crates = os.path.join(root, "crates")
        for dirpath, _, files in sorted(os.walk(crates)) if os.path.isdir(crates) else []:
            parts += sorted(os.path.join(dirpath, f) for f in files if f.endswith(".rs"))
        text = b"".join(open(p, "rb").read() for p in parts)
        return text, f"{len(parts)} files of the checkout at {root}"
    from . import _kittens

    return bytes(_kittens.corpus()), "the README, docs and sources compiled into the wheel"


def build_model(torch, attention, vocab, layers, d, heads, seq, modules=None):
    """The GPT, its Linear and LayerNorm from ``modules`` (``torch.nn`` by default, or ``kittens.nn``)."""
    nn, F = torch.nn, torch.nn.functional
    mods = modules if modules is not None else nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = mods.LayerNorm(d), mods.LayerNorm(d)
            # Separate projections so q, k, v are each a dense (B, N, H, D) buffer, read in place.
            self.q, self.k, self.v = (mods.Linear(d, d, bias=False) for _ in range(3))
            self.o = mods.Linear(d, d, bias=False)
            self.up, self.down = mods.Linear(d, 4 * d, bias=False), mods.Linear(4 * d, d, bias=False)

        def forward(self, x):
            b, n, _ = x.shape
            h = self.ln1(x)
            q, k, v = (p(h).view(b, n, heads, d // heads).transpose(1, 2) for p in (self.q, self.k, self.v))
            a = attention(q, k, v)  # (B, H, N, D), causal
            x = x + self.o(a.transpose(1, 2).reshape(b, n, d))
            return x + self.down(F.gelu(self.up(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln = mods.LayerNorm(d)
            self.head = mods.Linear(d, vocab, bias=False)

        def forward(self, idx, targets, pos=None):
            # pos: the tokens' positions in the sequence (a context-parallel shard holds some of them).
            n = idx.shape[1]
            x = self.tok(idx) + self.pos(torch.arange(n, device=idx.device) if pos is None else pos)
            for blk in self.blocks:
                x = blk(x)
            logits = self.head(self.ln(x))
            return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))

    return GPT()


def arms(torch):
    """Each arm's attention function and module namespace."""
    import kittens.nn as knn

    F = torch.nn.functional
    return {
        "sdpa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), torch.nn),
        "kittens": (lambda q, k, v: knn.attention(q, k, v, causal=True), knn),
    }


def probe_kittens(torch, device) -> Optional[str]:
    """Why the kittens arm cannot train here (None when it can): one causal forward and backward."""
    import kittens

    q, k, v = (torch.randn(1, 64, 2, 64, device=device, dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
               for _ in range(3))
    try:
        kittens.attention(q, k, v, causal=True).float().sum().backward()
    except (RuntimeError, NotImplementedError) as e:
        return f"{type(e).__name__}: {e}"
    return None


def train(torch, arm, fns, data, args, device) -> dict:
    torch.manual_seed(args.seed)
    attention, modules = fns
    model = build_model(torch, attention, 256, args.layers, args.d, args.heads, args.seq, modules).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(args.seed)  # the same batches in the same order for every arm
    losses: List[float] = []
    n_tok = len(data) - args.seq - 1
    t_start, tokens = None, 0
    for step in range(args.steps):
        starts = torch.randint(0, n_tok, (args.batch,), generator=gen)
        x = torch.stack([data[s: s + args.seq] for s in starts]).to(device, non_blocking=True)
        y = torch.stack([data[s + 1: s + 1 + args.seq] for s in starts]).to(device, non_blocking=True)
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step == args.skip_timing - 1:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t_start = time.perf_counter()
        elif step >= args.skip_timing:
            tokens += args.batch * args.seq
        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"  {arm} step {step:4d}  loss {losses[-1]:.4f}", flush=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - t_start if t_start is not None else float("nan")
    tail = losses[-min(20, len(losses)):]
    return {"ran": True, "losses": losses, "final_loss": sum(tail) / len(tail), "final_loss_steps": len(tail),
            "tokens_per_s": tokens / secs if tokens and secs > 0 else None}


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kittens.train_demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--d-model", dest="d", type=int, default=768, help="model width (as kittens.train_dist)")
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-timing", type=int, default=10, help="steps before tokens/s is measured")
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--text", help="train on this file instead of the repository's own text")
    p.add_argument("--arms", default="sdpa,kittens")
    p.add_argument("--device", default="cuda", help="cuda, or cpu for a tiny smoke run of the script")
    p.add_argument("--json", help="write losses and tokens/s here")
    p.add_argument("--plot", help="write the loss curves (PNG) here")
    args = p.parse_args(argv)

    try:
        import torch
    except ImportError:
        print("kittens.train_demo needs torch", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("kittens.train_demo: no CUDA device (run with --device cpu and a tiny model for a smoke test)",
              file=sys.stderr)
        return 2
    device = torch.device(args.device)
    text, source = load_text(args.text)
    if len(text) < args.seq + 2:
        print(f"kittens.train_demo: {len(text)} bytes of text, fewer than seq + 2", file=sys.stderr)
        return 2
    data = torch.frombuffer(bytearray(text), dtype=torch.uint8).long()
    print(f"text: {len(text)} bytes from {source}; model: {args.layers} layers, d {args.d}, {args.heads} heads, "
          f"seq {args.seq}, batch {args.batch}, {args.steps} steps, bf16 autocast on {device}")
    fns = arms(torch)
    results = {}
    for arm in [a for a in args.arms.split(",") if a]:
        if arm not in fns:
            print(f"unknown arm {arm!r}; known: {', '.join(fns)}", file=sys.stderr)
            return 2
        if arm == "kittens":
            why = probe_kittens(torch, device)
            if why:
                print(f"  kittens arm NOT RUN: it needs kittens.attention forward and backward on {device.type} "
                      f"({why})")
                results[arm] = {"ran": False, "reason": why}
                continue
        print(f"arm {arm}:")
        results[arm] = train(torch, arm, fns[arm], data, args, device)

    ran = {k: v for k, v in results.items() if v.get("ran")}
    for k, v in ran.items():
        tps = v["tokens_per_s"]
        print(f"{k:>8}: final loss {v['final_loss']:.4f} (mean of the last {v['final_loss_steps']} steps), "
              f"{'-' if tps is None else f'{tps:,.0f}'} tokens/s")
    verdict = None
    if "sdpa" in ran and "kittens" in ran:
        a, b = ran["sdpa"]["final_loss"], ran["kittens"]["final_loss"]
        verdict = abs(a - b) / a <= 0.01
        print(f"final losses within 1%: {'yes' if verdict else 'NO'} ({abs(a - b) / a:.2%})")
    report = {"config": {k: v for k, v in vars(args).items() if k not in ("json", "plot")},
              "text": source, "text_bytes": len(text), "torch": torch.__version__,
              "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
              "arms": results, "final_within_1pct": verdict}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    if args.plot and ran:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 4.5))
        for k, v in ran.items():
            ax.plot(v["losses"], label=f"{k} ({v['final_loss']:.3f})")
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (nats/byte)")
        ax.set_title(f"GPT {args.layers}x{args.d}, seq {args.seq}: torch.nn + SDPA vs kittens.nn")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
    return 0 if verdict is not False else 1


if __name__ == "__main__":
    sys.exit(main())
