"""rmsnorm and layernorm (forward and backward) on rows in a row stride (issue 33, "any strides a model
passes"): ``x[:, :D]`` of a wider tensor goes to the kernel as it is. The CUDA path's plumbing runs here
with the launch recorded instead of made (no GPU): each row-strided input reaches the kernel with its
own address and its ``(rows, D)`` spec in its row stride, the problem names ``{tensor}_row_stride``,
and no aten copy, clone or contiguous runs. The ops on such views against float64 by FlashAttention's
rule (layernorm through the CPU interpreter, rmsnorm's CPU composite). The kernels' numerics at row
strides on the interpreter are crates/kittens-kernels/tests/norm_strides.rs; the CUDA half is
test_gpu_norm_strides.py.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the CPU suite runs without it)")

import kittens.ops as ops  # noqa: E402
from kittens import _dispatch  # noqa: E402
from test_torch_ops import _OpNames, check_rule, rand  # noqa: E402

COPIES = ("aten.copy", "aten.clone", "aten.contiguous", "aten._to_copy")
ROWS, D, WIDE = 37, 1000, 1024


class Recorded:
    """A prepared call that records its problem, tensor specs and launches instead of running."""

    def __init__(self, entry, problem, tensors):
        self.entry, self.problem, self.tensors, self.launches = entry, problem, tensors, []

    def launch(self, ptrs, stream, free=()):
        self.launches.append(tuple(ptrs))


@pytest.fixture
def recorded(monkeypatch):
    calls = []

    def prepare(key, entry, problem, tensors, device, free=(), extra=None):
        calls.append(Recorded(entry, dict(problem), list(tensors)))
        return _dispatch._store(key, (calls[-1], (0, ()), extra))

    monkeypatch.setattr(_dispatch._core, "_prepare", prepare)
    monkeypatch.setattr(_dispatch._core, "_raw_stream", lambda device: 0)
    _dispatch._HANDLES.clear()
    yield calls
    _dispatch._HANDLES.clear()


def sliced(seed, width=WIDE):
    """``(ROWS, D)`` rows of a ``(ROWS, width)`` tensor: row stride ``width``."""
    return rand(ROWS, width, seed=seed)[:, :D]


def check_in_place(call, names, views, run):
    """``run`` dispatched no copy; each of ``views`` reached the kernel at its own address and row stride."""
    with _OpNames() as mode:
        run()
    copies = [n for n in mode.names if n.startswith(COPIES)]
    assert not copies, copies
    specs = {t[0]: t for t in call.tensors}
    for name, v in zip(names, views):
        assert specs[name][1:3] == ([ROWS, D], [v.stride(0), 1]), specs[name]
        assert call.problem[f"{name}_row_stride"] == v.stride(0)
        assert call.launches[-1][names.index(name)] == v.data_ptr(), name


def test_rmsnorm_reads_sliced_rows_in_place(recorded):
    x, res, w = sliced(1), sliced(2, WIDE + 64), rand(D, seed=3)
    run = lambda: _dispatch.rmsnorm(x, res, w, 1e-6)  # noqa: E731
    run()
    (call,) = recorded
    assert call.entry == "rmsnorm"
    check_in_place(call, ["x", "residual"], [x, res], run)


def test_rmsnorm_backward_reads_sliced_rows_in_place(recorded):
    dy, r, dh, w = sliced(4), sliced(5), sliced(6, 2048), rand(D, seed=7)
    run = lambda: _dispatch.rmsnorm_backward(dy, r, w, dh, 1e-6)  # noqa: E731
    run()
    (call,) = recorded
    assert call.entry == "rmsnorm_bwd"
    # Launch order: dy, r, weight, dresidual_out.
    check_in_place(call, ["dy", "r", "weight", "dresidual_out"][:2], [dy, r], run)
    specs = {t[0]: t for t in call.tensors}
    assert specs["dresidual_out"][1:3] == ([ROWS, D], [2048, 1])
    assert call.problem["dresidual_out_row_stride"] == 2048
    assert call.launches[-1][3] == dh.data_ptr()


def test_layernorm_reads_sliced_rows_in_place(recorded):
    x, res, w, b = sliced(8), sliced(9, WIDE + 8), rand(D, seed=10), rand(D, seed=11)
    run = lambda: _dispatch.layernorm(x, res, w, b, 0.1, 7, 3, 1e-5)  # noqa: E731
    run()
    (call,) = recorded
    check_in_place(call, ["x", "residual"], [x, res], run)


def test_layernorm_backward_reads_sliced_rows_in_place(recorded):
    dy, dh, x, res, w = sliced(12), sliced(13), sliced(14, 2000), sliced(15), rand(D, seed=16)
    run = lambda: _dispatch.layernorm_backward(dy, dh, x, res, w, 0.0, 7, 3, 1e-5)  # noqa: E731
    run()
    (call,) = recorded
    assert call.entry == "layernorm_bwd"
    check_in_place(call, ["dy", "dh", "x", "residual"], [dy, dh, x, res], run)


def test_swiglu_reads_sliced_rows_in_place(recorded):
    gate, up = sliced(40), sliced(41, 2048)
    run = lambda: _dispatch.swiglu(gate, up)  # noqa: E731
    run()
    (call,) = recorded
    assert call.entry == "swiglu" and call.problem["packed"] is False
    check_in_place(call, ["gate", "up"], [gate, up], run)


def test_swiglu_packed_halves_of_a_slice_read_in_place(recorded):
    fused = rand(ROWS, 2 * D + 256, seed=42)[:, : 2 * D]  # a fused gate-and-up projection, sliced
    gate, up = fused[:, :D], fused[:, D:]
    with _OpNames() as mode:
        _dispatch.swiglu(gate, up)
    assert not [n for n in mode.names if n.startswith(COPIES)]
    (call,) = recorded
    assert call.problem["packed"] is True and call.problem["x_row_stride"] == 2 * D + 256
    assert ("x", [ROWS, 2, D], [2 * D + 256, D, 1], "bfloat16") in call.tensors
    assert call.launches[-1][0] == gate.data_ptr()
    # The backward op reads the halves in place as two row-strided tensors (its two gradients may not
    # alias one tensor).
    dy = sliced(43)
    with _OpNames() as mode:
        _dispatch.swiglu_backward(dy, gate, up, allow_packed=False)
    assert not [n for n in mode.names if n.startswith(COPIES)]
    bwd = recorded[-1]
    assert bwd.entry == "swiglu_bwd" and bwd.problem["packed"] is False
    for name, t in (("dy", dy), ("gate", gate), ("up", up)):
        assert bwd.problem[f"{name}_row_stride"] == t.stride(0)
    assert bwd.launches[-1][:3] == (dy.data_ptr(), gate.data_ptr(), up.data_ptr())


def test_rotary_reads_q_of_a_fused_projection_in_place(recorded):
    b, h, n, d = 2, 3, 37, 64
    qkv = rand(b, n, 3 * h, d, seed=50)
    q = qkv[:, :, h:2 * h].transpose(1, 2)  # (B, H, N, D): heads 64 apart, positions 3*H*D apart
    cos, sin = (t.to(torch.bfloat16) for t in ops.rotary_tables(n, d))
    with _OpNames() as mode:
        out = _dispatch.rotary(q, cos, sin, False)
    assert not [nm for nm in mode.names if nm.startswith(COPIES)]
    (call,) = recorded
    assert call.entry == "rotary" and call.problem["layout"] == "bshd"
    assert call.problem["x_strides"] == q.stride()[:3]
    assert call.tensors[0][2][:3] == list(q.stride()[:3])
    assert call.launches[-1][0] == q.data_ptr()
    assert out.shape == q.shape and out.transpose(1, 2).is_contiguous()  # the output dense in BSHD
    # What the op's fake gives is what the real op returns.
    assert ops._rotary_layout(q) == "bshd"


def test_dense_rows_name_no_stride(recorded):
    x, w = rand(ROWS, D, seed=17), rand(D, seed=18)
    _dispatch.rmsnorm(x, None, w, 1e-6)
    (call,) = recorded
    assert not any(k.endswith("_row_stride") for k in call.problem), call.problem
    assert ("x", [ROWS, D], [D, 1], "bfloat16") in call.tensors


def test_rows_the_kernels_cannot_read_in_place():
    # A stride that is not a multiple of 8, and a zero (expanded) one: the ops copy these first.
    for t in (sliced(19, D + 4), rand(1, D, seed=20).expand(ROWS, D)):
        c = _dispatch.rows_in_place(t)
        assert c.is_contiguous() and torch.equal(c, t)
    v = sliced(21)
    assert _dispatch.rows_in_place(v) is v
    # Rows not one stride apart, or a last dimension not contiguous: refused, naming the tensor.
    w = rand(D, seed=22)
    with pytest.raises(ValueError, match=r"x of shape \(1000, 37\).*last dimension contiguous"):
        _dispatch.rmsnorm(sliced(23).t(), None, rand(ROWS, seed=24), 1e-6)
    gapped = rand(2, 4, 2 * D, seed=25)[:, :3, :D]
    with pytest.raises(ValueError, match=r"residual of shape \(2, 3, 1000\).*one stride apart"):
        _dispatch.rmsnorm(rand(2, 3, D, seed=26), gapped, w, 1e-6)


def f64_rms(x, res, w, eps):
    h = x.double() + res.double()
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w.double(), h


def test_rmsnorm_op_on_sliced_rows_against_float64():
    x, res, w = sliced(26), sliced(27, 2048), rand(D, seed=28)
    y, h = ops.rmsnorm(x, res, w, 1e-6)
    ref, href = f64_rms(x, res, w, 1e-6)
    base = f64_rms(x, res, w, 1e-6)[0].to(torch.bfloat16)  # plain bf16 rounding of the result
    check_rule(y, base, ref, "rmsnorm y")
    check_rule(h, href.to(torch.bfloat16), href, "rmsnorm h")
    # The gradient through the view.
    g = rand(ROWS, D, seed=29)
    xv = x.detach().requires_grad_()
    assert xv.stride(0) == WIDE
    y, _ = ops.rmsnorm(xv, res, w, 1e-6)
    (dx,) = torch.autograd.grad(y, (xv,), g)
    x64 = x.double().requires_grad_()
    y64, _ = f64_rms(x64, res, w, 1e-6)
    (dref,) = torch.autograd.grad(y64, (x64,), g.double())
    xb = x.detach().clone().requires_grad_()
    hb = xb + res
    yb = (hb.float() * torch.rsqrt(hb.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16) * w
    (dbase,) = torch.autograd.grad(yb, (xb,), g)
    check_rule(dx, dbase, dref, "rmsnorm dx")


def test_layernorm_op_on_sliced_rows_against_float64():
    x, res, w, b = sliced(31), sliced(32, 2048), rand(D, seed=33), rand(D, seed=34)
    out = ops.layernorm(x, res, w, b, 0.0, 0, 0, 1e-5)
    h = x.double() + res.double()
    ref = torch.nn.functional.layer_norm(h, (D,), w.double(), b.double(), 1e-5)
    hb = x + res
    base = torch.nn.functional.layer_norm(hb, (D,), w, b, 1e-5)
    check_rule(out[0], base, ref, "layernorm y")
    check_rule(out[1], hb, h, "layernorm h")


def test_layernorm_backward_of_a_transposed_x_against_float64():
    """x whose last dimension is not contiguous: CUDA reads a dense copy (``rows_in_place``), the CPU
    composite reads it as it is; both give LayerNorm's gradients (the CPU op here, float64 rule)."""
    xt = rand(D, ROWS, seed=41).t()
    assert xt.stride(-1) != 1
    c = _dispatch.rows_in_place(xt)
    assert c.is_contiguous() and torch.equal(c, xt)
    res, w, b = rand(ROWS, D, seed=42), rand(D, seed=43), rand(D, seed=44)
    grad = torch.stack([rand(ROWS, D, seed=45), rand(ROWS, D, seed=46)])
    got = ops.layernorm_backward(grad, xt, res, w, b, 0.0, 0, 0, 1e-5)

    def grads(dtype):
        ins = [t.detach().to(dtype).requires_grad_() for t in (xt, res, w, b)]
        h = ins[0] + ins[1]
        y = torch.nn.functional.layer_norm(h, (D,), ins[2], ins[3], 1e-5)
        (y * grad[0].to(dtype) + h * grad[1].to(dtype)).sum().backward()
        return [t.grad for t in ins]

    for name, g, base, ref in zip(("dx", "dresidual", "dweight", "dbias"), got, grads(torch.bfloat16),
                                  grads(torch.float64)):
        check_rule(g, base, ref, f"layernorm_backward {name} of x.t()")
