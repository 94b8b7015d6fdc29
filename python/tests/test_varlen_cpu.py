"""kittens.flash_attn_varlen_func on the CPU interpreter against float64 per-sequence attention,
judged by FlashAttention's rule (error at most 2x the plain bfloat16 computation's + 2^-12): forward,
backward through autograd, a soft cap and sliding windows (forward and backward),
torch.compile(fullgraph=True), and bad input."""

import pytest

torch = pytest.importorskip("torch")

import kittens  # noqa: E402
from kittens import flash_attn_varlen_func  # noqa: E402

FLOOR = 2.0 ** -12


def _packed(lens_q, lens_k, heads, heads_kv, dim, seed):
    g = torch.Generator().manual_seed(seed)
    tq, tk = sum(lens_q), sum(lens_k)
    q = (torch.rand(tq, heads, dim, generator=g) * 4 - 2).bfloat16()
    k = (torch.rand(tk, heads_kv, dim, generator=g) * 4 - 2).bfloat16()
    v = (torch.rand(tk, heads_kv, dim, generator=g) * 2 - 1).bfloat16()
    cu = lambda ls: torch.tensor([0] + list(torch.tensor(ls).cumsum(0).tolist()), dtype=torch.int32)  # noqa: E731
    return q, k, v, cu(lens_q), cu(lens_k)


def _reference(q, k, v, lens_q, lens_k, causal, dtype, slopes=None, softcap=None, window=(-1, -1)):
    """Per-sequence dense attention in `dtype` (float64: the reference; bfloat16: the baseline); with
    ALiBi's `slopes` (batch, heads) the bias −slope·|i + len_k − len_q − j| on the scaled logits, after
    `softcap`'s cap·tanh(x / cap); a `window` (left, right) keeps keys within left before and right
    after i + len_k − len_q (FlashAttention's bottom-right alignment, -1 unbounded)."""
    outs, heads, heads_kv = [], q.shape[1], k.shape[1]
    oq = ok = 0
    for b, (lq, lk) in enumerate(zip(lens_q, lens_k)):
        qs = q[oq:oq + lq].to(dtype).transpose(0, 1)
        ks = k[ok:ok + lk].to(dtype).transpose(0, 1).repeat_interleave(heads // heads_kv, 0)
        vs = v[ok:ok + lk].to(dtype).transpose(0, 1).repeat_interleave(heads // heads_kv, 0)
        s = (qs @ ks.transpose(1, 2)) / q.shape[2] ** 0.5
        if softcap is not None:
            s = softcap * torch.tanh(s / softcap)
        if slopes is not None:
            dist = (torch.arange(lq)[:, None] + lk - lq - torch.arange(lk)[None, :]).abs()
            s = s - (slopes[b].to(s.dtype)[:, None, None] * dist.to(s.dtype))
        if causal:
            i = torch.arange(lq).unsqueeze(1)
            j = torch.arange(lk).unsqueeze(0)
            s = s.masked_fill(j > i + lk - lq, float("-inf"))
        diag = torch.arange(lq)[:, None] + lk - lq
        if window[0] >= 0:
            s = s.masked_fill(torch.arange(lk)[None, :] < diag - window[0], float("-inf"))
        if window[1] >= 0:
            s = s.masked_fill(torch.arange(lk)[None, :] > diag + window[1], float("-inf"))
        p = torch.softmax(s.float() if dtype == torch.bfloat16 else s, dim=-1).to(dtype)
        p = torch.nan_to_num(p, nan=0.0)  # rows with no key: output 0
        outs.append((p @ vs).transpose(0, 1))
        oq, ok = oq + lq, ok + lk
    return torch.cat(outs)


def _err(x, ref):
    return ((x.double() - ref).norm() / ref.norm()).item()


CASES = [
    ([1, 17, 0, 130, 30], [1, 17, 0, 130, 30], 2, 1, 64, True),
    ([1, 17, 0, 130, 30], [1, 17, 0, 130, 30], 2, 2, 64, False),
    ([45, 3, 20], [20, 33, 0], 4, 2, 128, True),
]


@pytest.mark.parametrize("lens_q,lens_k,heads,heads_kv,dim,causal", CASES)
def test_forward_and_backward_match_float64(lens_q, lens_k, heads, heads_kv, dim, causal):
    q, k, v, cu_q, cu_k = _packed(lens_q, lens_k, heads, heads_kv, dim, seed=len(lens_q) + dim)
    qs, ks, vs = (t.clone().requires_grad_() for t in (q, k, v))
    out = flash_attn_varlen_func(qs, ks, vs, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal)
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    ref = _reference(q64, k64, v64, lens_q, lens_k, causal, torch.float64)
    base = _reference(q, k, v, lens_q, lens_k, causal, torch.bfloat16)
    e, eb = _err(out, ref.detach()), _err(base, ref.detach())
    assert e <= 2 * eb + FLOOR, f"output error {e:.3e}, bf16 baseline {eb:.3e}"
    g = torch.rand(out.shape, generator=torch.Generator().manual_seed(7)).bfloat16() - 0.5
    out.backward(g)
    ref.backward(g.double())
    qb, kb, vb = (t.detach().clone().requires_grad_() for t in (q, k, v))
    _reference(qb, kb, vb, lens_q, lens_k, causal, torch.bfloat16).backward(g)
    for name, ours, want, bl in (("dq", qs, q64, qb), ("dk", ks, k64, kb), ("dv", vs, v64, vb)):
        e, eb = _err(ours.grad, want.grad), _err(bl.grad, want.grad)
        assert e <= 2 * eb + FLOOR, f"{name} error {e:.3e}, bf16 baseline {eb:.3e}"


OPTION_CASES = [
    # (lens_q, lens_k, heads, heads_kv, dim, causal, softcap, window)
    ([1, 40, 0, 70], [1, 40, 0, 70], 2, 1, 64, True, 5.0, (-1, -1)),
    ([45, 3, 20], [20, 33, 0], 4, 2, 64, False, None, (10, 3)),
    ([33, 70], [50, 70], 2, 2, 64, True, 30.0, (40, -1)),
    ([20, 70], [70, 9], 2, 1, 64, False, 2.0, (0, 0)),
    ([45, 0, 37], [20, 9, 70], 4, 2, 128, True, 5.0, (20, -1)),
]


@pytest.mark.parametrize("lens_q,lens_k,heads,heads_kv,dim,causal,softcap,window", OPTION_CASES)
def test_softcap_and_window_forward_and_backward_match_float64(lens_q, lens_k, heads, heads_kv, dim, causal,
                                                               softcap, window):
    """FlashAttention's soft cap and sliding window (aligned bottom-right in each sequence), windows
    narrower and wider than the sequences and cutting inside the kernels' blocks, rows that keep no key
    (output 0, gradients 0), an empty sequence, GQA: the output and, through autograd, dq, dk, dv."""
    q, k, v, cu_q, cu_k = _packed(lens_q, lens_k, heads, heads_kv, dim, seed=len(lens_q) * 3 + dim)
    qs, ks, vs = (t.clone().requires_grad_() for t in (q, k, v))
    out = flash_attn_varlen_func(qs, ks, vs, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal,
                                 softcap=softcap or 0.0, window_size=window)
    opts = dict(softcap=softcap, window=window)
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    ref = _reference(q64, k64, v64, lens_q, lens_k, causal, torch.float64, **opts)
    base = _reference(q, k, v, lens_q, lens_k, causal, torch.bfloat16, **opts)
    e, eb = _err(out, ref.detach()), _err(base, ref.detach())
    assert e <= 2 * eb + FLOOR, f"output error {e:.3e}, bf16 baseline {eb:.3e}"
    g = torch.rand(out.shape, generator=torch.Generator().manual_seed(9)).bfloat16() - 0.5
    out.backward(g)
    ref.backward(g.double())
    qb, kb, vb = (t.detach().clone().requires_grad_() for t in (q, k, v))
    _reference(qb, kb, vb, lens_q, lens_k, causal, torch.bfloat16, **opts).backward(g)
    for name, ours, want, bl in (("dq", qs, q64, qb), ("dk", ks, k64, kb), ("dv", vs, v64, vb)):
        if want.grad.abs().max() < 1e-9:
            # Every query keeps at most one key (a window (0, 0)): P is 1 or 0, dS = P∘(dP − D) is 0,
            # and so are dq and dk (up to rounding); no relative error to take.
            assert ours.grad.abs().max() <= FLOOR, f"{name} of a one-key window: {ours.grad.abs().max():.3e}"
            continue
        e, eb = _err(ours.grad, want.grad), _err(bl.grad, want.grad)
        print(f"{name}: rel_err {e:.3e} (bf16 {eb:.3e})")
        assert e <= 2 * eb + FLOOR, f"{name} error {e:.3e}, bf16 baseline {eb:.3e}"


def test_softcap_and_window_reach_the_backward_and_are_checked():
    """A backward through a soft cap or a window runs with the option (its gradients differ from the
    plain attention's: the option reached the backward); a bad window or soft cap is refused naming
    the argument."""
    lens = [5, 9]
    q, k, v, cu_q, cu_k = _packed(lens, lens, 2, 1, 64, seed=8)

    def dq(**opts):
        qs = q.clone().requires_grad_()
        flash_attn_varlen_func(qs, k, v, cu_q, cu_k, 9, 9, **opts).float().pow(2).sum().backward()
        return qs.grad.double()

    plain = dq()
    for opts in (dict(softcap=1.0), dict(window_size=(3, 0))):
        g = dq(**opts)
        assert torch.isfinite(g).all(), opts
        assert _err(g, plain) > 0.05, f"{opts}: the backward ignored the option"
    with pytest.raises(ValueError, match="window_size"):
        flash_attn_varlen_func(q, k, v, cu_q, cu_k, 9, 9, window_size=(-2, 0))
    with pytest.raises(ValueError, match="softcap"):
        flash_attn_varlen_func(q, k, v, cu_q, cu_k, 9, 9, softcap=-1.0)


def test_ops_are_defined_and_called_through_kittens_ops():
    """The varlen ops are ``ops._op`` ops (their bodies registered for ``ops.call``'s eager path) with
    ``ops._autograd``'s formula: an eager call (through the autograd.Function ``call`` makes) and a
    call of the torch op itself give the same output and gradients."""
    from kittens import ops, varlen  # noqa: F401  (importing varlen registers its ops)

    assert {"attention_varlen", "attention_varlen_backward"} <= set(ops._BODIES)
    assert "attention_varlen" in ops._FUNCTIONS
    lens = [5, 0, 19]
    q, k, v, cu_q, cu_k = _packed(lens, lens, 2, 1, 64, seed=3)
    g = torch.rand(q.shape, generator=torch.Generator().manual_seed(4)).bfloat16() - 0.5
    grads = []
    for fn in (lambda *a: ops.call("attention_varlen", *a), torch.ops.kittens.attention_varlen):
        qs, ks, vs = (t.clone().requires_grad_() for t in (q, k, v))
        out, _ = fn(qs, ks, vs, cu_q, cu_k, max(lens), max(lens), True, None, None)
        out.backward(g)
        grads.append((out.detach(), qs.grad, ks.grad, vs.grad))
    for a, b in zip(*grads):
        assert torch.equal(a, b)
    assert grads[0][1].abs().sum() > 0


def test_compiles_fullgraph():
    lens = [5, 0, 40]
    q, k, v, cu_q, cu_k = _packed(lens, lens, 2, 1, 64, seed=3)
    f = torch.compile(lambda *a: flash_attn_varlen_func(*a, causal=True), fullgraph=True)
    out = f(q, k, v, cu_q, cu_k, 40, 40)
    eager = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 40, 40, causal=True)
    assert torch.equal(out, eager)


def test_bad_offsets_name_the_argument():
    q, k, v, cu_q, cu_k = _packed([4, 6], [4, 6], 2, 2, 64, seed=5)
    with pytest.raises(ValueError, match="cu_seqlens_q: must not decrease"):
        flash_attn_varlen_func(q, k, v, torch.tensor([0, 7, 3], dtype=torch.int32), cu_k, 7, 6)
    with pytest.raises(ValueError, match="max_seqlen_k: 4"):
        flash_attn_varlen_func(q, k, v, cu_q, cu_k, 6, 4)
    with pytest.raises(ValueError, match="cu_seqlens_k: ends at 20"):
        flash_attn_varlen_func(q, k, v, cu_q, torch.tensor([0, 4, 20], dtype=torch.int32), 6, 16)
    with pytest.raises(ValueError, match="int32"):
        flash_attn_varlen_func(q, k, v, cu_q.long(), cu_k, 6, 6)
    with pytest.raises(NotImplementedError, match="block_table"):
        flash_attn_varlen_func(q, k, v, cu_q, cu_k, 6, 6, block_table=torch.zeros(1))


@pytest.mark.parametrize("lens_q,lens_k,heads,heads_kv,dim,causal", CASES)
def test_cuda_backward_composition_matches_float64(lens_q, lens_k, heads, heads_kv, dim, causal):
    """The PyTorch composition of the backward (``varlen._backward_torch``, the GPU tests' second
    reference beside float64), run here on CPU tensors with the forward's out and lse, against float64
    autograd by the rule. Its queries go
    in chunks; a small block size here makes it take several (a few query rows each)."""
    from kittens.varlen import _backward_torch

    q, k, v, cu_q, cu_k = _packed(lens_q, lens_k, heads, heads_kv, dim, seed=len(lens_q) + dim + 1)
    out, lse = torch.ops.kittens.attention_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal, None)
    g = torch.rand(out.shape, generator=torch.Generator().manual_seed(9)).bfloat16() - 0.5
    dq, dk, dv = _backward_torch(g, q, k, v, out, lse, cu_q, cu_k, causal, None, block_elems=4000)
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    _reference(q64, k64, v64, lens_q, lens_k, causal, torch.float64).backward(g.double())
    qb, kb, vb = (t.detach().clone().requires_grad_() for t in (q, k, v))
    _reference(qb, kb, vb, lens_q, lens_k, causal, torch.bfloat16).backward(g)
    for name, ours, want, bl in (("dq", dq, q64, qb), ("dk", dk, k64, kb), ("dv", dv, v64, vb)):
        e, eb = _err(ours, want.grad), _err(bl.grad, want.grad)
        assert e <= 2 * eb + FLOOR, f"{name} error {e:.3e}, bf16 baseline {eb:.3e}"


ALIBI_CASES = [
    ([1, 17, 0, 130, 30], [1, 17, 0, 130, 30], 2, 1, 64, True),
    ([45, 3, 20], [20, 33, 0], 4, 2, 128, False),
]


@pytest.mark.parametrize("lens_q,lens_k,heads,heads_kv,dim,causal", ALIBI_CASES)
def test_alibi_forward_and_backward_match_float64(lens_q, lens_k, heads, heads_kv, dim, causal):
    """``alibi_slopes`` (batch, nheads), slopes of both signs, through flash_attn_varlen_func on the CPU
    interpreter, against the float64 reference that adds the bias; the (nheads,) form equals its
    broadcast; the PyTorch composition of the backward (``varlen._backward_torch``) with the same
    slopes against float64 too."""
    from kittens.varlen import _backward_torch

    q, k, v, cu_q, cu_k = _packed(lens_q, lens_k, heads, heads_kv, dim, seed=len(lens_q) + dim + 5)
    slopes = (torch.rand(len(lens_q), heads, generator=torch.Generator().manual_seed(2)) - 0.3) * 0.5
    qs, ks, vs = (t.clone().requires_grad_() for t in (q, k, v))
    mq, mk = max(lens_q), max(lens_k)
    out = flash_attn_varlen_func(qs, ks, vs, cu_q, cu_k, mq, mk, causal=causal, alibi_slopes=slopes)
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    ref = _reference(q64, k64, v64, lens_q, lens_k, causal, torch.float64, slopes.double())
    base = _reference(q, k, v, lens_q, lens_k, causal, torch.bfloat16, slopes)
    e, eb = _err(out, ref.detach()), _err(base, ref.detach())
    assert e <= 2 * eb + FLOOR, f"output error {e:.3e}, bf16 baseline {eb:.3e}"
    plain = _reference(q.double(), k.double(), v.double(), lens_q, lens_k, causal, torch.float64)
    assert _err(plain, ref.detach()) > 10 * (2 * eb + FLOOR), "the slopes change the output"
    g = torch.rand(out.shape, generator=torch.Generator().manual_seed(7)).bfloat16() - 0.5
    out.backward(g)
    ref.backward(g.double())
    qb, kb, vb = (t.detach().clone().requires_grad_() for t in (q, k, v))
    _reference(qb, kb, vb, lens_q, lens_k, causal, torch.bfloat16, slopes).backward(g)
    out_d, lse = torch.ops.kittens.attention_varlen(q, k, v, cu_q, cu_k, mq, mk, causal, None, None, slopes)
    composed = _backward_torch(g, q, k, v, out_d, lse, cu_q, cu_k, causal, None, block_elems=4000, alibi=slopes)
    for name, ours, comp, want, bl in (("dq", qs, composed[0], q64, qb), ("dk", ks, composed[1], k64, kb),
                                       ("dv", vs, composed[2], v64, vb)):
        e, eb, ec = _err(ours.grad, want.grad), _err(bl.grad, want.grad), _err(comp, want.grad)
        assert e <= 2 * eb + FLOOR, f"{name} error {e:.3e}, bf16 baseline {eb:.3e}"
        assert ec <= 2 * eb + FLOOR, f"{name} (torch composition) error {ec:.3e}, bf16 baseline {eb:.3e}"
    per_head = flash_attn_varlen_func(q, k, v, cu_q, cu_k, mq, mk, causal=causal, alibi_slopes=slopes[0])
    bcast = flash_attn_varlen_func(q, k, v, cu_q, cu_k, mq, mk, causal=causal,
                                   alibi_slopes=slopes[0].expand(len(lens_q), heads).contiguous())
    assert torch.equal(per_head, bcast)


def test_alibi_bad_slopes_name_the_argument():
    q, k, v, cu_q, cu_k = _packed([5, 7], [5, 7], 2, 1, 64, seed=1)
    for bad in (torch.ones(3), torch.ones(2, 2, dtype=torch.float64), torch.tensor([1.0, float("nan")])):
        with pytest.raises(ValueError, match="alibi_slopes"):
            flash_attn_varlen_func(q, k, v, cu_q, cu_k, 7, 7, alibi_slopes=bad)
