# Decoding (one query row against a long KV cache) through kittens.attention, which takes the key split
# where the tail planner says it pays, against F.scaled_dot_product_attention with the cuDNN and the flash
# backends on the same tensors, in one process: CUDA events, warm-up, median, two input copies (K and V
# are far larger than the L2 here). Every output checked against float64 by the FlashAttention rule.
# One query row sees every key, so no mask is needed on either side. Usage: python3 attn_decode_vs_sdpa.py [--json F]
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import kittens

SHAPES = [(1, 32, 32, 32768, 128), (4, 32, 8, 8192, 128), (8, 32, 8, 4096, 128), (1, 64, 8, 16384, 128)]
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def timed(fn, copies, warmup=5, iters=30):
    for i in range(warmup):
        fn(i % copies)
    times = []
    for i in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(i % copies)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def rel(x, ref):
    return float((x.double() - ref).norm() / ref.norm())


rows = []
for (b, h, hk, nk, d) in SHAPES:
    g = torch.Generator(device="cuda").manual_seed(nk + h)
    mk = lambda hh, n: torch.randn(b, hh, n, d, device="cuda", generator=g).to(torch.bfloat16)  # noqa: E731
    qs = [mk(h, 1) for _ in range(2)]
    ks = [mk(hk, nk) for _ in range(2)]
    vs = [mk(hk, nk) for _ in range(2)]
    rep = h // hk
    kd, vd = (t.double().repeat_interleave(rep, dim=1) for t in (ks[0], vs[0]))
    ref = torch.softmax((qs[0].double() @ kd.transpose(-1, -2)) * d ** -0.5, dim=-1) @ vd
    base = (torch.softmax((qs[0] @ ks[0].repeat_interleave(rep, 1).transpose(-1, -2)).float() * d ** -0.5, dim=-1)
            .to(torch.bfloat16) @ vs[0].repeat_interleave(rep, 1))
    ours = lambda i: kittens.attention(qs[i], ks[i], vs[i])  # noqa: E731
    err, err_base = rel(ours(0), ref), rel(base, ref)
    row = {"shape": f"B{b} H{h}/{hk} Nq1 Nkv{nk} D{d}", "rel_err": err, "rel_err_bf16": err_base,
           "passed": err <= 2 * err_base + 1e-5, "ours_ms": timed(ours, 2),
           "bytes": 2 * b * hk * nk * d * 2}
    row["ours_tbps"] = row["bytes"] / row["ours_ms"] / 1e9
    for name, be in BACKENDS.items():
        def theirs(i, be=be):
            with sdpa_kernel(be):
                return F.scaled_dot_product_attention(qs[i], ks[i], vs[i], enable_gqa=hk != h)
        try:
            theirs(0)
            row[f"{name}_ms"] = timed(theirs, 2)
            row[f"ratio_{name}"] = row[f"{name}_ms"] / row["ours_ms"]
        except RuntimeError as e:
            row[f"{name}_error"] = str(e).splitlines()[0][:120]
    rows.append(row)
    cells = " ".join(f"{n} {row[f'ratio_{n}']:.2f}x" if f"ratio_{n}" in row else f"{n} n/a" for n in BACKENDS)
    print(f"{row['shape']:28} ours {row['ours_ms']*1e3:8.1f} us ({row['ours_tbps']:.2f} TB/s)  {cells}  "
          f"rel_err {err:.2e} (bf16 {err_base:.2e}) {'ok' if row['passed'] else 'FAIL'}")
if "--json" in sys.argv:
    json.dump({"what": "decoding: kittens.attention vs SDPA (ratio = theirs/ours time)",
               "device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows},
              open(sys.argv[sys.argv.index("--json") + 1], "w"), indent=1)
sys.exit(0 if all(r["passed"] for r in rows) else 1)
