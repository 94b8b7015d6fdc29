# Where the kittens arm of the 125M Llama spends host time: host ms of one forward and backward, then cProfile of 3 steps (python3 bench/profile_model_host.py on a GPU machine with the package installed).
import cProfile, pstats, sys, time, torch, transformers
from kittens import bench_model as bm
cfg = bm.llama_config(transformers, "125m", 1024)
dev = bm.Device(torch, "cuda")
model = bm.make_model(torch, transformers, cfg, "kittens", 0, torch.float32, dev); model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
x = torch.randint(0, 256, (8, 1024), generator=torch.Generator().manual_seed(0)).cuda()
def step():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=x, labels=x).loss
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
for _ in range(4): step()
torch.cuda.synchronize()
for what in ("fwd", "bwd"):
    pass
t0 = time.perf_counter()
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model(input_ids=x, labels=x).loss
t1 = time.perf_counter(); loss.backward(); t2 = time.perf_counter(); torch.cuda.synchronize(); t3 = time.perf_counter()
print(f"host: forward {1e3*(t1-t0):.1f} ms, backward {1e3*(t2-t1):.1f} ms, then wait {1e3*(t3-t2):.1f} ms")
pr = cProfile.Profile(); pr.enable()
for _ in range(3): step()
torch.cuda.synchronize(); pr.disable()
st = pstats.Stats(pr); st.sort_stats("tottime").print_stats(45); st.sort_stats("cumulative").print_stats(60)
