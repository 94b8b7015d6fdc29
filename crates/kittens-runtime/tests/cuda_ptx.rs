//! What NVRTC makes of the sm_90a GEMM lowering (its PTX, after inlining and constant folding), held
//! against the tile program's own figures: the bytes each stage's `full` barrier expects are the bytes
//! its TMA copies deliver (a mismatch hangs the consumers or lets them read a half-filled stage), the
//! `empty` barriers count every consumer thread, a K step is one chain of `wgmma`s of the operands' type
//! and B's layout, and a per-tensor FP8 scale is read once. No GPU is needed; the kernels' results are
//! the GPU tests' (crates/kittens-runtime/tests/cuda_*.rs, `kittens run --backend cuda`).

#[path = "cuda_support/common.rs"]
mod cuda_common;

#[path = "cuda_support/ptx.rs"]
mod ptx;

use cuda_common::ensure_nvrtc;
use kittens_codegen::{lower, Lowered};
use kittens_hw::Target;
use kittens_kernels::gemm::{build, BLayout, GemmConfig};
use ptx::mbarrier_counts;

fn compiled(cfg: &GemmConfig) -> (Lowered, String) {
    ensure_nvrtc();
    let l = lower(&build(cfg).expect("builds"), Target::Sm90a).unwrap_or_else(|e| panic!("{e}"));
    let ptx = kittens_runtime::cuda::ptx(&l.source, "sm_90a").unwrap_or_else(|e| panic!("{e}"));
    (l, ptx)
}

/// Each `wgmma.mma_async`'s shape-and-type suffix (`m64n256k16.f32.bf16.bf16`) and whether B is
/// transposed: its `imm-trans-b`, the last of the seven operands after the accumulators that the
/// bf16 form takes (PTX ISA §9.7.15.5.2); the fp8 forms have no transpose operands (K-major only).
fn wgmmas(ptx: &str) -> Vec<(String, bool)> {
    ptx.lines()
        .filter_map(|l| l.trim().strip_prefix("wgmma.mma_async.sync.aligned."))
        .map(|l| {
            let (ty, _) = l.split_once(char::is_whitespace).unwrap();
            let (_, tail) = l.rsplit_once('}').unwrap();
            let ops: Vec<&str> = tail
                .trim_end_matches(';')
                .split(',')
                .map(str::trim)
                .collect();
            // `ops[0]` is empty (the comma after the accumulators).
            (ty.to_string(), ops.len() == 8 && ops[7] == "1")
        })
        .collect()
}

/// Bytes one stage's TMA loads deliver: every loaded map's box (the last map is C's store).
fn stage_bytes(l: &Lowered, elem_bytes: u32) -> u64 {
    let maps = l.tma_maps();
    let loads = &maps[..maps.len() - 1];
    loads
        .iter()
        .map(|m| (m.box_rows * m.box_cols * elem_bytes) as u64)
        .sum()
}

#[test]
fn bf16_gemm_stages_and_chains() {
    let gpu = kittens_hw::gpu("h100").expect("catalogued");
    let cfg = GemmConfig::for_gpu(gpu);
    let (l, ptx) = compiled(&cfg);
    // One fill per stage: `full` armed once with A's and B's bytes together.
    assert_eq!(
        mbarrier_counts(&ptx, "mbarrier.arrive.expect_tx"),
        [(128 + cfg.block as u64) * cfg.k_step as u64 * 2]
    );
    assert_eq!(
        mbarrier_counts(&ptx, "mbarrier.arrive.expect_tx")[0],
        stage_bytes(&l, 2)
    );
    // Per stage a `full` barrier (one arrival: the producer's) and an `empty` one that every consumer
    // thread (two warpgroups) arrives on.
    let stages = l.ir.shared[0].count as usize;
    let mut inits = mbarrier_counts(&ptx, "mbarrier.init");
    inits.sort();
    let consumers = (l.threads - 128) as u64;
    assert_eq!(consumers, 256);
    assert_eq!(inits, [vec![1; stages], vec![consumers; stages]].concat());
    // A K step is one chain of k16 wgmmas on the whole block-wide accumulator, B K-major.
    let want = format!("m64n{}k16.f32.bf16.bf16", cfg.block);
    assert_eq!(
        wgmmas(&ptx),
        vec![(want, false); (cfg.k_step / 16) as usize]
    );
}

/// B stored K × N (`mma_ab`): the same chain with wgmma's transposed-B form.
#[test]
fn n_major_b_compiles_to_transposed_b_wgmma() {
    let gpu = kittens_hw::gpu("h100").expect("catalogued");
    let cfg = GemmConfig {
        b_layout: BLayout::Kn,
        ..GemmConfig::for_gpu(gpu)
    };
    let (_, ptx) = compiled(&cfg);
    let want = format!("m64n{}k16.f32.bf16.bf16", cfg.block);
    assert_eq!(wgmmas(&ptx), vec![(want, true); (cfg.k_step / 16) as usize]);
}

/// The FP8 GEMM: e4m3 wgmma (K = 32 per instruction) and no bf16 one, a stage of 1-byte operands, and
/// each per-tensor scale read once (a scalar broadcast, not a load per element).
#[test]
fn fp8_gemm_compiles_to_e4m3_wgmma_with_scales_read_once() {
    let gpu = kittens_hw::gpu("h100").expect("catalogued");
    let cfg = GemmConfig::fp8_for_gpu(gpu);
    let (l, ptx) = compiled(&cfg);
    let want = format!("m64n{}k32.f32.e4m3.e4m3", cfg.block);
    assert_eq!(
        wgmmas(&ptx),
        vec![(want, false); (cfg.k_step / 32) as usize]
    );
    assert_eq!(
        mbarrier_counts(&ptx, "mbarrier.arrive.expect_tx"),
        [(128 + cfg.block as u64) * cfg.k_step as u64]
    );
    assert_eq!(
        mbarrier_counts(&ptx, "mbarrier.arrive.expect_tx")[0],
        stage_bytes(&l, 1)
    );
    let f32_loads = ptx
        .lines()
        .filter(|s| s.trim().starts_with("ld.global.nc.f32"))
        .count();
    assert_eq!(f32_loads, 2, "scale_a and scale_b, once each");
}

/// Clusters of two row tiles (`Grid::cluster`): each block issues its share of B, multicast to both,
/// and still expects a whole stage (its partner's share lands in it too).
#[test]
fn clustered_gemm_expects_whole_stages() {
    let gpu = kittens_hw::gpu("h100").expect("catalogued");
    let cfg = GemmConfig {
        cluster: 2,
        ..GemmConfig::for_gpu(gpu)
    };
    let (l, ptx) = compiled(&cfg);
    assert_eq!(l.cluster, 2);
    assert_eq!(
        mbarrier_counts(&ptx, "mbarrier.arrive.expect_tx"),
        [(128 + cfg.block as u64) * cfg.k_step as u64 * 2]
    );
}

/// The compiled kernel's parameters, in order, as the launch contract (`Lowered::args`) the runtime
/// packs them: a `CUtensorMap` by value (128 bytes, 64-aligned) per TMA map, a 64-bit pointer per
/// global tensor, a 32-bit integer per parameter. The FP8 GEMM passes its operands and C by TMA and
/// by pointer, and its two scales by pointer (read as f32: `fp8_gemm_compiles_to_e4m3_wgmma_...`).
#[test]
fn fp8_gemm_entry_takes_the_launch_contracts_arguments() {
    use kittens_codegen::KernelArg;
    let gpu = kittens_hw::gpu("h100").expect("catalogued");
    let (l, ptx) = compiled(&GemmConfig::fp8_for_gpu(gpu));
    let entry = format!(".entry {}(", l.entry);
    let params: Vec<&str> = ptx[ptx.find(&entry).expect("the entry") + entry.len()..]
        .lines()
        .map(str::trim)
        .take_while(|l| *l != ")")
        .filter(|l| !l.is_empty())
        .collect();
    let want: Vec<String> = l
        .args
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let name = format!("{}_param_{i}", l.entry);
            match a {
                KernelArg::TensorMap(_) => format!(".param .align 64 .b8 {name}[128]"),
                KernelArg::Global { .. } => format!(".param .u64 {name}"),
                KernelArg::Param { .. } => format!(".param .u32 {name}"),
            }
        })
        .collect();
    let got: Vec<&str> = params.iter().map(|p| p.trim_end_matches(',')).collect();
    assert_eq!(got, want);
    let globals: Vec<&str> = l
        .args
        .iter()
        .filter_map(|a| match a {
            KernelArg::Global { name } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(globals, ["a", "b", "scale_a", "scale_b", "c"]);
}

/// Per-row / per-column FP8 scales (one per row of A, one per row of B, i.e. column of C) are read once
/// per distinct value a thread needs — its 2 rows and `block / 4` columns — not once per accumulator
/// element (`block / 2` per thread, each needing both): with an in-bounds and an edge path, between
/// one and two loads per distinct value.
#[test]
fn fp8_row_and_column_scales_are_read_once_per_value() {
    use kittens_kernels::gemm::Scales;
    let gpu = kittens_hw::gpu("h100").expect("catalogued");
    let mut cfg = GemmConfig::fp8_for_gpu(gpu);
    cfg.types.scales = Some(Scales::PerRowCol);
    let (_, ptx) = compiled(&cfg);
    let loads = ptx
        .lines()
        .filter(|s| s.trim().starts_with("ld.global.nc.f32"))
        .count();
    let distinct = (2 + cfg.block / 4) as usize;
    assert!(
        (distinct..=2 * distinct).contains(&loads),
        "{loads} f32 loads for {distinct} distinct scales per thread"
    );
}
