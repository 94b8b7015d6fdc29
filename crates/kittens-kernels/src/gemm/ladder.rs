//! The FP8-tutorial's optimisation ladder (FP8-tutorial steps 4-14, its final results table: each
//! kernel at 4096³ on an MI355X) against the configurations of this tile program that carry each
//! step's optimisation. The tile program is one algorithm (LDS-tiled, multi-wave, MFMA): the tutorial's
//! scalar kernels have no configuration here, and several of its steps land on the same
//! configuration; each step says which and why. `kittens ladder gemm_fp8` builds, compiles, analyses
//! and emulates every configuration.

use super::{GemmConfig, GemmSchedule, Staging};

/// One kernel of the tutorial and what stands for it here.
#[derive(Debug, Clone)]
pub struct LadderStep {
    /// The tutorial's section number (FP8-tutorial step N).
    pub step: u32,
    pub name: &'static str,
    /// The tutorial's average TFLOP/s at M = N = K = 4096 on an MI355X (its final results table).
    pub tutorial_tflops: f64,
    /// The configuration that carries the step's optimisation, or `None`.
    pub config: Option<GemmConfig>,
    /// What the configuration shares with the step, or why there is none.
    pub note: &'static str,
}

/// The ladder on `gpu` (an AMD GPU of the catalog; gfx950 is the tutorial's).
pub fn fp8_ladder(gpu: &kittens_hw::Gpu) -> Vec<LadderStep> {
    let base = GemmConfig::fp8_for_gpu(gpu);
    let with = |schedule, block, staging| GemmConfig {
        schedule,
        block,
        staging,
        ..base
    };
    let four_waves = with(GemmSchedule::Interleave4, 128, Staging::Lds);
    let multi128 = with(GemmSchedule::PingPong8, 128, Staging::Lds);
    // Register staging loads whole 16-byte runs per lane into the operand registers; an OCP fp8
    // operand tile (16x128, two 16-byte K runs per lane) has no such load in the HIP lowering, so on
    // gfx950 the step has no configuration (on gfx942 it is the registry's own).
    let staged_in_registers = (gpu.arch == kittens_hw::Arch::Cdna3)
        .then(|| with(GemmSchedule::PingPong8, 256, Staging::Registers));
    let step = |step, name, tutorial_tflops, config, note| LadderStep {
        step,
        name,
        tutorial_tflops,
        config,
        note,
    };
    vec![
        step(4, "naive", 1.15, None,
            "not built: one thread per output element with scalar loads and FMAs; the tile language has no scalar per-thread loop (every tile program multiplies with matrix instructions)"),
        step(5, "LDS tiled", 4.80, None,
            "not built: LDS tiles with scalar FMAs, the same reason"),
        step(6, "MFMA 16x16x128", 29.9, None,
            "not built on its own: its single-byte global loads have no configuration (the lowering always loads whole vectors); every configuration below multiplies with the target's fp8 MFMA"),
        step(7, "MFMA + vectorised global loads", 340.8, staged_in_registers,
            if staged_in_registers.is_some() {
                "vector global loads into registers, then written to LDS: the 8-wave program with the next K step staged in registers (HipKittens' MI325X path)"
            } else {
                "not built for gfx950: the register-staged load of a 16x128 OCP fp8 operand tile (two 16-byte K runs per lane) has no HIP lowering; `--target gfx942` builds this step"
            }),
        step(8, "MFMA + direct global-to-LDS loads", 501.2, Some(four_waves),
            "buffer loads straight into LDS (no register round trip): the 4-wave interleave at a 128 block with its LDS ring, the tutorial's 4 waves"),
        step(9, "MFMA + swizzled LDS", 494.8, Some(four_waves),
            "same configuration as step 8: every configuration's LDS tiles carry the bank solver's swizzle (the banks column)"),
        step(10, "MFMA + double buffering", 1149.9, Some(four_waves),
            "same configuration as step 8: its LDS ring has two slots, the next K step loading while this one is multiplied"),
        step(11, "multi-wave 128x128, 8 waves", 1808.2, Some(multi128),
            "8 waves (ping-pong) on a 128x128 block, LDS double buffer"),
        step(12, "multi-wave 256x256, 8 waves", 2002.8, Some(base),
            "8 waves on a 256x256 block: the registry's configuration, whose waves also ping-pong (step 14); the program has no 8-wave schedule without it"),
        step(13, "multi-wave 256x256, 16 waves", 2083.9, None,
            "not built: the program has no 16-wave schedule"),
        step(14, "8-wave ping-pong 256x256x128", 2650.1, Some(base),
            "the registry's gemm_fp8 for this GPU: HipKittens' 8-wave ping-pong (gfx950: LDS double buffer, K step 128; gfx942: the next K step in registers, K step 64)"),
    ]
}
