//! The sm_90a lowering of tile programs: what it derives from the IR (TMA boxes, launch geometry,
//! shared memory) and what it refuses. What NVRTC makes of the source is checked in kittens-runtime
//! (tests/cuda_ptx.rs, cuda_ptx_attn_bwd.rs, cuda_wgmma_wrappers.rs).

use kittens_codegen::cuda::{lower, CudaLowerError, TmaMap};
use kittens_kernels::gemm::{build, GemmConfig};

#[test]
fn gemm_tile_program_lowers_with_tma_boxes_from_its_loads() {
    let gpu = kittens_hw::gpu("h100").expect("catalogued");
    let cfg = GemmConfig::for_gpu(gpu);
    let ir = build(&cfg).expect("the Hopper gemm builds");
    let l = lower(&ir).unwrap_or_else(|e| panic!("{e}"));
    // One TMA map per loaded tensor, boxes = the ring tiles the program loads into (A: 128 rows of C per
    // block, B: `block` columns; K step wide, i.e. 128-byte rows under the 128-byte swizzle).
    let ks = cfg.k_step;
    let sw = if ks * 2 == 128 { 128 } else { 64 };
    assert_eq!(
        l.tma_maps(),
        vec![
            TmaMap {
                global: 0,
                box_rows: 128,
                box_cols: ks,
                swizzle_bytes: sw,
                row_dim: 0,
                col_dim: 1,
            },
            TmaMap {
                global: 1,
                box_rows: cfg.block,
                box_cols: ks,
                swizzle_bytes: sw,
                row_dim: 0,
                col_dim: 1,
            },
            // The accumulator store goes out by TMA: one warpgroup's 64 rows, 64 columns (128 bytes).
            TmaMap {
                global: 2,
                box_rows: 64,
                box_cols: 64,
                swizzle_bytes: 128,
                row_dim: 0,
                col_dim: 1,
            },
        ]
    );
    // One tile per 128 × block of C, edges rounded up; the persistent grid launches at most one block
    // per resident slot.
    let p = [("m", 1000), ("n", 1000), ("k", 64)];
    let tiles = 1000u64.div_ceil(128) * 1000u64.div_ceil(cfg.block as u64);
    assert_eq!(l.tiles(&p), Some(tiles));
    assert_eq!(l.blocks(&p, 132), Some(tiles.min(132) as u32));
    assert_eq!(l.blocks(&p, 3), Some(3));
    assert_eq!(l.tiles(&[("m", 1000)]), None, "missing parameters");
    // The rings; a 64 × block bf16 C slab per consumer warpgroup; one full and one empty mbarrier per
    // stage (A and B are always filled together, so they share them); 1 KiB of alignment slack.
    let stages = ir.shared[0].count;
    assert!(ir.shared.iter().all(|s| s.count == stages));
    assert_eq!(
        l.dynamic_shared_bytes(),
        ir.shared_offsets(1024).1 + 2 * 64 * cfg.block * 2 + 16 * stages + 1024
    );
    // The barriers' counts (one fill per stage, `empty` counting every consumer thread) and the
    // K step's wgmma chain are checked on what NVRTC compiles this to: kittens-runtime
    // tests/cuda_ptx.rs.
}

#[test]
fn amd_schedule_is_refused() {
    let k = build(&GemmConfig::default()).expect("the ping-pong gemm builds");
    match lower(&k) {
        Err(CudaLowerError::Unsupported(why)) => assert!(why.contains("ping-pong"), "{why}"),
        Ok(_) => panic!("the 8-wave ping-pong has no Hopper lowering"),
        Err(e) => panic!("expected the schedule to be unsupported, got {e}"),
    }
}

/// The FP8 GEMM is the same tile program with e4m3 operands: 1-byte operands make the same 128-byte TMA
/// rows at twice the K step. (Its wgmma form, K = 32 per instruction, its parameters against the launch
/// contract, the scales read as f32 and each per-tensor scale read once are checked on NVRTC's output:
/// kittens-runtime tests/cuda_ptx.rs.)
#[test]
fn fp8_gemm_lowers_to_e4m3_wgmma_with_a_scaled_epilogue() {
    let gpu = kittens_hw::gpu("h100").expect("catalogued");
    let cfg = GemmConfig::fp8_for_gpu(gpu);
    assert_eq!(cfg.types.input, kittens_hw::dtype::DType::Fp8E4m3);
    let ir = build(&cfg).expect("the Hopper fp8 gemm builds");
    let l = lower(&ir).unwrap_or_else(|e| panic!("{e}"));
    let ks = cfg.k_step;
    // K step 128 of 1-byte operands: 128-byte rows, the 128-byte swizzle, as for bf16 at K step 64.
    let maps = l.tma_maps();
    assert_eq!((maps[0].box_rows, maps[0].box_cols), (128, ks));
    assert_eq!((maps[1].box_rows, maps[1].box_cols), (cfg.block, ks));
    assert!(maps.iter().all(|m| m.swizzle_bytes == 128), "{maps:?}");
}

/// Per-row / per-column scales are read under the tensor's bounds; an f32 output (the TMA-store
/// epilogue writes bf16) and gfx942's e4m3fnuz (no wgmma form) are refused by name. (Each distinct
/// scale read once is checked on NVRTC's output: kittens-runtime tests/cuda_ptx.rs.)
#[test]
fn fp8_scale_layouts_and_refusals() {
    use kittens_hw::dtype::DType;
    use kittens_kernels::gemm::Scales;
    let gpu = kittens_hw::gpu("h100").expect("catalogued");
    let mut cfg = GemmConfig::fp8_for_gpu(gpu);
    cfg.types.scales = Some(Scales::PerRowCol);
    let l = lower(&build(&cfg).unwrap()).unwrap_or_else(|e| panic!("{e}"));
    // One scale per row of A (strides 1, 0), one per row of B, i.e. column of C (0, 1): each read
    // from the thread's first value and guarded along its own dimension only, per value only where
    // the tile crosses the edge. Kept as text: the guard is behaviour only at a ragged edge on an
    // sm_90a GPU, which no CPU test runs (no emulator executes sm_90a code).
    for (first, guard) in [
        (
            "g_scale_a + gb + (long long)r0 * rs + 0",
            "(gin && dr < rl) ? __ldg(gp + (long long)dr * rs + 0)",
        ),
        (
            "g_scale_b + gb + 0 + (long long)c0 * cs",
            "(gin && dc < cl) ? __ldg(gp + 0 + (long long)dc * cs)",
        ),
    ] {
        assert!(
            l.source.contains(&format!("const auto* gp = {first};")),
            "{first}"
        );
        assert!(l.source.contains(guard), "{guard}");
    }
    assert!(l.source.contains("if (gin && 8 < rl) {"));
    let refused = |cfg: &GemmConfig, needle: &str| match lower(&build(cfg).unwrap()) {
        Err(CudaLowerError::Unsupported(why)) => assert!(why.contains(needle), "{why}"),
        Ok(_) => panic!("{cfg:?} lowered"),
        Err(e) => panic!("{e}"),
    };
    let mut f32_out = GemmConfig::fp8_for_gpu(gpu);
    f32_out.types.output = DType::F32;
    refused(&f32_out, "writes bf16");
    let mut fnuz = GemmConfig::fp8_for_gpu(gpu);
    fnuz.types.input = DType::Fp8E4m3Fnuz;
    refused(&fnuz, "Fp8E4m3Fnuz");
}

/// B stored K × N (`mma_ab`, wgmma's transposed B) lowers for bf16 operands; fp8 wgmma has no
/// transposed-B form (PTX ISA §9.7.15.5.1), so the fp8 GEMM with its `mma_abt` turned into `mma_ab`
/// is refused by name rather than lowered to a wrong instruction. (The GEMM builder already refuses an
/// fp8 configuration with B as K × N; this is the lowering's own guard, for any tile program.)
#[test]
fn n_major_b_is_bf16_only() {
    use kittens_ir::{MmaForm, Op, Stmt};
    use kittens_kernels::gemm::BLayout;
    fn abt_to_ab(body: &mut [Stmt]) -> usize {
        let mut n = 0;
        for s in body {
            n += match s {
                Stmt::Op {
                    op: Op::Mma { form, .. },
                    ..
                } if *form == MmaForm::Abt => {
                    *form = MmaForm::Ab;
                    1
                }
                Stmt::Op { .. } => 0,
                Stmt::For { body, .. }
                | Stmt::Cluster { body, .. }
                | Stmt::Staggered { body }
                | Stmt::LastArrival { body, .. } => abt_to_ab(body),
                Stmt::If { then, els, .. } => abt_to_ab(then) + abt_to_ab(els),
                Stmt::Roles { producer, consumer } => abt_to_ab(producer) + abt_to_ab(consumer),
            };
        }
        n
    }
    let gpu = kittens_hw::gpu("h100").expect("catalogued");
    let bf16_kn = GemmConfig {
        b_layout: BLayout::Kn,
        ..GemmConfig::for_gpu(gpu)
    };
    // It lowers (its transposed-B wgmma is checked on NVRTC's output: kittens-runtime
    // tests/cuda_ptx.rs).
    lower(&build(&bf16_kn).unwrap()).unwrap_or_else(|e| panic!("{e}"));
    let mut ir = build(&GemmConfig::fp8_for_gpu(gpu)).unwrap();
    assert!(abt_to_ab(&mut ir.body) > 0, "the fp8 GEMM has mma_abt ops");
    match lower(&ir) {
        Err(CudaLowerError::Unsupported(why)) => {
            assert!(why.contains("K-major operands only"), "{why}")
        }
        Ok(_) => panic!("fp8 with B N-major lowered"),
        Err(e) => panic!("{e}"),
    }
}

/// The attention backward's Hopper launches read the per-query statistics (`[b, h, s]` f32 tensors read
/// as tiles with a zero stride) under the fixed coordinates' bounds. (That each is read once per
/// distinct value, along the right dimension, and the step loop's schedule — the first wait of a step
/// leaving the previous step's chain in flight — are checked on NVRTC's output: kittens-runtime
/// tests/cuda_ptx_attn_bwd.rs.)
#[test]
fn attn_bwd_statistics_reads_are_guarded() {
    use kittens_kernels::attn_bwd::{build, BwdConfig, BwdSchedule};
    for schedule in [BwdSchedule::HopperKv, BwdSchedule::HopperQ] {
        let k = build(&BwdConfig {
            schedule,
            ..BwdConfig::default()
        })
        .unwrap();
        let l = lower(&k).unwrap_or_else(|e| panic!("{schedule:?}: {e}"));
        // Kept as text: the batch guard is behaviour only on an sm_90a GPU (no CPU test runs it).
        assert!(
            l.source.contains("const bool gin = true && (blk0) >= 0"),
            "{schedule:?}"
        );
    }
}

/// Named barriers: the turn ring (IDs 1 + warpgroup, 256 threads) and a warpgroup's own barrier
/// (128 threads) never share an ID — the atomic-dQ key blocks use both in one step, and a warpgroup
/// barrier on a turn's ID faulted on the H200 (illegal instruction at B16 H16 N4096).
#[test]
fn turn_and_warpgroup_barriers_use_disjoint_ids() {
    use kittens_kernels::attn_bwd::{build as build_bwd, BwdConfig, BwdSchedule, BwdTurns};
    let gpu = kittens_hw::gpu("h100").expect("catalogued");
    let cfg = BwdConfig {
        schedule: BwdSchedule::HopperAtomicKv,
        turns: BwdTurns::Scores,
        ..BwdConfig::for_gpu(gpu)
    };
    let l = lower(&build_bwd(&cfg).unwrap()).unwrap_or_else(|e| panic!("{e}"));
    let src = &l.source;
    // Kept as text: the IDs are runtime expressions of threadIdx in the PTX too, and only an sm_90a
    // GPU runs them.
    assert!(
        src.contains("kt::named_barrier(1u + kt_cwg, 256u);"),
        "a turn"
    );
    assert!(
        src.contains("kt::named_barrier(4 + threadIdx.x / 128, 128);"),
        "a warpgroup barrier"
    );
    // Consumer warpgroups are threads 128.. (IDs 5, 6 for their own barriers); turns use 1 and 2.
    assert!(!src.contains("named_barrier(1 + threadIdx.x"), "{src}");
}

// The atomic-dQ key blocks' order (dQ's product between dV and dK, waited with dK in flight) is
// checked on NVRTC's output: kittens-runtime tests/cuda_ptx_attn_bwd.rs.

/// Clusters (`Grid::cluster`): each block of a cluster must issue the fills its partners wait for,
/// so a producer whose loop bound reads the row tile is refused, and so is a paired grid.
#[test]
fn clusters_need_fills_in_step() {
    use kittens_ir::{BinOp, Expr, Stmt};
    let gpu = kittens_hw::gpu("h100").expect("catalogued");
    let cfg = GemmConfig {
        cluster: 2,
        ..GemmConfig::for_gpu(gpu)
    };
    let ir = build(&cfg).expect("the clustered gemm builds");
    // It lowers (that a block still expects a whole stage is checked on NVRTC's output:
    // kittens-runtime tests/cuda_ptx.rs).
    lower(&ir).unwrap_or_else(|e| panic!("{e}"));
    let mut paired = ir.clone();
    paired.grid.paired = true;
    let e = lower(&paired).unwrap_err().to_string();
    assert!(e.contains("clusters on a paired grid"), "{e}");
    // The producer's K loop made to run `+ 0·row tile` steps: same values, but it reads Block(0).
    fn touch(body: &mut [Stmt]) -> bool {
        body.iter_mut().any(|s| match s {
            Stmt::For { end, .. } => {
                let zero = Expr::Bin(BinOp::Mul, Box::new(Expr::Block(0)), Box::new(Expr::c(0)));
                *end = Expr::Bin(BinOp::Add, Box::new(end.clone()), Box::new(zero));
                true
            }
            Stmt::If { then, .. } => touch(then),
            _ => false,
        })
    }
    let mut uneven = ir.clone();
    assert!(touch(&mut uneven.body), "a producer loop to touch");
    let e = lower(&uneven).unwrap_err().to_string();
    assert!(e.contains("loops or branches on the row tile"), "{e}");
    assert!(matches!(
        lower(&uneven),
        Err(CudaLowerError::Unsupported(_))
    ));
}
