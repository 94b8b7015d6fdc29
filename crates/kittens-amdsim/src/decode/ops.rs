//! The opcode tables: every instruction the emulator decodes, by encoding family and opcode
//! (CDNA3 ISA guide and CDNA4 ISA guide, "Instructions" and "Microcode Formats"; opcodes as LLVM's
//! AMDGPU assembler encodes them for gfx942 and gfx950). An opcode not listed here is an
//! [`crate::SimError::UnknownInstruction`], never a skip.

use kittens_hw::Arch;

/// An encoding family (CDNA3 ISA guide, "Microcode Formats").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Fam {
    Sop2,
    Sopk,
    Sop1,
    Sopc,
    Sopp,
    Smem,
    Vop2,
    Vop1,
    Vopc,
    /// VOP3-only opcodes (VOP1/VOP2/VOPC promoted to VOP3 keep their own family).
    Vop3,
    Vop3p,
    Ds,
    Mubuf,
    Global,
}

/// Where an opcode exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Avail {
    Both,
    /// CDNA4 (gfx950) only.
    G950,
}

macro_rules! ops {
    ($( $fam:ident $code:literal $var:ident $name:literal [$d:literal, $a:literal, $b:literal, $c:literal] $avail:ident; )*) => {
        /// One operation. Register widths come from [`Op::widths`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[allow(clippy::enum_variant_names)]
        pub enum Op { $($var,)* }

        impl Op {
            /// The mnemonic without an encoding suffix (`v_add_f32`, not `v_add_f32_e32`).
            pub fn name(self) -> &'static str {
                match self { $(Op::$var => $name,)* }
            }

            pub fn fam(self) -> Fam {
                match self { $(Op::$var => Fam::$fam,)* }
            }

            /// Registers (dwords) of the destination and of sources 0, 1, 2 (0 = no such operand).
            pub fn widths(self) -> [u8; 4] {
                match self { $(Op::$var => [$d, $a, $b, $c],)* }
            }

            fn avail(self) -> Avail {
                match self { $(Op::$var => Avail::$avail,)* }
            }

            const ALL: &'static [Op] = &[$(Op::$var,)*];
        }
    };
}

impl Op {
    /// The operation with this opcode in this family, if `arch` has it.
    pub fn lookup(fam: Fam, code: u16, arch: Arch) -> Option<Op> {
        Op::ALL.iter().copied().find(|op| {
            op.fam() == fam
                && op.code() == code
                && (op.avail() == Avail::Both || arch == Arch::Cdna4)
        })
    }

    /// The opcode within its family.
    pub fn code(self) -> u16 {
        CODES[self as usize]
    }
}

macro_rules! codes {
    ($( $fam:ident $code:literal $var:ident $name:literal [$d:literal, $a:literal, $b:literal, $c:literal] $avail:ident; )*) => {
        const CODES: &[u16] = &[$($code,)*];
    };
}

macro_rules! table {
    ($($t:tt)*) => {
        ops!($($t)*);
        codes!($($t)*);
    };
}

table! {
    Sop2 0x00 SAddU32 "s_add_u32" [1, 1, 1, 0] Both;
    Sop2 0x01 SSubU32 "s_sub_u32" [1, 1, 1, 0] Both;
    Sop2 0x02 SAddI32 "s_add_i32" [1, 1, 1, 0] Both;
    Sop2 0x03 SSubI32 "s_sub_i32" [1, 1, 1, 0] Both;
    Sop2 0x04 SAddcU32 "s_addc_u32" [1, 1, 1, 0] Both;
    Sop2 0x05 SSubbU32 "s_subb_u32" [1, 1, 1, 0] Both;
    Sop2 0x06 SMinI32 "s_min_i32" [1, 1, 1, 0] Both;
    Sop2 0x07 SMinU32 "s_min_u32" [1, 1, 1, 0] Both;
    Sop2 0x08 SMaxI32 "s_max_i32" [1, 1, 1, 0] Both;
    Sop2 0x09 SMaxU32 "s_max_u32" [1, 1, 1, 0] Both;
    Sop2 0x0a SCselectB32 "s_cselect_b32" [1, 1, 1, 0] Both;
    Sop2 0x0b SCselectB64 "s_cselect_b64" [2, 2, 2, 0] Both;
    Sop2 0x0c SAndB32 "s_and_b32" [1, 1, 1, 0] Both;
    Sop2 0x0d SAndB64 "s_and_b64" [2, 2, 2, 0] Both;
    Sop2 0x0e SOrB32 "s_or_b32" [1, 1, 1, 0] Both;
    Sop2 0x0f SOrB64 "s_or_b64" [2, 2, 2, 0] Both;
    Sop2 0x10 SXorB32 "s_xor_b32" [1, 1, 1, 0] Both;
    Sop2 0x11 SXorB64 "s_xor_b64" [2, 2, 2, 0] Both;
    Sop2 0x12 SAndn2B32 "s_andn2_b32" [1, 1, 1, 0] Both;
    Sop2 0x13 SAndn2B64 "s_andn2_b64" [2, 2, 2, 0] Both;
    Sop2 0x14 SOrn2B32 "s_orn2_b32" [1, 1, 1, 0] Both;
    Sop2 0x15 SOrn2B64 "s_orn2_b64" [2, 2, 2, 0] Both;
    Sop2 0x16 SNandB32 "s_nand_b32" [1, 1, 1, 0] Both;
    Sop2 0x17 SNandB64 "s_nand_b64" [2, 2, 2, 0] Both;
    Sop2 0x18 SNorB32 "s_nor_b32" [1, 1, 1, 0] Both;
    Sop2 0x19 SNorB64 "s_nor_b64" [2, 2, 2, 0] Both;
    Sop2 0x1a SXnorB32 "s_xnor_b32" [1, 1, 1, 0] Both;
    Sop2 0x1b SXnorB64 "s_xnor_b64" [2, 2, 2, 0] Both;
    Sop2 0x1c SLshlB32 "s_lshl_b32" [1, 1, 1, 0] Both;
    Sop2 0x1d SLshlB64 "s_lshl_b64" [2, 2, 1, 0] Both;
    Sop2 0x1e SLshrB32 "s_lshr_b32" [1, 1, 1, 0] Both;
    Sop2 0x1f SLshrB64 "s_lshr_b64" [2, 2, 1, 0] Both;
    Sop2 0x20 SAshrI32 "s_ashr_i32" [1, 1, 1, 0] Both;
    Sop2 0x21 SAshrI64 "s_ashr_i64" [2, 2, 1, 0] Both;
    Sop2 0x24 SMulI32 "s_mul_i32" [1, 1, 1, 0] Both;
    Sop2 0x25 SBfeU32 "s_bfe_u32" [1, 1, 1, 0] Both;
    Sop2 0x26 SBfeI32 "s_bfe_i32" [1, 1, 1, 0] Both;
    Sop2 0x27 SBfeU64 "s_bfe_u64" [2, 2, 1, 0] Both;
    Sop2 0x28 SBfeI64 "s_bfe_i64" [2, 2, 1, 0] Both;
    Sop2 0x2c SMulHiU32 "s_mul_hi_u32" [1, 1, 1, 0] Both;
    Sop2 0x2d SMulHiI32 "s_mul_hi_i32" [1, 1, 1, 0] Both;
    Sop2 0x2e SLshl1AddU32 "s_lshl1_add_u32" [1, 1, 1, 0] Both;
    Sop2 0x2f SLshl2AddU32 "s_lshl2_add_u32" [1, 1, 1, 0] Both;
    Sop2 0x30 SLshl3AddU32 "s_lshl3_add_u32" [1, 1, 1, 0] Both;
    Sop2 0x31 SLshl4AddU32 "s_lshl4_add_u32" [1, 1, 1, 0] Both;

    Sopk 0x00 SMovkI32 "s_movk_i32" [1, 0, 0, 0] Both;
    Sopk 0x02 SCmpkEqI32 "s_cmpk_eq_i32" [0, 1, 0, 0] Both;
    Sopk 0x03 SCmpkLgI32 "s_cmpk_lg_i32" [0, 1, 0, 0] Both;
    Sopk 0x04 SCmpkGtI32 "s_cmpk_gt_i32" [0, 1, 0, 0] Both;
    Sopk 0x05 SCmpkGeI32 "s_cmpk_ge_i32" [0, 1, 0, 0] Both;
    Sopk 0x06 SCmpkLtI32 "s_cmpk_lt_i32" [0, 1, 0, 0] Both;
    Sopk 0x07 SCmpkLeI32 "s_cmpk_le_i32" [0, 1, 0, 0] Both;
    Sopk 0x08 SCmpkEqU32 "s_cmpk_eq_u32" [0, 1, 0, 0] Both;
    Sopk 0x09 SCmpkLgU32 "s_cmpk_lg_u32" [0, 1, 0, 0] Both;
    Sopk 0x0a SCmpkGtU32 "s_cmpk_gt_u32" [0, 1, 0, 0] Both;
    Sopk 0x0b SCmpkGeU32 "s_cmpk_ge_u32" [0, 1, 0, 0] Both;
    Sopk 0x0c SCmpkLtU32 "s_cmpk_lt_u32" [0, 1, 0, 0] Both;
    Sopk 0x0d SCmpkLeU32 "s_cmpk_le_u32" [0, 1, 0, 0] Both;
    Sopk 0x0e SAddkI32 "s_addk_i32" [1, 0, 0, 0] Both;
    Sopk 0x0f SMulkI32 "s_mulk_i32" [1, 0, 0, 0] Both;

    Sop1 0x00 SMovB32 "s_mov_b32" [1, 1, 0, 0] Both;
    Sop1 0x01 SMovB64 "s_mov_b64" [2, 2, 0, 0] Both;
    Sop1 0x04 SNotB32 "s_not_b32" [1, 1, 0, 0] Both;
    Sop1 0x05 SNotB64 "s_not_b64" [2, 2, 0, 0] Both;
    Sop1 0x18 SBitset0B32 "s_bitset0_b32" [1, 1, 0, 0] Both;
    Sop1 0x1a SBitset1B32 "s_bitset1_b32" [1, 1, 0, 0] Both;
    Sop1 0x20 SAndSaveexecB64 "s_and_saveexec_b64" [2, 2, 0, 0] Both;
    Sop1 0x21 SOrSaveexecB64 "s_or_saveexec_b64" [2, 2, 0, 0] Both;
    Sop1 0x23 SAndn2SaveexecB64 "s_andn2_saveexec_b64" [2, 2, 0, 0] Both;
    Sop1 0x30 SAbsI32 "s_abs_i32" [1, 1, 0, 0] Both;

    Sopc 0x00 SCmpEqI32 "s_cmp_eq_i32" [0, 1, 1, 0] Both;
    Sopc 0x01 SCmpLgI32 "s_cmp_lg_i32" [0, 1, 1, 0] Both;
    Sopc 0x02 SCmpGtI32 "s_cmp_gt_i32" [0, 1, 1, 0] Both;
    Sopc 0x03 SCmpGeI32 "s_cmp_ge_i32" [0, 1, 1, 0] Both;
    Sopc 0x04 SCmpLtI32 "s_cmp_lt_i32" [0, 1, 1, 0] Both;
    Sopc 0x05 SCmpLeI32 "s_cmp_le_i32" [0, 1, 1, 0] Both;
    Sopc 0x06 SCmpEqU32 "s_cmp_eq_u32" [0, 1, 1, 0] Both;
    Sopc 0x07 SCmpLgU32 "s_cmp_lg_u32" [0, 1, 1, 0] Both;
    Sopc 0x08 SCmpGtU32 "s_cmp_gt_u32" [0, 1, 1, 0] Both;
    Sopc 0x09 SCmpGeU32 "s_cmp_ge_u32" [0, 1, 1, 0] Both;
    Sopc 0x0a SCmpLtU32 "s_cmp_lt_u32" [0, 1, 1, 0] Both;
    Sopc 0x0b SCmpLeU32 "s_cmp_le_u32" [0, 1, 1, 0] Both;
    Sopc 0x0c SBitcmp0B32 "s_bitcmp0_b32" [0, 1, 1, 0] Both;
    Sopc 0x0d SBitcmp1B32 "s_bitcmp1_b32" [0, 1, 1, 0] Both;
    Sopc 0x12 SCmpEqU64 "s_cmp_eq_u64" [0, 2, 2, 0] Both;
    Sopc 0x13 SCmpLgU64 "s_cmp_lg_u64" [0, 2, 2, 0] Both;

    Sopp 0x00 SNop "s_nop" [0, 0, 0, 0] Both;
    Sopp 0x01 SEndpgm "s_endpgm" [0, 0, 0, 0] Both;
    Sopp 0x02 SBranch "s_branch" [0, 0, 0, 0] Both;
    Sopp 0x04 SCbranchScc0 "s_cbranch_scc0" [0, 0, 0, 0] Both;
    Sopp 0x05 SCbranchScc1 "s_cbranch_scc1" [0, 0, 0, 0] Both;
    Sopp 0x06 SCbranchVccz "s_cbranch_vccz" [0, 0, 0, 0] Both;
    Sopp 0x07 SCbranchVccnz "s_cbranch_vccnz" [0, 0, 0, 0] Both;
    Sopp 0x08 SCbranchExecz "s_cbranch_execz" [0, 0, 0, 0] Both;
    Sopp 0x09 SCbranchExecnz "s_cbranch_execnz" [0, 0, 0, 0] Both;
    Sopp 0x0a SBarrier "s_barrier" [0, 0, 0, 0] Both;
    Sopp 0x0c SWaitcnt "s_waitcnt" [0, 0, 0, 0] Both;
    Sopp 0x0f SSetprio "s_setprio" [0, 0, 0, 0] Both;

    Smem 0x00 SLoadDword "s_load_dword" [1, 2, 0, 0] Both;
    Smem 0x01 SLoadDwordx2 "s_load_dwordx2" [2, 2, 0, 0] Both;
    Smem 0x02 SLoadDwordx4 "s_load_dwordx4" [4, 2, 0, 0] Both;
    Smem 0x03 SLoadDwordx8 "s_load_dwordx8" [8, 2, 0, 0] Both;
    Smem 0x04 SLoadDwordx16 "s_load_dwordx16" [16, 2, 0, 0] Both;

    Vop2 0x00 VCndmaskB32 "v_cndmask_b32" [1, 1, 1, 2] Both;
    Vop2 0x01 VAddF32 "v_add_f32" [1, 1, 1, 0] Both;
    Vop2 0x02 VSubF32 "v_sub_f32" [1, 1, 1, 0] Both;
    Vop2 0x03 VSubrevF32 "v_subrev_f32" [1, 1, 1, 0] Both;
    Vop2 0x05 VMulF32 "v_mul_f32" [1, 1, 1, 0] Both;
    Vop2 0x06 VMulI32I24 "v_mul_i32_i24" [1, 1, 1, 0] Both;
    Vop2 0x08 VMulU32U24 "v_mul_u32_u24" [1, 1, 1, 0] Both;
    Vop2 0x09 VMulHiU32U24 "v_mul_hi_u32_u24" [1, 1, 1, 0] Both;
    Vop2 0x0a VMinF32 "v_min_f32" [1, 1, 1, 0] Both;
    Vop2 0x0b VMaxF32 "v_max_f32" [1, 1, 1, 0] Both;
    Vop2 0x0c VMinI32 "v_min_i32" [1, 1, 1, 0] Both;
    Vop2 0x0d VMaxI32 "v_max_i32" [1, 1, 1, 0] Both;
    Vop2 0x0e VMinU32 "v_min_u32" [1, 1, 1, 0] Both;
    Vop2 0x0f VMaxU32 "v_max_u32" [1, 1, 1, 0] Both;
    Vop2 0x10 VLshrrevB32 "v_lshrrev_b32" [1, 1, 1, 0] Both;
    Vop2 0x11 VAshrrevI32 "v_ashrrev_i32" [1, 1, 1, 0] Both;
    Vop2 0x12 VLshlrevB32 "v_lshlrev_b32" [1, 1, 1, 0] Both;
    Vop2 0x13 VAndB32 "v_and_b32" [1, 1, 1, 0] Both;
    Vop2 0x14 VOrB32 "v_or_b32" [1, 1, 1, 0] Both;
    Vop2 0x15 VXorB32 "v_xor_b32" [1, 1, 1, 0] Both;
    Vop2 0x17 VFmamkF32 "v_fmamk_f32" [1, 1, 1, 0] Both;
    Vop2 0x18 VFmaakF32 "v_fmaak_f32" [1, 1, 1, 0] Both;
    Vop2 0x19 VAddCoU32 "v_add_co_u32" [1, 1, 1, 0] Both;
    Vop2 0x1a VSubCoU32 "v_sub_co_u32" [1, 1, 1, 0] Both;
    Vop2 0x1b VSubrevCoU32 "v_subrev_co_u32" [1, 1, 1, 0] Both;
    Vop2 0x1c VAddcCoU32 "v_addc_co_u32" [1, 1, 1, 2] Both;
    Vop2 0x1d VSubbCoU32 "v_subb_co_u32" [1, 1, 1, 2] Both;
    Vop2 0x1e VSubbrevCoU32 "v_subbrev_co_u32" [1, 1, 1, 2] Both;
    Vop2 0x26 VAddU16 "v_add_u16" [1, 1, 1, 0] Both;
    Vop2 0x27 VSubU16 "v_sub_u16" [1, 1, 1, 0] Both;
    Vop2 0x28 VSubrevU16 "v_subrev_u16" [1, 1, 1, 0] Both;
    Vop2 0x29 VMulLoU16 "v_mul_lo_u16" [1, 1, 1, 0] Both;
    Vop2 0x2a VLshlrevB16 "v_lshlrev_b16" [1, 1, 1, 0] Both;
    Vop2 0x2b VLshrrevB16 "v_lshrrev_b16" [1, 1, 1, 0] Both;
    Vop2 0x34 VAddU32 "v_add_u32" [1, 1, 1, 0] Both;
    Vop2 0x35 VSubU32 "v_sub_u32" [1, 1, 1, 0] Both;
    Vop2 0x36 VSubrevU32 "v_subrev_u32" [1, 1, 1, 0] Both;
    Vop2 0x3b VFmacF32 "v_fmac_f32" [1, 1, 1, 0] Both;

    Vop1 0x01 VMovB32 "v_mov_b32" [1, 1, 0, 0] Both;
    Vop1 0x02 VReadfirstlaneB32 "v_readfirstlane_b32" [1, 1, 0, 0] Both;
    Vop1 0x05 VCvtF32I32 "v_cvt_f32_i32" [1, 1, 0, 0] Both;
    Vop1 0x06 VCvtF32U32 "v_cvt_f32_u32" [1, 1, 0, 0] Both;
    Vop1 0x07 VCvtU32F32 "v_cvt_u32_f32" [1, 1, 0, 0] Both;
    Vop1 0x08 VCvtI32F32 "v_cvt_i32_f32" [1, 1, 0, 0] Both;
    Vop1 0x1c VTruncF32 "v_trunc_f32" [1, 1, 0, 0] Both;
    Vop1 0x20 VExpF32 "v_exp_f32" [1, 1, 0, 0] Both;
    Vop1 0x21 VLogF32 "v_log_f32" [1, 1, 0, 0] Both;
    Vop1 0x22 VRcpF32 "v_rcp_f32" [1, 1, 0, 0] Both;
    Vop1 0x23 VRcpIflagF32 "v_rcp_iflag_f32" [1, 1, 0, 0] Both;
    Vop1 0x27 VSqrtF32 "v_sqrt_f32" [1, 1, 0, 0] Both;
    Vop1 0x2b VNotB32 "v_not_b32" [1, 1, 0, 0] Both;
    Vop1 0x2c VBfrevB32 "v_bfrev_b32" [1, 1, 0, 0] Both;
    Vop1 0x38 VMovB64 "v_mov_b64" [2, 2, 0, 0] Both;
    Vop1 0x52 VAccvgprMovB32 "v_accvgpr_mov_b32" [1, 1, 0, 0] Both;

    Vopc 0x10 VCmpClassF32 "v_cmp_class_f32" [2, 1, 1, 0] Both;
    Vopc 0x41 VCmpLtF32 "v_cmp_lt_f32" [2, 1, 1, 0] Both;
    Vopc 0x42 VCmpEqF32 "v_cmp_eq_f32" [2, 1, 1, 0] Both;
    Vopc 0x43 VCmpLeF32 "v_cmp_le_f32" [2, 1, 1, 0] Both;
    Vopc 0x44 VCmpGtF32 "v_cmp_gt_f32" [2, 1, 1, 0] Both;
    Vopc 0x45 VCmpLgF32 "v_cmp_lg_f32" [2, 1, 1, 0] Both;
    Vopc 0x46 VCmpGeF32 "v_cmp_ge_f32" [2, 1, 1, 0] Both;
    Vopc 0x47 VCmpOF32 "v_cmp_o_f32" [2, 1, 1, 0] Both;
    Vopc 0x48 VCmpUF32 "v_cmp_u_f32" [2, 1, 1, 0] Both;
    Vopc 0x49 VCmpNgeF32 "v_cmp_nge_f32" [2, 1, 1, 0] Both;
    Vopc 0x4a VCmpNlgF32 "v_cmp_nlg_f32" [2, 1, 1, 0] Both;
    Vopc 0x4b VCmpNgtF32 "v_cmp_ngt_f32" [2, 1, 1, 0] Both;
    Vopc 0x4c VCmpNleF32 "v_cmp_nle_f32" [2, 1, 1, 0] Both;
    Vopc 0x4d VCmpNeqF32 "v_cmp_neq_f32" [2, 1, 1, 0] Both;
    Vopc 0x4e VCmpNltF32 "v_cmp_nlt_f32" [2, 1, 1, 0] Both;
    Vopc 0xc1 VCmpLtI32 "v_cmp_lt_i32" [2, 1, 1, 0] Both;
    Vopc 0xc2 VCmpEqI32 "v_cmp_eq_i32" [2, 1, 1, 0] Both;
    Vopc 0xc3 VCmpLeI32 "v_cmp_le_i32" [2, 1, 1, 0] Both;
    Vopc 0xc4 VCmpGtI32 "v_cmp_gt_i32" [2, 1, 1, 0] Both;
    Vopc 0xc5 VCmpNeI32 "v_cmp_ne_i32" [2, 1, 1, 0] Both;
    Vopc 0xc6 VCmpGeI32 "v_cmp_ge_i32" [2, 1, 1, 0] Both;
    Vopc 0xc9 VCmpLtU32 "v_cmp_lt_u32" [2, 1, 1, 0] Both;
    Vopc 0xca VCmpEqU32 "v_cmp_eq_u32" [2, 1, 1, 0] Both;
    Vopc 0xcb VCmpLeU32 "v_cmp_le_u32" [2, 1, 1, 0] Both;
    Vopc 0xcc VCmpGtU32 "v_cmp_gt_u32" [2, 1, 1, 0] Both;
    Vopc 0xcd VCmpNeU32 "v_cmp_ne_u32" [2, 1, 1, 0] Both;
    Vopc 0xce VCmpGeU32 "v_cmp_ge_u32" [2, 1, 1, 0] Both;
    Vopc 0xe1 VCmpLtI64 "v_cmp_lt_i64" [2, 2, 2, 0] Both;
    Vopc 0xe2 VCmpEqI64 "v_cmp_eq_i64" [2, 2, 2, 0] Both;
    Vopc 0xe3 VCmpLeI64 "v_cmp_le_i64" [2, 2, 2, 0] Both;
    Vopc 0xe4 VCmpGtI64 "v_cmp_gt_i64" [2, 2, 2, 0] Both;
    Vopc 0xe5 VCmpNeI64 "v_cmp_ne_i64" [2, 2, 2, 0] Both;
    Vopc 0xe6 VCmpGeI64 "v_cmp_ge_i64" [2, 2, 2, 0] Both;
    Vopc 0xe9 VCmpLtU64 "v_cmp_lt_u64" [2, 2, 2, 0] Both;
    Vopc 0xea VCmpEqU64 "v_cmp_eq_u64" [2, 2, 2, 0] Both;
    Vopc 0xeb VCmpLeU64 "v_cmp_le_u64" [2, 2, 2, 0] Both;
    Vopc 0xec VCmpGtU64 "v_cmp_gt_u64" [2, 2, 2, 0] Both;
    Vopc 0xed VCmpNeU64 "v_cmp_ne_u64" [2, 2, 2, 0] Both;
    Vopc 0xee VCmpGeU64 "v_cmp_ge_u64" [2, 2, 2, 0] Both;

    Vop3 0x1c2 VMadI32I24 "v_mad_i32_i24" [1, 1, 1, 1] Both;
    Vop3 0x1c3 VMadU32U24 "v_mad_u32_u24" [1, 1, 1, 1] Both;
    Vop3 0x1c8 VBfeU32 "v_bfe_u32" [1, 1, 1, 1] Both;
    Vop3 0x1c9 VBfeI32 "v_bfe_i32" [1, 1, 1, 1] Both;
    Vop3 0x1ca VBfiB32 "v_bfi_b32" [1, 1, 1, 1] Both;
    Vop3 0x1cb VFmaF32 "v_fma_f32" [1, 1, 1, 1] Both;
    Vop3 0x1ce VAlignbitB32 "v_alignbit_b32" [1, 1, 1, 1] Both;
    Vop3 0x1d0 VMin3F32 "v_min3_f32" [1, 1, 1, 1] Both;
    Vop3 0x1d3 VMax3F32 "v_max3_f32" [1, 1, 1, 1] Both;
    Vop3 0x1de VDivFixupF32 "v_div_fixup_f32" [1, 1, 1, 1] Both;
    Vop3 0x1e0 VDivScaleF32 "v_div_scale_f32" [1, 1, 1, 1] Both;
    Vop3 0x1e2 VDivFmasF32 "v_div_fmas_f32" [1, 1, 1, 1] Both;
    Vop3 0x1e8 VMadU64U32 "v_mad_u64_u32" [2, 1, 1, 2] Both;
    Vop3 0x1e9 VMadI64I32 "v_mad_i64_i32" [2, 1, 1, 2] Both;
    Vop3 0x1ed VPermB32 "v_perm_b32" [1, 1, 1, 1] Both;
    Vop3 0x1f3 VXadU32 "v_xad_u32" [1, 1, 1, 1] Both;
    Vop3 0x1fd VLshlAddU32 "v_lshl_add_u32" [1, 1, 1, 1] Both;
    Vop3 0x1fe VAddLshlU32 "v_add_lshl_u32" [1, 1, 1, 1] Both;
    Vop3 0x1ff VAdd3U32 "v_add3_u32" [1, 1, 1, 1] Both;
    Vop3 0x200 VLshlOrB32 "v_lshl_or_b32" [1, 1, 1, 1] Both;
    Vop3 0x201 VAndOrB32 "v_and_or_b32" [1, 1, 1, 1] Both;
    Vop3 0x202 VOr3B32 "v_or3_b32" [1, 1, 1, 1] Both;
    Vop3 0x208 VLshlAddU64 "v_lshl_add_u64" [2, 2, 1, 2] Both;
    Vop3 0x234 VBitop3B32 "v_bitop3_b32" [1, 1, 1, 1] G950;
    Vop3 0x268 VCvtPkBf16F32 "v_cvt_pk_bf16_f32" [1, 1, 1, 0] G950;
    Vop3 0x285 VMulLoU32 "v_mul_lo_u32" [1, 1, 1, 0] Both;
    Vop3 0x286 VMulHiU32 "v_mul_hi_u32" [1, 1, 1, 0] Both;
    Vop3 0x288 VLdexpF32 "v_ldexp_f32" [1, 1, 1, 0] Both;
    Vop3 0x289 VReadlaneB32 "v_readlane_b32" [1, 1, 1, 0] Both;
    Vop3 0x28a VWritelaneB32 "v_writelane_b32" [1, 1, 1, 0] Both;
    Vop3 0x28c VMbcntLoU32B32 "v_mbcnt_lo_u32_b32" [1, 1, 1, 0] Both;
    Vop3 0x28d VMbcntHiU32B32 "v_mbcnt_hi_u32_b32" [1, 1, 1, 0] Both;
    Vop3 0x28f VLshlrevB64 "v_lshlrev_b64" [2, 1, 2, 0] Both;
    Vop3 0x290 VLshrrevB64 "v_lshrrev_b64" [2, 1, 2, 0] Both;
    Vop3 0x291 VAshrrevI64 "v_ashrrev_i64" [2, 1, 2, 0] Both;

    Vop3p 0x2d VMfmaF32_16x16x128F8f6f4 "v_mfma_f32_16x16x128_f8f6f4" [4, 8, 8, 4] G950;
    Vop3p 0x30 VPkFmaF32 "v_pk_fma_f32" [2, 2, 2, 2] Both;
    Vop3p 0x31 VPkMulF32 "v_pk_mul_f32" [2, 2, 2, 0] Both;
    Vop3p 0x32 VPkAddF32 "v_pk_add_f32" [2, 2, 2, 0] Both;
    Vop3p 0x33 VPkMovB32 "v_pk_mov_b32" [2, 2, 2, 0] Both;
    Vop3p 0x35 VMfmaF32_16x16x32Bf16 "v_mfma_f32_16x16x32_bf16" [4, 4, 4, 4] G950;
    Vop3p 0x37 VMfmaF32_32x32x16Bf16 "v_mfma_f32_32x32x16_bf16" [16, 4, 4, 16] G950;
    Vop3p 0x58 VAccvgprReadB32 "v_accvgpr_read_b32" [1, 1, 0, 0] Both;
    Vop3p 0x59 VAccvgprWriteB32 "v_accvgpr_write_b32" [1, 1, 0, 0] Both;
    Vop3p 0x60 VMfmaF32_32x32x8Bf16 "v_mfma_f32_32x32x8_bf16" [16, 2, 2, 16] Both;
    Vop3p 0x61 VMfmaF32_16x16x16Bf16 "v_mfma_f32_16x16x16_bf16" [4, 2, 2, 4] Both;
    Vop3p 0x73 VMfmaF32_16x16x32Fp8Fp8 "v_mfma_f32_16x16x32_fp8_fp8" [4, 2, 2, 4] Both;

    Ds 0x0d DsWriteB32 "ds_write_b32" [0, 1, 1, 0] Both;
    Ds 0x0e DsWrite2B32 "ds_write2_b32" [0, 1, 1, 1] Both;
    Ds 0x1e DsWriteB8 "ds_write_b8" [0, 1, 1, 0] Both;
    Ds 0x1f DsWriteB16 "ds_write_b16" [0, 1, 1, 0] Both;
    Ds 0x36 DsReadB32 "ds_read_b32" [1, 1, 0, 0] Both;
    Ds 0x37 DsRead2B32 "ds_read2_b32" [2, 1, 0, 0] Both;
    Ds 0x3c DsReadU16 "ds_read_u16" [1, 1, 0, 0] Both;
    Ds 0x3e DsPermuteB32 "ds_permute_b32" [1, 1, 1, 0] Both;
    Ds 0x3f DsBpermuteB32 "ds_bpermute_b32" [1, 1, 1, 0] Both;
    Ds 0x4d DsWriteB64 "ds_write_b64" [0, 1, 2, 0] Both;
    Ds 0x4e DsWrite2B64 "ds_write2_b64" [0, 1, 2, 2] Both;
    Ds 0x76 DsReadB64 "ds_read_b64" [2, 1, 0, 0] Both;
    Ds 0x77 DsRead2B64 "ds_read2_b64" [4, 1, 0, 0] Both;
    Ds 0xdf DsWriteB128 "ds_write_b128" [0, 1, 4, 0] Both;
    Ds 0xe3 DsReadB64TrB16 "ds_read_b64_tr_b16" [2, 1, 0, 0] G950;
    Ds 0xff DsReadB128 "ds_read_b128" [4, 1, 0, 0] Both;

    Mubuf 0x10 BufferLoadUbyte "buffer_load_ubyte" [1, 1, 4, 1] Both;
    Mubuf 0x12 BufferLoadUshort "buffer_load_ushort" [1, 1, 4, 1] Both;
    Mubuf 0x14 BufferLoadDword "buffer_load_dword" [1, 1, 4, 1] Both;
    Mubuf 0x15 BufferLoadDwordx2 "buffer_load_dwordx2" [2, 1, 4, 1] Both;
    Mubuf 0x17 BufferLoadDwordx4 "buffer_load_dwordx4" [4, 1, 4, 1] Both;
    Mubuf 0x1a BufferStoreShort "buffer_store_short" [1, 1, 4, 1] Both;
    Mubuf 0x1c BufferStoreDword "buffer_store_dword" [1, 1, 4, 1] Both;

    Global 0x10 GlobalLoadUbyte "global_load_ubyte" [1, 2, 0, 0] Both;
    Global 0x12 GlobalLoadUshort "global_load_ushort" [1, 2, 0, 0] Both;
    Global 0x14 GlobalLoadDword "global_load_dword" [1, 2, 0, 0] Both;
    Global 0x15 GlobalLoadDwordx2 "global_load_dwordx2" [2, 2, 0, 0] Both;
    Global 0x17 GlobalLoadDwordx4 "global_load_dwordx4" [4, 2, 0, 0] Both;
    Global 0x18 GlobalStoreByte "global_store_byte" [1, 2, 0, 0] Both;
    Global 0x1a GlobalStoreShort "global_store_short" [1, 2, 0, 0] Both;
    Global 0x1b GlobalStoreShortD16Hi "global_store_short_d16_hi" [1, 2, 0, 0] Both;
    Global 0x1c GlobalStoreDword "global_store_dword" [1, 2, 0, 0] Both;
    Global 0x1d GlobalStoreDwordx2 "global_store_dwordx2" [2, 2, 0, 0] Both;
    Global 0x1e GlobalStoreDwordx3 "global_store_dwordx3" [3, 2, 0, 0] Both;
    Global 0x1f GlobalStoreDwordx4 "global_store_dwordx4" [4, 2, 0, 0] Both;
}

impl Op {
    /// Whether a VOP1/VOP2/VOPC operation carries the `_e32`/`_e64` suffix in listings (all but
    /// those without a promoted twin in LLVM's printer: `v_readfirstlane_b32`, `v_accvgpr_mov_b32`
    /// and the inline-constant forms `v_fmamk_f32`/`v_fmaak_f32`).
    pub fn has_suffix(self) -> bool {
        matches!(self.fam(), Fam::Vop1 | Fam::Vop2 | Fam::Vopc)
            && !matches!(
                self,
                Op::VReadfirstlaneB32 | Op::VAccvgprMovB32 | Op::VFmamkF32 | Op::VFmaakF32
            )
    }

    /// The integer adds and subtracts with a carry (or borrow) out, and those with a carry in too
    /// (CDNA3 ISA guide, V_ADD_CO_U32 ... V_SUBBREV_CO_U32): VCC in their VOP2 form, an SGPR pair
    /// (VOP3b) in their VOP3 form.
    pub fn has_carry_out(self) -> bool {
        matches!(
            self,
            Op::VAddCoU32
                | Op::VSubCoU32
                | Op::VSubrevCoU32
                | Op::VAddcCoU32
                | Op::VSubbCoU32
                | Op::VSubbrevCoU32
        )
    }

    pub fn has_carry_in(self) -> bool {
        matches!(self, Op::VAddcCoU32 | Op::VSubbCoU32 | Op::VSubbrevCoU32)
    }

    /// VOP2 operations whose 32-bit constant K always follows the instruction word (CDNA3 ISA
    /// guide, V_FMAMK_F32 / V_FMAAK_F32), whatever their source codes say.
    pub fn has_constant_k(self) -> bool {
        matches!(self, Op::VFmamkF32 | Op::VFmaakF32)
    }

    pub fn is_store(self) -> bool {
        self.name().contains("store") || self.name().starts_with("ds_write")
    }

    pub fn is_mfma(self) -> bool {
        self.name().starts_with("v_mfma")
    }
}
