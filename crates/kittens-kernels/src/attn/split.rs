//! The partials of a key split (Flash-Decoding): what a split kernel writes per part and the merge
//! reads, shared by the dense forward's split (`crate::attn_fwd`'s `split`, whose module docs give
//! the mechanism and the merge) and the paged decode (`crate::attn_paged`).

use kittens_hw::dtype::DType::F32;
use kittens_ir::{Access, Expr, GlobalId, KernelBuilder};

/// The split kernel's partial outputs, f32 `[G, b, h, s, d]` (each part's output already divided by
/// its own softmax sum).
pub const O_PARTIAL: &str = "o_partial";
/// The split kernel's partial log-sum-exps, f32 `[G, b, h, s]` (`−∞` where a row kept no key of
/// the part).
pub const LSE_PARTIAL: &str = "lse_partial";
/// The most parts: the merge reads every part's log-sum-exp into registers of its own.
pub const MAX_KV_SPLITS: u32 = 16;

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
