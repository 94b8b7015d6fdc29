//! The varlen attention through the runner. `attn_varlen_bwd`: the CPU programs (`cpu` backend), and
//! the sm_90a launches
//! exactly as the registry hands them to a prepared call (the dense strip pass for D over the packed
//! rows at batch 1, the varlen key blocks adding into the f32 dQ accumulator, the dQ conversion),
//! run here on the interpreter by a backend that passes the tensors between them by name as the
//! `cuda` backend's one prepared call does — each gradient judged by FlashAttention's rule against
//! the per-sequence f64 backward, at lengths the runner draws (the longest, 1, 0, random ones), GQA,
//! causal bottom-right and not, head dims 64 and 128. With ALiBi, the forward (`attn_varlen`) and
//! the backward, both programs of each, against the f64 references that add the bias.

use kittens_hw::Target;
use kittens_ir::Access;
use kittens_kernels::problem::{NamedArgs, Stage};
use kittens_runtime::runner::{self, About, Backend, Execution, Interpreter, Job, RunError};

fn entry() -> &'static kittens_kernels::registry::KernelEntry {
    kittens_kernels::by_name("attn_varlen_bwd").unwrap()
}

fn forward() -> &'static kittens_kernels::registry::KernelEntry {
    kittens_kernels::by_name("attn_varlen").unwrap()
}

fn args(batch: usize, heads: (usize, usize), seq: (usize, usize), dim: usize) -> NamedArgs {
    NamedArgs::new()
        .with("batch", batch)
        .with("heads", heads.0)
        .with("heads_kv", heads.1)
        .with("seq", seq.0)
        .with("seq_kv", seq.1)
        .with("dim", dim)
        .with("seed", (seq.0 * 31 + seq.1) as u64)
}

/// The sm_90a launches on the interpreter, tensors by name between them (the caller's inputs,
/// then what each launch writes; outputs start as NaN), the call's outputs those no later launch
/// reads — what `kittens run --backend cuda` does on the device with one prepared call.
struct Sm90aOnInterpreter;

impl Backend for Sm90aOnInterpreter {
    fn about(&self) -> About {
        About {
            name: "sm90a-on-interpreter",
            target: Target::Sm90a,
            ..Interpreter.about()
        }
    }
    fn execute(&self, _: &Job) -> Result<Execution, RunError> {
        unreachable!("the runner hands the whole call to execute_call")
    }
    fn execute_call(
        &self,
        stages: &[Stage],
        names: &[String],
        inputs: &[Vec<f32>],
    ) -> Option<Result<(Execution, Vec<String>), RunError>> {
        let mut pool: Vec<(String, Vec<f32>)> =
            names.iter().cloned().zip(inputs.iter().cloned()).collect();
        let mut written: Vec<(usize, String)> = Vec::new();
        for (i, st) in stages.iter().enumerate() {
            let n_in = st.launch.inputs.len();
            let mut t: Vec<Vec<f32>> = Vec::new();
            for (j, g) in st.kernel.globals.iter().enumerate() {
                match pool.iter().find(|(n, _)| *n == g.name) {
                    Some((_, v)) => t.push(v.clone()),
                    None => {
                        let len = st.launch.outputs[j - n_in];
                        t.push(vec![f32::NAN; len]);
                    }
                }
            }
            kittens_ir::interp::run(&st.kernel, &st.launch.params, &mut t).unwrap();
            for (g, v) in st.kernel.globals.iter().zip(t) {
                if g.access != Access::Read {
                    pool.retain(|(n, _)| *n != g.name);
                    pool.push((g.name.clone(), v));
                    written.push((i, g.name.clone()));
                }
            }
        }
        let read_later = |i: usize, name: &str| {
            stages[i + 1..].iter().any(|s| {
                s.kernel.globals[..s.launch.inputs.len()]
                    .iter()
                    .chain(
                        s.kernel
                            .globals
                            .iter()
                            .filter(|g| g.access == Access::ReadWrite),
                    )
                    .any(|g| g.name == name)
            })
        };
        let (mut output, mut out_names) = (Vec::new(), Vec::new());
        for (i, name) in written {
            if !read_later(i, &name) {
                let (_, v) = pool.iter().find(|(n, _)| *n == name).unwrap();
                output.extend_from_slice(v);
                out_names.push(name);
            }
        }
        Some(Ok((
            Execution {
                output,
                blocks: 0,
                waves_per_block: 0,
                compile_seconds: 0.0,
                run_seconds: 0.0,
                dynamic: None,
            },
            out_names,
        )))
    }
}

fn check(backend: &dyn Backend, a: &NamedArgs, what: &str) {
    check_entry(entry(), backend, a, what, &["dk", "dv", "dq"]);
}

fn check_entry(
    e: &'static kittens_kernels::registry::KernelEntry,
    backend: &dyn Backend,
    a: &NamedArgs,
    what: &str,
    outputs: &[&str],
) {
    let p = e.problem(a).unwrap();
    let r = runner::run(e, p.as_ref(), backend).unwrap_or_else(|e| panic!("{what}: {e}"));
    let names: Vec<&str> = r.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, outputs, "{what}");
    for o in &r.outputs {
        eprintln!(
            "{what} [{}]: {} rel_err {:.3e} (bf16 {:.3e})",
            r.backend,
            o.name,
            o.error.rel_err,
            o.baseline.map_or(f64::NAN, |b| b.rel_err)
        );
    }
    assert!(r.passed, "{what}: {:?}", r.checks);
}

/// The CPU program through the runner (`kittens run attn_varlen_bwd --backend cpu`).
#[test]
fn cpu_program_passes_the_rule() {
    for (causal, heads, seq, dim) in [
        (true, (4, 2), (70, 45), 64),
        (false, (2, 2), (33, 77), 64),
        (true, (2, 1), (50, 50), 128),
    ] {
        let a = args(5, heads, seq, dim).with("causal", causal);
        check(
            &Interpreter,
            &a,
            &format!("cpu H{heads:?} N{seq:?} D{dim} causal {causal}"),
        );
    }
}

/// The sm_90a launches as the registry wires them (stage order, each launch's parameters, the
/// run's inputs by name, the shared `do`, `delta`, `dq_acc`), on the interpreter.
#[test]
fn sm90a_launches_pass_the_rule_on_the_interpreter() {
    for (causal, heads, seq, dim) in [
        (true, (4, 2), (150, 131), 64),
        (false, (2, 1), (129, 70), 64),
        (true, (2, 2), (70, 100), 128),
    ] {
        let a = args(4, heads, seq, dim).with("causal", causal);
        check(
            &Sm90aOnInterpreter,
            &a,
            &format!("sm90a H{heads:?} N{seq:?} D{dim} causal {causal}"),
        );
    }
}

/// Bad sizes are refused by name before anything runs.
#[test]
fn bad_problems_are_refused_by_name() {
    let e = entry().problem(&args(3, (3, 2), (10, 10), 64)).unwrap();
    let err = runner::run(entry(), e.as_ref(), &Interpreter)
        .unwrap_err()
        .to_string();
    assert!(err.contains("heads_kv"), "{err}");
    let e = entry().problem(&args(3, (2, 1), (10, 10), 96)).unwrap();
    let err = runner::run(entry(), e.as_ref(), &Sm90aOnInterpreter)
        .unwrap_err()
        .to_string();
    assert!(err.contains("head dim") && err.contains("96"), "{err}");
    let err = entry()
        .problem(&args(3, (2, 1), (10, 10), 64).with("variant", "seqused_k"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("seqused_k"), "{err}");
}

/// ALiBi (slopes drawn per sequence and head, any sign) in the forward and the backward, on the CPU
/// programs and the sm_90a ones (on the interpreter), at lengths that cross the tiles, with GQA, causal
/// and not; the slopes at scale 0.5 make the bias reach tens over the longer sequences.
#[test]
fn alibi_in_both_directions_passes_the_rule() {
    for (causal, heads, seq, dim) in [
        (true, (4, 2), (150, 131), 64),
        (false, (2, 1), (70, 129), 128),
    ] {
        let a = args(4, heads, seq, dim)
            .with("causal", causal)
            .with("alibi", true)
            .with("input_scale", 0.5f32);
        let what = format!("alibi H{heads:?} N{seq:?} D{dim} causal {causal}");
        check_entry(forward(), &Interpreter, &a, &what, &["o", "lse"]);
        check_entry(forward(), &Sm90aOnInterpreter, &a, &what, &["o", "lse"]);
        check(&Interpreter, &a, &what);
        check(&Sm90aOnInterpreter, &a, &what);
    }
}
