# Causal attention with more blocks than SMs, so that the paired persistent grid
# (KernelBuilder::pair_long_short) runs two blocks per unit: forward (O and the log-sum-exp, both
# alignments) and backward (dQ, dK, dV) against float64, by the FlashAttention rule (ours vs f64 at
# most 2x torch's bf16 computation vs f64, plus a floor). Odd lengths, GQA, head dims 64 and 128,
# logits to +-64. Small enough for compute-sanitizer (bench/run_causalpair_h100.sh). Exit 1 on a failure.
import sys
import torch
import kittens

from attn_ref import rel, reference

failed = 0
cases = [(2, 40, 40, 777, 777, 128, "top_left", 1.0), (4, 48, 12, 600, 600, 64, "top_left", 8.0),
         (3, 32, 8, 450, 700, 128, "bottom_right", 1.0)]
if sys.argv[1:] == ["small"]:  # under compute-sanitizer: still more blocks than SMs in every launch
    cases = [(1, 40, 40, 777, 777, 64, "top_left", 1.0), (1, 48, 48, 300, 500, 128, "bottom_right", 1.0)]
for (b, h, hk, nq, nk, d, align, scale) in cases:
    g = torch.Generator(device="cuda").manual_seed(nq + d)
    mk = lambda hh, n: (scale * torch.randn(b, hh, n, d, device="cuda", generator=g)).to(torch.bfloat16)
    q, k, v, do = mk(h, nq), mk(hk, nk), mk(hk, nk), mk(h, nq)
    out = kittens.attention(q, k, v, causal=True, causal_align=align)
    ref = reference(q, k, v, align, torch.float64)
    base = reference(q, k, v, align, torch.bfloat16)
    e, eb = rel(out, ref), rel(base, ref)
    ok = e <= 2 * eb + 1e-5
    what = f"B{b} H{h}/{hk} Nq{nq} Nkv{nk} D{d} {align} x{scale}"
    print(f"fwd {what}: rel_err {e:.2e} (bf16 torch {eb:.2e}) {'ok' if ok else 'FAIL'}")
    failed += not ok
    if align == "top_left":
        # Backward against float64 autograd, torch's bf16 autograd as the baseline.
        qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
        reference(qd, kd, vd, align, torch.float64).backward(do.double())
        qb, kb, vb = (t.clone().requires_grad_() for t in (q, k, v))
        reference(qb, kb, vb, align, torch.bfloat16).backward(do)
        qo, ko, vo = (t.clone().requires_grad_() for t in (q, k, v))
        kittens.attention(qo, ko, vo, causal=True).backward(do)
        for name, ours, r, bl in [("dq", qo.grad, qd.grad, qb.grad), ("dk", ko.grad, kd.grad, kb.grad),
                                  ("dv", vo.grad, vd.grad, vb.grad)]:
            e, eb = rel(ours, r), rel(bl, r)
            ok = e <= 2 * eb + 1e-5
            print(f"bwd {what} {name}: rel_err {e:.2e} (bf16 torch {eb:.2e}) {'ok' if ok else 'FAIL'}")
            failed += not ok
torch.cuda.synchronize()
print("FAILED" if failed else "all ok", failed)
sys.exit(1 if failed else 0)
