"""``torchrun --nproc_per_node=2 -m kittens.distributed_check [--json F]``: the kernels inside
``torch.distributed`` and ring attention on real GPUs.

1. Each rank, on its own device and on a side stream, compiles the same GEMM and attention kernels at
   the same moment into one shared, fresh disk cache (``KITTENS_COMPILE_CACHE``, else
   ``KITTENS_CACHE``): every rank must succeed and agree with ``torch.matmul`` / SDPA on its own
   device; the cache must end with whole entries only.
2. :func:`kittens.distributed.ring_attention` forward and backward against attention over the
   concatenated sequence on one GPU, at N = 32768 and an odd N, causal and not, grouped heads, by
   FlashAttention's rule: relative error against float64 at most twice that of single-GPU
   ``kittens.attention`` (and reported beside SDPA's) plus a small floor.
3. Timing: the ring (all ranks) against single-GPU attention over the whole sequence, forward and
   forward + backward: scaling efficiency = time on one GPU / (ranks × time of the ring).

Fewer than two GPUs, or not under torchrun: says so and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import List, Optional

FLOOR = 1e-5


def rel(x, ref) -> float:
    return ((x.double() - ref).norm() / ref.norm()).item()


def reference64(torch, q, k, v, dout, causal, scale, rows=512):
    """Attention and its gradients in float64 on the GPU, a block of query rows at a time."""
    q, k, v, do = (x.double() for x in (q, k, v, dout))
    b, h, n, d = q.shape
    g = h // k.shape[1]
    kr, vr = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    out = torch.empty_like(q)
    lse = torch.empty(b, h, n, dtype=torch.float64, device=q.device)
    keys = torch.arange(n, device=q.device)

    def probs(i0, i1):
        s = torch.matmul(q[:, :, i0:i1], kr.transpose(-1, -2)) * scale
        if causal:
            s.masked_fill_(keys[None, :] > torch.arange(i0, i1, device=q.device)[:, None], float("-inf"))
        return s

    for i0 in range(0, n, rows):
        i1 = min(n, i0 + rows)
        s = probs(i0, i1)
        lse[:, :, i0:i1] = torch.logsumexp(s, -1)
        out[:, :, i0:i1] = torch.matmul(torch.exp(s - lse[:, :, i0:i1, None]), vr)
        del s
    delta = (do * out).sum(-1)
    dq, dkr, dvr = torch.empty_like(q), torch.zeros_like(kr), torch.zeros_like(vr)
    for i0 in range(0, n, rows):
        i1 = min(n, i0 + rows)
        p = torch.exp(probs(i0, i1) - lse[:, :, i0:i1, None])
        dvr += torch.matmul(p.transpose(-1, -2), do[:, :, i0:i1])
        ds = p * (torch.matmul(do[:, :, i0:i1], vr.transpose(-1, -2)) - delta[:, :, i0:i1, None])
        del p
        dq[:, :, i0:i1] = torch.matmul(ds, kr) * scale
        dkr += torch.matmul(ds.transpose(-1, -2), q[:, :, i0:i1]) * scale
        del ds
    fold = lambda x: x.unflatten(1, (k.shape[1], g)).sum(2)  # noqa: E731
    return out, dq, fold(dkr), fold(dvr)


def kernels_under_dist(torch, dist, kittens, rank, dev) -> dict:
    """Part 1: both ranks compile the same kernels at once on their own device and a side stream."""
    F = torch.nn.functional
    g = torch.Generator(device=dev).manual_seed(100 + rank)
    a = torch.randn(1000, 1032, generator=g, device=dev).bfloat16()
    w = torch.randn(520, 1032, generator=g, device=dev).bfloat16()
    q, k, v = (torch.randn(2, x, 1000, 128, generator=g, device=dev).bfloat16() for x in (8, 2, 2))
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    dist.barrier()  # both ranks reach the first compile together
    t0 = time.perf_counter()
    with torch.cuda.stream(side):
        c = kittens.matmul(a, w.T)
        o = kittens.attention(q, k, v, causal=True)
        c_ref, o_ref = torch.matmul(a, w.T), F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                            enable_gqa=True)
    side.synchronize()
    first = time.perf_counter() - t0
    c64 = a.double() @ w.double().T
    o64 = reference64(torch, q, k, v, torch.zeros_like(q), True, q.shape[-1] ** -0.5)[0]
    res = {
        "rank": rank, "device": str(c.device), "first_calls_s": first,
        "matmul": {"bit_identical": bool(torch.equal(c, c_ref)), "err": rel(c, c64), "torch_err": rel(c_ref, c64)},
        "attention": {"err": rel(o, o64), "sdpa_err": rel(o_ref, o64)},
    }
    res["ok"] = (c.device == a.device and o.device == q.device
                 and (res["matmul"]["bit_identical"] or res["matmul"]["err"] <= 2 * res["matmul"]["torch_err"] + FLOOR)
                 and res["attention"]["err"] <= 2 * res["attention"]["sdpa_err"] + FLOOR)
    return res


def cache_state() -> dict:
    root = os.environ.get("KITTENS_COMPILE_CACHE") or os.environ.get("KITTENS_CACHE", "")
    d = os.path.join(root, "cuda")
    names = sorted(os.listdir(d)) if os.path.isdir(d) else []
    return {"dir": d, "cubins": sum(n.endswith(".cubin") for n in names),
            "records": sum(n.endswith(".json") for n in names),
            "temporaries": [n for n in names if n.endswith(".tmp")]}


def ring_case(torch, dist, kittens, rank, dev, n, causal, heads, heads_kv, dim, seed) -> dict:
    """Part 2: one ring forward + backward against single-GPU attention on the whole sequence."""
    from kittens.distributed import gather, ring_attention, shard

    F = torch.nn.functional
    g = torch.Generator(device=dev).manual_seed(seed)  # the same tensors on every rank
    q, k, v = (torch.randn(1, x, n, dim, generator=g, device=dev).bfloat16() for x in (heads, heads_kv, heads_kv))
    dout = torch.randn(1, heads, n, dim, generator=g, device=dev).bfloat16()
    scale = dim ** -0.5
    ql, kl, vl = (shard(x, causal=causal).requires_grad_() for x in (q, k, v))
    seq_len = None if n % (2 * dist.get_world_size()) == 0 else n
    out = ring_attention(ql, kl, vl, causal=causal, seq_len=seq_len)
    out.backward(shard(dout, causal=causal))
    ring = [gather(x.detach(), n, causal=causal) for x in (out, ql.grad, kl.grad, vl.grad)]
    res = {"n": n, "causal": causal, "heads": heads, "heads_kv": heads_kv, "dim": dim}
    if rank == 0:
        ref = reference64(torch, q, k, v, dout, causal, scale)
        qs, ks, vs = (x.clone().requires_grad_() for x in (q, k, v))
        single = None
        try:
            o1 = kittens.attention(qs, ks, vs, causal=causal)
            o1.backward(dout)
            single = [o1.detach(), qs.grad, ks.grad, vs.grad]
        except (NotImplementedError, RuntimeError, ValueError) as e:
            res["single_gpu_error"] = f"{type(e).__name__}: {e}"
        qt, kt, vt = (x.clone().requires_grad_() for x in (q, k, v))
        ot = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=True)
        ot.backward(dout)
        sdpa = [ot.detach(), qt.grad, kt.grad, vt.grad]
        ok = True
        for i, name in enumerate(("out", "dq", "dk", "dv")):
            e = {"ring": rel(ring[i], ref[i]), "sdpa": rel(sdpa[i], ref[i])}
            base = e["sdpa"]
            if single is not None:
                e["single_gpu_kittens"] = rel(single[i], ref[i])
                base = e["single_gpu_kittens"]
            e["pass"] = e["ring"] <= 2 * base + FLOOR and bool(torch.isfinite(ring[i]).all())
            ok &= e["pass"]
            res[name] = e
        res["rule_baseline"] = "single_gpu_kittens" if single is not None else "sdpa"
        res["pass"] = ok
        del ref, single, sdpa
    torch.cuda.empty_cache()
    return res


def timed(torch, dist, fn, iters=5) -> float:
    """Median seconds of fn() across iterations, every rank starting together."""
    fn()
    times = []
    for _ in range(iters):
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        dist.barrier()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def timing_case(torch, dist, kittens, rank, dev, n, heads, heads_kv, dim) -> dict:
    """Part 3: ring vs one GPU on the whole sequence, causal, forward and forward + backward."""
    from kittens.distributed import ring_attention, shard

    world = dist.get_world_size()
    g = torch.Generator(device=dev).manual_seed(7)
    q, k, v = (torch.randn(1, x, n, dim, generator=g, device=dev).bfloat16() for x in (heads, heads_kv, heads_kv))
    ql, kl, vl = (shard(x, causal=True).requires_grad_() for x in (q, k, v))
    dl = torch.randn_like(ql)

    def ring_fwd():
        with torch.no_grad():
            ring_attention(ql, kl, vl, causal=True)

    def ring_fb():
        ring_attention(ql, kl, vl, causal=True).backward(dl)

    res = {"n": n, "heads": heads, "heads_kv": heads_kv, "dim": dim, "world": world,
           "ring_fwd_s": timed(torch, dist, ring_fwd)}
    try:
        res["ring_fwd_bwd_s"] = timed(torch, dist, ring_fb)
    except (NotImplementedError, RuntimeError) as e:
        res["ring_bwd_error"] = f"{type(e).__name__}: {e}"
    qs, ks, vs = (x.clone().requires_grad_() for x in (q, k, v))
    do = torch.randn_like(qs)

    def one_fwd():
        if rank == 0:
            with torch.no_grad():
                kittens.attention(qs, ks, vs, causal=True)

    def one_fb():
        if rank == 0:
            kittens.attention(qs, ks, vs, causal=True).backward(do)

    res["single_fwd_s"] = timed(torch, dist, one_fwd)
    res["fwd_efficiency"] = res["single_fwd_s"] / (world * res["ring_fwd_s"])
    try:
        res["single_fwd_bwd_s"] = timed(torch, dist, one_fb)
        if "ring_fwd_bwd_s" in res:
            res["fwd_bwd_efficiency"] = res["single_fwd_bwd_s"] / (world * res["ring_fwd_bwd_s"])
    except (NotImplementedError, RuntimeError) as e:
        res["single_bwd_error"] = f"{type(e).__name__}: {e}"
    flops = 4 * n * n * dim * heads / 2  # causal forward
    res["ring_fwd_tflops_per_gpu"] = flops / (world * res["ring_fwd_s"]) / 1e12
    res["single_fwd_tflops"] = flops / res["single_fwd_s"] / 1e12
    torch.cuda.empty_cache()
    return res


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kittens.distributed_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="write the results here (rank 0)")
    p.add_argument("--sizes", default="32768,20001", help="sequence lengths of the correctness cases")
    p.add_argument("--timing", default="32768,65536", help="sequence lengths timed (empty: none)")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--heads-kv", type=int, default=4)
    p.add_argument("--dim", type=int, default=128)
    args = p.parse_args(argv)
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        print("kittens.distributed_check needs torch", file=sys.stderr)
        return 2
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    world = int(os.environ.get("WORLD_SIZE", "0"))
    if gpus < 2 or world < 2:
        print(f"kittens.distributed_check SKIPPED: needs 2 or more GPUs and torchrun (found {gpus} GPUs, "
              f"WORLD_SIZE={world or 'unset'}); run: torchrun --nproc_per_node=2 -m kittens.distributed_check")
        return 2
    import kittens

    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    rank = dist.get_rank()
    say = (lambda *a: print(*a, flush=True)) if rank == 0 else (lambda *a: None)
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "world": dist.get_world_size(),
              "devices": [torch.cuda.get_device_name(i) for i in range(gpus)], "torch": torch.__version__,
              "nccl": ".".join(map(str, torch.cuda.nccl.version())), "commit": "".join(
                  c if isinstance(c, str) else ("+dirty" if c else "") for c in kittens._kittens.build_commit()),
              "env": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST")}}
    ok = True

    part1 = [None] * dist.get_world_size()
    dist.all_gather_object(part1, kernels_under_dist(torch, dist, kittens, rank, dev))
    dist.barrier()
    report["kernels_under_dist"] = part1
    report["cache"] = cache_state()
    ok &= all(r["ok"] for r in part1) and not report["cache"]["temporaries"]
    for r in part1:
        say(f"rank {r['rank']} on {r['device']}: first calls {r['first_calls_s']:.2f} s, matmul "
            f"{'bit-identical' if r['matmul']['bit_identical'] else r['matmul']['err']}, attention err "
            f"{r['attention']['err']:.2e} (sdpa {r['attention']['sdpa_err']:.2e}): {'ok' if r['ok'] else 'FAIL'}")
    say(f"cache {report['cache']}")

    report["ring"] = []
    sizes = [int(s) for s in args.sizes.split(",") if s]
    for i, n in enumerate(sizes):
        for causal in (False, True):
            try:
                r = ring_case(torch, dist, kittens, rank, dev, n, causal, args.heads, args.heads_kv, args.dim, i)
            except (RuntimeError, ValueError, NotImplementedError) as e:
                r = {"n": n, "causal": causal, "error": f"{type(e).__name__}: {e}", "pass": False}
            report["ring"].append(r)
            ok &= bool(r.get("pass", rank != 0))
            say(f"ring N={n} causal={causal}: " + json.dumps({k: v for k, v in r.items() if k not in ("n", "causal")}))

    report["timing"] = []
    for n in [int(s) for s in args.timing.split(",") if s]:
        try:
            t = timing_case(torch, dist, kittens, rank, dev, n, args.heads, args.heads_kv, args.dim)
        except (RuntimeError, ValueError, NotImplementedError) as e:
            t = {"n": n, "error": f"{type(e).__name__}: {e}"}
        report["timing"].append(t)
        say(f"timing N={n}: " + json.dumps(t))

    report["pass"] = bool(ok)
    say(f"distributed_check: {'PASS' if ok else 'FAIL'}")
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
