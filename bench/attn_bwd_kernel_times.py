"""Where an attention backward's time goes, kernel by kernel: ours (``kittens._attention_backward`` in
each form) and SDPA's cuDNN and FlashAttention-2 backends, each timed by torch.profiler's CUDA trace
over a few warm backwards at one shape. Prints one table per shape (kernel, launches per backward, mean
microseconds, share of the backward) and, for the memory-bound kernels of ours, the bandwidth their
bytes imply. Needs a CUDA device with torch; ``--json`` writes the rows.

    python3 bench/attn_bwd_kernel_times.py --seqs 2048,8192 --json times.json
"""
import argparse
import collections
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import kittens


def backward_fn(backend, form, q, k, v, do, causal):
    """A closure running one backward of `backend` on the inputs (forward done once, outside)."""
    if backend == "kittens":
        out, lse = kittens.attention(q, k, v, causal=causal, return_lse=True)
        return lambda: kittens._attention_backward(q, k, v, out, do, lse, causal, form=form)
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    sdp = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend]
    with sdpa_kernel(sdp):
        out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)

    def run():
        with sdpa_kernel(sdp):
            torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)

    return run


def kernel_times(fn, reps):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    acc = collections.defaultdict(lambda: [0, 0.0])
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            a = acc[ev.name]
            a[0] += 1
            a[1] += ev.device_time  # microseconds
    return {name: (n / reps, t / n) for name, (n, t) in acc.items()}


def event_time(fn, reps):
    """Median microseconds between CUDA events around one backward, each after a GPU sleep that lets the
    host enqueue it (the bench's timing: `kittens.bench.time_one`)."""
    for _ in range(2):
        fn()
    ev = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(200_000)
        s.record()
        fn()
        e.record()
        ev.append((s, e))
    torch.cuda.synchronize()
    return sorted(1e3 * s.elapsed_time(e) for s, e in ev)[reps // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--seqs", default="2048,8192")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--forms", default="atomic,two")
    ap.add_argument("--layout", default="bhsd,bshd", help="memory orders to run: bhsd (dense (B, H, N, D)), bshd "
                    "(dense (B, N, H, D) seen as (B, H, N, D), the bench's)")
    ap.add_argument("--json")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("attn_bwd_kernel_times: needs a CUDA device")
    rows = []
    for n, causal, layout in ((int(s), c, lay) for s in a.seqs.split(",") for c in (False, True)
                              for lay in a.layout.split(",")):
        g = torch.Generator(device="cuda").manual_seed(n)

        def mk():
            if layout == "bshd":
                x = torch.randn(a.batch, n, a.heads, a.dim, device="cuda", generator=g)
                return x.to(torch.bfloat16).transpose(1, 2)
            return torch.randn(a.batch, a.heads, n, a.dim, device="cuda", generator=g).to(torch.bfloat16)

        q, k, v, do = mk(), mk(), mk(), mk()
        runs = [("kittens", f) for f in a.forms.split(",")] + [("cudnn", None), ("flash", None)]
        print(f"\nB{a.batch} H{a.heads} N{n} D{a.dim}{' causal' if causal else ''} {layout}")
        elems = a.batch * a.heads * n * a.dim
        for backend, form in runs:
            times = kernel_times(backward_fn(backend, form, q, k, v, do, causal), a.reps)
            total = sum(c * t for c, t in times.values())
            label = backend + (f" ({form})" if form else "")
            wall = event_time(backward_fn(backend, form, q, k, v, do, causal), a.reps)
            print(f"  {label}: {total:9.1f} us of kernels per backward, {wall:9.1f} us between events")
            for name, (c, t) in sorted(times.items(), key=lambda kv: -kv[1][0] * kv[1][1]):
                extra = ""
                # Bytes of ours' memory-bound passes (bf16 O, dO read; f32 acc written; D is 1/D of it).
                if "attn_bwd_pre" in name:
                    extra = f"  {(2 * 2 + 4) * elems / (t * 1e-6) / 1e12:5.2f} TB/s"
                elif "dq_convert" in name:
                    extra = f"  {(4 + 2) * elems / (t * 1e-6) / 1e12:5.2f} TB/s"
                print(f"    {c:4.1f} x {t:9.1f} us  {100 * c * t / total:5.1f}%  {name[:90]}{extra}")
                rows.append(dict(n=n, causal=causal, layout=layout, backend=label, kernel=name, per_bwd=c, us=t,
                                 events_us=wall))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
