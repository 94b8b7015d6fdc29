//! The kernel suite on the CPU backend: every kernel on fresh random inputs at several shapes (one not a
//! multiple of the tile), against its f64 reference, judged by the runner (`passed`: each kernel's own
//! tolerance, the test rule for attention).

use super::Section;
use kittens_kernels::problem::NamedArgs;
use kittens_runtime::runner::{self, Interpreter};
use serde_json::Value;

/// Each case's problem by name (the kernel's defaults for the rest).
fn cases() -> Vec<(&'static str, String, NamedArgs)> {
    let gemm = |m: usize, n: usize, k: usize, schedule: &str| {
        NamedArgs::new()
            .with("m", m)
            .with("n", n)
            .with("k", k)
            .with("schedule", schedule)
    };
    let attn = |heads: usize, heads_kv: usize, seq: usize, dim: usize, causal, layout: &str| {
        NamedArgs::new()
            .with("batch", 1usize)
            .with("heads", heads)
            .with("heads_kv", heads_kv)
            .with("seq", seq)
            .with("dim", dim)
            .with("causal", causal)
            .with("layout", layout)
    };
    vec![
        (
            "gemm_bf16",
            "256x256x192 ping-pong".into(),
            gemm(256, 256, 192, "pingpong"),
        ),
        (
            "gemm_bf16",
            "300x264x100 ping-pong (partial tiles)".into(),
            gemm(300, 264, 100, "pingpong"),
        ),
        (
            "gemm_bf16",
            "256x256x128 4-wave interleave".into(),
            gemm(256, 256, 128, "interleave"),
        ),
        (
            "gemm_bf16",
            "256x256x128 producer/consumer".into(),
            gemm(256, 256, 128, "ws"),
        ),
        (
            "attn_fwd",
            "H=4 HKV=2 N=200 D=64 BSHD".into(),
            attn(4, 2, 200, 64, false, "bshd"),
        ),
        (
            "attn_fwd",
            "H=4 HKV=1 N=160 D=128 causal BHSD".into(),
            attn(4, 1, 160, 128, true, "bhsd"),
        ),
        (
            "layernorm",
            "37 rows of D=1000, dropout p=0.1 (Philox)".into(),
            NamedArgs::new(),
        ),
        (
            "rotary",
            "H=3 N=77 D=64 interleaved BHSD".into(),
            attn(3, 3, 77, 64, false, "bhsd").with("interleaved", true),
        ),
        (
            "attn_bwd",
            "H=4 HKV=2 Nq=200 Nkv=136 D=64 BSHD".into(),
            attn(4, 2, 200, 64, false, "bshd").with("seq_kv", 136usize),
        ),
        (
            "attn_bwd",
            "H=4 HKV=1 Nq=96 Nkv=160 D=128 causal-br BHSD".into(),
            attn(4, 1, 96, 128, true, "bhsd")
                .with("seq_kv", 160usize)
                .with("bottom_right", true),
        ),
    ]
}

pub fn run(s: &mut Section) -> anyhow::Result<Value> {
    let mut out = Vec::new();
    let mut failed = 0;
    for (i, (name, label, problem)) in cases().into_iter().enumerate() {
        let seeded = problem.with("seed", 1000 + i as u64);
        let entry = kittens_kernels::by_name(name)?;
        let r = runner::run(entry, entry.problem(&seeded)?.as_ref(), &Interpreter)
            .map_err(|e| anyhow::anyhow!("{name} {label}: {e}"))?;
        failed += usize::from(!r.passed);
        let ok = |p: bool| if p { "ok" } else { "FAILED" };
        s.line(format!(
            "{:<10} {:<40} rel_err {:.2e} ≤ {:.2e}  {}  ({:.1} s)",
            name,
            label,
            r.error.rel_err,
            r.tolerance,
            ok(r.passed),
            r.run_seconds
        ));
        // Several outputs (the backward's gradients): each one's error against its own bound.
        for o in &r.outputs {
            let bound = r
                .checks
                .iter()
                .find(|c| c.output.as_ref() == Some(&o.name) && c.metric == "rel_err")
                .map_or(f64::NAN, |c| c.verdict.bound);
            s.line(format!(
                "{:<10}   {:<38} rel_err {:.2e} ≤ {:.2e}  {}",
                "",
                o.name,
                o.error.rel_err,
                bound,
                ok(o.passed)
            ));
        }
        out.push(serde_json::to_value(&r)?);
    }
    anyhow::ensure!(
        failed == 0,
        "{failed} kernel run(s) failed their error check"
    );
    Ok(Value::Array(out))
}
