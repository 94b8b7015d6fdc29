//! The 32-row bf16 MFMAs the attention backward's `interleave4` configuration uses for dK and dV
//! (`v_mfma_f32_32x32x16_bf16` on gfx950, VOP3P opcode 0x37; `v_mfma_f32_32x32x8_bf16` on gfx942 and
//! gfx950, 0x60; opcodes and every word below as LLVM's AMDGPU assembler encodes them,
//! `-show-encoding`), decoded and run on a hand-assembled kernel: each lane loads its A and B
//! registers, the MFMA runs once with C = 0 into a[0:15] and once more accumulating (D = 2·A·B), and
//! the 16 accumulator registers are stored per lane. The expected D is computed here from lane maps
//! the emulator does not read: for gfx942 the AMD Matrix Instruction Calculator's own listing of
//! `v_mfma_f32_32x32x8_bf16` (kittens-hw's oracle file), for gfx950 IREE's layout of
//! `MFMA_F32_32x32x16_BF16` (IREEGPUAttrs.cpp: lane `l` holds row/column `l % 32` and the 8
//! consecutive K from `8·(l / 32)`; accumulator register `s` of lane `l` is row
//! `8·(s / 4) + 4·(l / 32) + s % 4` of column `l % 32`).

mod support;

use kittens_amdsim::exec::Options;
use kittens_amdsim::{decode_all, Kernel};
use kittens_hw::dtype::DType;
use kittens_hw::Arch;
use kittens_ir::numerics::{round, to_bits, Rounding};
use support::{S_ENDPGM, S_LOAD_DWORDX4_S4_S0, S_WAITCNT_LGKM0, S_WAITCNT_VM0};

const S_NOP_7: u32 = 0xBF80_0007; // s_nop 7 (the MFMA's result latency, which the emulator ignores)
const V_LSHLREV_V26_6_V0: u32 = 0x2434_0086; // v_lshlrev_b32_e32 v26, 6, v0

/// One of the two MFMAs: its name, target, K, bf16 per lane, and the words of its two forms.
struct Case {
    name: &'static str,
    arch: Arch,
    k: usize,
    per_lane: usize,
    /// v_lshlrev_b32_e32 v1, log2(bytes per lane), v0; the A and B loads (B at `offset:`).
    lane_shift: u32,
    load_a: [u32; 2],
    load_b: [u32; 2],
    /// `a[0:15], v[2:..], v[6:..], 0` and `a[0:15], v[2:..], v[6:..], a[0:15]`.
    mfma_zero: [u32; 2],
    mfma_acc: [u32; 2],
}

const GFX950: Case = Case {
    name: "v_mfma_f32_32x32x16_bf16",
    arch: Arch::Cdna4,
    k: 16,
    per_lane: 8,
    lane_shift: 0x2402_0084,            // v_lshlrev_b32_e32 v1, 4, v0
    load_a: [0xDC5C_8000, 0x0204_0001], // global_load_dwordx4 v[2:5], v1, s[4:5]
    load_b: [0xDC5C_8400, 0x0604_0001], // global_load_dwordx4 v[6:9], v1, s[4:5] offset:1024
    mfma_zero: [0xD3B7_8000, 0x0202_0D02],
    mfma_acc: [0xD3B7_8000, 0x0402_0D02],
};

const GFX942: Case = Case {
    name: "v_mfma_f32_32x32x8_bf16",
    arch: Arch::Cdna3,
    k: 8,
    per_lane: 4,
    lane_shift: 0x2402_0083,            // v_lshlrev_b32_e32 v1, 3, v0
    load_a: [0xDC54_8000, 0x0204_0001], // global_load_dwordx2 v[2:3], v1, s[4:5]
    load_b: [0xDC54_8200, 0x0604_0001], // global_load_dwordx2 v[6:7], v1, s[4:5] offset:512
    mfma_zero: [0xD3E0_8000, 0x0202_0D02],
    mfma_acc: [0xD3E0_8000, 0x0402_0D02],
};

/// `v_accvgpr_read_b32 v(10+i), a(i)`.
fn accvgpr_read(i: u32) -> [u32; 2] {
    [0xD3D8_4000 | (10 + i), 0x1800_0100 | i]
}

/// `global_store_dwordx4 v26, v[10+4j : 13+4j], s[6:7] offset:16j`.
fn store(j: u32) -> [u32; 2] {
    [0xDC7C_8000 | (16 * j), 0x0006_001A | (10 + 4 * j) << 8]
}

fn words(c: &Case) -> Vec<u32> {
    let mut w = vec![];
    w.extend(S_LOAD_DWORDX4_S4_S0);
    w.push(S_WAITCNT_LGKM0);
    w.push(c.lane_shift);
    w.extend(c.load_a);
    w.extend(c.load_b);
    w.push(S_WAITCNT_VM0);
    w.extend(c.mfma_zero);
    w.extend([S_NOP_7, S_NOP_7]);
    w.extend(c.mfma_acc);
    w.extend([S_NOP_7, S_NOP_7, S_NOP_7]);
    (0..16).for_each(|i| w.extend(accvgpr_read(i)));
    w.push(V_LSHLREV_V26_6_V0);
    (0..4).for_each(|j| w.extend(store(j)));
    w.push(S_ENDPGM);
    w
}

fn kernel(c: &Case) -> Kernel {
    support::kernel_on(c.arch, &words(c), [8, 27, 16])
}

/// bf16 operands (A's lane registers, then B's), the stored D per lane (16 f32).
fn run(c: &Case, a: &[Vec<f32>], b: &[Vec<f32>]) -> Vec<Vec<f32>> {
    let bits = |v: f32| to_bits(v, DType::Bf16, Rounding::Rtne) as u16;
    let mut input = vec![0u8; 2048];
    for lane in 0..64 {
        for s in 0..c.per_lane {
            // B follows A (the load's `offset:`, 1024 or 512 bytes).
            let at = |base: usize| base + 2 * (lane * c.per_lane + s);
            let b0 = 2 * 64 * c.per_lane;
            input[at(0)..at(0) + 2].copy_from_slice(&bits(a[lane][s]).to_le_bytes());
            input[at(b0)..at(b0) + 2].copy_from_slice(&bits(b[lane][s]).to_le_bytes());
        }
    }
    let words: Vec<u32> = input
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        .collect();
    let (out, _) = support::run_kernel(&kernel(c), &words, 64 * 64, &Options::default());
    out.chunks_exact(16)
        .map(|l| l.iter().map(|&w| f32::from_bits(w)).collect())
        .collect()
}

/// Random bf16 values in [-2, 2), distinct per (lane, slot).
fn operand(seed: u32, per_lane: usize) -> Vec<Vec<f32>> {
    (0..64u32)
        .map(|l| {
            (0..per_lane as u32)
                .map(|s| {
                    let h = (l * 97 + s * 13 + seed).wrapping_mul(2_654_435_761) >> 8;
                    round(
                        (h % 4096) as f32 / 1024.0 - 2.0,
                        DType::Bf16,
                        Rounding::Rtne,
                    )
                })
                .collect()
        })
        .collect()
}

/// `2·A·B` (32×32) from operands placed by `a_at(lane, slot) = (row, k)`, `b_at = (k, col)`, and
/// the accumulator map `d_at(lane, slot) = (row, col)`, as each lane's 16 registers.
fn expected(
    c: &Case,
    (a, b): (&[Vec<f32>], &[Vec<f32>]),
    a_at: &dyn Fn(usize, usize) -> (usize, usize),
    b_at: &dyn Fn(usize, usize) -> (usize, usize),
    d_at: &dyn Fn(usize, usize) -> (usize, usize),
) -> Vec<Vec<f32>> {
    let (mut am, mut bm) = (vec![vec![0f64; c.k]; 32], vec![vec![0f64; 32]; c.k]);
    for l in 0..64 {
        for s in 0..c.per_lane {
            let (i, kk) = a_at(l, s);
            am[i][kk] = f64::from(a[l][s]);
            let (kk, j) = b_at(l, s);
            bm[kk][j] = f64::from(b[l][s]);
        }
    }
    (0..64)
        .map(|l| {
            (0..16)
                .map(|s| {
                    let (i, j) = d_at(l, s);
                    (2.0 * (0..c.k).map(|kk| am[i][kk] * bm[kk][j]).sum::<f64>()) as f32
                })
                .collect()
        })
        .collect()
}

fn check(c: &Case, want: &[Vec<f32>], got: &[Vec<f32>]) {
    for l in 0..64 {
        for s in 0..16 {
            let (w, g) = (want[l][s], got[l][s]);
            assert!(
                (w - g).abs() <= 1e-5 * w.abs().max(1.0),
                "{} lane {l} slot {s}: want {w}, got {g}",
                c.name
            );
        }
    }
}

#[test]
fn the_32_row_mfmas_decode_as_llvm_prints_them() {
    for c in [&GFX950, &GFX942] {
        let k = kernel(c);
        let d = decode_all(&k.code, c.arch).unwrap();
        let texts: Vec<String> = d.iter().map(|i| i.text()).collect();
        let zero = format!(
            "{} a[0:15], v[2:{}], v[6:{}], 0",
            c.name,
            1 + c.per_lane / 2,
            5 + c.per_lane / 2
        );
        let acc = format!(
            "{} a[0:15], v[2:{}], v[6:{}], a[0:15]",
            c.name,
            1 + c.per_lane / 2,
            5 + c.per_lane / 2
        );
        assert!(texts.contains(&zero), "{texts:?}");
        assert!(texts.contains(&acc), "{texts:?}");
    }
    // CDNA4's double-K shape is not a gfx942 instruction.
    let k = kernel(&GFX950);
    assert!(decode_all(&k.code, Arch::Cdna3).is_err());
}

#[test]
fn gfx942_32x32x8_matches_the_matrix_instruction_calculator() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../kittens-hw/tests/data/cdna3_mfma_layouts.json"
    );
    let oracle: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let instr = &oracle["instructions"]["v_mfma_f32_32x32x8_bf16"];
    // [lane, slot, row, col] per matrix.
    let map = |m: &str| -> std::collections::HashMap<(usize, usize), (usize, usize)> {
        instr[m]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let v: Vec<usize> = e
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap() as usize)
                    .collect();
                ((v[0], v[1]), (v[2], v[3]))
            })
            .collect()
    };
    let (am, bm, dm) = (map("A"), map("B"), map("D"));
    assert_eq!((am.len(), dm.len()), (64 * 4, 64 * 16));
    let c = &GFX942;
    let (a, b) = (operand(1, c.per_lane), operand(2, c.per_lane));
    let want = expected(
        c,
        (&a, &b),
        &|l, s| am[&(l, s)],
        &|l, s| bm[&(l, s)],
        &|l, s| dm[&(l, s)],
    );
    check(c, &want, &run(c, &a, &b));
}

#[test]
fn gfx950_32x32x16_matches_irees_layout() {
    let c = &GFX950;
    let (a, b) = (operand(3, c.per_lane), operand(4, c.per_lane));
    let want = expected(
        c,
        (&a, &b),
        &|l, s| (l % 32, 8 * (l / 32) + s),
        &|l, s| (8 * (l / 32) + s, l % 32),
        &|l, s| (8 * (s / 4) + 4 * (l / 32) + s % 4, l % 32),
    );
    check(c, &want, &run(c, &a, &b));
}
