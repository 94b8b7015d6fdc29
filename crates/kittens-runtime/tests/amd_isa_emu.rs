//! The compiled code objects run on the ISA emulator (the `isa-emu` backend) against the f64
//! references, at shapes that are not tile multiples: the machine code itself, with its waits,
//! barriers and asynchronous memory, judged by the same rule as the interpreter.

#[path = "amd_support/common.rs"]
mod amd_common;

use kittens_hw::{Arch, Target};
use kittens_kernels::problem::Problem;
use kittens_runtime::runner::{run, IsaEmu};

/// Run a registry kernel's code object for `target` at problem `p`; it must pass the kernel's rule.
fn run_on(kernel: &str, target: Target, p: &Problem) -> kittens_runtime::runner::RunReport {
    amd_common::clang_for(target.arch().unwrap());
    let entry = kittens_kernels::by_name(kernel).unwrap();
    let emu = IsaEmu::new(target).unwrap();
    let r = run(entry, p, &emu).unwrap_or_else(|e| panic!("{kernel} {target}: {e}"));
    eprintln!(
        "{kernel} {target} {}: rel_err {:.3e} run {:.2}s {}",
        r.shape,
        r.error.rel_err,
        r.run_seconds,
        serde_json::to_string(&r.dynamic).unwrap()
    );
    assert!(r.passed, "{kernel} {target}: {:?}", r.failures());
    let stats = &r.dynamic.as_ref().unwrap()["stats"];
    assert!(stats["instructions"]["mfma"].as_u64().unwrap() > 0);
    assert!(stats["waits"].as_u64().unwrap() > 0);
    r
}

fn gemm(m: usize, n: usize, k: usize) -> Problem {
    Problem {
        m,
        n,
        k,
        seed: (m + n + k) as u64,
        ..Problem::default()
    }
}

/// Attention at a ragged length with GQA; `causal` masks.
fn attn(seq: usize, dim: usize, causal: bool) -> Problem {
    let mut p = Problem {
        causal,
        input_scale: 4.0,
        seed: seq as u64,
        ..Problem::default()
    };
    p.attn.batch = 1;
    p.attn.heads = 2;
    p.attn.heads_kv = 1;
    p.attn.seq = seq;
    p.attn.dim = dim;
    p
}

#[test]
fn gemm_bf16_code_objects_at_a_ragged_shape() {
    for t in [Target::Gfx950, Target::Gfx942] {
        run_on("gemm_bf16", t, &gemm(72, 40, 68));
    }
}

/// Two blocks in each direction and a K that is not a K-step multiple.
#[test]
fn gemm_bf16_code_objects_over_several_blocks() {
    for t in [Target::Gfx950, Target::Gfx942] {
        let r = run_on("gemm_bf16", t, &gemm(300, 270, 130));
        assert_eq!(r.blocks, 4);
    }
}

#[test]
fn gemm_fp8_code_objects_at_a_ragged_shape() {
    for t in [Target::Gfx950, Target::Gfx942] {
        run_on("gemm_fp8", t, &gemm(72, 40, 200));
    }
}

#[test]
fn attn_fwd_code_objects_at_ragged_lengths() {
    for t in [Target::Gfx950, Target::Gfx942] {
        run_on("attn_fwd", t, &attn(150, 64, true));
        run_on("attn_fwd", t, &attn(200, 128, false));
    }
}

/// The code offset of the `s_waitcnt` that most often had to land a load early in a run.
fn most_stalled_wait(dynamic: &serde_json::Value) -> u32 {
    let stalls = dynamic["stats"]["stalls_at"]
        .as_object()
        .expect("stalls_at");
    let (at, _) = stalls
        .iter()
        .max_by_key(|(_, n)| n.as_u64().unwrap())
        .expect("some wait stalled");
    at.parse().unwrap()
}

/// A missing wait is caught: the `s_waitcnt vmcnt(..)` that stalled most in a correct run is made
/// to wait for no vector memory at all (its VM_CNT field set to the maximum, 63; LGKM left as it
/// was), in the real gfx950 code object. Loads then land after their consumers read the registers
/// or LDS, and the result is wrong under the same seeds that pass unpatched.
#[test]
fn a_removed_vmcnt_wait_reads_stale_data() {
    use std::sync::Arc;
    let target = Target::Gfx950;
    amd_common::clang_for(Arch::Cdna4);
    let entry = kittens_kernels::by_name("gemm_bf16").unwrap();
    let p = Problem {
        m: 72,
        n: 40,
        k: 68,
        seed: 9,
        ..Problem::default()
    };
    let mut emu = IsaEmu::new(target).unwrap();
    let good = run(entry, &p, &emu).unwrap();
    assert!(good.passed, "{:?}", good.failures());
    let at = most_stalled_wait(good.dynamic.as_ref().unwrap()) as usize;
    emu.patch = Some(Arc::new(move |co: &mut kittens_amdsim::Kernel| {
        let w = u32::from_le_bytes(co.code[at..at + 4].try_into().unwrap());
        assert_eq!(w >> 16, 0xbf8c, "an s_waitcnt at {at:#x}");
        // vmcnt is bits 3:0 and 15:14 of SIMM16 (CDNA3 ISA guide, S_WAITCNT).
        let patched = w | 0xf | 0x3 << 14;
        co.code[at..at + 4].copy_from_slice(&patched.to_le_bytes());
    }));
    let mut caught = 0;
    for seed in 1..=4 {
        emu.seed = seed;
        let r = run(entry, &p, &emu).unwrap();
        eprintln!(
            "wait at {at:#x} removed, seed {seed}: rel_err {:.3e}",
            r.error.rel_err
        );
        caught += usize::from(!r.passed);
        // The same seed with the compiler's bytes passes: the wait, not the seed, decides.
        let patch = emu.patch.take();
        let ok = run(entry, &p, &emu).unwrap();
        assert!(ok.passed, "seed {seed} unpatched: {:?}", ok.failures());
        emu.patch = patch;
    }
    assert!(
        caught > 0,
        "the missing wait went unnoticed under every seed"
    );
}
