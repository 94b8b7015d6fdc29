//! The compiled code objects run on the ISA emulator (the `isa-emu` backend) against the f64
//! references, at shapes that are not tile multiples: the machine code itself, with its waits,
//! barriers and asynchronous memory, judged by the same rule as the interpreter.

#[path = "amd_support/common.rs"]
mod amd_common;

use kittens_hw::{Arch, Target};
use kittens_kernels::problem::Problem;
use kittens_runtime::runner::{run, IsaEmu};

fn gemm_on(target: Target, m: usize, n: usize, k: usize) {
    amd_common::clang_for(target.arch().unwrap());
    let entry = kittens_kernels::by_name("gemm_bf16").unwrap();
    let emu = IsaEmu::new(target).unwrap();
    let p = Problem {
        m,
        n,
        k,
        seed: (m + n + k) as u64,
        ..Problem::default()
    };
    let r = run(entry, &p, &emu).unwrap_or_else(|e| panic!("{target} {m}x{n}x{k}: {e}"));
    eprintln!(
        "{target} {m}x{n}x{k}: rel_err {:.3e} run {:.2}s {}",
        r.error.rel_err,
        r.run_seconds,
        serde_json::to_string(&r.dynamic).unwrap()
    );
    assert!(r.passed, "{target} {m}x{n}x{k}: {:?}", r.failures());
}

#[test]
fn gemm_bf16_gfx950_code_object_at_a_ragged_shape() {
    gemm_on(Target::Gfx950, 72, 40, 68);
}

#[test]
fn gemm_bf16_gfx942_code_object_at_a_ragged_shape() {
    let _ = Arch::Cdna3;
    gemm_on(Target::Gfx942, 72, 40, 68);
}
