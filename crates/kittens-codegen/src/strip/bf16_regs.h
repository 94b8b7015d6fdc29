// Included after either strip prelude (prelude_cuda.cuh, prelude_hip.h): ks::bf16_to_f32, ks::f32_to_bf16.
namespace ks {
// A bf16 register tile kept at 16 bits: two elements per 32-bit register (element 2i in the low half
// of word i), read as f32 and written from f32 (rounded to nearest even), so every op computes in f32
// as the IR says while the tile costs half the registers of an f32 array. Indices are constants
// after unrolling, so the words stay in registers.
template <int N> struct bf16_regs {
    u32 w[(N + 1) / 2];
    struct ref {
        u32& w;
        const int hi;
        __device__ __forceinline__ operator float() const {
            return bf16_to_f32(bits());
        }
        __device__ __forceinline__ ref& operator=(float x) {
            return set_bits(f32_to_bf16(x));
        }
        __device__ __forceinline__ ref& operator=(const ref& o) { return set_bits(o.bits()); }
        // The element's bits, and an element set from bits: bf16 moved without a round trip
        // through f32 (which the compiler cannot prove exact), so a loaded word stays a word.
        __device__ __forceinline__ unsigned short bits() const {
            return (unsigned short)(hi ? (w >> 16) : (w & 0xffffu));
        }
        __device__ __forceinline__ ref& set_bits(unsigned short b) {
            w = hi ? ((w & 0x0000ffffu) | ((u32)b << 16)) : ((w & 0xffff0000u) | b);
            return *this;
        }
    };
    __device__ __forceinline__ ref operator[](int i) { return ref{w[i >> 1], i & 1}; }
};
} // namespace ks
