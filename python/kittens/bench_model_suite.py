"""``python -m kittens.bench model --suite issue35 --out DIR``: issue 35's model figures from one command, into
one folder: per part (a model size, sequence and batch) ``<part>.json`` (device, date, commit, every step's
loss, time and peak memory, the inference figures), ``<part>.png`` (the loss curves, their gap to HF eager,
tokens/s and peak memory per arm), and ``README.md`` made from every ``*.json`` in the folder.

Parts of ``issue35`` (about 7 minutes on one H200; ``--parts`` runs some of them, e.g. one per command
where a command's time is limited, and the README then covers all the parts whose JSON is present):

* ``125m-2k``: the ~125M Llama at sequence 2048, batch 8, **200 steps** for the loss curves, the six
  training arms (HF eager with SDPA, HF + ``torch.compile``, kittens eager, kittens compiled, and both
  compiled with ``mode="reduce-overhead"``, CUDA graphs: the ``-ro`` arms) interleaved in one process
  (``--time-budget`` stops them all at the same step where a command's time is limited), and
  inference (prefill of 8 prompts of 1024 tokens, then 128 greedy tokens through ``model.generate``);
* ``1b-4k``: the ~1.2B Llama (Llama 3's 128256-token vocabulary, untied) at sequence 4096, batch 4,
  **16 steps** (6 untimed: compilation, allocator), one arm after another — throughput and peak memory
  only, since 200 steps at 1B would take the time of the whole suite several times over; the arms are
  HF eager and compiled, kittens eager and compiled, and ``kittens-nofl`` (kittens with transformers' own
  loss: the fused linear + cross-entropy's memory cut); inference with 4 prompts of 3968 tokens and 128
  new ones (4096 in all).

The loss curves are honest by construction: every arm starts from the same seeded initial weights
(fp32 master weights, ``torch.autocast(bfloat16)``), sees the same batches in the same order and the same
optimiser; their gap to HF eager is read against HF + ``torch.compile``'s gap (the same model and math,
PyTorch's own kernels rounding differently: the bf16 noise bound).

``tiny`` is the CPU smoke test's suite (tests/test_bench_model_suite.py): the ``micro`` size on the
interpreter, two arms, a few steps, the same code path.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from typing import List

INFER_125M = {"prompt": 1024, "new_tokens": 128, "gen_batch": 8, "repeats": 3}
SUITES = {
    "issue35": [
        # Interleaved (every arm resident, stepped in turn): the six arms of a 125M model fit one GPU many
        # times over, and the machine's drift then falls on all of them alike.
        {"name": "125m-2k", "size": "125m", "seq": 2048, "batch": 8, "steps": 200, "skip_timing": 20,
         "warmup": 20, "arms": "hf,hf-compile,kittens,kittens-compile,hf-compile-ro,kittens-compile-ro",
         "interleave": True, **INFER_125M},
        # One arm at a time (four ~1.2B models with AdamW state would not fit beside each other's
        # activations); kittens-nofl: transformers' loss, the fused loss's memory cut in the same run.
        {"name": "1b-4k", "size": "1b", "seq": 4096, "batch": 4, "steps": 16, "skip_timing": 6, "warmup": 4,
         "arms": "hf,kittens,hf-compile,kittens-compile,kittens-nofl", "interleave": False,
         "prompt": 3968, "new_tokens": 128, "gen_batch": 4, "repeats": 2},
    ],
    "tiny": [
        {"name": "micro", "size": "micro", "seq": 16, "batch": 2, "steps": 4, "skip_timing": 1, "warmup": 2,
         "arms": "hf,kittens", "interleave": True, "prompt": 8, "new_tokens": 4, "gen_batch": 2, "repeats": 1},
    ],
}


def _part_args(base: argparse.Namespace, part: dict) -> argparse.Namespace:
    args = argparse.Namespace(**vars(base))
    for k, v in part.items():
        if k != "name":
            setattr(args, k, v)
    args.no_train = False
    args.no_infer = getattr(base, "no_infer", False)
    # Each part's JSON is also written while it trains (an interleaved part's checkpoints: a run cut
    # short keeps its steps); the finished report replaces it.
    args.json = os.path.join(base.out, f"{part['name']}.json")
    args.suite_part = (base.suite, part["name"])
    args.lr = getattr(base, "lr", 3e-4)
    args.log_every = max(1, part["steps"] // 8)
    return args


def main(args: argparse.Namespace, device_cls, run) -> int:
    """Runs the parts of ``args.suite`` (those ``args.parts`` names, else all) into ``args.out``, each
    through ``run(torch, transformers, part_args, device_cls(torch, args.device))``: kittens.bench_model's
    ``run`` and ``Device``, which its ``main`` hands over for ``--suite``."""
    if args.suite not in SUITES:
        print(f"kittens.bench model: unknown suite {args.suite!r}; known: {', '.join(SUITES)}", file=sys.stderr)
        return 2
    parts = SUITES[args.suite]
    if args.parts:
        want = [p for p in args.parts.split(",") if p]
        unknown = [p for p in want if p not in [q["name"] for q in parts]]
        if unknown:
            print(f"kittens.bench model: suite {args.suite} has no part {unknown[0]!r}; its parts: "
                  f"{', '.join(q['name'] for q in parts)}", file=sys.stderr)
            return 2
        parts = [p for p in parts if p["name"] in want]
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"kittens.bench model needs torch and transformers (pip install './python[hf]'): {e}",
              file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("kittens.bench model: no CUDA device (torch sees none); this benchmark runs on a GPU only",
              file=sys.stderr)
        return 2
    dev = device_cls(torch, args.device)
    os.makedirs(args.out, exist_ok=True)
    ok = True
    for part in parts:
        print(f"== {args.suite}: part {part['name']}", flush=True)
        torch._dynamo.reset()  # each part compiles afresh (no guards left from the last part's model)
        report, part_ok = run(torch, transformers, _part_args(args, part), dev)
        report["suite"], report["part"] = args.suite, part["name"]
        ok = ok and part_ok
        with open(os.path.join(args.out, f"{part['name']}.json"), "w") as f:
            json.dump(report, f, indent=1)
        if any(v.get("ran") for v in report["training"].values()):
            plot_part(report, os.path.join(args.out, f"{part['name']}.png"))
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(readme(load(args.out), args.suite))
    print(f"wrote {args.out}/README.md")
    return 0 if ok else 1


def load(folder: str) -> List[dict]:
    """The part reports in ``folder``, in the suite's order where known."""
    reports = []
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path) as f:
            r = json.load(f)
        if r.get("what") == "model" and "part" in r:
            reports.append(r)
    order = {p["name"]: i for parts in SUITES.values() for i, p in enumerate(parts)}
    return sorted(reports, key=lambda r: order.get(r["part"], 99))


def plot_part(report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = {k: v for k, v in report["training"].items() if v.get("ran")}
    fig, axes = plt.subplots(2, 2, figsize=(13, 8))
    (ax, gx), (tx, mx) = axes
    for k, v in train.items():
        ax.plot(v["losses"], label=k, lw=1)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    cfg = report["config"]
    ax.set_title(f"Llama {cfg['size']} ({report['model']['params'] / 1e6:.0f}M), seq {cfg['seq']}, batch "
                 f"{cfg['batch']}: same init, same batches")
    ax.legend(fontsize=8)
    hf = train.get("hf")
    if hf:
        for k, v in train.items():
            if k != "hf":
                gx.plot([a - b for a, b in zip(v["losses"], hf["losses"])], label=f"{k} - hf", lw=1)
        gx.axhline(0, color="k", lw=0.5)
        gx.legend(fontsize=8)
    gx.set_xlabel("step")
    gx.set_ylabel("loss minus HF eager's (hf-compile: the bf16 noise)")
    names = list(train)
    tx.bar(names, [train[k]["tokens_per_s"] or 0 for k in names])
    tx.set_ylabel("training tokens/s")
    # Over all steps: a CUDA graph's replay allocates nothing, so the -ro arms' timed steps undercount.
    mx.bar(names, [train[k].get("peak_gib_all_steps") or train[k]["peak_gib"] or 0 for k in names])
    mx.set_ylabel("peak memory of a step, over all steps (GiB)")
    for axis in (tx, mx):
        axis.tick_params(axis="x", labelrotation=20, labelsize=8)
    mx.set_title(f"{report['device']}, {report['date'][:10]}, {report['commit'][:10]}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _f(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _steps_run(r: dict) -> str:
    """The steps the part's arms ran (fewer than asked where a time budget stopped them: said so)."""
    ran = [len(v["losses"]) for v in r["training"].values() if v.get("ran")]
    n = max(ran) if ran else 0
    asked = r["config"]["steps"]
    return str(asked) if n == asked or not ran else f"{n} of {asked} asked"


def readme(reports: List[dict], suite: str) -> str:
    """The folder's README, every figure taken from the part reports."""
    lines = [f"# Model benchmark: `python -m kittens.bench model --suite {suite}`", "",
             "Generated from the JSON files beside it (kittens/bench_model_suite.py). Method: " +
             "same seeded initial weights, same batches, fp32 master weights with `torch.autocast(bfloat16)`, "
             "AdamW; tokens/s over the steps after the untimed ones; peak = `torch.cuda.max_memory_allocated` "
             "per step (reset before each), the largest over the timed steps. The loss curves' gap to HF "
             "eager is read against HF + torch.compile's (the bf16 noise bound: same math, other kernels). "
             "step ms / host ms: medians over the timed steps of the whole step and of the host's time to "
             "enqueue it (nothing waited on; host ms near step ms: the step is bound by the host's per-op "
             "cost). Runs before the host figures (no such columns in their JSON) show '-'. Interleaved parts: "
             "every arm resident, stepped in turn on the same batch; an arm's peak is its own (its resident "
             "memory plus the step's rise, the others' left out). A CUDA graph's replay allocates nothing, so "
             "the `-ro` arms' timed-step peak undercounts: read their 'all steps' peak (the recording step "
             "included).", ""]
    for r in reports:
        c, m = r["config"], r["model"]
        lines += [f"## {r['part']}: Llama {c['size']} ({m['params'] / 1e6:.0f}M parameters), sequence {c['seq']}, "
                  f"batch {c['batch']}, {_steps_run(r)} steps ({c['skip_timing']} untimed)"
                  f"{', interleaved' if c.get('interleave') else ''}", "",
                  f"`python -m kittens.bench model --suite {r['suite']} --parts {r['part']}`", "",
                  f"{r['device']}, {r['date']}, commit `{r['commit']}`, torch {r['torch']}, transformers "
                  f"{r['transformers']}. Plot: [{r['part']}.png]({r['part']}.png).", "",
                  "| arm | tokens/s | vs hf | peak GiB | peak GiB, all steps | step ms | host ms | "
                  "mean loss, last 20 steps | loss gap to hf (mean / max) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        tr = r["training"]
        base = tr.get("hf", {}).get("tokens_per_s") if tr.get("hf", {}).get("ran") else None
        for k, v in tr.items():
            if not v.get("ran"):
                lines.append(f"| {k} | failed: {v.get('error', '')[:120]} | | | | | | | |")
                continue
            g = r.get("curves", {}).get(k)
            gap = "-" if g is None else f"{g['mean_abs_gap']:.4f} / {g['max_abs_gap']:.4f}"
            vs = v["tokens_per_s"] / base if base and v["tokens_per_s"] else None
            lines.append(f"| {k} | {_f(v['tokens_per_s'], ',.0f')} | {_f(vs, '.3f')} | {_f(v['peak_gib'], '.1f')} | "
                         f"{_f(v.get('peak_gib_all_steps'), '.1f')} | "
                         f"{_f(v.get('step_ms'), '.1f')} | {_f(v.get('host_ms'), '.1f')} | "
                         f"{_f(v.get('final_loss'), '.4f')} | {gap} |")
        inf = r.get("inference", {})
        if inf:
            lines += ["", f"Inference (bf16, {c['gen_batch']} prompts of {c['prompt']} tokens, "
                          f"{c['new_tokens']} greedy tokens through `model.generate`):", "",
                      "| arm | prefill tokens/s | decode tokens/s |", "|---|---:|---:|"]
            for k, v in inf.items():
                if v.get("ran"):
                    lines.append(f"| {k} | {v['prefill_tokens_per_s']:,.0f} | {v['decode_tokens_per_s']:,.0f} |")
                else:
                    lines.append(f"| {k} | failed: {v.get('error', '')[:120]} | |")
        goals = r.get("goals", {})
        if goals:
            lines += ["", "Against the issue's goals:", ""]
            lines += [f"- {k}: {_f(v, '.3f')}" for k, v in goals.items()]
        lines.append("")
    return "\n".join(lines)
