// kittens strip prelude (CUDA): what the lowering of memory-bound (strip-tile) programs needs, no CUDA
// headers. The HIP twin is prelude_hip.h; both define the same `ks::` functions but the `cp.async` ones
// (AMD copies at issue: strip/copy.rs).
typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short bf16_t; // raw bf16 bits; arithmetic happens in fp32

namespace ks {

__device__ __forceinline__ float bf16_to_f32(bf16_t b) { return __uint_as_float((u32)b << 16); }

// Round to nearest, ties to even (NaN stays a quiet NaN): the IR's default rounding.
__device__ __forceinline__ bf16_t f32_to_bf16(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}

// Ties away from zero and toward zero (MI300X-attn §6's RTNA and RTZ); NaN stays a quiet NaN of its sign,
// as kittens_ir::numerics rounds.
__device__ __forceinline__ bf16_t f32_to_bf16_rna(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)(((u >> 16) & 0x8000u) | 0x7fc0u);
    return (bf16_t)((u + 0x8000u) >> 16);
}
__device__ __forceinline__ bf16_t f32_to_bf16_rz(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)(((u >> 16) & 0x8000u) | 0x7fc0u);
    return (bf16_t)(u >> 16);
}

// Philox 4x32-10 (Random123 §3.2): counter c, key (k0, k1); the function kittens_ir::philox defines.
__device__ __forceinline__ void philox(u32 c[4], u32 k0, u32 k1) {
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        if (r > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
        // One 32x32 -> 64-bit multiply per S-box (IMAD.WIDE.U32): both halves at once.
        const u64 p0 = (u64)0xD2511F53u * c[0], p1 = (u64)0xCD9E8D57u * c[2];
        const u32 n0 = (u32)(p1 >> 32) ^ c[1] ^ k0, n2 = (u32)(p0 >> 32) ^ c[3] ^ k1;
        c[0] = n0; c[1] = (u32)p1; c[2] = n2; c[3] = (u32)p0;
    }
}

// The 4 uniforms of element group `g` (elements 4g..4g+3) of the stream keyed by (seed, offset).
__device__ __forceinline__ void uniform4(float* u, u64 g, u32 s0, u32 s1, u32 o0, u32 o1) {
    u32 c[4] = {(u32)g, (u32)(g >> 32), o0, o1};
    philox(c, s0, s1);
#pragma unroll
    for (int i = 0; i < 4; ++i) u[i] = (float)(c[i] >> 8) * (1.0f / 16777216.0f);
}

__device__ __forceinline__ float uniform1(u64 e, u32 s0, u32 s1, u32 o0, u32 o1) {
    float u[4];
    uniform4(u, e >> 2, s0, s1, o0, o1);
    return u[e & 3];
}

} // namespace ks

namespace ks {
// D += A·B for one warp: mma.sync m16n8k16, bf16 inputs, f32 accumulators (PTX ISA §9.7.14.5.8,
// "Matrix Fragments for mma.m16n8k16"): a0..a3 two bf16 each of A's 16×16 rows (g, g+8) and columns
// (2t, 2t+8), b0..b1 of B's column g at rows 2t and 2t+8, c the 16×8 accumulator's (g, 2t..2t+1) and
// (g+8, 2t..2t+1), with g = lane/4 and t = lane%4.
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// ---- per-thread async copies (PTX ISA §9.7.9.25.3 cp.async; strip/copy.rs) ----------------------
// Shared-window address of a generic pointer (PTX ISA §9.7.9.21 cvta).
__device__ __forceinline__ u32 smem_u32(const void* p) {
    u64 a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return (u32)a;
}
// 16 bytes global -> shared, of which the first `src_bytes` (0 to 16) are read and the rest zeroed.
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src, u32 src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// Closes this thread's group of the copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most N of this thread's committed groups are in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
} // namespace ks
