//! How an attention turns a score `q·k` into the softmax's logit: [`Logits`], any softmax scale and an
//! optional soft cap (FlashAttention's `softmax_scale` and `softcap`), shared by the forward, the
//! backward and their f64 references so that each says it once.
//!
//! The logit of a score `x` is `x·scale`, or with a soft cap `cap·tanh(x·scale/cap)` (Gemma 2,
//! Grok: logits bounded by `±cap`). Both are baked into the kernel as constants: the tile language's
//! parameters are integers only (docs/ir.md, `ParamDecl`), so each scale and cap builds its own kernel.
//! The scale still enters on the f32 scores, never on a bf16 operand (`crate::attn_fwd::ping_pong`'s
//! docs say why).
//!
//! The forward's cap is three elementwise ops in place: `x·scale/cap`, the tile language's `tanh`
//! ([`kittens_ir::MapFn::Tanh`]: on CUDA one special-function instruction, `tanh.approx.f32`, as
//! FlashAttention's soft cap; elsewhere `1 − 2/(e^(2u) + 1)`), times `cap`. The backward forms
//! `tanh` from `r = 1/(e^(2u) + 1)` ([`Logits::cap_t_with_grad`], [`Logits::tanh`]): its derivative
//! `1 − tanh² = 4r(1 − r)` needs `r` to full precision where `tanh` is near ±1.
//! A masked score (`−∞`) would become `−cap`, so every schedule applies the cap before its masks.

use crate::attn::Causal;
use crate::KernelError;
use kittens_hw::dtype::DType;
use kittens_ir::{Access, Axis, Expr, GlobalId, KernelBuilder, ReduceOp, RegId};
use std::f32::consts::LOG2_E;
use std::ops::Range;

/// The score-to-logit map of an attention (module docs). `Default`: scale `1/√d`, no cap.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct Logits {
    /// The softmax scale; `None`: `1/√d` (FlashAttention's and PyTorch's default).
    pub scale: Option<f32>,
    /// The soft cap; `None`: logits uncapped (FlashAttention's `softcap=0.0`).
    pub softcap: Option<f32>,
}

impl Logits {
    /// Refuses a scale that is not finite and positive and a cap that is not finite and positive,
    /// naming the argument.
    pub fn check(&self) -> Result<(), KernelError> {
        if let Some(s) = self.scale {
            if !(s.is_finite() && s > 0.0) {
                return Err(KernelError::Problem(format!(
                    "scale: the softmax scale must be finite and positive, got {s}"
                )));
            }
        }
        if let Some(c) = self.softcap {
            if !(c.is_finite() && c > 0.0) {
                return Err(KernelError::Problem(format!(
                    "softcap: the soft cap must be finite and positive (leave it out for none), \
                     got {c}"
                )));
            }
        }
        Ok(())
    }

    /// The scale at head dimension `dim`.
    pub fn scale(&self, dim: u32) -> f32 {
        self.scale.unwrap_or_else(|| 1.0 / (dim as f32).sqrt())
    }

    /// The scale the softmax applies to what [`Self::cap`] leaves in the score tile: the scale
    /// itself without a cap, 1 with one (the capped tile holds logits).
    pub fn softmax_scale(&self, dim: u32) -> f32 {
        match self.softcap {
            Some(_) => 1.0,
            None => self.scale(dim),
        }
    }

    /// With a cap: the f32 scores `s` (unscaled `q·k`) become the capped logits in place. Without
    /// a cap: nothing. Apply before any mask (module docs).
    pub fn cap(&self, k: &mut KernelBuilder, s: RegId, dim: u32) {
        let Some(cap) = self.softcap else { return };
        k.mul(s, s, self.scale(dim) / cap);
        k.tanh(s, s);
        k.mul(s, s, cap);
    }

    /// The backward's [`Self::cap`] on a transposed score tile `s` (a query per column) beside its
    /// `dp = dPᵀ`: `dp` becomes `(dPᵀ − D)·(1 − tanh²)` (`d`: D, a column vector), the chain rule
    /// through the cap applied before P is known, so that no tile holds the derivative (gfx942's
    /// backward is at its 256 VGPRs); the softmax then skips its own `− D`. Returns whether it
    /// capped. `1 − tanh² = 4r·(1 − r)`; `1 − r` loses `r`'s low bits near 1, an absolute error of
    /// about 1e-7 in the derivative.
    pub fn cap_t_with_grad(
        &self,
        k: &mut KernelBuilder,
        s: RegId,
        dim: u32,
        dp: RegId,
        d: RegId,
    ) -> bool {
        let Some(cap) = self.softcap else {
            return false;
        };
        self.cap_r(k, s, dim, cap);
        k.sub_col(dp, dp, d);
        k.mul(dp, dp, s);
        k.sub(s, 1.0f32, s);
        k.mul(dp, dp, s);
        k.mul(dp, dp, 4.0f32);
        // cap·tanh(u) = cap·(1 − 2r) = 2cap·(1 − r) − cap.
        k.mul(s, s, 2.0 * cap);
        k.sub(s, s, cap);
        true
    }

    /// With a cap: the f32 scores `s` become `tanh(x·scale/cap)` in place and the cap is returned
    /// (the Hopper backward forms the logits `cap·tanh` and the derivative `1 − tanh²` in tiles
    /// of its own choosing, `crate::attn_bwd`'s `hopper`). Without a cap: nothing, `None`.
    pub fn tanh(&self, k: &mut KernelBuilder, s: RegId, dim: u32) -> Option<f32> {
        let cap = self.softcap?;
        self.cap_r(k, s, dim, cap);
        k.mul(s, s, -2.0f32);
        k.add(s, s, 1.0f32);
        Some(cap)
    }

    /// `s := r = 1 / (exp(2u) + 1)` with `u = x·scale/cap`, so that `tanh(u) = 1 − 2r`.
    fn cap_r(&self, k: &mut KernelBuilder, s: RegId, dim: u32, cap: f32) {
        k.mul(s, s, 2.0 * LOG2_E * self.scale(dim) / cap);
        k.exp2(s, s);
        k.add(s, s, 1.0f32);
        k.div(s, 1.0f32, s);
    }

    /// The scale in f64: the given f32 exactly, or `1/√d` in f64.
    fn scale_f64(&self, dim: usize) -> f64 {
        self.scale
            .map_or_else(|| 1.0 / (dim as f64).sqrt(), f64::from)
    }

    /// The exact logit of the score `x` at head dimension `dim`.
    pub fn f64(&self, x: f64, dim: usize) -> f64 {
        let s = x * self.scale_f64(dim);
        match self.softcap {
            Some(c) => f64::from(c) * (s / f64::from(c)).tanh(),
            None => s,
        }
    }

    /// `d logit / dx` of [`Self::f64`].
    pub fn grad_f64(&self, x: f64, dim: usize) -> f64 {
        let scale = self.scale_f64(dim);
        match self.softcap {
            Some(c) => {
                let t = (x * scale / f64::from(c)).tanh();
                scale * (1.0 - t * t)
            }
            None => scale,
        }
    }

    /// The logit the PyTorch way in f32 (`x·scale`, then `cap·tanh(·/cap)`), for the baselines.
    pub fn f32(&self, x: f32, dim: usize) -> f32 {
        let s = x * self.scale(dim as u32);
        match self.softcap {
            Some(c) => c * (s / c).tanh(),
            None => s,
        }
    }

    /// `d logit / dx` in f32, for the baselines.
    pub fn grad_f32(&self, x: f32, dim: usize) -> f32 {
        let scale = self.scale(dim as u32);
        match self.softcap {
            Some(c) => {
                let t = (x * scale / c).tanh();
                scale * (1.0 - t * t)
            }
            None => scale,
        }
    }
}

/// A sliding window (FlashAttention's `window_size=(left, right)`, Mistral's and Gemma's local
/// attention): query `i` keeps key `j` when `i + δ − left ≤ j ≤ i + δ + right`, `δ = seq_kv − seq_q`
/// (FlashAttention's bottom-right alignment, whatever the causal mask's), a side of `-1` being
/// unbounded. With a causal mask both apply (FlashAttention's `causal=True` is the window's right
/// side at 0). Key blocks wholly outside the window are not walked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Window {
    pub left: i64,
    pub right: i64,
}

impl Window {
    /// The window `(left, right)`, each side at least `-1`, refused naming `window` otherwise.
    pub fn new(left: i64, right: i64) -> Result<Window, KernelError> {
        for (side, v) in [("left", left), ("right", right)] {
            if v < -1 {
                return Err(KernelError::Problem(format!(
                    "window: the {side} side must be -1 (unbounded) or at least 0, got {v}"
                )));
            }
        }
        Ok(Window { left, right })
    }

    /// [`Self::new`]'s check on a window built field by field.
    pub fn check(&self) -> Result<(), KernelError> {
        Window::new(self.left, self.right).map(|_| ())
    }

    /// The offset of the window's last key (`j ≤ i + offset`) at lengths `seq_q`, `seq_kv`; `None`
    /// when unbounded on the right.
    pub fn end(&self, seq_q: i64, seq_kv: i64) -> Option<i64> {
        (self.right >= 0).then(|| seq_kv - seq_q + self.right)
    }

    /// The offset of the window's first key (`j ≥ i + offset`); `None` when unbounded on the left.
    pub fn start(&self, seq_q: i64, seq_kv: i64) -> Option<i64> {
        (self.left >= 0).then(|| seq_kv - seq_q - self.left)
    }

    /// [`Self::end`] as an expression over the kernel's lengths.
    pub fn end_expr(&self, seq_q: &Expr, seq_kv: &Expr) -> Option<Expr> {
        (self.right >= 0).then(|| seq_kv - seq_q.clone() + self.right)
    }

    /// [`Self::start`] as an expression over the kernel's lengths.
    pub fn start_expr(&self, seq_q: &Expr, seq_kv: &Expr) -> Option<Expr> {
        (self.left >= 0).then(|| seq_kv - seq_q.clone() - self.left)
    }
}

/// ALiBi (Press et al., "Train Short, Test Long"; FlashAttention's `alibi_slopes`): query `i` and key
/// `j` get the bias `−slope·|i + seq_kv − seq_q − j|` added to their scaled logit (after a soft
/// cap), one slope per batch and head. FlashAttention's kernel adds `slope·j` instead under a causal
/// mask, the same softmax (a constant per row), its log-sum-exp larger by `slope·(i + seq_kv −
/// seq_q)`; this form is the one its references and the f64 references here use everywhere.
///
/// The slopes are a device tensor, `alibi` (f32 `[b, h]`, contiguous), so any values run without
/// rebuilding the kernel. A program reads its head's slope once, before its key loop, through a
/// view whose rows and columns have stride 0 ([`Alibi::declare`], [`Alibi::load`]): every element
/// of a score-shaped tile holds it, and a row maximum puts it in a row vector of that tile, which
/// [`kittens_ir::Op::Alibi`] broadcasts.
pub struct Alibi {
    /// The slopes tensor.
    pub tensor: GlobalId,
}

impl Alibi {
    /// The extent of the zero-stride dimensions: past any score tile's rows and columns.
    const SPAN: i64 = 1024;

    /// Declares `alibi`, f32 `[b, h]` read as `[b, h, r, c]` with `r` and `c` of stride 0.
    pub fn declare(k: &mut KernelBuilder, batch: &Expr, heads: &Expr) -> Alibi {
        let dims = [
            ("b", batch.clone()),
            ("h", heads.clone()),
            ("r", Expr::c(Self::SPAN)),
            ("c", Expr::c(Self::SPAN)),
        ];
        let strides = vec![heads.clone(), Expr::c(1), Expr::c(0), Expr::c(0)];
        let tensor = k.global_strided("alibi", DType::F32, &dims, strides, Access::Read);
        Alibi { tensor }
    }

    /// Head `h` of batch `b`'s slope into `slope`, a vector (of `axis`) of the f32 tile `scratch`
    /// (whose value is dead here: the score tile before its first product), negated and divided by the
    /// softmax's scale: the tiles hold the logits over that scale (`logits.softmax_scale`, 1
    /// after a cap), so that [`Self::add`] adds `−slope·|i − j|` to the logits.
    pub fn load(
        &self,
        k: &mut KernelBuilder,
        (b, h): (&Expr, &Expr),
        scratch: RegId,
        (slope, axis): (RegId, Axis),
        logits: &Logits,
        dim: u32,
    ) {
        let (rows, cols) = k.reg_shape(scratch);
        let origin = vec![b.clone(), h.clone(), Expr::c(0), Expr::c(0)];
        let src = k.gview(self.tensor, origin, 2, 3, rows, cols);
        k.load_global(scratch, src);
        k.reduce(axis, ReduceOp::Max, slope, scratch, None);
        k.mul(slope, slope, -1.0 / logits.softmax_scale(dim));
    }

    /// The bias on the tile `s` (`slope` one of its vectors, either axis) whose element `(i, j)` is
    /// at `(row0 + i, col0 + j)` of the
    /// distance `row − col` (queries per row: `row0` the first query plus `seq_kv − seq_q`, `col0`
    /// the first key; keys per row: the other way round, the distance being symmetric).
    pub fn add(k: &mut KernelBuilder, s: RegId, slope: RegId, row0: &Expr, col0: &Expr) {
        k.alibi(s, slope, row0.clone(), col0.clone());
    }

    /// The exact bias of query `i` and key `j` at lengths `seq_q`, `seq_kv`.
    pub fn f64(slope: f64, seq_q: usize, seq_kv: usize, i: usize, j: usize) -> f64 {
        let d = (i as i64 + seq_kv as i64 - seq_q as i64 - j as i64).unsigned_abs();
        -slope * d as f64
    }

    /// Refuses a slope that is not finite, naming the argument.
    pub fn check(slopes: &[f32]) -> Result<(), KernelError> {
        match slopes.iter().position(|s| !s.is_finite()) {
            Some(i) => Err(KernelError::Problem(format!(
                "alibi_slopes: every slope must be finite, got {} at index {i}",
                slopes[i]
            ))),
            None => Ok(()),
        }
    }
}

/// The tighter of two "key `j ≤ i + offset`" bounds (`None`: unbounded).
pub fn min_offset(a: Option<Expr>, b: Option<Expr>) -> Option<Expr> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What an attention computes beyond its shape and causal mask, as the references take it: its
/// logits, its window and its ALiBi slopes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AttnOptions {
    pub logits: Logits,
    pub window: Option<Window>,
    /// ALiBi's slopes ([`Alibi`]), `[batch, heads]` row-major; `None`: no bias.
    pub alibi: Option<Vec<f32>>,
}

impl AttnOptions {
    /// Refuses a softmax scale, soft cap, window or ALiBi slope out of range, naming it.
    pub fn check(&self) -> Result<(), KernelError> {
        self.logits.check()?;
        self.window.map_or(Ok(()), |w| w.check())?;
        self.alibi.as_deref().map_or(Ok(()), Alibi::check)
    }

    /// The ALiBi bias of query `i` and key `j` of head `h` (of `heads`) of batch `b` (0 without
    /// slopes).
    pub fn bias(
        &self,
        (b, h, heads): (usize, usize, usize),
        seq: (usize, usize),
        i: usize,
        j: usize,
    ) -> f64 {
        self.alibi.as_deref().map_or(0.0, |s| {
            Alibi::f64(f64::from(s[b * heads + h]), seq.0, seq.1, i, j)
        })
    }

    /// The keys query `i` keeps (of `seq_kv`, with `seq_q` queries) under `causal` and the window:
    /// a range, empty when none.
    pub fn keys(&self, causal: Causal, seq_q: usize, seq_kv: usize, i: usize) -> Range<usize> {
        kept_keys(causal.offset(seq_q, seq_kv), self.window, seq_q, seq_kv, i)
    }
}

impl std::str::FromStr for Window {
    type Err = String;
    /// `left,right` (as FlashAttention's `window_size`), each side `-1` or at least 0.
    fn from_str(s: &str) -> Result<Self, String> {
        let parse = |x: Option<&str>| x.and_then(|x| x.trim().parse::<i64>().ok());
        let mut it = s.split(',');
        match (parse(it.next()), parse(it.next()), it.next()) {
            (Some(l), Some(r), None) => Window::new(l, r).map_err(|e| e.to_string()),
            _ => Err(format!(
                "window: `{s}` is not `left,right` (two integers, -1 for an unbounded side)"
            )),
        }
    }
}

/// What every attention problem names (`attn_fwd::problem::AttnProblem`,
/// `attn_bwd::problem::BwdProblem`, `attn_varlen_problem::VarlenProblem` embed it), read from named
/// arguments in one place: the shape, the keys when
/// they differ from the queries, the mask, the logits and the window.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct AttnArgs {
    pub attn: super::AttnShape,
    pub seq_kv: Option<usize>,
    pub causal: bool,
    pub bottom_right: bool,
    pub logits: Logits,
    pub window: Option<Window>,
    /// ALiBi ([`Alibi`]): the slopes are an input tensor of the run.
    pub alibi: bool,
}

impl AttnArgs {
    /// `batch`, `heads`, `heads_kv`, `seq`, `seq_kv`, `dim`, `layout`, `causal`, `bottom_right`,
    /// `scale`, `softcap`, `window` (`(left, right)` or `"left,right"`), `alibi`.
    pub fn from_args(a: &crate::problem::NamedArgs) -> Result<AttnArgs, KernelError> {
        let d = AttnArgs::default();
        Ok(AttnArgs {
            attn: super::AttnShape {
                heads_kv: a.size_or("heads_kv", d.attn.heads_kv)?,
                ..super::AttnShape::from_args(a, d.attn)?
            },
            seq_kv: a.opt_size_or("seq_kv", None)?,
            causal: a.flag_or("causal", false)?,
            bottom_right: a.flag_or("bottom_right", false)?,
            logits: Logits {
                scale: a.opt_f32_or("scale", None)?,
                softcap: a.opt_f32_or("softcap", None)?,
            },
            window: a.opt_parse("window")?,
            alibi: a.flag_or("alibi", false)?,
        })
    }
}

/// The keys query `i` keeps (of `seq_kv`, with `seq_q` queries): `j ≤ i + offset` under a causal mask
/// (`offset`: [`Causal::offset`]), and within `window` (bottom-right aligned); a range, empty when none.
/// The one rule the f64 references of the dense and the packed attention share.
pub fn kept_keys(
    causal_offset: Option<i64>,
    window: Option<Window>,
    seq_q: usize,
    seq_kv: usize,
    i: usize,
) -> Range<usize> {
    let (nq, nk, i) = (seq_q as i64, seq_kv as i64, i as i64);
    let mut end = nk;
    let mut start = 0;
    if let Some(off) = causal_offset {
        end = end.min(i + off + 1);
    }
    if let Some(w) = window {
        if let Some(e) = w.end(nq, nk) {
            end = end.min(i + e + 1);
        }
        if let Some(s) = w.start(nq, nk) {
            start = start.max(i + s);
        }
    }
    let start = start.clamp(0, nk);
    start as usize..end.clamp(start, nk) as usize
}
