# The attention backward's FlashAttention-3 form (kittens._attention_backward(..., form="atomic"): D and
# a zeroed f32 dQ accumulator, key blocks adding dS·K with red.global.add, the bf16 conversion) against
# float64 autograd by the FlashAttention rule (ours vs f64 at most 2x torch's bf16 computation vs f64,
# plus a floor), beside the default two-launch form on the same tensors. Odd lengths, causal and not,
# GQA, head dims 64 and 128, both memory orders, logits to +-64, more key blocks than SMs in every
# case. `small`: two cases for compute-sanitizer (bench/run_bwddq_h100.sh). Exit 1 on a failure.
import sys
import torch
import kittens

from attn_ref import rel, reference

sms = torch.cuda.get_device_properties(0).multi_processor_count
failed = 0
# (B, H, H_kv, N_q, N_kv, D, causal, logit scale, layout)
cases = [(2, 40, 40, 777, 777, 128, True, 1.0, "bshd"), (4, 48, 12, 600, 600, 64, False, 8.0, "bshd"),
         (3, 32, 8, 450, 700, 128, False, 1.0, "bhsd"), (3, 24, 6, 1000, 1000, 128, True, 8.0, "bhsd"),
         (1, 16, 16, 2113, 2113, 64, False, 1.0, "bshd")]
if sys.argv[1:] == ["small"]:  # under compute-sanitizer: still more key blocks than SMs
    cases = [(1, 40, 40, 400, 400, 64, True, 1.0, "bshd"), (3, 48, 16, 333, 333, 128, False, 1.0, "bhsd")]
for (b, h, hk, nq, nk, d, causal, scale, layout) in cases:
    g = torch.Generator(device="cuda").manual_seed(nq + d + h)
    def mk(hh, n):
        t = scale * torch.randn(b, n, hh, d, device="cuda", generator=g)
        t = t.to(torch.bfloat16)
        return t.transpose(1, 2) if layout == "bshd" else t.transpose(1, 2).contiguous()
    q, k, v, do = mk(h, nq), mk(hk, nk), mk(hk, nk), mk(h, nq)
    blocks = b * hk * -(-nk // 128)
    what = f"B{b} H{h}/{hk} Nq{nq} Nkv{nk} D{d} {'causal' if causal else 'full'} {layout} x{scale} ({blocks} key blocks, {sms} SMs)"
    with torch.no_grad():
        out, lse = kittens.attention(q, k, v, causal=causal, return_lse=True)
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    reference(qd, kd, vd, "top_left" if causal else None, torch.float64).backward(do.double())
    qb, kb, vb = (t.clone().requires_grad_() for t in (q, k, v))
    reference(qb, kb, vb, "top_left" if causal else None, torch.bfloat16).backward(do)
    atomic = kittens._attention_backward(q, k, v, out, do, lse, causal, form="atomic")
    two = kittens._attention_backward(q, k, v, out, do, lse, causal, form="two")
    for name, ours, other, r, bl in zip(("dq", "dk", "dv"), atomic, two, (qd.grad, kd.grad, vd.grad),
                                        (qb.grad, kb.grad, vb.grad)):
        e, eb, e2 = rel(ours, r), rel(bl, r), rel(other, r)
        ok = bool(torch.isfinite(ours).all()) and e <= 2 * eb + 1e-5 and ours.stride() == other.stride()
        print(f"{what} {name}: atomic {e:.2e} two {e2:.2e} (bf16 torch {eb:.2e}) {'ok' if ok else 'FAIL'}")
        failed += not ok
    del qd, kd, vd, qb, kb, vb
    torch.cuda.empty_cache()
torch.cuda.synchronize()
print("FAILED" if failed else "all ok", failed)
sys.exit(1 if failed else 0)
