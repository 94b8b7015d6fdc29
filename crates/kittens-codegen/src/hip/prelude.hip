// kittens HIP device prelude for CDNA3 (gfx942) and CDNA4 (gfx950).
//
// Needs no ROCm headers: it is compiled with `-nogpuinc -nogpulib`, so it defines the few HIP keywords
// it uses itself. Every wrapper issues exactly one machine instruction and describes its operands with
// extended-asm constraints ("v" VGPR, "a" AGPR, "s" SGPR, "+v" tied read-write, "=&v" early clobber,
// "n" immediate), so the compiler keeps register allocation and data-flow tracking while we choose the
// opcode (MI300X-attn §2.1). Scheduling hints use the LLVM builtins the compiler understands (HipKittens D.4).
// Instructions a target lacks are only declared for that target: the assembler rejects them otherwise.
#ifndef KITTENS_HIP_PRELUDE
#define KITTENS_HIP_PRELUDE

#if !defined(__gfx942__) && !defined(__gfx950__)
#error "kittens prelude: compile with --offload-arch=gfx942 or --offload-arch=gfx950"
#endif

#ifndef __global__
#define __global__ __attribute__((global))
#endif
#ifndef __device__
#define __device__ __attribute__((device))
#endif
#ifndef __shared__
#define __shared__ __attribute__((shared))
#endif
#ifndef __forceinline__
#define __forceinline__ __inline__ __attribute__((always_inline))
#endif
#define KITTENS_DEV static __device__ __forceinline__
// Threads per block a kernel is compiled for (fixes the register budget the compiler plans with).
#define KITTENS_LAUNCH_BOUNDS(THREADS) __attribute__((amdgpu_flat_work_group_size(THREADS, THREADS)))

namespace kittens {

typedef unsigned int u32;
typedef unsigned long long u64;
typedef u32 u32x2 __attribute__((ext_vector_type(2)));
typedef u32 u32x4 __attribute__((ext_vector_type(4)));
typedef u32 u32x8 __attribute__((ext_vector_type(8)));
typedef int i32x4 __attribute__((ext_vector_type(4)));
typedef float f32x2 __attribute__((ext_vector_type(2)));
typedef float f32x4 __attribute__((ext_vector_type(4)));
typedef float f32x8 __attribute__((ext_vector_type(8)));
typedef float f32x16 __attribute__((ext_vector_type(16)));
// bf16 and f16 operands travel as raw 16-bit lanes: the MFMA reads bits, not C++ values.
typedef unsigned short b16x4 __attribute__((ext_vector_type(4)));
typedef unsigned short b16x8 __attribute__((ext_vector_type(8)));
// fp8 operands: 8 bytes (one 64-bit register pair) for the CDNA3 fp8 MFMAs, 32 bytes for f8f6f4.
typedef u32x2 fp8x8;
typedef u32x8 fp8x32;

// ---- work-item ids -------------------------------------------------------------------------------
KITTENS_DEV u32 thread_id() { return __builtin_amdgcn_workitem_id_x(); }
KITTENS_DEV u32 block_id_x() { return __builtin_amdgcn_workgroup_id_x(); }
KITTENS_DEV u32 block_id_y() { return __builtin_amdgcn_workgroup_id_y(); }
KITTENS_DEV u32 wave_id() { return __builtin_amdgcn_workitem_id_x() / 64; }
// The lane from the exec-independent bit counts (`v_mbcnt_lo/hi`, as HIP's `__lane_id`): no
// register input, so the compiler recomputes it where it is needed instead of holding the
// work-item id across a hot loop (gfx942's causal attention spilled that one register).
KITTENS_DEV u32 lane_id() {
  return __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
}
// The same lane index read where it is used and never moved: what is computed from it (an
// asynchronous load's per-step offsets) stays at its use instead of being hoisted out of the loop
// around it and held live across that loop.
KITTENS_DEV u32 lane_id_here() {
  u32 l;
  asm volatile("v_mbcnt_lo_u32_b32 %0, -1, 0\n\tv_mbcnt_hi_u32_b32 %0, -1, %0" : "=v"(l));
  __builtin_assume(l < 64u); // wave64: what the compiler knows of v_mbcnt's result
  return l;
}

// A kernel argument read from the kernarg segment at byte `offset` where it is used (late_args.rs in
// the lowering): the segment pointer passes through an empty asm, so the compiler can neither hoist
// the scalar load to the entry nor merge it with the entry's loads of the same argument.
template <class T> KITTENS_DEV T kernarg_late(u32 offset) {
  typedef const __attribute__((address_space(4))) unsigned char* kernarg_ptr;
  kernarg_ptr p = (kernarg_ptr)__builtin_amdgcn_kernarg_segment_ptr();
  asm volatile("" : "+s"(p));
  return *(const __attribute__((address_space(4))) T*)(p + offset);
}

// ---- MFMA ------------------------------------------------------------------------------------------
// For each matrix instruction, four forms:
//   NAME(a, b, c)       c += a*b with c tied to one VGPR range ("+v"): no accumulator rename, no copy;
//   NAME_zero(a, b)     fresh accumulator: literal 0 as C, result write-only and early-clobber ("=&v");
//   NAME_acc(a, b, c)   accumulator held in AGPRs ("+a"), A/B in VGPRs;
//   NAME_ab_agpr(a, b, c)  A/B read straight from AGPRs ("a"), which hardware allows on CDNA3/CDNA4 but
//                       the compiler never chooses by itself (HipKittens §3.2.1).
#define KITTENS_MFMA(NAME, OPCODE, AB, CD)                                                          \
  KITTENS_DEV void NAME(AB a, AB b, CD& c) {                                                         \
    asm volatile(OPCODE " %0, %1, %2, %0" : "+v"(c) : "v"(a), "v"(b));                               \
  }                                                                                                  \
  KITTENS_DEV CD NAME##_zero(AB a, AB b) {                                                           \
    CD d;                                                                                            \
    asm volatile(OPCODE " %0, %1, %2, 0" : "=&v"(d) : "v"(a), "v"(b));                               \
    return d;                                                                                        \
  }                                                                                                  \
  KITTENS_DEV void NAME##_acc(AB a, AB b, CD& c) {                                                   \
    asm volatile(OPCODE " %0, %1, %2, %0" : "+a"(c) : "v"(a), "v"(b));                               \
  }                                                                                                  \
  KITTENS_DEV void NAME##_ab_agpr(AB a, AB b, CD& c) {                                               \
    asm volatile(OPCODE " %0, %1, %2, %0" : "+v"(c) : "a"(a), "a"(b));                               \
  }

// Both targets (CDNA3 ISA §7.1 table of MFMA opcodes; CDNA4 keeps them).
KITTENS_MFMA(mfma_f32_16x16x16_bf16, "v_mfma_f32_16x16x16_bf16", b16x4, f32x4)
KITTENS_MFMA(mfma_f32_32x32x8_bf16, "v_mfma_f32_32x32x8_bf16", b16x4, f32x16)
KITTENS_MFMA(mfma_f32_16x16x16_f16, "v_mfma_f32_16x16x16_f16", b16x4, f32x4)
KITTENS_MFMA(mfma_f32_32x32x8_f16, "v_mfma_f32_32x32x8_f16", b16x4, f32x16)
KITTENS_MFMA(mfma_f32_16x16x32_fp8_fp8, "v_mfma_f32_16x16x32_fp8_fp8", fp8x8, f32x4)
KITTENS_MFMA(mfma_f32_32x32x16_fp8_fp8, "v_mfma_f32_32x32x16_fp8_fp8", fp8x8, f32x16)
KITTENS_MFMA(mfma_f32_16x16x4_f32, "v_mfma_f32_16x16x4_f32", float, f32x4)
#if defined(__gfx942__)
// xf32 exists on CDNA3 only; CDNA4 removed it.
KITTENS_MFMA(mfma_f32_16x16x8_xf32, "v_mfma_f32_16x16x8_xf32", f32x2, f32x4)
#endif
#if defined(__gfx950__)
// CDNA4's double-K bf16/f16 shapes and the f8f6f4 family (fp8 e4m3 operands by default).
KITTENS_MFMA(mfma_f32_16x16x32_bf16, "v_mfma_f32_16x16x32_bf16", b16x8, f32x4)
KITTENS_MFMA(mfma_f32_32x32x16_bf16, "v_mfma_f32_32x32x16_bf16", b16x8, f32x16)
KITTENS_MFMA(mfma_f32_16x16x32_f16, "v_mfma_f32_16x16x32_f16", b16x8, f32x4)
KITTENS_MFMA(mfma_f32_32x32x16_f16, "v_mfma_f32_32x32x16_f16", b16x8, f32x16)
KITTENS_MFMA(mfma_f32_16x16x128_f8f6f4, "v_mfma_f32_16x16x128_f8f6f4", fp8x32, f32x4)
KITTENS_MFMA(mfma_f32_32x32x64_f8f6f4, "v_mfma_f32_32x32x64_f8f6f4", fp8x32, f32x16)
#endif
#undef KITTENS_MFMA

// Compiler-scheduled forms, NAME_sched(a, b, c): c += a*b through the compiler's builtin, so the
// compiler allocates the accumulator (in AGPRs once the VGPRs run out) and may move the MFMA within its
// scheduling region, where sched_group_barrier patterns place it between loads. The 4-wave interleave
// uses them (HipKittens §3.3.2); the lowering fences every s_waitcnt so no MFMA rises above the wait
// its operands need.
typedef short s16x4 __attribute__((ext_vector_type(4)));
typedef int i32x8 __attribute__((ext_vector_type(8)));
KITTENS_DEV void mfma_f32_16x16x16_bf16_sched(b16x4 a, b16x4 b, f32x4& c) {
  c = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(__builtin_bit_cast(s16x4, a), __builtin_bit_cast(s16x4, b), c, 0, 0, 0);
}
#if defined(__gfx942__)
KITTENS_DEV void mfma_f32_16x16x32_fp8_fp8_sched(fp8x8 a, fp8x8 b, f32x4& c) {
  c = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(__builtin_bit_cast(long, a), __builtin_bit_cast(long, b), c, 0, 0, 0);
}
#endif
#if defined(__gfx950__)
typedef __bf16 bf16x8_t __attribute__((ext_vector_type(8)));
KITTENS_DEV void mfma_f32_16x16x32_bf16_sched(b16x8 a, b16x8 b, f32x4& c) {
  c = __builtin_amdgcn_mfma_f32_16x16x32_bf16(__builtin_bit_cast(bf16x8_t, a), __builtin_bit_cast(bf16x8_t, b), c, 0, 0, 0);
}
// fp8 e4m3 operands for both (format code 0 in cbsz/blgp), no scales.
KITTENS_DEV void mfma_f32_16x16x128_f8f6f4_sched(fp8x32 a, fp8x32 b, f32x4& c) {
  c = __builtin_amdgcn_mfma_scale_f32_16x16x128_f8f6f4(__builtin_bit_cast(i32x8, a), __builtin_bit_cast(i32x8, b), c, 0, 0, 0, 0, 0, 0);
}
#endif

// Pinned register tiles (HipKittens §3.2.1, D.3): the lowering names registers in the asm text and lists
// them as clobbers, so the compiler keeps its hands off those ranges. A kernel that pins AGPRs must also
// reserve them, because the compiler sizes its AGPR budget from the constraints it sees.
#define KITTENS_STR2(x) #x
#define KITTENS_STR(x) KITTENS_STR2(x)
#define KITTENS_RESERVE_AGPRS(LAST) asm volatile("" ::: KITTENS_STR(a##LAST))
// One MFMA of a pinned tile: D += A·B (or D = A·B, _ZERO) in exactly the registers the constraints
// name ("+{a[0:15]}", "{a[64:67]}", "v"). VOL 1: `asm volatile`, kept in the written order; VOL 0:
// plain `asm`, which the compiler may move within its scheduling region (the 4-wave interleave) as
// far as the operands' data dependencies allow. F names the MFMA's prelude function, which the host
// emulation calls instead.
#define KITTENS_ASM_0 asm
#define KITTENS_ASM_1 asm volatile
#define KITTENS_PINNED_MFMA(VOL, F, OPCODE, CD, CA, CB, D, A, B) \
  KITTENS_ASM_##VOL(OPCODE " %0, %1, %2, %0" : CD(D) : CA(A), CB(B))
#define KITTENS_PINNED_MFMA_ZERO(VOL, F, OPCODE, CD, CA, CB, D, A, B) \
  KITTENS_ASM_##VOL(OPCODE " %0, %1, %2, 0" : CD(D) : CA(A), CB(B))
// A tile pinned to AGPRs just written by another op (fill, transpose, load): its value moves to the
// AGPR file here, so that the accumulating MFMAs' "+a" constraints find it there without copies.
#define KITTENS_IN_AGPRS(X) asm volatile("" : "+a"(X))

// ---- LDS (shared memory) ---------------------------------------------------------------------------
// LDS byte address of a __shared__ object: the address-space cast yields the 32-bit LDS offset.
KITTENS_DEV u32 lds_addr(const void* p) {
  return (u32)(__SIZE_TYPE__)(const __attribute__((address_space(3))) void*)p;
}
// OFF is the instruction's 16-bit immediate byte offset: it costs no register and no address math.
template <int OFF = 0> KITTENS_DEV u32x4 ds_read_b128(u32 addr) {
  u32x4 r;
  asm volatile("ds_read_b128 %0, %1 offset:%2" : "=v"(r) : "v"(addr), "n"(OFF) : "memory");
  return r;
}
// The same read as a plain LDS load the compiler sees (it tracks the wait itself and may move the
// read within its region, where sched_group_barrier counts it as a DS read): the 4-wave interleave's.
template <int OFF = 0> KITTENS_DEV u32x4 ds_read_b128_sched(u32 addr) {
  typedef __attribute__((address_space(3))) u32x4 lds_u32x4;
  return *(const lds_u32x4*)(addr + OFF);
}
template <int OFF = 0> KITTENS_DEV u32x2 ds_read_b64(u32 addr) {
  u32x2 r;
  asm volatile("ds_read_b64 %0, %1 offset:%2" : "=v"(r) : "v"(addr), "n"(OFF) : "memory");
  return r;
}
template <int OFF = 0> KITTENS_DEV void ds_write_b64(u32 addr, u32x2 v) {
  asm volatile("ds_write_b64 %0, %1 offset:%2" : : "v"(addr), "v"(v), "n"(OFF) : "memory");
}
template <int OFF = 0> KITTENS_DEV void ds_write_b128(u32 addr, u32x4 v) {
  asm volatile("ds_write_b128 %0, %1 offset:%2" : : "v"(addr), "v"(v), "n"(OFF) : "memory");
}
#if defined(__gfx950__)
// CDNA4's transposing read: each lane gets four 16-bit elements of a column (HipKittens D.1).
template <int OFF = 0> KITTENS_DEV u32x2 ds_read_b64_tr_b16(u32 addr) {
  u32x2 r;
  asm volatile("ds_read_b64_tr_b16 %0, %1 offset:%2" : "=v"(r) : "v"(addr), "n"(OFF) : "memory");
  return r;
}
#endif

// ---- buffer loads (global memory through a buffer resource) ---------------------------------------
// A buffer resource is four SGPRs: 48-bit base, stride 0, the byte size (loads past it return 0, which
// handles ragged tiles for free), and dword3 = 0x00020000 (DATA_FORMAT = 32-bit; CDNA3 ISA §9.1.5,
// the value composable_kernel uses for gfx90a/gfx94x).
KITTENS_DEV i32x4 make_buffer_rsrc(const void* base, u32 num_bytes) {
  u64 p = (u64)base;
  i32x4 r;
  r.x = (int)(u32)p;
  r.y = (int)((u32)(p >> 32) & 0xffffu);
  r.z = (int)num_bytes;
  r.w = 0x00020000;
  return r;
}
// Straight to LDS: the data skips the register file and lands at M0 + OFF + lane*size. M0 is bound
// through the "{m0}" constraint, so the compiler sets it and knows it is live.
template <int OFF = 0> KITTENS_DEV void buffer_load_dword_lds(i32x4 rsrc, u32 voffset, u32 soffset, u32 lds) {
  asm volatile("buffer_load_dword %0, %1, %2 offen offset:%3 lds"
               : : "v"(voffset), "s"(rsrc), "s"(soffset), "n"(OFF), "{m0}"(lds) : "memory");
}
#if defined(__gfx950__)
// 16 bytes per lane straight to LDS exists on CDNA4 only.
template <int OFF = 0> KITTENS_DEV void buffer_load_dwordx4_lds(i32x4 rsrc, u32 voffset, u32 soffset, u32 lds) {
  asm volatile("buffer_load_dwordx4 %0, %1, %2 offen offset:%3 lds"
               : : "v"(voffset), "s"(rsrc), "s"(soffset), "n"(OFF), "{m0}"(lds) : "memory");
}
#endif
// To registers: CDNA3's GEMM double-buffers through the register file (HipKittens E.1, MI325X).
template <int OFF = 0> KITTENS_DEV u32 buffer_load_dword(i32x4 rsrc, u32 voffset, u32 soffset) {
  u32 r;
  asm volatile("buffer_load_dword %0, %1, %2, %3 offen offset:%4"
               : "=v"(r) : "v"(voffset), "s"(rsrc), "s"(soffset), "n"(OFF) : "memory");
  return r;
}
template <int OFF = 0> KITTENS_DEV u32x4 buffer_load_dwordx4(i32x4 rsrc, u32 voffset, u32 soffset) {
  u32x4 r;
  asm volatile("buffer_load_dwordx4 %0, %1, %2, %3 offen offset:%4"
               : "=v"(r) : "v"(voffset), "s"(rsrc), "s"(soffset), "n"(OFF) : "memory");
  return r;
}
// To registers through the LLVM builtins instead of inline asm: the compiler then knows the load is in
// flight and puts the `s_waitcnt vmcnt` before the data's first use, which it cannot do for an asm
// statement. Same resource words as make_buffer_rsrc; an offset past `num_bytes` reads 0, so a ragged
// tile's out-of-range chunks need no branch (the lowering points them at OUT_OF_RANGE, below).
typedef __amdgpu_buffer_rsrc_t buffer_rsrc_t;
KITTENS_DEV buffer_rsrc_t make_buffer_rsrc_t(const void* base, u32 num_bytes) {
  return __builtin_amdgcn_make_buffer_rsrc((void*)base, (short)0, (int)num_bytes, 0x00020000);
}
// `soffset` (uniform, an SGPR) is a tile's base-tile offset: the lanes then share one offset register
// for every base tile instead of one each.
KITTENS_DEV u32x4 buffer_load_b128(buffer_rsrc_t r, u32 voffset, u32 soffset = 0) {
  return __builtin_amdgcn_raw_buffer_load_b128(r, voffset, soffset, 0);
}
KITTENS_DEV u32x2 buffer_load_b64(buffer_rsrc_t r, u32 voffset, u32 soffset = 0) {
  return __builtin_amdgcn_raw_buffer_load_b64(r, voffset, soffset, 0);
}
KITTENS_DEV u32 buffer_load_b32(buffer_rsrc_t r, u32 voffset, u32 soffset = 0) {
  return __builtin_amdgcn_raw_buffer_load_b32(r, voffset, soffset, 0);
}
// 16- and 8-bit loads: the element-wise path of a chunk that crosses a tensor's last column.
KITTENS_DEV unsigned short buffer_load_b16(buffer_rsrc_t r, u32 voffset) {
  return __builtin_amdgcn_raw_buffer_load_b16(r, voffset, 0, 0);
}
KITTENS_DEV unsigned char buffer_load_b8(buffer_rsrc_t r, u32 voffset) {
  return __builtin_amdgcn_raw_buffer_load_b8(r, voffset, 0, 0);
}
// Tensors past 4 GiB: buffer offsets are 32-bit, so each tile load builds its resource at the tile's
// 64-bit origin, bounded by the bytes left in the tensor capped at 2^31 - 1; lanes address their
// elements relative to it, and an element outside the tensor takes OUT_OF_RANGE, which is at or past
// every such bound and so reads 0 (a load wholly past the bound; none straddles it).
constexpr u32 OUT_OF_RANGE = 0x80000000u;
// A tile whose origin lies at or past the tensor's end gets bound 0, so every lane reads 0: its rows may
// lie inside their own dimension while an outer coordinate does not (a prefetch of the attention
// backward's step past the last, in a query head past the last), and a wrapped `left` would cap at
// 2^31 − 1 and let those lanes read past the tensor.
KITTENS_DEV u32 rebased_bound(u64 span_bytes, u64 origin_bytes) {
  // Past the end the difference is negative (both are below 2^63): its sign masks the bound. Not a
  // 64-bit compare, which gfx9's scalar unit lacks (clang-19 made it a vector compare and spilled
  // gfx942's GEMM), nor a select on the sign (3 SGPR spills in gfx942's fp8 interleave).
  const u64 left = span_bytes - origin_bytes;
  const u32 hi = (u32)(left >> 32), lo = (u32)left;
  return ((hi | (lo >> 31)) != 0 ? 0x7fffffffu : lo) & ~(u32)((int)hi >> 31);
}
KITTENS_DEV i32x4 tile_rsrc(const void* tensor, u64 span_bytes, u64 origin_bytes) {
  return make_buffer_rsrc((const unsigned char*)tensor + origin_bytes, rebased_bound(span_bytes, origin_bytes));
}
KITTENS_DEV buffer_rsrc_t tile_rsrc_t(const void* tensor, u64 span_bytes, u64 origin_bytes) {
  return make_buffer_rsrc_t((const unsigned char*)tensor + origin_bytes, rebased_bound(span_bytes, origin_bytes));
}
template <int OFF = 0> KITTENS_DEV void buffer_store_dword(i32x4 rsrc, u32 voffset, u32 soffset, u32 v) {
  asm volatile("buffer_store_dword %0, %1, %2, %3 offen offset:%4"
               : : "v"(v), "v"(voffset), "s"(rsrc), "s"(soffset), "n"(OFF) : "memory");
}

// ---- waits, barriers, priority, scheduling fences -------------------------------------------------
// The asm loads above are invisible to the compiler's own wait insertion, so the program waits itself,
// leaving N operations in flight (MI300X-attn §2.2, HipKittens D.5).
template <int N> KITTENS_DEV void s_waitcnt_vmcnt() { asm volatile("s_waitcnt vmcnt(%0)" : : "n"(N) : "memory"); }
template <int N> KITTENS_DEV void s_waitcnt_lgkmcnt() { asm volatile("s_waitcnt lgkmcnt(%0)" : : "n"(N) : "memory"); }
// A wait orders memory, not the arithmetic on registers an asm load filled: the compiler may move a
// use of such a register above the wait. The lowering follows each wait with regs_landed(...) of the
// registers it retires: an empty volatile asm (kept after the wait) that reads and rewrites each
// ("+v"), so every later use reads its output.
template <class T> KITTENS_DEV void reg_landed(T& r) { asm volatile("" : "+v"(r)); }
template <class... T> KITTENS_DEV void regs_landed(T&... r) { (reg_landed(r), ...); }
KITTENS_DEV void s_barrier() { __builtin_amdgcn_s_barrier(); }
template <int P> KITTENS_DEV void s_setprio() { __builtin_amdgcn_s_setprio(P); }
// Instruction-class masks of llvm.amdgcn.sched.barrier / sched.group.barrier (IntrinsicsAMDGPU.td;
// HipKittens D.4). sched_barrier<SCHED_NONE> lets nothing cross.
enum : int { SCHED_NONE = 0x0, SCHED_ALU = 0x1, SCHED_VALU = 0x2, SCHED_SALU = 0x4, SCHED_MFMA = 0x8, SCHED_VMEM = 0x10,
             SCHED_VMEM_READ = 0x20, SCHED_VMEM_WRITE = 0x40, SCHED_DS = 0x80, SCHED_DS_READ = 0x100,
             SCHED_DS_WRITE = 0x200, SCHED_TRANS = 0x400 };
template <int MASK> KITTENS_DEV void sched_barrier() { __builtin_amdgcn_sched_barrier(MASK); }
template <int MASK, int SIZE, int SYNC> KITTENS_DEV void sched_group_barrier() {
  __builtin_amdgcn_sched_group_barrier(MASK, SIZE, SYNC);
}

// ---- fp32 -> bf16 packing in three rounding modes (MI300X-attn §6: RTNE, RTNA, RTZ) ----------------
// Each packs two floats into one 32-bit register, `lo` in bits 15:0.
KITTENS_DEV u32 f32_bits(float x) { return __builtin_bit_cast(u32, x); }
// Selector 0x07060302 picks bytes 3:2 of both sources: the upper halves, i.e. truncation (RTZ).
KITTENS_DEV u32 perm_hi16(u32 hi, u32 lo) {
  u32 r;
  asm volatile("v_perm_b32 %0, %1, %2, %3" : "=v"(r) : "v"(hi), "v"(lo), "s"(0x07060302u));
  return r;
}
KITTENS_DEV u32 pack_bf16_rtz(float lo, float hi) { return perm_hi16(f32_bits(hi), f32_bits(lo)); }
// Ties away from zero: add half an ulp of bf16 to the magnitude bits; a NaN stays a quiet NaN.
KITTENS_DEV u32 rtna_bits(float x) { return x != x ? 0x7fc00000u : f32_bits(x) + 0x8000u; }
KITTENS_DEV u32 pack_bf16_rtna(float lo, float hi) { return perm_hi16(rtna_bits(hi), rtna_bits(lo)); }
#if defined(__gfx950__)
// CDNA4 converts with round-to-nearest-even in one instruction.
KITTENS_DEV u32 pack_bf16_rtne(float lo, float hi) {
  u32 r;
  asm volatile("v_cvt_pk_bf16_f32 %0, %1, %2" : "=v"(r) : "v"(lo), "v"(hi));
  return r;
}
#else
// CDNA3 has no conversion instruction (HipKittens D.4): add 0x7fff plus the lowest kept bit.
KITTENS_DEV u32 rtne_bits(float x) {
  u32 u = f32_bits(x);
  return x != x ? 0x7fc00000u : u + 0x7fffu + ((u >> 16) & 1u);
}
KITTENS_DEV u32 pack_bf16_rtne(float lo, float hi) { return perm_hi16(rtne_bits(hi), rtne_bits(lo)); }
#endif

// ---- helpers the IR lowering uses ------------------------------------------------------------------
KITTENS_DEV int imin(int a, int b) { return a < b ? a : b; }
KITTENS_DEV int imax(int a, int b) { return a > b ? a : b; }
// One XOR term of a shared-memory swizzle (kittens_tile::Swizzle): the bits it flips in `off`.
template <int BITS, int BASE, int SHIFT> KITTENS_DEV u32 xor_flips(u32 off) {
  return (off >> SHIFT) & (((1u << BITS) - 1u) << BASE);
}
// HipKittens Algorithm 1 lines 1-12 (kittens_grid::remap::xcd_chunk is the host twin): de-interleave
// launch ids so each XCD owns runs of `chunk` consecutive logical ids; the tail keeps its order.
KITTENS_DEV u32 xcd_chunk(u32 id, u32 blocks, u32 n_xcd, u32 chunk) {
  const u32 n = n_xcd ? n_xcd : 1, c = chunk ? chunk : 1, per_cycle = n * c;
  if (id >= (blocks / per_cycle) * per_cycle) return id;
  const u32 local = id / n;
  return (local / c) * per_cycle + (id % n) * c + local % c;
}
// HipKittens Algorithm 1 lines 13-21 (host twin kittens_grid::remap::group_m): windows of `window` rows.
KITTENS_DEV void group_m(u32 xy, u32 rows, u32 cols, u32 window, int& row, int& col) {
  const u32 w = window ? window : 1, per_group = w * cols, first_row = (xy / per_group) * w;
  u32 h = rows > first_row ? rows - first_row : 0;
  h = h < w ? h : w;
  h = h ? h : 1;
  const u32 l = xy % per_group;
  row = (int)(first_row + l % h);
  col = (int)(l / h);
}
// fp32 -> bf16 bits of one value in each rounding mode (the packed forms above take two).
KITTENS_DEV unsigned short bf16_rtz(float x) { return (unsigned short)(f32_bits(x) >> 16); }
KITTENS_DEV unsigned short bf16_rtna(float x) { return (unsigned short)(rtna_bits(x) >> 16); }
KITTENS_DEV unsigned short bf16_rtne(float x) {
  const u32 u = f32_bits(x);
  return (unsigned short)((x != x ? 0x7fc00000u : u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// ---- register-tile math and lane exchanges (softmax in attention, HipKittens E.3) ------------------
KITTENS_DEV float bf16_to_f32(unsigned short h) { return __builtin_bit_cast(float, (u32)h << 16); }
// 2^x as one v_exp_f32 (1 ULP; exp2(-inf) is 0), without the range fix-up the compiler adds to
// exp2f for results below 2^-126 (a compare, a select and an ldexp per value, and their constants
// held in VGPRs): a softmax weight that small is flushed to 0, as CUDA's ex2.approx.ftz flushes it.
KITTENS_DEV float exp2_f32(float x) { return __builtin_amdgcn_exp2f(x); }
// The value lane (lane ^ M) holds: ds_bpermute (through LDS hardware, no LDS memory), tracked by the
// compiler's lgkmcnt. Reductions over the lanes that share a row or column use it as a butterfly.
template <int M> KITTENS_DEV float shfl_xor_f32(float v) {
  const int src = (int)((lane_id() ^ (u32)M) << 2);
  return __builtin_bit_cast(float, __builtin_amdgcn_ds_bpermute(src, __builtin_bit_cast(int, v)));
}
#if defined(__gfx950__)
// ds_read_b64_tr_b16 through the compiler builtin (the compiler tracks its lgkmcnt): `p` points into a
// `__shared__` array; the lane exchange it performs is described in lds_tr.rs (HipKittens D.1).
typedef short i16x4 __attribute__((ext_vector_type(4)));
KITTENS_DEV b16x4 ds_read_tr_b16(const unsigned char* p) {
  typedef __attribute__((address_space(3))) i16x4 lds_i16x4;
  typedef __attribute__((address_space(3))) unsigned char lds_u8;
  return __builtin_bit_cast(b16x4, __builtin_amdgcn_ds_read_tr16_b64_v4i16((lds_i16x4*)(lds_u8*)p));
}
#endif
// Orders one wave's LDS accesses across lanes (a register remap through a per-wave LDS scratch): a
// wave's DS instructions execute in order, so only the compiler must not move accesses across it.
KITTENS_DEV void wave_sync() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}

}  // namespace kittens
#endif  // KITTENS_HIP_PRELUDE
