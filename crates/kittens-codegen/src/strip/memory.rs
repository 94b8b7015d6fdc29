//! The strip emitter's memory ops: loads and stores between strip registers and global views (16-byte
//! vectors where the chunk allows, element by element at the edges) or shared buffers.

use kittens_hw::dtype::DType;
use kittens_ir::{GlobalView, RegId, SharedView};

use super::{unsupported, Dist, Emit, StripError};
use crate::cexpr::ident;

impl Emit<'_> {
    /// C expressions of a global view: (pointer, offset of element (row `r`, col `c`) as a function of
    /// the names, in-bounds condition of the view's fixed coordinates, row bound, col bound, col
    /// stride is the constant 1).
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
            unit: g.strides[cd].as_const() == Some(1),
        })
    }

    pub(super) fn global(
        &mut self,
        reg: RegId,
        v: &GlobalView,
        load: bool,
    ) -> Result<(), StripError> {
        let d = self.dist(reg);
        if matches!(d, Dist::Replicated { .. }) {
            return unsupported("a row vector moved to or from global memory");
        }
        let vc = self.view(v)?;
        let ty = self.storage(vc.dtype)?;
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
            16 => Some(self.d.vec16),
            8 => Some(self.d.vec8),
            4 => Some(self.d.vec4),
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
                self.line(format!(
                    "{vt} kt_w;\n{ty}* kt_e = reinterpret_cast<{ty}*>(&kt_w);"
                ));
                self.line(format!(
                    "#pragma unroll\nfor (int kt_e_i = 0; kt_e_i < {n}; ++kt_e_i) kt_e[kt_e_i] = {};",
                    from_f32(vc.dtype, &format!("{r}[{}]", elem("kt_e_i")))
                ));
                self.line(format!(
                    "*reinterpret_cast<{vt}*>({} + kt_off) = kt_w;",
                    vc.ptr
                ));
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
