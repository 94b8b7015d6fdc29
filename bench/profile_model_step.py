"""Where a training step of the Llama benchmark model spends its time, per arm: tokens/s and peak memory over
5 steps, then a torch.profiler table of 2 steps (sorted by CUDA self time). Usage on a GPU machine with the
package installed: python3 bench/profile_model_step.py SIZE SEQ BATCH ARMS, e.g. 125m 1024 8 hf,kittens."""
# Lead's profile of one training step per arm: where does the kittens arm's time go?
import sys, time, torch, transformers
from torch.profiler import profile, ProfilerActivity
from kittens import bench_model as bm
size, seq, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
arms = sys.argv[4].split(",")
cfg = bm.llama_config(transformers, size, seq)
dev = bm.Device(torch, "cuda")
g = torch.Generator().manual_seed(0)
for arm in arms:
    model = bm.make_model(torch, transformers, cfg, arm, 0, torch.float32, dev)
    model.train()
    fwd = torch.compile(model) if arm.endswith("compile") else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randint(0, 256, (batch, seq), generator=g).cuda()
    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(input_ids=x, labels=x).loss
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        return loss
    for _ in range(4): step()
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(5): step()
    torch.cuda.synchronize(); dt = (time.perf_counter() - t0) / 5
    print(f"=== {arm} {size} seq{seq} b{batch}: {dt*1e3:.1f} ms/step, {batch*seq/dt:,.0f} tok/s, peak {torch.cuda.max_memory_allocated()/2**30:.2f} GiB", flush=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(2): step()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=22, max_name_column_width=70), flush=True)
    del model, fwd, opt; torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
