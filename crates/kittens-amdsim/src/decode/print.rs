//! Instruction text in LLVM's AMDGPU printer's form (mnemonic suffixes `_e32`/`_e64`/`_sdwa`,
//! register ranges `v[0:3]`, modifiers after the operands), so a decoded instruction can be compared
//! character for character with the compiler's listing.

use super::{Enc, Fam, Instr, Op, LITERAL, NONE, VGPR0};
use std::fmt::Write;

/// One operand of `width` dwords; `acc` prints a VGPR as an AGPR.
pub(super) fn operand(code: u16, width: u8, literal: u32, acc: bool) -> String {
    let range = |p: &str, n: u16| {
        if width <= 1 {
            format!("{p}{n}")
        } else {
            format!("{p}[{n}:{}]", n + width as u16 - 1)
        }
    };
    match code {
        NONE => "off".into(),
        c if c >= VGPR0 => range(if acc { "a" } else { "v" }, c - VGPR0),
        0..=101 => range("s", code),
        102 => "flat_scratch_lo".into(),
        103 => "flat_scratch_hi".into(),
        104 => "xnack_mask_lo".into(),
        105 => "xnack_mask_hi".into(),
        106 if width == 2 => "vcc".into(),
        106 => "vcc_lo".into(),
        107 => "vcc_hi".into(),
        108..=123 => range("ttmp", code - 108),
        124 => "m0".into(),
        126 if width == 2 => "exec".into(),
        126 => "exec_lo".into(),
        127 => "exec_hi".into(),
        128..=192 => (code - 128).to_string(),
        193..=208 => format!("-{}", code - 192),
        235 => "src_shared_base".into(),
        236 => "src_shared_limit".into(),
        237 => "src_private_base".into(),
        238 => "src_private_limit".into(),
        240 => "0.5".into(),
        241 => "-0.5".into(),
        242 => "1.0".into(),
        243 => "-1.0".into(),
        244 => "2.0".into(),
        245 => "-2.0".into(),
        246 => "4.0".into(),
        247 => "-4.0".into(),
        248 => "0.15915494".into(),
        251 => "vccz".into(),
        252 => "execz".into(),
        253 => "scc".into(),
        LITERAL => format!("{literal:#x}"),
        c => format!("<src {c}>"),
    }
}

/// Source `k` with VOP3 input modifiers.
fn src_mod(i: &Instr, k: usize) -> String {
    let w = i.op.widths()[k + 1];
    let mut s = operand(i.src[k], w, i.literal, false);
    if i.abs >> k & 1 == 1 {
        s = format!("|{s}|");
    }
    if i.neg >> k & 1 == 1 {
        s = format!("-{s}");
    }
    s
}

fn bits(v: u8, n: usize) -> String {
    let b: Vec<String> = (0..n).map(|k| (v >> k & 1).to_string()).collect();
    format!("[{}]", b.join(","))
}

const SEL: [&str; 7] = [
    "BYTE_0", "BYTE_1", "BYTE_2", "BYTE_3", "WORD_0", "WORD_1", "DWORD",
];
const UNUSED: [&str; 3] = ["UNUSED_PAD", "UNUSED_SEXT", "UNUSED_PRESERVE"];

fn omod(o: u8) -> &'static str {
    match o {
        1 => " mul:2",
        2 => " mul:4",
        3 => " div:2",
        _ => "",
    }
}

pub(super) fn text(i: &Instr) -> String {
    let op = i.op;
    let [wd, w0, w1, w2] = op.widths();
    let name = op.name();
    let mut t = String::new();
    match i.enc {
        Enc::Sop2 => {
            let _ = write!(
                t,
                "{name} {}, {}, {}",
                operand(i.dst, wd, i.literal, false),
                operand(i.src[0], w0, i.literal, false),
                operand(i.src[1], w1, i.literal, false)
            );
        }
        Enc::Sop1 => {
            let _ = write!(
                t,
                "{name} {}, {}",
                operand(i.dst, wd, i.literal, false),
                operand(i.src[0], w0, i.literal, false)
            );
        }
        Enc::Sopc => {
            let _ = write!(
                t,
                "{name} {}, {}",
                operand(i.src[0], w0, i.literal, false),
                operand(i.src[1], w1, i.literal, false)
            );
        }
        Enc::Sopk => {
            let reg = if wd > 0 { i.dst } else { i.src[0] };
            let _ = write!(
                t,
                "{name} {}, {:#x}",
                operand(reg, 1, 0, false),
                i.imm as u16
            );
        }
        Enc::Sopp => sopp(&mut t, i),
        Enc::Smem => {
            let _ = write!(
                t,
                "{name} {}, {}, ",
                operand(i.dst, wd, 0, false),
                operand(i.src[0], 2, 0, false)
            );
            if i.src[1] != NONE && i.imm == 0 {
                t.push_str(&operand(i.src[1], 1, 0, false));
            } else if i.src[1] != NONE {
                let _ = write!(t, "{} offset:{:#x}", operand(i.src[1], 1, 0, false), i.imm);
            } else {
                let _ = write!(t, "{:#x}", i.imm);
            }
            if i.sc0 {
                t.push_str(" glc");
            }
        }
        Enc::Vop1 | Enc::Vop2 | Enc::Vopc => {
            let suffix = if op.has_suffix() { "_e32" } else { "" };
            let _ = write!(
                t,
                "{name}{suffix} {}",
                operand(i.dst, wd, i.literal, i.acc & 4 != 0)
            );
            if i.sdst != NONE {
                // The carry-out of V_ADD_CO_U32 and its kind, VCC in this form.
                let _ = write!(t, ", {}", operand(i.sdst, 2, 0, false));
            }
            let mut srcs: Vec<String> = (0..3)
                .filter(|&k| i.src[k] != NONE)
                .map(|k| {
                    operand(
                        i.src[k],
                        [w0, w1, w2][k],
                        i.literal,
                        k == 0 && i.acc & 1 != 0,
                    )
                })
                .collect();
            // The constant K sits between the sources (fmamk: S0·K + S1) or after them (fmaak).
            match op {
                Op::VFmamkF32 => srcs.insert(1, format!("{:#x}", i.literal)),
                Op::VFmaakF32 => srcs.push(format!("{:#x}", i.literal)),
                _ => {}
            }
            for s in srcs {
                let _ = write!(t, ", {s}");
            }
        }
        Enc::Sdwa => sdwa(&mut t, i),
        Enc::Vop3 => {
            let suffix = if op.has_suffix() { "_e64" } else { "" };
            let dw = if op.fam() == Fam::Vopc { 2 } else { wd };
            let _ = write!(t, "{name}{suffix} {}", operand(i.dst, dw, 0, false));
            if i.sdst != NONE {
                let _ = write!(t, ", {}", operand(i.sdst, 2, 0, false));
            }
            for k in 0..3 {
                if i.src[k] != NONE {
                    let _ = write!(t, ", {}", src_mod(i, k));
                }
            }
            if i.clamp {
                t.push_str(" clamp");
            }
            t.push_str(omod(i.omod));
            if op == Op::VBitop3B32 {
                let _ = write!(t, " bitop3:{:#x}", i.imm);
            } else if i.op_sel != 0 {
                let _ = write!(t, " op_sel:{}", bits(i.op_sel, 4));
            }
        }
        Enc::Vop3p => vop3p(&mut t, i),
        Enc::Ds => {
            let _ = write!(t, "{name}");
            let mut sep = " ";
            if i.dst != NONE {
                let _ = write!(t, " {}", operand(i.dst, wd, 0, i.acc & 4 != 0));
                sep = ", ";
            }
            let _ = write!(t, "{sep}{}", operand(i.src[0], 1, 0, false));
            for k in 1..3 {
                if i.src[k] != NONE {
                    let _ = write!(
                        t,
                        ", {}",
                        operand(i.src[k], [w0, w1, w2][k], 0, i.acc & 4 != 0)
                    );
                }
            }
            if name.starts_with("ds_read2") || name.starts_with("ds_write2") {
                // Two 8-bit offsets in units of the element, each printed where not zero.
                for (k, off) in [i.imm & 0xff, (i.imm >> 8) & 0xff].into_iter().enumerate() {
                    if off != 0 {
                        let _ = write!(t, " offset{k}:{off}");
                    }
                }
            } else if i.imm != 0 {
                let _ = write!(t, " offset:{}", i.imm);
            }
        }
        Enc::Mubuf => {
            let _ = write!(t, "{name} ");
            if !i.lds {
                let _ = write!(t, "{}, ", operand(i.dst, wd, 0, i.acc & 4 != 0));
            }
            let vaddr = if i.offen || i.idxen {
                operand(i.src[0], if i.offen && i.idxen { 2 } else { 1 }, 0, false)
            } else {
                "off".into()
            };
            let _ = write!(
                t,
                "{vaddr}, {}, {}",
                operand(i.src[1], 4, 0, false),
                operand(i.src[2], 1, 0, false)
            );
            if i.offen {
                t.push_str(" offen");
            }
            if i.idxen {
                t.push_str(" idxen");
            }
            if i.imm != 0 {
                let _ = write!(t, " offset:{}", i.imm);
            }
            cache_bits(&mut t, i);
            if i.lds {
                t.push_str(" lds");
            }
        }
        Enc::Global => {
            let aw = if i.src[1] == NONE { 2 } else { 1 };
            let addr = operand(i.src[0], aw, 0, false);
            let data = operand(i.dst, wd, 0, i.acc & 4 != 0);
            if op.is_store() {
                let _ = write!(t, "{name} {addr}, {data}");
            } else {
                let _ = write!(t, "{name} {data}, {addr}");
            }
            let _ = write!(t, ", {}", operand(i.src[1], 2, 0, false));
            if i.imm != 0 {
                let _ = write!(t, " offset:{}", i.imm);
            }
            cache_bits(&mut t, i);
        }
    }
    t
}

fn cache_bits(t: &mut String, i: &Instr) {
    for (on, s) in [(i.sc0, " sc0"), (i.sc1, " sc1"), (i.nt, " nt")] {
        if on {
            t.push_str(s);
        }
    }
}

fn sopp(t: &mut String, i: &Instr) {
    let name = i.op.name();
    match i.op {
        Op::SEndpgm | Op::SBarrier => t.push_str(name),
        Op::SWaitcnt => {
            let w = i.imm as u32 & 0xffff;
            let (vm, exp, lgkm) = (w & 0xf | (w >> 14 & 3) << 4, w >> 4 & 7, w >> 8 & 0xf);
            let mut parts = Vec::new();
            if vm != 63 {
                parts.push(format!("vmcnt({vm})"));
            }
            if exp != 7 {
                parts.push(format!("expcnt({exp})"));
            }
            if lgkm != 15 {
                parts.push(format!("lgkmcnt({lgkm})"));
            }
            let _ = write!(t, "{name} {}", parts.join(" "));
        }
        _ => match i.branch_target() {
            Some(target) => {
                let _ = write!(t, "{name} pc+{target}");
            }
            None => {
                let _ = write!(t, "{name} {}", i.imm);
            }
        },
    }
}

fn sdwa(t: &mut String, i: &Instr) {
    let Some(s) = i.sdwa else { return };
    let [wd, _, _, _] = i.op.widths();
    let src = |k: usize, sext: bool, neg: bool, abs: bool| {
        let mut x = operand(i.src[k], 1, 0, false);
        if sext {
            x = format!("sext({x})");
        }
        if abs {
            x = format!("|{x}|");
        }
        if neg {
            x = format!("-{x}");
        }
        x
    };
    let _ = write!(
        t,
        "{}_sdwa {}, {}",
        i.op.name(),
        operand(i.dst, wd, 0, false),
        src(0, s.src0_sext, s.src0_neg, s.src0_abs)
    );
    let two = i.src[1] != NONE;
    if two {
        let _ = write!(t, ", {}", src(1, s.src1_sext, s.src1_neg, s.src1_abs));
    }
    if i.src[2] != NONE {
        let _ = write!(t, ", {}", operand(i.src[2], 2, 0, false));
    }
    if s.clamp {
        t.push_str(" clamp");
    }
    t.push_str(omod(i.omod));
    let sel = |v: u8| SEL.get(v as usize).copied().unwrap_or("?");
    let _ = write!(
        t,
        " dst_sel:{} dst_unused:{} src0_sel:{}",
        sel(s.dst_sel),
        UNUSED.get(s.dst_unused as usize).copied().unwrap_or("?"),
        sel(s.src0_sel)
    );
    if two {
        let _ = write!(t, " src1_sel:{}", sel(s.src1_sel));
    }
}

fn vop3p(t: &mut String, i: &Instr) {
    let [wd, w0, w1, w2] = i.op.widths();
    if i.op.is_mfma() {
        let _ = write!(
            t,
            "{} {}, {}, {}, {}",
            i.op.name(),
            operand(i.dst, wd, 0, i.acc & 4 != 0),
            operand(i.src[0], w0, 0, i.acc & 1 != 0),
            operand(i.src[1], w1, 0, i.acc & 2 != 0),
            operand(i.src[2], w2, 0, i.acc & 4 != 0)
        );
        for (v, n) in [(i.cbsz, "cbsz"), (i.abid, "abid"), (i.blgp, "blgp")] {
            if v != 0 {
                let _ = write!(t, " {n}:{v}");
            }
        }
        return;
    }
    let _ = write!(
        t,
        "{} {}",
        i.op.name(),
        operand(i.dst, wd, 0, i.acc & 4 != 0)
    );
    let n = i.src.iter().filter(|&&s| s != NONE).count();
    for k in 0..n {
        let _ = write!(
            t,
            ", {}",
            operand(
                i.src[k],
                [w0, w1, w2][k],
                i.literal,
                k == 0 && i.acc & 1 != 0
            )
        );
    }
    let all = (1u8 << n) - 1;
    if i.op_sel != 0 {
        let _ = write!(t, " op_sel:{}", bits(i.op_sel, n));
    }
    if i.op_sel_hi & all != all {
        let _ = write!(t, " op_sel_hi:{}", bits(i.op_sel_hi, n));
    }
    if i.neg != 0 {
        let _ = write!(t, " neg_lo:{}", bits(i.neg, n));
    }
    if i.neg_hi != 0 {
        let _ = write!(t, " neg_hi:{}", bits(i.neg_hi, n));
    }
    if i.clamp {
        t.push_str(" clamp");
    }
}
