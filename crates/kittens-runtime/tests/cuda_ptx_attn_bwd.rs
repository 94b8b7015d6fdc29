//! What NVRTC makes of the attention backward's Hopper launches (its PTX: the order the `wgmma` chains,
//! their waits and the global reads are issued in, after the compiler's unrolling and scheduling):
//! the properties the lowering's schedule exists for, held on the compiled code. No GPU is needed; the
//! kernels' results are the GPU tests' (crates/kittens-runtime/tests/cuda_attn_bwd.rs and
//! `kittens run attn_bwd --backend cuda`).

#[path = "cuda_support/common.rs"]
mod cuda_common;
#[path = "cuda_support/ptx.rs"]
mod ptx;

use cuda_common::ensure_nvrtc;
use kittens_codegen::lower;
use kittens_hw::Target;
use kittens_kernels::attn_bwd::{build, BwdConfig, BwdSchedule};
use ptx::{f32_loads, step_loop, stream, Inst};

fn compiled(cfg: &BwdConfig) -> String {
    ensure_nvrtc();
    let k = build(cfg).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
    let l = lower(&k, Target::Sm90a).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
    kittens_runtime::cuda::ptx(&l.source, "sm_90a").unwrap_or_else(|e| panic!("{e}"))
}

fn h100() -> &'static kittens_hw::Gpu {
    kittens_hw::gpu("h100").expect("catalogued")
}

/// The per-query statistics (`lse`, `delta`: `[b, h, s]` f32 tensors read as tiles with a zero stride)
/// are read once per distinct value a thread needs, not once per accumulator element: 16 columns per
/// thread in the key blocks (a 64 × 64 `Sᵀ` tile holds 32 values per thread, two per column), 2 rows in
/// the query blocks (32 values per thread, 16 per row). Each read site has an in-bounds path and an
/// edge path, so at most 2 statistics × 2 paths × the distinct values are loaded per step (key blocks:
/// a new query block's statistics per step) or per tile (query blocks: read once before the steps).
#[test]
fn attn_bwd_statistics_are_read_once_per_value() {
    for (schedule, distinct) in [(BwdSchedule::HopperKv, 16), (BwdSchedule::HopperQ, 2)] {
        let ptx = compiled(&BwdConfig {
            schedule,
            ..BwdConfig::default()
        });
        let loads = match schedule {
            BwdSchedule::HopperKv => f32_loads(&step_loop(&ptx)),
            _ => f32_loads(&stream(&ptx)),
        };
        assert!(
            (distinct..=2 * 2 * distinct).contains(&loads),
            "{schedule:?}: {loads} f32 loads for {distinct} distinct values per statistic"
        );
    }
}

/// The commit groups a loop leaves in flight at its back edge are known at its head (a fixpoint of the
/// body, `lower_wait.rs`): in the backward's key blocks a step's statistics load from global memory
/// while the previous step's dK chain is still on the tensor cores, and the first wait of a step is a
/// `wait_group 1` that leaves the step's `Sᵀ` chain running, not a `wait_group 0`.
#[test]
fn loop_head_keeps_the_previous_steps_chain_in_flight() {
    let body = step_loop(&compiled(&BwdConfig::for_gpu(h100())));
    let at = |f: &dyn Fn(&Inst) -> bool, what: &str| {
        body.iter()
            .position(f)
            .unwrap_or_else(|| panic!("no {what} in the step loop"))
    };
    let load = at(&|i| *i == Inst::LoadF32, "statistics load");
    let chain = at(&|i| matches!(i, Inst::Wgmma { .. }), "wgmma");
    let wait = at(&|i| matches!(i, Inst::Wait(_)), "wait");
    assert!(
        load < chain && chain < wait,
        "load {load}, chain {chain}, wait {wait}"
    );
    assert_eq!(body[wait], Inst::Wait(1), "{:?}", &body[..wait + 1]);
}

/// The atomic-dQ key blocks at head dim 128 issue dQ's product between dV and dK (FlashAttention-3's
/// order) and wait for it with one group still in flight (dK), so that dK runs on the tensor cores
/// while dQ's share is staged and reduced into global memory by TMA; waiting for both
/// (`wait_group 0`) measured 7-10% slower on the H100 (docs/performance.md, "attn_bwd"). dV and dK
/// are `P·dO` and `dS·Q` with A from registers (N = 128, B N-major); dQ is `dSᵀ·K` from shared memory
/// with both operands transposed.
#[test]
fn atomic_dq_waits_with_dk_still_in_flight() {
    let cfg = BwdConfig {
        schedule: BwdSchedule::HopperAtomicKv,
        ..BwdConfig::for_gpu(h100())
    };
    assert_eq!(cfg.dim, 128);
    let body = step_loop(&compiled(&cfg));
    let rs = |i: &Inst| matches!(i, Inst::Wgmma { shape, imm } if shape == "m64n128k16.f32.bf16.bf16" && *imm == [1, 1, 1]);
    let dq = body
        .iter()
        .position(
            |i| matches!(i, Inst::Wgmma { shape, imm } if shape.starts_with("m64n64k16.") && *imm == [1, 1, 1, 1]),
        )
        .expect("dQ's chain (both operands transposed)");
    assert!(body[..dq].iter().any(rs), "dV's chain before dQ's");
    let dk = dq
        + body[dq..]
            .iter()
            .position(rs)
            .expect("dK's chain after dQ's");
    let reduce = dk
        + body[dk..]
            .iter()
            .position(|i| *i == Inst::Reduce)
            .expect("dQ's reduction after dK's chain");
    let last_wait = body[dk..reduce]
        .iter()
        .rev()
        .find(|i| matches!(i, Inst::Wait(_)))
        .expect("a wait for dQ's group before its reduction");
    assert_eq!(*last_wait, Inst::Wait(1), "{:?}", &body[dk..reduce]);
}
