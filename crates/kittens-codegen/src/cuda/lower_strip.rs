//! Lowering memory-bound tile programs (plain schedule, every register tile a strip:
//! `kittens_tile::BaseShape::STRIP`) to CUDA C++ for sm_90a — layernorm, rotary.
//!
//! Distribution: a strip tile of `rows × cols` is cut into chunks of `v` consecutive elements of a row
//! (`v` = 8, 4, 2 or 1, the largest dividing `cols`: 16 bytes of bf16), numbered row-major and dealt to
//! the 32 lanes of the warp round robin: chunk `k` is lane `k % 32`'s slot `k / 32`. A lane's slots are
//! a `float` array indexed by constants after unrolling, so they live in registers. A column vector is
//! distributed like a one-row tile of its length; a row vector is replicated in every lane.
//!
//! | IR | CUDA |
//! |---|---|
//! | `load`/`store` global | one 16-, 8- or 4-byte access per chunk where the column stride is 1, the chunk lies inside the tensor and its offset is aligned; element by element (bounds-checked) otherwise |
//! | `map` | per element, in f32; a broadcast vector's entry is a constant index |
//! | `row_sum`/`row_max` | a lane's slots of the row, then `shfl.xor` over the lanes sharing it |
//! | `random` | Philox 4x32-10 (`ks::philox`), one call per 4 elements of an aligned chunk |
//! | `store`/`load` shared, `barrier` | `__shared__` arrays, `__syncthreads()` |
//!
//! One block per tile of the grid (`GridRule::PerTile`), row-major coordinates.

use kittens_hw::{dtype::DType, Target};
use kittens_ir::{
    Arg, Axis, Expr, GlobalView, GridOrder, Kernel, MapFn, MaskRule, Op, ReduceOp, RegId, RegKind,
    Rounding, Scope, SharedView, Stmt,
};
use kittens_tile::BaseShape;

use super::lower::{unsupported, CudaLowerError};
use crate::cexpr::{self, ident, CUDA};
use crate::lowered::{GridRule, KernelArg, Lowered, SharedAlloc};

const LANES: u32 = 32;

/// How a register is spread over the lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dist {
    /// A tile (or column vector as a one-row tile): `rows × cols` in chunks of `v`.
    Strip { rows: u32, cols: u32, v: u32 },
    /// A row vector of `len`, in every lane.
    Replicated { len: u32 },
}

impl Dist {
    fn chunks_per_row(self) -> u32 {
        match self {
            Dist::Strip { cols, v, .. } => cols / v,
            Dist::Replicated { .. } => 1,
        }
    }
    fn chunks(self) -> u32 {
        match self {
            Dist::Strip { rows, .. } => rows * self.chunks_per_row(),
            Dist::Replicated { len } => len,
        }
    }
    fn slots(self) -> u32 {
        match self {
            Dist::Strip { .. } => self.chunks().div_ceil(LANES),
            Dist::Replicated { len } => len,
        }
    }
    fn v(self) -> u32 {
        match self {
            Dist::Strip { v, .. } => v,
            Dist::Replicated { .. } => 1,
        }
    }
    /// Elements a lane holds.
    fn len(self) -> u32 {
        self.slots() * self.v()
    }
    /// Whether every slot of every lane holds a chunk (else the last slot is partial).
    fn full(self) -> bool {
        matches!(self, Dist::Replicated { .. }) || self.chunks().is_multiple_of(LANES)
    }
}

fn chunk_of(cols: u32) -> u32 {
    [8, 4, 2, 1]
        .into_iter()
        .find(|v| cols.is_multiple_of(*v))
        .unwrap_or(1)
}

fn dist(k: &Kernel, r: RegId) -> Dist {
    match k.reg(r).kind {
        RegKind::Tile(t) => Dist::Strip {
            rows: t.rows,
            cols: t.cols,
            v: chunk_of(t.cols),
        },
        RegKind::Vec(v) if v.axis == Axis::Cols => Dist::Strip {
            rows: 1,
            cols: v.len,
            v: chunk_of(v.len),
        },
        RegKind::Vec(v) => Dist::Replicated { len: v.len },
    }
}

/// True when `k` is a program this lowering takes: plain schedule, strip registers only.
pub fn is_strip_program(k: &Kernel) -> bool {
    matches!(k.schedule, kittens_ir::Schedule::Plain { .. })
        && !k.regs.is_empty()
        && k.regs.iter().all(|r| match r.kind {
            RegKind::Tile(t) => t.base == BaseShape::STRIP,
            RegKind::Vec(v) => v.base == BaseShape::STRIP,
        })
}

struct Emit<'k> {
    k: &'k Kernel,
    out: String,
    depth: usize,
}

fn storage(dt: DType) -> Result<&'static str, CudaLowerError> {
    match dt {
        DType::Bf16 => Ok("bf16_t"),
        DType::F32 => Ok("float"),
        other => unsupported(format!("{other:?} tensors in a strip program (bf16 or f32)")),
    }
}

impl Emit<'_> {
    fn line(&mut self, s: impl AsRef<str>) {
        for l in s.as_ref().lines() {
            self.out.push_str(&"    ".repeat(self.depth));
            self.out.push_str(l);
            self.out.push('\n');
        }
    }
    fn e(&self, x: &Expr) -> String {
        format!("((long long){})", cexpr::expr_in(self.k, x, &CUDA))
    }
    fn r(&self, r: RegId) -> String {
        format!("r{}_{}", r.0, ident(&self.k.reg(r).name))
    }

    fn body(&mut self, body: &[Stmt]) -> Result<(), CudaLowerError> {
        for s in body {
            match s {
                Stmt::Op { op, .. } => self.op(op)?,
                Stmt::For {
                    var,
                    start,
                    end,
                    body,
                } => {
                    let v = cexpr::var_name(self.k, var.0);
                    let (a, b) = (self.e(start), self.e(end));
                    self.line(format!("for (long long {v} = {a}; {v} < {b}; ++{v}) {{"));
                    self.depth += 1;
                    self.body(body)?;
                    self.depth -= 1;
                    self.line("}");
                }
                Stmt::If { cond, then, els } => {
                    let c = cexpr::cond_in(self.k, cond, &CUDA);
                    self.line(format!("if ({c}) {{"));
                    self.depth += 1;
                    self.body(then)?;
                    self.depth -= 1;
                    self.line("} else {");
                    self.depth += 1;
                    self.body(els)?;
                    self.depth -= 1;
                    self.line("}");
                }
                Stmt::Cluster { body, .. } | Stmt::Staggered { body } => self.body(body)?,
                Stmt::Roles { .. } => return unsupported("warp roles in a strip program"),
            }
        }
        Ok(())
    }

    /// Opens the loop over a register's slots: `kt_s` (slot), `kt_k` (chunk), `kt_row`, `kt_col` (the
    /// chunk's first column); a partial last slot skips the lanes without a chunk.
    fn open_slots(&mut self, d: Dist) {
        let (slots, ncr) = (d.slots(), d.chunks_per_row());
        self.line(format!(
            "#pragma unroll\nfor (int kt_s = 0; kt_s < {slots}; ++kt_s) {{"
        ));
        self.depth += 1;
        self.line(format!(
            "const int kt_k = kt_s * {LANES} + kt_lane;\nconst int kt_row = kt_k / {ncr}, kt_col = (kt_k % {ncr}) * {};\n(void)kt_row; (void)kt_col;",
            d.v()
        ));
        if !d.full() {
            self.line(format!("if (kt_k < {}) {{", d.chunks()));
            self.depth += 1;
        }
    }
    fn close_slots(&mut self, d: Dist) {
        if !d.full() {
            self.depth -= 1;
            self.line("}");
        }
        self.depth -= 1;
        self.line("}");
    }

    /// C expressions of a global view: (pointer, offset of element (row `r`, col `c`) as a function of
    /// the names, in-bounds condition of the view's fixed coordinates, row bound, col bound, col
    /// stride is the constant 1).
    fn view(&self, v: &GlobalView) -> Result<ViewC, CudaLowerError> {
        let g = self.k.global(v.tensor);
        let (rd, cd) = (v.row_dim as usize, v.col_dim as usize);
        let mut fixed_in = vec!["true".to_string()];
        let mut base = vec!["0ll".to_string()];
        for d in 0..g.dims.len() {
            if d == rd || d == cd {
                continue;
            }
            let o = self.e(&v.origin[d]);
            fixed_in.push(format!("({o} >= 0 && {o} < {})", self.e(&g.dims[d])));
            base.push(format!("{o} * {}", self.e(&g.strides[d])));
        }
        Ok(ViewC {
            ptr: format!("g_{}", ident(&g.name)),
            dtype: g.dtype,
            fixed_in: fixed_in.join(" && "),
            base: base.join(" + "),
            row0: self.e(&v.origin[rd]),
            col0: self.e(&v.origin[cd]),
            rows: self.e(&g.dims[rd]),
            cols: self.e(&g.dims[cd]),
            rstride: self.e(&g.strides[rd]),
            cstride: self.e(&g.strides[cd]),
            unit: g.strides[cd].as_const() == Some(1),
        })
    }

    fn global(&mut self, reg: RegId, v: &GlobalView, load: bool) -> Result<(), CudaLowerError> {
        let d = dist(self.k, reg);
        if matches!(d, Dist::Replicated { .. }) {
            return unsupported("a row vector moved to or from global memory");
        }
        let vc = self.view(v)?;
        let ty = storage(vc.dtype)?;
        let bytes = d.v() * vc.dtype.bytes();
        let r = self.r(reg);
        self.line("{");
        self.depth += 1;
        self.line(format!(
            "const bool kt_in = {};\nconst long long kt_base = {};",
            vc.fixed_in, vc.base
        ));
        self.open_slots(d);
        self.line(format!(
            "const long long kt_gr = {} + kt_row, kt_gc = {} + kt_col;\nconst long long kt_off = kt_base + kt_gr * {} + kt_gc * {};\nconst bool kt_row_in = kt_in && kt_gr >= 0 && kt_gr < {};",
            vc.row0, vc.col0, vc.rstride, vc.cstride, vc.rows
        ));
        let elem = |e: &str| format!("kt_s * {} + {e}", d.v());
        let vec_ty = match bytes {
            16 => Some("uint4"),
            8 => Some("uint2"),
            4 => Some("u32"),
            _ => None,
        };
        if let (true, Some(vt)) = (vc.unit, vec_ty) {
            let n = d.v();
            self.line(format!(
                "if (kt_row_in && kt_gc >= 0 && kt_gc + {n} <= {} && (kt_off % {n}) == 0) {{",
                vc.cols
            ));
            self.depth += 1;
            if load {
                self.line(format!(
                    "{vt} kt_w = *reinterpret_cast<const {vt}*>({} + kt_off);\nconst {ty}* kt_e = reinterpret_cast<const {ty}*>(&kt_w);",
                    vc.ptr
                ));
                self.line(format!(
                    "#pragma unroll\nfor (int kt_e_i = 0; kt_e_i < {n}; ++kt_e_i) {r}[{}] = {};",
                    elem("kt_e_i"),
                    to_f32(vc.dtype, "kt_e[kt_e_i]")
                ));
            } else {
                self.line(format!("{vt} kt_w;\n{ty}* kt_e = reinterpret_cast<{ty}*>(&kt_w);"));
                self.line(format!(
                    "#pragma unroll\nfor (int kt_e_i = 0; kt_e_i < {n}; ++kt_e_i) kt_e[kt_e_i] = {};",
                    from_f32(vc.dtype, &format!("{r}[{}]", elem("kt_e_i")))
                ));
                self.line(format!("*reinterpret_cast<{vt}*>({} + kt_off) = kt_w;", vc.ptr));
            }
            self.depth -= 1;
            self.line("} else {");
            self.depth += 1;
        } else {
            self.line("{");
            self.depth += 1;
        }
        self.line(format!(
            "#pragma unroll\nfor (int kt_e_i = 0; kt_e_i < {}; ++kt_e_i) {{",
            d.v()
        ));
        self.depth += 1;
        self.line(format!(
            "const bool kt_ok = kt_row_in && kt_gc + kt_e_i >= 0 && kt_gc + kt_e_i < {};\nconst long long kt_o = kt_off + kt_e_i * {};",
            vc.cols, vc.cstride
        ));
        if load {
            self.line(format!(
                "{r}[{}] = kt_ok ? {} : 0.0f;",
                elem("kt_e_i"),
                to_f32(vc.dtype, &format!("{}[kt_o]", vc.ptr))
            ));
        } else {
            self.line(format!(
                "if (kt_ok) {}[kt_o] = {};",
                vc.ptr,
                from_f32(vc.dtype, &format!("{r}[{}]", elem("kt_e_i")))
            ));
        }
        self.depth -= 1;
        self.line("}");
        self.depth -= 1;
        self.line("}");
        self.close_slots(d);
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    fn shared(&mut self, reg: RegId, v: &SharedView, load: bool) -> Result<(), CudaLowerError> {
        let d = dist(self.k, reg);
        if matches!(d, Dist::Replicated { .. }) {
            return unsupported("a row vector moved to or from shared memory");
        }
        let s = self.k.shared_decl(v.buf);
        let (rows, cols) = (s.tile.rows, s.tile.cols);
        let name = format!("kt_sh_{}", ident(&s.name));
        let at = format!(
            "({} * {} + ({} + kt_row) * {cols} + {} + kt_col + kt_e_i)",
            self.e(&v.index),
            rows * cols,
            self.e(&v.row0),
            self.e(&v.col0)
        );
        let r = self.r(reg);
        self.open_slots(d);
        let elem = format!("{r}[kt_s * {} + kt_e_i]", d.v());
        let stmt = if load {
            format!("{elem} = {name}[{at}];")
        } else {
            format!("{name}[{at}] = {elem};")
        };
        self.line(format!(
            "#pragma unroll\nfor (int kt_e_i = 0; kt_e_i < {}; ++kt_e_i) {stmt}",
            d.v()
        ));
        self.close_slots(d);
        Ok(())
    }

    /// The C expression of map argument `a` at element `kt_i` (slot `kt_s`, element `kt_e_i`) of a
    /// destination distributed as `d`.
    fn arg(&self, a: &Arg, d: Dist) -> Result<String, CudaLowerError> {
        let v = d.v();
        Ok(match *a {
            Arg::Scalar(x) => format!("{x:?}f"),
            Arg::Reg(r) => {
                let dr = dist(self.k, r);
                if dr != d && !(dr.len() == 1 && d.len() == 1) {
                    return unsupported("a map over registers distributed differently");
                }
                format!("{}[kt_s * {v} + kt_e_i]", self.r(r))
            }
            Arg::RowBcast(r) => {
                let ncr = d.chunks_per_row();
                let Dist::Strip { rows, .. } = d else {
                    return unsupported("a row broadcast into a vector");
                };
                if rows > 1 && !ncr.is_multiple_of(LANES) {
                    return unsupported("a row broadcast over rows narrower than 32 chunks");
                }
                format!("{}[(kt_s * {LANES}) / {ncr}]", self.r(r))
            }
            Arg::ColBcast(r) => {
                let ncr = d.chunks_per_row();
                if dist(self.k, r).v() != v || !ncr.is_multiple_of(LANES) {
                    return unsupported("a column broadcast over rows narrower than 32 chunks");
                }
                format!(
                    "{}[((kt_s * {LANES}) % {ncr}) / {LANES} * {v} + kt_e_i]",
                    self.r(r)
                )
            }
        })
    }

    fn elementwise(&mut self, dst: RegId, body: impl Fn(&Self, Dist) -> Result<String, CudaLowerError>) -> Result<(), CudaLowerError> {
        let d = dist(self.k, dst);
        let e = body(self, d)?;
        let r = self.r(dst);
        self.line(format!(
            "#pragma unroll\nfor (int kt_s = 0; kt_s < {}; ++kt_s)\n#pragma unroll\nfor (int kt_e_i = 0; kt_e_i < {}; ++kt_e_i) {{",
            d.slots(),
            d.v()
        ));
        self.depth += 1;
        self.line(format!("{r}[kt_s * {} + kt_e_i] = {e};", d.v()));
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    fn op(&mut self, op: &Op) -> Result<(), CudaLowerError> {
        match op {
            Op::LoadGlobal { dst, src } => self.global(*dst, src, true)?,
            Op::StoreGlobal { dst, src, rounding } => {
                if *rounding != Rounding::Rtne {
                    return unsupported(format!("{rounding:?} stores (round to nearest even only)"));
                }
                self.global(*src, dst, false)?
            }
            Op::LoadShared { dst, src } => self.shared(*dst, src, true)?,
            Op::StoreShared { dst, src, .. } => self.shared(*src, dst, false)?,
            Op::Map { dst, f, args, .. } => {
                let dt = self.k.reg(*dst).dtype();
                self.elementwise(*dst, |me, d| {
                    let a: Vec<String> = args
                        .iter()
                        .map(|a| me.arg(a, d))
                        .collect::<Result<_, _>>()?;
                    let x = apply(*f, &a)?;
                    // Registers hold f32; a bf16 register holds bf16 values.
                    Ok(match dt {
                        DType::F32 => x,
                        DType::Bf16 => format!("ks::bf16_to_f32(ks::f32_to_bf16({x}))"),
                        other => return unsupported(format!("{other:?} registers")),
                    })
                })?
            }
            Op::Fill { dst, value } => self.elementwise(*dst, |_, _| Ok(fconst(*value)))?,
            Op::Mask {
                dst,
                rule,
                row0,
                col0,
                value,
            } => {
                let d = dist(self.k, *dst);
                let (r0, c0) = (self.e(row0), self.e(col0));
                let keep = match rule {
                    MaskRule::ColsBelow(l) => format!("{c0} + kt_col + kt_e_i < {}", self.e(l)),
                    MaskRule::RowsBelow(l) => format!("{r0} + kt_row < {}", self.e(l)),
                    MaskRule::Causal { offset } => {
                        format!("{c0} + kt_col + kt_e_i <= {r0} + kt_row + {}", self.e(offset))
                    }
                    MaskRule::CausalT { offset } => {
                        format!("{r0} + kt_row <= {c0} + kt_col + kt_e_i + {}", self.e(offset))
                    }
                };
                let r = self.r(*dst);
                self.open_slots(d);
                self.line(format!(
                    "#pragma unroll\nfor (int kt_e_i = 0; kt_e_i < {}; ++kt_e_i)\n    if (!({keep})) {r}[kt_s * {} + kt_e_i] = {};",
                    d.v(),
                    d.v(),
                    fconst(*value)
                ));
                self.close_slots(d);
            }
            Op::Reduce {
                dst,
                src,
                axis: Axis::Rows,
                op: rop,
                acc,
            } => self.row_reduce(*dst, *src, *rop, *acc)?,
            Op::Random {
                dst,
                seed,
                offset,
                index0,
                row_stride,
            } => {
                let d = dist(self.k, *dst);
                let w = |x: &Expr| format!("(u32){}", self.e(x));
                let key = format!(
                    "{}, {}, {}, {}",
                    w(&seed[0]),
                    w(&seed[1]),
                    w(&offset[0]),
                    w(&offset[1])
                );
                let (i0, rs) = (self.e(index0), self.e(row_stride));
                let r = self.r(*dst);
                let v = d.v();
                self.open_slots(d);
                self.line(format!(
                    "const long long kt_i0 = {i0} + kt_row * {rs} + kt_col;"
                ));
                if v.is_multiple_of(4) {
                    self.line(format!(
                        "if ((kt_i0 & 3) == 0) {{\n#pragma unroll\n    for (int kt_g = 0; kt_g < {}; ++kt_g) ks::uniform4(&{r}[kt_s * {v} + 4 * kt_g], (u64)(kt_i0 >> 2) + kt_g, {key});\n}} else",
                        v / 4
                    ));
                }
                self.line(format!(
                    "{{\n#pragma unroll\n    for (int kt_e_i = 0; kt_e_i < {v}; ++kt_e_i) {r}[kt_s * {v} + kt_e_i] = ks::uniform1((u64)(kt_i0 + kt_e_i), {key});\n}}"
                ));
                self.close_slots(d);
            }
            Op::Barrier { scope } => match scope {
                Scope::Block => self.line("__syncthreads();"),
                Scope::Wave => self.line("__syncwarp();"),
                Scope::WarpGroup => return unsupported("warpgroup barriers in a strip program"),
            },
            Op::Wait { .. } | Op::Priority(_) | Op::Hint(_) | Op::SetMaxRegs { .. } => {}
            other => return unsupported(format!("`{}` in a strip program", other.name())),
        }
        Ok(())
    }

    fn row_reduce(
        &mut self,
        dst: RegId,
        src: RegId,
        op: ReduceOp,
        acc: Option<RegId>,
    ) -> Result<(), CudaLowerError> {
        let d = dist(self.k, src);
        let Dist::Strip { rows, .. } = d else {
            return unsupported("a row reduction of a vector");
        };
        let ncr = d.chunks_per_row();
        let (id, comb, warp) = match op {
            ReduceOp::Sum => ("0.0f", "+", "ks::warp_sum"),
            ReduceOp::Max => ("-__int_as_float(0x7f800000)", "max", "ks::warp_max"),
            ReduceOp::Min => ("__int_as_float(0x7f800000)", "min", "ks::warp_min"),
        };
        let c = |a: &str, b: &str| match comb {
            "+" => format!("{a} + {b}"),
            "max" => format!("fmaxf({a}, {b})"),
            _ => format!("fminf({a}, {b})"),
        };
        let (s, t) = (self.r(src), self.r(dst));
        let v = d.v();
        let valid = |slot: u32| {
            if d.full() || slot + 1 < d.slots() {
                "true".to_string()
            } else {
                format!("({slot} * {LANES} + kt_lane < {})", d.chunks())
            }
        };
        self.line("{");
        self.depth += 1;
        if ncr.is_multiple_of(LANES) {
            // Every slot of a lane lies in row `slot·32 / ncr`: sum the row's slots, then all lanes.
            let per_row = ncr / LANES;
            for row in 0..rows {
                self.line(format!("float kt_p{row} = {id};"));
                for slot in row * per_row..(row + 1) * per_row {
                    for e in 0..v {
                        self.line(format!(
                            "kt_p{row} = {};",
                            c(&format!("kt_p{row}"), &format!("{s}[{}]", slot * v + e))
                        ));
                    }
                }
                self.line(format!("kt_p{row} = {warp}(kt_p{row}, {LANES});"));
            }
        } else if LANES.is_multiple_of(ncr) {
            // A row's chunks are `ncr` consecutive lanes of one slot: sum the chunk, combine the
            // group, then fetch each row's total from the group's first lane.
            let groups = LANES / ncr;
            for slot in 0..d.slots() {
                self.line(format!("float kt_q{slot} = {id};"));
                self.line(format!("if ({}) {{", valid(slot)));
                for e in 0..v {
                    self.line(format!(
                        "    kt_q{slot} = {};",
                        c(&format!("kt_q{slot}"), &format!("{s}[{}]", slot * v + e))
                    ));
                }
                self.line("}");
                self.line(format!("kt_q{slot} = {warp}(kt_q{slot}, {ncr});"));
            }
            for row in 0..rows {
                let (slot, lane) = (row / groups, (row % groups) * ncr);
                self.line(format!(
                    "float kt_p{row} = __shfl_sync(0xffffffffu, kt_q{slot}, {lane});"
                ));
            }
        } else {
            return unsupported(format!(
                "a row reduction over {ncr} chunks per row (a multiple or a divisor of 32)"
            ));
        }
        for row in 0..rows {
            let x = match acc {
                Some(a) => c(&format!("{}[{row}]", self.r(a)), &format!("kt_p{row}")),
                None => format!("kt_p{row}"),
            };
            self.line(format!("{t}[{row}] = {x};"));
        }
        self.depth -= 1;
        self.line("}");
        Ok(())
    }
}

struct ViewC {
    ptr: String,
    dtype: DType,
    fixed_in: String,
    base: String,
    row0: String,
    col0: String,
    rows: String,
    cols: String,
    rstride: String,
    cstride: String,
    unit: bool,
}

fn to_f32(dt: DType, x: &str) -> String {
    match dt {
        DType::Bf16 => format!("ks::bf16_to_f32({x})"),
        _ => x.to_string(),
    }
}
fn from_f32(dt: DType, x: &str) -> String {
    match dt {
        DType::Bf16 => format!("ks::f32_to_bf16({x})"),
        _ => x.to_string(),
    }
}

fn fconst(v: f32) -> String {
    if v.is_infinite() {
        let s = if v < 0.0 { "-" } else { "" };
        format!("{s}__int_as_float(0x7f800000)")
    } else if v.is_nan() {
        "__int_as_float(0x7fc00000)".into()
    } else {
        format!("{v:?}f")
    }
}

fn apply(f: MapFn, a: &[String]) -> Result<String, CudaLowerError> {
    Ok(match (f, a) {
        (MapFn::Add, [x, y]) => format!("({x} + {y})"),
        (MapFn::Sub, [x, y]) => format!("({x} - {y})"),
        (MapFn::Mul, [x, y]) => format!("({x} * {y})"),
        (MapFn::Div, [x, y]) => format!("({x} / {y})"),
        (MapFn::Max, [x, y]) => format!("fmaxf({x}, {y})"),
        (MapFn::Min, [x, y]) => format!("fminf({x}, {y})"),
        (MapFn::Ge, [x, y]) => format!("({x} >= {y} ? 1.0f : 0.0f)"),
        (MapFn::Exp, [x]) => format!("expf({x})"),
        (MapFn::Exp2, [x]) => format!("exp2f({x})"),
        (MapFn::Log, [x]) => format!("logf({x})"),
        (MapFn::Neg, [x]) => format!("(-{x})"),
        (MapFn::Abs, [x]) => format!("fabsf({x})"),
        (MapFn::Rsqrt, [x]) => format!("rsqrtf({x})"),
        (MapFn::Copy, [x]) => x.clone(),
        _ => return unsupported(format!("`{}` with {} arguments", f.name(), a.len())),
    })
}

/// Lowers a strip program (see the module documentation).
pub fn lower_strip(k: &Kernel) -> Result<Lowered, CudaLowerError> {
    if !is_strip_program(k) {
        return unsupported("a plain-schedule program whose registers are not all strips");
    }
    if k.grid.remap != GridOrder::RowMajor {
        return unsupported(format!("grid order {:?} in a strip program", k.grid.remap));
    }
    let mut e = Emit {
        k,
        out: String::new(),
        depth: 1,
    };
    // Parameters as 64-bit values, then the grid coordinates (row-major, last fastest).
    for p in &k.params {
        let n = ident(&p.name);
        e.line(format!("const long long {n} = (long long)p_{n};"));
    }
    e.line("long long kt_id = blockIdx.x;");
    for (i, x) in k.grid.extents.iter().enumerate().rev() {
        let ext = e.e(x);
        e.line(format!(
            "const long long blk{i} = kt_id % {ext}; kt_id /= {ext};"
        ));
    }
    e.line(format!(
        "const long long wave = threadIdx.x / {LANES};\nconst int kt_lane = threadIdx.x % {LANES};"
    ));
    for s in &k.shared {
        e.line(format!(
            "__shared__ float kt_sh_{}[{}];",
            ident(&s.name),
            s.count * s.tile.rows * s.tile.cols
        ));
        if s.tile.dtype != DType::F32 {
            return unsupported("shared buffers of other than f32 in a strip program");
        }
    }
    for (i, _) in k.regs.iter().enumerate() {
        let r = RegId(i as u32);
        let n = dist(k, r).len();
        e.line(format!("float {}[{n}];", e.r(r)));
    }
    e.body(&k.body)?;
    let body = std::mem::take(&mut e.out);
    let name = format!("{}_sm90_lowered", ident(&k.name));
    let mut args: Vec<String> = Vec::new();
    for g in &k.globals {
        let ty = storage(g.dtype)?;
        args.push(format!("{ty}* g_{}", ident(&g.name)));
    }
    args.extend(k.params.iter().map(|p| format!("int p_{}", ident(&p.name))));
    let threads = LANES * k.waves;
    let src = format!(
        "{}\n// Lowered from the tile program `{}` by kittens-codegen::cuda::lower_strip.\n\
         extern \"C\" __global__ void __launch_bounds__({threads})\n{name}({}) {{\n{body}}}\n",
        super::STRIP_PRELUDE,
        k.name,
        args.join(", ")
    );
    let mut kargs: Vec<KernelArg> = k
        .globals
        .iter()
        .map(|g| KernelArg::Global {
            name: g.name.clone(),
        })
        .collect();
    kargs.extend(k.params.iter().map(|p| KernelArg::Param {
        name: p.name.clone(),
    }));
    Ok(Lowered {
        target: Target::Sm90a,
        source: src,
        entry: name,
        threads,
        shared_bytes: k.shared_bytes(),
        shared_alloc: SharedAlloc::Static,
        grid: GridRule::PerTile,
        args: kargs,
        ir: k.clone(),
    })
}
