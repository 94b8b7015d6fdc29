// kittens strip helpers (HIP), after the kittens HIP prelude; also compiled for the host by the HIP
// emulation, so they use compiler builtins only. The CUDA twin is prelude_cuda.cuh.
namespace ks {
typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ float bf16_to_f32(unsigned short b) { return __builtin_bit_cast(float, (u32)b << 16); }

// Round to nearest, ties to even (NaN stays a quiet NaN): the IR's default rounding.
__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
  u32 u = __builtin_bit_cast(u32, f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}

__device__ __forceinline__ u32 mulhi(u32 a, u32 b) { return (u32)(((u64)a * (u64)b) >> 32); }

// Ties away from zero and toward zero (MI300X-attn §6's RTNA and RTZ); NaN stays a quiet NaN of its sign,
// as kittens_ir::numerics rounds.
__device__ __forceinline__ unsigned short f32_to_bf16_rna(float f) {
  u32 u = __builtin_bit_cast(u32, f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)(((u >> 16) & 0x8000u) | 0x7fc0u);
  return (unsigned short)((u + 0x8000u) >> 16);
}
__device__ __forceinline__ unsigned short f32_to_bf16_rz(float f) {
  u32 u = __builtin_bit_cast(u32, f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)(((u >> 16) & 0x8000u) | 0x7fc0u);
  return (unsigned short)(u >> 16);
}

// Philox 4x32-10 (Random123 §3.2): counter c, key (k0, k1); the function kittens_ir::philox defines.
__device__ __forceinline__ void philox(u32 c[4], u32 k0, u32 k1) {
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    if (r > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
    const u32 hi0 = mulhi(0xD2511F53u, c[0]), lo0 = 0xD2511F53u * c[0];
    const u32 hi1 = mulhi(0xCD9E8D57u, c[2]), lo1 = 0xCD9E8D57u * c[2];
    const u32 n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
    c[0] = n0; c[1] = lo1; c[2] = n2; c[3] = lo0;
  }
}

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
}  // namespace ks
