//! `attn_fwd` at a problem's sizes: parameters `batch, heads, heads_kv, seq, seq_kv`, inputs Q, K, V and outputs
//! O (and the log-sum-exp) in the problem's layout, the f64 reference, the PyTorch-style bf16 baseline and the test rule.

use super::split::{self, KvSplits, SplitShape};
use super::{build, AttnConfig, AttnSchedule};
use crate::attn::strides::{self, AttnStrides};
use crate::attn::{AttnArgs, AttnLayout, BwdShape};
use crate::budget;
use crate::problem::{
    elements, param, positive, round_up, KernelProblem, Launch, NamedArgs, Plan, Reference,
    RunSettings, Stage, STORE_BYTES,
};
use crate::reference::Tolerance;
use crate::reference_fwd;
use crate::KernelError;
use kittens_hw::Target;
use kittens_ir::Kernel;

/// An `attn_fwd` problem: the attention's shape, keys, mask, logits and window ([`AttnArgs`]); the
/// log-sum-exp output, the key split (`split`: 1 part, the plain kernel; a fixed count; or the
/// planner's choice for the GPU the run is configured for) and the CPU interpreter's tiles
/// (`attn_cfg`; `dim` is taken from `attn.dim`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnProblem {
    /// The attention's shape, keys, mask, logits and window.
    pub args: AttnArgs,
    /// Also write the log-sum-exp of every query row (a second output).
    pub lse: bool,
    pub kv_splits: KvSplits,
    pub attn_cfg: AttnConfig,
    pub run: RunSettings,
    /// Each tensor's own `[b, h, s]` strides (a caller's views, read in place by the strided
    /// programs, `crate::attn::strides`); `None`: every tensor dense in `attn.layout`.
    pub attn_strides: Option<AttnStrides>,
    /// On sm_90a: two query tiles per block as one key stream ([`AttnConfig::tile_pairs`]) or not,
    /// whatever [`pairs_win`] says for the problem (`None`); the interpreter runs `attn_cfg`'s.
    pub tile_pairs: Option<bool>,
}

impl Default for AttnProblem {
    /// The default shape ([`crate::attn::AttnShape::default`]), no mask, unsplit, 16-query, 32-key tiles.
    fn default() -> Self {
        AttnProblem::with(AttnArgs::default())
    }
}

impl AttnProblem {
    /// The problem of `a`'s shape and mask, with the defaults for the rest.
    pub fn with(a: AttnArgs) -> AttnProblem {
        AttnProblem {
            args: a,
            lse: false,
            kv_splits: KvSplits::Fixed(1),
            attn_cfg: AttnConfig {
                q_rows: 16,
                kv_block: 32,
                ..AttnConfig::default()
            },
            run: RunSettings::default(),
            attn_strides: None,
            tile_pairs: None,
        }
    }

    /// The problem `a` names: the attention's ([`AttnArgs::from_args`]), `lse`, `kv_splits`
    /// (`"auto"` or a count), the CPU tiles `q_rows` and `kv_block`, and the run settings.
    pub fn from_args(a: &NamedArgs) -> Result<AttnProblem, KernelError> {
        let mut p = AttnProblem::with(AttnArgs::from_args(a)?);
        p.lse = a.flag_or("lse", false)?;
        p.kv_splits = a.parse_or("kv_splits", p.kv_splits)?;
        p.attn_cfg.q_rows = a.u32_or("q_rows", p.attn_cfg.q_rows)?;
        p.attn_cfg.kv_block = a.u32_or("kv_block", p.attn_cfg.kv_block)?;
        p.run = RunSettings::from_args(a, &[CAUSAL, SEED001])?;
        // The causal variant names the causal kernel: it runs with the causal mask.
        p.args.causal |= p.run.variant == Some(CAUSAL);
        p.attn_strides = AttnStrides::from_args(a)?;
        if a.get("tile_pairs").is_some() {
            p.tile_pairs = Some(a.flag_or("tile_pairs", false)?);
        }
        Ok(p)
    }
}

/// The registry's parser of `attn_fwd`'s problem.
pub fn parse(a: &NamedArgs) -> Result<Box<dyn KernelProblem>, KernelError> {
    Ok(Box::new(AttnProblem::from_args(a)?))
}

/// The name of the causal variant (the registry's, for `kittens compile --schedule causal`).
pub const CAUSAL: &str = "causal";

/// The name of MI300X-attn's kernel as a configuration of this program ([`AttnConfig::mi300x`]):
/// `kittens compile attn_fwd --target gfx942 --variant seed001`.
pub const SEED001: &str = "seed001";

/// `base`, a GPU's configuration, turned into its variant `name`.
pub fn variant(base: AttnConfig, name: &str) -> Result<AttnConfig, KernelError> {
    match name {
        CAUSAL => Ok(AttnConfig {
            causal: true,
            ..base
        }),
        SEED001 => Ok(base.mi300x()),
        other => Err(KernelError::Config(format!(
            "attn_fwd: no variant `{other}`; variants: {CAUSAL}, {SEED001}"
        ))),
    }
}

/// A run's variant must agree with its problem: `causal` only with `p.causal` (what `--causal`
/// already builds, and what the variant sets in [`AttnProblem::from_args`]); `seed001` with any
/// mask; an unknown one is refused rather than ignored.
fn no_variant(p: &AttnProblem) -> Result<(), KernelError> {
    match p.run.variant {
        None | Some(SEED001) => Ok(()),
        Some(CAUSAL) if p.args.causal => Ok(()),
        Some(CAUSAL) => Err(KernelError::Config(
            "attn_fwd: the `causal` variant runs with the causal mask (--causal)".into(),
        )),
        Some(v) => variant(AttnConfig::default(), v).map(|_| ()),
    }
}

/// The configuration a run on `target` builds: `p.attn_cfg`'s tiles on the CPU, the default tiles
/// (the registry's for both CDNA targets) elsewhere, MI300X-attn's with the `seed001` variant (on
/// every target, so that the interpreter runs it too); head dimension, causality, layout and key split
/// from `p` ([`splits`]).
fn config(p: &AttnProblem, target: Target) -> Result<AttnConfig, KernelError> {
    let cfg = tiles(p, target);
    let (kv_splits, _) = splits(p, target, &cfg)?;
    // A key split's parts are blocks of one tile each.
    let tile_pairs = cfg.tile_pairs && kv_splits <= 1;
    Ok(AttnConfig {
        kv_splits,
        tile_pairs,
        ..cfg
    })
}

/// The GPU a run's key split is planned for: the target's; on the CPU, the GPU of the target whose
/// schedule the CPU runs (gfx942's MI300X for the ping-pong and MI300X-attn's kernel, sm_90a's H100
/// for producer/consumer).
fn split_gpu(cfg: &AttnConfig, target: Target) -> Option<&'static kittens_hw::Gpu> {
    target.gpu().or(match cfg.schedule {
        AttnSchedule::PingPong8 | AttnSchedule::Mi300x => Target::Gfx942.gpu(),
        AttnSchedule::ProducerConsumer => Target::Sm90a.gpu(),
    })
}

/// The key split of `p` with configuration `cfg` on `target`, and the planner's reason when `p`
/// leaves it to the planner (`--kv-splits auto`).
fn splits(
    p: &AttnProblem,
    target: Target,
    cfg: &AttnConfig,
) -> Result<(u32, Option<String>), KernelError> {
    let a = p.args.attn;
    let shape = SplitShape {
        batch: a.batch as u64,
        heads: a.heads as u64,
        seq: a.seq as u64,
        seq_kv: p.args.bwd_shape().seq_kv as u64,
    };
    match split_gpu(cfg, target) {
        Some(gpu) => split::resolve(p.kv_splits, &p.run.device_model(gpu), cfg, shape),
        None => Ok((1, None)),
    }
}

/// The key parts a run of `p` on `target` uses (1: unsplit), as [`KernelProblem::stages`] launches them.
pub fn kv_parts(p: &AttnProblem, target: Target) -> Result<u32, KernelError> {
    Ok(config(p, target)?.kv_splits.max(1))
}

/// [`config`] without the key split.
fn tiles(p: &AttnProblem, target: Target) -> AttnConfig {
    let tiles = match (p.run.variant, target.gpu()) {
        (Some(SEED001), _) => AttnConfig::default().mi300x(),
        (_, Some(gpu)) => AttnConfig::for_gpu(gpu),
        (_, None) => p.attn_cfg,
    };
    let cfg = AttnConfig {
        dim: u32::try_from(p.args.attn.dim).unwrap_or(u32::MAX),
        causal: p.args.causal,
        bottom_right: p.args.causal && p.args.bottom_right,
        layout: p.args.attn.layout,
        lse: p.lse,
        logits: p.args.logits,
        window: p.args.window,
        alibi: p.args.alibi,
        rounding: p.attn_cfg.rounding,
        strided: p.attn_strides.is_some(),
        ..tiles
    };
    match target.gpu() {
        Some(gpu) if gpu.arch.is_amd() && cfg.schedule == AttnSchedule::PingPong8 => {
            let cfg = cfg.fit_cdna(gpu);
            // gfx942's two-slot loop at head dim 128 is at 252 of its 256 VGPRs: ALiBi's slope and
            // distances spilled 6 there (28 bytes of scratch); 16 queries per wave leave room.
            if cfg.alibi && cfg.kv_block == 32 && cfg.dim > 64 {
                AttnConfig { q_rows: 16, ..cfg }
            } else {
                cfg
            }
        }
        Some(_) if cfg.schedule == AttnSchedule::ProducerConsumer => {
            let cfg = cfg.fit_hopper();
            let tile_pairs = p
                .tile_pairs
                .unwrap_or_else(|| pairs_win(&cfg, p.args.attn.seq))
                && pairs_fit(&cfg);
            AttnConfig { tile_pairs, ..cfg }
        }
        _ => cfg,
    }
}

/// Where two query tiles per block as one key stream ([`AttnConfig::tile_pairs`]) is the sm_90a
/// default: what the H200 measured (docs/performance.md, "FlashAttention's options", *Window*) — a
/// window whose tiles walk at most 3 key blocks of 128 (left side plus right side, the causal mask's
/// 0 where tighter, at most 256 keys: 1.02× the one-tile program at `(256, 0)`; at 9 blocks 0.95×)
/// over an even number of query tiles (with an odd number the last pair computes a tile past the
/// end: 0.78× at 3 tiles).
pub fn pairs_win(cfg: &AttnConfig, seq: usize) -> bool {
    let Some(w) = cfg.window else { return false };
    let right = match (cfg.causal, w.right) {
        (true, _) => 0,
        (false, r) => r,
    };
    let tiles = seq.div_ceil(crate::attn::hopper::BLOCK as usize);
    w.left >= 0 && right >= 0 && w.left + right <= 256 && tiles.is_multiple_of(2)
}

/// Whether the tile-pair program takes `cfg` (head dim up to 128, 128-key blocks, dense tensors):
/// asked for elsewhere, the one-tile program runs.
fn pairs_fit(cfg: &AttnConfig) -> bool {
    cfg.dim <= 128 && cfg.kv_block == 128 && !cfg.strided
}

/// V in the problem's layout: a kernel that reads V transposed ([`AttnConfig::v_transposed`],
/// `[b, h_kv, d, s]`) is given it that way, and the references read it in `shape.layout`.
fn v_in_layout(v: &[f32], shape: &BwdShape) -> Vec<f32> {
    let (h, s, d) = (shape.heads_kv, shape.seq_kv, shape.dim);
    let mut out = vec![0.0; v.len()];
    for (i, &x) in v.iter().enumerate() {
        let (si, di, hi, bi) = (i % s, i / s % d, i / (s * d) % h, i / (s * d * h));
        out[shape.layout.offset((h, s, d), (bi, hi, si, di))] = x;
    }
    out
}

impl KernelProblem for AttnProblem {
    fn kernel(&self) -> &'static str {
        "attn_fwd"
    }

    fn settings(&self) -> &RunSettings {
        &self.run
    }

    fn launch(&self) -> Result<Launch, KernelError> {
        let p = self;
        let (sh, seq_kv) = (p.args.attn, p.args.bwd_shape().seq_kv);
        if sh.heads_kv == 0 || !sh.heads.is_multiple_of(sh.heads_kv) {
            return Err(KernelError::Problem(format!(
                "attn_fwd: heads_kv {} must divide heads {} (GQA groups the query heads evenly)",
                sh.heads_kv, sh.heads
            )));
        }
        let q_shape = [sh.batch, sh.heads, sh.seq, sh.dim];
        let kv_shape = [sh.batch, sh.heads_kv, seq_kv, sh.dim];
        let mut params = vec![
            param("batch", sh.batch)?,
            param("heads", sh.heads)?,
            param("heads_kv", sh.heads_kv)?,
            param("seq", sh.seq)?,
            param("seq_kv", seq_kv)?,
        ];
        // Dense tensors hold their elements; strided ones the span from the first to the last, and
        // the strided program takes each tensor's strides after the sizes, in q, k, v, o order.
        let [q, k, v, o] = match &p.attn_strides {
            None => {
                let (q, kv) = (elements("Q", &q_shape)?, elements("K", &kv_shape)?);
                [q, kv, kv, q]
            }
            Some(st) => {
                strides::check_no_overlap("o", q_shape, st.o)?;
                let mut spans = [0; 4];
                for (i, (name, shape)) in [
                    ("q", q_shape),
                    ("k", kv_shape),
                    ("v", kv_shape),
                    ("o", q_shape),
                ]
                .into_iter()
                .enumerate()
                {
                    let t = st.of(name).unwrap_or_default();
                    spans[i] = strides::span(shape, t)?;
                    params.extend(
                        t.iter()
                            .map(|&x| param(name, x))
                            .collect::<Result<Vec<_>, _>>()?,
                    );
                }
                spans
            }
        };
        let mut outputs = vec![o];
        if p.lse {
            outputs.push(elements("lse", &[sh.batch, sh.heads, sh.seq])?);
        }
        let mut inputs = vec![q, k, v];
        // With ALiBi (`args.alibi`) its slopes, f32 `[b, h]`, after V.
        if p.args.alibi {
            inputs.push(elements("alibi", &[sh.batch, sh.heads])?);
        }
        Ok(Launch {
            params,
            inputs,
            outputs,
        })
    }

    fn plan(&self, target: Target) -> Result<Plan, KernelError> {
        let p = self;
        let (name, sh, seq_kv) = ("attn_fwd", p.args.attn, p.args.bwd_shape().seq_kv);
        positive(
            name,
            &[
                ("batch", sh.batch),
                ("heads", sh.heads),
                ("heads_kv", sh.heads_kv),
                ("seq", sh.seq),
                ("seq_kv", seq_kv),
                ("dim", sh.dim),
            ],
        )?;
        if !sh.heads.is_multiple_of(sh.heads_kv) {
            // The launch refuses it too; say it before the budget does.
            self.launch()?;
        }
        no_variant(p)?;
        p.args.options().check()?;
        let cfg = tiles(p, target);
        let (g, why) = splits(p, target, &cfg)?;
        let u = |x: usize| x as u64;
        let (b, h, hk, s, skv, d) = (
            u(sh.batch),
            u(sh.heads),
            u(sh.heads_kv),
            u(sh.seq),
            u(seq_kv),
            u(sh.dim),
        );
        let (qr, kv) = (u64::from(cfg.q_rows), u64::from(cfg.kv_block));
        budget::check_tile_side(name, "dim", d)?;
        budget::check_tile_side(name, "q_rows", qr)?;
        budget::check_tile_side(name, "kv_block", kv)?;
        let q = budget::product(&[b, h, s, d]);
        let kv_len = budget::product(&[b, hk, skv, d]);
        let bytes = budget::sum(&[
            // the inputs and their snapshot
            budget::sum(&[q, kv_len, kv_len]).and_then(|x| x.checked_mul(2 * 4)),
            // output, pending stores, f64 reference, bf16 baseline (held as f32); the log-sum-exp
            // is at most a 32nd of that (one value per row of at least 32)
            q.and_then(|x| x.checked_mul(4 + STORE_BYTES + 8 + 4)),
            q.and_then(|x| x.checked_mul(4 + STORE_BYTES + 8 + 4))
                .map(|x| if p.lse { x / 32 } else { 0 }),
            // a key split's partial outputs (and their log-sum-exps, a 32nd), written and read
            q.and_then(|x| x.checked_mul(u64::from(g) * (4 + STORE_BYTES + 4) * 33 / 32))
                .map(|x| if g > 1 { x } else { 0 }),
        ]);
        let what =
            format!("attn_fwd at batch={b} heads={h} heads_kv={hk} seq={s} seq_kv={skv} dim={d}");
        budget::check_host_bytes(&what, bytes)?;
        // Every query block (8 waves × q_rows) against every key block, for Q·Kᵀ and P·V.
        // A key split rounds each part up to whole blocks and walks one block in a part with none.
        let parts = if g > 1 { u64::from(g) * kv } else { 0 };
        let work = round_up(s, 8 * qr)
            .zip(round_up(skv, kv).and_then(|pk| pk.checked_add(parts)))
            .and_then(|(pq, pk)| budget::product(&[b, h, pq, pk, d, 2]));
        Ok(Plan {
            launch: self.launch()?,
            what,
            work,
            shape: serde_json::json!({
                "attn": sh, "seq_kv": skv, "causal": p.args.mask(), "lse": p.lse,
                "q_rows": cfg.q_rows, "kv_block": cfg.kv_block, "program": cfg.schedule,
                "v_layout": if cfg.v_transposed { "bhds" } else { "as_q" },
                "kv_splits": g, "kv_splits_asked": p.kv_splits, "kv_split_reason": why,
                "scale": cfg.logits.scale(cfg.dim), "softcap": cfg.logits.softcap, "window": cfg.window,
                "alibi": cfg.alibi,
            }),
        })
    }

    /// The attention kernel; with a key split, the split kernel (the merge is [`Self::stages`]'s
    /// second launch).
    fn build(&self, target: Target) -> Result<Kernel, KernelError> {
        let p = self;
        no_variant(p)?;
        build(&config(p, target)?)
    }

    /// With a key split of `G` parts: the split kernel writing `G` planes of partial outputs and
    /// log-sum-exps, then the merge reading them and writing O (and the log-sum-exp).
    fn stages(&self, target: Target, plan: &Plan) -> Result<Vec<Stage>, KernelError> {
        let p = self;
        no_variant(p)?;
        let cfg = config(p, target)?;
        let kernel = build(&cfg)?;
        if cfg.kv_splits <= 1 {
            return Ok(vec![Stage {
                kernel,
                launch: plan.launch.clone(),
            }]);
        }
        let a = p.args.attn;
        // Each launch's parameters by name: the split kernel takes no `o`, the merge no q, k, v.
        let mut values: Vec<(String, i64)> = ["batch", "heads", "heads_kv", "seq", "seq_kv"]
            .into_iter()
            .map(String::from)
            .zip(plan.launch.params.iter().copied())
            .collect();
        if let Some(st) = &p.attn_strides {
            values.extend(st.params()?);
        }
        let rows = [a.batch, a.heads, a.seq, a.dim];
        crate::attn::split::stages(kernel, &cfg.merge(), &plan.launch, &values, rows)
    }

    /// O, then (with `p.lse`) the log-sum-exp, each judged by the rule on its own.
    fn reference(&self, inputs: &[Vec<f32>]) -> Reference {
        let p = self;
        if let Some(st) = p.attn_strides {
            return strided_reference(p, &st, inputs);
        }
        let [q, k, v] = [&inputs[0], &inputs[1], &inputs[2]];
        let (bsh, causal) = (p.args.bwd_shape(), p.args.mask());
        let v_t;
        let v = if tiles(p, Target::Cpu).v_transposed {
            v_t = v_in_layout(v, &bsh);
            &v_t
        } else {
            v
        };
        let lg = &p.args.options_with(inputs.get(3));
        let (o, lse, logit) = reference_fwd::forward_with(q, k, v, &bsh, causal, lg);
        let rounding = p.attn_cfg.rounding; // the baseline rounds its output as the kernel does
        let (ob, lseb) =
            reference_fwd::forward_bf16_baseline_with(q, k, v, &bsh, causal, rounding, lg);
        let (values, baseline) = if p.lse {
            ([o, lse].concat(), [ob, lseb].concat())
        } else {
            (o, ob)
        };
        Reference {
            values,
            baseline: Some(baseline),
            max_abs_logit: Some(logit),
        }
    }

    /// The test rule against the bf16 baseline: attention's error grows with the logits, so a fixed
    /// bound either fails good kernels at large logits or passes bad ones at small.
    fn tolerance(&self) -> Tolerance {
        Tolerance::Rule
    }
}

/// The reference of a strided problem: its inputs gathered into dense `[b, h, s, d]`, the dense
/// problem's reference, O scattered back into O's strides. Only an O without gaps between its rows
/// can be judged so (the runners poison outputs with NaN; `tests/attn_strides.rs` checks gapped ones
/// on the interpreter).
fn strided_reference(p: &AttnProblem, st: &AttnStrides, inputs: &[Vec<f32>]) -> Reference {
    let sh = p.args.bwd_shape();
    let q_shape = [sh.batch, sh.heads, sh.seq_q, sh.dim];
    let kv_shape = [sh.batch, sh.heads_kv, sh.seq_kv, sh.dim];
    let mut dense = AttnProblem {
        attn_strides: None,
        ..*p
    };
    dense.args.attn.layout = AttnLayout::Bhsd;
    let mut gathered = vec![
        strides::gather(&inputs[0], q_shape, st.q),
        strides::gather(&inputs[1], kv_shape, st.k),
        strides::gather(&inputs[2], kv_shape, st.v),
    ];
    gathered.extend(inputs.get(3).cloned()); // the ALiBi slopes
    let r = dense.reference(&gathered);
    let n = q_shape.iter().product::<usize>();
    fn with_o<T: Copy + Default>(all: &[T], n: usize, shape: [usize; 4], st: [usize; 3]) -> Vec<T> {
        [strides::scatter(&all[..n], shape, st), all[n..].to_vec()].concat()
    }
    Reference {
        values: with_o(&r.values, n, q_shape, st.o),
        baseline: r.baseline.as_deref().map(|b| with_o(b, n, q_shape, st.o)),
        max_abs_logit: r.max_abs_logit,
    }
}
