//! The strip emitter's memory ops: loads and stores between strip registers and global views (16-byte
//! vectors where the chunk allows, element by element at the edges) or shared buffers.

use kittens_hw::dtype::DType;
use kittens_ir::{GlobalView, Op, RegId, Rounding, SharedView};

use super::{unsupported, Dist, Emit, StripError};
use crate::cexpr::ident;

impl Emit<'_> {
    /// C expressions of a global view: (pointer, offset of element (row `r`, col `c`) as a function of
    /// the names, in-bounds condition of the view's fixed coordinates, row bound, col bound, the col
    /// stride when it is a constant).
    fn view(&self, v: &GlobalView) -> Result<ViewC, StripError> {
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
            cstride_const: g.strides[cd].as_const(),
        })
    }

    pub(super) fn global(
        &mut self,
        reg: RegId,
        v: &GlobalView,
        load: bool,
    ) -> Result<(), StripError> {
        self.global_members(&[reg], v, load)
    }

    /// Moves `regs` between registers and global memory: one register, or the two members of a
    /// pair (`regs[j]` is member `j` of the view's pair dimension, which is the element after member
    /// 0: stride 1, with the view's columns at stride 2 — the interleaved layout of rotary's GPT-J
    /// form). A pair's chunks move as one contiguous run of `2v` elements, split into or merged from
    /// the two registers in the lane, instead of `2v` strided element accesses.
    pub(super) fn global_members(
        &mut self,
        regs: &[RegId],
        v: &GlobalView,
        load: bool,
    ) -> Result<(), StripError> {
        let d = self.dist(regs[0]);
        if matches!(d, Dist::Replicated { .. }) {
            return unsupported("a row vector moved to or from global memory");
        }
        if regs.iter().any(|r| self.dist(*r) != d) {
            return unsupported("a pair of registers distributed differently");
        }
        let vc = self.view(v)?;
        let ty = self.storage(vc.dtype)?;
        let m = regs.len() as u32;
        // Elements of one vector access: `v` of each member, interleaved.
        let n = d.v() * m;
        // One register at column stride 1, or a pair at column stride 2.
        let contiguous = vc.cstride_const == Some(i64::from(m));
        let bytes = n * vc.dtype.bytes();
        // One access of 4, 8 or 16 bytes, or several of 16.
        let (vec_ty, pieces) = match bytes {
            4 => (Some(self.d.vec4), 1),
            8 => (Some(self.d.vec8), 1),
            b if b >= 16 && b.is_multiple_of(16) => (Some(self.d.vec16), b / 16),
            _ => (None, 0),
        };
        let piece = n / pieces.max(1);
        self.line("{");
        self.depth += 1;
        self.line(format!(
            "const bool kt_in = {};\nconst long long kt_base = {};",
            vc.fixed_in, vc.base
        ));
        self.open_slots(d);
        if d.grouped() && !load {
            // Every group of lanes holds the whole vector: the first writes it.
            self.line(format!("if (kt_lane < {}) {{", d.chunks()));
            self.depth += 1;
        }
        self.line(format!(
            "const long long kt_gr = {} + kt_row, kt_gc = {} + kt_col;\nconst long long kt_off = kt_base + kt_gr * {} + kt_gc * {};\nconst bool kt_row_in = kt_in && kt_gr >= 0 && kt_gr < {};",
            vc.row0, vc.col0, vc.rstride, vc.cstride, vc.rows
        ));
        let regn: Vec<String> = regs.iter().map(|r| self.r(*r)).collect();
        let elem = |j: usize, e: &str| format!("{}[kt_s * {} + {e}]", regn[j], d.v());
        if let (true, Some(vt)) = (contiguous, vec_ty) {
            self.line(format!(
                "if (kt_row_in && kt_gc >= 0 && kt_gc + {} <= {} && (kt_off % {n}) == 0) {{",
                d.v(),
                vc.cols
            ));
            self.depth += 1;
            let at = |p: u32| format!("{} + kt_off + {}", vc.ptr, p * piece);
            if load {
                self.line(format!("{vt} kt_w[{pieces}];"));
                for p in 0..pieces {
                    self.line(format!(
                        "kt_w[{p}] = *reinterpret_cast<const {vt}*>({});",
                        at(p)
                    ));
                }
                self.line(format!(
                    "const {ty}* kt_e = reinterpret_cast<const {ty}*>(kt_w);"
                ));
                for (j, _) in regs.iter().enumerate() {
                    self.line(format!(
                        "#pragma unroll\nfor (int kt_e_i = 0; kt_e_i < {}; ++kt_e_i) {} = {};",
                        d.v(),
                        elem(j, "kt_e_i"),
                        to_f32(vc.dtype, &format!("kt_e[kt_e_i * {m} + {j}]"))
                    ));
                }
            } else {
                self.line(format!(
                    "{vt} kt_w[{pieces}];\n{ty}* kt_e = reinterpret_cast<{ty}*>(kt_w);"
                ));
                for (j, _) in regs.iter().enumerate() {
                    self.line(format!(
                        "#pragma unroll\nfor (int kt_e_i = 0; kt_e_i < {}; ++kt_e_i) kt_e[kt_e_i * {m} + {j}] = {};",
                        d.v(),
                        from_f32(vc.dtype, &elem(j, "kt_e_i"))
                    ));
                }
                for p in 0..pieces {
                    self.line(format!("*reinterpret_cast<{vt}*>({}) = kt_w[{p}];", at(p)));
                }
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
        for (j, _) in regs.iter().enumerate() {
            // Member `j` is `j` elements after member 0 (the pair's stride is 1).
            let at = format!("{}[kt_o + {j}]", vc.ptr);
            if load {
                self.line(format!(
                    "{} = kt_ok ? {} : 0.0f;",
                    elem(j, "kt_e_i"),
                    to_f32(vc.dtype, &at)
                ));
            } else {
                self.line(format!(
                    "if (kt_ok) {at} = {};",
                    from_f32(vc.dtype, &elem(j, "kt_e_i"))
                ));
            }
        }
        self.depth -= 1;
        self.line("}");
        self.depth -= 1;
        self.line("}");
        if d.grouped() && !load {
            self.depth -= 1;
            self.line("}");
        }
        self.close_slots(d);
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// `Some((registers by member, member 0's view, is a load))` when `a` and `b` move the two members
    /// of a pair between registers of one distribution and one tensor: the same view but for one
    /// dimension of extent 2 and stride 1 where one has origin 0 and the other 1, with the view's
    /// columns at stride 2 (so member 1 of column `c` is the element after member 0).
    pub(super) fn pair(&self, a: &Op, b: &Op) -> Option<([RegId; 2], GlobalView, bool)> {
        let (ra, va, rb, vb, load) = match (a, b) {
            (Op::LoadGlobal { dst: ra, src: va }, Op::LoadGlobal { dst: rb, src: vb }) => {
                (*ra, va, *rb, vb, true)
            }
            (
                Op::StoreGlobal {
                    dst: va,
                    src: ra,
                    rounding: Rounding::Rtne,
                },
                Op::StoreGlobal {
                    dst: vb,
                    src: rb,
                    rounding: Rounding::Rtne,
                },
            ) => (*ra, va, *rb, vb, false),
            _ => return None,
        };
        let same_shape = va.tensor == vb.tensor
            && (va.row_dim, va.col_dim, va.rows, va.cols)
                == (vb.row_dim, vb.col_dim, vb.rows, vb.cols)
            && va.origin.len() == vb.origin.len();
        if !same_shape || ra == rb || self.dist(ra) != self.dist(rb) {
            return None;
        }
        let g = self.k.global(va.tensor);
        if g.strides[va.col_dim as usize].as_const() != Some(2) {
            return None;
        }
        let differ: Vec<usize> = (0..va.origin.len())
            .filter(|d| va.origin[*d] != vb.origin[*d])
            .collect();
        let [m] = differ[..] else { return None };
        let pair_dim = g.dims[m].as_const() == Some(2) && g.strides[m].as_const() == Some(1);
        let regs = match (va.origin[m].as_const(), vb.origin[m].as_const()) {
            (Some(0), Some(1)) => [ra, rb],
            (Some(1), Some(0)) => [rb, ra],
            _ => return None,
        };
        let first = if regs[0] == ra { va } else { vb };
        pair_dim.then(|| (regs, first.clone(), load))
    }

    pub(super) fn shared(
        &mut self,
        reg: RegId,
        v: &SharedView,
        load: bool,
    ) -> Result<(), StripError> {
        let d = self.dist(reg);
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
        } else if d.grouped() {
            // Every group of lanes holds the whole vector: the first writes it.
            format!("if (kt_lane < {}) {name}[{at}] = {elem};", d.chunks())
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
    /// The column stride when it is a constant.
    cstride_const: Option<i64>,
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
