//! Lowering memory-bound tile programs (plain schedule, every register tile a strip:
//! `kittens_tile::BaseShape::STRIP`) — layernorm, rotary — to CUDA C++ for sm_90a and HIP C++ for
//! gfx942/gfx950: one emitter, two [`Dialect`]s (lane count, thread ids, shuffles, math builtins,
//! vector types, prelude). The HIP output runs on the host emulation too, which is how this emitter
//! is tested without a GPU.
//!
//! Distribution: a strip tile of `rows × cols` is cut into chunks of `v` consecutive elements of a row
//! (`v` = 8, 4, 2 or 1, the largest dividing `cols`: 16 bytes of bf16), numbered row-major and dealt to
//! the `L` lanes of the wave round robin (`L` = 32 on NVIDIA, 64 on AMD): chunk `k` is lane `k % L`'s
//! slot `k / L`. A lane's slots are
//! a `float` array indexed by constants after unrolling, so they live in registers. A column vector is
//! distributed like a one-row tile of its length — or, when it has fewer chunks than the wave has
//! lanes (and they divide the lanes), once per group of lanes, so that a column broadcast into rows
//! narrower than a wave finds its chunk in the lane's own registers; a row vector is replicated in
//! every lane.
//!
//! | IR | CUDA |
//! |---|---|
//! | `load`/`store` global | one 16-, 8- or 4-byte access per chunk where the column stride is 1, the chunk lies inside the tensor and its offset is aligned; element by element (bounds-checked) otherwise. A run of consecutive loads issues every load before converting any; the two members of an interleaved pair (column stride 2) move as one contiguous access; a row vector (replicated) is read by every lane and written by lane 0, element by element; bf16 stores round as the op says (RTNE, RTNA, RTZ) (`global.rs`) |
//! | `map` | per element, in f32; a broadcast vector's entry is a constant index |
//! | `row_sum`/`row_max` | a lane's slots of the row, then an XOR butterfly over the lanes (CUDA `shfl.xor`, AMD `ds_bpermute`) |
//! | `random` | Philox 4x32-10 (`ks::philox`), one call per 4 elements of an aligned chunk |
//! | `store`/`load` shared, `barrier` | `__shared__` arrays, the block barrier |
//! | `load_async`, `wait` | 16-byte `cp.async` per chunk, one commit group per op, `cp.async.wait_group` (sm_90a; AMD: a copy at issue) (`copy.rs`) |
//!
//! One block per tile of the grid (`GridRule::PerTile`), row-major coordinates.

use kittens_hw::{dtype::DType, Target};
use kittens_ir::{
    Arg, Axis, BinOp, Expr, GridOrder, Kernel, MapFn, MaskRule, Op, ReduceOp, RegId, RegKind,
    Rounding, Scope, Stmt,
};
use kittens_tile::BaseShape;
use thiserror::Error;

use crate::cexpr::{self, ident, CNames};

mod copy;
mod dialects;
mod dist;
mod global;
mod memory;
mod mma;
use crate::lowered::{GridRule, KernelArg, Lowered};
pub use dialects::{hip, CUDA};
use dist::{dist, Dist};

/// What the strip lowering cannot do.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("the strip lowering does not support {0}")]
pub struct StripError(pub String);

fn unsupported<T>(what: impl Into<String>) -> Result<T, StripError> {
    Err(StripError(what.into()))
}

/// How one target spells what the emitter needs.
#[derive(Debug, Clone, Copy)]
pub struct Dialect {
    pub target: Target,
    /// Lanes of a wave.
    pub lanes: u32,
    /// Everything before the kernel (the target's prelude and the `ks::` helpers).
    pub prelude: &'static str,
    pub names: CNames<'static>,
    /// Thread index in the block, block index in the grid (C expressions).
    pub thread: &'static str,
    pub block: &'static str,
    /// `extern "C"` kernel attributes before the name, given threads per block and the blocks asked
    /// to be resident per SM (`kittens_ir::Grid::resident`).
    pub launch: fn(u32, u32) -> String,
    /// The first statement of every kernel body (CUDA: wait for the grid before, where launched as
    /// its programmatic dependent).
    pub entry_prologue: &'static str,
    /// The entry's name for a kernel.
    pub entry: fn(&str) -> String,
    /// `v` XOR-exchanged with the lane `m` apart, as a C expression.
    pub shfl_xor: fn(&str, u32) -> String,
    pub barrier: &'static str,
    /// 16-, 8- and 4-byte vector types.
    pub vec16: &'static str,
    pub vec8: &'static str,
    pub vec4: &'static str,
    /// Pointer element type of a global of this dtype (`None`: refused).
    pub elem: fn(DType) -> Option<&'static str>,
    /// Whether read-only globals are `const`.
    pub const_inputs: bool,
    pub fmax: &'static str,
    pub fmin: &'static str,
    pub fabs: &'static str,
    pub exp: fn(&str) -> String,
    pub exp2: fn(&str) -> String,
    pub log: fn(&str) -> String,
    /// `1/√x` as a C expression of `x`.
    pub rsqrt: fn(&str) -> String,
    /// `num / (1 + e^(−x))` as a C expression (`sigmoid`: `num` 1, `silu`: `num` x), where the
    /// dialect has a cheaper form than [`Self::arith`]'s division over [`Self::exp`]; `None`: that
    /// composition.
    pub logistic: Option<fn(&str, &str) -> String>,
    /// `a op b` for `op` in `+ - * /`, rounded once as the IR's per-op f32 arithmetic requires (no
    /// contraction into fused multiply-adds, so every backend computes the same bits).
    pub arith: fn(char, &str, &str) -> String,
    /// The first line of the kernel body (HIP: contraction off).
    pub prologue: &'static str,
    pub inf: &'static str,
    pub nan: &'static str,
    /// Whether bf16 registers are kept at 16 bits (`ks::bf16_regs`, bf16_regs.h: two per 32-bit
    /// register, f32 arithmetic per element); else every register element is a `float`.
    pub bf16_regs: bool,
    /// A statement ordering the shared-memory accesses of a wave's lanes (CUDA: `__syncwarp()`;
    /// empty where a wave runs in lockstep).
    pub wave_sync: &'static str,
}

/// Static `__shared__` bytes a kernel may declare (CUDA C++ Programming Guide, "Shared Memory": more
/// needs dynamic shared memory and an opt-in).
pub const STATIC_SHARED: u32 = 48 * 1024;

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
    d: Dialect,
    out: String,
    depth: usize,
    /// Bytes of one wave's `mma` scratch (`mma.rs`).
    mma_stride: u32,
}

impl Emit<'_> {
    fn storage(&self, dt: DType) -> Result<&'static str, StripError> {
        match dt {
            DType::Bf16 | DType::F32 => (self.d.elem)(dt)
                .ok_or_else(|| StripError(format!("{dt:?} tensors on {}", self.d.target))),
            other => unsupported(format!(
                "{other:?} tensors in a strip program (bf16 or f32)"
            )),
        }
    }
    fn dist(&self, r: RegId) -> Dist {
        dist(self.k, r, self.d.lanes)
    }
    fn line(&mut self, s: impl AsRef<str>) {
        for l in s.as_ref().lines() {
            self.out.push_str(&"    ".repeat(self.depth));
            self.out.push_str(l);
            self.out.push('\n');
        }
    }
    fn e(&self, x: &Expr) -> String {
        format!("((kt_idx){})", cexpr::expr_in(self.k, x, &self.d.names))
    }
    /// Whether register `r` is kept at 16 bits ([`Dialect::bf16_regs`]).
    fn packed(&self, r: RegId) -> bool {
        self.d.bf16_regs && self.k.reg(r).dtype() == DType::Bf16
    }
    fn r(&self, r: RegId) -> String {
        format!("r{}_{}", r.0, ident(&self.k.reg(r).name))
    }

    fn body(&mut self, body: &[Stmt]) -> Result<(), StripError> {
        let mut i = 0;
        while i < body.len() {
            let s = &body[i];
            i += 1;
            match s {
                Stmt::Op { op, .. } => {
                    let op_at = |j: usize| match body.get(j) {
                        Some(Stmt::Op { op, .. }) => Some(op),
                        _ => None,
                    };
                    // A run of consecutive global loads is emitted as one (all in flight at once);
                    // the two members of an interleaved pair, moved one after the other, move as
                    // one contiguous access.
                    let (mut loads, mut j) = (Vec::new(), i - 1);
                    while let Some(a) = op_at(j) {
                        if let Some((regs, view, true)) = op_at(j + 1).and_then(|b| self.pair(a, b))
                        {
                            loads.push((regs.to_vec(), view));
                            j += 2;
                        } else if let Op::LoadGlobal { dst, src } = a {
                            loads.push((vec![*dst], src.clone()));
                            j += 1;
                        } else {
                            break;
                        }
                    }
                    if !loads.is_empty() {
                        self.global_loads(&loads)?;
                        i = j;
                    } else if let Some((regs, view, false)) =
                        op_at(i).and_then(|b| self.pair(op, b))
                    {
                        self.global_store(&regs, &view, Rounding::Rtne)?;
                        i += 1;
                    } else {
                        self.op(op)?;
                    }
                }
                Stmt::For {
                    var,
                    start,
                    end,
                    body,
                } => {
                    let v = cexpr::var_name(self.k, var.0);
                    let (a, b) = (self.e(start), self.e(end));
                    self.line(format!("for (kt_idx {v} = {a}; {v} < {b}; ++{v}) {{"));
                    self.depth += 1;
                    self.body(body)?;
                    self.depth -= 1;
                    self.line("}");
                }
                Stmt::If { cond, then, els } => {
                    let c = cexpr::cond_in(self.k, cond, &self.d.names);
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
                Stmt::LastArrival { .. } => {
                    return unsupported("a last-arrival hand-off in a strip program")
                }
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
        let k = if d.grouped() {
            format!("kt_lane % {ncr}")
        } else {
            format!("kt_s * {} + kt_lane", self.d.lanes)
        };
        self.line(format!(
            "const int kt_k = {k};\nconst int kt_row = kt_k / {ncr}, kt_col = (kt_k % {ncr}) * {};\n(void)kt_row; (void)kt_col;",
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

    /// The C expression of map argument `a` at element `kt_i` (slot `kt_s`, element `kt_e_i`) of a
    /// destination distributed as `d`.
    fn arg(&self, a: &Arg, d: Dist) -> Result<String, StripError> {
        let v = d.v();
        Ok(match *a {
            Arg::Scalar(x) => format!("{x:?}f"),
            Arg::Reg(r) => {
                let dr = self.dist(r);
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
                let lanes = self.d.lanes;
                if rows > 1 && !ncr.is_multiple_of(lanes) {
                    return unsupported("a row broadcast over rows narrower than a wave of chunks");
                }
                format!("{}[(kt_s * {lanes}) / {ncr}]", self.r(r))
            }
            Arg::ColBcast(r) => {
                let ncr = d.chunks_per_row();
                let lanes = self.d.lanes;
                if let (Dist::Grouped { cols, .. }, Dist::Strip { cols: c, .. }) = (self.dist(r), d)
                {
                    // Rows narrower than a wave: every slot of a lane is in the chunk of columns
                    // the lane holds of the vector.
                    if cols != c || self.dist(r).v() != v {
                        return unsupported("a column broadcast of a vector of another length");
                    }
                    return Ok(format!("{}[kt_e_i]", self.r(r)));
                }
                if self.dist(r).v() != v || !ncr.is_multiple_of(lanes) {
                    return unsupported(
                        "a column broadcast over rows narrower than a wave of chunks",
                    );
                }
                format!(
                    "{}[((kt_s * {lanes}) % {ncr}) / {lanes} * {v} + kt_e_i]",
                    self.r(r)
                )
            }
        })
    }

    /// `dst = body` per element: an f32 value, or with `bits` a bf16 bit pattern for a register kept
    /// at 16 bits.
    fn elementwise(
        &mut self,
        dst: RegId,
        bits: bool,
        body: impl Fn(&Self, Dist) -> Result<String, StripError>,
    ) -> Result<(), StripError> {
        let d = self.dist(dst);
        let e = body(self, d)?;
        let r = self.r(dst);
        self.line(format!(
            "#pragma unroll\nfor (int kt_s = 0; kt_s < {}; ++kt_s)\n#pragma unroll\nfor (int kt_e_i = 0; kt_e_i < {}; ++kt_e_i) {{",
            d.slots(),
            d.v()
        ));
        self.depth += 1;
        if bits {
            self.line(format!("{r}[kt_s * {} + kt_e_i].set_bits({e});", d.v()));
        } else {
            self.line(format!("{r}[kt_s * {} + kt_e_i] = {e};", d.v()));
        }
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    fn op(&mut self, op: &Op) -> Result<(), StripError> {
        match op {
            Op::LoadGlobal { dst, src } => self.global_loads(&[(vec![*dst], src.clone())])?,
            Op::StoreGlobal { dst, src, rounding } => self.global_store(&[*src], dst, *rounding)?,
            Op::LoadShared { dst, src } => self.shared(*dst, src, None)?,
            Op::StoreShared { dst, src, rounding } => self.shared(*src, dst, Some(*rounding))?,
            Op::Map {
                dst,
                f,
                args,
                rounding,
            } => {
                let dt = self.k.reg(*dst).dtype();
                let packed = self.packed(*dst);
                self.elementwise(*dst, packed, |me, d| {
                    let a: Vec<String> = args
                        .iter()
                        .map(|a| me.arg(a, d))
                        .collect::<Result<_, _>>()?;
                    let x = me.apply(*f, &a)?;
                    // Registers read as f32; a bf16 register holds bf16 values, rounded as the op says.
                    Ok(match dt {
                        DType::F32 => x,
                        DType::Bf16 if packed => memory::from_f32(DType::Bf16, &x, *rounding),
                        DType::Bf16 => format!(
                            "ks::bf16_to_f32({})",
                            memory::from_f32(DType::Bf16, &x, *rounding)
                        ),
                        other => return unsupported(format!("{other:?} registers")),
                    })
                })?
            }
            Op::Fill { dst, value } => {
                self.elementwise(*dst, false, |me, _| Ok(me.fconst(*value)))?
            }
            Op::Mask {
                dst,
                rule,
                row0,
                col0,
                value,
            } => {
                let d = self.dist(*dst);
                let (r0, c0) = (self.e(row0), self.e(col0));
                let keep = match rule {
                    MaskRule::ColsBelow(l) => format!("{c0} + kt_col + kt_e_i < {}", self.e(l)),
                    MaskRule::RowsBelow(l) => format!("{r0} + kt_row < {}", self.e(l)),
                    MaskRule::Causal { offset } => {
                        format!(
                            "{c0} + kt_col + kt_e_i <= {r0} + kt_row + {}",
                            self.e(offset)
                        )
                    }
                    MaskRule::CausalT { offset } => {
                        format!(
                            "{r0} + kt_row <= {c0} + kt_col + kt_e_i + {}",
                            self.e(offset)
                        )
                    }
                    MaskRule::WindowStart { offset } => {
                        format!(
                            "{c0} + kt_col + kt_e_i >= {r0} + kt_row + {}",
                            self.e(offset)
                        )
                    }
                    MaskRule::WindowStartT { offset } => {
                        format!(
                            "{r0} + kt_row >= {c0} + kt_col + kt_e_i + {}",
                            self.e(offset)
                        )
                    }
                };
                let r = self.r(*dst);
                self.open_slots(d);
                self.line(format!(
                    "#pragma unroll\nfor (int kt_e_i = 0; kt_e_i < {}; ++kt_e_i)\n    if (!({keep})) {r}[kt_s * {} + kt_e_i] = {};",
                    d.v(),
                    d.v(),
                    self.fconst(*value)
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
                let d = self.dist(*dst);
                let w = |x: &Expr| format!("(unsigned){}", self.e(x));
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
                // Four uniforms into elements `4·kt_g ..` of the slot (through f32 temporaries into
                // a register kept at 16 bits).
                let four = if self.packed(*dst) {
                    format!("{{ float kt_u[4]; ks::uniform4(kt_u, (unsigned long long)(kt_i0 >> 2) + kt_g, {key}); for (int kt_q = 0; kt_q < 4; ++kt_q) {r}[kt_s * {v} + 4 * kt_g + kt_q] = kt_u[kt_q]; }}")
                } else {
                    format!("ks::uniform4(&{r}[kt_s * {v} + 4 * kt_g], (unsigned long long)(kt_i0 >> 2) + kt_g, {key});")
                };
                self.open_slots(d);
                self.line(format!(
                    "const kt_idx kt_i0 = {i0} + kt_row * {rs} + kt_col;"
                ));
                // Chunks start at a multiple of 4 elements when the row's first index and the row
                // stride are multiples of 4 (then the per-element path is dead code: 4v inlined
                // Philox calls the compiler would still schedule around).
                let aligned =
                    v.is_multiple_of(4) && multiple_of(index0, 4) && multiple_of(row_stride, 4);
                if aligned {
                    self.line(format!(
                        "#pragma unroll\nfor (int kt_g = 0; kt_g < {}; ++kt_g) {four}",
                        v / 4
                    ));
                    self.close_slots(d);
                    return Ok(());
                }
                if v.is_multiple_of(4) {
                    self.line(format!(
                        "if ((kt_i0 & 3) == 0) {{\n#pragma unroll\n    for (int kt_g = 0; kt_g < {}; ++kt_g) {four}\n}} else",
                        v / 4
                    ));
                }
                self.line(format!(
                    "{{\n#pragma unroll\n    for (int kt_e_i = 0; kt_e_i < {v}; ++kt_e_i) {r}[kt_s * {v} + kt_e_i] = ks::uniform1((unsigned long long)(kt_i0 + kt_e_i), {key});\n}}"
                ));
                self.close_slots(d);
            }
            Op::LoadAsync { dst, src, scope } => self.load_async(dst, src, *scope)?,
            Op::Mma { form, d, a, b, c } => self.mma(*form, *d, a, b, *c)?,
            Op::Barrier { scope } => match scope {
                Scope::Block => self.line(format!("{};", self.d.barrier)),
                // Registers are per lane; shared memory one lane wrote is another's after a wave
                // barrier.
                Scope::Wave => self.line(self.d.wave_sync),
                Scope::WarpGroup | Scope::Consumers => {
                    return unsupported("warpgroup or consumer barriers in a strip program")
                }
            },
            Op::Wait { queue, count } => self.wait(*queue, *count),
            Op::Priority(_) | Op::Hint(_) | Op::SetMaxRegs { .. } => {}
            other => return unsupported(format!("`{}` in a strip program", other.name())),
        }
        Ok(())
    }

    /// `v` combined over every lane of the wave: an XOR butterfly, so every lane ends with the total.
    fn butterfly(&mut self, v: &str, comb: &dyn Fn(&str, &str) -> String) {
        let mut m = self.d.lanes / 2;
        while m > 0 {
            let x = (self.d.shfl_xor)(v, m);
            self.line(format!("{v} = {};", comb(v, &x)));
            m /= 2;
        }
    }

    fn row_reduce(
        &mut self,
        dst: RegId,
        src: RegId,
        op: ReduceOp,
        acc: Option<RegId>,
    ) -> Result<(), StripError> {
        let d = self.dist(src);
        let Dist::Strip { rows, .. } = d else {
            return unsupported("a row reduction of a vector");
        };
        let (ncr, lanes, v) = (d.chunks_per_row(), self.d.lanes, d.v());
        let id = match op {
            ReduceOp::Sum => "0.0f".to_string(),
            ReduceOp::Max => format!("(-{})", self.d.inf),
            ReduceOp::Min => self.d.inf.to_string(),
        };
        let (fmax, fmin) = (self.d.fmax, self.d.fmin);
        let arith = self.d.arith;
        let comb = move |a: &str, b: &str| match op {
            ReduceOp::Sum => arith('+', a, b),
            ReduceOp::Max => format!("{fmax}({a}, {b})"),
            ReduceOp::Min => format!("{fmin}({a}, {b})"),
        };
        let (s, t) = (self.r(src), self.r(dst));
        self.line("{");
        self.depth += 1;
        if ncr.is_multiple_of(lanes) {
            // Every slot of a lane lies in row `slot·lanes / ncr`: combine the row's slots, then
            // the lanes.
            let per_row = ncr / lanes;
            for row in 0..rows {
                self.line(format!("float kt_p{row} = {id};"));
                for slot in row * per_row..(row + 1) * per_row {
                    for e in 0..v {
                        let x = comb(&format!("kt_p{row}"), &format!("{s}[{}]", slot * v + e));
                        self.line(format!("kt_p{row} = {x};"));
                    }
                }
                self.butterfly(&format!("kt_p{row}"), &comb);
            }
        } else {
            // Rows narrower than a wave of chunks: per row, each lane combines the chunks it holds of
            // that row (the identity elsewhere), then the whole wave — one butterfly per row.
            for row in 0..rows {
                self.line(format!("float kt_p{row} = {id};"));
                for slot in 0..d.slots() {
                    let k = format!("({slot} * {lanes} + kt_lane)");
                    self.line(format!(
                        "if ({k} < {} && {k} / {ncr} == {row}) {{",
                        d.chunks()
                    ));
                    for e in 0..v {
                        let x = comb(&format!("kt_p{row}"), &format!("{s}[{}]", slot * v + e));
                        self.line(format!("    kt_p{row} = {x};"));
                    }
                    self.line("}");
                }
                self.butterfly(&format!("kt_p{row}"), &comb);
            }
        }
        for row in 0..rows {
            let x = match acc {
                Some(a) => comb(&format!("{}[{row}]", self.r(a)), &format!("kt_p{row}")),
                None => format!("kt_p{row}"),
            };
            self.line(format!("{t}[{row}] = {x};"));
        }
        self.depth -= 1;
        self.line("}");
        Ok(())
    }
}

impl Emit<'_> {
    fn fconst(&self, v: f32) -> String {
        if v.is_infinite() {
            let s = if v < 0.0 { "-" } else { "" };
            format!("({s}{})", self.d.inf)
        } else if v.is_nan() {
            self.d.nan.into()
        } else {
            format!("{v:?}f")
        }
    }

    fn apply(&self, f: MapFn, a: &[String]) -> Result<String, StripError> {
        let d = &self.d;
        Ok(match (f, a) {
            (MapFn::Add, [x, y]) => (d.arith)('+', x, y),
            (MapFn::Sub, [x, y]) => (d.arith)('-', x, y),
            (MapFn::Mul, [x, y]) => (d.arith)('*', x, y),
            (MapFn::Div, [x, y]) => (d.arith)('/', x, y),
            (MapFn::Max, [x, y]) => format!("{}({x}, {y})", d.fmax),
            (MapFn::Min, [x, y]) => format!("{}({x}, {y})", d.fmin),
            (MapFn::Ge, [x, y]) => format!("({x} >= {y} ? 1.0f : 0.0f)"),
            (MapFn::Exp, [x]) => (d.exp)(x),
            (MapFn::Exp2, [x]) => (d.exp2)(x),
            (MapFn::Log, [x]) => (d.log)(x),
            (MapFn::Neg, [x]) => format!("(-{x})"),
            (MapFn::Abs, [x]) => format!("{}({x})", d.fabs),
            (MapFn::Rsqrt, [x]) => (d.rsqrt)(x),
            (MapFn::Sigmoid | MapFn::Silu, [x]) => {
                let num = if f == MapFn::Silu { x.as_str() } else { "1.0f" };
                match d.logistic {
                    Some(logistic) => logistic(num, x),
                    None => {
                        let den = (d.arith)('+', "1.0f", &(d.exp)(&format!("(-{x})")));
                        (d.arith)('/', num, &den)
                    }
                }
            }
            (MapFn::Tanh, [x]) => {
                // 1 − 2/(e^(2x) + 1): exact at both ends (e^(2x) over- or underflowing gives ±1).
                let den = (d.arith)('+', &(d.exp)(&format!("(2.0f * {x})")), "1.0f");
                (d.arith)('-', "1.0f", &(d.arith)('/', "2.0f", &den))
            }
            (MapFn::Copy, [x]) => x.clone(),
            _ => return unsupported(format!("`{}` with {} arguments", f.name(), a.len())),
        })
    }
}

/// Whether `e` is a multiple of `m` for every value of its names (a sufficient test: constants,
/// sums and differences of multiples, products with a multiple).
fn multiple_of(e: &Expr, m: i64) -> bool {
    match e {
        Expr::Const(c) => c % m == 0,
        Expr::Bin(BinOp::Add | BinOp::Sub | BinOp::Min | BinOp::Max, a, b) => {
            multiple_of(a, m) && multiple_of(b, m)
        }
        Expr::Bin(BinOp::Mul, a, b) => multiple_of(a, m) || multiple_of(b, m),
        _ => false,
    }
}

/// Lowers a strip program (see the module documentation) in dialect `d`.
pub fn lower_strip(k: &Kernel, d: Dialect) -> Result<Lowered, StripError> {
    if !is_strip_program(k) {
        return unsupported("a plain-schedule program whose registers are not all strips");
    }
    lower_any(k, d)
}

/// Lowers any plain-schedule program for sm_90a: its register tiles distributed as strips whatever
/// their base shape (the AMD fragment), `mma` on the warp's tensor cores and asynchronous copies
/// done at issue (`mma.rs`). Correct first: the schedules that target Hopper's fast paths are the
/// producer/consumer ones.
pub fn lower_plain(k: &Kernel, d: Dialect) -> Result<Lowered, StripError> {
    if !matches!(k.schedule, kittens_ir::Schedule::Plain { .. }) {
        return unsupported(format!(
            "the {} schedule (a plain program, or producer/consumer through the Hopper lowering)",
            k.schedule.name()
        ));
    }
    mma::plain_registers(k)?;
    lower_any(k, d)
}

fn lower_any(k: &Kernel, d: Dialect) -> Result<Lowered, StripError> {
    if k.grid.remap != GridOrder::RowMajor {
        return unsupported(format!("grid order {:?} in a strip program", k.grid.remap));
    }
    let lanes = d.lanes;
    let mma_stride = mma::mma_scratch_per_wave(k);
    let mut e = Emit {
        k,
        d,
        out: String::new(),
        depth: 1,
        mma_stride,
    };
    if !d.prologue.is_empty() {
        e.line(d.prologue);
    }
    // Index arithmetic in `kt_idx`: 64-bit, or 32-bit where the program declares that every global
    // spans at most `kittens_ir::INDEX32_MAX_SPAN` elements (`Grid::index32`, checked at launch): a
    // 64-bit offset takes two registers and two instructions per add. Parameters as `kt_idx`, then
    // the grid coordinates (row-major, last fastest).
    e.line(format!(
        "typedef {} kt_idx;",
        if k.grid.index32 { "int" } else { "long long" }
    ));
    for p in &k.params {
        let n = ident(&p.name);
        e.line(format!("const kt_idx {n} = (kt_idx)p_{n};"));
    }
    // The block index splits in 32-bit arithmetic: a launch has fewer than 2^32 blocks, so every
    // extent fits (64-bit division is a long software sequence on both vendors' GPUs).
    e.line(format!("unsigned kt_id = (unsigned)({});", d.block));
    for (i, x) in k.grid.extents.iter().enumerate().rev() {
        let ext = e.e(x);
        e.line(format!(
            "const kt_idx blk{i} = (kt_idx)(kt_id % (unsigned){ext}); kt_id /= (unsigned){ext};"
        ));
    }
    e.line(format!(
        "const kt_idx wave = (kt_idx)({}) / {lanes};\nconst int kt_lane = (int)(({}) % {lanes});",
        d.thread, d.thread
    ));
    let (shared_bytes, shared_alloc) = e.declare_shared(mma_stride * k.waves)?;
    for (i, _) in k.regs.iter().enumerate() {
        let r = RegId(i as u32);
        let n = e.dist(r).len();
        if e.packed(r) {
            e.line(format!("ks::bf16_regs<{n}> {} = {{}};", e.r(r)));
        } else {
            e.line(format!("float {}[{n}];", e.r(r)));
        }
    }
    e.body(&k.body)?;
    let body = std::mem::take(&mut e.out);
    let name = (d.entry)(&k.name);
    let mut args: Vec<String> = Vec::new();
    for g in &k.globals {
        let ty = e.storage(g.dtype)?;
        let c = if d.const_inputs && g.access == kittens_ir::Access::Read {
            "const "
        } else {
            ""
        };
        args.push(format!("{c}{ty}* g_{}", ident(&g.name)));
    }
    args.extend(k.params.iter().map(|p| format!("int p_{}", ident(&p.name))));
    let threads = lanes * k.waves;
    let src = format!(
        "{}\n// Lowered from the tile program `{}` by kittens-codegen::strip.\n\
         extern \"C\" __global__ {}\n{name}({}) {{\n{}{body}}}\n",
        d.prelude,
        k.name,
        (d.launch)(threads, k.grid.resident),
        args.join(", "),
        d.entry_prologue
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
        target: d.target,
        source: src,
        entry: name,
        threads,
        shared_bytes,
        shared_alloc,
        grid: GridRule::PerTile,
        cluster: 1,
        args: kargs,
        waits_for_previous_grid: !d.entry_prologue.is_empty(),
        ir: k.clone(),
    })
}
