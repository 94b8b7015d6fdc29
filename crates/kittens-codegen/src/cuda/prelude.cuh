// Kittens CUDA device prelude for sm_90a (Hopper). Self-contained: NVRTC compiles it with no CUDA
// headers. Each wrapper is one PTX instruction (or a wait loop around one), with operand constraints that
// leave register allocation to the compiler (docs/architecture.md principle 4, MI300X-attn §2.1). PTX semantics cited
// from the PTX ISA 8.x/9.0 sections named beside each group. The wgmma wrappers, whose operand lists
// depend on N, are generated in Rust (kittens-codegen `cuda::wgmma_wrappers`) and appended after this.

typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short bf16_t; // raw bf16 bits; arithmetic happens in fp32

// The driver's CUtensorMap: 128 opaque bytes, 64-byte aligned (CUDA Driver API, "Tensor Map Object
// Management"). Kernels take it as `const __grid_constant__ CUtensorMap` so its address is a param-space
// address that TMA can read.
struct __align__(64) CUtensorMap {
    u64 opaque[16];
};

namespace kt {

// ---- addresses ------------------------------------------------------------------------------------
// Shared-window address of a generic pointer (PTX ISA §9.7.9.21 cvta).
__device__ __forceinline__ u32 smem_u32(const void* p) {
    u64 a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return (u32)a;
}
__device__ __forceinline__ u32 thread_id() { return threadIdx.x; }
__device__ __forceinline__ u32 lane_id() { return threadIdx.x & 31u; }
// Index of this thread's warpgroup (4 consecutive warps, 128 threads).
__device__ __forceinline__ u32 warpgroup_id() { return threadIdx.x / 128u; }

// ---- mbarriers (PTX ISA §9.7.13.15) -----------------------------------------------------------------
__device__ __forceinline__ void mbarrier_init(u32 bar, u32 arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}
// Arrive once and announce `bytes` of asynchronous (TMA) traffic that will complete this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// One probe: true once the phase with parity `phase` has completed. A fresh barrier is in phase 0, so
// waiting on parity 1 returns at once (the "immediately preceding phase" counts as complete).
__device__ __forceinline__ bool mbarrier_try_wait(u32 bar, u32 phase) {
    u32 done;
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done) : "r"(bar), "r"(phase) : "memory");
    return done != 0;
}
__device__ __forceinline__ void mbarrier_wait(u32 bar, u32 phase) {
    while (!mbarrier_try_wait(bar, phase)) {
    }
}

// ---- programmatic dependent launch ------------------------------------------------------------------
// Programmatic dependent launch (PTX ISA §9.7.13.9 griddepcontrol): wait until the grids this one was
// launched after (with programmatic stream serialization) have completed and their memory is
// visible; returns at once for a grid launched without it.
__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// ---- proxy fences (PTX ISA §9.7.12.4 membar/fence) -------------------------------------------------
// Orders this thread's generic-proxy shared-memory accesses before later async-proxy (TMA, wgmma)
// accesses: needed after mbarrier.init and after ordinary stores that TMA or wgmma will read.
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void fence_mbarrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// ---- TMA bulk tensor copies (PTX ISA §9.7.9.25) ------------------------------------------------------
__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"((u64)map) : "memory");
}
// Global -> shared, box at (c0 = innermost coordinate, c1), completing `bytes` on mbarrier `bar`.
__device__ __forceinline__ void tma_load_2d(u32 dst, const CUtensorMap* map, u32 bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
        ::"r"(dst), "l"((u64)map), "r"(bar), "r"(c0), "r"(c1) : "memory");
}
// The same for tensors of 3 to 5 dimensions (a `[b, h, s, d]` attention tensor is one 4-d map whose
// strides say BSHD or BHSD; out-of-range coordinates in any dimension read as zero).
__device__ __forceinline__ void tma_load_3d(u32 dst, const CUtensorMap* map, u32 bar, int c0, int c1, int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];"
        ::"r"(dst), "l"((u64)map), "r"(bar), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
__device__ __forceinline__ void tma_load_4d(u32 dst, const CUtensorMap* map, u32 bar, int c0, int c1, int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];"
        ::"r"(dst), "l"((u64)map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}
__device__ __forceinline__ void tma_load_5d(u32 dst, const CUtensorMap* map, u32 bar, int c0, int c1, int c2, int c3, int c4) {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6, %7}], [%2];"
        ::"r"(dst), "l"((u64)map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4) : "memory");
}
// ---- per-thread async copies (PTX ISA §9.7.9.25.3 cp.async, §9.7.13.15.13 cp.async.mbarrier.arrive) --
// 16 bytes global -> shared, of which the first `src_bytes` (0 to 16) are read and the rest zeroed.
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src, u32 src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// One arrival on `bar` once every cp.async this thread issued so far has landed; `.noinc`: the
// arrival is one of the barrier's expected count (the barrier is initialised to count it).
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(u32 bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
// Shared -> global, tracked by a bulk async-group of this thread.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, u32 src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
        ::"l"((u64)map), "r"(src), "r"(c0), "r"(c1) : "memory");
}
// Shared -> global element-wise f32 addition done by the L2 (PTX ISA §9.7.9.25.4.2,
// cp.reduce.async.bulk.tensor; the element type is the map's), tracked like a store.
__device__ __forceinline__ void tma_reduce_add_2d(const CUtensorMap* map, u32 src, int c0, int c1) {
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3}], [%1];"
        ::"l"((u64)map), "r"(src), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void tma_reduce_add_3d(const CUtensorMap* map, u32 src, int c0, int c1, int c2) {
    asm volatile("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], [%1];"
        ::"l"((u64)map), "r"(src), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
__device__ __forceinline__ void tma_reduce_add_4d(const CUtensorMap* map, u32 src, int c0, int c1, int c2, int c3) {
    asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];"
        ::"l"((u64)map), "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}
__device__ __forceinline__ void tma_reduce_add_5d(const CUtensorMap* map, u32 src, int c0, int c1, int c2, int c3,
                                                  int c4) {
    asm volatile("cp.reduce.async.bulk.tensor.5d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];"
        ::"l"((u64)map), "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4) : "memory");
}
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until at most N bulk groups still read their shared-memory source.
template <int N> __device__ __forceinline__ void tma_store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// The same box written into the shared memory of every CTA in `cta_mask` (thread-block cluster), each
// copy completing on the mbarrier at the same offset in its CTA (PTX ISA, ".multicast::cluster").
__device__ __forceinline__ void tma_load_2d_multicast(u32 dst, const CUtensorMap* map, u32 bar, int c0, int c1,
                                                      unsigned short cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%3, %4}], [%2], %5;"
        ::"r"(dst), "l"((u64)map), "r"(bar), "r"(c0), "r"(c1), "h"(cta_mask) : "memory");
}

// ---- thread-block clusters (PTX ISA §9.7.13.4, §9.7.9.19 mapa) ----------------------------------------
__device__ __forceinline__ u32 cluster_ctarank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
// The address of the same shared-memory offset in CTA `cta` of this cluster.
__device__ __forceinline__ u32 map_shared_to_cta(u32 addr, u32 cta) {
    u32 r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(cta));
    return r;
}
// Arrive on an mbarrier anywhere in the cluster (address from map_shared_to_cta), with the default
// .release.cta semantics, as CUTLASS's ClusterBarrier does. An explicit `.release.cluster` here compiled
// to MEMBAR.ALL.GPU + ERRBAR before every arrive (SASS, NVRTC 13.0), and the 2-CTA GEMM that used it ran
// at 0.4x of the single-CTA one on the H100 (docs/performance.md, "gemm_bf16").
__device__ __forceinline__ void mbarrier_arrive_cluster(u32 cluster_addr) {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(cluster_addr) : "memory");
}
// Every non-exited thread of the cluster meets here; orders shared-memory accesses across its CTAs.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
}

// ---- named barriers (PTX ISA §9.7.13.1 bar.sync) -------------------------------------------------
// Barrier `id` (1..15; 0 is __syncthreads) over `threads` threads, e.g. one warpgroup.
__device__ __forceinline__ void named_barrier(u32 id, u32 threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Arrive on barrier `id` without waiting (the producer side of a hand-over between warpgroups).
__device__ __forceinline__ void named_barrier_arrive(u32 id, u32 threads) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- warpgroup register reallocation (PTX ISA §9.7.17.1 setmaxnreg) ---------------------------------
// Takes effect only with a register cap at entry: the kernel needs __launch_bounds__(threads, 1).
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

// ---- wgmma bookkeeping (PTX ISA §9.7.15.5.x) ----------------------------------------------------------
// Orders register/shared accesses before the first wgmma of a sequence.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Waits until at most N committed wgmma groups of this warpgroup are pending.
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Pins a fragment after a wgmma wait: an empty asm that "reads and writes" every register keeps the
// compiler from moving reads of the accumulator (or writes of an A operand) above the wait, which it
// could otherwise do (the wgmma asm is the registers' only visible producer). CUTLASS's
// `warpgroup_fence_operand` does the same.
template <int N> __device__ __forceinline__ void reg_fence(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N> __device__ __forceinline__ void reg_fence(u32 (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// Shared-memory matrix descriptor (PTX ISA §9.7.15.5.1 "Matrix Descriptor Format"): start address,
// leading and stride byte offsets, all >> 4 in 14-bit fields, and the swizzle mode in bits 62-63
// (1 = 128B, 2 = 64B, 3 = 32B). For K-major tiles under a swizzle, the stride offset is the distance
// between 8-row groups (8 rows x swizzle bytes) and the leading offset is unused (set to 1).
enum Swizzle : u32 { SWIZZLE_NONE = 0, SWIZZLE_128B = 1, SWIZZLE_64B = 2, SWIZZLE_32B = 3 };
__device__ __forceinline__ u64 smem_desc(u32 addr, u32 lead_bytes, u32 stride_bytes, Swizzle sw) {
    u64 d = 0;
    d |= (u64)((addr & 0x3FFFFu) >> 4);
    d |= (u64)((lead_bytes & 0x3FFFFu) >> 4) << 16;
    d |= (u64)((stride_bytes & 0x3FFFFu) >> 4) << 32;
    d |= (u64)sw << 62;
    return d;
}
// A K-major bf16 tile of rows x 64 elements under the 128-byte swizzle, as TMA writes it.
__device__ __forceinline__ u64 desc_kmajor_sw128(u32 addr) { return smem_desc(addr, 16, 1024, SWIZZLE_128B); }
__device__ __forceinline__ u64 desc_kmajor_sw64(u32 addr) { return smem_desc(addr, 16, 512, SWIZZLE_64B); }
__device__ __forceinline__ u64 desc_kmajor_sw32(u32 addr) { return smem_desc(addr, 16, 256, SWIZZLE_32B); }

// An MN-major bf16 tile (rows = K, 64 contiguous elements of N per row) under the 128-byte swizzle, as
// TMA writes a `K x 64` box: 8-row groups of K are 1024 bytes apart (stride offset); the leading offset
// would step to the next 64-wide atom of N (one atom here). CUTLASS's `make_gmma_desc` documents the
// canonical MN-major layout ((8,8,m),(8,k)):((1,8,LBO),(64,SBO)) in 16-byte units.
__device__ __forceinline__ u64 desc_mnmajor_sw128(u32 addr, u32 atom_bytes) {
    return smem_desc(addr, atom_bytes, 1024, SWIZZLE_128B);
}

// ---- ldmatrix / stmatrix (PTX ISA §9.7.14.5.15-16) ----------------------------------------------------
__device__ __forceinline__ void ldmatrix_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
        : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
        : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void stmatrix_x4(u32 addr, u32 r0, u32 r1, u32 r2, u32 r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
        ::"r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}

// ---- conversions and stores ---------------------------------------------------------------------------
// Two fp32 to a packed bf16 pair, round to nearest even; `lo` lands in the low half (PTX ISA cvt).
__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
// Round toward zero (PTX ISA cvt .rz): the attention output's selectable RTZ (MI300X-attn §6).
__device__ __forceinline__ u32 pack_bf16x2_rz(float lo, float hi) {
    u32 r;
    asm("cvt.rz.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
// Round to nearest, ties away from zero (cvt has no such mode for bf16): half a bf16 ulp added to the
// magnitude bits, then truncated; a NaN stays a quiet NaN.
__device__ __forceinline__ u32 rna_bits(float x) {
    return x != x ? 0x7fc00000u : __float_as_uint(x) + 0x8000u;
}
__device__ __forceinline__ u32 pack_bf16x2_rna(float lo, float hi) {
    return (rna_bits(hi) & 0xffff0000u) | (rna_bits(lo) >> 16);
}
// 2^x by the special function unit (PTX ISA ex2.approx.ftz.f32: relative error about 2^-22; 2^-inf = +0).
__device__ __forceinline__ float exp2_approx(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}
// tanh(x) by the special function unit, one instruction (PTX ISA tanh.approx.f32, sm_75+: maximum
// relative error 2^-11, subnormal results flushed; tanh(±inf) = ±1): FlashAttention's soft cap.
__device__ __forceinline__ float tanh_approx(float x) {
    float r;
    asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}
// `*p += v` atomically, result unused (PTX ISA §9.7.12.7 red): the f32 reduction into a global
// accumulator that several blocks add to (the tile IR's `atomic_add`).
__device__ __forceinline__ void red_add_f32(float* p, float v) {
    asm volatile("red.global.add.f32 [%0], %1;" ::"l"(p), "f"(v) : "memory");
}
// `p[0] += a, p[1] += b` as one vector reduction (sm_90, PTX ISA 8.1 red's `.v2.f32`): half the
// instructions of two `red_add_f32`; `p` must be 8-byte aligned.
__device__ __forceinline__ void red_add_v2_f32(float* p, float a, float b) {
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(a), "f"(b) : "memory");
}
__device__ __forceinline__ void st_shared_b32(u32 addr, u32 v) {
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void st_shared_v2_f32(u32 addr, float a, float b) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(a), "f"(b) : "memory");
}
// Byte offset `off` inside a 1024-byte-aligned region laid out with the 128-byte swizzle (TMA's and
// wgmma's "128B" mode): the 16-byte chunk index is XORed with the row index modulo 8.
__device__ __forceinline__ u32 swizzle128(u32 off) { return off ^ (((off >> 7) & 7u) << 4); }
__device__ __forceinline__ void st_global_b32(void* p, u32 v) {
    asm volatile("st.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void st_global_b16(void* p, u32 v) {
    asm volatile("st.global.b16 [%0], %1;" ::"l"(p), "h"((unsigned short)v) : "memory");
}

// ---- the IR's per-wave async queue over mbarriers (used by lowered kernels) ---------------------------
// A tile-IR `wait_async(n)` means "at most n of my async loads still outstanding" (kittens-ir
// WaitQueue::Async). TMA completes on mbarriers, not on a counter, so each thread that issues (or shares)
// a load logs its barrier and phase parity here, and a wait completes the oldest entries in order. A
// barrier is re-armed only after its previous phase was waited on (push waits first if needed).
template <int Q> struct AsyncQueue {
    u32 bar[Q], parity[Q];
    u32 head = 0, tail = 0;
    __device__ __forceinline__ void wait_one() {
        mbarrier_wait(bar[head % Q], parity[head % Q]);
        ++head;
    }
    __device__ __forceinline__ void wait_outstanding(u32 n) {
        while (tail - head > n) wait_one();
    }
    __device__ __forceinline__ void push(u32 b, u32 p) {
        for (u32 i = head; i < tail; ++i) {
            if (bar[i % Q] == b) {
                while (head <= i) wait_one();
                break;
            }
        }
        if (tail - head == Q) wait_one();
        bar[tail % Q] = b;
        parity[tail % Q] = p;
        ++tail;
    }
};

} // namespace kt
