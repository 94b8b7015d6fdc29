# Used by bench/run_attnbwd_h100.sh (PROFILE=1). Per-kernel times of one backward (B16 H16 N4096 D128, causal and not) from the torch profiler.
import torch
import kittens
from torch.profiler import profile, ProfilerActivity

for causal in (False, True):
    b, h, n, d = 16, 16, 4096, 128
    mk = lambda: torch.randn(b, n, h, d, device="cuda").to(torch.bfloat16).transpose(1, 2)
    q, k, v, do = mk(), mk(), mk(), mk()
    with torch.no_grad():
        out, lse = kittens.attention(q, k, v, causal=causal, return_lse=True)
    for _ in range(3):
        kittens._attention_backward(q, k, v, out, do, lse, causal)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            kittens._attention_backward(q, k, v, out, do, lse, causal)
        torch.cuda.synchronize()
    print(f"causal={causal}")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8))
