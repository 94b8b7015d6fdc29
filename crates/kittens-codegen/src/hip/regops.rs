//! Lowering of register-only ops: elementwise maps (with row/column broadcasts of register vectors),
//! reductions along rows or columns, fills, masks, transposes and layout swaps.
//!
//! Everything is driven by lane maps ([`super::layout`]): an op is lane-local when its operands put the
//! same element in the same lane and slot; a vector entry broadcast into a tile must sit in the lanes
//! that hold its row (column). Reductions combine a lane's slots, then the lanes that share the row
//! (column) through an XOR butterfly of `ds_bpermute` (HipKittens E.3's `col_max` / `col_sum` over the
//! MFMA accumulator: lanes `l, l^16, l^32, l^48` hold one column). A copy between two different maps
//! (attention's f32 scores → bf16 `P` operand) goes through a per-wave LDS scratch at the elements'
//! logical positions.

use super::layout::{Affine, LaneMap};
use super::lower::Emitter;
use super::reg_maps::{lane_local, VecMap};
use super::LowerError;
use crate::cexpr::ident;
use kittens_hw::dtype::DType;
use kittens_ir::{Arg, Axis, MapFn, MaskRule, Op, ReduceOp, RegId, RegKind, Rounding};
use kittens_tile::RegTile;

/// `base + per_idx·(lane % g) + per_group·(lane / g)` as C.
pub(super) fn affine_c(a: Affine, g: u32) -> String {
    format!(
        "({} + {} * (int)(lane % {g}) + {} * (int)(lane / {g}))",
        a.base, a.per_idx, a.per_group
    )
}

/// C element of slot `s` of base tile `[bi][bj]` of `name`.
fn elem(name: &str, epl: u32, bi: &str, bj: &str, s: u32) -> String {
    if epl == 1 {
        format!("{name}[{bi}][{bj}]")
    } else {
        format!("{name}[{bi}][{bj}][{s}]")
    }
}

/// A value of `dtype` as f32 C.
fn as_f32(dtype: DType, v: &str) -> String {
    match dtype {
        DType::Bf16 => format!("bf16_to_f32({v})"),
        _ => v.to_string(),
    }
}

/// f32 C rounded to `dtype`.
fn from_f32(dtype: DType, rounding: Rounding, v: &str) -> Result<String, LowerError> {
    Ok(match (dtype, rounding) {
        (DType::F32, _) => v.to_string(),
        (DType::Bf16, Rounding::Rtne) => format!("bf16_rtne({v})"),
        (DType::Bf16, Rounding::Rtna) => format!("bf16_rtna({v})"),
        (DType::Bf16, Rounding::Rtz) => format!("bf16_rtz({v})"),
        (d, _) => {
            return Err(LowerError::Unsupported(format!(
                "register math producing {d:?}"
            )))
        }
    })
}

fn float_lit(v: f32) -> String {
    if v.is_infinite() {
        format!("({}__builtin_inff())", if v < 0.0 { "-" } else { "" })
    } else if v.is_nan() {
        "__builtin_nanf(\"\")".into()
    } else {
        format!("{v:?}f")
    }
}

/// `f(args)` in C over f32 operands.
fn apply(f: MapFn, a: &[String]) -> String {
    let bin = |op: &str| format!("({} {op} {})", a[0], a[1]);
    match f {
        MapFn::Add => bin("+"),
        MapFn::Sub => bin("-"),
        MapFn::Mul => bin("*"),
        MapFn::Div => bin("/"),
        MapFn::Max => format!("__builtin_fmaxf({}, {})", a[0], a[1]),
        MapFn::Min => format!("__builtin_fminf({}, {})", a[0], a[1]),
        MapFn::Exp => format!("exp2_f32({} * 1.4426950408889634f)", a[0]),
        MapFn::Exp2 => format!("exp2_f32({})", a[0]),
        MapFn::Log => format!("(__builtin_log2f({}) * 0.6931471805599453f)", a[0]),
        MapFn::Neg => format!("(-{})", a[0]),
        MapFn::Abs => format!("__builtin_fabsf({})", a[0]),
        MapFn::Rsqrt => format!("(1.0f / __builtin_sqrtf({}))", a[0]),
        MapFn::Sigmoid => format!(
            "(1.0f / (1.0f + exp2_f32({} * -1.4426950408889634f)))",
            a[0]
        ),
        MapFn::Silu => format!(
            "({} / (1.0f + exp2_f32({} * -1.4426950408889634f)))",
            a[0], a[0]
        ),
        // 1 − 2/(e^(2x) + 1): exact at both ends (e^(2x) over- or underflowing gives ±1).
        MapFn::Tanh => format!(
            "(1.0f - 2.0f / (exp2_f32({} * 2.8853900817779268f) + 1.0f))",
            a[0]
        ),
        MapFn::Ge => format!("({} >= {} ? 1.0f : 0.0f)", a[0], a[1]),
        MapFn::Copy => a[0].clone(),
    }
}

fn combine(op: ReduceOp, a: &str, b: &str) -> String {
    match op {
        ReduceOp::Sum => format!("({a} + {b})"),
        ReduceOp::Max => format!("__builtin_fmaxf({a}, {b})"),
        ReduceOp::Min => format!("__builtin_fminf({a}, {b})"),
    }
}

/// Logical `(row, col)` of `lane`'s slot `s` in base tile `(bi, bj)` of `t`.
fn st_pos(t: &RegTile, m: &LaneMap, lane: u32, s: usize, bi: u32, bj: u32) -> (u32, u32) {
    let (r, c) = m.at(lane, s);
    (bi * t.base.rows + r, bj * t.base.cols + c)
}

impl Emitter<'_> {
    fn tile_of(&self, r: RegId) -> Result<(String, RegTile, LaneMap), LowerError> {
        let d = self.k.reg(r);
        let t = *d
            .tile()
            .ok_or_else(|| LowerError::Unsupported(format!("`{}` used as a tile", d.name)))?;
        let m = self
            .maps
            .get(&r.0)
            .cloned()
            .ok_or_else(|| LowerError::Unsupported(format!("`{}` has no lane map", d.name)))?;
        Ok((format!("r_{}", ident(&d.name)), t, m))
    }

    fn vec_of(&self, r: RegId) -> Result<(String, VecMap), LowerError> {
        let d = self.k.reg(r);
        let v = self.vmaps.get(&r.0).cloned().ok_or_else(|| {
            LowerError::Unsupported(format!("`{}` used as a register vector", d.name))
        })?;
        Ok((format!("r_{}", ident(&d.name)), v))
    }

    /// Check that vector `v` broadcast along `axis` lines up with tile `(t, m)`: every slot of every
    /// lane holds the row (column) the lane's vector entry is for.
    fn bcast_ok(&self, v: &VecMap, t: &RegTile, m: &LaneMap, axis: Axis) -> bool {
        let same_base = if axis == Axis::Rows {
            v.base.rows == t.base.rows && v.len == t.rows
        } else {
            v.base.cols == t.base.cols && v.len == t.cols
        };
        same_base
            && v.axis == axis
            && (0..64).all(|l| {
                let want = v.coord(l);
                (0..m.slots.len()).all(|s| {
                    let (r, c) = m.at(l, s);
                    want == Some(if axis == Axis::Rows { r } else { c })
                })
            })
    }

    pub(super) fn map_op(
        &mut self,
        dst: RegId,
        f: MapFn,
        args: &[Arg],
        rounding: Rounding,
    ) -> Result<(), LowerError> {
        if let RegKind::Vec(_) = self.k.reg(dst).kind {
            return self.map_vec(dst, f, args, rounding);
        }
        let (dn, dt, dm) = self.tile_of(dst)?;
        if let (MapFn::Copy, [Arg::Reg(s)]) = (f, args) {
            let (_, st, sm) = self.tile_of(*s)?;
            if !lane_local(&dt, &dm, &st, &sm, false) {
                return self.remap(dst, *s, false, rounding);
            }
        }
        let epl = dm.elems_per_lane();
        let mut vals = Vec::new();
        for a in args {
            vals.push(match *a {
                Arg::Scalar(x) => float_lit(x),
                Arg::Reg(r) => {
                    let (n, t, m) = self.tile_of(r)?;
                    if !lane_local(&dt, &dm, &t, &m, false) {
                        return Err(LowerError::Unsupported(format!(
                            "`{}` elementwise with a differently laid out `{}`",
                            self.k.reg(dst).name,
                            self.k.reg(r).name
                        )));
                    }
                    as_f32(t.dtype, &elem(&n, epl, "bi", "bj", u32::MAX))
                }
                Arg::RowBcast(v) | Arg::ColBcast(v) => {
                    let axis = if matches!(a, Arg::RowBcast(_)) {
                        Axis::Rows
                    } else {
                        Axis::Cols
                    };
                    let (n, vm) = self.vec_of(v)?;
                    if !self.bcast_ok(&vm, &dt, &dm, axis) {
                        return Err(LowerError::Layout(format!(
                            "vector `{}` does not line up with the lanes of `{}`",
                            self.k.reg(v).name,
                            self.k.reg(dst).name
                        )));
                    }
                    format!("{n}[{}]", if axis == Axis::Rows { "bi" } else { "bj" })
                }
            });
        }
        let (gr, gc) = dt.base_grid();
        let body = from_f32(dt.dtype, rounding, &apply(f, &vals))?;
        self.line(format!("// {}: elementwise, lane-local", f.name()));
        self.line("#pragma unroll");
        self.block(format!("for (int bi = 0; bi < {gr}; ++bi)"), |em| {
            em.line("#pragma unroll");
            em.block(format!("for (int bj = 0; bj < {gc}; ++bj)"), |em| {
                for s in 0..epl {
                    let slot = if epl == 1 {
                        String::new()
                    } else {
                        format!("[{s}]")
                    };
                    let b = body.replace(&format!("[{}]", u32::MAX), &slot);
                    em.line(format!("{} = {b};", elem(&dn, epl, "bi", "bj", s)));
                }
                Ok(())
            })
        })
    }

    fn map_vec(
        &mut self,
        dst: RegId,
        f: MapFn,
        args: &[Arg],
        rounding: Rounding,
    ) -> Result<(), LowerError> {
        let (dn, dv) = self.vec_of(dst)?;
        let dtype = self.k.reg(dst).vec().map(|v| v.dtype).unwrap_or(DType::F32);
        let mut vals = Vec::new();
        for a in args {
            vals.push(match *a {
                Arg::Scalar(x) => float_lit(x),
                Arg::Reg(r) | Arg::RowBcast(r) | Arg::ColBcast(r) => {
                    let (n, v) = self.vec_of(r)?;
                    let same = v.same_spread(&dv);
                    if !same {
                        return Err(LowerError::Layout(format!(
                            "vectors `{}` and `{}` are spread differently",
                            self.k.reg(dst).name,
                            self.k.reg(r).name
                        )));
                    }
                    as_f32(
                        self.k.reg(r).vec().map(|v| v.dtype).unwrap_or(DType::F32),
                        &format!("{n}[i]"),
                    )
                }
            });
        }
        let body = from_f32(dtype, rounding, &apply(f, &vals))?;
        self.line(format!(
            "for (int i = 0; i < {}; ++i) {dn}[i] = {body};",
            dv.per_lane()
        ));
        Ok(())
    }

    /// `dst[k] = acc[k] ∘ (∘ over the axis of src)`: a lane's slots, the base tiles along the axis,
    /// then the lanes that share the row (column) through an XOR butterfly.
    pub(super) fn reduce(
        &mut self,
        dst: RegId,
        src: RegId,
        axis: Axis,
        op: ReduceOp,
        acc: Option<RegId>,
    ) -> Result<(), LowerError> {
        let (sn, st, sm) = self.tile_of(src)?;
        let (dn, dv) = self.vec_of(dst)?;
        if !self.bcast_ok(&dv, &st, &sm, axis) {
            return Err(LowerError::Layout(format!(
                "reduction into `{}`: its entries are not where `{}` keeps its {}",
                self.k.reg(dst).name,
                self.k.reg(src).name,
                if axis == Axis::Rows {
                    "rows"
                } else {
                    "columns"
                }
            )));
        }
        // Lane bits that do not change the kept coordinate: the butterfly's XOR masks.
        let coord = |l: u32, s: usize| {
            let (r, c) = sm.at(l, s);
            if axis == Axis::Rows {
                r
            } else {
                c
            }
        };
        let epl = sm.elems_per_lane();
        let masks: Vec<u32> = (0..6)
            .map(|b| 1u32 << b)
            .filter(|&m| (0..64).all(|l| (0..epl as usize).all(|s| coord(l ^ m, s) == coord(l, s))))
            .collect();
        let along = if axis == Axis::Rows {
            st.base.cols
        } else {
            st.base.rows
        };
        if (1u32 << masks.len()) * epl != along {
            return Err(LowerError::Layout(format!(
                "reduction over `{}`: the lanes sharing a {} are not an XOR group",
                self.k.reg(src).name,
                if axis == Axis::Rows { "row" } else { "column" }
            )));
        }
        let (gr, gc) = st.base_grid();
        let (outer, inner, idx) = if axis == Axis::Rows {
            (gr, gc, "[o][x]")
        } else {
            (gc, gr, "[x][o]")
        };
        let ident_v = match op {
            ReduceOp::Sum => "0.0f",
            ReduceOp::Max => "(-__builtin_inff())",
            ReduceOp::Min => "__builtin_inff()",
        };
        let accn = match acc {
            Some(a) => Some(self.vec_of(a)?.0),
            None => None,
        };
        let dtype = st.dtype;
        self.line(format!(
            "// {}: slots, base tiles, then lanes (xor {masks:?})",
            Op::Reduce {
                dst,
                src,
                axis,
                op,
                acc
            }
            .name()
        ));
        self.line("#pragma unroll");
        self.block(format!("for (int o = 0; o < {outer}; ++o)"), |em| {
            em.line(format!("float v = {ident_v};"));
            em.line("#pragma unroll");
            em.block(format!("for (int x = 0; x < {inner}; ++x)"), |em| {
                for s in 0..epl {
                    let e = if epl == 1 {
                        format!("{sn}{idx}")
                    } else {
                        format!("{sn}{idx}[{s}]")
                    };
                    em.line(format!("v = {};", combine(op, "v", &as_f32(dtype, &e))));
                }
                Ok(())
            })?;
            for m in &masks {
                em.line(format!(
                    "v = {};",
                    combine(op, "v", &format!("shfl_xor_f32<{m}>(v)"))
                ));
            }
            let fin = match &accn {
                Some(a) => combine(op, &format!("{a}[o]"), "v"),
                None => "v".into(),
            };
            em.line(format!("{dn}[o] = {fin};"));
            Ok(())
        })
    }

    pub(super) fn fill_vec(&mut self, dst: RegId, value: f32) -> Result<(), LowerError> {
        let (n, v) = self.vec_of(dst)?;
        self.line(format!(
            "for (int i = 0; i < {}; ++i) {n}[i] = {};",
            v.per_lane(),
            float_lit(value)
        ));
        Ok(())
    }

    /// `Transpose` / `SwapLayout`: a register rename when the maps agree, else an LDS remap.
    pub(super) fn relayout(
        &mut self,
        dst: RegId,
        src: RegId,
        transpose: bool,
    ) -> Result<(), LowerError> {
        let (dn, dt, dm) = self.tile_of(dst)?;
        let (sn, st, sm) = self.tile_of(src)?;
        if dt.dtype != st.dtype || !lane_local(&dt, &dm, &st, &sm, transpose) {
            return self.remap(dst, src, transpose, Rounding::Rtne);
        }
        let (gr, gc) = dt.base_grid();
        let from = if transpose { "[j][i]" } else { "[i][j]" };
        self.line(format!(
            "// {}: same lanes, same slots (a register rename)",
            if transpose {
                "transpose"
            } else {
                "swap_layout"
            }
        ));
        self.line(format!("for (int i = 0; i < {gr}; ++i) for (int j = 0; j < {gc}; ++j) {dn}[i][j] = {sn}{from};"));
        Ok(())
    }

    /// Move `src` into `dst`'s lane map through this wave's LDS scratch: each lane writes its elements at
    /// their logical `(row, col)` of `dst`, the wave syncs, each lane reads its `dst` elements back.
    fn remap(
        &mut self,
        dst: RegId,
        src: RegId,
        transpose: bool,
        rounding: Rounding,
    ) -> Result<(), LowerError> {
        let (dn, dt, dm) = self.tile_of(dst)?;
        let (sn, st, sm) = self.tile_of(src)?;
        let per_wave = dt.rows * dt.cols * dt.dtype.bytes();
        if per_wave > self.scratch_per_wave {
            return Err(LowerError::Unsupported(format!(
                "remap of `{}`: no scratch planned",
                self.k.reg(dst).name
            )));
        }
        let cty = match dt.dtype {
            DType::F32 => "float",
            DType::Bf16 | DType::F16 => "unsigned short",
            d => return Err(LowerError::Unsupported(format!("remap of {d:?} registers"))),
        };
        let (se, de) = (sm.elems_per_lane(), dm.elems_per_lane());
        let pos = |t: &RegTile, m: &LaneMap, s: usize, bi: &str, bj: &str| {
            let (r, c) = m.slots[s];
            (
                format!("({bi} * {} + {})", t.base.rows, affine_c(r, m.group)),
                format!("({bj} * {} + {})", t.base.cols, affine_c(c, m.group)),
            )
        };
        // Store the scratch so that each lane's destination slots are consecutive (column-major when
        // they run down a column, as in a column-layout operand): the compiler then reads them with one
        // wide ds_read.
        let (rows, cols) = (dt.rows, dt.cols);
        let col_major = dm.slots.len() > 1
            && dm.slots[1].0.base == dm.slots[0].0.base + 1
            && dm.slots[1].1 == dm.slots[0].1;
        let at = move |r: &str, c: &str| {
            if col_major {
                format!("{c} * {rows} + {r}")
            } else {
                format!("{r} * {cols} + {c}")
            }
        };
        // bf16 destinations whose source slots pair up on consecutive, 4-byte aligned scratch
        // elements convert two at a time (`v_cvt_pk_bf16_f32` on gfx950) and store 32 bits.
        let index = |l: u32, s: usize, bi: u32, bj: u32| {
            let (r, c) = st_pos(&st, &sm, l, s, bi, bj);
            let (r, c) = if transpose { (c, r) } else { (r, c) };
            if col_major {
                c * rows + r
            } else {
                r * cols + c
            }
        };
        let (sgr0, sgc0) = st.base_grid();
        let paired = dt.dtype == DType::Bf16
            && rounding == Rounding::Rtne
            && se % 2 == 0
            && (0..64).all(|l| {
                (0..se as usize).step_by(2).all(|s| {
                    (0..sgr0).all(|bi| {
                        (0..sgc0).all(|bj| {
                            let i = index(l, s, bi, bj);
                            i % 2 == 0 && index(l, s + 1, bi, bj) == i + 1
                        })
                    })
                })
            });
        let scratch = format!(
            "(({cty}*)(smem_kittens_scratch + (u32)wave * {}))",
            self.scratch_per_wave
        );
        self.line(format!(
            "// remap `{sn}` -> `{dn}` through the wave's LDS scratch"
        ));
        self.block("", |em| {
            em.line(format!("{cty}* const sc = {scratch};"));
            let (sgr, sgc) = st.base_grid();
            em.line(format!(
                "for (int bi = 0; bi < {sgr}; ++bi) for (int bj = 0; bj < {sgc}; ++bj)"
            ));
            em.block("", |em| {
                if paired {
                    for s in (0..se).step_by(2) {
                        let (r, c) = pos(&st, &sm, s as usize, "bi", "bj");
                        let (r, c) = if transpose { (c, r) } else { (r, c) };
                        let (lo, hi) = (
                            as_f32(st.dtype, &elem(&sn, se, "bi", "bj", s)),
                            as_f32(st.dtype, &elem(&sn, se, "bi", "bj", s + 1)),
                        );
                        em.line(format!(
                            "*(u32*)&sc[{}] = pack_bf16_rtne({lo}, {hi});",
                            at(&r, &c)
                        ));
                    }
                    return Ok(());
                }
                for s in 0..se {
                    let (r, c) = pos(&st, &sm, s as usize, "bi", "bj");
                    let (r, c) = if transpose { (c, r) } else { (r, c) };
                    let v = from_f32(
                        dt.dtype,
                        rounding,
                        &as_f32(st.dtype, &elem(&sn, se, "bi", "bj", s)),
                    )?;
                    em.line(format!("sc[{}] = {v};", at(&r, &c)));
                }
                Ok(())
            })?;
            em.line("wave_sync();");
            let (dgr, dgc) = dt.base_grid();
            em.line(format!(
                "for (int bi = 0; bi < {dgr}; ++bi) for (int bj = 0; bj < {dgc}; ++bj)"
            ));
            em.block("", |em| {
                for s in 0..de {
                    let (r, c) = pos(&dt, &dm, s as usize, "bi", "bj");
                    em.line(format!(
                        "{} = sc[{}];",
                        elem(&dn, de, "bi", "bj", s),
                        at(&r, &c)
                    ));
                }
                Ok(())
            })?;
            em.line("wave_sync();");
            Ok(())
        })
    }

    /// Elements of `dst` at global `(row0 + i, col0 + j)` that `rule` drops become `value`.
    pub(super) fn mask(
        &mut self,
        dst: RegId,
        rule: &MaskRule,
        row0: &kittens_ir::Expr,
        col0: &kittens_ir::Expr,
        value: f32,
    ) -> Result<(), LowerError> {
        let (dn, dt, dm) = self.tile_of(dst)?;
        let keep = match rule {
            MaskRule::Causal { offset } => format!("(c <= r + (int)({}))", self.ex(offset)),
            MaskRule::CausalT { offset } => format!("(r <= c + (int)({}))", self.ex(offset)),
            MaskRule::WindowStart { offset } => format!("(c >= r + (int)({}))", self.ex(offset)),
            MaskRule::WindowStartT { offset } => format!("(r >= c + (int)({}))", self.ex(offset)),
            MaskRule::ColsBelow(l) => format!("(c < (int)({}))", self.ex(l)),
            MaskRule::RowsBelow(l) => format!("(r < (int)({}))", self.ex(l)),
        };
        let (r0, c0) = (self.ex(row0), self.ex(col0));
        let epl = dm.elems_per_lane();
        let (gr, gc) = dt.base_grid();
        let lit = from_f32(dt.dtype, Rounding::Rtne, &float_lit(value))?;
        let slots = dm.slots.clone();
        self.line("#pragma unroll");
        self.block(format!("for (int bi = 0; bi < {gr}; ++bi)"), |em| {
            em.line("#pragma unroll");
            em.block(format!("for (int bj = 0; bj < {gc}; ++bj)"), |em| {
                for (s, (ra, ca)) in slots.iter().enumerate() {
                    em.line(format!(
                        "{{ const int r = (int)({r0}) + bi * {} + {}, c = (int)({c0}) + bj * {} + {}; if (!{keep}) {} = {lit}; }}",
                        dt.base.rows,
                        affine_c(*ra, dm.group),
                        dt.base.cols,
                        affine_c(*ca, dm.group),
                        elem(&dn, epl, "bi", "bj", s as u32)
                    ));
                }
                Ok(())
            })
        })
    }
}

impl Emitter<'_> {
    /// ALiBi's bias ([`kittens_ir::Op::Alibi`]): `dst[r][c] += slope[r]·|r − c|` at global
    /// `(row0 + i, col0 + j)`, the slope a row vector lined up with `dst`'s lanes.
    pub(super) fn alibi(
        &mut self,
        dst: RegId,
        slope: RegId,
        row0: &kittens_ir::Expr,
        col0: &kittens_ir::Expr,
    ) -> Result<(), LowerError> {
        let (dn, dt, dm) = self.tile_of(dst)?;
        let (sn, sm) = self.vec_of(slope)?;
        let (axis, at) = match self.k.reg(slope).vec().map(|v| v.axis) {
            Some(Axis::Cols) => (Axis::Cols, "bj"),
            _ => (Axis::Rows, "bi"),
        };
        if !self.bcast_ok(&sm, &dt, &dm, axis) {
            return Err(LowerError::Layout(format!(
                "alibi slope `{}` does not line up with the lanes of `{}`",
                self.k.reg(slope).name,
                self.k.reg(dst).name
            )));
        }
        let (r0, c0) = (self.ex(row0), self.ex(col0));
        let epl = dm.elems_per_lane();
        let (gr, gc) = dt.base_grid();
        let slots = dm.slots.clone();
        self.line("#pragma unroll");
        self.block(format!("for (int bi = 0; bi < {gr}; ++bi)"), |em| {
            em.line("#pragma unroll");
            em.block(format!("for (int bj = 0; bj < {gc}; ++bj)"), |em| {
                for (s, (ra, ca)) in slots.iter().enumerate() {
                    let e = elem(&dn, epl, "bi", "bj", s as u32);
                    em.line(format!(
                        "{{ const int r = (int)({r0}) + bi * {} + {}, c = (int)({c0}) + bj * {} + {}; {e} = __builtin_fmaf({sn}[{at}], (float)__builtin_abs(r - c), {e}); }}",
                        dt.base.rows,
                        affine_c(*ra, dm.group),
                        dt.base.cols,
                        affine_c(*ca, dm.group),
                    ));
                }
                Ok(())
            })
        })
    }
}
