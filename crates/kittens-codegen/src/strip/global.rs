//! Global loads and stores of strip registers: 16-byte vectors (or 8, 4) per chunk where the chunk is
//! contiguous, inside the tensor and aligned, element by element (bounds-checked) otherwise.
//!
//! An access moves one register, or the two members of an interleaved pair (`regs[j]` is member `j`
//! of a pair dimension whose member 1 is the element after member 0, with the view's columns at
//! stride 2 — rotary's GPT-J form): a pair's chunk is one contiguous run of `2v` elements, split into
//! or merged from the two registers in the lane.
//!
//! Loads are emitted in two phases over a run of consecutive loads: first every access's chunks into
//! raw words (vector loads, or element loads with zero outside the tensor), then the conversions to
//! f32. A load whose value is converted inside its own bounds branch makes the wave wait for it at
//! the branch's join, so the next load would be issued only after the previous one returned; in two
//! phases every load of the run is in flight at once, and only the raw words (half the registers of
//! bf16 values in f32) live between the phases.

use kittens_hw::dtype::DType;
use kittens_ir::{GlobalView, RegId, Rounding};

use super::memory::{from_f32, to_f32, ViewC};
use super::{unsupported, Dist, Emit, StripError};

/// One planned access.
struct Access {
    /// Register names (one, or a pair's two members in member order).
    regs: Vec<String>,
    d: Dist,
    vc: ViewC,
    /// The pointer's element type.
    ty: &'static str,
    /// The vector type and how many vectors one chunk takes, when the chunk is contiguous.
    vec: Option<(&'static str, u32)>,
    /// bf16 registers kept at 16 bits and a bf16 tensor: elements move as bits.
    bits: bool,
}

impl Access {
    /// Registers moved together (1, or 2 for a pair).
    fn m(&self) -> u32 {
        self.regs.len() as u32
    }
    /// Elements of one chunk in memory (`v` of each register, interleaved).
    fn n(&self) -> u32 {
        self.d.v() * self.m()
    }
    /// Elements per vector.
    fn piece(&self) -> u32 {
        self.vec.map_or(1, |(_, p)| self.n() / p)
    }
    fn elem(&self, j: usize, e: &str) -> String {
        format!("{}[kt_s * {} + {e}]", self.regs[j], self.d.v())
    }
    /// Element `e` of member `j` as the tensor's dtype, rounded as `rounding` says.
    fn stored(&self, j: usize, e: &str, rounding: Rounding) -> String {
        if self.bits {
            format!("{}.bits()", self.elem(j, e))
        } else {
            from_f32(self.vc.dtype, &self.elem(j, e), rounding)
        }
    }
}

impl Emit<'_> {
    fn plan(&self, regs: &[RegId], v: &GlobalView) -> Result<Access, StripError> {
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
        // One register at column stride 1, or a pair at column stride 2.
        let contiguous = vc.cstride_const == Some(i64::from(m));
        let bytes = d.v() * m * vc.dtype.bytes();
        // One access of 4, 8 or 16 bytes, or several of 16.
        let vec = match bytes {
            4 => Some((self.d.vec4, 1)),
            8 => Some((self.d.vec8, 1)),
            b if b >= 16 && b.is_multiple_of(16) => Some((self.d.vec16, b / 16)),
            _ => None,
        };
        let bits = vc.dtype == DType::Bf16 && regs.iter().all(|r| self.packed(*r));
        Ok(Access {
            bits,
            regs: regs.iter().map(|r| self.r(*r)).collect(),
            d,
            vc,
            ty,
            vec: vec.filter(|_| contiguous),
        })
    }

    /// Opens a block with the view's fixed coordinates and the loop over the slots, and places the
    /// slot's chunk (`kt_gr`, `kt_gc`, `kt_off`, `kt_row_in`).
    fn open_access(&mut self, a: &Access) {
        let vc = &a.vc;
        self.line("{");
        self.depth += 1;
        self.line(format!(
            "const bool kt_in = {};\nconst kt_idx kt_base = {};",
            vc.fixed_in, vc.base
        ));
        self.open_slots(a.d);
        self.line(format!(
            "const kt_idx kt_gr = {} + kt_row, kt_gc = {} + kt_col;\nconst kt_idx kt_off = kt_base + kt_gr * {} + kt_gc * {};\nconst bool kt_row_in = kt_in && kt_gr >= 0 && kt_gr < {};",
            vc.row0, vc.col0, vc.rstride, vc.cstride, vc.rows
        ));
    }
    fn close_access(&mut self, a: &Access) {
        self.close_slots(a.d);
        self.depth -= 1;
        self.line("}");
    }

    /// Whether the slot's chunk moves as vectors: inside the tensor and aligned to its length.
    fn vector_ok(a: &Access) -> String {
        format!(
            "kt_row_in && kt_gc >= 0 && kt_gc + {} <= {} && (kt_off % {}) == 0",
            a.d.v(),
            a.vc.cols,
            a.n()
        )
    }

    /// The chunk stored element by element, each bounds-checked (member `j` is `j` elements after
    /// member 0).
    fn store_elements(&mut self, a: &Access, rounding: Rounding) {
        self.line(format!(
            "#pragma unroll\nfor (int kt_e_i = 0; kt_e_i < {}; ++kt_e_i) {{",
            a.d.v()
        ));
        self.depth += 1;
        self.line(format!(
            "const bool kt_ok = kt_row_in && kt_gc + kt_e_i >= 0 && kt_gc + kt_e_i < {};\nconst kt_idx kt_o = kt_off + kt_e_i * {};",
            a.vc.cols, a.vc.cstride
        ));
        for j in 0..a.regs.len() {
            self.line(format!(
                "if (kt_ok) {}[kt_o + {j}] = {};",
                a.vc.ptr,
                a.stored(j, "kt_e_i", rounding)
            ));
        }
        self.depth -= 1;
        self.line("}");
    }

    /// A row vector (one value per row of its tile, replicated in every lane) to or from the column
    /// of view `v`, element by element and bounds-checked: every lane loads each value, lane 0 stores
    /// them (the merge of a split attention's log-sum-exps, one per query row).
    fn replicated(
        &mut self,
        reg: RegId,
        v: &GlobalView,
        load: Option<Rounding>,
    ) -> Result<(), StripError> {
        let Dist::Replicated { len } = self.dist(reg) else {
            return unsupported("a tile moved as a row vector");
        };
        let vc = self.view(v)?;
        let r = self.r(reg);
        self.line("{");
        self.depth += 1;
        self.line(format!(
            "const bool kt_in = {};\nconst kt_idx kt_base = {};",
            vc.fixed_in, vc.base
        ));
        self.line(format!(
            "#pragma unroll\nfor (int kt_s = 0; kt_s < {len}; ++kt_s) {{"
        ));
        self.depth += 1;
        self.line(format!(
            "const kt_idx kt_gr = {} + kt_s, kt_gc = {};\nconst bool kt_ok = kt_in && kt_gr >= 0 && kt_gr < {} && kt_gc >= 0 && kt_gc < {};\nconst kt_idx kt_o = kt_base + kt_gr * {} + kt_gc * {};",
            vc.row0, vc.col0, vc.rows, vc.cols, vc.rstride, vc.cstride
        ));
        match load {
            None => self.line(format!(
                "{r}[kt_s] = kt_ok ? {} : 0.0f;",
                to_f32(vc.dtype, &format!("{}[kt_o]", vc.ptr))
            )),
            Some(rounding) => self.line(format!(
                "if (kt_lane == 0 && kt_ok) {}[kt_o] = {};",
                vc.ptr,
                from_f32(vc.dtype, &format!("{r}[kt_s]"), rounding)
            )),
        }
        self.depth -= 1;
        self.line("}");
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// Stores `regs` (one register or a pair's members) to view `v`, rounded to its dtype as
    /// `rounding` says.
    pub(super) fn global_store(
        &mut self,
        regs: &[RegId],
        v: &GlobalView,
        rounding: Rounding,
    ) -> Result<(), StripError> {
        if let [reg] = regs {
            if matches!(self.dist(*reg), Dist::Replicated { .. }) {
                return self.replicated(*reg, v, Some(rounding));
            }
        }
        let a = self.plan(regs, v)?;
        self.open_access(&a);
        if a.d.grouped() {
            // Every group of lanes holds the whole vector: the first writes it.
            self.line(format!("if (kt_lane < {}) {{", a.d.chunks()));
            self.depth += 1;
        }
        if let Some((vt, pieces)) = a.vec {
            self.line(format!("if ({}) {{", Self::vector_ok(&a)));
            self.depth += 1;
            self.line(format!(
                "{vt} kt_w[{pieces}];\n{ty}* kt_e = reinterpret_cast<{ty}*>(kt_w);",
                ty = a.ty
            ));
            let m = a.m();
            for j in 0..a.regs.len() {
                self.line(format!(
                    "#pragma unroll\nfor (int kt_e_i = 0; kt_e_i < {}; ++kt_e_i) kt_e[kt_e_i * {m} + {j}] = {};",
                    a.d.v(),
                    a.stored(j, "kt_e_i", rounding)
                ));
            }
            for p in 0..pieces {
                self.line(format!(
                    "*reinterpret_cast<{vt}*>({} + kt_off + {}) = kt_w[{p}];",
                    a.vc.ptr,
                    p * a.piece()
                ));
            }
            self.depth -= 1;
            self.line("} else {");
        } else {
            self.line("{");
        }
        self.depth += 1;
        self.store_elements(&a, rounding);
        self.depth -= 1;
        self.line("}");
        if a.d.grouped() {
            self.depth -= 1;
            self.line("}");
        }
        self.close_access(&a);
        Ok(())
    }

    /// A run of loads, each `(registers, view)`: every access's chunks into raw words first (vector
    /// loads, or element loads with zero outside the tensor), then the conversions to f32 (see the
    /// module documentation).
    pub(super) fn global_loads(
        &mut self,
        loads: &[(Vec<RegId>, GlobalView)],
    ) -> Result<(), StripError> {
        // Row vectors first, each on its own (a handful of scalars in every lane).
        let (vectors, loads): (Vec<_>, Vec<_>) = loads.iter().partition(
            |(regs, _)| matches!(regs[..], [r] if matches!(self.dist(r), Dist::Replicated { .. })),
        );
        for (regs, v) in vectors {
            self.replicated(regs[0], v, None)?;
        }
        if loads.is_empty() {
            return Ok(());
        }
        let plans: Vec<Access> = loads
            .iter()
            .map(|(regs, v)| self.plan(regs, v))
            .collect::<Result<_, _>>()?;
        self.line("{");
        self.depth += 1;
        for (i, a) in plans.iter().enumerate() {
            // The raw chunks: vectors where the chunk may move as vectors, else elements. Lanes
            // without a chunk in a partial last slot keep zeros.
            let (word, per_slot) = match a.vec {
                Some((vt, pieces)) => (vt, pieces),
                None => (a.ty, a.n()),
            };
            let init = if a.d.full() { "" } else { " = {}" };
            self.line(format!("{word} kt_w{i}[{}]{init};", a.d.slots() * per_slot));
            self.open_access(a);
            let ty = a.ty;
            self.line(format!(
                "{ty}* kt_e = reinterpret_cast<{ty}*>(&kt_w{i}[kt_s * {per_slot}]);"
            ));
            if let Some((vt, pieces)) = a.vec {
                self.line(format!("if ({}) {{", Self::vector_ok(a)));
                for p in 0..pieces {
                    self.line(format!(
                        "    kt_w{i}[kt_s * {pieces} + {p}] = *reinterpret_cast<const {vt}*>({} + kt_off + {});",
                        a.vc.ptr,
                        p * a.piece()
                    ));
                }
                self.line("} else {");
            } else {
                self.line("{");
            }
            self.depth += 1;
            self.line(format!(
                "#pragma unroll\nfor (int kt_e_i = 0; kt_e_i < {}; ++kt_e_i) {{",
                a.d.v()
            ));
            self.depth += 1;
            self.line(format!(
                "const bool kt_ok = kt_row_in && kt_gc + kt_e_i >= 0 && kt_gc + kt_e_i < {};\nconst kt_idx kt_o = kt_off + kt_e_i * {};",
                a.vc.cols, a.vc.cstride
            ));
            for j in 0..a.regs.len() {
                self.line(format!(
                    "kt_e[kt_e_i * {} + {j}] = kt_ok ? {}[kt_o + {j}] : ({ty})0;",
                    a.m(),
                    a.vc.ptr
                ));
            }
            self.depth -= 1;
            self.line("}");
            self.depth -= 1;
            self.line("}");
            self.close_access(a);
        }
        for (i, a) in plans.iter().enumerate() {
            let per_slot = a.vec.map_or(a.n(), |(_, pieces)| pieces);
            self.line(format!(
                "#pragma unroll\nfor (int kt_s = 0; kt_s < {}; ++kt_s) {{",
                a.d.slots()
            ));
            self.depth += 1;
            self.line(format!(
                "const {ty}* kt_e = reinterpret_cast<const {ty}*>(&kt_w{i}[kt_s * {per_slot}]);",
                ty = a.ty
            ));
            for j in 0..a.regs.len() {
                let raw = format!("kt_e[kt_e_i * {} + {j}]", a.m());
                let set = if a.bits {
                    format!("{}.set_bits({raw})", a.elem(j, "kt_e_i"))
                } else {
                    format!("{} = {}", a.elem(j, "kt_e_i"), to_f32(a.vc.dtype, &raw))
                };
                self.line(format!(
                    "#pragma unroll\nfor (int kt_e_i = 0; kt_e_i < {}; ++kt_e_i) {set};",
                    a.d.v(),
                ));
            }
            self.depth -= 1;
            self.line("}");
        }
        self.depth -= 1;
        self.line("}");
        Ok(())
    }
}
