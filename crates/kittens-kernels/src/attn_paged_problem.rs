//! `attn_paged` at a problem's sizes: `batch` sequences of `seq` new queries against a paged cache of
//! `num_blocks` pages of `page_size` keys, `max_blocks` table entries per sequence, `heads` /
//! `heads_kv` heads of `dim`, causal bottom-right or not, any scale, `num_splits` key parts (then the
//! split kernel and the merge of the key split (`crate::attn::split`) are two stages, the partials scratch).
//! A random-input run draws the lengths from the seed ([`lengths`]: the capacity, 1, 0 and random
//! ones), gives every sequence its own pages in a shuffled order, and judges `o` and `lse` by
//! FlashAttention's rule against the per-sequence f64 reference on the gathered keys.
//!
//! Inputs in launch order: `q, k_cache, v_cache` (bf16), `block_table`, `cache_seqlens` (i32, held as
//! exact f32 integers), with ALiBi (`alibi`) its slopes (f32 `[batch, heads]`, random of any sign in
//! a run); outputs `o`, `lse`.

use crate::attn::score::{AttnArgs, Logits, Window};
use crate::attn::split::{self, MergeConfig};
use crate::attn::{AttnLayout, AttnShape};
use crate::attn_paged::{build, kv_block_for, PagedConfig};
use crate::problem::{
    draw_operands, elements, param, positive, random_scaled, KernelProblem, Launch, NamedArgs,
    Plan, Reference, RunSettings, Stage,
};
use crate::reference::Tolerance;
use crate::reference_varlen::{forward_alibi, forward_bf16_baseline_alibi, VarlenShape};
use crate::KernelError;
use kittens_hw::dtype::DType;
use kittens_hw::Target;
use kittens_ir::{Kernel, Rounding};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// An `attn_paged` problem (module documentation).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PagedProblem {
    pub attn: AttnShape,
    pub causal: bool,
    pub logits: Logits,
    /// ALiBi's slopes an input ([`PagedConfig::alibi`]).
    pub alibi: bool,
    /// A sliding window, bottom-right aligned per sequence ([`PagedConfig::window`]).
    pub window: Option<Window>,
    pub num_blocks: usize,
    pub page_size: usize,
    pub max_blocks: usize,
    pub splits: u32,
    pub run: RunSettings,
}

const NAME: &str = "attn_paged";

impl PagedProblem {
    /// The attention's names ([`AttnArgs::from_args`]; `seq` is the new queries per sequence; the
    /// window and causal mask aligned bottom-right; a layout other than `bshd` is refused), then
    /// `page_size` (default 16), `max_blocks` (default `⌈seq_kv / page_size⌉`, 4 pages without),
    /// `num_blocks` (default `batch · max_blocks`), `num_splits` or `kv_splits` (default 1).
    pub fn from_args(a: &NamedArgs) -> Result<PagedProblem, KernelError> {
        let args = AttnArgs::from_args(a)?;
        if args.attn.layout != AttnLayout::Bshd {
            return Err(KernelError::Problem(format!(
                "{NAME}: q is (batch, seq, heads, dim) (bshd)"
            )));
        }
        // Each size or `None` (the CLI's flag not given) for its default.
        let page_size = a.opt_size_or("page_size", None)?.unwrap_or(16);
        let max_blocks = a
            .opt_size_or("max_blocks", None)?
            .unwrap_or_else(|| args.seq_kv.map_or(4, |s| s.div_ceil(page_size.max(1))));
        let num_blocks = a
            .opt_size_or("num_blocks", None)?
            .unwrap_or(args.attn.batch * max_blocks);
        Ok(PagedProblem {
            attn: args.attn,
            causal: args.causal,
            logits: args.logits,
            alibi: args.alibi,
            window: args.window,
            num_blocks,
            page_size,
            max_blocks,
            // `num_splits` (FlashAttention's name, Python's), or the CLI's `kv_splits` (a count:
            // the tail planner's `auto` is attn_fwd's).
            splits: match a.get("num_splits") {
                Some(_) => a.u32_or("num_splits", 1)?,
                None => a.u32_or("kv_splits", 1)?,
            },
            run: RunSettings::from_args(a, &[])?,
        })
    }

    /// The program's configuration for `target` (its key step: [`kv_block_for`]).
    pub fn config(&self, target: Target) -> Result<PagedConfig, KernelError> {
        let dim = u32::try_from(self.attn.dim).unwrap_or(u32::MAX);
        Ok(PagedConfig {
            dim,
            causal: self.causal,
            logits: self.logits,
            kv_block: kv_block_for(self.page_size, dim, target)?,
            splits: self.splits,
            alibi: self.alibi,
            window: self.window,
            pack_gqa: self.packs_gqa(),
        })
    }

    /// Whether the program packs a GQA group's query heads into a block's rows
    /// ([`PagedConfig::pack_gqa`]): decoding's one query per sequence, a group of two or more, no
    /// ALiBi and no window.
    pub fn packs_gqa(&self) -> bool {
        let a = self.attn;
        a.seq == 1 && a.heads_kv > 0 && a.heads > a.heads_kv && !self.alibi && self.window.is_none()
    }

    fn merge_config(&self, cfg: &PagedConfig) -> MergeConfig {
        MergeConfig {
            splits: cfg.splits,
            dim: cfg.dim,
            layout: AttnLayout::Bshd,
            rounding: Rounding::Rtne,
            lse: true,
            strided: false,
        }
    }
}

/// The registry's default configuration: head dim 128, 16 keys a step, no mask, no split.
pub fn default_config() -> PagedConfig {
    PagedConfig {
        dim: 128,
        causal: false,
        logits: Logits::default(),
        kv_block: 16,
        splits: 1,
        alibi: false,
        window: None,
        pack_gqa: false,
    }
}

/// The program for `target`: sm_90a's warp-specialised one ([`crate::attn_paged_hopper`]), the
/// one-wave program elsewhere (the interpreter's); both take the same tensors and parameters.
pub fn build_for(cfg: &PagedConfig, target: Target) -> Result<Kernel, KernelError> {
    match target {
        Target::Sm90a => crate::attn_paged_hopper::build(cfg),
        _ => build(cfg),
    }
}

/// The registry's parser of `attn_paged`'s problem.
pub fn parse(a: &NamedArgs) -> Result<Box<dyn KernelProblem>, KernelError> {
    Ok(Box::new(PagedProblem::from_args(a)?))
}

/// The key lengths of a random-input run, from the seed: sequence 0 the table's capacity, 1 a single
/// key, 2 none, the rest uniform in `0..=capacity`.
pub fn lengths(p: &PagedProblem) -> Vec<usize> {
    let cap = p.max_blocks * p.page_size;
    let mut rng = SmallRng::seed_from_u64(p.run.seed ^ 0x70_6167_6564);
    (0..p.attn.batch)
        .map(|b| match b {
            0 => cap,
            1 => 1.min(cap),
            2 => 0,
            _ => rng.gen_range(0..=cap),
        })
        .collect()
}

impl KernelProblem for PagedProblem {
    fn kernel(&self) -> &'static str {
        NAME
    }

    fn settings(&self) -> &RunSettings {
        &self.run
    }

    fn launch(&self) -> Result<Launch, KernelError> {
        let a = self.attn;
        if a.heads_kv == 0 || !a.heads.is_multiple_of(a.heads_kv) {
            return Err(KernelError::Problem(format!(
                "{NAME}: heads_kv {} must divide heads {}",
                a.heads_kv, a.heads
            )));
        }
        kv_block_for(self.page_size, 16, Target::Cpu)?;
        let q = elements("q", &[a.batch, a.seq, a.heads, a.dim])?;
        let kv = elements(
            "k_cache",
            &[self.num_blocks, self.page_size, a.heads_kv, a.dim],
        )?;
        let mut inputs = vec![
            q,
            kv,
            kv,
            elements("block_table", &[a.batch, self.max_blocks])?,
            a.batch,
        ];
        if self.alibi {
            inputs.push(elements("alibi", &[a.batch, a.heads])?);
        }
        Ok(Launch {
            params: vec![
                param("batch", a.batch)?,
                param("heads", a.heads)?,
                param("heads_kv", a.heads_kv)?,
                param("seq_q", a.seq)?,
                param("num_blocks", self.num_blocks)?,
                param("page_size", self.page_size)?,
                param("max_blocks", self.max_blocks)?,
            ],
            inputs,
            outputs: vec![q, elements("lse", &[a.batch, a.heads, a.seq])?],
        })
    }

    fn plan(&self, target: Target) -> Result<Plan, KernelError> {
        let (p, a) = (self, self.attn);
        positive(
            NAME,
            &[
                ("batch", a.batch),
                ("heads", a.heads),
                ("heads_kv", a.heads_kv),
                ("seq", a.seq),
                ("dim", a.dim),
                ("num_blocks", p.num_blocks),
                ("page_size", p.page_size),
                ("max_blocks", p.max_blocks),
            ],
        )?;
        if p.num_blocks < a.batch * p.max_blocks {
            return Err(KernelError::Problem(format!(
                "{NAME}: a random run gives each sequence its own pages: num_blocks {} must be at \
                 least batch · max_blocks = {}",
                p.num_blocks,
                a.batch * p.max_blocks
            )));
        }
        self.build(target)?;
        let launch = self.launch()?;
        let cap = p.max_blocks * p.page_size;
        let work = lengths(p).iter().try_fold(0u64, |acc, &l| {
            crate::budget::product(&[a.seq as u64, l as u64, a.heads as u64, a.dim as u64, 2])
                .and_then(|w| acc.checked_add(w))
        });
        Ok(Plan {
            launch,
            what: format!(
                "{NAME} at batch={} heads={} heads_kv={} seq={} dim={} page_size={} max_blocks={} \
                 num_blocks={} splits={} alibi={} softcap={:?} window={:?}",
                a.batch,
                a.heads,
                a.heads_kv,
                a.seq,
                a.dim,
                p.page_size,
                p.max_blocks,
                p.num_blocks,
                p.splits,
                p.alibi,
                p.logits.softcap,
                p.window
            ),
            work,
            shape: serde_json::json!({
                "attn": a, "capacity": cap, "page_size": p.page_size, "max_blocks": p.max_blocks,
                "num_blocks": p.num_blocks, "splits": p.splits, "lengths": lengths(p),
                "causal_bottom_right": p.causal, "alibi": p.alibi,
                "softcap": p.logits.softcap, "window": p.window,
            }),
        })
    }

    fn build(&self, target: Target) -> Result<Kernel, KernelError> {
        build_for(&self.config(target)?, target)
    }

    /// The split kernel writing the partials (scratch) and the merge, with `num_splits > 1`.
    fn stages(&self, target: Target, plan: &Plan) -> Result<Vec<Stage>, KernelError> {
        let kernel = self.build(target)?;
        let cfg = self.config(target)?;
        if cfg.splits <= 1 {
            return Ok(vec![Stage {
                kernel,
                launch: plan.launch.clone(),
            }]);
        }
        // Each launch's parameters by name: the split kernel's as the problem's launch gives them,
        // the merge's `batch, heads, seq`.
        let a = self.attn;
        let mut values: Vec<(String, i64)> = kernel
            .params
            .iter()
            .map(|p| p.name.clone())
            .zip(plan.launch.params.iter().copied())
            .collect();
        values.push(("seq".into(), param("seq", a.seq)?));
        let rows = [a.batch, a.heads, a.seq, a.dim];
        split::stages(
            kernel,
            &self.merge_config(&cfg),
            &plan.launch,
            &values,
            rows,
        )
    }

    /// `q`, the caches uniform (scaled) bf16; each sequence's pages distinct, shuffled; [`lengths`];
    /// with ALiBi random slopes (f32, any sign).
    fn draw(&self, kernel: &Kernel, launch: &Launch, rng: &mut SmallRng) -> Vec<Vec<f32>> {
        let mut inputs = draw_operands(self.run.input_scale, kernel, &launch.inputs[..3], rng);
        let mut pages: Vec<usize> = (0..self.num_blocks).collect();
        pages.shuffle(rng);
        inputs.push(
            pages[..self.attn.batch * self.max_blocks]
                .iter()
                .map(|&x| x as f32)
                .collect(),
        );
        inputs.push(lengths(self).iter().map(|&x| x as f32).collect());
        if self.alibi {
            let n = self.attn.batch * self.attn.heads;
            inputs.push(random_scaled(rng, n, DType::F32, self.run.input_scale));
        }
        inputs
    }

    /// `o` then `lse`: the keys gathered through the table, then the f64 per-sequence reference
    /// ([`crate::reference_varlen`]); its `lse [heads, batch·seq]` reordered to `[batch, heads, seq]`.
    fn reference(&self, inputs: &[Vec<f32>]) -> Reference {
        let (a, page) = (self.attn, self.page_size);
        let (b, sq, h, hk, d) = (a.batch, a.seq, a.heads, a.heads_kv, a.dim);
        let lens: Vec<usize> = inputs[4].iter().map(|&x| x as usize).collect();
        let row = hk * d;
        let (mut k, mut v, mut cu_k) = (Vec::new(), Vec::new(), vec![0]);
        for (bi, &l) in lens.iter().enumerate() {
            for j in 0..l {
                let blk = inputs[3][bi * self.max_blocks + j / page] as usize;
                let at = (blk * page + j % page) * row;
                k.extend_from_slice(&inputs[1][at..at + row]);
                v.extend_from_slice(&inputs[2][at..at + row]);
            }
            cu_k.push(cu_k[bi] + l);
        }
        let sh = VarlenShape {
            heads: h,
            heads_kv: hk,
            dim: d,
            cu_q: (0..=b).map(|i| i * sq).collect(),
            cu_k,
            causal: self.causal,
            scale: f64::from(self.logits.scale(d as u32)),
            softcap: self.logits.softcap.map(f64::from),
            window: self.window,
        };
        let q = &inputs[0];
        let slopes = inputs.get(5).filter(|_| self.alibi).map(Vec::as_slice);
        let (o, lse) = forward_alibi(q, &k, &v, &sh, slopes);
        let (ob, lseb) = forward_bf16_baseline_alibi(q, &k, &v, &sh, slopes);
        Reference {
            values: [o, reorder(&lse, b, h, sq)].concat(),
            baseline: Some([ob, reorder(&lseb, b, h, sq)].concat()),
            max_abs_logit: None,
        }
    }

    fn tolerance(&self) -> Tolerance {
        Tolerance::Rule
    }
}

/// A log-sum-exp `[heads, batch·seq]` (the varlen reference's) as `[batch, heads, seq]`.
fn reorder<T: Copy>(l: &[T], b: usize, h: usize, sq: usize) -> Vec<T> {
    (0..b)
        .flat_map(|bi| {
            (0..h).flat_map(move |hh| (0..sq).map(move |i| l[hh * b * sq + bi * sq + i]))
        })
        .collect()
}

/// `(o, lse)` of `p` on the CPU interpreter on the caller's inputs (`q, k_cache, v_cache` as bf16-exact
/// f32, `block_table` `[batch · max_blocks]` and `cache_seqlens` `[batch]` as exact f32 integers, with
/// ALiBi the slopes `[batch, heads]`, finite, [`crate::attn::score::Alibi::check`]): the
/// launches of [`KernelProblem::stages`], the partials passed from the split kernel to the merge.
/// Sizes are checked against the launch before anything runs.
pub fn run_cpu(
    p: &PagedProblem,
    inputs: Vec<Vec<f32>>,
) -> Result<(Vec<f32>, Vec<f32>), KernelError> {
    let launch = p.launch()?;
    let names = [
        "q",
        "k_cache",
        "v_cache",
        "block_table",
        "cache_seqlens",
        "alibi",
    ];
    let names = &names[..launch.inputs.len()];
    if inputs.len() != names.len() {
        return Err(KernelError::Problem(format!(
            "{NAME}: {} inputs, want {}",
            inputs.len(),
            names.len()
        )));
    }
    for ((name, got), want) in names.iter().zip(&inputs).zip(&launch.inputs) {
        if got.len() != *want {
            return Err(KernelError::Problem(format!(
                "{NAME}: {name} has {} elements, want {want}",
                got.len()
            )));
        }
    }
    if p.alibi {
        crate::attn::score::Alibi::check(&inputs[5])?;
    }
    let plan = Plan {
        launch: launch.clone(),
        what: NAME.into(),
        work: None,
        shape: serde_json::Value::Null,
    };
    let mut tensors = inputs;
    for s in p.stages(Target::Cpu, &plan)? {
        let n_in = s.launch.inputs.len();
        let ins = tensors.split_off(tensors.len() - n_in);
        let (out, _) = crate::exec::interpret(&s.kernel, &s.launch.params, ins, &s.launch.outputs)?;
        let mut at = 0;
        tensors = s
            .launch
            .outputs
            .iter()
            .map(|&n| {
                at += n;
                out[at - n..at].to_vec()
            })
            .collect();
    }
    let lse = tensors.pop().unwrap_or_default();
    Ok((tensors.pop().unwrap_or_default(), lse))
}
