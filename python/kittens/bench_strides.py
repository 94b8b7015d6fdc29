"""The strided attention kernels' speed against the dense ones on CUDA: ``python -m kittens.bench_strides``.

The same attention (B 8, H 16, H_kv 4, N 4096, D 128; causal and not) with q, k, v dense (B, H, N, D),
with a Hugging Face model's layouts (q a transposed (B, N, H, D) buffer, k and v dense: the strided
kernels, ``kittens_kernels::attn_strides``), and with q, k, v sliced out of one fused projection (the
strided kernels); forward, and forward + backward through autograd. Each line is printed when measured
(the first call of each layout compiles its kernels).
"""

import torch

import kittens


def _ms(f, n=20):
    f()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        f()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / n


def layouts(b, h, hk, n, d):
    bf = dict(device="cuda", dtype=torch.bfloat16)
    q, k, v = torch.randn(b, h, n, d, **bf), torch.randn(b, hk, n, d, **bf), torch.randn(b, hk, n, d, **bf)
    yield "dense", q, k, v
    yield "hf", q.transpose(1, 2).contiguous().transpose(1, 2), k, v
    qkv = torch.cat([q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)], dim=2)
    yield "fused", qkv[:, :, :h].transpose(1, 2), qkv[:, :, h:h + hk].transpose(1, 2), qkv[:, :, h + hk:].transpose(1, 2)


def main(b=8, h=16, hk=4, n=4096, d=128):
    for causal in (False, True):
        flops = 4 * b * h * n * n * d / (2 if causal else 1)
        for name, q, k, v in layouts(b, h, hk, n, d):
            fwd = _ms(lambda: kittens.attention(q, k, v, causal=causal))
            qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
            do = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)

            def step():
                o = kittens.attention(qg, kg, vg, causal=causal)
                torch.autograd.grad(o, (qg, kg, vg), do)

            both = _ms(step, n=10)
            print(f"B{b} H{h}/{hk} N{n} D{d} causal={causal} {name:>5}: fwd {fwd:.3f} ms "
                  f"({flops / fwd / 1e9:.0f} TFLOP/s), fwd+bwd {both:.3f} ms ({3.5 * flops / both / 1e9:.0f} TFLOP/s)",
                  flush=True)


if __name__ == "__main__":
    main()
