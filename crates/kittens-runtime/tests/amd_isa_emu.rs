//! The compiled code objects run on the ISA emulator (the `isa-emu` backend) against the f64
//! references, at shapes that are not tile multiples: the machine code itself, with its waits,
//! barriers and asynchronous memory, judged by the same rule as the interpreter.

#[path = "amd_support/common.rs"]
mod amd_common;

use kittens_hw::{Arch, Target};
use kittens_kernels::attn::AttnArgs;
use kittens_kernels::attn::{AttnLayout, AttnShape};
use kittens_kernels::attn_bwd::problem::BwdProblem;
use kittens_kernels::attn_fwd::problem::AttnProblem;
use kittens_kernels::gemm::problem::{GemmKind, GemmProblem};
use kittens_kernels::layernorm::problem::LayerNormProblem;
use kittens_kernels::problem::KernelProblem;
use kittens_kernels::problem::RunSettings;
use kittens_kernels::rotary::problem::RotaryProblem;
use kittens_kernels::rows::NormShape;
use kittens_runtime::runner::{run, IsaEmu};
use serde_json::Value;

/// Run a registry kernel's code object for `target` at problem `p`; it must pass the kernel's rule
/// and have issued MFMAs.
fn run_on(
    kernel: &str,
    target: Target,
    p: &dyn KernelProblem,
) -> kittens_runtime::runner::RunReport {
    let r = run_checked(kernel, target, p);
    let stats = &r.dynamic.as_ref().unwrap()["stats"];
    assert!(stats["instructions"]["mfma"].as_u64().unwrap() > 0);
    r
}

/// Run a registry kernel's code object for `target` at problem `p`; it must pass the kernel's rule
/// (every output's check) and have waited on memory.
fn run_checked(
    kernel: &str,
    target: Target,
    p: &dyn KernelProblem,
) -> kittens_runtime::runner::RunReport {
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
    for o in &r.outputs {
        eprintln!("  {}: rel_err {:.3e}", o.name, o.error.rel_err);
    }
    assert!(r.passed, "{kernel} {target}: {:?}", r.failures());
    let stats = &r.dynamic.as_ref().unwrap()["stats"];
    assert!(stats["waits"].as_u64().unwrap() > 0);
    r
}

fn gemm(m: usize, n: usize, k: usize) -> GemmProblem {
    gemm_as(GemmKind::Bf16, m, n, k)
}

/// [`gemm`] for either element type.
fn gemm_as(kind: GemmKind, m: usize, n: usize, k: usize) -> GemmProblem {
    let mut p = GemmProblem::new(kind, m, n, k);
    p.run.seed = (m + n + k) as u64;
    p
}

/// Attention at a ragged length with GQA; `causal` masks.
fn attn(seq: usize, dim: usize, causal: bool) -> AttnProblem {
    let mut p = AttnProblem {
        args: AttnArgs {
            causal,
            ..Default::default()
        },
        run: RunSettings {
            input_scale: 4.0,
            seed: seq as u64,
            ..RunSettings::default()
        },
        ..AttnProblem::default()
    };
    p.args.attn.batch = 1;
    p.args.attn.heads = 2;
    p.args.attn.heads_kv = 1;
    p.args.attn.seq = seq;
    p.args.attn.dim = dim;
    p
}

/// The GEMM also checks the static bank analysis: `kittens check gemm_bf16 --banks` finds every
/// hot-loop shared access 1-way by the bank model, and the conflicts measured on the addresses the
/// code object actually computes agree: every DS instruction the model covers is conflict-free.
#[test]
fn gemm_bf16_code_objects_at_a_ragged_shape() {
    for t in [Target::Gfx950, Target::Gfx942] {
        let r = run_on("gemm_bf16", t, &gemm(72, 40, 68));
        assert_conflict_free(&r, t, 8);
        // The report's comparison with `check --banks` says the same: both 1-way, nothing differs.
        let banks = &r.dynamic.as_ref().unwrap()["banks"];
        assert!(
            banks["static"].as_array().unwrap().len() >= 4,
            "{t}: {banks}"
        );
        assert_eq!(banks["by_instruction"]["ds_read_b128"]["model"], 1, "{t}");
        assert_eq!(
            banks["by_instruction"]["ds_read_b128"]["measured"], 1,
            "{t}"
        );
        assert_eq!(banks["differ"], serde_json::json!([]), "{t}");
    }
}

/// Every DS instruction of the run whose conflicts the emulator measures (at least `min` of them)
/// was conflict-free on the addresses the code object computed.
fn assert_conflict_free(r: &kittens_runtime::runner::RunReport, t: Target, min: usize) {
    let ds = r.dynamic.as_ref().unwrap()["stats"]["ds"]
        .as_object()
        .unwrap()
        .clone();
    let modelled: Vec<_> = ds
        .values()
        .filter(|v| !v["worst_degree"].is_null())
        .collect();
    assert!(modelled.len() >= min, "{t}: {ds:?}");
    for v in modelled {
        assert_eq!(v["worst_degree"], 1, "{t}: {v}");
    }
}

/// Where the measured conflicts exceed the static model, the report lists each such instruction with
/// both degrees: every listed one measured worse than the model's worst for its mnemonic (or had no
/// model), and every executed instruction worse than that is listed.
fn bank_differences_are_complete(r: &kittens_runtime::runner::RunReport) {
    let d = r.dynamic.as_ref().unwrap();
    let listed: Vec<u64> = d["banks"]["differ"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|x| x["offset"].as_u64())
        .collect();
    for (_, v) in d["stats"]["ds"].as_object().unwrap() {
        let Some(w) = v["worst_degree"].as_u64() else {
            continue;
        };
        let m = v["text"].as_str().unwrap().split(' ').next().unwrap();
        let model = &d["banks"]["by_instruction"][m]["model"];
        let over = match model.as_u64() {
            Some(s) => w > s,
            None => w > 1,
        };
        let at = v["offset"].as_u64().unwrap();
        assert_eq!(listed.contains(&at), over, "{v} vs model {model}");
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
/// Also conflict-free: gfx950's fp8 16×128 operand, two 16-byte runs per lane, was 4-way on every
/// `ds_read_b128` while the bank model had no instruction for it and its tiles kept no swizzle.
fn gemm_fp8_code_objects_at_a_ragged_shape() {
    for t in [Target::Gfx950, Target::Gfx942] {
        let r = run_on("gemm_fp8", t, &gemm_as(GemmKind::Fp8, 72, 40, 200));
        assert_conflict_free(&r, t, 8);
    }
}

#[test]
fn attn_fwd_code_objects_at_ragged_lengths() {
    for t in [Target::Gfx950, Target::Gfx942] {
        bank_differences_are_complete(&run_on("attn_fwd", t, &attn(150, 64, true)));
        bank_differences_are_complete(&run_on("attn_fwd", t, &attn(200, 128, false)));
    }
}

/// gfx950's 4-wave interleave variant of both GEMMs (HipKittens §3.3.2): its operands are read from
/// LDS straight into AGPRs (`ds_read_b128 a[..]`), which the emulator must land in the AGPR file.
#[test]
fn interleave4_gemm_code_objects_gfx950() {
    for kind in [GemmKind::Bf16, GemmKind::Fp8] {
        let mut p = gemm_as(kind, 72, 40, 200);
        p.run.variant = Some("interleave4");
        let r = run_on(kind.name(), Target::Gfx950, &p);
        assert_eq!(r.shape["schedule"], "4-wave interleave");
        assert_conflict_free(&r, Target::Gfx950, 8);
    }
}

/// The strip kernels at shapes with ragged rows. Layernorm at 5 rows of 1000 puts two rows in a
/// block whose halves meet through LDS partials across a barrier: with a bare `s_barrier` (no
/// `lgkmcnt(0)` before it) the second row's upper half read a partial before it had landed.
#[test]
fn layernorm_and_rotary_code_objects_at_ragged_shapes() {
    let norm = LayerNormProblem {
        norm: NormShape {
            rows: 5,
            dim: 1000,
            p: 0.1,
            dropout_seed: 0x1234_5678_9abc,
            offset: 3 << 33 | 7,
        },
        run: RunSettings {
            seed: 5,
            ..RunSettings::default()
        },
        ..LayerNormProblem::default()
    };
    let rope = |batch, heads, seq, dim, layout, interleaved| RotaryProblem {
        attn: AttnShape {
            batch,
            heads,
            heads_kv: heads,
            seq,
            dim,
            layout,
        },
        interleaved,
        x_strides: None,
        run: RunSettings {
            seed: 11,
            ..RunSettings::default()
        },
    };
    for t in [Target::Gfx950, Target::Gfx942] {
        run_checked("layernorm", t, &norm);
        run_checked("rotary", t, &rope(1, 3, 37, 64, AttnLayout::Bshd, false));
        run_checked("rotary", t, &rope(2, 2, 9, 128, AttnLayout::Bhsd, true));
    }
}

/// The attention backward's three gradients (dQ, dK, dV) against the f64 reference, with query and
/// key lengths that are not tile multiples: GQA at D64, and causal (top-left, and bottom-right with
/// more keys than queries) at D64 and D128.
///
/// On gfx950 this caught a register read before its `ds_read_b128` landed: the lowering's
/// `s_waitcnt lgkmcnt` is an asm statement that orders memory but not register arithmetic, and clang
/// had moved the bf16 unpack of the rows of dO and O above it (dK's relative error 0.52 at D64, NaN
/// at D128). The lowering now ties the registers each wait retires to it (`regs_landed`).
fn attn_bwd_code_objects(target: Target) {
    let mut gqa = attn(53, 64, false);
    gqa.args.seq_kv = Some(70);
    let mut causal = attn(45, 64, true);
    causal.args.seq_kv = Some(37);
    let mut bottom_right = attn(45, 128, true);
    bottom_right.args.seq_kv = Some(77);
    bottom_right.args.attn.heads_kv = 2;
    bottom_right.args.bottom_right = true;
    for p in [gqa, causal, bottom_right] {
        let p = BwdProblem {
            run: RunSettings {
                input_scale: 8.0,
                ..p.run
            },
            ..BwdProblem::with(p.args)
        };
        let r = run_on("attn_bwd", target, &p);
        assert_eq!(r.outputs.len(), 3);
    }
}

#[test]
fn attn_bwd_code_objects_gfx950() {
    attn_bwd_code_objects(Target::Gfx950);
}

#[test]
fn attn_bwd_code_objects_gfx942() {
    attn_bwd_code_objects(Target::Gfx942);
}

/// The `s_waitcnt`s that stalled in a run (had to land an operation early), most often first.
fn stalled_waits(dynamic: &serde_json::Value) -> Vec<usize> {
    let stalls = dynamic["stats"]["stalls_at"]
        .as_object()
        .expect("stalls_at");
    let mut v: Vec<(u64, usize)> = stalls
        .iter()
        .map(|(at, n)| (n.as_u64().unwrap(), at.parse().unwrap()))
        .collect();
    v.sort_by(|a, b| b.cmp(a));
    v.into_iter().map(|(_, at)| at).collect()
}

fn word_at(code: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(code[at..at + 4].try_into().unwrap())
}

/// A wait made too weak is caught: one `s_waitcnt` that stalled in a correct run is rewritten in the
/// real gfx950 code object so it no longer waits on `counter` (its field set to the maximum: VM_CNT
/// bits 3:0 and 15:14, LGKM_CNT bits 11:8, CDNA3 ISA guide S_WAITCNT). Loads then land after their
/// consumers read the registers or LDS, and the result is wrong under seeds that pass unpatched.
fn weakened_wait_is_caught(kernel: &str, p: &dyn KernelProblem, mask: u32) {
    use std::sync::Arc;
    let target = Target::Gfx950;
    amd_common::clang_for(Arch::Cdna4);
    let entry = kittens_kernels::by_name(kernel).unwrap();
    let mut emu = IsaEmu::new(target).unwrap();
    let good = run(entry, p, &emu).unwrap();
    assert!(good.passed, "{:?}", good.failures());
    // The compiled bytes, to pick a wait that waits on this counter.
    let k = p.build(target).unwrap();
    let lowered = kittens_codegen::lower(&k, target).unwrap();
    let co = amd_common::clang_for(Arch::Cdna4)
        .compile(&lowered.source, Arch::Cdna4)
        .unwrap();
    let co = kittens_amdsim::Kernel::load(&co.code_object).unwrap();
    let at = stalled_waits(good.dynamic.as_ref().unwrap())
        .into_iter()
        .find(|&at| word_at(&co.code, at) & mask != mask)
        .expect("a stalled wait on this counter");
    emu.patch = Some(Arc::new(move |co: &mut kittens_amdsim::Kernel| {
        let w = word_at(&co.code, at);
        assert_eq!(w >> 16, 0xbf8c, "an s_waitcnt at {at:#x}");
        co.code[at..at + 4].copy_from_slice(&(w | mask).to_le_bytes());
    }));
    let mut caught = 0;
    for seed in 1..=4 {
        emu.seed = seed;
        let r = run(entry, p, &emu).unwrap();
        eprintln!(
            "{kernel}: wait at {at:#x} weakened ({mask:#x}), seed {seed}: rel_err {:.3e}",
            r.error.rel_err
        );
        caught += usize::from(!r.passed);
        // The same seed with the compiler's bytes passes: the wait, not the seed, decides.
        let patch = emu.patch.take();
        let ok = run(entry, p, &emu).unwrap();
        assert!(ok.passed, "seed {seed} unpatched: {:?}", ok.failures());
        emu.patch = patch;
    }
    assert!(
        caught > 0,
        "the weakened wait went unnoticed under every seed"
    );
}

const VM_CNT: u32 = 0xf | 0x3 << 14;
const LGKM_CNT: u32 = 0xf << 8;

#[test]
fn a_missing_vmcnt_wait_reads_stale_data() {
    weakened_wait_is_caught("gemm_bf16", &gemm(72, 40, 68), VM_CNT);
}

#[test]
fn a_missing_lgkmcnt_wait_reads_stale_data() {
    weakened_wait_is_caught("attn_fwd", &attn(150, 64, false), LGKM_CNT);
}

/// The HIP launch path: on a machine without ROCm (this project's), the `hip` backend fails with a
/// clear error; with ROCm and an AMD GPU, the same code object the emulator runs must pass.
#[test]
fn hip_backend_runs_or_says_there_is_no_rocm() {
    use kittens_runtime::amd::hip::{HipError, HipRuntime};
    use kittens_runtime::runner::HipGpu;
    let entry = kittens_kernels::by_name("gemm_bf16").unwrap();
    let gpu = HipGpu::new(Target::Gfx950).unwrap();
    match HipRuntime::load() {
        Err(HipError::NoRocm { looked }) => {
            assert!(looked.contains("libamdhip64"), "{looked}");
            let e = run(entry, &gemm(72, 40, 68), &gpu).unwrap_err().to_string();
            assert!(e.contains("no ROCm runtime found (libamdhip64.so)"), "{e}");
        }
        Err(HipError::NoDevice) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI=true with ROCm installed but no AMD GPU visible")
        }
        Err(HipError::NoDevice) => eprintln!("ROCm without an AMD GPU: nothing to launch on"),
        Err(e) => panic!("HIP runtime present but unusable: {e}"),
        Ok(_) => {
            let r = run(entry, &gemm(72, 40, 68), &gpu).unwrap();
            assert!(r.passed, "{:?}", r.failures());
        }
    }
}

/// Missing barriers are caught too: with every `s_barrier` of the gfx950 GEMM turned into `s_nop 0`,
/// waves read LDS tiles other waves have not finished writing (the scheduler interleaves them at
/// random), and the result is wrong.
#[test]
fn removed_barriers_are_caught() {
    use kittens_amdsim::decode_all;
    use std::sync::Arc;
    amd_common::clang_for(Arch::Cdna4);
    let entry = kittens_kernels::by_name("gemm_bf16").unwrap();
    let mut emu = IsaEmu::new(Target::Gfx950).unwrap();
    emu.patch = Some(Arc::new(|co: &mut kittens_amdsim::Kernel| {
        let barriers: Vec<usize> = decode_all(&co.code, co.arch)
            .unwrap()
            .iter()
            .filter(|i| i.op == kittens_amdsim::Op::SBarrier)
            .map(|i| i.offset as usize)
            .collect();
        assert!(!barriers.is_empty());
        for at in barriers {
            co.code[at..at + 4].copy_from_slice(&0xbf80_0000u32.to_le_bytes());
        }
    }));
    let r = run(entry, &gemm(72, 40, 68), &emu).unwrap();
    eprintln!("no barriers: rel_err {:.3e}", r.error.rel_err);
    assert!(!r.passed, "removing every barrier went unnoticed");
    assert_eq!(
        r.dynamic.as_ref().unwrap()["stats"]["instructions"]["barrier"],
        Value::Null
    );
}
