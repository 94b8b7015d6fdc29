import torch, kittens
torch.manual_seed(0)
for (m, n, k) in [(3000, 3000, 3000), (3000, 1000, 777), (2999, 3001, 3000)]:
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    ref = a.double() @ b.double().T
    ours = kittens.matmul(a, b.T) if hasattr(kittens, "matmul") else None
    tb = (a @ b.T).double()
    e_ours = ((ours.double() - ref).norm() / ref.norm()).item()
    e_t = ((tb - ref).norm() / ref.norm()).item()
    print(f"{m}x{n}x{k}: ours {e_ours:.2e} torch bf16 {e_t:.2e} {'ok' if e_ours <= 2 * e_t + 1e-4 else 'FAIL'}")
