// prelude_smoke: a hand-written kernel that calls every wrapper of the kittens HIP prelude once, so a
// compile for each target proves each wrapper assembles and reaches the code object. It computes
// nothing meaningful; its stores only keep every value alive.
using namespace kittens;

KITTENS_DEV float fold(f32x4 c) { return c.x + c.y + c.z + c.w; }
KITTENS_DEV float fold(f32x16 c) { return c.s0 + c.s5 + c.sa + c.sf; }

// All four forms of one MFMA wrapper, chained through one accumulator.
#define SMOKE_MFMA(NAME, A, ACC)                                                                     \
  {                                                                                                  \
    auto c = NAME##_zero(A, A);                                                                      \
    NAME(A, A, c);                                                                                   \
    NAME##_acc(A, A, c);                                                                             \
    NAME##_ab_agpr(A, A, c);                                                                         \
    ACC += fold(c);                                                                                  \
  }

extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(256, 256)))
void prelude_smoke(const u32* __restrict__ in, u32* __restrict__ out, u32 n_bytes) {
  __shared__ u32x4 smem[1024];
  // The AGPR-operand forms need an AGPR budget the compiler does not infer from their constraints.
  KITTENS_RESERVE_AGPRS(63);
  const i32x4 src = make_buffer_rsrc(in, n_bytes);
  const i32x4 dst = make_buffer_rsrc(out, n_bytes);
  const u32 t = thread_id() + (lane_id_here() >> 6); // a lane is below 64: adds 0
  const u32 lds = lds_addr(&smem[0]);

  // global -> LDS without registers, and global -> registers
  buffer_load_dword_lds<0>(src, t * 4, 0, lds);
#if defined(__gfx950__)
  buffer_load_dwordx4_lds<16>(src, t * 16, 0, lds + 1024);
#endif
  const u32x4 g4 = buffer_load_dwordx4<16>(src, t * 16, 0);
  const u32 g1 = buffer_load_dword<4>(src, t * 4, 0);
  s_waitcnt_vmcnt<0>();
  s_barrier();

  // registers -> LDS -> registers
  ds_write_b64<8>(lds + 8192 + t * 8, g4.xy);
  ds_write_b128<0>(lds + 12288 + t * 16, g4);
  s_waitcnt_lgkmcnt<0>();
  s_barrier();
  const u32x4 r4 = ds_read_b128<16>(lds + t * 16);
  const u32x2 r2 = ds_read_b64<8>(lds + 8192 + t * 8);
#if defined(__gfx950__)
  const u32x2 rt = ds_read_b64_tr_b16<0>(lds + 12288 + t * 8);
#else
  const u32x2 rt = r2;
#endif
  s_waitcnt_lgkmcnt<0>();

  const b16x4 h4 = __builtin_bit_cast(b16x4, r2);
  const b16x4 t4 = __builtin_bit_cast(b16x4, rt);
  const fp8x8 q8 = r2 ^ rt;
  const float f1 = __builtin_bit_cast(float, g1);
  float acc = 0.0f;

  s_setprio<1>();
  SMOKE_MFMA(mfma_f32_16x16x16_bf16, h4, acc)
  SMOKE_MFMA(mfma_f32_32x32x8_bf16, t4, acc)
  SMOKE_MFMA(mfma_f32_16x16x16_f16, h4, acc)
  SMOKE_MFMA(mfma_f32_32x32x8_f16, t4, acc)
  SMOKE_MFMA(mfma_f32_16x16x32_fp8_fp8, q8, acc)
  SMOKE_MFMA(mfma_f32_32x32x16_fp8_fp8, q8, acc)
  SMOKE_MFMA(mfma_f32_16x16x4_f32, f1, acc)
#if defined(__gfx942__)
  const f32x2 x2 = __builtin_bit_cast(f32x2, r2);
  SMOKE_MFMA(mfma_f32_16x16x8_xf32, x2, acc)
#endif
#if defined(__gfx950__)
  const b16x8 h8 = __builtin_bit_cast(b16x8, r4);
  const fp8x32 q32 = __builtin_shufflevector(r4, r4 ^ g4, 0, 1, 2, 3, 4, 5, 6, 7);
  SMOKE_MFMA(mfma_f32_16x16x32_bf16, h8, acc)
  SMOKE_MFMA(mfma_f32_32x32x16_bf16, h8, acc)
  SMOKE_MFMA(mfma_f32_16x16x32_f16, h8, acc)
  SMOKE_MFMA(mfma_f32_32x32x16_f16, h8, acc)
  SMOKE_MFMA(mfma_f32_16x16x128_f8f6f4, q32, acc)
  SMOKE_MFMA(mfma_f32_32x32x64_f8f6f4, q32, acc)
#endif
  sched_group_barrier<SCHED_MFMA, 1, 0>();
  sched_group_barrier<SCHED_DS_READ, 1, 0>();
  s_setprio<0>();
  sched_barrier<SCHED_NONE>();

  // fp32 -> bf16 in the three rounding modes, stored through the buffer resource
  const float other = acc * 0.5f;
  buffer_store_dword<0>(dst, t * 16, 0, pack_bf16_rtne(acc, other));
  buffer_store_dword<4>(dst, t * 16, 0, pack_bf16_rtna(acc, other));
  buffer_store_dword<8>(dst, t * 16, 0, pack_bf16_rtz(acc, other));
}
