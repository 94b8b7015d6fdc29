//! `v_mfma_f32_16x16x16_bf16` (VOP3P opcode 0x61) on gfx950 as on gfx942: CDNA4 keeps CDNA3's
//! instruction (LLVM's AMDGPU assembler encodes it to the same bytes for both; every word below as it
//! encodes them, `-show-encoding`), and the paged decode's 16-key P·V runs it on both. A
//! hand-assembled kernel: each lane loads its 4 bf16 of A and of B, the MFMA runs once with C = 0
//! into a[0:3] and once more accumulating (D = 2·A·B), and the 4 accumulator registers are stored
//! per lane. The expected D comes from the AMD Matrix Instruction Calculator's CDNA3 statement of
//! the instruction, written out here (the emulator reads kittens-hw's catalog instead): lane `l`
//! holds A row `l % 16` and B column `l % 16` with K `4·(l / 16) + s` in slot `s`; accumulator
//! register `s` of lane `l` is row `4·(l / 16) + s` of column `l % 16`.

mod support;

use kittens_amdsim::exec::Options;
use kittens_hw::dtype::DType;
use kittens_hw::Arch;
use kittens_ir::numerics::{round, to_bits, Rounding};
use support::{S_ENDPGM, S_LOAD_DWORDX4_S4_S0, S_WAITCNT_LGKM0, S_WAITCNT_VM0};

const S_NOP_7: u32 = 0xBF80_0007; // s_nop 7 (the MFMA's result latency, which the emulator ignores)

fn words() -> Vec<u32> {
    let mut w = S_LOAD_DWORDX4_S4_S0.to_vec();
    w.push(S_WAITCNT_LGKM0);
    w.push(0x2402_0083); // v_lshlrev_b32_e32 v1, 3, v0
    w.extend([0xDC54_8000, 0x0204_0001]); // global_load_dwordx2 v[2:3], v1, s[4:5]
    w.extend([0xDC54_8200, 0x0604_0001]); // global_load_dwordx2 v[6:7], v1, s[4:5] offset:512
    w.push(S_WAITCNT_VM0);
    w.extend([0xD3E1_8000, 0x0202_0D02]); // v_mfma_f32_16x16x16_bf16 a[0:3], v[2:3], v[6:7], 0
    w.extend([S_NOP_7, S_NOP_7]);
    w.extend([0xD3E1_8000, 0x0402_0D02]); // v_mfma_f32_16x16x16_bf16 a[0:3], v[2:3], v[6:7], a[0:3]
    w.extend([S_NOP_7, S_NOP_7, S_NOP_7]);
    for i in 0..4 {
        w.extend([0xD3D8_4000 | (10 + i), 0x1800_0100 | i]); // v_accvgpr_read_b32 v(10+i), a(i)
    }
    w.push(0x2434_0084); // v_lshlrev_b32_e32 v26, 4, v0
    w.extend([0xDC7C_8000, 0x0006_0A1A]); // global_store_dwordx4 v26, v[10:13], s[6:7]
    w.push(S_ENDPGM);
    w
}

/// Random bf16 values in [-2, 2), distinct per (lane, slot).
fn operand(seed: u32) -> Vec<[f32; 4]> {
    (0..64u32)
        .map(|l| {
            [0, 1, 2, 3].map(|s: u32| {
                let h = (l * 97 + s * 13 + seed).wrapping_mul(2_654_435_761) >> 8;
                round(
                    (h % 4096) as f32 / 1024.0 - 2.0,
                    DType::Bf16,
                    Rounding::Rtne,
                )
            })
        })
        .collect()
}

fn run(arch: Arch, a: &[[f32; 4]], b: &[[f32; 4]]) -> Vec<[f32; 4]> {
    let bits = |v: f32| to_bits(v, DType::Bf16, Rounding::Rtne) as u16;
    let mut input = vec![0u8; 1024];
    for lane in 0..64 {
        for s in 0..4 {
            let at = 2 * (lane * 4 + s);
            input[at..at + 2].copy_from_slice(&bits(a[lane][s]).to_le_bytes());
            input[512 + at..514 + at].copy_from_slice(&bits(b[lane][s]).to_le_bytes());
        }
    }
    let words: Vec<u32> = input
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        .collect();
    let k = support::kernel_on(arch, &self::words(), [8, 27, 4]);
    let (out, _) = support::run_kernel(&k, &words, 64 * 16, &Options::default());
    out.chunks_exact(4)
        .map(|l| [0, 1, 2, 3].map(|s| f32::from_bits(l[s])))
        .collect()
}

#[test]
fn mfma_16x16x16_bf16_is_the_calculators_product_on_gfx950_and_gfx942() {
    let (a, b) = (operand(1), operand(2));
    // The calculator's map: A[l % 16][4·(l / 16) + s], B[4·(l / 16) + s][l % 16].
    let (mut am, mut bm) = ([[0f64; 16]; 16], [[0f64; 16]; 16]);
    for l in 0..64 {
        for s in 0..4 {
            am[l % 16][4 * (l / 16) + s] = f64::from(a[l][s]);
            bm[4 * (l / 16) + s][l % 16] = f64::from(b[l][s]);
        }
    }
    for arch in [Arch::Cdna4, Arch::Cdna3] {
        let d = run(arch, &a, &b);
        for (l, regs) in d.iter().enumerate() {
            for (s, &got) in regs.iter().enumerate() {
                let (i, j) = (4 * (l / 16) + s, l % 16);
                let want: f64 = 2.0 * (0..16).map(|k| am[i][k] * bm[k][j]).sum::<f64>();
                let got = f64::from(got);
                // f32 accumulation of 16 products of bf16 values in [-2, 2): well within 1e-4.
                assert!(
                    (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                    "{arch:?} lane {l} slot {s}: {got} vs {want}"
                );
            }
        }
    }
}
