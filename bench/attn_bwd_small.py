# Used by bench/run_attnbwd_h100.sh (MEMCHECK=1). A small attention backward for compute-sanitizer: two shapes (odd lengths, GQA, both masks, D64/D128).
import torch
import kittens
from kittens._backward import lse_reference

for (b, h, hk, n, d, causal) in [(1, 4, 2, 197, 64, True), (1, 2, 2, 130, 128, False)]:
    g = torch.Generator(device="cuda").manual_seed(n)
    mk = lambda hh: torch.randn(b, hh, n, d, device="cuda", generator=g).to(torch.bfloat16)
    q, k, v, do = mk(h), mk(hk), mk(hk), mk(h)
    out = kittens.attention(q, k, v, causal=causal)
    lse = lse_reference(q, k, causal)
    dq, dk, dv = kittens._attention_backward(q, k, v, out, do, lse, causal)
    torch.cuda.synchronize()
    print(b, h, hk, n, d, causal, [float(x.float().norm()) for x in (dq, dk, dv)])
