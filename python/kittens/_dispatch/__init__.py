"""The one CUDA path of the torch ops: every kernel through a prepared call of the extension module
(``_kittens.prepare``, ``kittens_runtime::cuda::dispatch``), found by one dictionary lookup per call.

A call's key is everything the preparation checked: the op, each tensor's shape, strides, dtype and
device, and the op's settings. The first call of a key prepares it (the registry kernel's launches
for that problem, lowered, compiled or read from the disk cache, loaded; the tensors checked against
the kernel's declared layouts — any error is raised here, naming the argument); every later call
allocates the outputs (and any scratch the launches pass between them), reads the addresses and
enqueues. Nothing here synchronises, so a loop of calls can be captured in a CUDA graph after one
warm-up call.

What each op does here is only to say which registry kernel runs and how its tensors are seen as the
kernel declares them (e.g. layernorm's weight as a (rows, D) view with row stride 0); the checks,
launch configuration, tensor maps and launches are the extension module's, the same for every kernel.

The op families live in this package's modules (_gemm, _attn (with rotary), _rows (layernorm,
rmsnorm, swiglu, cross-entropy), _varlen, _paged) over one shared table (``_core``); their names are
this package's own, as before the split.
"""

from ._core import _HANDLES, _MAX_KEYS, _launch, _prepare, _store  # noqa: F401
from ._attn import (  # noqa: F401
    _layout_like,
    attention,
    attention_backward,
    attn_strides,
    rotary,
    rotary_out_layout,
)
from ._gemm import _matmul_padded, _out_rows, _prepare_matmul, matmul  # noqa: F401
from ._paged import attention_paged  # noqa: F401
from ._rows import (  # noqa: F401
    _packed,
    cross_entropy_,
    layernorm,
    layernorm_backward,
    layernorm_backward_h,
    rmsnorm,
    rmsnorm_backward,
    rows_in_place,
    swiglu,
    swiglu_backward,
)
from ._varlen import attention_varlen, attention_varlen_backward  # noqa: F401
