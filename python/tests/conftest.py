"""pytest configuration of the Python tests.

In CI (scripts/test-python.sh sets KITTENS_REQUIRE_TORCH=1; CI=true does too) torch must be importable:
the torch tests (test_torch_*.py, test_ring_torch_cpu.py) would otherwise skip, and a test that skips
in CI is not a test. Only the GPU tests (test_gpu*.py) skip there, for want of a GPU.
"""

import os

if os.environ.get("KITTENS_REQUIRE_TORCH") == "1" or os.environ.get("CI") == "true":
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise ImportError(
            "torch is required here (KITTENS_REQUIRE_TORCH=1 or CI=true): the torch tests must run, not "
            "skip; scripts/test-python.sh installs it from PyPI"
        ) from e
