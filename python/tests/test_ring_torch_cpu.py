"""kittens.distributed.ring_attention itself — the torch.distributed sends and receives, the autograd
Function, the sharding helpers — run by 2 and 3 CPU processes over gloo, with float64 reference block
kernels in place of the GPU kernels, against float64 attention over the whole sequence and its autograd
gradients.

Needs torch (not installed by scripts/test-python.sh: torch is large); the GPU check
(``python -m kittens.distributed_check`` under torchrun) runs the same code on the kernels.
"""

import os
import tempfile

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the CPU suite runs without it)")
dist = pytest.importorskip("torch.distributed", reason="torch without torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import multiprocessing  # noqa: E402

import torch.multiprocessing as mp  # noqa: E402

# The rank processes fork from one server process that has imported torch and kittens once: a fresh
# interpreter per rank (mp.spawn) imported torch again each time, most of this file's time. A fork
# server, not a plain fork of this process, which has run torch's thread pools (a fork copies them
# mid-state). Preloading only takes effect before the server starts; later it is a no-op.
multiprocessing.set_forkserver_preload(["torch", "torch.distributed", "kittens"])


def run_ranks(fn, world, *args):
    """fn(rank, world, init, *args) on `world` processes from the fork server, `init` a file store."""
    with tempfile.TemporaryDirectory() as tmp:
        init = "file://" + os.path.join(tmp, "store")
        mp.start_processes(fn, args=(world, init, *args), nprocs=world, join=True, start_method="forkserver")


def ref_block_forward(q, k, v, causal, scale):
    """(out, lse) of one block in float64."""
    group = q.shape[1] // k.shape[1]
    s = torch.einsum("bhid,bhjd->bhij", q, k.repeat_interleave(group, 1)) * scale
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.einsum("bhij,bhjd->bhid", torch.exp(s - lse[..., None]), v.repeat_interleave(group, 1)), lse


def ref_block_backward(q, k, v, out, dout, lse, causal, scale):
    group = q.shape[1] // k.shape[1]
    kr, vr = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = torch.einsum("bhid,bhjd->bhij", q, kr) * scale
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    p = torch.exp(s - lse[..., None])
    dvr = torch.einsum("bhij,bhid->bhjd", p, dout)
    ds = p * (torch.einsum("bhid,bhjd->bhij", dout, vr) - (dout * out).sum(-1, keepdim=True))
    dq = torch.einsum("bhij,bhjd->bhid", ds, kr) * scale
    dkr = torch.einsum("bhij,bhid->bhjd", ds, q) * scale
    fold = lambda x: x.unflatten(1, (k.shape[1], group)).sum(2)  # noqa: E731
    return dq, fold(dkr), fold(dvr)


def full_attention(q, k, v, causal, scale):
    return ref_block_forward(q, k, v, causal, scale)[0]


def _rank_main(rank, world, init, n, causal, bshd):
    from kittens.distributed import BlockKernels, gather, positions, ring_attention, shard

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        g = torch.Generator().manual_seed(1234 + n)
        b, h, hkv, d, scale = 2, 4, 2, 8, 0.37
        q, k, v = (torch.randn(b, x, n, d, generator=g, dtype=torch.float64) for x in (h, hkv, hkv))
        dout = torch.randn(b, h, n, d, generator=g, dtype=torch.float64)
        # The reference: autograd through float64 attention over the whole sequence.
        qf, kf, vf = (x.clone().requires_grad_() for x in (q, k, v))
        ref = full_attention(qf, kf, vf, causal, scale)
        (ref * dout).sum().backward()

        def local(x):
            s = shard(x, causal=causal)
            if bshd:  # a (B, N, H, D) buffer seen as (B, H, N, D), as projections produce
                s = s.transpose(1, 2).contiguous().transpose(1, 2)
            return s.requires_grad_()

        ql, kl, vl = local(q), local(k), local(v)
        kernels = BlockKernels(ref_block_forward, ref_block_backward)
        seq_len = None if n % (2 * world) == 0 else n
        out = ring_attention(ql, kl, vl, causal=causal, scale=scale, seq_len=seq_len, kernels=kernels)
        assert out.stride() == ql.stride(), "output in q's memory order"
        (out * shard(dout, causal=causal)).sum().backward()
        for got, want in ((out, ref), (ql.grad, qf.grad), (kl.grad, kf.grad), (vl.grad, vf.grad)):
            full = gather(got.detach(), n, causal=causal)
            err = (full - want).abs().max().item()
            assert err <= 1e-12 * max(1.0, want.abs().max().item()), err
        pos = positions(n, causal=causal)
        assert torch.equal(shard(torch.arange(n)[None, None, :, None], causal=causal).flatten(), pos)
    finally:
        dist.destroy_process_group()
    # Checked and torn down: leave without the interpreter's exit, where gloo's worker threads can
    # abort the process ("terminate called without an active exception") on a loaded machine.
    os._exit(0)


@pytest.mark.parametrize("world,n,causal,bshd", [
    (2, 64, True, False), (2, 37, True, True), (2, 37, False, False), (3, 50, True, False), (3, 29, False, True),
])
def test_ring_attention_over_gloo_matches_full_attention(world, n, causal, bshd):
    run_ranks(_rank_main, world, n, causal, bshd)


def test_context_and_data_parallel_training_follow_the_single_process_run(tmp_path):
    """kittens.train_dist on 2 CPU processes (gloo): context parallel (ring attention with reference
    block kernels, sharded positions) and DDP (half the global batch each) give the single-process
    run's loss at every step."""
    import json
    import subprocess
    import sys

    text = tmp_path / "text.txt"
    text.write_bytes(open(__file__, "rb").read() * 4)
    common = ["--device", "cpu", "--layers", "2", "--d-model", "64", "--heads", "4", "--seq", "64", "--steps", "12",
              "--warmup", "2", "--lr", "3e-3", "--skip-timing", "2", "--text", str(text)]
    env = dict(os.environ, OMP_NUM_THREADS="1")

    def launch(world, *extra):
        out = tmp_path / f"run{len(list(tmp_path.iterdir()))}.json"
        pre = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={world}",
               "--standalone"] if world > 1 else [sys.executable]
        cmd = pre + ["-m", "kittens.train_dist", *common, *extra, "--json", str(out)]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        return json.load(open(out))

    single = launch(1, "--mode", "single", "--attn", "sdpa", "--batch", "2")
    cp = launch(2, "--mode", "cp", "--batch", "2")
    ddp = launch(2, "--mode", "ddp", "--attn", "sdpa", "--batch", "1")
    assert len(single["losses"]) == len(cp["losses"]) == len(ddp["losses"]) == 12
    assert sum(single["losses"][-3:]) < sum(single["losses"][:3]) - 0.3  # it trains
    for run in (cp, ddp):
        assert max(abs(a - b) for a, b in zip(single["losses"], run["losses"])) < 1e-4, run["mode"]


def _rank_kittens(rank, world, init, n, causal):
    """Ring attention with kittens' own block kernels (the CPU interpreter) in bfloat16."""
    import kittens
    from kittens.distributed import gather, ring_attention, shard

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        g = torch.Generator().manual_seed(77 + n)
        b, h, hkv, d = 1, 4, 2, 32
        q, k, v = ((torch.rand(b, x, n, d, generator=g) * 2 - 1).bfloat16() for x in (h, hkv, hkv))
        dout = (torch.rand(b, h, n, d, generator=g) * 2 - 1).bfloat16()
        qf, kf, vf = (x.double().requires_grad_() for x in (q, k, v))
        ref = full_attention(qf, kf, vf, causal, d ** -0.5)
        (ref * dout.double()).sum().backward()
        # The baseline of the rule: kittens.attention over the whole sequence in one process.
        qs, ks, vs = (x.clone().requires_grad_() for x in (q, k, v))
        one = kittens.attention(qs, ks, vs, causal=causal)
        one.backward(dout)
        ql, kl, vl = (shard(x, causal=causal).requires_grad_() for x in (q, k, v))
        seq_len = None if n % (2 * world) == 0 else n
        out = ring_attention(ql, kl, vl, causal=causal, seq_len=seq_len)
        out.backward(shard(dout, causal=causal))
        rel = lambda x, r: ((x.double() - r).norm() / r.norm()).item()  # noqa: E731
        for name, got, base, want in (("out", out, one, ref), ("dq", ql.grad, qs.grad, qf.grad),
                                      ("dk", kl.grad, ks.grad, kf.grad), ("dv", vl.grad, vs.grad, vf.grad)):
            full = gather(got.detach(), n, causal=causal)
            assert full.dtype == torch.bfloat16
            e, e1 = rel(full, want), rel(base.detach(), want)
            assert e <= 2 * e1 + 1e-5, f"{name}: ring {e:.3e} vs one process {e1:.3e}"
    finally:
        dist.destroy_process_group()
    # Checked and torn down: leave without the interpreter's exit, where gloo's worker threads can
    # abort the process ("terminate called without an active exception") on a loaded machine.
    os._exit(0)


@pytest.mark.parametrize("n,causal", [(37, True), (37, False), (40, True)])
def test_ring_attention_with_kittens_kernels_on_the_interpreter(n, causal):
    """The default block kernels (kittens.attention with return_lse, kittens._attention_backward) on
    2 gloo ranks, rectangular blocks included (odd n), within the FlashAttention rule of kittens'
    single-process attention and its backward."""
    run_ranks(_rank_kittens, 2, n, causal)


def test_torch_merge_is_the_numpy_merge_with_empty_rows():
    """merge_partials' one-pass torch form (lerp) against its general form on numpy, rows with no key
    in one part or in both included."""
    import numpy as np

    from kittens._ring_plan import merge_partials

    g = torch.Generator().manual_seed(3)
    oa, ob = torch.randn(2, 3, 9, 8, generator=g, dtype=torch.float64), torch.randn(2, 3, 9, 8, generator=g,
                                                                                    dtype=torch.float64)
    la, lb = torch.randn(2, 3, 9, generator=g, dtype=torch.float64) * 50, torch.randn(2, 3, 9, generator=g,
                                                                                      dtype=torch.float64) * 50
    la[:, :, 0] = lb[:, :, 0] = float("-inf")
    oa[:, :, 0] = ob[:, :, 0] = 0
    la[:, :, 1] = float("-inf")
    oa[:, :, 1] = 0
    lb[:, :, 2] = float("-inf")
    ob[:, :, 2] = 0
    o, lse = merge_partials(oa, la, ob, lb)
    on, lsen = merge_partials(oa.numpy(), la.numpy(), ob.numpy(), lb.numpy())
    np.testing.assert_allclose(o.numpy(), on, rtol=0, atol=1e-14)
    assert np.array_equal(lse.numpy(), lsen)
    assert torch.all(o[:, :, 0] == 0) and torch.all(lse[:, :, 0] == float("-inf"))
    assert torch.equal(o[:, :, 1], ob[:, :, 1]) and torch.equal(o[:, :, 2], oa[:, :, 2])


def test_model_flops_dense_part_matches_torch_flop_counter():
    """train_dist's model FLOPs without the attention term equal torch's own count of the demo GPT's
    matmuls over a forward and backward (attention replaced by q + k + v: no product of its own, and
    every projection still gets its gradient)."""
    from torch.utils.flop_counter import FlopCounterMode

    from kittens.train_dist import model_flops_per_step
    from kittens.train_demo import build_model

    layers, d, heads, vocab, rows, seq = 2, 48, 4, 256, 3, 37
    model = build_model(torch, lambda q, k, v: q + k + v, vocab, layers, d, heads, seq)
    x = torch.randint(0, vocab, (rows, seq))
    with FlopCounterMode(display=False) as counter:
        model(x, x).backward()
    attention = 3.5 * 2.0 * seq * seq * d * layers * rows
    assert model_flops_per_step(layers, d, vocab, rows, seq) - attention == counter.get_total_flops()


def test_plot_reports_out_of_memory_and_the_longest_reference(tmp_path, capsys):
    """A single-GPU record that ran out of memory is listed as not fitting and left out of the curves;
    a parallel run without a same-length reference is compared with the longest one that fit, said so."""
    import json

    from kittens.train_dist import plot

    def rec(mode, world, seq, tps, tflops, ref=False, fits=True):
        r = {"mode": mode, "world": world, "attn": "x", "fits": fits, "device": "dev", "losses": [3.0, 2.0],
             "final_loss": 2.0, "tokens_per_s": tps, "model_tflops_per_gpu": tflops, "max_memory_gib": 1.0,
             "config": {"layers": 2, "d": 64, "seq": seq, "batch": 1, "per_gpu_reference": ref}}
        if not fits:
            r.update(losses=[], final_loss=None, oom="out of memory: tried 3 GiB", device_total_gib=139.8)
        return r

    runs = [rec("single", 1, 16, 1000.0, 50.0, ref=True), rec("single", 1, 32, 200.0, 100.0, ref=True),
            rec("single", 1, 64, None, None, fits=False), rec("cp", 2, 64, 300.0, 90.0)]
    paths = []
    for i, r in enumerate(runs):
        paths.append(str(tmp_path / f"{i}.json"))
        json.dump(r, open(paths[-1], "w"))
    plot(paths, str(tmp_path / "p.png"))
    out = capsys.readouterr().out
    assert "seq 64 batch 1: does not fit on one GPU (dev, 139.8 GiB): out of memory: tried 3 GiB" in out
    # 300 / (2 x 200) against seq 32, the longest that fit; FLOP/s 90 / 100
    assert "scaling efficiency 75.0% vs one GPU at seq 32 (the longest it holds)" in out
    assert "90 vs 100: 90.0%" in out
    assert (tmp_path / "p.png").stat().st_size > 0
