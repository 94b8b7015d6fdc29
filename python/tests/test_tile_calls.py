"""kittens.tile's CUDA call path on the CPU: the key of a call's prepared launch (one per configuration:
parameters, each tensor's shape, strides, dtype and device; never its data or address), one preparation
per configuration across a loop of calls, the bounded table, and the named errors raised before any
device is touched. The launch itself is test_gpu_tile.py's."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

import pathlib  # noqa: E402
import sys  # noqa: E402

import kittens  # noqa: E402
from kittens import tile  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python" / "examples"))
from swiglu import swiglu  # noqa: E402

BF = torch.bfloat16


def swiglu_tensors(rows, f=1024, dtype=BF, wide=False):
    x = torch.randn(rows, 4 * f if wide else 2 * f).to(dtype)
    return {"x": x[:, : 2 * f] if wide else x, "out": torch.empty(rows, f, dtype=dtype)}


def test_keys_differ_by_configuration_only():
    kern = kittens.compile(swiglu(1024))
    base = kern._key(swiglu_tensors(8), {"rows": 8})
    assert base == kern._key(swiglu_tensors(8), {"rows": 8}), "other data, same configuration"
    others = [
        kern._key(swiglu_tensors(8), {"rows": 4}),  # the parameter
        kern._key(swiglu_tensors(4), {"rows": 8}),  # a shape
        kern._key(swiglu_tensors(8, wide=True), {"rows": 8}),  # x's row stride (a view of a wider x)
        kern._key(swiglu_tensors(8, dtype=torch.float32), {"rows": 8}),  # the dtype
        kern._key({n: t.to("meta") for n, t in swiglu_tensors(8).items()}, {"rows": 8}),  # the device
        kern._key({**swiglu_tensors(8), "y": torch.empty(1)}, {"rows": 8}),  # an extra tensor
    ]
    assert len({base, *others}) == 1 + len(others)


class FakeProgram:
    """Stands in for the extension's Program: records each preparation; its handles record launches."""

    def __init__(self, program):
        self.tensors, self.name, self.prepared = program.tensors, program.name, []

    def prepare(self, tensors, params, device):
        self.prepared.append((tensors, params, device))
        launches = []

        class Handle:
            def launch(self, ptrs, stream):
                launches.append((ptrs, stream))

        h = Handle()
        h.launches = launches
        return h


def test_a_loop_of_calls_prepares_once_per_configuration(monkeypatch):
    kern = kittens.compile(swiglu(1024))
    fake = kern.program = FakeProgram(kern.program)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))  # CPU tensors pass as CUDA
    monkeypatch.setattr(tile, "_stream", lambda device: 7)
    monkeypatch.setattr(kittens, "_find_nvrtc", lambda: None)
    calls = [swiglu_tensors(8) for _ in range(5)]
    for ts in calls:
        kern(ts, rows=8)
    assert len(fake.prepared) == 1
    tensors, params, _ = fake.prepared[0]
    assert params == {"rows": 8}
    assert tensors == [("x", [8, 2048], [2048, 1], "bfloat16"), ("out", [8, 1024], [1024, 1], "bfloat16")]
    (handle,) = kern._handles.values()
    assert handle.launches == [([ts["x"].data_ptr(), ts["out"].data_ptr()], 7) for ts in calls]
    kern(swiglu_tensors(4), rows=4)  # another configuration: prepared once more
    kern(swiglu_tensors(8), rows=8)  # the first again: reused
    assert len(fake.prepared) == 2 and len(kern._handles) == 2
    monkeypatch.setattr(tile, "_MAX_KEYS", 2)  # a full table starts over
    kern(swiglu_tensors(2), rows=2)
    assert len(fake.prepared) == 3 and len(kern._handles) == 1


def test_call_errors_name_the_tensor():
    kern = kittens.compile(swiglu(1024))
    ts = swiglu_tensors(8)
    with pytest.raises(ValueError, match="swiglu_f1024: tensor `out` not given"):
        kern({"x": ts["x"]}, rows=8)
    with pytest.raises(ValueError, match="tensor `x` is not a CUDA tensor"):
        kern(ts, rows=8)
    with pytest.raises(ValueError, match="no tensor 'y'"):
        kern({**ts, "y": ts["x"]}, rows=8)
