"""The norm backwards under the ``KITTENS_NORM_BWD`` settings a measurement selects
(``kittens_kernels::rows::ROW_LOOP_VAR``: partial sums of dweight/dbias in shared memory, ``shared_acc``; a
row's later inputs loaded where used, ``late``; several blocks per SM, ``resident``; prefetch levels; every sum of
a row at one barrier, ``one_sum``; a warp per row, ``waves_per_row=1``), on an
H100/H200: the same checks against float64 as the default's (``test_gpu_layernorm_bwd``, ``test_gpu_norms``),
at row counts that are no multiple of the rows a block takes (1031 rows of 768: two rows per block) and
hidden sizes that are no multiple of a wave's 256-column strip. The dispatch keys its handles by the
variable, so each setting builds its own kernels.

Skips without a CUDA device of compute capability 9.0 (CI has none). Written without a GPU: not yet run.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an sm_90a GPU", allow_module_level=True)

import test_gpu_layernorm_bwd as ln  # noqa: E402
import test_gpu_norms as nm  # noqa: E402

SETTINGS = [
    "shared_acc=1,resident=2,prefetch=1,late=1",
    "shared_acc=1,resident=3,prefetch=0",
    "one_sum=1",
    "one_sum=1,resident=2,prefetch=0",
]

# A warp per row (no cross-wave sum): layernorm takes it up to D = 1024 without dropout.
WARP_PER_ROW = ["waves_per_row=1", "waves_per_row=1,shared_acc=1"]


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("rows,d", [(37, 1000), (1031, 768), (4133, 3080), (3, 4096), (301, 5128)])
@pytest.mark.parametrize("p", [0.0, 0.1])
def test_layernorm_backward_under_a_setting(monkeypatch, setting, rows, d, p):
    monkeypatch.setenv("KITTENS_NORM_BWD", setting)
    ln.test_layernorm_gradients_against_float64(rows, d, p)


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("rows,d", [(37, 1000), (1031, 768), (4133, 3080), (3, 5128)])
def test_rmsnorm_backward_under_a_setting(monkeypatch, setting, rows, d):
    monkeypatch.setenv("KITTENS_NORM_BWD", setting)
    nm.test_rmsnorm_values_and_gradients(rows, d, True)


@pytest.mark.parametrize("setting", WARP_PER_ROW)
@pytest.mark.parametrize("rows,d", [(37, 1000), (1031, 768)])
def test_a_warp_per_row(monkeypatch, setting, rows, d):
    monkeypatch.setenv("KITTENS_NORM_BWD", setting)
    ln.test_layernorm_gradients_against_float64(rows, d, 0.0)
    nm.test_rmsnorm_values_and_gradients(rows, d, True)
