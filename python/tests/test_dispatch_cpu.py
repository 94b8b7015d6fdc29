"""The CUDA path's checks without a GPU (``kittens._dispatch``): a call is refused, naming the argument
and the limit, before anything is prepared or launched — on ``meta`` tensors, which carry shapes,
strides and dtypes but no memory, so these run on any machine (CI has no GPU; torch is installed)."""

import pytest
import torch

from kittens import _dispatch

BF = torch.bfloat16


def meta(*shape, dtype=BF):
    return torch.empty(*shape, dtype=dtype, device="meta")


def test_attention_limits():
    for d in (160, 224, 320):  # the CPU interpreter takes 160 and 224; the sm_90a forward does not
        q = meta(1, 2, 16, d)
        with pytest.raises(ValueError, match="32, 64, 96, 128, 192 or 256"):
            _dispatch.attention(q, q, q, False, False)
    q = meta(1, 2, 16, 64)
    with pytest.raises(ValueError, match="no keys"):
        _dispatch.attention(q, meta(1, 2, 0, 64), meta(1, 2, 0, 64), False, False)
    with pytest.raises(ValueError, match="different devices"):
        _dispatch.attention(q, torch.empty(1, 2, 16, 64, dtype=BF), q, False, False)
    with pytest.raises(TypeError, match="k has dtype"):
        _dispatch.attention(q, meta(1, 2, 16, 64, dtype=torch.float16), q, False, False)
    with pytest.raises(ValueError, match="4-D"):
        _dispatch.attention(meta(2, 16, 64), q, q, False, False)


def test_matmul_limits():
    with pytest.raises(TypeError, match="a has dtype"):
        _dispatch.matmul(meta(8, 8, dtype=torch.float32), meta(8, 8))
    with pytest.raises(ValueError, match=r"a @ b"):
        _dispatch.matmul(meta(8, 16), meta(8, 8))
    with pytest.raises(ValueError, match=r"b must have one dimension contiguous.*strides \(32, 2\)"):
        _dispatch.matmul(meta(8, 16), meta(16, 32)[:, ::2])
    with pytest.raises(ValueError, match="a must have one dimension contiguous"):
        _dispatch.matmul(meta(8, 32)[:, ::2], meta(16, 8))
    with pytest.raises(ValueError, match="different devices"):
        _dispatch.matmul(meta(8, 8), torch.empty(8, 8, dtype=BF))


def test_matmul_prepares_transposed_and_sliced_operands_in_place(monkeypatch):
    """What the CUDA path hands the kernel for each layout: the tensors as the GEMM declares them (A
    stored (M, K) or (K, M), B (N, K) or (K, N), each row ``ld`` elements apart) and the problem that
    selects them; only rows TMA cannot address (a leading dimension or N no multiple of 8) take the
    padded copy."""
    seen = []

    def prepare(key, entry, problem, tensors, device, free=(), extra=None):
        seen.append((entry, problem, [t[:3] for t in tensors]))
        return _dispatch._store(key, (None, (0, ()), None))

    monkeypatch.setattr(_dispatch._core, "_prepare", prepare)
    m, k, n = 40, 24, 16
    cases = [
        # a, b, the problem's layout flags and leading dimensions, the declared a and b
        (meta(m, k), meta(k, n), (False, True, None), ((m, k), (k, 1)), ((k, n), (n, 1))),
        (meta(k, m).t(), meta(n, k).t(), (True, False, None), ((k, m), (m, 1)), ((n, k), (k, 1))),
        (meta(k, 64)[:, 8 : 8 + m].t(), meta(k, 48)[:, :n], (True, True, (64, 48, n)), ((k, m), (64, 1)),
         ((k, n), (48, 1))),
        (meta(m, 32)[:, :k], meta(n, 40)[:, 16 : 16 + k].t(), (False, False, (32, 40, n)), ((m, k), (32, 1)),
         ((n, k), (40, 1))),
    ]
    for a, b, (a_km, b_kn, ld), a_decl, b_decl in cases:
        seen.clear()
        _dispatch._prepare_matmul(("probe", len(cases), a.stride(), b.stride()), a, b)
        (entry, problem, tensors), = seen
        assert entry == "gemm_bf16"
        assert (problem["a_km"], problem["b_kn"], problem.get("ld")) == (a_km, b_kn, ld)
        assert tensors == [("a", list(a_decl[0]), list(a_decl[1])), ("b", list(b_decl[0]), list(b_decl[1])),
                           ("c", [m, n], [n, 1])]
    # out a slice of a bigger matrix's rows: C declared with its row stride.
    out = meta(m, 72)[:, 16 : 16 + n]
    ldc = _dispatch._out_rows(out, meta(m, k), meta(k, n))
    assert ldc == 72 and _dispatch._out_rows(meta(m, n), meta(m, k), meta(k, n)) is None
    seen.clear()
    _dispatch._prepare_matmul(("probe", "out"), meta(m, k), meta(k, n), ldc)
    (_, problem, tensors), = seen
    assert problem["ld"] == (k, n, 72) and tensors[2] == ("c", [m, n], [72, 1])
    with pytest.raises(ValueError, match="out must be .* row-major with rows at least 16"):
        _dispatch._out_rows(meta(m, 2 * n)[:, ::2], meta(m, k), meta(k, n))
    seen.clear()
    rec = _dispatch._prepare_matmul(("probe", "odd"), meta(m, 30)[:, :k], meta(k, n))
    assert not seen and rec[2] is _dispatch._matmul_padded  # lda 30: rows off 16 bytes


def test_layernorm_and_rotary_limits():
    x = meta(3, 1000)
    with pytest.raises(ValueError, match=r"weight .* must be \(D,\)"):
        _dispatch.layernorm(x, x, meta(999), meta(1000), 0.0, 0, 0, 1e-5)
    with pytest.raises(ValueError, match="dropout p"):
        _dispatch.layernorm(x, x, meta(1000), meta(1000), 1.0, 0, 0, 1e-5)
    # Rows in a row stride are read in place; a last dimension that is not contiguous is refused.
    with pytest.raises(ValueError, match=r"x of shape \(3, 1000\).*last dimension contiguous"):
        _dispatch.layernorm(meta(1000, 3).t(), x, meta(1000), meta(1000), 0.0, 0, 0, 1e-5)
    q = meta(1, 2, 16, 64)
    with pytest.raises(ValueError, match=r"cos .* must be \(N, D/2\)"):
        _dispatch.rotary(q, meta(16, 64), meta(16, 32), False)


def test_the_handle_table_is_bounded():
    before = dict(_dispatch._HANDLES)
    try:
        _dispatch._HANDLES.clear()
        for i in range(_dispatch._MAX_KEYS):
            _dispatch._HANDLES[("probe", i)] = (None, (0, ()), None)
        # An empty product is a call of its own: past the bound the table starts over, not grows.
        out = _dispatch.matmul(meta(0, 8), meta(8, 8))
        assert out.shape == (0, 8)
        assert len(_dispatch._HANDLES) == 1
    finally:
        _dispatch._HANDLES.clear()
        _dispatch._HANDLES.update(before)


def test_varlen_backward_prepares_the_registry_call(monkeypatch):
    """What the CUDA path hands ``attn_varlen_bwd`` (on meta tensors): the problem, and the tensors as
    its launches declare them — the packed tensors head-major ``(heads, total, d)`` with strides
    ``(d, heads·d, 1)``, the offsets, ALiBi's slopes after them, then dq, dk, dv; and the checks that
    need no device read, each naming the argument."""
    seen = []

    def prepare(key, entry, problem, tensors, device, free=(), extra=None):
        seen.append((entry, problem, [t[:3] for t in tensors]))
        return _dispatch._store(key, (None, (0, ()), None))

    monkeypatch.setattr(_dispatch._core, "_prepare", prepare)
    tq, tk, h, hk, d, b = 40, 30, 4, 2, 64, 3
    q, k = meta(tq, h, d), meta(tk, hk, d)
    lse, cu, slopes = meta(h, tq, dtype=torch.float32), meta(b + 1, dtype=torch.int32), meta(b, h, dtype=torch.float32)
    dq, dk, dv = _dispatch.attention_varlen_backward(q, q, k, k, q, lse, cu, cu, 20, 15, True, 0.1, alibi=slopes)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == k.shape
    entry, problem, specs = seen[-1]
    assert entry == "attn_varlen_bwd"
    assert problem == {"batch": b, "heads": h, "heads_kv": hk, "seq": 20, "seq_kv": 15, "dim": d, "causal": True,
                       "scale": 0.1, "total_q": tq, "total_k": tk, "alibi": True}
    qs, ks = ([h, tq, d], [d, h * d, 1]), ([hk, tk, d], [d, hk * d, 1])
    assert specs == [("q", *qs), ("k", *ks), ("v", *ks), ("o", *qs), ("do", *qs), ("lse", [h, tq], [tq, 1]),
                     ("cu_seqlens_q", [b + 1], [1]), ("cu_seqlens_k", [b + 1], [1]), ("alibi", [b, h], [h, 1]),
                     ("dq", *qs), ("dk", *ks), ("dv", *ks)]
    args = [q, q, k, k, q, lse, cu, cu, 20, 15, True, None]
    for i, value, name in ((5, meta(h, tq), "lse"), (6, meta(b + 1, dtype=torch.int64), "cu_seqlens_q"),
                           (1, meta(tq, h, 96), "head dim 96|k \\("), (0, meta(tq - 1, h, d), "grad_out")):
        a = list(args)
        a[i] = value
        if i == 1:  # q at head dim 96: k, v, out, grad_out then differ too; the head dim is named first
            a[0] = a[4] = value
            a[2] = a[3] = meta(tk, hk, 96)
        with pytest.raises(ValueError, match=name):
            _dispatch.attention_varlen_backward(*a)
    with pytest.raises(ValueError, match="alibi_slopes"):
        _dispatch.attention_varlen_backward(*args, alibi=meta(h, dtype=torch.float32))


def test_paged_alibi_prepares_the_registry_call(monkeypatch):
    """What the CUDA path hands ``attn_paged`` with ALiBi (on meta tensors): ``"alibi": True`` in the
    problem and the slopes declared after ``cache_seqlens``, as ``kittens_kernels::attn_paged`` declares
    them; slopes of the wrong shape named."""
    seen = []

    def prepare(key, entry, problem, tensors, device, free=(), extra=None):
        seen.append((entry, problem, [t[:3] for t in tensors]))
        return _dispatch._store(key, (None, (0, ()), None))

    monkeypatch.setattr(_dispatch._core, "_prepare", prepare)
    b, sq, h, hk, d, nb, page, mb = 3, 2, 4, 2, 64, 10, 16, 3
    q, kc = meta(b, sq, h, d), meta(nb, page, hk, d)
    table, lens = meta(b, mb, dtype=torch.int32), meta(b, dtype=torch.int32)
    slopes = meta(b, h, dtype=torch.float32)
    out, lse = _dispatch.attention_paged(q, kc, kc, table, lens, True, None, 1, alibi=slopes)
    assert out.shape == q.shape and lse.shape == (b, h, sq)
    entry, problem, specs = seen[-1]
    assert entry == "attn_paged" and problem["alibi"] is True
    names = [s[0] for s in specs]
    assert names == ["q", "k_cache", "v_cache", "block_table", "cache_seqlens", "alibi", "o", "lse"]
    assert specs[5] == ("alibi", [b, h], [h, 1])
    with pytest.raises(ValueError, match="alibi_slopes"):
        _dispatch.attention_paged(q, kc, kc, table, lens, False, None, 1, alibi=meta(h, dtype=torch.float32))
