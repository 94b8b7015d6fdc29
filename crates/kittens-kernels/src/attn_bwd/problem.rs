//! `attn_bwd` at a problem's sizes: parameters `batch, heads, heads_kv, seq_q, seq_kv`; inputs Q, K,
//! V, O, dO (bf16, the problem's layout) and the log-sum-exp (f32 `[b, h, s_q]`); outputs dQ, dK, dV.
//! O and the log-sum-exp are the exact forward's at the drawn Q, K, V (O rounded to bf16, the
//! log-sum-exp to f32: what a forward hands its backward), so the backward is judged on consistent
//! inputs; each gradient is judged separately by the test rule against the PyTorch-style bf16
//! backward (`crate::reference_bwd`).

use super::{build, BwdBlocks, BwdConfig};
use crate::attn::strides::{self, AttnStrides};
use crate::attn::AttnArgs;
use crate::budget;
use crate::problem::{
    elements, param, positive, random_scaled, round_up, KernelProblem, Launch, NamedArgs, Plan,
    Reference, RunSettings, Stage, STORE_BYTES,
};
use crate::reference::Tolerance;
use crate::reference_bwd;
use crate::KernelError;
use kittens_hw::dtype::DType;
use kittens_hw::Target;
use kittens_ir::numerics::{round, Rounding};
use kittens_ir::Kernel;
use rand::rngs::SmallRng;

/// Every parameter a launch of `p` may take, by name: the sizes (`l.params`' first five) and, for a
/// strided problem, each tensor's strides.
fn named_values(p: &BwdProblem, l: &Launch) -> Result<Vec<(String, i64)>, KernelError> {
    let mut values: Vec<(String, i64)> = ["batch", "heads", "heads_kv", "seq_q", "seq_kv"]
        .into_iter()
        .map(String::from)
        .zip(l.params.iter().copied())
        .collect();
    if let Some(st) = &p.attn_strides {
        values.extend(st.params()?);
    }
    Ok(values)
}

/// An `attn_bwd` problem: the attention's shape, keys, mask, logits and window ([`AttnArgs`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BwdProblem {
    /// The attention's shape, keys, mask, logits and window.
    pub args: AttnArgs,
    pub run: RunSettings,
    /// Each tensor's own `[b, h, s]` strides (`crate::attn::strides`); `None`: dense in `attn.layout`.
    pub attn_strides: Option<AttnStrides>,
    /// The forward's log-sum-exp had a gradient of its own: an f32 input `dlse [b, h, s_q]` after
    /// `lse`, folded into the preprocessing ([`super::BwdConfig::dlse`]).
    pub dlse: bool,
}

impl BwdProblem {
    /// The problem of `a`'s shape and mask, with the default run settings.
    pub fn with(a: AttnArgs) -> BwdProblem {
        BwdProblem {
            args: a,
            run: RunSettings::default(),
            attn_strides: None,
            dlse: false,
        }
    }

    /// The problem `a` names: the attention's ([`AttnArgs::from_args`]) and the run settings.
    pub fn from_args(a: &NamedArgs) -> Result<BwdProblem, KernelError> {
        Ok(BwdProblem {
            run: RunSettings::from_args(a, &[INTERLEAVE4, PINGPONG8, DQ, ATOMIC])?,
            attn_strides: AttnStrides::from_args(a)?,
            dlse: a.flag_or("dlse", false)?,
            ..BwdProblem::with(AttnArgs::from_args(a)?)
        })
    }
}

/// The registry's parser of `attn_bwd`'s problem.
pub fn parse(a: &NamedArgs) -> Result<Box<dyn KernelProblem>, KernelError> {
    Ok(Box::new(BwdProblem::from_args(a)?))
}

/// The inputs after the log-sum-exp of the run's launch `l`: the lse's gradient and the ALiBi
/// slopes, each empty when `p` has none.
fn extra_inputs<'a>(p: &BwdProblem, l: &'a Launch) -> (&'a [usize], &'a [usize]) {
    let rest = &l.inputs[6..];
    rest.split_at(usize::from(p.dlse).min(rest.len()))
}

/// The 4-wave interleave of the key blocks (`BwdConfig::interleave4`).
pub const INTERLEAVE4: &str = "interleave4";
/// The 8-wave ping-pong of the key blocks (`BwdConfig::pingpong8`).
pub const PINGPONG8: &str = "pingpong8";
/// The Hopper backward's query-block launch.
pub const DQ: &str = "dq";
/// The key blocks of the Hopper backward's atomic form (dQ added into an f32 accumulator).
pub const ATOMIC: &str = "atomic";

/// `base`, a GPU's configuration, turned into its variant `name`.
pub fn variant(base: BwdConfig, name: &str) -> Result<BwdConfig, KernelError> {
    match name {
        INTERLEAVE4 => Ok(BwdConfig::interleave4(base)),
        PINGPONG8 => Ok(BwdConfig::pingpong8(base)),
        DQ => Ok(BwdConfig {
            schedule: super::BwdSchedule::HopperQ,
            ..base
        }),
        ATOMIC => Ok(BwdConfig {
            schedule: super::BwdSchedule::HopperAtomicKv,
            ..base
        }),
        other => Err(KernelError::Config(format!(
            "attn_bwd: no variant `{other}`; variants: {INTERLEAVE4}, {PINGPONG8}, {DQ}, {ATOMIC}"
        ))),
    }
}

/// Tensors in their own strides on CDNA: the query blocks and the key blocks as two launches
/// ([`BwdConfig::blocks`] says why).
fn split_blocks(p: &BwdProblem, target: Target) -> bool {
    p.attn_strides.is_some() && target.gpu().is_some_and(|g| g.arch.is_amd())
}

/// The query blocks' launch of a strided CDNA backward ([`split_blocks`]) whose key blocks run `cfg`:
/// `cfg` itself, except gfx942's 8-wave ping-pong at head dims past 64, whose query launch is the
/// 4-wave interleave's (the default there): the ping-pong is a schedule of the key blocks' loop
/// (HipKittens §3.3.2), and two waves per SIMD leave the query blocks 256 registers per lane, which
/// clang 22 outgrows at head dim 128 (gfx942's 16x16x16 MFMAs and `ds_read_u16` column reads hold
/// more lane addresses than gfx950's: 22-24 VGPRs spilled); one wave per SIMD takes it in 256 VGPRs
/// and a few AGPRs, no spills (`tests/attn_strides.rs` in kittens-runtime).
fn query_launch(cfg: BwdConfig, target: Target) -> BwdConfig {
    let queries = BwdConfig {
        blocks: BwdBlocks::Queries,
        ..cfg
    };
    if target == Target::Gfx942 && cfg.schedule == super::BwdSchedule::PingPong8 && cfg.dim > 64 {
        BwdConfig::interleave4(queries)
    } else {
        queries
    }
}

/// The configuration a run builds: the target GPU's tiles (the defaults on the CPU), or the
/// variant `p.run.variant` names of them, with `p`'s head dimension, mask and layout.
fn config(p: &BwdProblem, target: Target) -> Result<BwdConfig, KernelError> {
    // The CDNA program's head dims (amd_attn_bwd_head_dims.rs in kittens-runtime): its three rings
    // of 32-row steps outgrow gfx942's 64 KiB of LDS past 128 (72 KiB at 192), and at 256 gfx950's
    // compiler spills 96 VGPRs (dK, dV, K and V of 16 keys per wave take 192 of the 256 per lane).
    let amd_limit = match target {
        Target::Gfx942 => Some((
            128,
            "its rings need 72 KiB of LDS at 192, gfx942 has 64 KiB",
        )),
        Target::Gfx950 => Some((
            192,
            "at 256 the compiler spills 96 VGPRs of the 256 per lane",
        )),
        _ => None,
    };
    if let Some((max, why)) = amd_limit.filter(|(max, _)| p.args.attn.dim > *max) {
        return Err(KernelError::NotForTarget {
            kernel: "attn_bwd",
            target,
            why: format!("head dim {} past {max}: {why}", p.args.attn.dim),
        });
    }
    let tiles = match target.gpu() {
        Some(gpu) => BwdConfig::for_gpu(gpu),
        None => BwdConfig::default(),
    };
    let dim = u32::try_from(p.args.attn.dim).unwrap_or(u32::MAX);
    // Hopper key blocks at head dims up to 64: 128-query steps (`hopper::kv_pair`), which measured
    // faster than 64 in both forms (docs/performance.md, "attn_bwd").
    let tiles = tuned(BwdConfig {
        hopper_step: if dim <= 64 { 128 } else { tiles.hopper_step },
        ..tiles
    })?;
    let tiles = match p.run.variant {
        Some(v) => variant(tiles, v)?,
        // gfx942's plain program at head dim 64 with a soft cap, a window and a causal mask at once
        // needs 256 VGPRs + 2 AGPRs and spills 13 SGPRs into VGPR lanes; the 4-wave interleave
        // (K, V, dK, dV in AGPRs) takes it in 160 VGPRs + 96 AGPRs, no spills.
        //
        // Tensors in their own strides on gfx942: the plain key blocks at head dim 128 spill 6
        // SGPRs (clang 22; 10 with clang 19) even in their own launch; the interleave's take 87-96,
        // no spills, at head dims 64 and 128 (tests/attn_strides.rs in kittens-runtime).
        None if target == Target::Gfx942
            && ((p.args.attn.dim == 64
                && p.args.causal
                && p.args.logits.softcap.is_some()
                && p.args.window.is_some())
                || p.attn_strides.is_some()) =>
        {
            BwdConfig::interleave4(tiles)
        }
        // Head dims past 128 on Hopper: the atomic form (the 64-key blocks add dQ) by default; the
        // deterministic two launches (variant `dq`) take them too.
        None if target.gpu().is_some_and(|g| !g.arch.is_amd()) && p.args.attn.dim > 128 => {
            variant(tiles, ATOMIC)?
        }
        None => tiles,
    };
    Ok(BwdConfig {
        dim,
        causal: p.args.mask(),
        layout: p.args.attn.layout,
        logits: p.args.logits,
        window: p.args.window,
        strided: p.attn_strides.is_some(),
        dlse: p.dlse,
        alibi: p.args.alibi,
        ..tiles
    })
}

/// `tiles` with what [`TUNE_VAR`] sets for a measurement (`step=64|128`: the Hopper key blocks'
/// queries per step, [`BwdConfig::hopper_step`]; `turns=none|scores|both`, [`BwdConfig::turns`]);
/// an error naming the variable where it holds anything else (the kernel's own check refuses a
/// step where it does not fit).
fn tuned(tiles: BwdConfig) -> Result<BwdConfig, KernelError> {
    let Ok(v) = std::env::var(TUNE_VAR) else {
        return Ok(tiles);
    };
    let mut cfg = tiles;
    for item in v.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        match item.split_once('=') {
            Some(("step", "64")) => cfg.hopper_step = 64,
            Some(("step", "128")) => cfg.hopper_step = 128,
            Some(("turns", "none")) => cfg.turns = super::BwdTurns::None,
            Some(("turns", "scores")) => cfg.turns = super::BwdTurns::Scores,
            Some(("turns", "both")) => cfg.turns = super::BwdTurns::Both,
            _ => {
                return Err(KernelError::Config(format!(
                    "{TUNE_VAR} = {v:?}: expected step=64|128 and/or turns=none|scores|both, \
                     comma-separated, not {item:?}"
                )))
            }
        }
    }
    Ok(cfg)
}

/// The environment variable that sets the Hopper backward's key-block tiles for a measurement
/// ([`tuned`]).
pub const TUNE_VAR: &str = "KITTENS_ATTN_BWD_TUNE";

impl KernelProblem for BwdProblem {
    fn kernel(&self) -> &'static str {
        "attn_bwd"
    }

    fn settings(&self) -> &RunSettings {
        &self.run
    }

    fn launch(&self) -> Result<Launch, KernelError> {
        let p = self;
        let sh = p.args.bwd_shape();
        if sh.heads_kv == 0 || !sh.heads.is_multiple_of(sh.heads_kv) {
            return Err(KernelError::Problem(format!(
                "attn_bwd: heads_kv {} must divide heads {} (GQA groups the query heads evenly)",
                sh.heads_kv, sh.heads
            )));
        }
        let q_shape = [sh.batch, sh.heads, sh.seq_q, sh.dim];
        let kv_shape = [sh.batch, sh.heads_kv, sh.seq_kv, sh.dim];
        let lse = elements("lse", &[sh.batch, sh.heads, sh.seq_q])?;
        let mut params = vec![
            param("batch", sh.batch)?,
            param("heads", sh.heads)?,
            param("heads_kv", sh.heads_kv)?,
            param("seq_q", sh.seq_q)?,
            param("seq_kv", sh.seq_kv)?,
        ];
        // Dense tensors hold their elements; strided ones the span from the first to the last, and
        // the strided program takes each one's strides after the sizes, in `strides::TENSORS`
        // order (its declaration order).
        let [q, k, v, o, d_o, dq, dk, dv] = match &p.attn_strides {
            None => {
                let (q, kv) = (elements("Q", &q_shape)?, elements("K", &kv_shape)?);
                [q, kv, kv, q, q, q, kv, kv]
            }
            Some(st) => {
                let mut spans = [0; 8];
                for (i, name) in strides::TENSORS.into_iter().enumerate() {
                    let shape = if matches!(name, "k" | "v" | "dk" | "dv") {
                        kv_shape
                    } else {
                        q_shape
                    };
                    let t = st.of(name).unwrap_or_default();
                    if name.starts_with('d') && name != "do" {
                        strides::check_no_overlap(name, shape, t)?;
                    }
                    spans[i] = strides::span(shape, t)?;
                    for x in t {
                        params.push(param(name, x)?);
                    }
                }
                spans
            }
        };
        // With `p.dlse` (the forward's log-sum-exp an output with a gradient) the lse's gradient
        // `dlse` follows it (`BwdConfig::dlse`).
        let mut inputs = vec![q, k, v, o, d_o, lse];
        if p.dlse {
            inputs.push(lse);
        }
        // With ALiBi (`args.alibi`) its slopes, f32 `[b, h]`, come last.
        if p.args.alibi {
            inputs.push(elements("alibi", &[sh.batch, sh.heads])?);
        }
        Ok(Launch {
            params,
            inputs,
            outputs: vec![dq, dk, dv],
        })
    }

    fn plan(&self, target: Target) -> Result<Plan, KernelError> {
        let p = self;
        let (name, sh) = ("attn_bwd", p.args.bwd_shape());
        positive(
            name,
            &[
                ("batch", sh.batch),
                ("heads", sh.heads),
                ("heads_kv", sh.heads_kv),
                ("seq", sh.seq_q),
                ("seq_kv", sh.seq_kv),
                ("dim", sh.dim),
            ],
        )?;
        if !sh.heads.is_multiple_of(sh.heads_kv) {
            self.launch()?;
        }
        p.args.options().check()?;
        let cfg = config(p, target)?;
        let u = |x: usize| x as u64;
        let (b, h, hk, sq, skv, d) = (
            u(sh.batch),
            u(sh.heads),
            u(sh.heads_kv),
            u(sh.seq_q),
            u(sh.seq_kv),
            u(sh.dim),
        );
        budget::check_tile_side(name, "dim", d)?;
        let q = budget::product(&[b, h, sq, d]);
        let kv = budget::product(&[b, hk, skv, d]);
        let bytes = budget::sum(&[
            // five bf16 inputs and their snapshot (held as f32), the forward's f64 O
            budget::sum(&[q, q, q, kv, kv]).and_then(|x| x.checked_mul(2 * 4)),
            q.and_then(|x| x.checked_mul(8)),
            // outputs, pending stores, f64 references, bf16 baselines (held as f32)
            budget::sum(&[q, kv, kv]).and_then(|x| x.checked_mul(4 + STORE_BYTES + 8 + 4)),
            // the baseline's per-head P and dS (f32)
            budget::product(&[sq, skv, 2 * 4]),
        ]);
        let what = format!(
            "attn_bwd at batch={b} heads={h} heads_kv={hk} seq_q={sq} seq_kv={skv} dim={d}"
        );
        budget::check_host_bytes(&what, bytes)?;
        // Key blocks: every (query step, key) pair of every query head, 4 products; query blocks:
        // 3 products over their queries and every key step.
        let step = u64::from(cfg.step);
        let keys = round_up(skv, u64::from(cfg.waves * cfg.key_rows));
        let queries = round_up(sq, u64::from(cfg.waves * cfg.query_rows));
        let work = round_up(sq, step)
            .zip(keys)
            .and_then(|(pq, pk)| budget::product(&[b, h, pq, pk, d, 4]))
            .zip(
                queries
                    .zip(round_up(skv, step))
                    .and_then(|(pq, pk)| budget::product(&[b, h, pq, pk, d, 3])),
            )
            .and_then(|(a, c)| a.checked_add(c));
        // On Hopper the backward is several launches (`stages`); the plan's launch is the run's: the
        // drawn inputs in, dQ, dK and dV out.
        let launch = self.launch()?;
        Ok(Plan {
            launch,
            what,
            work,
            shape: serde_json::json!({
                "batch": sh.batch, "heads": sh.heads, "heads_kv": sh.heads_kv, "seq_q": sh.seq_q,
                "seq_kv": sh.seq_kv, "dim": sh.dim, "layout": sh.layout, "causal": p.args.mask(),
                "waves": cfg.waves, "key_rows": cfg.key_rows, "query_rows": cfg.query_rows,
                "step": cfg.step, "key_step": cfg.key_step, "hopper_step": cfg.hopper_step,
                "grad_mfma": format!("{}", cfg.grad_base), "pin_agprs": cfg.pin_agprs,
                "scale": cfg.logits.scale(cfg.dim), "softcap": cfg.logits.softcap, "window": cfg.window,
            }),
        })
    }

    /// The run's kernel; with two launches ([`split_blocks`]), the key blocks'.
    fn build(&self, target: Target) -> Result<Kernel, KernelError> {
        let p = self;
        let cfg = config(p, target)?;
        match split_blocks(p, target) {
            true => build(&BwdConfig {
                blocks: BwdBlocks::Keys,
                ..cfg
            }),
            false => build(&cfg),
        }
    }

    /// One launch, except for the Hopper programs: the query blocks (dQ, and D for the next launch),
    /// then the key blocks (dK, dV), the tensors passed by name (FlashAttention-2 §3.2's split). The
    /// `dq` variant names the first of them and runs the same two.
    fn stages(&self, target: Target, plan: &Plan) -> Result<Vec<Stage>, KernelError> {
        let p = self;
        use super::BwdSchedule::{
            HopperAtomicDq, HopperAtomicKv, HopperAtomicPre, HopperKv, HopperQ,
        };
        let cfg = config(p, target)?;
        match cfg.schedule.hopper_launches() {
            None if split_blocks(p, target) => {
                // The query blocks (dQ), then the key blocks (dK, dV), each reading every input.
                let l = &plan.launch;
                let values = named_values(p, l)?;
                let stage = |cfg: BwdConfig, outputs| -> Result<Stage, KernelError> {
                    let kernel = build(&cfg)?;
                    Ok(Stage {
                        launch: Launch {
                            params: strides::named_params(&kernel, &values)?,
                            inputs: l.inputs.clone(),
                            outputs,
                        },
                        kernel,
                    })
                };
                let [dq, dk, dv] = [0, 1, 2].map(|i| l.outputs[i]);
                Ok(vec![
                    stage(query_launch(cfg, target), vec![dq])?,
                    stage(
                        BwdConfig {
                            blocks: BwdBlocks::Keys,
                            ..cfg
                        },
                        vec![dk, dv],
                    )?,
                ])
            }
            None => Ok(vec![Stage {
                kernel: build(&cfg)?,
                launch: plan.launch.clone(),
            }]),
            Some([HopperQ, HopperKv]) => {
                let l = &plan.launch;
                let [q, k, v, o, d_o, lse] = [0, 1, 2, 3, 4, 5].map(|i| l.inputs[i]);
                let [dq, dk, dv] = [0, 1, 2].map(|i| l.outputs[i]);
                let values = named_values(p, l)?;
                let stage = |schedule, inputs, outputs| -> Result<Stage, KernelError> {
                    let kernel = build(&BwdConfig { schedule, ..cfg })?;
                    Ok(Stage {
                        launch: Launch {
                            params: strides::named_params(&kernel, &values)?,
                            inputs,
                            outputs,
                        },
                        kernel,
                    })
                };
                let (dlse, alibi) = extra_inputs(p, l);
                Ok(vec![
                    // q, k, v, o, do, lse (, dlse) (, alibi) in; delta, dq out.
                    stage(
                        HopperQ,
                        [&[q, k, v, o, d_o, lse][..], dlse, alibi].concat(),
                        vec![lse, dq],
                    )?,
                    // q, k, v, do, lse, delta (, alibi) in; dk, dv out.
                    stage(
                        HopperKv,
                        [&[q, k, v, d_o, lse, lse][..], alibi].concat(),
                        vec![dk, dv],
                    )?,
                ])
            }
            Some([HopperAtomicPre, HopperAtomicKv, HopperAtomicDq]) => {
                // FlashAttention-3 §3.3: D and the zeroed f32 dQ accumulator (`dq_acc`, Q's shape),
                // the key blocks adding into it, its rounding to bf16 dQ. `dq_acc` is read and
                // written by the key blocks, declared after dK and dV: an output of that launch in
                // the runner's inputs-then-outputs order (the one it was written by before and is
                // read by after; the per-launch runner refuses such a launch by name, a prepared
                // call passes the accumulator by name), as `attn_varlen_bwd`'s.
                let l = &plan.launch;
                let [q, k, v, o, d_o, lse] = [0, 1, 2, 3, 4, 5].map(|i| l.inputs[i]);
                let [dq, dk, dv] = [0, 1, 2].map(|i| l.outputs[i]);
                let acc = elements(
                    "dq_acc",
                    &[
                        p.args.attn.batch,
                        p.args.attn.heads,
                        p.args.attn.seq,
                        p.args.attn.dim,
                    ],
                )?;
                let values = named_values(p, l)?;
                let stage = |schedule, inputs, outputs| -> Result<Stage, KernelError> {
                    let kernel = build(&BwdConfig { schedule, ..cfg })?;
                    Ok(Stage {
                        launch: Launch {
                            params: strides::named_params(&kernel, &values)?,
                            inputs,
                            outputs,
                        },
                        kernel,
                    })
                };
                let (dlse, alibi) = extra_inputs(p, l);
                Ok(vec![
                    stage(
                        HopperAtomicPre,
                        [&[o, d_o][..], dlse].concat(),
                        vec![lse, acc],
                    )?,
                    stage(
                        HopperAtomicKv,
                        [&[q, k, v, d_o, lse, lse][..], alibi].concat(),
                        vec![dk, dv, acc],
                    )?,
                    stage(HopperAtomicDq, vec![acc], vec![dq])?,
                ])
            }
            Some(other) => Err(KernelError::Config(format!(
                "attn_bwd: no Hopper launches {other:?}"
            ))),
        }
    }

    /// The run's inputs by name on a target whose first launch does not take them all as its first
    /// tensors (the atomic Hopper form opens with D's pass over O and dO): `q, k, v, o, do, lse`,
    /// then `dlse` and `alibi` when given — the names every Hopper launch declares them by. The
    /// runner then hands each launch its inputs by name.
    fn input_names(&self, target: Target) -> Option<Vec<String>> {
        config(self, target).ok()?.schedule.hopper_launches()?;
        let dlse = self.dlse.then_some("dlse");
        let alibi = self.args.alibi.then_some("alibi");
        let names = ["q", "k", "v", "o", "do", "lse"]
            .iter()
            .chain(&dlse)
            .chain(&alibi);
        Some(names.map(|s| s.to_string()).collect())
    }

    /// `dq, dk, dv` on a target of the atomic Hopper form, whose launches return dK and dV (the key
    /// blocks) before dQ (the accumulator's conversion, last).
    fn output_names(&self, target: Target) -> Option<Vec<String>> {
        let launches = config(self, target).ok()?.schedule.hopper_launches()?;
        (launches.len() == 3).then(|| ["dq", "dk", "dv"].map(String::from).to_vec())
    }

    /// Q, K, V and dO uniform in `[-input_scale, input_scale)` (bf16, whatever the first launch
    /// declares first: the atomic Hopper form's reads O and dO); O and the log-sum-exp from the f64
    /// forward at those Q, K, V.
    fn draw(&self, _kernel: &Kernel, launch: &Launch, rng: &mut SmallRng) -> Vec<Vec<f32>> {
        let p = self;
        let sh = p.args.bwd_shape();
        let lens = &launch.inputs;
        let scale = p.run.input_scale;
        let mut bf16 = |len: usize| random_scaled(rng, len, DType::Bf16, scale);
        let qkv: Vec<Vec<f32>> = lens[..3].iter().map(|&n| bf16(n)).collect();
        let d_o = bf16(lens[4]);
        // ALiBi's slopes (f32, any sign: any values run) drawn first, the forward needs them.
        let alibi = p
            .args
            .alibi
            .then(|| random_scaled(rng, sh.batch * sh.heads, DType::F32, p.run.input_scale));
        let opts = p.args.options_with(alibi.as_ref());
        // A strided problem's forward reads the drawn spans gathered, and its O goes to O's strides.
        let dense = |i: usize, t: &[f32]| match &p.attn_strides {
            Some(_) => strided::gather(p, i, t),
            None => t.to_vec(),
        };
        let [q_d, k_d, v_d] = [0, 1, 2].map(|i| dense(i, &qkv[i]));
        let f = reference_bwd::forward_with(&q_d, &k_d, &v_d, &sh, p.args.mask(), &opts);
        let o: Vec<f32> =
            f.o.iter()
                .map(|&x| round(x as f32, DType::Bf16, Rounding::Rtne))
                .collect();
        let o = match &p.attn_strides {
            Some(_) => strided::scatter(p, 3, &o),
            None => o,
        };
        let lse = f.lse.iter().map(|&x| x as f32).collect();
        let [q, k, v]: [Vec<f32>; 3] = qkv.try_into().unwrap_or_default();
        let mut all = vec![q, k, v, o, d_o, lse];
        if p.dlse {
            all.push(random_scaled(rng, lens[6], DType::Bf16, scale));
        }
        all.extend(alibi);
        all
    }

    fn reference(&self, inputs: &[Vec<f32>]) -> Reference {
        let p = self;
        let (sh, c) = (p.args.bwd_shape(), p.args.mask());
        let dense = |i: usize| match &p.attn_strides {
            Some(_) => strided::gather(p, i, &inputs[i]),
            None => inputs[i].clone(),
        };
        let [q, k, v, d_o] = [0, 1, 2, 4].map(dense);
        let (q, k, v, d_o) = (q.as_slice(), k.as_slice(), v.as_slice(), d_o.as_slice());
        let lg = &p.args.options_with(inputs.last());
        let dlse = inputs.get(6).filter(|_| p.dlse).map(Vec::as_slice);
        let g = reference_bwd::backward_dlse(q, k, v, d_o, dlse, &sh, c, lg);
        let base = reference_bwd::backward_bf16_baseline_dlse(q, k, v, d_o, dlse, &sh, c, lg);
        let logit = reference_bwd::forward_with(q, k, v, &sh, c, lg).max_abs_logit;
        // A strided problem's gradients go to their strides (only gap-free ones can be judged: the
        // runners poison outputs with NaN; `tests/attn_strides.rs` checks gapped ones).
        let (values, baseline) = match &p.attn_strides {
            None => ([g.dq, g.dk, g.dv].concat(), base.concat()),
            Some(_) => {
                let [dq, dk, dv] = base;
                (
                    [
                        strided::scatter(p, 5, &g.dq),
                        strided::scatter(p, 6, &g.dk),
                        strided::scatter(p, 7, &g.dv),
                    ]
                    .concat(),
                    [
                        strided::scatter(p, 5, &dq),
                        strided::scatter(p, 6, &dk),
                        strided::scatter(p, 7, &dv),
                    ]
                    .concat(),
                )
            }
        };
        Reference {
            values,
            baseline: Some(baseline),
            max_abs_logit: Some(logit),
        }
    }

    /// The test rule per gradient, against the bf16 backward.
    fn tolerance(&self) -> Tolerance {
        Tolerance::Rule
    }
}

/// A strided problem's tensors (`strides::TENSORS[i]`) between their spans and dense
/// `[b, h, s, d]`, for the draw and the reference.
mod strided {
    use super::BwdProblem as Problem;
    use crate::attn::strides::{self, TENSORS};

    fn shape(p: &Problem, i: usize) -> ([usize; 4], [usize; 3]) {
        let sh = p.args.bwd_shape();
        let heads = if matches!(TENSORS[i], "k" | "v" | "dk" | "dv") {
            (sh.heads_kv, sh.seq_kv)
        } else {
            (sh.heads, sh.seq_q)
        };
        let st = p.attn_strides.unwrap_or_default().of(TENSORS[i]);
        ([sh.batch, heads.0, heads.1, sh.dim], st.unwrap_or_default())
    }

    pub fn gather(p: &Problem, i: usize, t: &[f32]) -> Vec<f32> {
        let (shape, st) = shape(p, i);
        strides::gather(t, shape, st)
    }

    pub fn scatter<T: Copy + Default>(p: &Problem, i: usize, t: &[T]) -> Vec<T> {
        let (shape, st) = shape(p, i);
        strides::scatter(t, shape, st)
    }
}
