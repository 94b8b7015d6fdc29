//! CUDA C++ for NVIDIA Hopper (sm_90a): the device prelude ([`PRELUDE`], one-instruction inline-asm
//! wrappers for TMA, mbarriers, wgmma, setmaxnreg, ldmatrix/stmatrix and the proxy fences), the wgmma
//! wrappers generated per instruction shape ([`wgmma_wrapper`]), and the lowering of tile programs
//! ([`lower`]).
//!
//! The source is compiled at run time with NVRTC (`kittens_runtime::cuda::compile`).

mod emit;
pub mod lower;
mod lower_cpasync;
mod lower_frag;
mod lower_frame;
mod lower_mma;
mod lower_roles;
mod lower_tma;
mod lower_wait;

pub use crate::lowered::TmaMap;
pub use emit::CudaLowerError;
pub use lower::lower;

/// The hand-written part of the prelude (no CUDA headers needed).
pub const PRELUDE: &str = include_str!("prelude.cuh");

/// Operand types of a wgmma whose A and B both come from shared memory (PTX ISA §9.7.15.5.2,
/// "wgmma.mma_async"): bf16 with K = 16 per instruction, fp8 e4m3 with K = 32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum WgmmaInput {
    Bf16,
    Fp8E4m3,
}

impl WgmmaInput {
    /// The operand type of a shared tile's dtype, if wgmma takes it.
    pub fn of(dt: kittens_hw::dtype::DType) -> Option<WgmmaInput> {
        match dt {
            kittens_hw::dtype::DType::Bf16 => Some(WgmmaInput::Bf16),
            kittens_hw::dtype::DType::Fp8E4m3 => Some(WgmmaInput::Fp8E4m3),
            _ => None,
        }
    }
    /// K of one instruction: 32 bytes of K per row for every input type.
    pub fn k(self) -> u32 {
        match self {
            WgmmaInput::Bf16 => 16,
            WgmmaInput::Fp8E4m3 => 32,
        }
    }
    fn ptx(self) -> &'static str {
        match self {
            WgmmaInput::Bf16 => "bf16",
            WgmmaInput::Fp8E4m3 => "e4m3",
        }
    }
    /// The wrapper's C++ name for a given N.
    pub fn wrapper_name(self, n: u32) -> String {
        format!("wgmma_m64n{n}k{}_{}_ss", self.k(), self.ptx())
    }
    /// The wrapper's C++ name for a given N with B N-major ([`wgmma_wrapper_tb`]).
    pub fn wrapper_name_tb(self, n: u32) -> String {
        format!("{}_tb", self.wrapper_name(n))
    }
    /// The wrapper's C++ name for a given N with A M-major and B N-major ([`wgmma_wrapper_ta_tb`]).
    pub fn wrapper_name_ta_tb(self, n: u32) -> String {
        format!("{}_ta_tb", self.wrapper_name(n))
    }
    /// The wrapper's C++ name for a given N with A M-major and B K-major ([`wgmma_wrapper_ta`]).
    pub fn wrapper_name_ta(self, n: u32) -> String {
        format!("{}_ta", self.wrapper_name(n))
    }
}

/// The valid N of a dense wgmma: multiples of 8 up to 256 (PTX ISA, wgmma shapes table).
pub fn valid_wgmma_n(n: u32) -> bool {
    (8..=256).contains(&n) && n.is_multiple_of(8)
}

/// One wrapper `kt::wgmma_m64n{N}k{K}_{type}_ss(float (&d)[N/2], u64 desc_a, u64 desc_b, u32 accumulate)`:
/// D (64×N fp32, N/2 registers per thread) += A·B with both operands K-major in shared memory. When
/// `accumulate` is 0 the instruction overwrites D (scale-d = false), so no zeroing pass is needed.
pub fn wgmma_wrapper(input: WgmmaInput, n: u32) -> String {
    ss_wrapper(input, n, false, false)
}

/// The same with B N-major (`_tb`: the transpose-B immediate set, PTX ISA §9.7.15.5.1; bf16 only,
/// fp8 wgmma reads K-major operands only): `C = A·B` with B stored `K × N`.
pub fn wgmma_wrapper_tb(n: u32) -> String {
    ss_wrapper(WgmmaInput::Bf16, n, false, true)
}

/// The same with A M-major too (`_ta_tb`: both transpose immediates set; bf16 only): `C = Aᵀ·B` with
/// A stored `K × M` and B `K × N` (the dQ product `dS·K` from a stored `dSᵀ`).
pub fn wgmma_wrapper_ta_tb(n: u32) -> String {
    ss_wrapper(WgmmaInput::Bf16, n, true, true)
}

/// The same with A M-major and B K-major (`_ta`: the transpose-A immediate only; bf16 only): `C = Aᵀ·Bᵀ`
/// with A stored `K × M` and B `N × K` (a GEMM reading a transposed A against a linear layer's weight).
pub fn wgmma_wrapper_ta(n: u32) -> String {
    ss_wrapper(WgmmaInput::Bf16, n, true, false)
}

fn ss_wrapper(input: WgmmaInput, n: u32, trans_a: bool, trans_b: bool) -> String {
    assert!(
        valid_wgmma_n(n),
        "wgmma N must be a multiple of 8 in 8..=256, got {n}"
    );
    let regs = n / 2;
    let list: Vec<String> = (0..regs).map(|i| format!("%{i}")).collect();
    let outs: Vec<String> = (0..regs).map(|i| format!("\"+f\"(d[{i}])")).collect();
    // bf16 takes the transpose immediates (0 = K-major); fp8 has none (K-major only).
    let tail = match input {
        WgmmaInput::Bf16 => format!(", 1, 1, {}, {}", u32::from(trans_a), u32::from(trans_b)),
        WgmmaInput::Fp8E4m3 => ", 1, 1".to_string(),
    };
    let name = match (trans_a, trans_b) {
        (true, true) => input.wrapper_name_ta_tb(n),
        (true, false) => input.wrapper_name_ta(n),
        (false, true) => input.wrapper_name_tb(n),
        (false, false) => input.wrapper_name(n),
    };
    let ty = input.ptx();
    format!(
        "__device__ __forceinline__ void {name}(float (&d)[{regs}], u64 desc_a, u64 desc_b, u32 accumulate) {{\n\
         asm volatile(\"{{\\n .reg .pred p;\\n setp.ne.b32 p, %{acc}, 0;\\n\"\n\
         \"wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ty}.{ty} {{{list}}}, %{da}, %{db}, p{tail};\\n}}\\n\"\n\
         : {outs}\n\
         : \"l\"(desc_a), \"l\"(desc_b), \"r\"(accumulate));\n}}\n",
        name = name,
        k = input.k(),
        list = list.join(", "),
        da = regs,
        db = regs + 1,
        acc = regs + 2,
        outs = outs.join(", "),
    )
}

/// One wrapper `kt::wgmma_m64n{N}k16_bf16_rs{_tb}(float (&d)[N/2], u32 a0, u32 a1, u32 a2, u32 a3, u64
/// desc_b, u32 accumulate)`: D (64×N fp32) += A·B with A, a 64×16 bf16 tile, from registers (PTX ISA
/// §9.7.15.5.1, "register fragment" of A: per thread `a0 = (r, c..c+1)`, `a1 = (r+8, c..c+1)`,
/// `a2 = (r, c+8..c+9)`, `a3 = (r+8, c+8..c+9)` with `r = lane/4` in the warp's 16 rows and
/// `c = 2·(lane%4)` — the layout of two adjacent 8-column blocks of an fp32 accumulator, so an
/// accumulator packs into an A operand in place) and B from shared memory, K-major or, with `trans_b`
/// (`_tb`), N-major.
pub fn wgmma_rs_wrapper(n: u32, trans_b: bool) -> String {
    assert!(
        valid_wgmma_n(n),
        "wgmma N must be a multiple of 8 in 8..=256, got {n}"
    );
    let regs = n / 2;
    let list: Vec<String> = (0..regs).map(|i| format!("%{i}")).collect();
    let outs: Vec<String> = (0..regs).map(|i| format!("\"+f\"(d[{i}])")).collect();
    format!(
        "__device__ __forceinline__ void {name}(float (&d)[{regs}], u32 a0, u32 a1, u32 a2, u32 a3, u64 desc_b, u32 accumulate) {{\n\
         asm volatile(\"{{\\n .reg .pred p;\\n setp.ne.b32 p, %{acc}, 0;\\n\"\n\
         \"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{list}}}, {{%{a0}, %{a1}, %{a2}, %{a3}}}, %{db}, p, 1, 1, {tb};\\n}}\\n\"\n\
         : {outs}\n\
         : \"r\"(a0), \"r\"(a1), \"r\"(a2), \"r\"(a3), \"l\"(desc_b), \"r\"(accumulate));\n}}\n",
        name = rs_wrapper_name(n, trans_b),
        list = list.join(", "),
        a0 = regs,
        a1 = regs + 1,
        a2 = regs + 2,
        a3 = regs + 3,
        db = regs + 4,
        acc = regs + 5,
        tb = u32::from(trans_b),
        outs = outs.join(", "),
    )
}

/// [`wgmma_rs_wrapper`] with the `n` accumulator columns held in two arrays of `n / 4` floats (the
/// first and the second `n / 2` columns: the m64nNk16 fragment lists its 8-column groups in order),
/// so that two accumulators of `n / 2` columns declared apart are one instruction's D.
pub fn wgmma_rs_wrapper_split(n: u32, trans_b: bool) -> String {
    assert!(
        valid_wgmma_n(n) && n.is_multiple_of(16),
        "split wgmma N must be a multiple of 16 in 16..=256, got {n}"
    );
    let half = n / 4;
    let whole = wgmma_rs_wrapper(n, trans_b);
    let outs: Vec<String> = (0..n / 2)
        .map(|i| {
            if i < half {
                format!("\"+f\"(d0[{i}])")
            } else {
                format!("\"+f\"(d1[{}])", i - half)
            }
        })
        .collect();
    let old_outs: Vec<String> = (0..n / 2).map(|i| format!("\"+f\"(d[{i}])")).collect();
    whole
        .replace(
            &format!("{}(float (&d)[{}]", rs_wrapper_name(n, trans_b), n / 2),
            &format!(
                "{}_split(float (&d0)[{half}], float (&d1)[{half}]",
                rs_wrapper_name(n, trans_b)
            ),
        )
        .replace(&old_outs.join(", "), &outs.join(", "))
}

/// The C++ name of [`wgmma_rs_wrapper`]'s function.
pub fn rs_wrapper_name(n: u32, trans_b: bool) -> String {
    let tb = if trans_b { "_tb" } else { "" };
    format!("wgmma_m64n{n}k16_bf16_rs{tb}")
}

/// The prelude followed by the wgmma wrappers for the given shapes, inside `namespace kt`. (What each
/// wrapper's instruction gets — D in order, A, the descriptors, scale-d, the transposes — is checked on
/// NVRTC's PTX of it: kittens-runtime tests/cuda_wgmma_wrappers.rs.)
pub fn prelude_with(shapes: &[(WgmmaInput, u32)]) -> String {
    let mut s = String::from(PRELUDE);
    s.push_str("\nnamespace kt {\n");
    for &(input, n) in shapes {
        s.push_str(&wgmma_wrapper(input, n));
    }
    s.push_str("} // namespace kt\n");
    s
}
