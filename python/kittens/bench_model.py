"""``python -m kittens.bench model``: a Llama-style model (``transformers.LlamaConfig``, random weights, no
download) trained and run in one process with Hugging Face's own modules and with
:func:`kittens.integrations.transformers.apply`.

* training, each arm from the same initial weights on the same batches (fp32 master weights, AdamW,
  ``torch.autocast(bfloat16)``): ``hf`` (SDPA attention), ``hf-compile`` (``torch.compile`` of it),
  ``kittens`` and ``kittens-compile`` (and, when named in ``--arms``, ``hf-compile-ro`` and
  ``kittens-compile-ro``: ``mode="reduce-overhead"``, CUDA graphs); tokens/s over the steps after
  ``--skip-timing``, the median step time and the host's time to enqueue a step, peak memory of
  each step (``torch.cuda.max_memory_allocated``, reset before the step), the loss curve (``--plot``);
  ``kittens-nofl`` keeps transformers' loss (the fused loss's share); ``--interleave`` keeps every arm
  resident and steps them in turn (one machine drift for all; each arm's own peak, see :class:`_Arm`),
  ``--time-budget`` stops them all at the same step;
* inference in bfloat16, SDPA vs kittens: prefill tokens/s (one forward over the prompt, filling the KV
  cache) and decode tokens/s (``model.generate`` greedy with the KV cache, minus the prefill's time).

The kittens arms train with the fused linear + cross-entropy (``apply``'s default; ``--no-fused-loss``
keeps transformers' loss). ``--profile N`` runs N more steps per arm under ``torch.profiler`` and prints
where the GPU's and the host's time go. ``--preset 1b-4k`` is the ~1B model at sequence 4096; ``--curves F.json``
writes the loss curves alone, ``--json`` everything, ``--plot`` the curves and tokens/s.

The text is kittens.train_demo's (the repository's own; tokens are bytes, so ids < 256 of the vocabulary).
It needs a CUDA device: without one it says so and exits with status 2.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import time
import traceback
from typing import List, Optional

SIZES = {
    # name: hidden, layers, heads, kv heads, intermediate, vocab (head dim 64 throughout: the CUDA kernels
    # take 64 and 128)
    "tiny": (256, 2, 4, 2, 688, 32000),
    "125m": (768, 12, 12, 4, 2048, 32000),
    "350m": (1024, 24, 16, 8, 2816, 32000),
    "1b": (2048, 16, 32, 8, 8192, 128256),
    # The CPU smoke test's (tests/test_bench_model_suite.py): every code path on the interpreter in seconds.
    "micro": (64, 1, 2, 1, 96, 300),
}
ARMS = ("hf", "hf-compile", "kittens", "kittens-compile", "hf-compile-ro", "kittens-compile-ro", "kittens-nofl")
# The arms torch.compile'd and their mode: ``-compile`` with ``--compile-mode`` (default: inductor's
# default), ``-compile-ro`` with ``reduce-overhead`` (CUDA graphs: the step's launches replayed without
# the host's per-op cost, custom ops included).
RO = "-compile-ro"
# ``kittens-nofl``: eager kittens with transformers' own loss (the logits made): the fused linear +
# cross-entropy's share of the memory and time, in the same run.
NOFL = "-nofl"
# The sizes by name: the ~1B model (untied 128256-token embeddings: about 1.2B parameters) at
# sequence 4096, batch 4 (16K tokens a step; fp32 master weights and AdamW take about 19 GiB).
PRESETS = {
    "1b-4k": {"size": "1b", "seq": 4096, "batch": 4},
    "125m-2k": {"size": "125m", "seq": 2048, "batch": 8},
}


def llama_config(transformers, size: str, seq: int):
    hidden, layers, heads, kv, inter, vocab = SIZES[size]
    return transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv, head_dim=hidden // heads, intermediate_size=inter,
        max_position_embeddings=max(seq, 4096), tie_word_embeddings=False,
    )


class Device:
    """The timing and memory calls of one device: CUDA (the benchmark) or the CPU (the tests' smoke run of
    the same code, no memory figures)."""

    def __init__(self, torch, kind: str):
        self.torch, self.kind, self.cuda = torch, kind, kind == "cuda"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def reset_peak(self):
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats()

    def peak_gib(self):
        return self.torch.cuda.max_memory_allocated() / 2**30 if self.cuda else None

    def free(self):
        if self.cuda:
            self.torch.cuda.empty_cache()


def make_model(torch, transformers, cfg, arm: str, seed: int, dtype, dev: Device, fused_loss: bool = True):
    from kittens.integrations.transformers import apply

    torch.manual_seed(seed)
    # Initialised on the device (seeded there: every arm the same weights): a ~1B model's initialisation on
    # the host is slow, once per arm.
    with torch.device(dev.kind):
        model = transformers.LlamaForCausalLM(cfg)
    model = model.to(dtype=dtype)
    if arm.startswith("kittens"):
        import warnings

        import kittens.nn as knn

        knn.device_why(next(model.parameters()))  # the device check's capability lookup, before any tracing

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            apply(model, loss=fused_loss)
        for w in caught:
            print(f"    {w.message}")
    else:
        model.set_attn_implementation("sdpa")
    return model


def batches(torch, data, args, dev: Device):
    """The same (x, y) batches for every arm: windows of the text at seeded random starts."""
    gen = torch.Generator().manual_seed(args.seed)
    n = len(data) - args.seq - 1
    for _ in range(args.steps):
        starts = torch.randint(0, n, (args.batch,), generator=gen)
        x = torch.stack([data[s: s + args.seq] for s in starts])
        yield x.to(dev.kind)


class _Arm:
    """One training arm: its model, optimiser and per-step records. :func:`train_arm` runs its steps one
    after another; ``--interleave`` (:func:`train_interleaved`) steps every arm in turn, all resident at once,
    so a drift of the machine's speed (clocks, another process on the host) falls on every arm alike.

    Peak memory per step is the arm's own: the memory it held when the step began (its weights, optimiser
    state, what earlier steps left, counted as the changes of ``torch.cuda.memory_allocated`` over its own
    setup and steps) plus the step's rise above that (``max_memory_allocated``, reset before the step). With
    one arm resident that is the plain ``max_memory_allocated``; with several, the others' memory stays out.
    A CUDA graph's replay allocates nothing (its memory is the graph pool's, taken when the graph was
    recorded), so the ``-ro`` arms' timed steps undercount: ``peak_gib_all_steps`` (the recording step
    included) is their figure."""

    def __init__(self, torch, transformers, cfg, arm: str, args, dev: Device):
        self.torch, self.arm, self.args, self.dev = torch, arm, args, dev
        before = torch.cuda.memory_allocated() if dev.cuda else 0
        self.model = make_model(torch, transformers, cfg, arm, args.seed, torch.float32, dev,
                                fused_loss=getattr(args, "fused_loss", True) and not arm.endswith(NOFL))
        self.model.train()
        mode = "reduce-overhead" if arm.endswith(RO) else getattr(args, "compile_mode", "default")
        self.compiled = "-compile" in arm
        self.mode = mode if self.compiled else None
        self.fwd = torch.compile(self.model, mode=None if mode == "default" else mode) if self.compiled else self.model
        self.graphs = self.compiled and mode == "reduce-overhead"
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95),
                                     fused=dev.cuda)
        self.own = (torch.cuda.memory_allocated() - before) if dev.cuda else 0
        self.losses: List[float] = []
        self.peaks: List[Optional[float]] = []
        self.step_s: List[float] = []
        self.host_s: List[float] = []
        # kittens arms on CUDA: whether the first two steps reached the attention kernel (its CUDA entry,
        # which the op's body looks up per call) — under torch.compile a fallback to SDPA is silent.
        self.watch = arm.startswith("kittens") and dev.cuda
        self.attn_calls: List[int] = []

    def one_step(self, x):
        torch = self.torch
        if self.graphs:
            torch.compiler.cudagraph_mark_step_begin()  # the last step's graph outputs are free to reuse
        with torch.autocast(self.dev.kind, dtype=torch.bfloat16):
            # The model's default use_cache (a DynamicCache): with use_cache=False, transformers cannot rule
            # out packed sequences in position_ids under torch.compile and builds a mask tensor, which
            # sends both compiled arms' attention off the causal fast paths.
            loss = self.fwd(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss

    def step(self, step: int, x) -> None:
        torch, dev, args = self.torch, self.dev, self.args
        watching = self.watch and step < 2
        if watching:
            from kittens import _dispatch

            real_attention = _dispatch.attention

            def counted(*a, **kw):
                self.attn_calls.append(1)
                return real_attention(*a, **kw)

            _dispatch.attention = counted
        lr = args.lr * min(1.0, (step + 1) / args.warmup)
        for g in self.opt.param_groups:
            g["lr"] = lr
        dev.reset_peak()
        dev.sync()
        before = torch.cuda.memory_allocated() if dev.cuda else 0
        t0 = time.perf_counter()
        try:
            loss = self.one_step(x)
            self.host_s.append(time.perf_counter() - t0)  # the host's time to enqueue the step (nothing waited on)
            self.losses.append(loss.item())  # synchronises
            self.step_s.append(time.perf_counter() - t0)
        finally:
            if watching:
                _dispatch.attention = real_attention
        del loss
        if dev.cuda:
            self.peaks.append((self.own + torch.cuda.max_memory_allocated() - before) / 2**30)
            self.own += torch.cuda.memory_allocated() - before
        else:
            self.peaks.append(None)
        if watching and step == 1 and not self.attn_calls:
            print(f"    {self.arm}: the attention kernel was not called in the first two steps (SDPA fallback)",
                  flush=True)
        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"    {self.arm} step {step:4d}  loss {self.losses[-1]:.4f}  {self.step_s[-1] * 1e3:.0f} ms",
                  flush=True)

    def finish(self, x) -> dict:
        args, dev = self.args, self.dev
        profiled = profile_steps(self.torch, self.arm, self.one_step, x, getattr(args, "profile", 0), dev)
        skip = min(args.skip_timing, max(0, len(self.step_s) - 1))
        timed = self.step_s[skip:]
        tps = args.batch * args.seq * len(timed) / sum(timed) if timed else None
        del self.model, self.fwd, self.opt
        dev.free()
        peaks = self.peaks
        return {"ran": True, "tokens_per_s": tps, "compile_mode": self.mode,
                "peak_gib": max(peaks[skip:] or peaks) if dev.cuda else None,
                "peak_gib_all_steps": max(peaks) if dev.cuda and peaks else None,
                "attention_kernel_calls_first_steps": len(self.attn_calls) if self.watch else None,
                "host_ms": 1e3 * _median(self.host_s[skip:] or self.host_s),
                "step_ms": 1e3 * _median(self.step_s[skip:] or self.step_s), "timed_steps": len(timed),
                "peak_gib_per_step": peaks, "step_s": self.step_s, "host_s": self.host_s,
                "losses": self.losses, "profile": profiled}


def train_arm(torch, transformers, cfg, arm: str, data, args, dev: Device) -> dict:
    a = _Arm(torch, transformers, cfg, arm, args, dev)
    x = None
    for step, x in enumerate(batches(torch, data, args, dev)):
        a.step(step, x)
    return a.finish(x)


def train_interleaved(torch, transformers, cfg, arms: List[str], data, args, dev: Device,
                      checkpoint=None) -> dict:
    """Every arm of ``arms`` resident at once, stepped in turn on the same batch (the order rotated by one
    arm each step, so no arm always follows the same one); ``args.time_budget`` seconds (0: none): no
    step is begun after it, every arm stopping at the same step count (``steps_run``). ``checkpoint(out)``
    is called every ``args.log_every`` steps with the records so far (a run cut short keeps them)."""
    runners, out = {}, {}
    for arm in arms:
        print(f"  training (interleaved): {arm}", flush=True)
        try:
            runners[arm] = _Arm(torch, transformers, cfg, arm, args, dev)
        except Exception as e:
            traceback.print_exc()
            out[arm] = {"ran": False, "error": f"{type(e).__name__}: {e}"[:2000]}
    t_start = time.perf_counter()
    budget = getattr(args, "time_budget", 0) or 0
    x = None
    for step, x in enumerate(batches(torch, data, args, dev)):
        if budget and step > 0 and time.perf_counter() - t_start > budget:
            print(f"  time budget of {budget:.0f} s reached: {step} steps per arm", flush=True)
            break
        live = [a for a in arms if a in runners]
        k = step % max(1, len(live))
        for arm in live[k:] + live[:k]:
            try:
                runners[arm].step(step, x)
            except Exception as e:  # one arm's failure (e.g. out of memory) is reported, the others go on
                traceback.print_exc()
                out[arm] = {"ran": False, "error": f"{type(e).__name__}: {e}"[:2000]}
                del runners[arm]
                dev.free()
        if checkpoint and step % args.log_every == 0:
            checkpoint({a: {"ran": False, "partial": True, "losses": r.losses, "step_s": r.step_s,
                            "host_s": r.host_s, "peak_gib_per_step": r.peaks} for a, r in runners.items()})
    for arm in arms:
        if arm in runners:
            out[arm] = runners.pop(arm).finish(x)
            out[arm]["interleaved"] = True
    return {a: out[a] for a in arms}


def profile_steps(torch, arm: str, one_step, x, steps: int, dev: Device) -> Optional[dict]:
    """``--profile N``: N more training steps of the arm after the timed ones (not timed themselves) under
    ``torch.profiler``; prints the ops by self CUDA time (where the GPU's step goes) and by self CPU time
    (the host's per-op cost, which bounds a small model's step: see ``host_ms``). Returns the top ops of
    each table (name, calls, microseconds), or None when ``steps`` is 0."""
    if steps <= 0:
        return None
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            one_step(x)
        dev.sync()
    events = prof.key_averages()
    out = {"steps": steps}
    for key, attr in (("self_cuda_time_total", "self_device_time_total"), ("self_cpu_time_total",
                                                                            "self_cpu_time_total")):
        if key.startswith("self_cuda") and not dev.cuda:
            continue
        print(f"    {arm}: {steps} profiled steps by {key}", flush=True)
        print(events.table(sort_by=key, row_limit=22, max_name_column_width=70), flush=True)
        top = sorted(events, key=lambda e: getattr(e, attr, 0), reverse=True)[:22]
        out[key] = [{"op": e.key, "calls": e.count, "us": getattr(e, attr, 0)} for e in top]
    return out


def _median(xs: List[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def infer_arm(torch, transformers, cfg, arm: str, data, args, dev: Device) -> dict:
    model = make_model(torch, transformers, cfg, arm, args.seed, torch.bfloat16, dev).eval()
    gen = torch.Generator().manual_seed(args.seed + 1)
    starts = torch.randint(0, len(data) - args.prompt, (args.gen_batch,), generator=gen)
    prompt = torch.stack([data[s: s + args.prompt] for s in starts]).to(dev.kind)
    with torch.no_grad():
        for _ in range(2):  # warm-up (kernel compilation, allocator)
            model(input_ids=prompt, use_cache=True)
            model.generate(prompt, max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0)
        prefill = []
        for _ in range(args.repeats):
            dev.sync()
            t0 = time.perf_counter()
            model(input_ids=prompt, use_cache=True)
            dev.sync()
            prefill.append(time.perf_counter() - t0)
        total = []
        for _ in range(args.repeats):
            dev.sync()
            t0 = time.perf_counter()
            out = model.generate(prompt, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                                 do_sample=False, pad_token_id=0)
            dev.sync()
            total.append(time.perf_counter() - t0)
    t_pre, t_all = sorted(prefill)[len(prefill) // 2], sorted(total)[len(total) // 2]
    decode_tokens = args.gen_batch * (args.new_tokens - 1)  # the first new token comes from the prefill
    del model
    dev.free()
    return {"ran": True, "prefill_tokens_per_s": args.gen_batch * args.prompt / t_pre,
            "decode_tokens_per_s": decode_tokens / max(t_all - t_pre, 1e-9), "prefill_s": t_pre,
            "generate_s": t_all, "tokens": out[:, args.prompt:].tolist()}


def _guarded(fn, *a) -> dict:
    try:
        return fn(*a)
    except Exception as e:  # one arm's failure (e.g. out of memory, a compile error) is reported, not fatal
        traceback.print_exc()
        return {"ran": False, "error": f"{type(e).__name__}: {e}"[:2000]}


def plot(report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4.5))
    train = {k: v for k, v in report["training"].items() if v.get("ran")}
    for k, v in train.items():
        ax.plot(v["losses"], label=f"{k} ({v['tokens_per_s'] or 0:,.0f} tok/s, {v['peak_gib'] or 0:.1f} GiB)", lw=1)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title(f"Llama {report['config']['size']}, seq {report['config']['seq']}, batch "
                 f"{report['config']['batch']}")
    ax.legend(fontsize=8)
    names = list(train)
    bx.bar(names, [train[k]["tokens_per_s"] or 0 for k in names])
    bx.set_ylabel("training tokens/s")
    bx.set_title(f"{report['device']}, {report['date'][:10]}, {report['commit'][:10]}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kittens.bench model", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=list(PRESETS),
                   help="size, seq and batch together (1b-4k: the issue's ~1B model at sequence 4096); "
                        "an explicit --size/--seq/--batch still wins")
    p.add_argument("--size", choices=list(SIZES), default=None, help="default 125m")
    p.add_argument("--seq", type=int, default=None, help="default 2048")
    p.add_argument("--batch", type=int, default=None, help="default 8")
    p.add_argument("--no-fused-loss", dest="fused_loss", action="store_false",
                   help="kittens arms: keep transformers' loss (logits made), to see the fused loss's share")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--skip-timing", type=int, default=10, help="steps before tokens/s is measured (compile)")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--arms", default=",".join(ARMS[:4]),
                   help=f"training arms, comma-separated, of {', '.join(ARMS)} (the -ro ones: torch.compile with "
                        "mode reduce-overhead, CUDA graphs)")
    p.add_argument("--interleave", action="store_true",
                   help="every training arm resident at once, stepped in turn (the machine's drift falls on all "
                        "alike; each arm's peak memory is still its own, see _Arm)")
    p.add_argument("--time-budget", type=float, default=0, metavar="S",
                   help="--interleave: begin no step after S seconds of training (every arm stops at the same "
                        "step; the report says how many ran)")
    p.add_argument("--compile-mode", default="default", choices=["default", "reduce-overhead",
                                                                  "max-autotune-no-cudagraphs"],
                   help="torch.compile's mode for the two -compile arms (reduce-overhead: CUDA graphs, which take "
                        "away the host's per-op cost of custom ops as well as PyTorch's)")
    p.add_argument("--prompt", type=int, default=1024, help="inference: prompt length")
    p.add_argument("--new-tokens", type=int, default=128, help="inference: tokens generated")
    p.add_argument("--gen-batch", type=int, default=8, help="inference: sequences at once")
    p.add_argument("--repeats", type=int, default=3, help="inference: timed runs (median)")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="after each training arm's steps, N more under torch.profiler: the ops by self CUDA "
                        "time and by self CPU (host) time, printed and in the JSON")
    p.add_argument("--no-train", action="store_true")
    p.add_argument("--no-infer", action="store_true")
    p.add_argument("--text", help="train on this file instead of the repository's own text")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--plot", help="write the loss curves and tokens/s (PNG) here")
    p.add_argument("--curves", help="write the loss curves alone (JSON: arm -> loss per step) here")
    p.add_argument("--suite", help="run a named suite of configurations (kittens.bench_model_suite: issue35 = "
                                   "the issue's figures at 125M and 1B) into --out, then write its README")
    p.add_argument("--parts", help="--suite: only these of its parts (comma-separated names); the README "
                                   "covers every part whose JSON is in --out")
    p.add_argument("--out", default="bench/results/model", help="--suite: the results folder")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: the tests' smoke run on the interpreter (no memory figures)")
    args = p.parse_args(argv)
    if args.suite:
        from . import bench_model_suite

        return bench_model_suite.main(args, Device, run)
    preset = PRESETS.get(args.preset, {})
    for k, default in (("size", "125m"), ("seq", 2048), ("batch", 8)):
        if getattr(args, k) is None:
            setattr(args, k, preset.get(k, default))
    arms = [a for a in args.arms.split(",") if a]
    for a in arms:
        if a not in ARMS:
            print(f"kittens.bench model: unknown arm {a!r}; known: {', '.join(ARMS)}", file=sys.stderr)
            return 2
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"kittens.bench model needs torch and transformers (pip install './python[hf]'): {e}",
              file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("kittens.bench model: no CUDA device (torch sees none); this benchmark runs on a GPU only",
              file=sys.stderr)
        return 2
    report, ok = run(torch, transformers, args, Device(torch, "cuda"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if args.plot and any(v.get("ran") for v in report["training"].values()):
        plot(report, args.plot)
    if args.curves:
        with open(args.curves, "w") as f:
            json.dump({"config": report["config"], "device": report["device"], "commit": report["commit"],
                       "date": report["date"], "losses": {k: v["losses"] for k, v in report["training"].items()
                                                          if v.get("ran")}}, f, indent=1)
    return 0 if ok else 1


def run(torch, transformers, args, dev: Device):
    """``(report, ok)``: the training arms ``args.arms`` and (unless ``args.no_infer``) the inference arms
    at ``args.size``/``seq``/``batch`` on ``dev``; ``ok`` as :func:`summarize` says."""
    import kittens

    from .bench_timing import _commit
    from .train_demo import load_text

    arms = [a for a in args.arms.split(",") if a]
    text, source = load_text(args.text)
    data = torch.frombuffer(bytearray(text), dtype=torch.uint8).long()
    cfg = llama_config(transformers, args.size, args.seq)
    n_params = sum(v for v in [cfg.vocab_size * cfg.hidden_size * 2] + [
        cfg.num_hidden_layers * (cfg.hidden_size * cfg.head_dim * (2 * cfg.num_attention_heads + 2 *
                                 cfg.num_key_value_heads) + 3 * cfg.hidden_size * cfg.intermediate_size)])
    report = {
        "what": "model", "commit": _commit(),
        "device": torch.cuda.get_device_name() if dev.cuda else "cpu (the interpreter)",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__, "transformers": transformers.__version__, "kittens": kittens.__version__,
        "config": {k: v for k, v in vars(args).items() if k not in ("json", "plot", "out", "suite", "parts",
                                                                   "suite_part")},
        "model": {"params": n_params, **{k: getattr(cfg, k) for k in (
            "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
            "intermediate_size", "vocab_size")}},
        "text": source, "training": {}, "inference": {},
    }
    if getattr(args, "suite_part", None):  # the checkpoints too are parts the suite's README can read
        report["suite"], report["part"] = args.suite_part
    print(f"{report['device']}, torch {torch.__version__}, transformers {transformers.__version__}, commit "
          f"{report['commit']}; Llama {args.size} ({n_params / 1e6:.0f}M parameters), seq {args.seq}, batch "
          f"{args.batch}")
    def checkpoint(partial):
        if getattr(args, "json", None):
            with open(args.json, "w") as f:
                json.dump(dict(report, training=partial, partial=True), f)

    if not args.no_train and getattr(args, "interleave", False):

        report["training"] = train_interleaved(torch, transformers, cfg, arms, data, args, dev, checkpoint)
        for arm, r in report["training"].items():
            if r.get("ran"):
                print(f"  {arm}: {r['tokens_per_s'] or 0:,.0f} tokens/s, step {r['step_ms']:.1f} ms, host "
                      f"{r['host_ms']:.1f} ms, peak {r['peak_gib'] or 0:.2f} GiB (all steps "
                      f"{r['peak_gib_all_steps'] or 0:.2f})", flush=True)
    elif not args.no_train:
        for arm in arms:
            print(f"  training: {arm}")
            r = report["training"][arm] = _guarded(train_arm, torch, transformers, cfg, arm, data, args, dev)
            if r.get("ran"):  # each arm's figures as soon as it ends (a run cut short keeps them)
                print(f"  {arm}: {r['tokens_per_s'] or 0:,.0f} tokens/s, step {r['step_ms']:.1f} ms, host "
                      f"{r['host_ms']:.1f} ms, peak {r['peak_gib'] or 0:.2f} GiB", flush=True)
            checkpoint(report["training"])
    if not args.no_infer:
        for arm in ("hf", "kittens"):
            print(f"  inference: {arm}")
            report["inference"][arm] = _guarded(infer_arm, torch, transformers, cfg, arm, data, args, dev)
    ok = summarize(report, args)
    return report, ok


def curve_gaps(training: dict, skip: int) -> dict:
    """Per arm beside ``hf``: the mean and largest ``|loss - hf's loss|`` over the steps after ``skip``
    (the learning-rate warm-up). ``hf-compile``'s gap is the bf16 noise bound the others are read against:
    the same model and the same math, only PyTorch's fused kernels rounding differently."""
    hf = training.get("hf", {})
    out = {}
    if not hf.get("ran"):
        return out
    for k, v in training.items():
        if k == "hf" or not v.get("ran"):
            continue
        gaps = [abs(a - b) for a, b in zip(v["losses"][skip:], hf["losses"][skip:])]
        if gaps:
            out[k] = {"mean_abs_gap": sum(gaps) / len(gaps), "max_abs_gap": max(gaps), "steps": len(gaps)}
    return out


def summarize(report: dict, args) -> bool:
    """Print the table and the issue's goals; False when an arm failed or the loss curves differ beyond
    bf16 noise (mean of the last 20 steps more than 2% apart)."""
    ok = True
    tr, inf = report["training"], report["inference"]
    print(f"\n{'arm':>18} {'tokens/s':>10} {'peak GiB':>9} {'all steps':>9} {'final loss':>11} {'step ms':>8} "
          f"{'host ms':>8}")
    for k, v in tr.items():
        if not v.get("ran"):
            print(f"{k:>18} FAILED: {v['error'][:200]}")
            ok = False
            continue
        tail = v["losses"][-20:]
        v["final_loss"] = sum(tail) / len(tail)
        peak = float("nan") if v["peak_gib"] is None else v["peak_gib"]
        peak_all = v.get("peak_gib_all_steps")
        peak_all = float("nan") if peak_all is None else peak_all
        print(f"{k:>18} {v['tokens_per_s'] or float('nan'):>10,.0f} {peak:>9.2f} {peak_all:>9.2f} "
              f"{v['final_loss']:>11.4f} "
              f"{v.get('step_ms', float('nan')):>8.1f} {v.get('host_ms', float('nan')):>8.1f}")
    print("  (host ms: the median time the host took to enqueue a step, nothing waited on; near step ms, the "
          "step is bound by the host's per-op cost)")
    report["curves"] = curve_gaps(tr, getattr(args, "warmup", 0))
    for k, g in report["curves"].items():
        print(f"  loss curve {k} vs hf: mean |gap| {g['mean_abs_gap']:.4f}, max {g['max_abs_gap']:.4f} over "
              f"{g['steps']} steps")
    goals = {}

    def ratio(a, b, key):
        if tr.get(a, {}).get("ran") and tr.get(b, {}).get("ran") and tr[a][key] and tr[b][key]:
            return tr[a][key] / tr[b][key]
        return None

    best = max((ratio(k, "hf", "tokens_per_s") or 0.0, k) for k in ("kittens", "kittens-compile", "kittens" + RO))
    # Against HF's best compiled arm (of the modes that ran), naming both arms; and each compile mode
    # against the same mode (never our best mode against their worst unsaid).
    hf_best = max((ratio(k, "hf", "tokens_per_s") or 0.0, k) for k in ("hf-compile", "hf" + RO))
    goals["train_vs_hf_eager (goal >= 1.15)"] = ratio("kittens", "hf", "tokens_per_s")
    if best[1] != "kittens":
        goals[f"train_{best[1]}_vs_hf_eager"] = ratio(best[1], "hf", "tokens_per_s")
    goals[f"train_vs_hf_compile (goal >= 1.0): {best[1]} vs {hf_best[1]}"] = ratio(best[1], hf_best[1],
                                                                                 "tokens_per_s")
    goals["train_kittens-compile_vs_hf-compile (default mode both)"] = ratio("kittens-compile", "hf-compile",
                                                                             "tokens_per_s")
    goals["train_kittens-compile-ro_vs_hf-compile-ro (reduce-overhead both)"] = ratio(
        "kittens" + RO, "hf" + RO, "tokens_per_s")
    goals["peak_memory_vs_hf (goal <= 1.0)"] = ratio("kittens", "hf", "peak_gib")
    goals["peak_memory_kittens-compile_vs_hf-compile"] = ratio("kittens-compile", "hf-compile", "peak_gib")
    # A graph's replay allocates nothing: the -ro arms' figure is the one over all steps (the recording).
    goals["peak_memory_kittens-compile-ro_vs_hf-compile-ro (all steps)"] = ratio(
        "kittens" + RO, "hf" + RO, "peak_gib_all_steps")
    goals["peak_memory_fused_loss_vs_kittens-nofl"] = ratio("kittens", "kittens" + NOFL, "peak_gib")
    goals = {k: v for k, v in goals.items() if v is not None or "goal" in k}
    if tr.get("hf", {}).get("ran"):
        for k, v in tr.items():
            if v.get("ran") and k != "hf":
                rel = abs(v["final_loss"] - tr["hf"]["final_loss"]) / tr["hf"]["final_loss"]
                goals[f"final_loss_{k}_vs_hf (rel, within 0.02)"] = rel
                ok = ok and math.isfinite(rel) and rel <= 0.02
    for k, v in inf.items():
        if not v.get("ran"):
            print(f"inference {k} FAILED: {v['error'][:200]}")
            ok = False
        else:
            print(f"inference {k:>8}: prefill {v['prefill_tokens_per_s']:,.0f} tokens/s, decode "
                  f"{v['decode_tokens_per_s']:,.0f} tokens/s")
    if inf.get("hf", {}).get("ran") and inf.get("kittens", {}).get("ran"):
        goals["decode_vs_sdpa (goal >= 1.0)"] = inf["kittens"]["decode_tokens_per_s"] / inf["hf"]["decode_tokens_per_s"]
        goals["prefill_vs_sdpa"] = inf["kittens"]["prefill_tokens_per_s"] / inf["hf"]["prefill_tokens_per_s"]
        a, b = inf["kittens"]["tokens"], inf["hf"]["tokens"]
        same = sum(x == y for ra, rb in zip(a, b) for x, y in zip(ra, rb))
        goals["greedy_tokens_equal_fraction"] = same / max(1, sum(len(r) for r in b))
    report["goals"] = goals
    for k, v in goals.items():
        print(f"  {k}: {'-' if v is None else f'{v:.3f}'}")
    return ok
