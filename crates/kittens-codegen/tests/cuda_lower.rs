//! The sm_90a lowering of tile programs: what it derives from the IR (TMA boxes, launch geometry,
//! shared memory) and what it refuses.

use kittens_codegen::cuda::{gemm_bf16_from_tile_program, lower, CudaLowerError, TmaMap};
use kittens_kernels::gemm_bf16::{build, GemmConfig};

#[test]
fn gemm_tile_program_lowers_with_tma_boxes_from_its_loads() {
    let l = gemm_bf16_from_tile_program().unwrap_or_else(|e| panic!("{e}"));
    // A: 128 rows × 64 K of bf16 (128-byte rows, 128B swizzle); B: 256 × 64.
    assert_eq!(
        l.tma_maps,
        vec![
            TmaMap {
                global: 0,
                box_rows: 128,
                box_cols: 64,
                swizzle_bytes: 128
            },
            TmaMap {
                global: 1,
                box_rows: 256,
                box_cols: 64,
                swizzle_bytes: 128
            },
        ]
    );
    // One block per 128 × 256 tile of C, edges rounded up.
    let blocks = l.blocks(&[("m", 1000), ("n", 1000), ("k", 64)]);
    assert_eq!(blocks, Some(1000u64.div_ceil(128) * 1000u64.div_ceil(256)));
    assert_eq!(l.blocks(&[("m", 1000)]), None, "missing parameters");
    // Three ring slots of A (16 KiB) and B (32 KiB), six mbarriers, 1 KiB of alignment slack.
    assert_eq!(l.dynamic_shared_bytes, 3 * (16_384 + 32_768) + 6 * 8 + 1024);
    // The loop body keeps the program's structure: one wait and one block barrier per K step.
    assert_eq!(l.source.matches("kt_q.wait_outstanding(2u)").count(), 1);
    assert_eq!(
        l.source.matches("wgmma_m64n256k16_bf16_ss(r_acc").count(),
        4,
        "K step 64 = 4 × k16"
    );
}

#[test]
fn amd_schedule_is_refused() {
    let k = build(&GemmConfig::default()).expect("the ping-pong gemm builds");
    match lower(&k) {
        Err(CudaLowerError::Unsupported(why)) => assert!(why.contains("ping-pong"), "{why}"),
        Ok(_) => panic!("the 8-wave ping-pong has no Hopper lowering"),
    }
}
