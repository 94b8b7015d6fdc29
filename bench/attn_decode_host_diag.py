# Decoding through kittens.attention timed two ways: one call between synchronizations (what
# bench/attn_decode_vs_sdpa.py does) and 20 calls queued; and with the CUDA default memory pool keeping its
# memory (release threshold UINT64_MAX) instead of returning it at every synchronize.
import ctypes, statistics, torch, kittens
cu = ctypes.CDLL("libcuda.so.1")
def timed(fn, iters=30):
    for _ in range(5): fn()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
    return statistics.median(ts) * 1e3
shapes = [(1, 32, 32, 32768), (4, 32, 8, 8192), (8, 32, 8, 4096)]
def run(label):
    for (b, h, hk, nk) in shapes:
        q = torch.randn(b, h, 1, 128, device="cuda").bfloat16()
        k = torch.randn(b, hk, nk, 128, device="cuda").bfloat16()
        v = torch.randn(b, hk, nk, 128, device="cuda").bfloat16()
        t = timed(lambda: kittens.attention(q, k, v))
        # 20 calls back to back, one sync: host-bound if the GPU waits for the launches
        a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(20): kittens.attention(q, k, v)
        e.record(); e.synchronize()
        print(f"{label:10} B{b} H{h}/{hk} Nkv{nk}: {t:7.1f} us per call (synced), {a.elapsed_time(e)*1e3/20:7.1f} us per call (20 queued)")
run("default")
dev = ctypes.c_int(); cu.cuDeviceGet(ctypes.byref(dev), 0)
pool = ctypes.c_void_p(); r1 = cu.cuDeviceGetDefaultMemPool(ctypes.byref(pool), dev)
val = ctypes.c_uint64(2**64 - 1); r2 = cu.cuMemPoolSetAttribute(pool, 4, ctypes.byref(val))  # CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4
print("pool threshold set:", r1, r2)
run("keep")
