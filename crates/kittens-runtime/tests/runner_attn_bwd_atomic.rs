//! `kittens run attn_bwd --dim 256 --backend cuda` (and 192): past head dim 128 the sm_90a backward is
//! FlashAttention-3's atomic form, three launches whose first (D and the zeroed dQ accumulator) reads
//! only O and dO, so the run's inputs reach the launches by name (`KernelProblem::input_names`) and
//! the key blocks read and write the accumulator. This runs the registry's problem through the
//! runner's generic path (`runner::run`: plan, stages, draw, the call, the judgement by the test
//! rule against f64) on a backend that is the CUDA backend's prepared call with the interpreter in
//! place of the GPU: the sm_90a programs, the tensors held by name between launches, outputs
//! poisoned with NaN, the ones no later launch reads returned in launch order (each launch's
//! tensors in the runner's order: its inputs, then its outputs, the accumulator among the key
//! blocks' outputs). The deterministic form (variant `dq`, two launches) past 128 runs the same way.

use kittens_hw::Target;
use kittens_kernels::budget;
use kittens_kernels::problem::{ArgValue, NamedArgs, Stage};
use kittens_kernels::registry;
use kittens_runtime::runner::{self, About, Backend, Execution, Job, RunError};

/// The sm_90a programs on the interpreter as one call, tensors by name (module documentation).
struct Sm90aCallOnInterpreter;

impl Backend for Sm90aCallOnInterpreter {
    fn about(&self) -> About {
        About {
            name: "sm90a-on-interpreter",
            target: Target::Sm90a,
            work: budget::INTERPRETER_WORK,
        }
    }

    fn execute(&self, job: &Job) -> Result<Execution, RunError> {
        let stage = Stage {
            kernel: job.kernel.clone(),
            launch: job.launch.clone(),
        };
        let names: Vec<String> = job.kernel.globals[..job.inputs.len()]
            .iter()
            .map(|g| g.name.clone())
            .collect();
        call(std::slice::from_ref(&stage), &names, job.inputs).map(|(e, _)| e)
    }

    fn execute_call(
        &self,
        stages: &[Stage],
        names: &[String],
        inputs: &[Vec<f32>],
    ) -> Option<Result<(Execution, Vec<String>), RunError>> {
        Some(call(stages, names, inputs))
    }
}

fn call(
    stages: &[Stage],
    names: &[String],
    inputs: &[Vec<f32>],
) -> Result<(Execution, Vec<String>), RunError> {
    let mut pool: Vec<(String, Vec<f32>)> = names.iter().cloned().zip(inputs.to_vec()).collect();
    let mut blocks = 0;
    for st in stages {
        let n_in = st.launch.inputs.len();
        let mut tensors = Vec::new();
        for (i, g) in st.kernel.globals.iter().enumerate() {
            tensors.push(if i < n_in {
                let t = pool.iter().rev().find(|t| t.0 == g.name);
                let t = t.unwrap_or_else(|| panic!("{}: no tensor `{}`", st.kernel.name, g.name));
                assert_eq!(
                    t.1.len(),
                    st.launch.inputs[i],
                    "{} `{}`",
                    st.kernel.name,
                    g.name
                );
                t.1.clone()
            } else {
                // An output the launch also reads (the accumulator) holds what was written before.
                let before = pool.iter().rev().find(|t| t.0 == g.name);
                match before.filter(|_| g.access == kittens_ir::Access::ReadWrite) {
                    Some(t) => t.1.clone(),
                    None => vec![f32::NAN; st.launch.outputs[i - n_in]],
                }
            });
        }
        let stats = kittens_ir::interp::run(&st.kernel, &st.launch.params, &mut tensors)
            .map_err(|e| RunError::CodeObject(format!("{}: {e}", st.kernel.name)))?;
        blocks += stats.blocks;
        // Every tensor the launch may have written, by name (the accumulator read and written).
        for (g, t) in st.kernel.globals.iter().zip(tensors) {
            if g.access != kittens_ir::Access::Read {
                pool.push((g.name.clone(), t));
            }
        }
    }
    let (mut output, mut out_names) = (Vec::new(), Vec::new());
    for (i, st) in stages.iter().enumerate() {
        for g in &st.kernel.globals[st.launch.inputs.len()..] {
            let read_later = stages[i + 1..].iter().any(|l| {
                l.kernel.globals[..l.launch.inputs.len()]
                    .iter()
                    .any(|h| h.name == g.name)
            });
            if !read_later {
                let t = pool.iter().rev().find(|t| t.0 == g.name).expect("written");
                output.extend_from_slice(&t.1);
                out_names.push(g.name.clone());
            }
        }
    }
    let e = Execution {
        output,
        blocks,
        waves_per_block: 0,
        compile_seconds: 0.0,
        run_seconds: 0.0,
        dynamic: None,
    };
    Ok((e, out_names))
}

/// The CLI's problem for `kittens run attn_bwd --dim D ...` (the registry's parser), with `options`
/// (`softcap`, `window`, `alibi`) as the CLI names them.
fn run(
    dim: usize,
    seq: usize,
    seq_kv: usize,
    causal: bool,
    options: &[(&str, ArgValue)],
) -> runner::RunReport {
    let mut args = NamedArgs::new()
        .with("batch", 1usize)
        .with("heads", 2usize)
        .with("heads_kv", 1usize)
        .with("seq", seq)
        .with("seq_kv", seq_kv)
        .with("dim", dim)
        .with("causal", causal)
        .with("bottom_right", causal);
    for (name, v) in options {
        args = args.with(name, v.clone());
    }
    let entry = registry::by_name("attn_bwd").unwrap();
    let p = entry.problem(&args).expect("the problem parses");
    let report = runner::run(entry, p.as_ref(), &Sm90aCallOnInterpreter)
        .unwrap_or_else(|e| panic!("D{dim}: the run is refused: {e}"));
    eprintln!(
        "attn_bwd D{dim} seq {seq}/{seq_kv} causal {causal} softcap {} window {}: kernel {} then \
         {:?}, passed {}, {:?}",
        report.shape["softcap"],
        report.shape["window"],
        report.kernel,
        report.then,
        report.passed,
        report
            .outputs
            .iter()
            .map(|o| (o.name.clone(), o.error.rel_err))
            .collect::<Vec<_>>()
    );
    report
}

/// Head dims 256 (causal bottom-right, queries ≠ keys) and 192, and 256 with a soft cap, a window and
/// ALiBi at once: three launches, dQ, dK and dV each judged by the rule.
#[test]
fn atomic_backward_past_head_dim_128_runs_as_a_registry_run() {
    let options = [
        ("softcap", ArgValue::from(20.0f64)),
        ("window", ArgValue::from("30,0")),
        ("alibi", ArgValue::from(true)),
    ];
    for (dim, seq, seq_kv, causal, options) in [
        (256, 70, 83, true, &[][..]),
        (192, 65, 40, false, &[][..]),
        (256, 50, 97, true, &options[..]),
    ] {
        let r = run(dim, seq, seq_kv, causal, options);
        assert!(
            r.kernel.contains("pre") && r.then.len() == 2,
            "D{dim}: the atomic form's three launches, got {} then {:?}",
            r.kernel,
            r.then
        );
        let names: Vec<&str> = r.outputs.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(
            names.len(),
            3,
            "D{dim}: dQ, dK and dV judged, got {names:?}"
        );
        for o in &r.outputs {
            assert!(o.passed, "D{dim}: {} fails the rule: {:?}", o.name, o.error);
        }
        assert!(r.passed, "D{dim}: {:?}", r.checks);
    }
}

/// The deterministic two-launch form (variant `dq`: the query blocks write dQ and D, then
/// `hopper::wide`'s key blocks dK and dV, no atomics) past head dim 128: the query blocks stream 64
/// keys per step at 192 and 32 at 256 (their ring beside Q and dO in shared memory). 256 causal
/// bottom-right with queries ≠ keys, 192 with every option: two launches, each gradient judged by
/// the rule.
#[test]
fn deterministic_backward_past_head_dim_128_runs_as_a_registry_run() {
    let options = [
        ("variant", ArgValue::from("dq")),
        ("softcap", ArgValue::from(20.0f64)),
        ("window", ArgValue::from("30,0")),
        ("alibi", ArgValue::from(true)),
    ];
    for (dim, seq, seq_kv, causal, options) in [
        (256, 70, 83, true, &options[..1]),
        (192, 97, 50, true, &options[..]),
        (192, 65, 40, false, &options[..1]),
    ] {
        let r = run(dim, seq, seq_kv, causal, options);
        assert!(
            r.kernel.contains("dq") && r.then.len() == 1,
            "D{dim}: the query blocks then the key blocks, got {} then {:?}",
            r.kernel,
            r.then
        );
        assert_eq!(r.outputs.len(), 3, "D{dim}: dQ, dK and dV judged");
        for o in &r.outputs {
            assert!(o.passed, "D{dim}: {} fails the rule: {:?}", o.name, o.error);
        }
        assert!(r.passed, "D{dim}: {:?}", r.checks);
    }
}
