# One cuBLAS GEMM shape, launched a few times, for profiling what cuBLAS runs (kernel name, grid,
# memory traffic) under ncu: `ncu ... python3 bench/cublas_probe.py 3000 3000 3000`. C = A·Bᵀ in
# bf16 with B stored N×K (the layout `kittens bench gemm_bf16` compares against). Prints the median
# time of 20 launches (CUDA events) so that the run also says how fast it was outside the profiler.
import sys
import torch

m, n, k = (int(x) for x in sys.argv[1:4])
a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    c = a @ b.t()
times = []
for _ in range(20):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    c = a @ b.t()
    e1.record()
    torch.cuda.synchronize()
    times.append(e0.elapsed_time(e1))
times.sort()
ms = times[len(times) // 2]
print(f"cuBLAS {m}x{n}x{k}: {ms:.4f} ms, {2 * m * n * k / ms / 1e9:.1f} TFLOP/s (median of 20, one buffer: L2-warm)")
