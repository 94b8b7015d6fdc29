//! Running a kernel on the CPU interpreter on given inputs and returning its output: [`interpret`] is
//! the interpreter backend of the runner (`kittens_runtime::runner`), and [`gemm_abt`] / [`attention`]
//! are the Python package's CPU path on the caller's own inputs, laid out by the kernels' problem
//! definitions (`crate::problem::KernelProblem::launch`); [`attention_bwd`] is the backward's.
//!
//! Inputs are f32 values that are already bf16 (the interpreter rounds every input to its dtype anyway;
//! bf16 values pass unchanged), laid out as the kernel's globals declare them. The output is bf16-exact
//! f32. Sizes are checked, with checked arithmetic, before anything is built or allocated.

use crate::attn::{AttnArgs, AttnOptions, AttnShape, BwdShape, Causal};
use crate::attn_bwd::problem::BwdProblem;
use crate::attn_fwd::{problem::AttnProblem, AttnConfig};
use crate::gemm::problem::{GemmKind, GemmProblem};
use crate::gemm::{ALayout, BLayout, GemmConfig, GemmSchedule, LeadingDims};
use crate::problem::{KernelProblem, Launch};
use crate::KernelError;
use kittens_hw::Target;
use kittens_ir::interp::{self, RunStats};
use kittens_ir::Kernel;

/// Runs `kernel` with `params` on the interpreter: `inputs` are its input tensors in declaration order,
/// followed by outputs of `outputs` elements each, poisoned with NaN so that an element the kernel
/// does not write shows in any comparison. The interpreter refuses a write to a read-only tensor.
/// Returns the outputs concatenated in declaration order and the run's counts.
pub fn interpret(
    kernel: &Kernel,
    params: &[i64],
    inputs: Vec<Vec<f32>>,
    outputs: &[usize],
) -> Result<(Vec<f32>, RunStats), KernelError> {
    let n_in = inputs.len();
    let mut t = inputs;
    t.extend(outputs.iter().map(|&n| vec![f32::NAN; n]));
    let stats = interp::run(kernel, params, &mut t)?;
    Ok((t.split_off(n_in).concat(), stats))
}

fn check_len(name: &str, got: usize, want: usize) -> Result<(), KernelError> {
    if got == want {
        Ok(())
    } else {
        Err(KernelError::Config(format!(
            "{name} holds {got} elements, the problem needs {want}"
        )))
    }
}

/// The caller's tensors, named for messages, against the sizes `launch` needs.
fn check_lens(launch: &Launch, inputs: &[(&str, &[f32])]) -> Result<(), KernelError> {
    for ((name, t), &want) in inputs.iter().zip(&launch.inputs) {
        check_len(name, t.len(), want)?;
    }
    Ok(())
}

/// The CLI's limits for a run of `p` (`KernelProblem::plan` on the CPU: sizes, host bytes, and
/// [`crate::budget::INTERPRETER_WORK`]), so that a call on the caller's arrays is refused where
/// `kittens run` would be instead of running for hours. Empty problems are answered before this.
fn within_budget(p: &dyn KernelProblem) -> Result<(), KernelError> {
    let plan = p.plan(Target::Cpu)?;
    crate::budget::check_work(&plan.what, plan.work, crate::budget::INTERPRETER_WORK)
}

/// Runs `p`'s kernel on the interpreter on the caller's (checked) tensors.
fn run_on(
    p: &dyn KernelProblem,
    launch: Launch,
    inputs: &[(&str, &[f32])],
) -> Result<Vec<f32>, KernelError> {
    run_kernel(&p.build(Target::Cpu)?, &launch, inputs)
}

/// Runs a built kernel on the interpreter on the caller's (checked) tensors.
fn run_kernel(
    kernel: &Kernel,
    launch: &Launch,
    inputs: &[(&str, &[f32])],
) -> Result<Vec<f32>, KernelError> {
    let tensors = inputs.iter().map(|(_, t)| t.to_vec()).collect();
    Ok(interpret(kernel, &launch.params, tensors, &launch.outputs)?.0)
}

/// What every call on the caller's tensors does, in this order: their lengths checked against
/// `p`'s launch, an empty output answered without running (`None`), the run budget, then `kernel`
/// (`p`'s own build when `None`) on the interpreter. Returns the outputs concatenated.
fn call(
    p: &dyn KernelProblem,
    kernel: Option<&Kernel>,
    inputs: &[(&str, &[f32])],
) -> Result<Option<Vec<f32>>, KernelError> {
    let launch = p.launch()?;
    check_lens(&launch, inputs)?;
    if launch.output_len() == 0 {
        return Ok(None);
    }
    within_budget(p)?;
    match kernel {
        Some(k) => run_kernel(k, &launch, inputs),
        None => run_on(p, launch, inputs),
    }
    .map(Some)
}

/// How the operands of [`gemm_stored`] are stored: A `M × K` or `K × M`, B `N × K` or `K × N`, each
/// row-major with its rows `ld` elements apart (`ld: None`: dense rows); C is written dense.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GemmOperands {
    pub a_layout: ALayout,
    pub b_layout: BLayout,
    /// Leading dimensions of A and B (C's is N).
    pub ld: Option<[usize; 2]>,
}

/// The GEMM problem [`gemm_stored`] runs: dense `A·Bᵀ` on the seed's tiles and schedule; any other
/// layout on the Hopper producer/consumer program with 128×128 blocks, which reads each in place.
fn gemm_problem(m: usize, n: usize, k: usize, ops: &GemmOperands) -> GemmProblem {
    let plain = ops.a_layout == ALayout::Mk && ops.b_layout == BLayout::Nk && ops.ld.is_none();
    let gemm = if plain {
        GemmConfig::default()
    } else {
        GemmConfig {
            schedule: GemmSchedule::ProducerConsumer,
            block: 128,
            block_rows: 128,
            a_layout: ops.a_layout,
            b_layout: ops.b_layout,
            ..GemmConfig::default()
        }
    };
    GemmProblem {
        gemm,
        ld: ops.ld.map(|[a, b]| LeadingDims { a, b, c: n }),
        ..GemmProblem::new(GemmKind::Bf16, m, n, k)
    }
}

/// Whether [`gemm_stored`] at these sizes is within the run budget (and its leading dimensions cover
/// the stored rows), checked before the caller reads its arrays (an empty problem always is).
pub fn gemm_budget(m: usize, n: usize, k: usize, ops: &GemmOperands) -> Result<(), KernelError> {
    let p = gemm_problem(m, n, k, ops);
    if p.launch()?.output_len() == 0 || k == 0 {
        return Ok(());
    }
    within_budget(&p)
}

/// Elements A and B span as `ops` stores them (what [`gemm_stored`] takes).
pub fn gemm_spans(
    m: usize,
    n: usize,
    k: usize,
    ops: &GemmOperands,
) -> Result<[usize; 2], KernelError> {
    let launch = gemm_problem(m, n, k, ops).launch()?;
    Ok([launch.inputs[0], launch.inputs[1]])
}

/// `C = A·Bᵀ` through `gemm_bf16` (HipKittens Appendix E.1 tiles, the ping-pong schedule): A is
/// `m × k`, B is `n × k`, both row-major; returns C, `m × n` row-major. `k = 0` gives zeros without
/// running the kernel (an empty sum); `m = 0` or `n = 0` an empty C.
pub fn gemm_abt(
    a: &[f32],
    b: &[f32],
    m: usize,
    n: usize,
    k: usize,
) -> Result<Vec<f32>, KernelError> {
    gemm_stored(a, b, (m, n, k), &GemmOperands::default())
}

/// `C = A·B` through `gemm_bf16` with B stored `k × n` row-major (`BLayout::Kn`: the Hopper
/// producer/consumer program, 128×128 blocks, reads it in place): A is `m × k`; returns C, `m × n`
/// row-major. Empty problems as in [`gemm_abt`].
pub fn gemm_ab(
    a: &[f32],
    b: &[f32],
    m: usize,
    n: usize,
    k: usize,
) -> Result<Vec<f32>, KernelError> {
    let ops = GemmOperands {
        b_layout: BLayout::Kn,
        ..GemmOperands::default()
    };
    gemm_stored(a, b, (m, n, k), &ops)
}

/// The `m × n` product of A and B stored as `ops` says (each read in place by the kernel: transposed
/// operands and leading dimensions are the kernel's own, [`GemmOperands`]); `a` and `b` hold the
/// elements each spans ([`gemm_spans`]). Returns C dense, `m × n` row-major. Empty problems as in
/// [`gemm_abt`].
pub fn gemm_stored(
    a: &[f32],
    b: &[f32],
    (m, n, k): (usize, usize, usize),
    ops: &GemmOperands,
) -> Result<Vec<f32>, KernelError> {
    let p = gemm_problem(m, n, k, ops);
    let launch = p.launch()?;
    let empty = launch.output_len() == 0 || k == 0;
    if !empty {
        within_budget(&p)?;
    }
    let inputs = [("A", a), ("B", b)];
    check_lens(&launch, &inputs)?;
    if empty {
        return Ok(vec![0.0; m * n]);
    }
    run_on(&p, launch, &inputs)
}

/// Head dimensions `attention` accepts: `attn_fwd` tiles the head dimension in 32-column steps, and 256
/// bounds the register tiles (`q_rows × dim` f32 per wave) to what the kernel was sized for.
pub const ATTN_DIMS: std::ops::RangeInclusive<usize> = 32..=256;

/// `softmax(Q·Kᵀ/√d)·V` through `attn_fwd` (HipKittens Appendix E.3 tiles): Q and the returned O hold
/// `sh.heads` heads, K and V `sh.heads_kv`, all dense in `sh.layout`. The softmax scale is the
/// kernel's fixed `1/√d`.
pub fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    sh: &AttnShape,
    causal: bool,
) -> Result<Vec<f32>, KernelError> {
    let sh = AttnArgs {
        attn: *sh,
        ..Default::default()
    }
    .bwd_shape();
    let causal = if causal { Causal::TopLeft } else { Causal::No };
    Ok(attention_lse(q, k, v, &sh, causal, false)?.0)
}

/// The problem [`attention_lse_with`] runs: the call's arguments with the forward's tiles.
fn attn_problem(sh: &BwdShape, causal: Causal, lse: bool, opts: &AttnOptions) -> AttnProblem {
    AttnProblem {
        lse,
        attn_cfg: AttnConfig::default(),
        ..AttnProblem::with(AttnArgs::of(sh, causal, opts))
    }
}

/// Refuses a head dimension `kernel` does not take ([`ATTN_DIMS`], multiples of 32), naming it.
fn check_head_dim(dim: usize, kernel: &str) -> Result<(), KernelError> {
    if ATTN_DIMS.contains(&dim) && dim.is_multiple_of(32) {
        return Ok(());
    }
    Err(KernelError::Config(format!(
        "head dimension {dim} is not supported: {kernel} takes multiples of 32 from {} to {}",
        ATTN_DIMS.start(),
        ATTN_DIMS.end()
    )))
}

/// Whether [`attention_lse`] at `sh` is within the run budget, checked before the caller reads its
/// arrays (an empty problem always is).
pub fn attention_budget(sh: &BwdShape, causal: Causal, lse: bool) -> Result<(), KernelError> {
    let p = attn_problem(sh, causal, lse, &AttnOptions::default());
    if p.launch()?.output_len() == 0 || sh.seq_kv == 0 {
        return Ok(());
    }
    within_budget(&p)
}

/// [`attention`] at `sh.seq_q` queries and `sh.seq_kv` keys with either causal alignment, and with
/// `lse` also the log-sum-exp (f32 `[batch, heads, seq_q]`, natural-log units of the scaled logits,
/// `−∞` for a row that keeps no key, whose output row is 0).
pub fn attention_lse(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    sh: &BwdShape,
    causal: Causal,
    lse: bool,
) -> Result<(Vec<f32>, Option<Vec<f32>>), KernelError> {
    attention_lse_with(q, k, v, sh, causal, lse, &AttnOptions::default())
}

/// [`attention_lse`] with the options `opts`: any softmax scale, a soft cap, a sliding window
/// (`crate::attn::score`; refused with an error naming `scale`, `softcap` or `window` when out of
/// range).
pub fn attention_lse_with(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    sh: &BwdShape,
    causal: Causal,
    lse: bool,
    opts: &AttnOptions,
) -> Result<(Vec<f32>, Option<Vec<f32>>), KernelError> {
    attention_call(&attn_problem(sh, causal, lse, opts), [q, k, v], opts)
}

/// [`attention_lse_with`] or [`attention_strided`] of `p` on the tensors Q, K, V: O (its span, 0
/// between strided elements) and, with `p.lse`, the log-sum-exp. `opts`: the call's options, whose
/// ALiBi slopes (checked here, then an input after V) `p` only flags.
fn attention_call(
    p: &AttnProblem,
    [q, k, v]: [&[f32]; 3],
    opts: &AttnOptions,
) -> Result<(Vec<f32>, Option<Vec<f32>>), KernelError> {
    let sh = p.args.bwd_shape();
    check_head_dim(sh.dim, "attn_fwd")?;
    opts.check()?;
    let launch = p.launch()?;
    let o_len = launch.outputs[0];
    let mut inputs = vec![("Q", q), ("K", k), ("V", v)];
    inputs.extend(opts.alibi.as_deref().map(|s| ("alibi_slopes", s)));
    let no_queries = sh.batch * sh.heads * sh.seq_q * sh.dim == 0;
    if no_queries || sh.seq_kv == 0 {
        check_lens(&launch, &inputs)?;
        if no_queries {
            return Ok((vec![0.0; o_len], p.lse.then(Vec::new)));
        }
        return Err(KernelError::Problem(format!(
            "attention of {} queries over no keys (the softmax of an empty row is undefined)",
            sh.seq_q
        )));
    }
    let mut all = call(p, None, &inputs)?.unwrap_or_default();
    let rest = all.split_off(o_len.min(all.len()));
    Ok((all, p.lse.then_some(rest)))
}

/// [`attention_lse_with`] on strided tensors (`crate::attn::strides`): `q`, `k`, `v` are the spans of
/// tensors of strides `st.q`, `st.k`, `st.v` (first element to last), read in place by the strided
/// program; returns O's span (its elements at strides `st.o`, 0 between them) and the log-sum-exp
/// (f32 `[b, h, s]`, contiguous).
#[allow(clippy::too_many_arguments)]
pub fn attention_strided(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    sh: &BwdShape,
    st: &crate::attn::strides::AttnStrides,
    causal: Causal,
    lse: bool,
    opts: &AttnOptions,
) -> Result<(Vec<f32>, Option<Vec<f32>>), KernelError> {
    let p = AttnProblem {
        attn_strides: Some(*st),
        ..attn_problem(sh, causal, lse, opts)
    };
    attention_call(&p, [q, k, v], opts)
}

/// `LayerNorm(residual + dropout(x))·weight + bias` through `layernorm` (`crate::layernorm`): `x` and
/// `residual` are `rows × dim` row-major, `weight` and `bias` `dim`; returns `[out; new residual]`
/// (`2 × rows × dim`). Dropout with `norm.p` keyed by `norm.dropout_seed` and `norm.offset`.
pub fn layernorm(
    x: &[f32],
    residual: &[f32],
    weight: &[f32],
    bias: &[f32],
    norm: &crate::rows::NormShape,
    eps: f32,
) -> Result<Vec<f32>, KernelError> {
    use crate::layernorm::{problem::LayerNormProblem, LayerNormConfig};
    let p = LayerNormProblem {
        norm: *norm,
        ..LayerNormProblem::default()
    };
    let dim = u32::try_from(norm.dim).unwrap_or(u32::MAX);
    let kernel = crate::layernorm::build(&LayerNormConfig {
        eps,
        ..LayerNormConfig::new(dim, norm.p, 32)
    })?;
    let inputs = [
        ("x", x),
        ("residual", residual),
        ("weight", weight),
        ("bias", bias),
    ];
    Ok(call(&p, Some(&kernel), &inputs)?.unwrap_or_default())
}

/// Rotary embedding through `rotary` (`crate::rotary`): `x` of shape `sh` in its layout, tables `cos`
/// and `sin` of `[seq, dim/2]`; returns the rotated tensor in `x`'s layout.
pub fn rotary(
    x: &[f32],
    cos: &[f32],
    sin: &[f32],
    sh: &AttnShape,
    interleaved: bool,
) -> Result<Vec<f32>, KernelError> {
    use crate::rotary::problem::RotaryProblem;
    let p = RotaryProblem {
        attn: *sh,
        interleaved,
        ..RotaryProblem::default()
    };
    let inputs = [("x", x), ("cos", cos), ("sin", sin)];
    Ok(call(&p, None, &inputs)?.unwrap_or_default())
}

/// The tensors of an attention backward call (dense [`attention_bwd`], packed
/// `crate::exec_varlen::backward`): Q, K, V, the forward's O and log-sum-exp, and the output
/// gradient dO, each as the call's layout gives it.
#[derive(Debug, Clone, Copy)]
pub struct BwdTensors<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub o: &'a [f32],
    pub d_o: &'a [f32],
    /// f32, natural-log units of the scaled logits, `+∞` for a row with no kept key.
    pub lse: &'a [f32],
}

impl<'a> BwdTensors<'a> {
    /// From the six in call order, `[q, k, v, o, do, lse]` (the order of [`Self::all`]).
    pub fn new([q, k, v, o, d_o, lse]: [&'a [f32]; 6]) -> Self {
        BwdTensors {
            q,
            k,
            v,
            o,
            d_o,
            lse,
        }
    }

    /// The six in call order, `q, k, v, o, do, lse`.
    pub fn all(&self) -> [&'a [f32]; 6] {
        [self.q, self.k, self.v, self.o, self.d_o, self.lse]
    }
}

/// The gradients of [`attention`] through `attn_bwd`: from `t` (the forward's log-sum-exp f32
/// `[batch, heads, seq_q]`), all dense in `sh.layout`; returns dQ, dK, dV (dK and dV summed over
/// each KV head's query heads). The softmax scale is the kernel's fixed `1/√d`.
pub fn attention_bwd(
    t: BwdTensors,
    sh: &BwdShape,
    causal: Causal,
) -> Result<[Vec<f32>; 3], KernelError> {
    attention_bwd_with(t, sh, causal, &AttnOptions::default())
}

/// [`attention_bwd`] with the options `opts` (as the forward that gave `o` and `lse` had them).
pub fn attention_bwd_with(
    t: BwdTensors,
    sh: &BwdShape,
    causal: Causal,
    opts: &AttnOptions,
) -> Result<[Vec<f32>; 3], KernelError> {
    attention_bwd_dlse(t, None, sh, causal, opts)
}

/// [`attention_bwd_with`] with the log-sum-exp's gradient `dlse` (f32 `[b, h, s_q]`; `None`: the
/// program without it) folded into the one run's preprocessing (`BwdConfig::dlse`).
pub fn attention_bwd_dlse(
    t: BwdTensors,
    dlse: Option<&[f32]>,
    sh: &BwdShape,
    causal: Causal,
    opts: &AttnOptions,
) -> Result<[Vec<f32>; 3], KernelError> {
    check_head_dim(sh.dim, "attn_bwd")?;
    let p = BwdProblem {
        dlse: dlse.is_some(),
        ..BwdProblem::with(AttnArgs::of(sh, causal, opts))
    };
    opts.check()?;
    let lens = p.launch()?.outputs;
    let mut inputs: Vec<(&str, &[f32])> = ["Q", "K", "V", "O", "dO", "lse"]
        .into_iter()
        .zip(t.all())
        .collect();
    inputs.extend(dlse.map(|d| ("dlse", d)));
    inputs.extend(opts.alibi.as_deref().map(|s| ("alibi_slopes", s)));
    let all = call(&p, None, &inputs)?.unwrap_or_default();
    let (dq, rest) = all.split_at(lens[0].min(all.len()));
    let (dk, dv) = rest.split_at(lens[1].min(rest.len()));
    Ok([dq.to_vec(), dk.to_vec(), dv.to_vec()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attn::AttnLayout;
    use crate::problem::random;
    use crate::reference::{self, compare};
    use kittens_hw::dtype::DType;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn gemm_matches_f64_at_odd_sizes() {
        let mut rng = SmallRng::seed_from_u64(7);
        let (m, n, k) = (37, 70, 45);
        let a = random(&mut rng, m * k, DType::Bf16);
        let b = random(&mut rng, n * k, DType::Bf16);
        let c = gemm_abt(&a, &b, m, n, k).unwrap();
        let e = compare(&c, &reference::gemm_abt(&a, &b, m, n, k));
        assert!(e.rel_err < 1e-2, "{e:?}");
        // bf16 outputs: every value is representable in bf16.
        assert!(c.iter().all(|x| x.to_bits() & 0xffff == 0));
    }

    /// The caller-input path takes the CLI's work budget: 4096³ (2^36 multiply-adds) is refused at
    /// once, naming the limit, instead of running for many minutes; 16384³ also by its host memory.
    #[test]
    fn gemm_over_the_work_budget_is_refused_before_anything_runs() {
        let n = 4096;
        let kn = GemmOperands {
            b_layout: BLayout::Kn,
            ..GemmOperands::default()
        };
        for e in [
            gemm_abt(&[], &[], n, n, n).map(|_| ()),
            gemm_ab(&[], &[], n, n, n).map(|_| ()),
            gemm_budget(n, n, n, &GemmOperands::default()),
            gemm_budget(n, n, n, &kn),
        ] {
            let e = e.unwrap_err();
            assert!(matches!(e, KernelError::OverBudget { .. }), "{e}");
            assert!(e.to_string().contains("(2^34"), "{e}");
        }
        let e = gemm_budget(16384, 16384, 16384, &GemmOperands::default()).unwrap_err();
        assert!(e.to_string().contains("4.0 GiB"), "{e}");
        assert!(gemm_budget(256, 256, 256, &GemmOperands::default()).is_ok());
        assert!(
            gemm_budget(0, 1 << 20, 1 << 20, &GemmOperands::default()).is_ok(),
            "empty"
        );
    }

    #[test]
    fn gemm_empty_sum_is_zero_and_lengths_are_checked() {
        assert_eq!(gemm_abt(&[], &[], 2, 3, 0).unwrap(), vec![0.0; 6]);
        assert!(gemm_abt(&[], &[], 0, 3, 4).unwrap_or_default().is_empty());
        let err = gemm_abt(&[1.0; 5], &[1.0; 6], 2, 3, 2).unwrap_err();
        assert!(err.to_string().contains("A holds 5"), "{err}");
        assert!(gemm_abt(&[], &[], usize::MAX, 3, 2).is_err());
    }

    #[test]
    fn attention_matches_f64_gqa_causal_both_layouts() {
        let mut rng = SmallRng::seed_from_u64(11);
        for (layout, causal) in [(AttnLayout::Bshd, true), (AttnLayout::Bhsd, false)] {
            let sh = AttnShape {
                batch: 2,
                heads: 4,
                heads_kv: 2,
                seq: 45,
                dim: 64,
                layout,
            };
            let q = random(&mut rng, sh.len(sh.heads), DType::Bf16);
            let k = random(&mut rng, sh.len(sh.heads_kv), DType::Bf16);
            let v = random(&mut rng, sh.len(sh.heads_kv), DType::Bf16);
            let o = attention(&q, &k, &v, &sh, causal).unwrap();
            let e = compare(&o, &reference::attention(&q, &k, &v, &sh, causal));
            assert!(e.rel_err < 1e-2, "{layout:?} causal={causal}: {e:?}");
        }
    }

    /// The backward on the caller's tensors equals the f64 gradients to bf16 accuracy, with O and
    /// the log-sum-exp of the f64 forward; lengths are checked.
    #[test]
    fn attention_bwd_matches_f64_and_checks_lengths() {
        use crate::reference_bwd;
        let mut rng = SmallRng::seed_from_u64(5);
        let sh = BwdShape {
            batch: 1,
            heads: 2,
            heads_kv: 1,
            seq_q: 23,
            seq_kv: 41,
            dim: 64,
            layout: AttnLayout::Bhsd,
        };
        let c = Causal::BottomRight;
        let q = random(&mut rng, sh.q_len(), DType::Bf16);
        let k = random(&mut rng, sh.kv_len(), DType::Bf16);
        let v = random(&mut rng, sh.kv_len(), DType::Bf16);
        let d_o = random(&mut rng, sh.q_len(), DType::Bf16);
        let f = reference_bwd::forward(&q, &k, &v, &sh, c);
        let bf = |x: f64| {
            kittens_ir::numerics::round(x as f32, DType::Bf16, kittens_ir::numerics::Rounding::Rtne)
        };
        let o: Vec<f32> = f.o.iter().map(|&x| bf(x)).collect();
        let lse: Vec<f32> = f.lse.iter().map(|&x| x as f32).collect();
        let t = BwdTensors::new([&q, &k, &v, &o, &d_o, &lse]);
        let got = attention_bwd(t, &sh, c).unwrap();
        let want = reference_bwd::backward(&q, &k, &v, &d_o, &sh, c);
        for (g, w) in got.iter().zip([&want.dq, &want.dk, &want.dv]) {
            let e = compare(g, w);
            assert!(e.rel_err > 0.0 && e.rel_err < 1e-2, "{e:?}");
        }
        let short = BwdTensors {
            lse: &lse[1..],
            ..t
        };
        let err = attention_bwd(short, &sh, c).unwrap_err();
        assert!(err.to_string().contains("lse holds 45"), "{err}");
    }

    #[test]
    fn attention_refuses_unsupported_head_dims_and_groups() {
        let sh = AttnShape {
            batch: 1,
            heads: 3,
            heads_kv: 2,
            seq: 4,
            dim: 64,
            layout: AttnLayout::Bhsd,
        };
        let err = attention(&[], &[], &[], &sh, false).unwrap_err();
        assert!(err.to_string().contains("GQA"), "{err}");
        let sh = AttnShape { dim: 48, ..sh };
        let err = attention(&[], &[], &[], &sh, false).unwrap_err();
        assert!(err.to_string().contains("head dimension 48"), "{err}");
    }
}
