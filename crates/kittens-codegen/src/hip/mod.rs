//! HIP lowering for CDNA3 (gfx942) and CDNA4 (gfx950), and the device prelude it targets.
//!
//! The prelude ([`PRELUDE`]) is a header of one-instruction inline-asm wrappers whose constraints leave
//! register allocation to the compiler (MI300X-attn §2.1; docs/architecture.md principle 4). It needs no ROCm headers:
//! generated sources are self-contained (prelude text followed by the kernel), so the same file compiles
//! with ROCm's clang, the clang inside PyPI's `ziglang`, or Debian's clang-19 (gfx942).
//!
//! [`WRAPPED_OPCODES`] lists, as data, every machine instruction the prelude wraps and the targets that
//! have it; tests compile [`PRELUDE_SMOKE`] (a kernel calling every wrapper) and find each one in the
//! assembly.

use kittens_hw::Arch;

mod global;
mod landed;
mod late_args;
pub mod layout;
mod lds_addr;
mod lds_runs;
mod lds_tr;
mod lower;
mod ops;
mod pinned;
mod reg_maps;
mod regops;
mod vec_global;

pub use global::check_launch;
pub use lower::{c_elem, lower};

/// Why a kernel could not be lowered to HIP.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LowerError {
    /// The IR uses something this lowering does not handle yet (named in the message).
    #[error("HIP lowering: {0}")]
    Unsupported(String),
    /// No matrix instruction or lane map fits a register tile.
    #[error("HIP lowering, register layout: {0}")]
    Layout(String),
    /// The schedule analysis found a hazard: no backend lowers a racy kernel.
    #[error("HIP lowering refused: {0}")]
    Schedule(#[from] kittens_ir::analysis::ScheduleError),
    /// The lowered kernel cannot address these parameters (named in the message).
    #[error("HIP launch: {0}")]
    Launch(String),
}

/// The HIP device prelude, shipped inside the crate.
pub const PRELUDE: &str = include_str!("prelude.hip");

/// A hand-written kernel (`prelude_smoke`) that calls every wrapper of [`PRELUDE`] once.
pub const PRELUDE_SMOKE: &str = include_str!("prelude_smoke.hip");

/// Which AMD targets have an instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Targets {
    /// gfx942 and gfx950.
    Both,
    /// CDNA3 only (removed in CDNA4).
    Gfx942Only,
    /// CDNA4 only (new in CDNA4).
    Gfx950Only,
}

impl Targets {
    /// True when `arch` has the instruction.
    pub fn includes(self, arch: Arch) -> bool {
        match self {
            Targets::Both => arch.is_amd(),
            Targets::Gfx942Only => arch == Arch::Cdna3,
            Targets::Gfx950Only => arch == Arch::Cdna4,
        }
    }
}

/// Every opcode the prelude wraps, with the targets that have it. MFMA availability follows the CDNA3
/// and CDNA4 ISA references (xf32 was dropped in CDNA4; the double-K bf16/f16 shapes and f8f6f4 are new
/// there); `ds_read_b64_tr_b16` and 16-byte buffer loads into LDS are CDNA4 additions (HipKittens D.1, D.5).
/// `v_cvt_pk_bf16_f32` exists only on CDNA4; CDNA3 packs with `v_perm_b32` after integer rounding.
pub const WRAPPED_OPCODES: &[(&str, Targets)] = &[
    ("v_mfma_f32_16x16x16_bf16", Targets::Both),
    ("v_mfma_f32_32x32x8_bf16", Targets::Both),
    ("v_mfma_f32_16x16x16_f16", Targets::Both),
    ("v_mfma_f32_32x32x8_f16", Targets::Both),
    ("v_mfma_f32_16x16x32_fp8_fp8", Targets::Both),
    ("v_mfma_f32_32x32x16_fp8_fp8", Targets::Both),
    ("v_mfma_f32_16x16x4_f32", Targets::Both),
    ("v_mfma_f32_16x16x8_xf32", Targets::Gfx942Only),
    ("v_mfma_f32_16x16x32_bf16", Targets::Gfx950Only),
    ("v_mfma_f32_32x32x16_bf16", Targets::Gfx950Only),
    ("v_mfma_f32_16x16x32_f16", Targets::Gfx950Only),
    ("v_mfma_f32_32x32x16_f16", Targets::Gfx950Only),
    ("v_mfma_f32_16x16x128_f8f6f4", Targets::Gfx950Only),
    ("v_mfma_f32_32x32x64_f8f6f4", Targets::Gfx950Only),
    ("ds_read_b128", Targets::Both),
    ("ds_read_b64", Targets::Both),
    ("ds_read_b64_tr_b16", Targets::Gfx950Only),
    ("ds_write_b64", Targets::Both),
    ("ds_write_b128", Targets::Both),
    ("buffer_load_dword", Targets::Both),
    ("buffer_load_dwordx4", Targets::Both),
    ("buffer_store_dword", Targets::Both),
    ("s_waitcnt", Targets::Both),
    ("v_perm_b32", Targets::Both),
    ("v_mbcnt_lo_u32_b32", Targets::Both),
    ("v_cvt_pk_bf16_f32", Targets::Gfx950Only),
];

/// The opcodes of [`WRAPPED_OPCODES`] that `arch` has.
pub fn wrapped_opcodes(arch: Arch) -> Vec<&'static str> {
    WRAPPED_OPCODES
        .iter()
        .filter(|(_, t)| t.includes(arch))
        .map(|(op, _)| *op)
        .collect()
}

/// The bf16 MFMA a target's GEMM uses: 16x16x16 on CDNA3, the double-K 16x16x32 on CDNA4 (HipKittens §3.2.2:
/// HipKittens' default register tiles use the smallest MFMA shape).
pub fn bf16_mfma_opcode(arch: Arch) -> Option<&'static str> {
    match arch {
        Arch::Cdna3 => Some("v_mfma_f32_16x16x16_bf16"),
        Arch::Cdna4 => Some("v_mfma_f32_16x16x32_bf16"),
        Arch::Hopper => None,
    }
}

/// A complete, self-contained HIP translation unit: the prelude followed by `kernel_body`.
pub fn translation_unit(kernel_body: &str) -> String {
    let mut s = String::with_capacity(PRELUDE.len() + kernel_body.len() + 1);
    s.push_str(PRELUDE);
    s.push('\n');
    s.push_str(kernel_body);
    s
}

/// HIP source of a built-in kernel for an AMD target, or `None` when this crate cannot produce it yet.
/// Today only `prelude_smoke` exists; lowered tile programs join once the IR lowering lands.
pub fn builtin_kernel_source(name: &str, arch: Arch) -> Option<String> {
    match (name, arch.is_amd()) {
        ("prelude_smoke", true) => Some(translation_unit(PRELUDE_SMOKE)),
        _ => None,
    }
}
