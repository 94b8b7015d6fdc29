"""``python -m kittens.bench host`` on any machine: every row of the harness runs on meta tensors down the CUDA
path with the launches no-ops, and the harness puts back everything it replaced (the prepared-call table,
``Tensor.is_cuda``, the device check), so nothing after it sees the no-op handles."""

import os

import pytest

if os.environ.get("KITTENS_REQUIRE_TORCH") == "1" or os.environ.get("CI") == "true":
    import torch  # a missing torch is an error in CI, never a skip
else:
    torch = pytest.importorskip("torch", reason="torch is not installed")

from kittens import bench_host, nn as knn  # noqa: E402
from kittens._dispatch import _core  # noqa: E402


def test_every_row_runs_and_the_patches_are_undone():
    before = (_core._prepare, _core._raw_stream, knn.device_why, dict(_core._HANDLES))
    rows = bench_host.measure(torch, "meta", calls=2, rounds=1, model=False)
    assert rows and all("us_per_call" in r and r["us_per_call"] > 0 for r in rows), rows
    names = [r["case"] for r in rows]
    for want in ("matmul", "nn.Linear forward", "rms_norm", "apply_rotary", "swiglu", "nn.attention",
                 "flash_attn_with_kvcache, paged"):
        assert any(n.startswith(want) for n in names), names
    assert (_core._prepare, _core._raw_stream, knn.device_why, dict(_core._HANDLES)) == before
    assert not torch.empty(1, device="meta").is_cuda  # Tensor.is_cuda is torch's own again
    assert knn._why(torch.empty(1, device="meta")) is not None  # meta is refused again by the device check
