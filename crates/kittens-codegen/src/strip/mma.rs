//! The plain-schedule ops beyond the strip kernels' own, for sm_90a: matrix products on the tensor
//! cores of one warp (`mma.sync m16n8k16`, bf16 inputs, f32 accumulators) and asynchronous copies into
//! shared memory, so that any plain tile program — the `kittens_ir` crate's 16×16 example, a tiled
//! GEMM written from Python — lowers for Hopper, correct first.
//!
//! Register tiles keep the strip distribution whatever their base shape (`BaseShape` is the AMD
//! fragment; on NVIDIA a plain program's registers are the strip emitter's chunks), so an `mma`
//! regathers its operands: each wave writes A (as M×K), B (as N×K) and C (as M×N, f32) into its own
//! slice of a shared scratch (`kt_mma`), reads them back as the PTX fragments of `mma.sync
//! m16n8k16.row.col` (PTX ISA §9.7.14.5.8), runs the K steps of every 16×8 block of D, and reads D
//! back into its strip layout. Rows of the bf16 operands are padded by 8 elements, so the eight rows
//! a fragment read touches start in different banks. A shared operand is regathered the same way.
//!
//! A `LoadAsync` is lowered in `copy.rs` (16-byte `cp.async` on sm_90a).

use kittens_hw::dtype::DType;
use kittens_ir::{Kernel, MmaForm, MmaOperand, Op, RegId, RegKind, SharedView};

use super::{unsupported, Emit, StripError};
use crate::cexpr::ident;

/// Padding of a bf16 scratch row, elements (16 bytes).
const PAD: u32 = 8;

/// An `mma`'s sizes: (M, N, K).
fn dims(k: &Kernel, form: MmaForm, d: RegId, a: &MmaOperand) -> (u32, u32, u32) {
    let (m, n) = k.reg(d).shape();
    let (ar, ac) = operand_shape(k, a);
    let kk = if form.a_transposed() { ar } else { ac };
    (m, n, kk)
}

fn operand_shape(k: &Kernel, o: &MmaOperand) -> (u32, u32) {
    match o {
        MmaOperand::Reg(r) => k.reg(*r).shape(),
        MmaOperand::Shared(v) => (v.rows, v.cols),
    }
}

/// Bytes of one wave's scratch for an `mma` of these sizes: A and B padded rows of bf16, C in f32.
fn scratch_bytes(m: u32, n: u32, kk: u32) -> u32 {
    let (a, b) = (m * (kk + PAD) * 2, n * (kk + PAD) * 2);
    (a + b + m * n * 4).next_multiple_of(16)
}

/// One wave's scratch for the largest `mma` of `k` (0 when it has none).
pub(super) fn mma_scratch_per_wave(k: &Kernel) -> u32 {
    k.ops()
        .iter()
        .filter_map(|r| match &r.op {
            Op::Mma { form, d, a, .. } => {
                let (m, n, kk) = dims(k, *form, *d, a);
                Some(scratch_bytes(m, n, kk))
            }
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

impl Emit<'_> {
    /// The dtype of an `mma` operand.
    fn operand_dtype(&self, o: &MmaOperand) -> DType {
        match o {
            MmaOperand::Reg(r) => self.k.reg(*r).dtype(),
            MmaOperand::Shared(v) => self.k.shared_decl(v.buf).tile.dtype,
        }
    }
    fn operand_name(&self, o: &MmaOperand) -> String {
        match o {
            MmaOperand::Reg(r) => format!("register tile `{}`", self.k.reg(*r).name),
            MmaOperand::Shared(v) => format!("shared tile `{}`", self.k.shared_decl(v.buf).name),
        }
    }

    /// `d = op(a)·op(b) + c` on the warp's tensor cores (module documentation).
    pub(super) fn mma(
        &mut self,
        form: MmaForm,
        d: RegId,
        a: &MmaOperand,
        b: &MmaOperand,
        c: Option<RegId>,
    ) -> Result<(), StripError> {
        if self.d.target != kittens_hw::Target::Sm90a {
            return unsupported(format!("`{}` on {}", form.name(), self.d.target));
        }
        let (m, n, kk) = dims(self.k, form, d, a);
        for o in [a, b] {
            if self.operand_dtype(o) != DType::Bf16 {
                return unsupported(format!(
                    "`{}` with the {} of {:?}: mma.sync takes bf16 A and B",
                    form.name(),
                    self.operand_name(o),
                    self.operand_dtype(o)
                ));
            }
        }
        if !m.is_multiple_of(16) || !n.is_multiple_of(8) || !kk.is_multiple_of(16) {
            return unsupported(format!(
                "`{}` of {m}×{n}×{kk} into `{}`: mma.sync m16n8k16 needs M a multiple of 16, N of 8, K of 16",
                form.name(),
                self.k.reg(d).name
            ));
        }
        let kp = kk + PAD;
        let stride = self.mma_stride;
        self.line(format!(
            "{{ // {} {m}x{n}x{kk} on the tensor cores",
            form.name()
        ));
        self.depth += 1;
        self.line(format!(
            "bf16_t* const kt_ma = (bf16_t*)(kt_mma + wave * {stride});\n\
             bf16_t* const kt_mb = kt_ma + {};\n\
             float* const kt_mc = (float*)(kt_mb + {});",
            m * kp,
            n * kp
        ));
        // A as M×K and B as N×K, whatever their stored orientation.
        self.gather(a, "kt_ma", kp, form.a_transposed())?;
        self.gather(b, "kt_mb", kp, !form.b_transposed())?;
        if let Some(c) = c {
            let dc = self.dist(c);
            let r = self.r(c);
            self.open_slots(dc);
            self.line(format!(
                "#pragma unroll\nfor (int kt_e_i = 0; kt_e_i < {v}; ++kt_e_i) kt_mc[kt_row * {n} + kt_col + kt_e_i] = {r}[kt_s * {v} + kt_e_i];",
                v = dc.v()
            ));
            self.close_slots(dc);
        }
        self.line("__syncwarp();");
        let load_c = if c.is_some() {
            format!(
                "kt_c[0] = kt_mc[kt_r0 * {n} + kt_c0]; kt_c[1] = kt_mc[kt_r0 * {n} + kt_c0 + 1];\n    \
                 kt_c[2] = kt_mc[(kt_r0 + 8) * {n} + kt_c0]; kt_c[3] = kt_mc[(kt_r0 + 8) * {n} + kt_c0 + 1];"
            )
        } else {
            "kt_c[0] = 0.0f; kt_c[1] = 0.0f; kt_c[2] = 0.0f; kt_c[3] = 0.0f;".to_string()
        };
        self.line(format!(
            "const int kt_g = kt_lane >> 2, kt_t = kt_lane & 3;\n\
             for (int kt_mi = 0; kt_mi < {mt}; ++kt_mi)\n\
             for (int kt_ni = 0; kt_ni < {nt}; ++kt_ni) {{\n    \
             const int kt_r0 = kt_mi * 16 + kt_g, kt_c0 = kt_ni * 8 + 2 * kt_t;\n    \
             float kt_c[4];\n    \
             {load_c}\n    \
             const bf16_t* const kt_pa = kt_ma + kt_r0 * {kp} + 2 * kt_t;\n    \
             const bf16_t* const kt_pb = kt_mb + (kt_ni * 8 + kt_g) * {kp} + 2 * kt_t;\n\
             #pragma unroll\n    \
             for (int kt_ki = 0; kt_ki < {kt}; ++kt_ki) {{\n        \
             const int kt_k0 = kt_ki * 16;\n        \
             ks::mma_m16n8k16_bf16(kt_c, *(const u32*)(kt_pa + kt_k0), *(const u32*)(kt_pa + 8 * {kp} + kt_k0),\n            \
             *(const u32*)(kt_pa + kt_k0 + 8), *(const u32*)(kt_pa + 8 * {kp} + kt_k0 + 8),\n            \
             *(const u32*)(kt_pb + kt_k0), *(const u32*)(kt_pb + kt_k0 + 8));\n    \
             }}\n    \
             kt_mc[kt_r0 * {n} + kt_c0] = kt_c[0]; kt_mc[kt_r0 * {n} + kt_c0 + 1] = kt_c[1];\n    \
             kt_mc[(kt_r0 + 8) * {n} + kt_c0] = kt_c[2]; kt_mc[(kt_r0 + 8) * {n} + kt_c0 + 1] = kt_c[3];\n\
             }}\n\
             __syncwarp();",
            mt = m / 16,
            nt = n / 8,
            kt = kk / 16,
        ));
        let dd = self.dist(d);
        let r = self.r(d);
        let val = match self.k.reg(d).dtype() {
            DType::F32 => format!("kt_mc[kt_row * {n} + kt_col + kt_e_i]"),
            DType::Bf16 => {
                format!("ks::bf16_to_f32(ks::f32_to_bf16(kt_mc[kt_row * {n} + kt_col + kt_e_i]))")
            }
            other => {
                return unsupported(format!(
                    "`{}` into `{}` of {other:?} (f32 or bf16)",
                    form.name(),
                    self.k.reg(d).name
                ))
            }
        };
        self.open_slots(dd);
        self.line(format!(
            "#pragma unroll\nfor (int kt_e_i = 0; kt_e_i < {v}; ++kt_e_i) {r}[kt_s * {v} + kt_e_i] = {val};",
            v = dd.v()
        ));
        self.close_slots(dd);
        // The scratch is free for the wave's next mma only once every lane has read D.
        self.line("__syncwarp();");
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// Writes operand `o` into the scratch at `to` (rows of `kp` bf16): element (r, c) of the operand
    /// goes to row r, column c, or with `transpose` to row c, column r.
    fn gather(
        &mut self,
        o: &MmaOperand,
        to: &str,
        kp: u32,
        transpose: bool,
    ) -> Result<(), StripError> {
        let at = |r: &str, c: &str| {
            if transpose {
                format!("{to}[({c}) * {kp} + {r}]")
            } else {
                format!("{to}[({r}) * {kp} + {c}]")
            }
        };
        match o {
            MmaOperand::Reg(reg) => {
                let dr = self.dist(*reg);
                let name = self.r(*reg);
                self.open_slots(dr);
                self.line(format!(
                    "#pragma unroll\nfor (int kt_e_i = 0; kt_e_i < {v}; ++kt_e_i) {} = ks::f32_to_bf16({name}[kt_s * {v} + kt_e_i]);",
                    at("kt_row", "kt_col + kt_e_i"),
                    v = dr.v()
                ));
                self.close_slots(dr);
            }
            MmaOperand::Shared(v) => {
                let (rows, cols) = (v.rows, v.cols);
                let (r, c) = (format!("kt_x / {cols}"), format!("kt_x % {cols}"));
                let src = self.shared_at(v, &r, &c);
                let name = self.shared_name(v);
                self.line(format!(
                    "for (int kt_x = kt_lane; kt_x < {}; kt_x += {}) {} = {name}[{src}];",
                    rows * cols,
                    self.d.lanes,
                    at(&r, &c),
                ));
            }
        }
        Ok(())
    }

    /// The C name of a shared view's buffer.
    pub(super) fn shared_name(&self, v: &SharedView) -> String {
        format!("kt_sh_{}", ident(&self.k.shared_decl(v.buf).name))
    }
    /// The buffer index of element (`r`, `c`) of a shared view (C expressions).
    pub(super) fn shared_at(&self, v: &SharedView, r: &str, c: &str) -> String {
        let s = self.k.shared_decl(v.buf);
        let (rows, cols) = (s.tile.rows, s.tile.cols);
        format!(
            "({} * {} + ({} + {r}) * {cols} + {} + {c})",
            self.e(&v.index),
            rows * cols,
            self.e(&v.row0),
            self.e(&v.col0)
        )
    }
}

/// Whether every register of `k` is a tile or vector the strip emitter can hold (any base shape).
pub(super) fn plain_registers(k: &Kernel) -> Result<(), StripError> {
    for r in &k.regs {
        let dt = match r.kind {
            RegKind::Tile(t) => t.dtype,
            RegKind::Vec(v) => v.dtype,
        };
        if !matches!(dt, DType::F32 | DType::Bf16) {
            return unsupported(format!(
                "register `{}` of {dt:?} in a plain program (f32 or bf16)",
                r.name
            ));
        }
        if let RegKind::Tile(t) = r.kind {
            if t.pin.is_some() {
                return unsupported(format!("the pinned register tile `{}`", r.name));
            }
        }
    }
    Ok(())
}
