//! Build-time validation: dtypes, shapes and layouts of every op ([`validate`]), and the per-target
//! budgets — shared memory per block and an estimate of registers per wave ([`check_target`]).

use crate::error::{BuildError, OpError};
use crate::expr::Expr;
use crate::ir::*;
use kittens_hw::dtype::DType;
use kittens_hw::Gpu;
use kittens_tile::{check_load, Layout, RegTile};
use serde::Serialize;

type R = Result<(), OpError>;
/// An mma operand's (rows, cols), dtype and register tile (None for a shared operand).
type Operand = ((u32, u32), DType, Option<RegTile>);

fn reg(k: &Kernel, r: RegId) -> Result<&RegDecl, OpError> {
    k.regs.get(r.0 as usize).ok_or(OpError::Undeclared {
        what: "register",
        id: r.0,
    })
}

fn tile<'k>(k: &'k Kernel, r: RegId, what: &'static str) -> Result<&'k RegTile, OpError> {
    let d = reg(k, r)?;
    d.tile().ok_or_else(|| OpError::NotTile {
        what,
        name: d.name.clone(),
    })
}

fn vec_of<'k>(k: &'k Kernel, r: RegId, what: &'static str) -> Result<&'k RegVec, OpError> {
    let d = reg(k, r)?;
    d.vec().ok_or_else(|| OpError::NotVec {
        what,
        name: d.name.clone(),
    })
}

fn shape(what: &'static str, want: (u32, u32), got: (u32, u32)) -> R {
    if want == got {
        Ok(())
    } else {
        Err(OpError::Shape {
            what,
            rows: want.0,
            cols: want.1,
            found_rows: got.0,
            found_cols: got.1,
        })
    }
}

fn dtype(what: &'static str, want: DType, got: DType) -> R {
    if want == got {
        Ok(())
    } else {
        Err(OpError::DType {
            what,
            expected: want,
            found: got,
        })
    }
}

fn invalid(what: &'static str, detail: impl Into<String>) -> OpError {
    OpError::Invalid {
        what,
        detail: detail.into(),
    }
}

fn shared_view<'k>(k: &'k Kernel, v: &SharedView) -> Result<&'k SharedDecl, OpError> {
    let d = k.shared.get(v.buf.0 as usize).ok_or(OpError::Undeclared {
        what: "shared buffer",
        id: v.buf.0,
    })?;
    if v.rows > d.tile.rows || v.cols > d.tile.cols {
        return Err(invalid(
            "shared view",
            format!("{}x{} is larger than `{}`", v.rows, v.cols, d.name),
        ));
    }
    let fits = |e: &Expr, len: u32, span: u32| {
        e.as_const()
            .is_none_or(|c| c >= 0 && c as u32 + len <= span)
    };
    if !fits(&v.row0, v.rows, d.tile.rows) || !fits(&v.col0, v.cols, d.tile.cols) {
        return Err(invalid(
            "shared view",
            format!("sub-tile at ({}, {}) leaves `{}`", v.row0, v.col0, d.name),
        ));
    }
    if v.index
        .as_const()
        .is_some_and(|i| i < 0 || i as u32 >= d.count)
    {
        return Err(invalid(
            "shared view",
            format!(
                "index {} outside the {} buffers of `{}`",
                v.index, d.count, d.name
            ),
        ));
    }
    Ok(d)
}

fn global_view<'k>(k: &'k Kernel, v: &GlobalView) -> Result<&'k GlobalDecl, OpError> {
    let g = k
        .globals
        .get(v.tensor.0 as usize)
        .ok_or(OpError::Undeclared {
            what: "global",
            id: v.tensor.0,
        })?;
    let n = g.dims.len();
    if v.origin.len() != n
        || v.row_dim as usize >= n
        || v.col_dim as usize >= n
        || v.row_dim == v.col_dim
    {
        return Err(invalid(
            "global view",
            format!("`{}` has {n} dims; origin has {}", g.name, v.origin.len()),
        ));
    }
    Ok(g)
}

/// HipKittens D.1 plus exact shape: the shared tile and the register tile must be compatible, and the
/// view (after sub-tiling) must have the register tile's shape.
fn shared_reg(k: &Kernel, v: &SharedView, r: RegId, what: &'static str) -> R {
    let s = shared_view(k, v)?;
    let t = tile(k, r, what)?;
    check_load(&s.tile, t)?;
    shape(what, (t.rows, t.cols), (v.rows, v.cols))
}

fn mma_operand(k: &Kernel, o: &MmaOperand, what: &'static str) -> Result<Operand, OpError> {
    match o {
        MmaOperand::Reg(r) => {
            let t = tile(k, *r, what)?;
            Ok(((t.rows, t.cols), t.dtype, Some(*t)))
        }
        MmaOperand::Shared(v) => Ok(((v.rows, v.cols), shared_view(k, v)?.tile.dtype, None)),
    }
}

fn check_mma(
    k: &Kernel,
    form: MmaForm,
    d: RegId,
    a: &MmaOperand,
    b: &MmaOperand,
    c: Option<RegId>,
) -> R {
    let (sa, da, ta) = mma_operand(k, a, "mma A")?;
    let (sb, db, tb) = mma_operand(k, b, "mma B")?;
    let td = tile(k, d, "mma D")?;
    let (m, ka) = if form.a_transposed() {
        (sa.1, sa.0)
    } else {
        sa
    };
    let (n, kb) = if form.b_transposed() {
        sb
    } else {
        (sb.1, sb.0)
    };
    shape(
        "mma B (K must match A)",
        if form.b_transposed() {
            (n, ka)
        } else {
            (ka, n)
        },
        sb,
    )?;
    let _ = kb;
    shape("mma D", (m, n), (td.rows, td.cols))?;
    dtype("mma B", da, db)?;
    if !matches!(
        da,
        DType::Bf16 | DType::F16 | DType::Fp8E4m3 | DType::Fp8E5m2 | DType::Fp8E4m3Fnuz
    ) {
        return Err(invalid(
            "mma A",
            format!("{da} inputs have no matrix instruction"),
        ));
    }
    if !matches!(td.dtype, DType::F32 | DType::F16) {
        return Err(invalid(
            "mma D",
            format!("accumulates in f32 (or f16), not {}", td.dtype),
        ));
    }
    if let Some(c) = c {
        let tc = tile(k, c, "mma C")?;
        shape("mma C", (m, n), (tc.rows, tc.cols))?;
        dtype("mma C", td.dtype, tc.dtype)?;
    }
    let want_a = if form.a_transposed() {
        Layout::Col
    } else {
        Layout::Row
    };
    let want_b = if form.b_transposed() {
        Layout::Row
    } else {
        Layout::Col
    };
    for (t, want, operand) in [(ta, want_a, "A"), (tb, want_b, "B")] {
        if let Some(t) = t {
            if t.layout != want {
                return Err(OpError::Layout {
                    operand,
                    form: form.name(),
                    expected: want,
                    found: t.layout,
                });
            }
        }
    }
    if let (Some(ta), Some(tb)) = (ta, tb) {
        let a_k = if form.a_transposed() {
            ta.base.rows
        } else {
            ta.base.cols
        };
        let b_k = if form.b_transposed() {
            tb.base.cols
        } else {
            tb.base.rows
        };
        if a_k != b_k {
            return Err(OpError::BaseK {
                form: form.name(),
                a_k,
                b_k,
            });
        }
    }
    Ok(())
}

fn check_map(k: &Kernel, dst: RegId, f: MapFn, args: &[Arg]) -> R {
    if args.len() != f.arity() {
        return Err(invalid(
            "map",
            format!(
                "{} takes {} argument(s), got {}",
                f.name(),
                f.arity(),
                args.len()
            ),
        ));
    }
    let dd = reg(k, dst)?;
    let (rows, cols) = dd.shape();
    for a in args {
        match *a {
            Arg::Reg(r) => shape("map argument", (rows, cols), reg(k, r)?.shape())?,
            Arg::RowBcast(r) | Arg::ColBcast(r) => {
                tile(k, dst, "broadcast destination")?;
                let v = vec_of(k, r, "broadcast argument")?;
                let (axis, len) = if matches!(a, Arg::RowBcast(_)) {
                    (Axis::Rows, rows)
                } else {
                    (Axis::Cols, cols)
                };
                if v.axis != axis || v.len != len {
                    return Err(invalid(
                        "broadcast",
                        format!(
                            "needs a {axis:?} vector of {len}, got {:?} of {}",
                            v.axis, v.len
                        ),
                    ));
                }
            }
            Arg::Scalar(_) => {}
        }
    }
    Ok(())
}

fn check_reduce(k: &Kernel, dst: RegId, src: RegId, axis: Axis, acc: Option<RegId>) -> R {
    let t = tile(k, src, "reduce source")?;
    let v = vec_of(k, dst, "reduce destination")?;
    let len = if axis == Axis::Rows { t.rows } else { t.cols };
    if v.axis != axis || v.len != len {
        return Err(invalid(
            "reduce",
            format!(
                "needs a {axis:?} vector of {len}, got {:?} of {}",
                v.axis, v.len
            ),
        ));
    }
    if let Some(a) = acc {
        shape("reduce accumulator", (v.len, 1), reg(k, a)?.shape())?;
    }
    Ok(())
}

fn check_alibi(k: &Kernel, dst: RegId, slope: RegId) -> R {
    let t = tile(k, dst, "alibi destination")?;
    let v = vec_of(k, slope, "alibi slope")?;
    dtype("alibi destination", DType::F32, t.dtype)?;
    dtype("alibi slope", DType::F32, v.dtype)?;
    let len = if v.axis == Axis::Rows { t.rows } else { t.cols };
    if v.len != len {
        return Err(invalid(
            "alibi",
            format!(
                "the slope must be a {:?} vector of {len}, got {}",
                v.axis, v.len
            ),
        ));
    }
    Ok(())
}

fn check_op(k: &Kernel, op: &Op) -> R {
    match op {
        Op::LoadAsync { dst, src, scope } => {
            let s = shared_view(k, dst)?;
            let g = global_view(k, src)?;
            dtype(
                "async load (global → shared copies bytes)",
                s.tile.dtype,
                g.dtype,
            )?;
            if *scope == Scope::Consumers {
                return Err(invalid(
                    "scope",
                    "consumers scope for a load (only barriers take it)".to_string(),
                ));
            }
            if *scope == Scope::WarpGroup && !k.waves.is_multiple_of(4) {
                return Err(invalid(
                    "scope",
                    format!("warpgroup scope in a block of {} waves", k.waves),
                ));
            }
            shape("async load", (dst.rows, dst.cols), (src.rows, src.cols))
        }
        Op::AtomicAdd { dst, src } => {
            global_view(k, dst)?;
            let g = &k.globals[dst.tensor.0 as usize];
            let r = reg(k, *src)?;
            if g.dtype != DType::F32 || g.access == Access::Read {
                return Err(invalid(
                    "atomic_add",
                    format!(
                        "`{}` must be a writable f32 tensor (it is {:?}, {:?})",
                        g.name, g.dtype, g.access
                    ),
                ));
            }
            match r.kind {
                RegKind::Tile(t) => {
                    shape("atomic_add view", (t.rows, t.cols), (dst.rows, dst.cols))
                }
                RegKind::Vec(_) => Err(invalid("atomic_add", "adds a register tile, not a vector")),
            }
        }
        Op::LoadShared { dst, src } => shared_reg(k, src, *dst, "shared→register load"),
        Op::StoreShared { dst, src, .. } => shared_reg(k, dst, *src, "register→shared store"),
        Op::LoadGlobal { dst, src }
        | Op::StoreGlobal {
            dst: src, src: dst, ..
        } => {
            global_view(k, src)?;
            let d = reg(k, *dst)?;
            match d.kind {
                RegKind::Tile(t) => shape("global view", (t.rows, t.cols), (src.rows, src.cols)),
                // A vector moves one row of a view (a column vector: a weight along a row) or one
                // column (a row vector: one value per row).
                RegKind::Vec(v) => {
                    let want = match v.axis {
                        Axis::Cols => (1, v.len),
                        Axis::Rows => (v.len, 1),
                    };
                    shape("global view of a vector", want, (src.rows, src.cols))
                }
            }
        }
        Op::Mma { form, d, a, b, c } => check_mma(k, *form, *d, a, b, *c),
        Op::Map { dst, f, args, .. } => check_map(k, *dst, *f, args),
        Op::Reduce {
            dst,
            src,
            axis,
            acc,
            ..
        } => check_reduce(k, *dst, *src, *axis, *acc),
        Op::Fill { dst, .. } => reg(k, *dst).map(|_| ()),
        Op::Random { dst, .. } => {
            let d = reg(k, *dst)?;
            // Uniforms carry 24 bits: a narrower destination would round them (and bias a mask).
            dtype("random destination", DType::F32, d.dtype())
        }
        Op::Mask { dst, .. } => tile(k, *dst, "mask").map(|_| ()),
        Op::Alibi { dst, slope, .. } => check_alibi(k, *dst, *slope),
        Op::Transpose { dst, src } | Op::SwapLayout { dst, src } => {
            let (d, s) = (tile(k, *dst, "destination")?, tile(k, *src, "source")?);
            dtype("layout change", s.dtype, d.dtype)?;
            if d.layout == s.layout {
                return Err(invalid(
                    "layout change",
                    format!("source and destination are both {:?} layout", s.layout),
                ));
            }
            let want = if matches!(op, Op::Transpose { .. }) {
                (s.cols, s.rows)
            } else {
                (s.rows, s.cols)
            };
            shape("layout change destination", want, (d.rows, d.cols))
        }
        Op::Priority(p) if *p > 3 => {
            Err(invalid("priority", format!("{p} (wave priority is 0-3)")))
        }
        Op::Barrier {
            scope: Scope::Consumers,
        } if k.schedule.consumer_waves().is_none() => Err(invalid(
            "scope",
            format!(
                "a consumers barrier in the {} schedule (producer/consumer only)",
                k.schedule.name()
            ),
        )),
        Op::Barrier {
            scope: Scope::WarpGroup,
        } if !k.waves.is_multiple_of(4) => Err(invalid(
            "scope",
            format!("warpgroup barrier in a block of {} waves", k.waves),
        )),
        _ => Ok(()),
    }
}

/// Target-neutral checks of every op; the first failure is returned with the op's index.
pub fn validate(k: &Kernel) -> Result<(), BuildError> {
    if k.waves == 0 || k.waves != k.schedule.waves() {
        return Err(BuildError::Structure(format!(
            "{} waves for a {} schedule",
            k.waves,
            k.schedule.name()
        )));
    }
    check_pins(k)?;
    for r in k.ops() {
        check_op(k, r.op).map_err(|error| BuildError::Op {
            index: r.index,
            desc: r.op.name(),
            error,
        })?;
    }
    Ok(())
}

/// Explicitly pinned tiles (HipKittens D.3) must not share registers: the pins are the kernel author's
/// register allocation, so an overlap is a bug the compiler would not report.
fn check_pins(k: &Kernel) -> Result<(), BuildError> {
    let pins: Vec<(&str, kittens_tile::RegPin)> = k
        .regs
        .iter()
        .filter_map(|r| Some((r.name.as_str(), r.tile()?.pin?)))
        .collect();
    for (i, (a, p)) in pins.iter().enumerate() {
        for (b, q) in &pins[i + 1..] {
            if p.file == q.file && p.first <= q.last && q.first <= p.last {
                let (first, last) = (p.first.max(q.first), p.last.min(q.last));
                return Err(BuildError::PinOverlap {
                    a: a.to_string(),
                    b: b.to_string(),
                    file: p.file.name(),
                    first,
                    last,
                });
            }
        }
    }
    Ok(())
}

/// Pins name AMD registers: on CDNA they must fit the VGPR or AGPR half of the file (the 256/256 split
/// of HipKittens §3.2.1, `Gpu::vgpr_agpr_split`); NVIDIA has no user-visible register names, so a pinned
/// kernel is refused there (write the Hopper schedule without pins).
fn check_pins_on(k: &Kernel, gpu: &Gpu) -> Result<(), BuildError> {
    for r in &k.regs {
        let Some(p) = r.tile().and_then(|t| t.pin) else {
            continue;
        };
        let fail = |why: String| BuildError::PinTarget {
            name: r.name.clone(),
            file: p.file.name(),
            first: p.first,
            last: p.last,
            why,
        };
        let Some((v, a)) = gpu.vgpr_agpr_split else {
            return Err(fail(format!(
                "{} has no architectural register names to pin",
                gpu.name
            )));
        };
        let size = if p.file == kittens_tile::RegFile::Vgpr {
            v
        } else {
            a
        };
        if p.last >= size {
            return Err(fail(format!(
                "{} has {size} {}s per lane",
                gpu.name,
                p.file.name()
            )));
        }
    }
    Ok(())
}

/// The budgets of one kernel on one GPU.
#[derive(Debug, Clone, Serialize)]
pub struct TargetReport {
    pub gpu: &'static str,
    pub shared_bytes: u32,
    pub shared_budget: u32,
    /// Estimated 32-bit registers per lane of one wave (see [`reg_estimate`]).
    pub regs_per_wave: u32,
    pub reg_budget: u32,
}

/// Registers per lane a wave needs at its peak: the largest sum over the registers live at one op
/// ([`crate::regs::occupancy`]: a register is live from a write to its last read on some path; one
/// read before it is written in a loop is live through the loop), plus 16
/// for addresses, indices and loop counters. The compiler may do better (e.g. `transpose` reuses its
/// source's registers when the source dies), so this is an estimate on the high side.
pub fn reg_estimate(k: &Kernel, lanes: u32) -> u32 {
    reg_peak(k, lanes).regs
}

/// Where a wave's register estimate peaks ([`reg_estimate`]) and what is live there.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegPeak {
    /// The estimate: registers live at the peak + 16.
    pub regs: u32,
    /// The first op index at which the peak is reached (`None`: no register is used).
    pub op: Option<usize>,
    /// The registers live at the peak with their 32-bit registers per lane, costliest first.
    pub live: Vec<(String, u32)>,
}

impl RegPeak {
    /// `` `a` (64), `b` (32), `c` (16) `` — the costliest few, for messages.
    pub fn costliest(&self, n: usize) -> String {
        let mut s: Vec<String> = self
            .live
            .iter()
            .take(n)
            .map(|(name, r)| format!("`{name}` ({r})"))
            .collect();
        if self.live.len() > n {
            s.push(format!("and {} more", self.live.len() - n));
        }
        s.join(", ")
    }
}

/// [`reg_estimate`] with the op where it peaks and the registers live there: the registers each op
/// holds ([`crate::regs::occupancy`], a backward liveness over the program), summed, at the op where
/// the sum is largest.
pub fn reg_peak(k: &Kernel, lanes: u32) -> RegPeak {
    let sizes: Vec<u32> = k
        .regs
        .iter()
        .map(|r| crate::regs::regs_per_lane(&r.kind, lanes))
        .collect();
    let occ = crate::regs::occupancy(k);
    let mut best: (u32, Option<usize>) = (0, None);
    for (i, regs) in occ.iter().enumerate() {
        let sum: u32 = regs.iter().map(|r| sizes[r.0 as usize]).sum();
        if best.1.is_none() || sum > best.0 {
            best = (sum, Some(i));
        }
    }
    let mut live: Vec<(String, u32)> = match best.1 {
        Some(i) => occ[i]
            .iter()
            .map(|r| (k.regs[r.0 as usize].name.clone(), sizes[r.0 as usize]))
            .collect(),
        None => vec![],
    };
    live.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    RegPeak {
        regs: best.0 + 16,
        op: best.1,
        live,
    }
}

/// Shared memory, register and block-size budgets on `gpu`, and the target rules: AMD matrix
/// instructions take register operands only.
pub fn check_target(k: &Kernel, gpu: &Gpu) -> Result<TargetReport, BuildError> {
    if k.waves * gpu.wave_width > gpu.max_threads_per_block {
        return Err(BuildError::BlockSize {
            waves: k.waves,
            width: gpu.wave_width,
            max: gpu.max_threads_per_block,
        });
    }
    if gpu.arch.is_amd() {
        for r in k.ops() {
            if let Op::Mma { a, b, .. } = r.op {
                if matches!(a, MmaOperand::Shared(_)) || matches!(b, MmaOperand::Shared(_)) {
                    let error = OpError::SharedOperand {
                        target: gpu.arch.target(),
                    };
                    return Err(BuildError::Op {
                        index: r.index,
                        desc: r.op.name(),
                        error,
                    });
                }
            }
        }
    }
    check_pins_on(k, gpu)?;
    let shared_bytes = k.shared_bytes();
    if shared_bytes > gpu.shared_bytes_per_block {
        return Err(BuildError::SharedBudget {
            need: shared_bytes,
            have: gpu.shared_bytes_per_block,
            gpu: gpu.name,
        });
    }
    // Waves resident on one SIMD share its register file (HipKittens §3.3.1: AMD divides registers statically).
    let per_simd = k.waves.div_ceil(gpu.simds_per_cu).max(1);
    let even = (gpu.regs_per_lane_per_simd / per_simd).min(gpu.max_regs_per_thread);
    let reg_budget = match k.schedule {
        // Hopper register reallocation (`setmaxnreg`): the register tiles live in the consumer
        // warpgroups, which grow to `consumer_regs` while the producers shrink — if the file holds both.
        Schedule::ProducerConsumer {
            producers,
            consumers,
            producer_regs,
            consumer_regs,
        } if !gpu.arch.is_amd() => {
            let file = gpu.regs_per_lane_per_simd * gpu.simds_per_cu;
            let need = 4 * (producers * producer_regs + consumers * consumer_regs);
            if need > file {
                return Err(BuildError::RegBudget {
                    need: need / (4 * (producers + consumers)).max(1),
                    have: file / (4 * (producers + consumers)).max(1),
                    waves: k.waves,
                    gpu: gpu.name,
                });
            }
            consumer_regs.min(gpu.max_regs_per_thread)
        }
        _ => even,
    };
    let regs_per_wave = reg_estimate(k, gpu.wave_width);
    if regs_per_wave > reg_budget {
        return Err(BuildError::RegBudget {
            need: regs_per_wave,
            have: reg_budget,
            waves: k.waves,
            gpu: gpu.name,
        });
    }
    Ok(TargetReport {
        gpu: gpu.name,
        shared_bytes,
        shared_budget: gpu.shared_bytes_per_block,
        regs_per_wave,
        reg_budget,
    })
}
