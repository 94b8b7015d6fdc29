//! What the tests of the row-wise kernels with several launches share (`rmsnorm_swiglu.rs`,
//! `layernorm_bwd.rs`): a problem at odd sizes, the stages run on the interpreter, each output judged
//! element by element against the f64 reference.
#![allow(dead_code)]

use kittens_hw::Target;
use kittens_kernels::exec::interpret;
use kittens_kernels::problem::{NamedArgs, Stage};
use kittens_kernels::reference::compare;
use kittens_kernels::{by_name, KernelError};
use rand::rngs::SmallRng;
use rand::SeedableRng;

/// bf16's unit roundoff.
const BF16_STEP: f64 = 1.0 / 256.0;

/// A row-wise kernel's problem at `rows` rows of `dim`, by name (each kernel reads its own).
pub fn problem(rows: usize, dim: usize) -> NamedArgs {
    NamedArgs::new()
        .with("rows", rows)
        .with("norm_dim", dim)
        .with("seed", rows as u64 * 31 + dim as u64)
        .with("input_scale", 4.0f32)
}

/// The error of planning registry kernel `name` at `args` on the CPU (parsing or planning).
pub fn plan_error(name: &str, args: &NamedArgs) -> String {
    match by_name(name).unwrap().problem(args) {
        Ok(p) => p.plan(Target::Cpu).unwrap_err().to_string(),
        Err(e) => e.to_string(),
    }
}

/// Runs the stages on the interpreter, each launch's inputs by name from the tensors before it;
/// returns the outputs no later launch reads (in launch order), and the drawn inputs.
pub fn run_stages(stages: &[Stage], inputs: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>, KernelError> {
    let mut pool: Vec<(String, Vec<f32>, bool)> = stages[0]
        .kernel
        .globals
        .iter()
        .zip(inputs)
        .map(|(g, t)| (g.name.clone(), t, true))
        .collect();
    for st in stages {
        let ins: Vec<Vec<f32>> = st.kernel.globals[..st.launch.inputs.len()]
            .iter()
            .map(|g| {
                let t = pool.iter_mut().rev().find(|t| t.0 == g.name).unwrap();
                t.2 = true;
                t.1.clone()
            })
            .collect();
        let (out, _) = interpret(&st.kernel, &st.launch.params, ins, &st.launch.outputs)?;
        let mut at = 0;
        for (g, &n) in st.kernel.globals[st.launch.inputs.len()..]
            .iter()
            .zip(&st.launch.outputs)
        {
            pool.push((g.name.clone(), out[at..at + n].to_vec(), false));
            at += n;
        }
    }
    Ok(pool.into_iter().filter(|t| !t.2).map(|t| t.1).collect())
}

/// Runs registry kernel `name` at `p` on the interpreter (with the configuration `stages` builds, or
/// the problem's own) and compares each output with the f64 reference.
pub fn check_with(name: &str, args: &NamedArgs, stages: Option<Vec<Stage>>) -> Vec<f64> {
    let p = by_name(name).unwrap().problem(args).unwrap();
    let plan = p
        .plan(Target::Cpu)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let stages = stages.unwrap_or_else(|| p.stages(Target::Cpu, &plan).unwrap());
    let mut rng = SmallRng::seed_from_u64(p.settings().seed);
    let inputs = p.draw(&stages[0].kernel, &plan.launch, &mut rng);
    let outs = run_stages(&stages, inputs.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let reference = p.reference(&inputs).values;
    let size = |n: &str| args.size_or(n, 0).unwrap();
    assert_eq!(outs.len(), plan.launch.outputs.len(), "{name}");
    let mut at = 0;
    let mut errs = Vec::new();
    for (i, (o, &n)) in outs.iter().zip(&plan.launch.outputs).enumerate() {
        assert_eq!(o.len(), n);
        let e = compare(o, &reference[at..at + n]);
        at += n;
        let what = format!(
            "{name} output {i} rows {} dim {}",
            size("rows"),
            size("norm_dim")
        );
        eprintln!("{what}: {e:?}");
        assert!(
            e.rel_err < 1e-2 && e.max_rel < 2.0 * BF16_STEP,
            "{what}: {e:?}"
        );
        assert!(e.rel_err > 0.0, "{what}: bf16 output rounding must show");
        errs.push(e.rel_err);
    }
    errs
}
