//! The strip emitter's memory ops other than the global accesses themselves (`global.rs`): global
//! views as C expressions, interleaved pairs, shared buffers.

use kittens_hw::dtype::DType;
use kittens_ir::{GlobalView, Op, RegId, Rounding, SharedView};

use super::{unsupported, Dist, Emit, StripError, STATIC_SHARED};
use crate::cexpr::ident;
use crate::lowered::SharedAlloc;
use kittens_hw::Target;

impl Emit<'_> {
    /// C expressions of a global view: (pointer, offset of element (row `r`, col `c`) as a function of
    /// the names, in-bounds condition of the view's fixed coordinates, row bound, col bound, the col
    /// stride when it is a constant).
    pub(super) fn view(&self, v: &GlobalView) -> Result<ViewC, StripError> {
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

    /// A register moved from (`store: None`) or to a shared view (`store: Some(rounding)`).
    pub(super) fn shared(
        &mut self,
        reg: RegId,
        v: &SharedView,
        store: Option<Rounding>,
    ) -> Result<(), StripError> {
        let d = self.dist(reg);
        if matches!(d, Dist::Replicated { .. }) {
            return unsupported("a row vector moved to or from shared memory");
        }
        let sdt = self.k.shared_decl(v.buf).tile.dtype;
        let rdt = self.k.reg(reg).dtype();
        let name = self.shared_name(v);
        let at = self.shared_at(v, "kt_row", "kt_col + kt_e_i");
        let r = self.r(reg);
        if store.is_none() && self.shared_vector_ok(reg, sdt) {
            return self.shared_load_vectors(reg, v);
        }
        self.open_slots(d);
        let elem = format!("{r}[kt_s * {} + kt_e_i]", d.v());
        // Registers hold f32 (a bf16 register bf16 values); memory holds its dtype.
        let stmt = match store {
            None => {
                let x = to_f32(sdt, &format!("{name}[{at}]"));
                let x = if rdt == DType::Bf16 && sdt != DType::Bf16 {
                    format!("ks::bf16_to_f32(ks::f32_to_bf16({x}))")
                } else {
                    x
                };
                format!("{elem} = {x};")
            }
            Some(rounding) => {
                let x = from_f32(sdt, &elem, rounding);
                if d.grouped() {
                    // Every group of lanes holds the whole vector: the first writes it.
                    format!("if (kt_lane < {}) {name}[{at}] = {x};", d.chunks())
                } else {
                    format!("{name}[{at}] = {x};")
                }
            }
        };
        self.line(format!(
            "#pragma unroll\nfor (int kt_e_i = 0; kt_e_i < {}; ++kt_e_i) {stmt}",
            d.v()
        ));
        self.close_slots(d);
        Ok(())
    }
}

impl Emit<'_> {
    /// Whether a shared→register load of `reg` from a buffer of `sdt` moves each chunk as 16-byte
    /// vectors (sm_90a, whose shared buffers are 16-byte aligned: `ld.shared.v4` in place of one
    /// 2- or 4-byte load per element; the staged rows of the norm backwards, `copy.rs`).
    fn shared_vector_ok(&self, reg: RegId, sdt: DType) -> bool {
        let d = self.dist(reg);
        self.d.target == kittens_hw::Target::Sm90a
            && matches!(sdt, DType::Bf16 | DType::F32)
            && !matches!(d, Dist::Replicated { .. })
            && (d.v() * sdt.bytes()).is_multiple_of(16)
            && (self.k.reg(reg).dtype() != DType::Bf16 || sdt == DType::Bf16)
    }

    /// A shared→register load of 16-byte vectors per chunk where the chunk's first element is
    /// 16-byte aligned, element by element otherwise; bf16 into a bf16 register moves as bits.
    fn shared_load_vectors(&mut self, reg: RegId, v: &SharedView) -> Result<(), StripError> {
        let d = self.dist(reg);
        let sdt = self.k.shared_decl(v.buf).tile.dtype;
        let ty = self.storage(sdt)?;
        let name = self.shared_name(v);
        let at0 = self.shared_at(v, "kt_row", "kt_col");
        let r = self.r(reg);
        let n = d.v();
        let per = 16 / sdt.bytes();
        let bits = sdt == DType::Bf16 && self.packed(reg);
        let set = |e: &str| {
            let dst = format!("{r}[kt_s * {n} + {e}]");
            if bits {
                format!("{dst}.set_bits(kt_e[{e}]);")
            } else {
                format!("{dst} = {};", to_f32(sdt, &format!("kt_e[{e}]")))
            }
        };
        self.open_slots(d);
        self.line(format!(
            "const int kt_a0 = (int)({at0});
             if ((kt_a0 & {m}) == 0) {{
                 uint4 kt_w[{pieces}];
             #pragma unroll
                 for (int kt_q = 0; kt_q < {pieces}; ++kt_q) kt_w[kt_q] = *reinterpret_cast<const uint4*>(&{name}[kt_a0 + kt_q * {per}]);
                 const {ty}* const kt_e = reinterpret_cast<const {ty}*>(kt_w);
             #pragma unroll
                 for (int kt_e_i = 0; kt_e_i < {n}; ++kt_e_i) {}
             }} else {{
             #pragma unroll
                 for (int kt_e_i = 0; kt_e_i < {n}; ++kt_e_i) {{ const {ty}* const kt_e = &{name}[kt_a0]; {} }}
             }}",
            set("kt_e_i"),
            set("kt_e_i"),
            m = per - 1,
            pieces = n / per,
        ));
        self.close_slots(d);
        Ok(())
    }
}

impl Emit<'_> {
    /// Declares the kernel's shared buffers and the mma scratch (`scratch` bytes): `__shared__`
    /// arrays (16-byte aligned on sm_90a, for `cp.async`: `copy.rs`), or on sm_90a past the static
    /// limit pointers carved from dynamic shared memory (the launch opts in to the device's
    /// per-block maximum); AMD declares everything statically. Returns the bytes and how they are
    /// allocated.
    pub(super) fn declare_shared(
        &mut self,
        scratch: u32,
    ) -> Result<(u32, SharedAlloc), StripError> {
        let (k, d) = (self.k, self.d);
        let shared_bytes = k.shared_bytes() + scratch;
        // sm_90a: over the static limit, the buffers are carved from dynamic shared memory (the launch
        // opts in to the device's per-block maximum); AMD declares everything statically.
        let dynamic = d.target == Target::Sm90a && shared_bytes > STATIC_SHARED;
        let limit = if d.target == Target::Sm90a {
            d.target
                .gpu()
                .map_or(STATIC_SHARED, |g| g.shared_bytes_per_block)
        } else {
            STATIC_SHARED
        };
        if shared_bytes > limit {
            return unsupported(format!(
                "{shared_bytes} bytes of shared memory (buffers {} + mma scratch {scratch} for {} \
                 waves), over the {limit} a block of {} may use: use smaller tiles",
                k.shared_bytes(),
                k.waves,
                d.target
            ));
        }
        if dynamic {
            self.line("extern __shared__ __align__(16) unsigned char kt_dyn[];");
        }
        let mut at = 0u32;
        for s in &k.shared {
            let ty = self.storage(s.tile.dtype)?;
            let n = s.count * s.tile.rows * s.tile.cols;
            if dynamic {
                self.line(format!(
                    "{ty}* const kt_sh_{} = ({ty}*)(kt_dyn + {at});",
                    ident(&s.name)
                ));
                at += (n * s.tile.dtype.bytes()).next_multiple_of(16);
                continue;
            }
            // 16-byte aligned on sm_90a: `cp.async` chunks (`copy.rs`).
            let align = if d.target == Target::Sm90a {
                "__align__(16) "
            } else {
                ""
            };
            self.line(format!(
                "__shared__ {align}{ty} kt_sh_{}[{n}];",
                ident(&s.name)
            ));
        }
        if scratch > 0 {
            if dynamic {
                self.line(format!("unsigned char* const kt_mma = kt_dyn + {at};"));
                at += scratch;
            } else {
                self.line(format!(
                    "__shared__ __align__(16) unsigned char kt_mma[{scratch}];"
                ));
            }
        }
        Ok(if dynamic {
            (at, SharedAlloc::Dynamic)
        } else {
            (shared_bytes, SharedAlloc::Static)
        })
    }
}

pub(super) struct ViewC {
    pub(super) ptr: String,
    pub(super) dtype: DType,
    pub(super) fixed_in: String,
    pub(super) base: String,
    pub(super) row0: String,
    pub(super) col0: String,
    pub(super) rows: String,
    pub(super) cols: String,
    pub(super) rstride: String,
    pub(super) cstride: String,
    /// The column stride when it is a constant.
    pub(super) cstride_const: Option<i64>,
}

pub(super) fn to_f32(dt: DType, x: &str) -> String {
    match dt {
        DType::Bf16 => format!("ks::bf16_to_f32({x})"),
        _ => x.to_string(),
    }
}
/// `x` rounded to `dt` as `rounding` says (the three modes MI300X-attn §6 measures for bf16).
pub(super) fn from_f32(dt: DType, x: &str, rounding: Rounding) -> String {
    match (dt, rounding) {
        (DType::Bf16, Rounding::Rtne) => format!("ks::f32_to_bf16({x})"),
        (DType::Bf16, Rounding::Rtna) => format!("ks::f32_to_bf16_rna({x})"),
        (DType::Bf16, Rounding::Rtz) => format!("ks::f32_to_bf16_rz({x})"),
        _ => x.to_string(),
    }
}
