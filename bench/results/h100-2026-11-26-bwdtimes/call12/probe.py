# One atomic-form backward of B x H x N x 128 (non-causal), synchronised: does it finish, and is dQ right?
import sys, torch, kittens
b, h, n = (int(x) for x in sys.argv[1:4])
g = torch.Generator(device="cuda").manual_seed(n)
mk = lambda: torch.randn(b, h, n, 128, device="cuda", generator=g).to(torch.bfloat16)
q, k, v, do = mk(), mk(), mk(), mk()
out, lse = kittens.attention(q, k, v, return_lse=True)
dq, dk, dv = kittens._attention_backward(q, k, v, out, do, lse, False, form="atomic")
torch.cuda.synchronize()
dq2, dk2, dv2 = kittens._attention_backward(q, k, v, out, do, lse, False, form="two")
torch.cuda.synchronize()
rel = lambda a, r: ((a.double() - r.double()).norm() / r.double().norm()).item()
print(f"B{b} H{h} N{n}: {b*h*-(-n//128)} key blocks: finished; atomic vs two rel diff dq {rel(dq, dq2):.2e} dk {rel(dk, dk2):.2e} dv {rel(dv, dv2):.2e}")
