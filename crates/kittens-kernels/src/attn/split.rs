//! The partials of a key split (Flash-Decoding): what a split kernel writes per part, the merge
//! that combines them and the two launches of a split run, shared by the dense forward's split (`crate::attn_fwd`'s `split`, whose module docs give
//! the mechanism and the merge) and the paged decode (`crate::attn_paged`).

use super::strides::{named_params, tensor_strides};
use super::AttnLayout;
use crate::problem::{elements, Launch, Stage};
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{Access, Expr, GlobalId, GridOrder, Kernel, KernelBuilder, Rounding, Schedule};
use kittens_tile::{BaseShape, Layout};

/// The split kernel's partial outputs, f32 `[G, b, h, s, d]` (each part's output already divided by
/// its own softmax sum).
pub const O_PARTIAL: &str = "o_partial";
/// The split kernel's partial log-sum-exps, f32 `[G, b, h, s]` (`−∞` where a row kept no key of
/// the part).
pub const LSE_PARTIAL: &str = "lse_partial";
/// The most parts: the merge reads every part's log-sum-exp into registers of its own.
pub const MAX_KV_SPLITS: u32 = 16;

/// Waves (query rows) per block of the merge.
const MERGE_WAVES: u32 = 4;

/// What the merge of a split is built for: `splits` parts of head dimension `dim`, the output `o`
/// in `layout` (caller strides when `strided`) rounded by `rounding`, and the log-sum-exp when `lse`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergeConfig {
    pub splits: u32,
    pub dim: u32,
    pub layout: AttnLayout,
    pub rounding: Rounding,
    pub lse: bool,
    pub strided: bool,
}

/// The partial outputs a split kernel writes and its merge reads (`access`), as
/// [`O_PARTIAL`] and [`LSE_PARTIAL`], contiguous whatever the layout.
pub(crate) fn declare_partials(
    k: &mut KernelBuilder,
    splits: u32,
    [batch, heads, seq]: [&Expr; 3],
    dim: &Expr,
    access: Access,
) -> (GlobalId, GlobalId) {
    let g = ("g", Expr::c(i64::from(splits)));
    let (b, h, s) = (
        ("b", batch.clone()),
        ("h", heads.clone()),
        ("s", seq.clone()),
    );
    let o = k.global(
        O_PARTIAL,
        F32,
        &[
            g.clone(),
            b.clone(),
            h.clone(),
            s.clone(),
            ("d", dim.clone()),
        ],
        access,
    );
    let lse = k.global(LSE_PARTIAL, F32, &[g, b, h, s], access);
    (o, lse)
}

/// The two launches of a split run (the dense forward's, the paged decode's) at a problem's `launch` (its inputs, and its outputs the
/// merge's): `kernel` writing the partials (scratch between the stages, `[batch, heads, seq, dim]`
/// rows per part) and the merge of `merge_cfg`, each with its parameters found by
/// name in `values`.
pub(crate) fn stages(
    kernel: Kernel,
    merge_cfg: &MergeConfig,
    launch: &Launch,
    values: &[(String, i64)],
    [batch, heads, seq, dim]: [usize; 4],
) -> Result<Vec<Stage>, KernelError> {
    let g = merge_cfg.splits as usize;
    let rows = elements(LSE_PARTIAL, &[batch, heads, seq])?;
    let parts = vec![
        elements(O_PARTIAL, &[g, rows, dim])?,
        elements(LSE_PARTIAL, &[g, rows])?,
    ];
    let merge_kernel = build_merge(merge_cfg)?;
    let merge = Launch {
        params: named_params(&merge_kernel, values)?,
        inputs: parts.clone(),
        outputs: launch.outputs.clone(),
    };
    let split = Launch {
        params: named_params(&kernel, values)?,
        outputs: parts,
        ..launch.clone()
    };
    Ok(vec![
        Stage {
            kernel,
            launch: split,
        },
        Stage {
            kernel: merge_kernel,
            launch: merge,
        },
    ])
}

/// The merge of `cfg.splits` partials (`crate::attn_fwd::split`'s module docs): parameters `batch, heads, seq`; inputs
/// [`O_PARTIAL`] and [`LSE_PARTIAL`]; outputs bf16 `o` in `cfg.layout` (rounded by `cfg.rounding`)
/// and, with `cfg.lse`, f32 `lse [b, h, seq]`. One query row per wave, its `d` columns a strip.
pub(crate) fn build_merge(cfg: &MergeConfig) -> Result<Kernel, KernelError> {
    let (g, d) = (cfg.splits, cfg.dim);
    if !(2..=MAX_KV_SPLITS).contains(&g) || d == 0 || d % 8 != 0 {
        return Err(KernelError::Config(format!(
            "attn_fwd merge: {g} parts (2 to {MAX_KV_SPLITS}) of head dimension {d} (a multiple of 8)"
        )));
    }
    let lse_name = if cfg.lse { "_lse" } else { "" };
    let strided = if cfg.strided { "_strided" } else { "" };
    let mut k = KernelBuilder::new(
        &format!("attn_fwd_merge{g}{lse_name}{strided}"),
        Schedule::Plain { waves: MERGE_WAVES },
    );
    let [batch, heads, seq] = ["batch", "heads", "seq"].map(|n| k.param(n));
    let dim = Expr::c(i64::from(d));
    let (o_part, lse_part) =
        declare_partials(&mut k, g, [&batch, &heads, &seq], &dim, Access::Read);
    let dims = [
        ("b", batch.clone()),
        ("h", heads.clone()),
        ("s", seq.clone()),
        ("d", dim.clone()),
    ];
    let strides = tensor_strides(&mut k, cfg.strided, cfg.layout, "o", (&heads, &seq, &dim));
    let o = k.global_strided("o", Bf16, &dims, strides, Access::Write);
    let lse = cfg
        .lse
        .then(|| k.global("lse", F32, &dims[..3], Access::Write));
    let rows = i64::from(MERGE_WAVES);
    k.grid(vec![batch, heads, seq.ceil_div(rows)], GridOrder::RowMajor);
    let (b, h, row) = (k.block(0), k.block(1), k.block(2) * rows + k.wave());

    let acc = k.tile("acc", F32, 1, d, Layout::Row, BaseShape::STRIP);
    let part = k.tile("part", F32, 1, d, Layout::Row, BaseShape::STRIP);
    let scalar = |k: &mut KernelBuilder, name: &str| k.row_vec(name, acc, F32);
    let lse_s: Vec<_> = (0..g).map(|s| scalar(&mut k, &format!("lse{s}"))).collect();
    let [max, w, sum, lse_v] = ["max", "w", "sum", "lse_v"].map(|n| scalar(&mut k, n));
    let at = |s: u32| Expr::c(i64::from(s));
    for (s, &l) in (0..g).zip(&lse_s) {
        let src = k.gview(
            lse_part,
            vec![at(s), b.clone(), h.clone(), row.clone()],
            3,
            0,
            1,
            1,
        );
        k.load_global(l, src);
    }
    // The largest part's log-sum-exp, floored so that a row no part kept a key of (all −∞) gets
    // weights exp(−∞) = 0 rather than exp(−∞ + ∞) = NaN.
    k.copy(max, lse_s[0]);
    for &l in &lse_s[1..] {
        k.max(max, max, l);
    }
    k.max(max, max, f32::MIN);
    k.zero(sum);
    k.zero(acc);
    for (s, &l) in (0..g).zip(&lse_s) {
        k.sub(w, l, max);
        k.exp(w, w); // exp(lse_s − max) ≤ 1
        k.add(sum, sum, w);
        let src = k.gview(
            o_part,
            vec![at(s), b.clone(), h.clone(), row.clone(), Expr::c(0)],
            3,
            4,
            1,
            d,
        );
        k.load_global(part, src);
        k.mul_row(part, part, w);
        k.add(acc, acc, part);
    }
    // lse = max + ln Σ exp(lse_s − max): −∞ when no part kept a key (the sum is 0).
    k.log(lse_v, sum);
    k.add(lse_v, lse_v, max);
    // O = Σ_s exp(lse_s − lse)·O_s; a zero sum (and output) stays 0.
    k.max(sum, sum, f32::MIN_POSITIVE);
    k.div(w, 1.0f32, sum);
    k.mul_row(acc, acc, w);
    k.rounding = cfg.rounding;
    k.store(
        k.gview(
            o,
            vec![b.clone(), h.clone(), row.clone(), Expr::c(0)],
            2,
            3,
            1,
            d,
        ),
        acc,
    );
    k.rounding = Rounding::Rtne;
    if let Some(lse) = lse {
        k.store(k.gview(lse, vec![b, h, row], 2, 1, 1, 1), lse_v);
    }
    Ok(k.finish()?)
}
