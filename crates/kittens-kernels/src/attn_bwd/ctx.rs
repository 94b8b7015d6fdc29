//! What the backward's key blocks and query blocks share (`schedule.rs` builds both, `key_block.rs`
//! holds the key block's steps): the tensors and parameters in declaration order ([`PlainIo`]), the
//! block's batch, KV head and shared rings with the statistics and softmax helpers over them
//! ([`Ctx`]), and the sizes of the log-sum-exp tile and the `dO∘O` chunks.

use super::{BwdBlocks, BwdConfig};
use crate::attn::score::Alibi;
use crate::attn::strides::tensor_strides;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{Access, Axis, Expr, GlobalId, KernelBuilder, ReduceOp, RegId};

/// Rows of the zero-stride tile the log-sum-exp is read through (one base tile of the accumulator).
pub(super) const LSE_ROWS: u32 = 16;
/// Columns of one chunk of the `dO∘O` product.
pub(super) const D_CHUNK: u32 = 32;

/// The plain program's tensors and parameters (one launch: every input, O included, and the outputs
/// of its blocks), in declaration order; the Hopper launches declare theirs in `hopper::HopperIo`.
pub(super) struct PlainIo {
    pub batch: Expr,
    pub heads: Expr,
    pub heads_kv: Expr,
    pub seq_q: Expr,
    pub seq_kv: Expr,
    pub q: GlobalId,
    pub k: GlobalId,
    pub v: GlobalId,
    pub o: GlobalId,
    pub d_o: GlobalId,
    pub lse: GlobalId,
    /// The log-sum-exp's gradient ([`BwdConfig::dlse`]), read like `lse`.
    pub dlse: Option<GlobalId>,
    /// The ALiBi slopes ([`BwdConfig::alibi`]).
    pub alibi: Option<Alibi>,
    /// The outputs of the blocks the launch runs ([`BwdConfig::blocks`]).
    pub dq: Option<GlobalId>,
    pub dk: Option<GlobalId>,
    pub dv: Option<GlobalId>,
}

pub(super) fn declare_io(k: &mut KernelBuilder, cfg: &BwdConfig) -> PlainIo {
    let [batch, heads, heads_kv, seq_q, seq_kv] =
        ["batch", "heads", "heads_kv", "seq_q", "seq_kv"].map(|n| k.param(n));
    let dim = Expr::c(i64::from(cfg.dim));
    let tensor = |k: &mut KernelBuilder, name: &str, h: &Expr, s: &Expr, access| -> GlobalId {
        let dims = [
            ("b", batch.clone()),
            ("h", h.clone()),
            ("s", s.clone()),
            ("d", dim.clone()),
        ];
        let st = tensor_strides(k, cfg.strided, cfg.layout, name, (h, s, &dim));
        k.global_strided(name, Bf16, &dims, st, access)
    };
    let q = tensor(k, "q", &heads, &seq_q, Access::Read);
    let kg = tensor(k, "k", &heads_kv, &seq_kv, Access::Read);
    let v = tensor(k, "v", &heads_kv, &seq_kv, Access::Read);
    let o = tensor(k, "o", &heads, &seq_q, Access::Read);
    let d_o = tensor(k, "do", &heads, &seq_q, Access::Read);
    // `[b, h, s]` contiguous, seen as `[b, h, r, s]` with a zero stride along `r`.
    let stat = |k: &mut KernelBuilder, name: &str| {
        k.global_strided(
            name,
            F32,
            &[
                ("b", batch.clone()),
                ("h", heads.clone()),
                ("r", Expr::c(i64::from(LSE_ROWS))),
                ("s", seq_q.clone()),
            ],
            vec![
                &heads * seq_q.clone(),
                seq_q.clone(),
                Expr::c(0),
                Expr::c(1),
            ],
            Access::Read,
        )
    };
    let lse = stat(k, "lse");
    let dlse = cfg.dlse.then(|| stat(k, "dlse"));
    let alibi = cfg.alibi.then(|| Alibi::declare(k, &batch, &heads));
    let (queries, keys) = (
        cfg.blocks != BwdBlocks::Keys,
        cfg.blocks != BwdBlocks::Queries,
    );
    let dq = queries.then(|| tensor(k, "dq", &heads, &seq_q, Access::Write));
    let dk = keys.then(|| tensor(k, "dk", &heads_kv, &seq_kv, Access::Write));
    let dv = keys.then(|| tensor(k, "dv", &heads_kv, &seq_kv, Access::Write));
    PlainIo {
        batch,
        heads,
        heads_kv,
        seq_q,
        seq_kv,
        q,
        k: kg,
        v,
        o,
        d_o,
        lse,
        dlse,
        alibi,
        dq,
        dk,
        dv,
    }
}

/// What both kinds of block share: the tensors, the block's batch and KV head, the rings.
pub(super) struct Ctx {
    pub io: PlainIo,
    pub cfg: BwdConfig,
    pub b: Expr,
    pub hk: Expr,
    pub group: Expr,
    /// Q (key blocks) or K (query blocks).
    pub qk_s: kittens_ir::SharedId,
    /// dO (key blocks) or V (query blocks).
    pub dov_s: kittens_ir::SharedId,
    /// O (key blocks).
    pub o_s: kittens_ir::SharedId,
    /// `exp(x) = exp2(x·log2 e)`; `c = log2(e)·scale` on the unscaled scores (`log2(e)` on capped
    /// logits).
    pub c: f32,
    /// The softmax scale, which dQ and dK take on their f32 accumulators.
    pub scale: f32,
}

impl Ctx {
    /// `rows` rows of head `h` of tensor `g` from position `s0`, all `dim` columns.
    pub fn view(
        &self,
        k: &KernelBuilder,
        g: GlobalId,
        h: &Expr,
        s0: Expr,
        rows: u32,
    ) -> kittens_ir::GlobalView {
        k.gview(
            g,
            vec![self.b.clone(), h.clone(), s0, Expr::c(0)],
            2,
            3,
            rows,
            self.cfg.dim,
        )
    }

    /// The log-sum-exp of `n` queries of head `h` from `q0`, times log2(e), into `lse_c` (a column
    /// vector of a score tile), through the zero-stride tile `lse_t`.
    pub fn load_lse(
        &self,
        k: &mut KernelBuilder,
        lse_t: RegId,
        lse_c: RegId,
        h: &Expr,
        q0: &Expr,
        n: u32,
    ) {
        let view = k.gview(
            self.io.lse,
            vec![self.b.clone(), h.clone(), Expr::c(0), q0.clone()],
            2,
            3,
            LSE_ROWS,
            n,
        );
        k.load_global(lse_t, view);
        k.reduce(Axis::Cols, ReduceOp::Max, lse_c, lse_t, None);
        k.mul(lse_c, lse_c, std::f32::consts::LOG2_E);
    }

    /// With [`BwdConfig::dlse`]: `d_c −= dlse` of the same `n` queries (the preprocessing's fold, after
    /// `d_c` holds `rowsum(dO∘O)`), through `lse_t` as scratch into `dl_c`.
    #[allow(clippy::too_many_arguments)]
    pub fn fold_dlse(
        &self,
        k: &mut KernelBuilder,
        (lse_t, dl_c, d_c): (RegId, Option<RegId>, RegId),
        h: &Expr,
        q0: &Expr,
        n: u32,
    ) {
        let (Some(g), Some(dl_c)) = (self.io.dlse, dl_c) else {
            return;
        };
        let view = k.gview(
            g,
            vec![self.b.clone(), h.clone(), Expr::c(0), q0.clone()],
            2,
            3,
            LSE_ROWS,
            n,
        );
        k.load_global(lse_t, view);
        k.reduce(Axis::Cols, ReduceOp::Max, dl_c, lse_t, None);
        k.sub(d_c, d_c, dl_c);
    }

    /// `Pᵀ = exp(Sᵀ·scale − lse)` in place on the f32 scores (masked entries are −∞ and become 0),
    /// and `dSᵀ = Pᵀ∘(dPᵀ − D)` in place on `dp`; `capped`: `s` holds capped logits and `dp`
    /// already `(dPᵀ − D)` times the cap's derivative (`crate::attn::score::Logits::cap_t_with_grad`).
    /// With ALiBi: head `h`'s slope into `slope` (a column vector of the transposed score tile
    /// `s`, one query per column, as the softmax's statistics), through `s` itself, dead here.
    pub fn load_slope(&self, k: &mut KernelBuilder, s: RegId, slope: Option<RegId>, h: &Expr) {
        if let (Some(a), Some(v)) = (&self.io.alibi, slope) {
            let (logits, dim) = (&self.cfg.logits, self.cfg.dim);
            a.load(k, (&self.b, h), s, (v, Axis::Cols), logits, dim);
        }
    }

    /// With ALiBi: the bias on the transposed scores `s` (keys from `k0` per row, queries from
    /// `q0` per column), after any cap.
    pub fn alibi(
        &self,
        k: &mut KernelBuilder,
        s: RegId,
        slope: Option<RegId>,
        k0: &Expr,
        q0: &Expr,
    ) {
        if let Some(v) = slope {
            let q = q0 + (&self.io.seq_kv - self.io.seq_q.clone());
            Alibi::add(k, s, v, k0, &q);
        }
    }

    pub fn probs_and_ds(
        &self,
        k: &mut KernelBuilder,
        s: RegId,
        dp: RegId,
        lse_c: RegId,
        d: RegId,
        capped: bool,
    ) {
        k.mul(s, s, self.c);
        k.sub_col(s, s, lse_c);
        k.exp2(s, s);
        if !capped {
            k.sub_col(dp, dp, d);
        }
        k.mul(dp, s, dp);
    }
}
