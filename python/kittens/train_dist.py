"""``torchrun --nproc_per_node=R -m kittens.train_dist --mode ddp|cp``: the training demo's GPT
(:mod:`kittens.train_demo`) on several GPUs, and ``--mode single`` on one for the comparison.

* ``ddp``: data parallel. Every rank draws the same global batch of ``batch × R`` sequences (one random
  stream for all) and trains on its ``batch`` rows under ``DistributedDataParallel``; ``single`` with
  ``--batch`` set to the global batch sees exactly the same data in the same order.
* ``cp``: context parallel. Every rank takes the same ``batch`` sequences and holds its shard of the
  positions (:func:`kittens.distributed.shard`, two mirrored chunks per rank), attention is
  :func:`kittens.distributed.ring_attention`, the position embedding reads each token's global position,
  and the gradients are averaged across ranks as in DDP: the mean of the ranks' losses over their
  equal shards is the loss over the whole sequence, so the run follows the single-GPU run at the same
  sequence length.

Writes the loss curve, tokens/s (all ranks together), model FLOP/s per GPU and the configuration to
``--json``; ``--plot F.png a.json b.json ...`` draws runs' loss curves together and prints scaling
efficiency.

``--preset large`` is a GPT (24 layers, d 2048, 16 heads of D 128) whose activations at sequence 65536
outgrow one 141 GB GPU, so that context parallelism shows capacity, not only speed. A single-GPU run that
runs out of memory is recorded, not raised: the JSON then holds ``"fits": false`` and the allocator's
message (the amount it tried to allocate, the memory in use), measured rather than assumed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import List, Optional


def _attention(torch, mode: str, impl: str, cpu: bool):
    F = torch.nn.functional
    if mode == "cp":
        from kittens.distributed import KITTENS, REFERENCE, ring_attention

        kernels = REFERENCE if cpu else KITTENS
        return lambda q, k, v: ring_attention(q, k, v, causal=True, kernels=kernels)
    if impl == "sdpa":
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    import kittens

    return lambda q, k, v: kittens.attention(q, k, v, causal=True)


def _profiler(torch, cpu: bool):
    acts = [torch.profiler.ProfilerActivity.CPU] + ([] if cpu else [torch.profiler.ProfilerActivity.CUDA])
    return torch.profiler.profile(activities=acts)


def _profile_table(prof, steps: int, cpu: bool) -> str:
    """The profiled steps' operators and kernels by total device time (CPU time on the CPU)."""
    avg = prof.key_averages()
    for key in ("cpu_time_total",) if cpu else ("device_time_total", "cuda_time_total", "cpu_time_total"):
        try:
            table = avg.table(sort_by=key, row_limit=40, max_name_column_width=70)
            return f"{steps} steps, sorted by {key}\n{table}"
        except (AttributeError, KeyError, ValueError):
            continue
    return str(avg)


PRESETS = {"large": {"layers": 24, "d": 2048, "heads": 16}}


def model_flops_per_step(layers: int, d: int, vocab: int, rows: int, seq: int) -> float:
    """Model FLOPs of one training step (forward + backward), counting matmuls only: 6 per weight per
    token for the block and head weights (12·d² per layer, d·vocab for the head), and the causal
    attention's 2·N²·d per layer and sequence forward (QKᵀ and PV over half the square) times 3.5 with
    its backward (five products against two)."""
    dense = 6.0 * (12 * d * d * layers + d * vocab) * rows * seq
    attn = 3.5 * 2.0 * seq * seq * d * layers * rows
    return dense + attn


def run(args) -> dict:
    try:
        return _run(args)
    except Exception as e:  # torch.OutOfMemoryError, reported as a measurement (single GPU only)
        import torch

        if args.mode != "single" or not isinstance(e, torch.OutOfMemoryError):
            raise
        dev = torch.device("cuda", 0)
        msg = " ".join(str(e).split())
        print(f"single x1: does not fit on one GPU: {msg}", flush=True)
        return {
            "mode": "single", "world": 1, "attn": args.attn, "fits": False, "oom": msg,
            "config": {k: v for k, v in vars(args).items() if k not in ("json", "plot")},
            "device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
            "device_total_gib": torch.cuda.get_device_properties(dev).total_memory / 2**30,
            "max_memory_gib": torch.cuda.max_memory_allocated(dev) / 2**30,
            "losses": [], "final_loss": None, "tokens_per_s": None, "step_s": None,
        }


def _run(args) -> dict:
    import torch
    import torch.distributed as dist

    from .train_demo import build_model, load_text

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.mode != "single" and world < 2:
        raise SystemExit(f"--mode {args.mode} runs under torchrun with 2 or more processes")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cpu = args.device == "cpu"  # a smoke run of the script: float32, gloo, reference ring kernels
    if cpu:
        device = torch.device("cpu")
    else:
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    if world > 1:
        dist.init_process_group("gloo") if cpu else dist.init_process_group("nccl", device_id=device)
    rank = dist.get_rank() if world > 1 else 0

    sync = (lambda: None) if cpu else torch.cuda.synchronize
    text, source = load_text(args.text)
    data = torch.frombuffer(bytearray(text), dtype=torch.uint8).long()
    torch.manual_seed(args.seed)  # seeds every device's generator too: the ranks draw the same weights
    with torch.device(device if args.init_on_device else "cpu"):
        model = build_model(torch, _attention(torch, args.mode, args.attn, cpu), 256, args.layers, args.d,
                            args.heads, args.seq)
    model = model.to(device)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=None if cpu else [local])
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(args.seed)
    rows = args.batch * world if args.mode == "ddp" else args.batch  # sequences drawn per step
    pos = None
    if args.mode == "cp":
        from kittens.distributed import positions, shard

        pos = positions(args.seq, causal=True, device=device)
    tokens_per_step = rows * args.seq
    n_tok = len(data) - args.seq - 1
    losses: List[float] = []
    t_start, timed_steps, secs, prof = None, 0, float("nan"), None
    for step in range(args.steps + args.profile_steps):
        if step == args.steps:  # timing ends; the extra steps run under the profiler
            sync()
            secs = time.perf_counter() - t_start if t_start is not None else float("nan")
            prof = _profiler(torch, cpu)
            prof.start()
        starts = torch.randint(0, n_tok, (rows,), generator=gen)
        x = torch.stack([data[s: s + args.seq] for s in starts])
        y = torch.stack([data[s + 1: s + 1 + args.seq] for s in starts])
        if args.mode == "ddp":
            x, y = x[rank * args.batch:(rank + 1) * args.batch], y[rank * args.batch:(rank + 1) * args.batch]
        elif args.mode == "cp":
            x, y = shard(x, causal=True, dim=1), shard(y, causal=True, dim=1)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=not cpu):
            loss = model(x, y, pos) if pos is not None else model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if prof is not None:
            continue
        shown = loss.detach()
        if world > 1:
            dist.all_reduce(shown, op=dist.ReduceOp.AVG)
        losses.append(shown.item())
        if step == args.skip_timing - 1:
            sync()
            t_start = time.perf_counter()
        elif step >= args.skip_timing:
            timed_steps += 1
        if rank == 0 and (step % args.log_every == 0 or step == args.steps - 1):
            print(f"  {args.mode} step {step:4d}  loss {losses[-1]:.4f}", flush=True)
    sync()
    if prof is None:
        secs = time.perf_counter() - t_start if t_start is not None else float("nan")
    else:
        prof.stop()
        if rank == 0 and args.json:
            with open(args.json + ".prof.txt", "w") as f:
                f.write(_profile_table(prof, args.profile_steps, cpu))
    tail = losses[-min(20, len(losses)):]
    flops = model_flops_per_step(args.layers, args.d, 256, rows, args.seq)
    step_s = secs / timed_steps if timed_steps else None
    report = {
        "fits": True, "mode": args.mode, "world": world,
        "attn": ("ring(reference)" if cpu else "ring(kittens)") if args.mode == "cp" else args.attn,
        "config": {k: v for k, v in vars(args).items() if k not in ("json", "plot")},
        "text": source, "device": "cpu" if cpu else torch.cuda.get_device_name(device), "torch": torch.__version__,
        "tokens_per_step": tokens_per_step, "losses": losses, "final_loss": sum(tail) / len(tail),
        "tokens_per_s": tokens_per_step * timed_steps / secs if timed_steps and secs > 0 else None,
        "step_s": step_s, "model_flops_per_step": flops,
        "model_tflops_per_gpu": flops / step_s / world / 1e12 if step_s else None,
        "max_memory_gib": 0.0 if cpu else torch.cuda.max_memory_allocated(device) / 2**30,
    }
    if world > 1:
        dist.destroy_process_group()
    return report if rank == 0 else {}


def plot(paths: List[str], out: str) -> None:
    """Loss curves of several runs in one figure, and tokens/s with scaling efficiency against the
    single-GPU run of the same sequence length (``tokens/s on R GPUs / (R × tokens/s on one)``)."""
    every = [json.load(open(p)) for p in paths]
    for r in every:
        if not r.get("fits", True):
            c = r["config"]
            print(f"single x1 {c['layers']}x{c['d']} seq {c['seq']} batch {c['batch']}: does not fit on one GPU "
                  f"({r['device']}, {r['device_total_gib']:.1f} GiB): {r['oom']}")
    runs = [r for r in every if r.get("fits", True)]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seqs = sorted({(r["config"]["layers"], r["config"]["d"], r["config"]["seq"]) for r in runs})
    fig, axes = plt.subplots(1, len(seqs), figsize=(7 * len(seqs), 4.5), squeeze=False)
    for ax, (layers, d, seq) in zip(axes[0], seqs):
        for r in [r for r in runs if (r["config"]["layers"], r["config"]["d"], r["config"]["seq"]) == (layers, d, seq)]:
            tps = r["tokens_per_s"] or float("nan")
            ax.plot(r["losses"], label=f"{r['mode']} x{r['world']} ({r['attn']}): {r['final_loss']:.3f}, "
                                       f"{tps:,.0f} tok/s")
        ax.set_title(f"GPT {layers}x{d}, seq {seq}")
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (nats/byte)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    def model(r):
        return r["config"]["layers"], r["config"]["d"]

    for r in runs:
        # The per-GPU reference: one GPU, same model, same length; failing that (the length does not fit
        # on one GPU), the longest length one GPU held, said so, and the FLOP-normalised ratio beside it
        # (attention's cost per token grows with the length, so tokens/s alone understates it).
        refs = [s for s in runs if s["mode"] == "single" and model(s) == model(r)
                and s["config"].get("per_gpu_reference") and s["tokens_per_s"]]
        same = [s for s in refs if s["config"]["seq"] == r["config"]["seq"]]
        base = same[0] if same else max(refs, key=lambda s: s["config"]["seq"], default=None)
        r_eff = ""
        if r["mode"] != "single" and base is not None and r["tokens_per_s"]:
            eff = r["tokens_per_s"] / (r["world"] * base["tokens_per_s"])
            r_eff = f", scaling efficiency {eff:.1%}"
            if not same:
                r_eff += f" vs one GPU at seq {base['config']['seq']} (the longest it holds)"
                mine, one = r.get("model_tflops_per_gpu"), base.get("model_tflops_per_gpu")
                if mine and one:
                    r_eff += f"; model TFLOP/s per GPU {mine:.0f} vs {one:.0f}: {mine / one:.1%}"
        tf = f", {r['model_tflops_per_gpu']:.0f} model TFLOP/s per GPU" if r.get("model_tflops_per_gpu") else ""
        print(f"{r['mode']} x{r['world']} {model(r)[0]}x{model(r)[1]} seq {r['config']['seq']} batch "
              f"{r['config']['batch']}: final loss {r['final_loss']:.4f}, {r['tokens_per_s'] or 0:,.0f} tokens/s"
              f"{tf}, {r['max_memory_gib']:.1f} GiB peak{r_eff}")


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kittens.train_dist", description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=["single", "ddp", "cp"], default="single")
    p.add_argument("--attn", choices=["kittens", "sdpa"], default="kittens", help="attention of single/ddp")
    p.add_argument("--preset", choices=sorted(PRESETS), help="model size (sets --layers, --d-model, --heads)")
    p.add_argument("--init-on-device", action="store_true",
                   help="draw the initial weights on the GPU (fast for a large model; other numbers than the CPU's)")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--layers", type=int, default=6)
    # Not `--d`: torchrun (torch 2.11) parses options before the module's and refuses `--d` as an
    # ambiguous prefix of its own `--duplicate-stdout-filters` and the like.
    p.add_argument("--d-model", dest="d", type=int, default=512, help="model width")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8, help="sequences per step (per rank with ddp)")
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-timing", type=int, default=10)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--text")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a tiny smoke run (gloo)")
    p.add_argument("--per-gpu-reference", action="store_true",
                   help="mark a single-GPU run as the per-GPU throughput the scaling efficiency divides by")
    p.add_argument("--profile-steps", type=int, default=0,
                   help="run this many more steps under torch.profiler after the timed ones; the table of "
                        "operators and kernels goes to JSON.prof.txt")
    p.add_argument("--json")
    p.add_argument("--plot", nargs="+", metavar=("PNG", "JSON"), help="plot runs: PNG then their JSON files")
    args = p.parse_args(argv)
    for k, v in PRESETS.get(args.preset, {}).items():
        setattr(args, k, v)
    if args.plot:
        if len(args.plot) < 2:
            p.error("--plot takes the PNG and at least one JSON")
        plot(args.plot[1:], args.plot[0])
        return 0
    report = run(args)
    if report and not report["fits"]:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=2)
    elif report:
        print(f"{args.mode} x{report['world']}: final loss {report['final_loss']:.4f}, "
              f"{report['tokens_per_s'] or 0:,.0f} tokens/s, {report['max_memory_gib']:.1f} GiB peak")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    code = main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # A torchrun worker with its report written and its process group destroyed: leave without the
        # interpreter's exit, where gloo's threads can abort the process ("terminate called without an
        # active exception") on a loaded machine.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
