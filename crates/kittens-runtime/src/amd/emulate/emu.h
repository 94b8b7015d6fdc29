// A host (x86-64) stand-in for the kittens HIP prelude, so lowered kernels can run on the CPU: every
// HIP thread is a fiber (its own stack, switched by the block's scheduler on one host thread), one
// block at a time. It exists to test the *generated source* (index math, swizzles, lane maps, buffer
// placement, MFMA operand plumbing) without an AMD GPU.
//
// Fibers, not host threads: a lane runs until it reaches a barrier (s_barrier, a wave-collective
// operation) and then yields to the next lane that can run. With a host thread per lane, 256 threads
// meeting at a barrier every MFMA spent nearly all their time in the kernel's scheduler (futex waits,
// sched_yield) on a machine with few cores; a fiber switch is a function call. The scheduler sweeps
// the lanes alternately forwards and backwards, so waves reach the code between two barriers in both
// orders. A block whose remaining lanes all wait at barriers that no other lane will reach is an
// emulated hang: it is reported and the run fails, where host threads would wait forever.
//
// What it models: LDS as static storage shared by the block's threads; buffer resources (64-bit base,
// 32-bit bound): an access at or past the bound reads zero, one that straddles it is a fault (hardware
// range-checks per dword, and the lowering never relies on that), and every access below the bound
// must fall inside a tensor the driver registered (what page tables would fault on); `buffer_load … lds`
// writing lane l's bytes at M0 + l·width; ds_read/ds_write at byte addresses; s_barrier as a
// block-wide barrier (arrival counts, so conditional barriers pair up as on hardware); MFMAs as
// wave-collective operations on the lane maps of the CDNA3/CDNA4 ISA (A: lane l holds row l%16, K run
// (l/16)·kr..; B the same with N; C/D: rows (l/16)·4.., column l%16).
// Virtual tensors have an address range and no storage: their 16-bit words read as
// emu_virtual_word(index), so address arithmetic past 4 GiB is tested without allocating the tensor.
// What it does not model: asynchrony (loads land at once, waits are no-ops) — the schedule analysis of
// kittens-ir checks waits and barriers; timing; AGPRs.
#pragma once
#include <cstdint>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <sys/mman.h>
#include <unistd.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#define __global__
#define __device__
#define __shared__ static
#define __forceinline__ inline
#define __builtin_amdgcn_readfirstlane(x) (x)
#define KITTENS_LAUNCH_BOUNDS(THREADS)

namespace kittens {
typedef unsigned int u32;
typedef unsigned long long u64;
typedef u32 u32x2 __attribute__((ext_vector_type(2)));
typedef u32 u32x4 __attribute__((ext_vector_type(4)));
typedef u32 u32x8 __attribute__((ext_vector_type(8)));
typedef int i32x4 __attribute__((ext_vector_type(4)));
typedef float f32x4 __attribute__((ext_vector_type(4)));
typedef float f32x8 __attribute__((ext_vector_type(8)));
typedef float f32x16 __attribute__((ext_vector_type(16)));
typedef unsigned short b16x4 __attribute__((ext_vector_type(4)));
typedef unsigned short b16x8 __attribute__((ext_vector_type(8)));
typedef u32x2 fp8x8;
typedef u32x8 fp8x32;

constexpr int WAVES_MAX = 16;
constexpr int LANES_MAX = 64 * WAVES_MAX;
// The running lane (its fiber) and block.
inline int emu_tid = 0;
inline int emu_bid = 0;

[[noreturn]] inline void emu_fail(const char* what) {
  fprintf(stderr, "emulation error: %s\n", what);
  fflush(stderr);
  _exit(3);
}

// ---- lanes as fibers ------------------------------------------------------------------------------
// Each lane's stack: 8 MiB reserved (a host thread's default), only the pages it touches are backed,
// with a guard page below it, so an overflow faults instead of writing into the next lane's stack.
// A switch saves the callee-saved registers (and the x87/SSE control words) on the old stack and
// moves to the new one: the System V ABI leaves everything else to the caller, and no signal mask is
// saved (swapcontext's system call made it most of the emulation's time). Other hosts use ucontext.
constexpr size_t EMU_STACK = 8u << 20, EMU_GUARD = 1u << 16;
#if defined(__x86_64__)
}  // namespace kittens
extern "C" void kittens_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .p2align 4
  .type kittens_emu_switch, @function
kittens_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw (%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  fldcw (%rsp)
  ldmxcsr 8(%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size kittens_emu_switch, .-kittens_emu_switch
)");
namespace kittens {
struct EmuContext {
  void* sp = nullptr;
};
inline void emu_switch(EmuContext& from, EmuContext& to) { kittens_emu_switch(&from.sp, to.sp); }
// A fresh lane's stack, as kittens_emu_switch leaves one: control words, six registers, then the
// address it returns to (`start`, entered as if called: the slot above it is its return address).
inline void emu_context_init(EmuContext& c, unsigned char* base, size_t size, void (*start)()) {
  uintptr_t top = ((uintptr_t)base + size) & ~(uintptr_t)15;
  u64* sp = (u64*)top;
  *--sp = 0;                 // `start`'s return address: it never returns
  *--sp = (u64)start;        // popped by `ret`
  for (int i = 0; i < 6; ++i) *--sp = 0;  // rbp rbx r12..r15
  sp -= 2;
  u32 mxcsr;
  unsigned short fcw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fcw));
  memcpy((unsigned char*)sp + 8, &mxcsr, 4);
  memcpy((unsigned char*)sp, &fcw, 2);
  c.sp = sp;
}
#else
struct EmuContext {
  ucontext_t uc;
};
inline void emu_switch(EmuContext& from, EmuContext& to) {
  if (swapcontext(&from.uc, &to.uc) != 0) emu_fail("swapcontext failed");
}
inline void emu_context_init(EmuContext& c, unsigned char* base, size_t size, void (*start)()) {
  if (getcontext(&c.uc) != 0) emu_fail("getcontext failed");
  c.uc.uc_stack.ss_sp = base;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, start, 0);
}
#endif
struct EmuFiber {
  EmuContext ctx;
  unsigned char* stack;
  bool ready, done;
};
inline EmuFiber emu_fibers[LANES_MAX];
inline int emu_fiber_count = 0;
inline EmuContext emu_scheduler;
inline void (*emu_body)(void*) = nullptr;
inline void* emu_body_arg = nullptr;
// Back to the scheduler; returns when this lane is scheduled again.
inline void emu_yield() { emu_switch(emu_fibers[emu_tid].ctx, emu_scheduler); }
// A barrier of `expected` lanes: the last to arrive releases the others and goes on; the others
// yield until released. Arrivals count, so conditional barriers pair up as on hardware.
struct EmuBarrier {
  int expected;
  int arrived = 0;
  int waiting[LANES_MAX];
  explicit EmuBarrier(int n) : expected(n) {}
  void arrive_and_wait() {
    if (++arrived == expected) {
      for (int i = 0; i < arrived - 1; ++i) emu_fibers[waiting[i]].ready = true;
      arrived = 0;
      return;
    }
    waiting[arrived - 1] = emu_tid;
    emu_fibers[emu_tid].ready = false;
    emu_yield();
  }
};
inline EmuBarrier* emu_block_barrier = nullptr;
// Every lane starts here: runs the kernel, then hands control back for good.
inline void emu_fiber_start() {
  emu_body(emu_body_arg);
  emu_fibers[emu_tid].done = true;
  emu_yield();
  emu_fail("a finished lane was resumed");
}
// Runs block `bid`: `threads` lanes, each calling `body`, until every lane has returned.
template <class Body> inline void emu_run_block(int threads, int bid, Body& body) {
  if (threads < 1 || threads > LANES_MAX) emu_fail("block size outside 1..1024 lanes");
  for (int t = emu_fiber_count; t < threads; ++t) {
    void* m = mmap(nullptr, EMU_STACK + EMU_GUARD, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED || mprotect(m, EMU_GUARD, PROT_NONE) != 0) emu_fail("cannot map a lane's stack");
    emu_fibers[t].stack = (unsigned char*)m;
    emu_fiber_count = t + 1;
  }
  emu_bid = bid;
  emu_body = [](void* b) { (*static_cast<Body*>(b))(); };
  emu_body_arg = &body;
  for (int t = 0; t < threads; ++t) {
    EmuFiber& f = emu_fibers[t];
    emu_context_init(f.ctx, f.stack + EMU_GUARD, EMU_STACK, &emu_fiber_start);
    f.ready = true;
    f.done = false;
  }
  for (int left = threads, sweep = 0; left > 0; ++sweep) {
    bool ran = false;
    for (int i = 0; i < threads; ++i) {
      const int t = sweep % 2 ? threads - 1 - i : i;
      EmuFiber& f = emu_fibers[t];
      if (f.done || !f.ready) continue;
      emu_tid = t;
      emu_switch(emu_scheduler, f.ctx);
      ran = true;
      if (f.done) --left;
    }
    if (!ran) emu_fail("hang: every lane still running waits at a barrier that no other lane will reach");
  }
}

struct EmuWave {
  EmuBarrier bar{64};
  float a[64][32], b[64][32], c[64][16], x[64];
  const unsigned char* p[64];
};
inline EmuWave emu_waves[WAVES_MAX];
inline unsigned char emu_lds_anchor[16];

inline u32 thread_id() { return (u32)emu_tid; }
inline u32 lane_id() { return (u32)(emu_tid % 64); }
inline u32 lane_id_here() { return lane_id(); }
inline u32 block_id_x() { return (u32)emu_bid; }
// The kernarg segment: the driver lays the explicit arguments out as the device ABI does (the
// globals' pointers, 8 bytes each, then the 4-byte parameters) for the prelude's `kernarg_late`.
inline unsigned char emu_kernarg[4096];
template <class T> inline T kernarg_late(u32 offset) {
  T v;
  memcpy(&v, emu_kernarg + offset, sizeof(T));
  return v;
}
inline int imin(int a, int b) { return a < b ? a : b; }
inline int imax(int a, int b) { return a > b ? a : b; }
template <int BITS, int BASE, int SHIFT> inline u32 xor_flips(u32 off) {
  return (off >> SHIFT) & (((1u << BITS) - 1u) << BASE);
}

// LDS addresses are 32-bit offsets from an anchor; static arrays sit within ±2 GiB of it.
inline u32 lds_addr(const void* p) {
  intptr_t x = (intptr_t)p;
  asm volatile("" : "+r"(x) : : "memory");
  return (u32)(x - (intptr_t)emu_lds_anchor);
}
// The integer round trip plus an empty asm hides provenance from the optimiser: without it, -O2
// assumes accesses through the anchor never touch the `__shared__` arrays and folds their loads.
inline unsigned char* lds_ptr(u32 a) {
  uintptr_t x = (uintptr_t)emu_lds_anchor + (intptr_t)(int32_t)a;
  asm volatile("" : "+r"(x));
  return (unsigned char*)x;
}

// ---- tensors and buffer resources -----------------------------------------------------------------
struct EmuTensor { u64 base, bytes; bool virt; };
constexpr int TENSORS_MAX = 16;
inline EmuTensor emu_tensors[TENSORS_MAX];
inline int emu_tensor_count = 0;
[[noreturn]] inline void emu_fault(const char* what, u64 addr, u32 width) {
  fprintf(stderr, "emulation fault: %s (address 0x%llx, %u bytes)\n", what, addr, width);
  fflush(stderr);
  _exit(3);
}
inline void emu_register(const void* base, u64 bytes, bool virt) {
  if (emu_tensor_count == TENSORS_MAX) emu_fault("too many tensors", (u64)base, 0);
  emu_tensors[emu_tensor_count++] = EmuTensor{(u64)base, bytes, virt};
}
// Word `i` of every virtual tensor: a bf16 of magnitude in [1, 2) and a pseudo-random sign and
// mantissa (kittens_runtime::amd::emulate::virtual_word is the host twin).
inline unsigned short emu_virtual_word(u64 i) {
  const u32 h = (u32)(i ^ (i >> 32)) * 2654435761u;
  return (unsigned short)(((h >> 16) & 0x807fu) | 0x3f80u);
}
// Read `width` bytes at a device address: inside a registered tensor, or a fault.
inline void emu_memory_read(u64 addr, void* dst, u32 width) {
  for (int t = 0; t < emu_tensor_count; ++t) {
    const EmuTensor& x = emu_tensors[t];
    if (addr < x.base || addr - x.base >= x.bytes) continue;
    if (addr - x.base + width > x.bytes) emu_fault("read crosses the end of a tensor", addr, width);
    if (!x.virt) { memcpy(dst, (const void*)addr, width); return; }
    unsigned char* d = (unsigned char*)dst;
    for (u32 j = 0; j < width; ++j) {
      const u64 o = addr - x.base + j;
      const unsigned short w = emu_virtual_word(o / 2);
      d[j] = (unsigned char)(o % 2 ? w >> 8 : w & 0xff);
    }
    return;
  }
  emu_fault("read outside every tensor", addr, width);
}

inline i32x4 make_buffer_rsrc(const void* base, u32 bytes) {
  u64 p = (u64)base;
  i32x4 r;
  r.x = (int)(u32)p;
  r.y = (int)(u32)(p >> 32);
  r.z = (int)bytes;
  r.w = 0;
  return r;
}
inline void buffer_read(i32x4 rsrc, u32 off, void* dst, u32 width) {
  const u64 base = ((u64)(u32)rsrc.y << 32) | (u32)rsrc.x;
  const u32 bound = (u32)rsrc.z;
  if (off >= bound) { memset(dst, 0, width); return; }
  if ((u64)off + width > bound) emu_fault("buffer access straddles its resource's bound", base + off, width);
  emu_memory_read(base + off, dst, width);
}
typedef i32x4 buffer_rsrc_t;
inline buffer_rsrc_t make_buffer_rsrc_t(const void* base, u32 bytes) { return make_buffer_rsrc(base, bytes); }
constexpr u32 OUT_OF_RANGE = 0x80000000u;
inline u32 rebased_bound(u64 span_bytes, u64 origin_bytes) {
  // Past the end the difference is negative (both are below 2^63): its sign masks the bound. Not a
  // 64-bit compare, which gfx9's scalar unit lacks (clang-19 made it a vector compare and spilled
  // gfx942's GEMM), nor a select on the sign (3 SGPR spills in gfx942's fp8 interleave).
  const u64 left = span_bytes - origin_bytes;
  const u32 hi = (u32)(left >> 32), lo = (u32)left;
  return ((hi | (lo >> 31)) != 0 ? 0x7fffffffu : lo) & ~(u32)((int)hi >> 31);
}
inline i32x4 tile_rsrc(const void* tensor, u64 span_bytes, u64 origin_bytes) {
  return make_buffer_rsrc((const unsigned char*)tensor + origin_bytes, rebased_bound(span_bytes, origin_bytes));
}
inline buffer_rsrc_t tile_rsrc_t(const void* tensor, u64 span_bytes, u64 origin_bytes) {
  return tile_rsrc(tensor, span_bytes, origin_bytes);
}
inline u32x4 buffer_load_b128(buffer_rsrc_t r, u32 off, u32 soff = 0) { u32x4 v; buffer_read(r, off + soff, &v, 16); return v; }
inline u32x2 buffer_load_b64(buffer_rsrc_t r, u32 off, u32 soff = 0) { u32x2 v; buffer_read(r, off + soff, &v, 8); return v; }
inline u32 buffer_load_b32(buffer_rsrc_t r, u32 off, u32 soff = 0) { u32 v; buffer_read(r, off + soff, &v, 4); return v; }
inline unsigned short buffer_load_b16(buffer_rsrc_t r, u32 off) { unsigned short v; buffer_read(r, off, &v, 2); return v; }
inline unsigned char buffer_load_b8(buffer_rsrc_t r, u32 off) { unsigned char v; buffer_read(r, off, &v, 1); return v; }
template <int OFF = 0> inline void buffer_load_dword_lds(i32x4 r, u32 voff, u32 soff, u32 lds) {
  buffer_read(r, voff + soff + OFF, lds_ptr(lds + lane_id() * 4), 4);
}
template <int OFF = 0> inline void buffer_load_dwordx4_lds(i32x4 r, u32 voff, u32 soff, u32 lds) {
  buffer_read(r, voff + soff + OFF, lds_ptr(lds + lane_id() * 16), 16);
}
template <int OFF = 0> inline u32x4 ds_read_b128(u32 a) { u32x4 v; memcpy(&v, lds_ptr(a + OFF), 16); return v; }
template <int OFF = 0> inline u32x4 ds_read_b128_sched(u32 a) { return ds_read_b128<OFF>(a); }
template <int OFF = 0> inline u32x2 ds_read_b64(u32 a) { u32x2 v; memcpy(&v, lds_ptr(a + OFF), 8); return v; }
template <int OFF = 0> inline void ds_write_b128(u32 a, u32x4 v) { memcpy(lds_ptr(a + OFF), &v, 16); }
template <int OFF = 0> inline void ds_write_b64(u32 a, u32x2 v) { memcpy(lds_ptr(a + OFF), &v, 8); }

template <int N> inline void s_waitcnt_vmcnt() {}
template <int N> inline void s_waitcnt_lgkmcnt() {}
template <class... T> inline void regs_landed(T&...) {}
inline void s_barrier() { emu_block_barrier->arrive_and_wait(); }
template <int P> inline void s_setprio() {}
enum : int { SCHED_NONE = 0, SCHED_VALU = 2, SCHED_MFMA = 8, SCHED_DS_READ = 0x100, SCHED_TRANS = 0x400 };
template <int M> inline void sched_barrier() {}
template <int M, int S, int I> inline void sched_group_barrier() {}

inline float bf16_to_f32(unsigned short h) { u32 u = (u32)h << 16; float f; memcpy(&f, &u, 4); return f; }
inline u32 f32_bits(float x) { u32 u; memcpy(&u, &x, 4); return u; }
inline unsigned short bf16_rtz(float x) { return (unsigned short)(f32_bits(x) >> 16); }
inline unsigned short bf16_rtna(float x) { return x != x ? 0x7fc0 : (unsigned short)((f32_bits(x) + 0x8000u) >> 16); }
inline unsigned short bf16_rtne(float x) {
  u32 u = f32_bits(x);
  return x != x ? 0x7fc0 : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline u32 pack_bf16_rtne(float lo, float hi) { return (u32)bf16_rtne(lo) | ((u32)bf16_rtne(hi) << 16); }
inline u32 xcd_chunk(u32 id, u32 blocks, u32 n_xcd, u32 chunk) {
  const u32 n = n_xcd ? n_xcd : 1, c = chunk ? chunk : 1, per_cycle = n * c;
  if (id >= (blocks / per_cycle) * per_cycle) return id;
  const u32 local = id / n;
  return (local / c) * per_cycle + (id % n) * c + local % c;
}
inline void group_m(u32 xy, u32 rows, u32 cols, u32 window, int& row, int& col) {
  const u32 w = window ? window : 1, per_group = w * cols, first_row = (xy / per_group) * w;
  u32 h = rows > first_row ? rows - first_row : 0;
  h = h < w ? h : w;
  h = h ? h : 1;
  const u32 l = xy % per_group;
  row = (int)(first_row + l % h);
  col = (int)(l / h);
}

// D = A·B + C for one M×M×K bf16 MFMA across the calling wave (M 16 or 32; kittens-hw's `mma::cdna`
// maps): lane l holds row (A) or column (B) l % M and the KR consecutive K from (l / M)·KR; its M²/64
// accumulator slots are column l % M, rows in runs of 4: slot s is row ((s / 4)·G + l / M)·4 + s % 4
// with G = 64 / M lane groups.
template <int M, int KR, typename AB, typename CD>
inline void emu_mfma(const AB& a, const AB& b, CD& c, bool zero) {
  constexpr int G = 64 / M, SLOTS = M * M / 64;
  EmuWave& w = emu_waves[emu_tid / 64];
  const int l = emu_tid % 64;
  for (int s = 0; s < KR; ++s) { w.a[l][s] = bf16_to_f32(a[s]); w.b[l][s] = bf16_to_f32(b[s]); }
  for (int s = 0; s < SLOTS; ++s) w.c[l][s] = zero ? 0.0f : c[s];
  w.bar.arrive_and_wait();
  if (l == 0) {
    float A[M][G * KR], B[G * KR][M], D[M][M];
    for (int ln = 0; ln < 64; ++ln)
      for (int s = 0; s < KR; ++s) { A[ln % M][(ln / M) * KR + s] = w.a[ln][s]; B[(ln / M) * KR + s][ln % M] = w.b[ln][s]; }
    for (int ln = 0; ln < 64; ++ln)
      for (int s = 0; s < SLOTS; ++s) D[((s / 4) * G + ln / M) * 4 + s % 4][ln % M] = w.c[ln][s];
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < M; ++j) {
        float acc = D[i][j];
        for (int k = 0; k < G * KR; ++k) acc += A[i][k] * B[k][j];
        D[i][j] = acc;
      }
    for (int ln = 0; ln < 64; ++ln)
      for (int s = 0; s < SLOTS; ++s) w.c[ln][s] = D[((s / 4) * G + ln / M) * 4 + s % 4][ln % M];
  }
  w.bar.arrive_and_wait();
  for (int s = 0; s < SLOTS; ++s) c[s] = w.c[l][s];
  w.bar.arrive_and_wait();
}
inline void mfma_f32_16x16x16_bf16(b16x4 a, b16x4 b, f32x4& c) { emu_mfma<16, 4>(a, b, c, false); }
inline f32x4 mfma_f32_16x16x16_bf16_zero(b16x4 a, b16x4 b) { f32x4 c; emu_mfma<16, 4>(a, b, c, true); return c; }
inline void mfma_f32_16x16x32_bf16(b16x8 a, b16x8 b, f32x4& c) { emu_mfma<16, 8>(a, b, c, false); }
inline f32x4 mfma_f32_16x16x32_bf16_zero(b16x8 a, b16x8 b) { f32x4 c; emu_mfma<16, 8>(a, b, c, true); return c; }
inline void mfma_f32_32x32x8_bf16(b16x4 a, b16x4 b, f32x16& c) { emu_mfma<32, 4>(a, b, c, false); }
inline f32x16 mfma_f32_32x32x8_bf16_zero(b16x4 a, b16x4 b) { f32x16 c; emu_mfma<32, 4>(a, b, c, true); return c; }
inline void mfma_f32_32x32x16_bf16(b16x8 a, b16x8 b, f32x16& c) { emu_mfma<32, 8>(a, b, c, false); }
inline f32x16 mfma_f32_32x32x16_bf16_zero(b16x8 a, b16x8 b) { f32x16 c; emu_mfma<32, 8>(a, b, c, true); return c; }
// Pinned MFMAs (the prelude's asm with physical-register constraints) compute the same.
#define KITTENS_PINNED_MFMA(VOL, F, OPCODE, CD, CA, CB, D, A, B) F(A, B, D)
#define KITTENS_PINNED_MFMA_ZERO(VOL, F, OPCODE, CD, CA, CB, D, A, B) ((D) = F##_zero(A, B))
#define KITTENS_IN_AGPRS(X) ((void)0)
// fp8 e4m3 to f32: OCP E4M3FN (bias 7, S.1111.111 NaN; gfx950's f8f6f4 with fp8 operands) or E4M3FNUZ
// (bias 8, 0x80 the only NaN, no -0; gfx942's fp8 MFMAs).
inline float fp8_e4m3_to_f32(unsigned char x, bool fnuz) {
  if (fnuz ? x == 0x80 : (x & 0x7f) == 0x7f) return NAN;
  const int bias = fnuz ? 8 : 7, e = (x >> 3) & 15, m = x & 7;
  const float v = e == 0 ? ldexpf((float)m, 1 - bias - 3) : ldexpf((float)(8 + m), e - bias - 3);
  return (x & 0x80) ? -v : v;
}
// D = A·B + C for one 16×16×K fp8 MFMA across the calling wave: lane l holds KR bytes of row (A) or
// column (B) l % 16 in runs of RUN consecutive K; run r of lane group g = l / 16 starts at K
// r·4·RUN + g·RUN (16x16x32 fp8: one run of 8; 16x16x128 f8f6f4: runs of 16 at 16g and 64 + 16g,
// FP8-tutorial §6).
template <int KR, int RUN, typename AB>
inline void emu_mfma16_fp8(const AB& a, const AB& b, f32x4& c, bool zero, bool fnuz) {
  static_assert(sizeof(AB) == KR, "one byte per fp8 element");
  EmuWave& w = emu_waves[emu_tid / 64];
  const int l = emu_tid % 64;
  unsigned char ab[KR], bb[KR];
  memcpy(ab, &a, KR);
  memcpy(bb, &b, KR);
  for (int s = 0; s < KR; ++s) { w.a[l][s] = fp8_e4m3_to_f32(ab[s], fnuz); w.b[l][s] = fp8_e4m3_to_f32(bb[s], fnuz); }
  for (int s = 0; s < 4; ++s) w.c[l][s] = zero ? 0.0f : c[s];
  w.bar.arrive_and_wait();
  if (l == 0) {
    float A[16][4 * KR], B[4 * KR][16], D[16][16];
    for (int ln = 0; ln < 64; ++ln)
      for (int s = 0; s < KR; ++s) {
        const int k = (s / RUN) * 4 * RUN + (ln / 16) * RUN + s % RUN;
        A[ln % 16][k] = w.a[ln][s];
        B[k][ln % 16] = w.b[ln][s];
      }
    for (int ln = 0; ln < 64; ++ln)
      for (int s = 0; s < 4; ++s) D[(ln / 16) * 4 + s][ln % 16] = w.c[ln][s];
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 16; ++j) {
        float acc = D[i][j];
        for (int k = 0; k < 4 * KR; ++k) acc += A[i][k] * B[k][j];
        D[i][j] = acc;
      }
    for (int ln = 0; ln < 64; ++ln)
      for (int s = 0; s < 4; ++s) w.c[ln][s] = D[(ln / 16) * 4 + s][ln % 16];
  }
  w.bar.arrive_and_wait();
  for (int s = 0; s < 4; ++s) c[s] = w.c[l][s];
  w.bar.arrive_and_wait();
}
inline void mfma_f32_16x16x32_fp8_fp8(fp8x8 a, fp8x8 b, f32x4& c) { emu_mfma16_fp8<8, 8>(a, b, c, false, true); }
inline f32x4 mfma_f32_16x16x32_fp8_fp8_zero(fp8x8 a, fp8x8 b) { f32x4 c; emu_mfma16_fp8<8, 8>(a, b, c, true, true); return c; }
inline void mfma_f32_16x16x128_f8f6f4(fp8x32 a, fp8x32 b, f32x4& c) { emu_mfma16_fp8<32, 16>(a, b, c, false, false); }
inline f32x4 mfma_f32_16x16x128_f8f6f4_zero(fp8x32 a, fp8x32 b) { f32x4 c; emu_mfma16_fp8<32, 16>(a, b, c, true, false); return c; }
// The compiler-scheduled forms compute the same.
inline void mfma_f32_16x16x16_bf16_sched(b16x4 a, b16x4 b, f32x4& c) { mfma_f32_16x16x16_bf16(a, b, c); }
inline void mfma_f32_16x16x32_bf16_sched(b16x8 a, b16x8 b, f32x4& c) { mfma_f32_16x16x32_bf16(a, b, c); }
inline void mfma_f32_16x16x32_fp8_fp8_sched(fp8x8 a, fp8x8 b, f32x4& c) { mfma_f32_16x16x32_fp8_fp8(a, b, c); }
inline void mfma_f32_16x16x128_f8f6f4_sched(fp8x32 a, fp8x32 b, f32x4& c) { mfma_f32_16x16x128_f8f6f4(a, b, c); }
// Lane exchanges and the wave-level ordering point: each lane is a fiber, so both synchronise the
// wave's 64 lanes.
inline float exp2_f32(float x) { return exp2f(x); }
inline void wave_sync() { emu_waves[emu_tid / 64].bar.arrive_and_wait(); }
template <int M> inline float shfl_xor_f32(float v) {
  EmuWave& w = emu_waves[emu_tid / 64];
  const int l = emu_tid % 64;
  w.x[l] = v;
  w.bar.arrive_and_wait();
  const float r = w.x[l ^ M];
  w.bar.arrive_and_wait();
  return r;
}
// ds_read_b64_tr_b16 (CDNA4): lane j of each 16-lane group receives, as slot q, element j % 4 of the
// 4 consecutive 16-bit values lane 4q + j / 4 of the group addresses.
inline b16x4 ds_read_tr_b16(const unsigned char* p) {
  EmuWave& w = emu_waves[emu_tid / 64];
  const int l = emu_tid % 64, g0 = l & ~15, j = l & 15;
  w.p[l] = p;
  w.bar.arrive_and_wait();
  b16x4 r;
  for (int q = 0; q < 4; ++q) {
    unsigned short v;
    memcpy(&v, w.p[g0 + 4 * q + j / 4] + 2 * (j % 4), 2);
    r[q] = v;
  }
  w.bar.arrive_and_wait();
  return r;
}
}  // namespace kittens
