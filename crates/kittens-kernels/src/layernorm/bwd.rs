//! The backward of the fused dropout + residual + layernorm (`super::build`):
//!
//! ```text
//! h    = residual + keep·x,   keep = [u ≥ p] / (1 − p)   (u: the forward's Philox uniform)
//! x̂    = (h − mean(h)) · rstd,   g = dy · weight
//! dh   = rstd · (g − mean(g) − x̂ · mean(g · x̂)) + dh_out     (dh_out: the new residual's gradient)
//! dresidual = dh,   dx = keep · dh
//! dweight = Σ_rows dy · x̂,   dbias = Σ_rows dy
//! ```
//!
//! Nothing of the forward is stored: `h`, `mean` and `rstd` are recomputed in f32 from `x` and
//! `residual` (the row is in registers anyway), and the dropout mask is drawn again from the same
//! Philox stream (`kittens_ir::philox`, keyed by `seed` and `offset`, index `row·D + col`), as
//! FlashAttention's dropout backward regenerates its mask. The layout and the two launches are
//! rmsnorm's backward's (`crate::rmsnorm`): each wave holds its share of a row in strips (walked in
//! [`chunks`] of one 16-byte chunk per lane), a grid of a few blocks per SM loops over the rows
//! ([`RowLoop`], as Apex's and Liger-Kernel's layernorm backwards do) with each wave keeping its
//! partial sums of `dweight` and `dbias` in registers, and writes them to transposed scratches
//! (`[D, parts]`), which the second launch ([`build_dweight`]) sums by rows (FlashAttention-2 §3.2's
//! split reduction).

use super::LayerNormConfig;
use crate::rows::{sum_partials, Frame, Partials, RowLoop, Staged};
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{
    Access, Expr, GlobalId, GridOrder, Kernel, KernelBuilder, MaskRule, RegId, Schedule,
};
use kittens_tile::{BaseShape, Layout};

/// The most row chunks (one 16-byte chunk of each tensor per lane, [`chunks`]) a wave's share of a
/// row is walked in: two on 32-lane waves at D = 8192 (16 waves of 512 columns).
pub const MAX_CHUNKS: u32 = 2;

/// Chunks of `lanes × 8` columns in one wave's share of a row. A share of one chunk is held whole
/// (every input loaded once, in one run of loads, the mask drawn once); a longer share keeps only its
/// `x̂` and the partial sums across the row and reads `dy`, `weight` again (from cache) and draws the
/// mask again for the outputs, which keeps a lane's live values under the 128 registers a 512-thread
/// block leaves it on NVIDIA.
pub fn chunks(cfg: &LayerNormConfig) -> u32 {
    cfg.slice() / (cfg.lanes * 8)
}

/// Rows of the scratches `dw_partial` and `db_partial` for `rows` rows (one per row group of a block of
/// the first launch).
pub fn parts_at(cfg: &LayerNormConfig, lp: &RowLoop, rows: usize) -> Option<usize> {
    lp.parts_at(rows, cfg.rows_per_block())
}

/// The backward's first launch. Parameters `rows, seed_lo, seed_hi, offset_lo, offset_hi` (the
/// forward's); tensors in launch order: `dy` (the normalised rows' gradient), `dh` (the new
/// residual's), `x`, `residual` (bf16 `[rows, D]`), `weight` (bf16 `[D]`), then the outputs `dx`,
/// `dresidual` (bf16 `[rows, D]`), `dw_partial` and `db_partial` (f32 `[D, parts]`, [`parts_at`]).
/// With [`LayerNormConfig::from_h`] the forward's `h` takes the place of `x` and `residual`, and
/// without dropout `dx` is not an output (it equals `dresidual`).
/// The rows are walked as `lp` says.
pub fn build_bwd(cfg: &LayerNormConfig, lp: &RowLoop) -> Result<Kernel, KernelError> {
    check(cfg)?;
    let dim = cfg.dim;
    let form = if cfg.from_h { "_h" } else { "" };
    let mut k = KernelBuilder::new(
        &format!("layernorm_bwd{form}_d{dim}"),
        Schedule::Plain { waves: cfg.waves },
    );
    let rows = k.param("rows");
    let seed = [k.param_word("seed_lo"), k.param_word("seed_hi")];
    let offset = [k.param_word("offset_lo"), k.param_word("offset_hi")];
    let d = Expr::c(i64::from(dim));
    let m = [("row", rows.clone()), ("col", d.clone())];
    let from_h = cfg.from_h;
    let [dy, dh_out] =
        ["dy", "dh"].map(|t| cfg.strides.global(&mut k, t, &rows, dim, Access::Read));
    // `x` is the forward's h itself where the caller passes it (`LayerNormConfig::from_h`).
    let x = cfg.strides.global(
        &mut k,
        if from_h { "h" } else { "x" },
        &rows,
        dim,
        Access::Read,
    );
    let res = (!from_h).then(|| {
        cfg.strides
            .global(&mut k, "residual", &rows, dim, Access::Read)
    });
    // One row read by every row, through a zero row stride.
    let w = k.global_strided(
        "weight",
        Bf16,
        &m,
        vec![Expr::c(0), Expr::c(1)],
        Access::Read,
    );
    let dropout = cfg.p > 0.0;
    // From h without dropout, dx is dresidual: one output.
    let dx = (!from_h || dropout).then(|| k.global("dx", Bf16, &m, Access::Write));
    let dres = k.global("dresidual", Bf16, &m, Access::Write);
    let rpb = cfg.rows_per_block();
    let parts = lp.parts(&rows, rpb);
    let scratch = |k: &mut KernelBuilder, name: &str| {
        k.global_strided(
            name,
            F32,
            &[("part", parts.clone()), ("col", d.clone())],
            vec![Expr::c(1), parts.clone()],
            Access::Write,
        )
    };
    let dw = scratch(&mut k, "dw_partial");
    let db = scratch(&mut k, "db_partial");
    k.grid(vec![lp.grid(&rows, rpb)], GridOrder::RowMajor);
    k.resident_blocks(lp.resident);
    if lp.index32 {
        k.index32();
    }
    let nc = chunks(cfg);
    let cw = cfg.lanes * 8;
    let slots = if lp.one_sum { 8 } else { 4 };
    let f = Frame::split(&mut k, cfg.waves_per_row, rpb, cfg.slice(), slots);

    let strip =
        |k: &mut KernelBuilder, n: &str| k.tile(n, F32, 1, cw, Layout::Row, BaseShape::STRIP);
    let per_chunk = |k: &mut KernelBuilder, n: &str| -> Vec<RegId> {
        (0..nc).map(|c| strip(k, &format!("{n}{c}"))).collect()
    };
    // Across the row: x̂ and the partial sums of dweight and dbias, per chunk.
    let h = per_chunk(&mut k, "x_hat");
    let shared_acc = lp.acc_in_shared(2 * cfg.waves * nc * cw * 4);
    let acc_w = Partials::new(&mut k, "dw", (nc, cw), cfg.waves, shared_acc);
    let acc_b = Partials::new(&mut k, "db", (nc, cw), cfg.waves, shared_acc);
    // A one-chunk share with `lp.prefetch` (`RowLoop::ahead`): x and residual (level 1) or every
    // input (level 2, without dropout) of the next row are loaded into raw bf16 words while this row is worked on.
    // dy and dh stay bf16 (read as f32 where used): half the registers of f32 strips.
    // With `lp.late_loads` a one-chunk share takes the longer shares' order (dy, weight and dh
    // loaded where used) and at most level 1.
    let hold = nc == 1 && !lp.late_loads;
    // With dropout at most level 1: the mask's Philox state leaves no room for every input of the next
    // row (level 2 spills at D = 3080, p = 0.1 on sm_90a).
    let cap = if cfg.p > 0.0 || !hold { 1 } else { 2 };
    let ahead = lp.ahead(cfg.slice(), cfg.lanes).min(cap) as usize;
    let raw =
        |k: &mut KernelBuilder, n: &str| k.tile(n, Bf16, 1, cw, Layout::Row, BaseShape::STRIP);
    // One chunk at a time.
    let [g, r, keep] = ["g", "r", "keep"].map(|n| strip(&mut k, n));
    let [dyt, dht] = ["dy", "dh"].map(|n| raw(&mut k, n));
    // (destination this step, source tensor) of each input; the first `n_ahead` through `next`.
    let mut inputs = vec![(h[0], x, "next_x")];
    inputs.extend(res.map(|res| (r, res, "next_r")));
    let first = inputs.len();
    inputs.extend([(dyt, dy, "next_dy"), (dht, dh_out, "next_dh")]);
    let n_ahead = [0, first, inputs.len()][ahead];
    let next: Vec<RegId> = inputs[..n_ahead]
        .iter()
        .map(|&(_, _, n)| raw(&mut k, n))
        .collect();
    let wv = k.col_vec("weight", g, Bf16);
    let [mean, inv, c1, c2, part] =
        ["mean", "rstd", "mean_g", "mean_gx", "part"].map(|n| k.row_vec(n, g, F32));
    let inv_d = 1.0 / dim as f32;
    let col0 = |c: u32| f.col0.clone() + i64::from(c * cw);
    let view = |k: &KernelBuilder, g: GlobalId, row: &Expr, c: u32| {
        k.gview(g, vec![row.clone(), col0(c)], 0, 1, 1, cw)
    };
    // keep = [uniform ≥ p] / (1 − p), the forward's draw at stream index row·D + col.
    let draw_keep = |k: &mut KernelBuilder, row: &Expr, c: u32| {
        let at = row.clone() * d.clone() + col0(c);
        k.random(keep, seed.clone(), offset.clone(), at, d.clone());
        k.ge(keep, keep, cfg.p);
        k.mul(keep, keep, 1.0 / (1.0 - cfg.p));
    };
    // Σ over the chunks of the row sums of `src` (into `dst`, this wave's partial).
    let sum_chunks = |k: &mut KernelBuilder, dst: RegId, c: u32, src: RegId| {
        if c == 0 {
            k.row_sum(dst, src);
        } else {
            k.row_sum(part, src);
            k.add(dst, dst, part);
        }
    };
    // With `lp.stage` (`RowLoop::stage`): x, residual, dy and dh of the rows `depth` steps ahead
    // copied into shared memory asynchronously, read chunk by chunk where used; the weight from
    // global memory (once, for a one-chunk share).
    let n_in = if from_h { 3 } else { 4 };
    let depth = lp.stage_depth(Staged::bytes(n_in, (cfg.slice(), cfg.waves), 1));
    let staged = (depth > 0).then(|| {
        let mut srcs = vec![("x", x)];
        srcs.extend(res.map(|res| ("residual", res)));
        srcs.extend([("dy", dy), ("dh", dh_out)]);
        Staged::new(&mut k, &srcs, (cfg.slice(), cfg.waves, cw), depth)
    });
    // Ring indices of x (or h), residual, dy, dh.
    let (sx, sr, sdy, sdh) = if from_h { (0, 0, 1, 2) } else { (0, 1, 2, 3) };
    acc_w.zero(&mut k);
    acc_b.zero(&mut k);
    let load = |k: &mut KernelBuilder, t: RegId, src: GlobalId, row: &Expr| {
        k.load_global(t, view(k, src, row, 0));
    };
    if let Some(st) = &staged {
        st.prologue(&mut k, &f, lp, (&rows, rpb));
        if hold {
            let row0 = lp.row(&k, &rows, rpb, &Expr::c(0), &f.local);
            load(&mut k, wv, w, &row0);
        }
    }
    if n_ahead > 0 {
        let row0 = lp.row(&k, &rows, rpb, &Expr::c(0), &f.local);
        for (&t, &(_, src, _)) in next.iter().zip(&inputs) {
            load(&mut k, t, src, &row0);
        }
        if hold {
            // The weight is every row's: loaded once.
            load(&mut k, wv, w, &row0);
        }
    }
    k.for_range("step", 0, lp.steps(&rows, rpb), |k, s| {
        // Rows past the end read zero: dy = 0 there, so they add nothing to the partials.
        let row = lp.row(k, &rows, rpb, &s, &f.local);
        // h = residual + keep·x, the forward's sum. A one-chunk share loads every input in one run
        // (all in flight at once), or has some from the previous step; a longer one x and residual,
        // chunk by chunk.
        if n_ahead > 0 {
            for (&n, &(t, _, _)) in next.iter().zip(&inputs) {
                k.copy(t, n);
            }
            if hold {
                for &(t, src, _) in &inputs[n_ahead..] {
                    load(k, t, src, &row);
                }
            }
            let after = lp.row(k, &rows, rpb, &(s.clone() + 1), &f.local);
            for (&t, &(_, src, _)) in next.iter().zip(&inputs) {
                load(k, t, src, &after);
            }
        } else if let Some(st) = &staged {
            st.wait(k);
            if hold {
                let rx = st.read(k, (sx, 0), &s, None);
                let rr = (!from_h).then(|| st.read(k, (sr, 0), &s, None));
                st.read(k, (sdy, 0), &s, Some(dyt));
                st.read(k, (sdh, 0), &s, Some(dht));
                k.wait_shared(0);
                k.copy(h[0], rx);
                if let Some(rr) = rr {
                    k.copy(r, rr);
                }
                st.refill(k, &f, lp, (&rows, rpb), &s);
            }
        } else if hold {
            k.load_global(h[0], view(k, x, &row, 0));
            if let Some(res) = res {
                k.load_global(r, view(k, res, &row, 0));
            }
            k.load_global(dyt, view(k, dy, &row, 0));
            k.load_global(dht, view(k, dh_out, &row, 0));
            k.load_global(wv, view(k, w, &row, 0));
        }
        // Σ h², Σ g and Σ g·h of chunk c (g = dy · w; h centred or not, as the caller decides).
        let chunk_sums = |k: &mut KernelBuilder, c: u32, hc: RegId| {
            k.mul(r, hc, hc);
            sum_chunks(k, inv, c, r);
            if !hold {
                match &staged {
                    Some(st) => {
                        st.read(k, (sdy, c), &s, Some(dyt));
                        k.wait_shared(0);
                    }
                    None => k.load_global(dyt, view(k, dy, &row, c)),
                }
                k.load_global(wv, view(k, w, &row, c));
            }
            k.mul_col(g, dyt, wv);
            sum_chunks(k, c1, c, g);
            k.mul(r, g, hc);
            sum_chunks(k, c2, c, r);
        };
        for c in 0..nc {
            let hc = h[c as usize];
            if !hold && n_ahead == 0 {
                match &staged {
                    Some(st) => {
                        let rx = st.read(k, (sx, c), &s, None);
                        let rr = (!from_h).then(|| st.read(k, (sr, c), &s, None));
                        k.wait_shared(0);
                        k.copy(hc, rx);
                        if let Some(rr) = rr {
                            k.copy(r, rr);
                        }
                    }
                    None => {
                        k.load_global(hc, view(k, x, &row, c));
                        if let Some(res) = res {
                            k.load_global(r, view(k, res, &row, c));
                        }
                    }
                }
            }
            if !from_h {
                if dropout {
                    draw_keep(k, &row, c);
                    k.mul(hc, hc, keep);
                }
                k.add(hc, hc, r);
            }
            sum_chunks(k, mean, c, hc);
            if lp.one_sum {
                // Σ h², Σ g and Σ g·h beside Σ h (`RowLoop::one_sum`), h not yet centred.
                chunk_sums(k, c, hc);
            }
        }
        if lp.one_sum {
            // All four sums at one barrier, in slots 0-3 or 4-7 by the row's parity; var = E[h²] −
            // mean² (kept from going negative by rounding), mean(g·(h − mean)) = E[g·h] − mean·E[g].
            let base = (s.clone() % 2) * 4;
            let slots = [(mean, 0), (inv, 1), (c1, 2), (c2, 3)].map(|(v, i)| (v, base.clone() + i));
            f.totals_at(k, &slots);
            k.mul(mean, mean, inv_d);
            k.mul(part, mean, mean);
            k.mul(inv, inv, inv_d);
            k.sub(inv, inv, part);
            k.max(inv, inv, 0.0);
            k.add(inv, inv, cfg.eps);
            k.rsqrt(inv, inv);
            k.mul(c1, c1, inv_d);
            k.mul(c2, c2, inv_d);
            k.mul(part, mean, c1);
            k.sub(c2, c2, part);
            k.mul(c2, c2, inv);
            for c in 0..nc {
                let hc = h[c as usize];
                k.sub_row(hc, hc, mean);
                k.mask(
                    hc,
                    MaskRule::ColsBelow(d.clone()),
                    row.clone(),
                    col0(c),
                    0.0,
                );
            }
        } else {
            // x̂ = (h − mean) · rstd; columns past D (the strip rounded up) must not count once
            // centred. Σ (h − mean)², mean(g) and mean(g · (h − mean)) meet at one barrier
            // (g = dy · w): mean(g · x̂) is rstd · mean(g · (h − mean)), so the variance needs no
            // barrier of its own.
            f.total(k, mean, 0);
            k.mul(mean, mean, inv_d);
            for c in 0..nc {
                let hc = h[c as usize];
                k.sub_row(hc, hc, mean);
                k.mask(
                    hc,
                    MaskRule::ColsBelow(d.clone()),
                    row.clone(),
                    col0(c),
                    0.0,
                );
                chunk_sums(k, c, hc);
            }
            f.totals(k, &[(inv, 1), (c1, 2), (c2, 3)]);
            k.mul(inv, inv, inv_d);
            k.add(inv, inv, cfg.eps);
            k.rsqrt(inv, inv);
            k.mul(c1, c1, inv_d);
            k.mul(c2, c2, inv_d);
            k.mul(c2, c2, inv);
        }
        // The partials of dbias and dweight; dh = rstd · (g − mean(g) − x̂ · mean(g·x̂)) + dh_out;
        // dresidual = dh, dx = keep · dh.
        for c in 0..nc {
            let hc = h[c as usize];
            k.mul_row(hc, hc, inv);
            if !hold {
                match &staged {
                    Some(st) => {
                        st.read(k, (sdy, c), &s, Some(dyt));
                        st.read(k, (sdh, c), &s, Some(dht));
                        k.wait_shared(0);
                        k.load_global(wv, view(k, w, &row, c));
                    }
                    None => {
                        k.load_global(dyt, view(k, dy, &row, c));
                        k.load_global(wv, view(k, w, &row, c));
                        k.load_global(dht, view(k, dh_out, &row, c));
                    }
                }
            }
            // g again rather than held across the barrier (8 fewer live registers a lane).
            k.mul_col(g, dyt, wv);
            acc_b.add(k, c, dyt);
            k.mul(r, dyt, hc);
            acc_w.add(k, c, r);
            k.sub_row(g, g, c1);
            k.mul_row(hc, hc, c2);
            k.sub(g, g, hc);
            k.mul_row(g, g, inv);
            k.add(g, g, dht);
            k.store(view(k, dres, &row, c), g);
            if dropout {
                // From h the mask was not drawn for the sum: drawn here.
                if !hold || from_h {
                    draw_keep(k, &row, c);
                }
                k.mul(g, g, keep);
            }
            if let Some(dx) = dx {
                k.store(view(k, dx, &row, c), g);
            }
        }
        if let (Some(st), false) = (&staged, hold) {
            // A longer share read its slots until here.
            st.refill(k, &f, lp, (&rows, rpb), &s);
        }
    });
    if let Some(st) = &staged {
        st.drain(&mut k);
    }
    let part_row = k.block(0) * i64::from(rpb) + f.local.clone();
    for c in 0..nc {
        let (vw, vb) = (view(&k, dw, &part_row, c), view(&k, db, &part_row, c));
        acc_w.store(&mut k, c, vw);
        acc_b.store(&mut k, c, vb);
    }
    Ok(k.finish()?)
}

/// The backward's second launch: `dweight[j] = Σ_p dw_partial[j, p]` and `dbias[j] = Σ_p
/// db_partial[j, p]`. Parameter `rows` (the first launch's); tensors `dw_partial`, `db_partial` (f32
/// `[D, parts]`) and the outputs `dweight`, `dbias` (bf16 `[D]`).
pub fn build_dweight(cfg: &LayerNormConfig, lp: &RowLoop) -> Result<Kernel, KernelError> {
    check(cfg)?;
    sum_partials(
        &format!("layernorm_dweight_d{}", cfg.dim),
        cfg.dim,
        cfg.lanes,
        cfg.rows_per_block(),
        lp,
        &[("dw_partial", "dweight"), ("db_partial", "dbias")],
    )
}

/// The forward's checks, [`MAX_CHUNKS`], and no dropout where a 32-lane wave's share takes two
/// chunks: NVRTC keeps both chunks' masks (and `dy`) live across the row's sums rather than drawing
/// them again, past the 128 registers a 512-thread block leaves a thread (spills at D = 5128).
pub(crate) fn check(cfg: &LayerNormConfig) -> Result<(), KernelError> {
    cfg.check()?;
    let nc = chunks(cfg);
    let refuse = |why: String| {
        Err(KernelError::Config(format!(
            "layernorm_bwd: row length D = {} {why}",
            cfg.dim
        )))
    };
    let most = max_chunks(cfg);
    if nc > most {
        return refuse(format!(
            "takes {nc} chunks of {} columns per wave on {} waves of {} lanes (at most {most})",
            cfg.lanes * 8,
            cfg.waves_per_row,
            cfg.lanes
        ));
    }
    if nc > 1 && cfg.lanes == 32 && cfg.p > 0.0 {
        return refuse(format!(
            "is over {} on 32-lane waves (sm_90a) with dropout p = {} (p = 0 takes up to 8192; AMD's \
             64-lane waves take up to 8192 with dropout)",
            MAX_DIM_32_LANES_DROPOUT, cfg.p
        ));
    }
    Ok(())
}

/// The most chunks a wave's share of a row is walked in: [`MAX_CHUNKS`], or 4 in a block of at most
/// 128 threads (a warp per row, `waves_per_row=1`, up to D = 1024 on 32 lanes), whose threads may
/// hold 255 registers each (the x̂ and partial sums of four chunks: 96).
pub fn max_chunks(cfg: &LayerNormConfig) -> u32 {
    if cfg.waves * cfg.lanes <= 128 {
        4
    } else {
        MAX_CHUNKS
    }
}

/// The longest row the backward takes with dropout on 32-lane waves (one chunk per lane of 16 waves).
pub const MAX_DIM_32_LANES_DROPOUT: u32 = 4096;
