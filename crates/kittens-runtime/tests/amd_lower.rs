//! The tile-IR → HIP lowering on the 8-wave ping-pong BF16 GEMM : the tile
//! program is right on the CPU interpreter at small sizes, and the HIP it lowers to compiles for gfx950
//! and gfx942 with zero spills, LDS within budget and the target's bf16 MFMA in the hot loop.

#[path = "amd_support/common.rs"]
mod amd_common;
#[path = "amd_support/gemm.rs"]
mod gemm;

use amd_common::{clang_for, debian_clang19};
use kittens_codegen::hip::{bf16_mfma_opcode, lower};
use kittens_hw::Arch;
use kittens_runtime::amd::{analyze, ClangSource, CodeObjectReport};
use rand::{rngs::SmallRng, Rng, SeedableRng};

fn bf16_round(x: f32) -> f32 {
    let u = x.to_bits();
    f32::from_bits((u + 0x7fff + ((u >> 16) & 1)) & 0xffff_0000)
}

/// Interpreter result vs an f64 reference on random bf16 inputs, shapes that are and are not
/// multiples of the 256×256×64 tiles.
fn check_interpreter(arch: Arch, m: usize, n: usize, k: usize) {
    let kern = gemm::gemm_bf16(arch);
    let mut rng = SmallRng::seed_from_u64((m * 31 + n * 7 + k) as u64);
    let mut rand = |len: usize| {
        (0..len)
            .map(|_| bf16_round(rng.gen_range(-1.0f32..1.0)))
            .collect::<Vec<_>>()
    };
    let (a, b) = (rand(m * k), rand(n * k));
    let mut tensors = vec![a.clone(), b.clone(), vec![0.0f32; m * n]];
    kittens_ir::interp::run(&kern, &[m as i64, n as i64, k as i64], &mut tensors)
        .expect("interpreter runs");
    let mut worst = 0.0f64;
    for i in 0..m {
        for j in 0..n {
            let (mut r, mut mag) = (0.0f64, 0.0f64);
            for p in 0..k {
                r += a[i * k + p] as f64 * b[j * k + p] as f64;
                mag += (a[i * k + p] as f64 * b[j * k + p] as f64).abs();
            }
            // bf16 output rounding (2^-9 relative) plus f32 accumulation error.
            let bound = r.abs() * 2f64.powi(-8) + mag * k as f64 * f32::EPSILON as f64 + 1e-30;
            let err = (tensors[2][i * n + j] as f64 - r).abs();
            assert!(
                err <= bound,
                "{} C[{i}][{j}] = {} vs {r} ({m}x{n}x{k})",
                arch.target(),
                tensors[2][i * n + j]
            );
            worst = worst.max(err / bound);
        }
    }
    eprintln!(
        "{} {m}x{n}x{k}: worst error {worst:.3} of the bound",
        arch.target()
    );
}

#[test]
fn gemm_program_is_right_on_the_interpreter() {
    for arch in [Arch::Cdna4, Arch::Cdna3] {
        check_interpreter(arch, 256, 256, 256);
        check_interpreter(arch, 264, 300, 136);
    }
}

/// The lowered source, clang's assembly of it and the report on that assembly.
fn compiled(arch: Arch) -> (String, String, CodeObjectReport) {
    let src = lower(&gemm::gemm_bf16(arch), arch).expect("lowers").source;
    if let Ok(dir) = std::env::var("KITTENS_DUMP_HIP") {
        std::fs::write(format!("{dir}/gemm_bf16_{}.hip", arch.target()), &src).unwrap();
    }
    let asm = clang_for(arch)
        .compile_to_asm(&src, arch)
        .unwrap_or_else(|e| panic!("{e}\n{src}"));
    let report = analyze(&asm, arch, Some("gemm_bf16")).expect("analysis");
    (src, asm, report)
}

fn check_budget(arch: Arch, r: &CodeObjectReport) {
    let mfma = bf16_mfma_opcode(arch).unwrap();
    eprintln!("{}: {}", arch.target(), serde_json::to_string(r).unwrap());
    assert!(
        r.within_budget(),
        "{} spills or LDS over budget: {r:?}",
        arch.target()
    );
    let hot = r.hot_loop.as_ref().expect("a hot loop");
    // Four 64×32 += 64×64 · (32×64)ᵀ products per K step of 64: 4·(4·2)·(64/K of the MFMA) MFMAs.
    let k_mfma: u32 = if arch == Arch::Cdna4 { 32 } else { 16 };
    assert_eq!(
        hot.mix.opcodes.get(mfma).copied(),
        Some(4 * 4 * 2 * 64 / k_mfma),
        "{}",
        arch.target()
    );
    assert_eq!(hot.mix.mfma, 4 * 4 * 2 * 64 / k_mfma);
    assert!(hot.mix.s_barrier >= 8, "a barrier at every cluster end");
    assert!(hot.mix.opcodes.get("s_setprio").copied().unwrap_or(0) >= 8);
    assert!(hot.mix.ds > 0);
}

#[test]
fn gemm_lowers_and_compiles_for_gfx950() {
    let (_, asm, r) = compiled(Arch::Cdna4);
    check_budget(Arch::Cdna4, &r);
    assert_eq!(
        r.lds_bytes,
        4 * 2 * 128 * 64 * 2,
        "A and B: two buffers of two 128x64 bf16 halves"
    );
    let hot = r.hot_loop.unwrap();
    assert!(
        hot.mix
            .opcodes
            .get("buffer_load_dwordx4")
            .copied()
            .unwrap_or(0)
            > 0,
        "16-byte loads into LDS"
    );
    let insts: Vec<&str> = asm.lines().map(str::trim).collect();
    assert!(
        insts
            .iter()
            .any(|l| l.starts_with("buffer_load_dwordx4 ") && l.ends_with(" lds")),
        "the 16-byte loads go straight into LDS"
    );
    // HipKittens Fig. 21 hot loop line 9: `s_waitcnt lgkmcnt(8)` after reading B0 and A — the program's
    // `wait_shared(1)` leaves A's 8 ds_read_b128 (64x64 bf16 as 4x2 16x32 base tiles) in flight.
    assert!(
        insts
            .iter()
            .any(|l| l.starts_with("s_waitcnt") && l.contains("lgkmcnt(8)")),
        "a wait leaving 8 LDS reads in flight"
    );
}

#[test]
fn gemm_lowers_and_compiles_for_gfx942() {
    let (src, _, r) = compiled(Arch::Cdna3);
    check_budget(Arch::Cdna3, &r);
    assert_eq!(
        r.lds_bytes,
        2 * 2 * 128 * 64 * 2,
        "one buffer of A and B halves: all of the 64 KiB"
    );
    let hot = r.hot_loop.unwrap();
    // gfx942 has no 16-byte buffer load into LDS, so a `buffer_load_dwordx4` here loads registers.
    assert!(
        hot.mix
            .opcodes
            .get("buffer_load_dwordx4")
            .copied()
            .unwrap_or(0)
            > 0,
        "next tile staged in registers"
    );
    assert!(hot.mix.opcodes.get("ds_write_b128").copied().unwrap_or(0) > 0);
    // docs/architecture.md §6: the gfx942 source also builds with Debian's clang-19 (required when CI=true).
    if let Some(c) = debian_clang19() {
        assert_eq!(c.source, ClangSource::DebianClang19);
        let asm = c
            .compile_to_asm(&src, Arch::Cdna3)
            .expect("clang-19 compiles the gfx942 GEMM");
        let r19 = analyze(&asm, Arch::Cdna3, Some("gemm_bf16")).unwrap();
        check_budget(Arch::Cdna3, &r19);
    }
}

/// HipKittens §3.2.1, D.3: a pinned tile's base tiles live in consecutive registers of its file, and the
/// MFMAs read A from (and accumulate into) exactly those AGPRs; on gfx942 the 16×32 A base tile feeds
/// two 16×16×16 MFMAs from its two register halves.
#[test]
fn pinned_tiles_feed_mfma_from_their_registers() {
    use kittens_hw::dtype::DType;
    use kittens_ir::{KernelBuilder, Schedule};
    use kittens_tile::{BaseShape, Layout, RegFile, RegTile};
    let mut b = KernelBuilder::new("pinned_mma", Schedule::Plain { waves: 4 });
    let gemm::AbtOperands {
        a: ga,
        b: gb,
        c: gc,
        ..
    } = gemm::abt_operands(&mut b, DType::F32);
    let tile = |rows, dtype, layout, base| RegTile::new(dtype, rows, 32, layout, base);
    let a = b.reg_tile(
        "a_pinned",
        tile(64, DType::Bf16, Layout::Row, BaseShape::S16X32)
            .and_then(|t| t.pinned(RegFile::Agpr, 0, 15, 64)),
    );
    let bt = b.reg_tile("b", tile(32, DType::Bf16, Layout::Row, BaseShape::S16X32));
    let c = b.reg_tile(
        "c_pinned",
        tile(64, DType::F32, Layout::Col, BaseShape::S16X16)
            .and_then(|t| t.pinned(RegFile::Agpr, 32, 63, 64)),
    );
    let (sa, sb) = (b.gtile(ga, 64, 32, b.wave(), 0), b.gtile(gb, 32, 32, 0, 0));
    b.load_global(a, sa);
    b.load_global(bt, sb);
    b.mma(
        kittens_ir::MmaForm::Abt,
        c,
        kittens_ir::MmaOperand::Reg(a),
        kittens_ir::MmaOperand::Reg(bt),
        None,
    );
    let dst = b.gtile(gc, 64, 32, b.wave(), 0);
    b.store(dst, c);
    let kern = b.finish().expect("builds");
    for (arch, first) in [
        (Arch::Cdna4, "v_mfma_f32_16x16x32_bf16 a[32:35], a[0:3], v"),
        (Arch::Cdna3, "v_mfma_f32_16x16x16_bf16 a[32:35], a[0:1], v"),
    ] {
        let src = lower(&kern, arch).expect("lowers").source;
        // A fresh accumulator is written to exactly its pinned registers: the MFMA's destination
        // and A operand in the assembly are the pinned AGPRs.
        let asm = clang_for(arch).compile_to_asm(&src, arch).unwrap();
        assert!(
            asm.lines().any(|l| l.trim().starts_with(first)),
            "{} lacks `{first}`",
            arch.target()
        );
        let r = analyze(&asm, arch, Some("pinned_mma")).unwrap();
        assert!(r.agpr >= 64, "pinned AGPRs a0..a63 counted: {}", r.agpr);
        assert!(r.within_budget());
        assert_eq!(r.mix.mfma, if arch == Arch::Cdna4 { 8 } else { 16 });
    }
}

/// The lowered attention (registry defaults, HipKittens E.3) moves data between lanes only where the lane
/// maps require it: the column softmax statistics reduce the accumulator's 4 slots, its base tiles and
/// then the lanes that share a column — the XOR masks are exactly the lane bits the accumulator's
/// column does not depend on (from `kittens_hw::mma`); the three transposes are register renames; the
/// f32 scores reach the bf16 `P` operand through one per-wave LDS remap.
#[test]
fn attention_exchanges_only_what_lane_maps_require() {
    use kittens_hw::mma::{self, Operand};
    let k = kittens_kernels::attn_fwd::build(&Default::default()).unwrap();
    for arch in [Arch::Cdna4, Arch::Cdna3] {
        let src = lower(&k, arch).expect("attn_fwd lowers").source;
        let acc = mma::all()
            .iter()
            .find(|i| i.arch == arch && i.name == bf16_mfma_opcode(arch).unwrap())
            .unwrap();
        let col = |l: u32| {
            (0..4)
                .map(|s| acc.element(Operand::D, l, s).1)
                .collect::<Vec<_>>()
        };
        for m in [1u32, 2, 4, 8, 16, 32] {
            let free = (0..64).all(|l| col(l ^ m) == col(l));
            assert_eq!(
                src.contains(&format!("shfl_xor_f32<{m}>")),
                free,
                "{}: xor {m}",
                arch.target()
            );
        }
        assert_eq!(
            src.matches("(a register rename)").count(),
            3,
            "q_t, k_t, o_q"
        );
        assert_eq!(
            src.matches("through the wave's LDS scratch").count(),
            1,
            "only P"
        );
        let scratch = k.waves * 32 * 32 * 2;
        assert!(src.contains(&format!("smem_kittens_scratch[{scratch}]")));
    }
}
