//! The consumer's register tiles on Hopper (`lower.rs`): every register tile of the program is one
//! warp's 16-row share of a `wgmma m64` fragment, so elementwise maps, row reductions, masks and the
//! accumulator → A-operand conversion are per-thread loops over the fragment (PTX ISA §9.7.15.5.1,
//! "Register fragments"):
//!
//! | IR register | CUDA | element `k` of the thread |
//! |---|---|---|
//! | f32 tile 16 × N (N a wgmma N) | `float r[N/2]` (the D fragment) | row `lane/4 + 8·((k>>1)&1)`, column `8·(k>>2) + 2·(lane%4) + (k&1)` |
//! | bf16 tile 16 × N (N a multiple of 16) | `u32 r[N/4]`, two bf16 each | the pair `2k, 2k+1` of the f32 tile above: the A fragment of `N/16` `k16` steps |
//! | f32 row vector of such a tile | `float r[2]` | rows `lane/4` and `lane/4 + 8` |
//!
//! A row is spread over the four lanes `lane/4`: a row reduction combines the thread's elements, then
//! two `shfl.xor` steps (1 and 2). Anything else (column vectors, other layouts) is refused.

use kittens_hw::dtype::DType;
use kittens_ir::{Arg, Axis, Expr, GlobalView, MapFn, MaskRule, Op, ReduceOp, RegId, Rounding};

use super::emit::{unsupported, CudaLowerError, Emit};

/// How one register lives in the threads of a warp.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Frag {
    /// fp32 16 × N accumulator, N/2 floats.
    Acc(u32),
    /// bf16 16 × N A operand, N/4 packed pairs.
    ABf16(u32),
    /// fp32 vector over the 16 rows, 2 floats.
    RowVec,
}

impl Frag {
    /// C elements per thread.
    fn len(self) -> u32 {
        match self {
            Frag::Acc(n) => n / 2,
            Frag::ABf16(n) => n / 4,
            Frag::RowVec => 2,
        }
    }
}

/// The C spelling of an f32 constant (infinities have no literal without headers).
pub(super) fn flit(v: f32) -> String {
    if v == f32::INFINITY {
        "__int_as_float(0x7f800000)".into()
    } else if v == f32::NEG_INFINITY {
        "__int_as_float(0xff800000)".into()
    } else {
        format!("{v:?}f")
    }
}

impl Emit<'_> {
    /// The fragment of register `r`, or why it has none.
    pub(super) fn frag(&self, r: RegId) -> Result<Frag, CudaLowerError> {
        let d = self.k.reg(r);
        let (rows, cols) = d.shape();
        if let Some(v) = d.vec() {
            if v.axis == Axis::Rows && v.len == 16 && v.dtype == DType::F32 {
                return Ok(Frag::RowVec);
            }
        } else if rows == 16 && d.dtype() == DType::F32 && super::valid_wgmma_n(cols) {
            return Ok(Frag::Acc(cols));
        } else if rows == 16 && d.dtype() == DType::Bf16 && cols % 16 == 0 && cols <= 256 {
            return Ok(Frag::ABf16(cols));
        }
        unsupported(format!(
            "register `{}` ({rows}x{cols} {:?}): only fp32 16xN wgmma accumulators, bf16 16xN A \
             operands and fp32 row vectors of 16",
            d.name,
            d.dtype()
        ))
    }

    /// Declares every register of the program as its fragment.
    pub(super) fn declare_fragments(&mut self) -> Result<(), CudaLowerError> {
        for (i, r) in self.k.regs.iter().enumerate() {
            let f = self.frag(RegId(i as u32))?;
            let ty = if matches!(f, Frag::ABf16(_)) {
                "u32"
            } else {
                "float"
            };
            self.line(format!("{ty} r_{}[{}];", super::emit::cname(r), f.len()));
        }
        Ok(())
    }

    /// A consumer register op other than `mma` and `store`.
    pub(super) fn reg_op(&mut self, op: &Op) -> Result<(), CudaLowerError> {
        match op {
            Op::Fill { dst, value } => {
                let f = self.frag(*dst)?;
                let v = if matches!(f, Frag::ABf16(_)) {
                    format!("kt::pack_bf16x2({0}, {0})", flit(*value))
                } else {
                    flit(*value)
                };
                self.unrolled(f, format!("{}[i] = {v};", self.rname(*dst)));
                Ok(())
            }
            Op::Map {
                dst,
                f,
                args,
                rounding,
            } => self.map(*dst, *f, args, *rounding),
            Op::Reduce {
                dst,
                src,
                axis: Axis::Rows,
                op,
                acc,
            } => self.row_reduce(*dst, *src, *op, *acc),
            Op::Mask {
                dst,
                rule,
                row0,
                col0,
                value,
            } => self.mask(*dst, rule, row0, col0, *value),
            Op::Alibi {
                dst,
                slope,
                row0,
                col0,
            } => self.alibi(*dst, *slope, row0, col0),
            o => unsupported(format!("op `{}` on Hopper register fragments", o.name())),
        }
    }

    fn rname(&self, r: RegId) -> String {
        format!("r_{}", super::emit::cname(self.k.reg(r)))
    }

    fn unrolled(&mut self, f: Frag, body: String) {
        self.line("#pragma unroll");
        self.line(format!("for (int i = 0; i < {}; ++i) {body}", f.len()));
    }

    fn map(
        &mut self,
        dst: RegId,
        f: MapFn,
        args: &[Arg],
        rounding: Rounding,
    ) -> Result<(), CudaLowerError> {
        let fd = self.frag(dst)?;
        if let Frag::ABf16(n) = fd {
            // The accumulator → A operand conversion: pairs of the fp32 fragment packed with RTNE.
            let ok = f == MapFn::Copy
                && rounding == Rounding::Rtne
                && matches!(args, [Arg::Reg(s)] if self.frag(*s)? == Frag::Acc(n));
            let [Arg::Reg(s)] = args else {
                return unsupported("a bf16 fragment written by anything but a copy");
            };
            if !ok {
                return unsupported(format!(
                    "`{}` into a bf16 fragment with {rounding:?} (RTNE copies of a same-shaped accumulator only)",
                    f.name()
                ));
            }
            let (d, s) = (self.rname(dst), self.rname(*s));
            self.unrolled(
                fd,
                format!("{d}[i] = kt::pack_bf16x2({s}[2 * i], {s}[2 * i + 1]);"),
            );
            return Ok(());
        }
        let mut a = Vec::new();
        for arg in args {
            a.push(match *arg {
                Arg::Reg(r) if self.frag(r)? == fd => format!("{}[i]", self.rname(r)),
                Arg::RowBcast(v) if self.frag(v)? == Frag::RowVec && fd != Frag::RowVec => {
                    format!("{}[(i >> 1) & 1]", self.rname(v))
                }
                Arg::Scalar(x) => flit(x),
                _ => {
                    return unsupported(format!(
                        "`{}` argument {arg:?} on a {fd:?} fragment",
                        f.name()
                    ))
                }
            });
        }
        let e = match (f, a.as_slice()) {
            (MapFn::Add, [x, y]) => format!("{x} + {y}"),
            (MapFn::Sub, [x, y]) => format!("{x} - {y}"),
            (MapFn::Mul, [x, y]) => format!("{x} * {y}"),
            (MapFn::Div, [x, y]) => format!("{x} / {y}"),
            (MapFn::Max, [x, y]) => format!("fmaxf({x}, {y})"),
            (MapFn::Min, [x, y]) => format!("fminf({x}, {y})"),
            (MapFn::Exp2, [x]) => format!("kt::exp2_approx({x})"),
            (MapFn::Exp, [x]) => format!("kt::exp2_approx({x} * 1.4426950408889634f)"),
            (MapFn::Log, [x]) => format!("__logf({x})"),
            (MapFn::Neg, [x]) => format!("-{x}"),
            (MapFn::Abs, [x]) => format!("fabsf({x})"),
            (MapFn::Rsqrt, [x]) => format!("rsqrtf({x})"),
            (MapFn::Sigmoid, [x]) => {
                format!("1.0f / (1.0f + kt::exp2_approx({x} * -1.4426950408889634f))")
            }
            (MapFn::Silu, [x]) => {
                format!("{x} / (1.0f + kt::exp2_approx({x} * -1.4426950408889634f))")
            }
            (MapFn::Tanh, [x]) => format!("kt::tanh_approx({x})"),
            (MapFn::Ge, [x, y]) => format!("({x} >= {y} ? 1.0f : 0.0f)"),
            (MapFn::Copy, [x]) => x.clone(),
            _ => return unsupported(format!("`{}` with {} arguments", f.name(), a.len())),
        };
        self.unrolled(fd, format!("{}[i] = {e};", self.rname(dst)));
        Ok(())
    }

    fn row_reduce(
        &mut self,
        dst: RegId,
        src: RegId,
        op: ReduceOp,
        acc: Option<RegId>,
    ) -> Result<(), CudaLowerError> {
        let (Frag::RowVec, Frag::Acc(n)) = (self.frag(dst)?, self.frag(src)?) else {
            return unsupported("a row reduction other than fp32 fragment → row vector");
        };
        if let Some(a) = acc {
            if self.frag(a)? != Frag::RowVec {
                return unsupported("a row reduction accumulated into a non-row vector");
            }
        }
        let (id, comb) = match op {
            ReduceOp::Max => (flit(f32::NEG_INFINITY), "fmaxf(%a, %b)"),
            ReduceOp::Min => (flit(f32::INFINITY), "fminf(%a, %b)"),
            ReduceOp::Sum => ("0.0f".to_string(), "%a + %b"),
        };
        let c = |a: &str, b: &str| comb.replace("%a", a).replace("%b", b);
        let (d, s) = (self.rname(dst), self.rname(src));
        self.line(format!("{{ // row {op:?} of {s}"));
        self.depth += 1;
        self.line(format!("float t[2] = {{{id}, {id}}};"));
        self.line("#pragma unroll");
        self.line(format!(
            "for (int i = 0; i < {}; ++i) t[(i >> 1) & 1] = {};",
            n / 2,
            c("t[(i >> 1) & 1]", &format!("{s}[i]"))
        ));
        self.line("#pragma unroll");
        self.line("for (int h = 0; h < 2; ++h) {");
        for m in [1, 2] {
            self.line(format!(
                "    t[h] = {};",
                c("t[h]", &format!("__shfl_xor_sync(0xffffffffu, t[h], {m})"))
            ));
        }
        let out = match acc {
            Some(a) => c("t[h]", &format!("{}[h]", self.rname(a))),
            None => "t[h]".into(),
        };
        self.line(format!("    {d}[h] = {out};"));
        self.line("}");
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    fn mask(
        &mut self,
        dst: RegId,
        rule: &MaskRule,
        row0: &kittens_ir::Expr,
        col0: &kittens_ir::Expr,
        value: f32,
    ) -> Result<(), CudaLowerError> {
        let Frag::Acc(n) = self.frag(dst)? else {
            return unsupported("a mask of something other than an fp32 fragment");
        };
        let keep = match rule {
            MaskRule::Causal { offset } => format!("col <= row + ({})", self.ex(offset)),
            MaskRule::CausalT { offset } => format!("row <= col + ({})", self.ex(offset)),
            MaskRule::WindowStart { offset } => format!("col >= row + ({})", self.ex(offset)),
            MaskRule::WindowStartT { offset } => format!("row >= col + ({})", self.ex(offset)),
            MaskRule::ColsBelow(e) => format!("col < ({})", self.ex(e)),
            MaskRule::RowsBelow(e) => format!("row < ({})", self.ex(e)),
        };
        let d = self.rname(dst);
        self.line(format!("{{ // mask {d}"));
        self.depth += 1;
        self.line(format!(
            "const int r0 = {} + kt_lane / 4, c0 = {} + 2 * (kt_lane % 4);",
            self.ex(row0),
            self.ex(col0)
        ));
        self.line("#pragma unroll");
        self.line(format!("for (int i = 0; i < {}; ++i) {{", n / 2));
        self.line(
            "    const int row = r0 + 8 * ((i >> 1) & 1), col = c0 + 8 * (i >> 2) + (i & 1);",
        );
        self.line("    (void)row; (void)col;");
        self.line(format!("    if (!({keep})) {d}[i] = {};", flit(value)));
        self.line("}");
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// ALiBi's bias ([`Op::Alibi`]): `dst[r][c] += slope[r]·|r − c|` at global coordinates, the
    /// fragment's rows and columns as in [`Self::mask`]. The distance is formed in f32 from one
    /// converted integer per lane, `row0 − col0` of its first element, plus each element's offset,
    /// a constant of the unrolled loop: an add and an FMA per element, where converting each
    /// element's integer distance was an `I2F`, which runs at the special function unit's quarter
    /// rate beside the softmax's `exp2` (CUDA C++ Programming Guide, arithmetic instruction
    /// throughput). Exact while distances stay below 2^24, as the conversion itself.
    fn alibi(
        &mut self,
        dst: RegId,
        slope: RegId,
        row0: &kittens_ir::Expr,
        col0: &kittens_ir::Expr,
    ) -> Result<(), CudaLowerError> {
        let (Frag::Acc(n), Frag::RowVec) = (self.frag(dst)?, self.frag(slope)?) else {
            return unsupported(
                "alibi on something other than an fp32 fragment and its row vector",
            );
        };
        let (d, sl) = (self.rname(dst), self.rname(slope));
        self.line(format!("{{ // alibi {d}"));
        self.depth += 1;
        self.line(format!(
            "const float d0 = (float)(({}) + kt_lane / 4 - ({}) - 2 * (kt_lane % 4));",
            self.ex(row0),
            self.ex(col0)
        ));
        self.line("#pragma unroll");
        self.line(format!("for (int i = 0; i < {}; ++i) {{", n / 2));
        self.line(
            "    const float dist = d0 + (float)(8 * ((i >> 1) & 1) - 8 * (i >> 2) - (i & 1));",
        );
        self.line(format!(
            "    {d}[i] = fmaf({sl}[(i >> 1) & 1], fabsf(dist), {d}[i]);"
        ));
        self.line("}");
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// A load of an f32 tensor into a 16 × N fp32 fragment: the FP8 GEMM's scales, declared with C's
    /// shape and broadcasting strides (`kittens_kernels::gemm::declare`). Strides that are both 0
    /// (one per-tensor scale) are one scalar load for every element; any others are read per element,
    /// guarded by the tensor's bounds along the dimensions it varies in (0 outside, where the store
    /// clips anyway).
    pub(super) fn load_broadcast(
        &mut self,
        dst: RegId,
        src: &GlobalView,
    ) -> Result<(), CudaLowerError> {
        let g = self.k.global(src.tensor);
        let f = self.frag(dst)?;
        let Frag::Acc(n) = f else {
            return unsupported("a global load into something other than an fp32 fragment");
        };
        // bf16 values widen exactly to f32 (the bits shifted up): the attention backward's O and dO
        // read into f32 fragments for D = rowsum(dO∘O).
        // A tensor the kernel also writes is read coherently, through the L2 (`ld.global.cg`): the
        // values may be other blocks' stores of this launch, handed over by a last arrival
        // (`Stmt::LastArrival`), which the read-only path (`__ldg`, `ld.global.nc`) need not see.
        let read = match (g.dtype, g.access == kittens_ir::Access::Read) {
            (DType::F32, true) => "__ldg(%p)",
            (DType::F32, false) => "__ldcg(%p)",
            (DType::Bf16, true) => "__uint_as_float((u32)__ldg(%p) << 16)",
            _ => "",
        };
        if read.is_empty() || g.dims.len() < 2 || (src.rows, src.cols) != (16, n) {
            return unsupported(format!(
                "load of {}x{} from `{}` ({:?}; f32 or bf16 tensors of 2 or more dimensions into 16 x \
                 N fragments only)",
                src.rows, src.cols, g.name, g.dtype
            ));
        }
        let (rd, cd) = (src.row_dim as usize, src.col_dim as usize);
        let gname = format!("g_{}", crate::cexpr::ident(&g.name));
        let d = self.rname(dst);
        let zero = kittens_ir::Expr::c(0);
        if g.strides.iter().all(|s| *s == zero) {
            self.line(format!("{{ // load {} -> {d}: one scalar", g.name));
            self.line(format!(
                "    const float s = {};",
                read.replace("%p", &gname)
            ));
            self.depth += 1;
            self.unrolled(f, format!("{d}[i] = s;"));
            self.depth -= 1;
            self.line("}");
            return Ok(());
        }
        self.line(format!("{{ // load {} -> {d}", g.name));
        self.depth += 1;
        // The view's fixed coordinates (tensors of more than two dimensions, such as a per-query
        // statistic `[b, h, s]` read as a tile): one base offset, and the coordinates inside the
        // tensor or nothing is read (0, as past the rows and columns).
        let mut base = vec!["0LL".to_string()];
        let mut inside = vec!["true".to_string()];
        for (i, o) in src.origin.iter().enumerate() {
            if i == rd || i == cd {
                continue;
            }
            let (oe, de) = (self.ex(o), self.extent(g, i));
            base.push(format!(
                "(long long)({oe}) * (long long)({})",
                self.ex(&g.strides[i])
            ));
            inside.push(format!("({oe}) >= 0 && ({oe}) < ({de})"));
        }
        self.line(format!(
            "const long long gb = {}; const bool gin = {};",
            base.join(" + "),
            inside.join(" && ")
        ));
        self.line(format!(
            "const int r0 = {} + kt_lane / 4, c0 = {} + 2 * (kt_lane % 4), rows = {}, cols = {};",
            self.ex(&src.origin[rd]),
            self.ex(&src.origin[cd]),
            self.extent(g, rd),
            self.extent(g, cd),
        ));
        self.line(format!(
            "const long long rs = (long long)({}), cs = (long long)({});",
            self.ex(&g.strides[rd]),
            self.ex(&g.strides[cd])
        ));
        self.line("(void)rows; (void)cols; (void)rs; (void)cs;");
        // Guard only the dimensions the tensor varies along, and read each distinct value once: a
        // per-row statistic has two values per thread (rows lane/4 and lane/4 + 8), a per-column one
        // N/4 (columns 8j + 2(lane%4) + {0, 1}), which the fragment then repeats. Loading every
        // element instead kept a full fragment of loads live (the attention backward's per-query
        // statistics spilled on sm_90a).
        let zero_rs = g.strides[rd] == zero;
        let zero_cs = g.strides[cd] == zero;
        // (distinct values, offsets of value `j` from (r0, c0), its largest offsets, value of
        // fragment element `i`)
        let (count, offs, most, pick) = match (zero_rs, zero_cs) {
            (false, true) => (2, "const int dr = 8 * j, dc = 0;", (8, 0), "(i >> 1) & 1"),
            (true, false) => (
                n / 4,
                "const int dr = 0, dc = 8 * (j >> 1) + (j & 1);",
                (0, n - 7),
                "2 * (i >> 2) + (i & 1)",
            ),
            _ => (
                n / 2,
                "const int dr = 8 * ((j >> 1) & 1), dc = 8 * (j >> 2) + (j & 1);",
                (8, n - 7),
                "i",
            ),
        };
        // One pointer to the thread's first value; each value is then a constant offset from it
        // (an immediate in the load) and the bounds one test for the whole tile, per value only at
        // the tensor's edges. Per value, the 64-bit address arithmetic and guard of the general form
        // cost about a dozen instructions: half the attention backward's key-block step.
        let guard = match (zero_rs, zero_cs) {
            (false, false) => "gin && dr < rl && dc < cl",
            (false, true) => "gin && dr < rl",
            (true, false) => "gin && dc < cl",
            (true, true) => "gin",
        };
        let all_in = match (zero_rs, zero_cs) {
            (false, false) => format!("gin && {} < rl && {} < cl", most.0, most.1),
            (false, true) => format!("gin && {} < rl", most.0),
            (true, false) => format!("gin && {} < cl", most.1),
            (true, true) => "gin".to_string(),
        };
        let (ri, ci) = (
            if zero_rs { "0" } else { "(long long)dr * rs" },
            if zero_cs { "0" } else { "(long long)dc * cs" },
        );
        self.line(format!(
            "const auto* gp = {gname} + gb + {} + {};",
            if zero_rs { "0" } else { "(long long)r0 * rs" },
            if zero_cs { "0" } else { "(long long)c0 * cs" },
        ));
        self.line("const int rl = rows - r0, cl = cols - c0;");
        self.line("(void)rl; (void)cl;");
        self.line(format!("float u[{count}];"));
        let at = read.replace("%p", &format!("gp + {ri} + {ci}"));
        self.line(format!("if ({all_in}) {{"));
        for (fast, body) in [
            (true, at.clone()),
            (false, format!("({guard}) ? {at} : 0.0f")),
        ] {
            if !fast {
                self.line("} else {");
            }
            self.line("    #pragma unroll");
            self.line(format!("    for (int j = 0; j < {count}; ++j) {{"));
            self.line(format!("        {offs}"));
            self.line("        (void)dr; (void)dc;");
            self.line(format!("        u[j] = {body};"));
            self.line("    }");
        }
        self.line("}");
        self.unrolled(f, format!("{d}[i] = u[{pick}];"));
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// A store of a 16 × N fp32 fragment to a tensor of three or more dimensions, by direct bf16 pair
    /// stores, or f32 element stores (split-K's partial sums), guarded by the tensor's bounds (the
    /// TMA-store epilogue handles row-major matrices). With `atomic`, f32 element reductions
    /// (`red.global.add.f32`, the IR's `atomic_add`) instead of stores.
    pub(super) fn store_direct(
        &mut self,
        dst: &GlobalView,
        src: RegId,
        rounding: Rounding,
        atomic: bool,
    ) -> Result<(), CudaLowerError> {
        let g = self.k.global(dst.tensor);
        if atomic && g.dtype != DType::F32 {
            return unsupported(format!(
                "atomic_add into `{}` of {:?} (f32 only)",
                g.name, g.dtype
            ));
        }
        let Frag::Acc(n) = self.frag(src)? else {
            return unsupported("a store of something other than an fp32 fragment");
        };
        let (rd, cd) = (dst.row_dim as usize, dst.col_dim as usize);
        if (dst.rows, dst.cols) != (16, n)
            || g.strides[cd] != kittens_ir::Expr::c(1)
            || !matches!(g.dtype, DType::Bf16 | DType::F32)
        {
            return unsupported(format!(
                "store of {}x{} to `{}` with {rounding:?} (16 x N fragments, bf16 or f32 with unit column stride)",
                dst.rows, dst.cols, g.name
            ));
        }
        // The output's rounding (MI300X-attn §6 measures RTNE, RTNA and RTZ).
        let pack = match rounding {
            Rounding::Rtne => "kt::pack_bf16x2",
            Rounding::Rtna => "kt::pack_bf16x2_rna",
            Rounding::Rtz => "kt::pack_bf16x2_rz",
        };
        let gname = format!("g_{}", crate::cexpr::ident(&g.name));
        self.line(format!("{{ // store {} -> {}", self.rname(src), g.name));
        self.depth += 1;
        // The fixed coordinates must lie inside the tensor; the row and column are checked per pair.
        let mut base = Vec::new();
        let mut inside = Vec::new();
        for (i, o) in dst.origin.iter().enumerate() {
            let (oe, se, de) = (self.ex(o), self.ex(&g.strides[i]), self.extent(g, i));
            base.push(format!("(long long)({oe}) * (long long)({se})"));
            if i != rd && i != cd {
                inside.push(format!("({oe}) >= 0 && ({oe}) < ({de})"));
            }
        }
        self.line(format!(
            "const int r0 = {} + kt_lane / 4, c0 = {} + 2 * (kt_lane % 4), rows = {}, cols = {};",
            self.ex(&dst.origin[rd]),
            self.ex(&dst.origin[cd]),
            self.extent(g, rd),
            self.extent(g, cd),
        ));
        self.line(format!(
            "const long long base = {}, rs = (long long)({});",
            base.join(" + "),
            self.ex(&g.strides[rd])
        ));
        let s = self.rname(src);
        // The fixed coordinates inside the tensor (always true for in-range grid blocks).
        let inside = if inside.is_empty() {
            "true".to_string()
        } else {
            inside.join(" && ")
        };
        self.line(format!("if ({inside}) {{"));
        self.line("    #pragma unroll");
        self.line(format!("    for (int i = 0; i < {}; i += 2) {{", n / 2));
        self.line("        const int row = r0 + 8 * ((i >> 1) & 1), col = c0 + 8 * (i >> 2);");
        self.line("        if (row >= rows || col >= cols) continue;");
        let ty = if g.dtype == DType::F32 {
            "float"
        } else {
            "bf16_t"
        };
        self.line(format!(
            "        {ty}* p = {gname} + base + (long long)(row - r0 + (kt_lane / 4)) * rs + (col - c0 + 2 * (kt_lane % 4));"
        ));
        if atomic {
            // A pair inside the tensor at an 8-byte address (every pair where the row pitch and the
            // base are even, as a Q-shaped accumulator's) is one vector reduction.
            self.line(format!(
                "        if (col + 1 < cols && (reinterpret_cast<unsigned long long>(p) & 7) == 0) kt::red_add_v2_f32(p, {s}[i], {s}[i + 1]);"
            ));
            self.line(format!(
                "        else {{ kt::red_add_f32(p, {s}[i]); if (col + 1 < cols) kt::red_add_f32(p + 1, {s}[i + 1]); }}"
            ));
        } else if g.dtype == DType::F32 {
            // Element stores: a pair is 8-byte aligned only where the row pitch is even.
            self.line(format!(
                "        p[0] = {s}[i]; if (col + 1 < cols) p[1] = {s}[i + 1];"
            ));
        } else {
            self.line(format!("        const u32 v = {pack}({s}[i], {s}[i + 1]);"));
            self.line("        if (col + 1 < cols) kt::st_global_b32(p, v); else kt::st_global_b16(p, v & 0xffffu);");
        }
        self.line("    }");
        self.line("}");
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// A store of a wave's 16 × 64 fragment (the fp32 accumulator, or its bf16 A-operand packing) into
    /// rows of a bf16 shared tile of 64 columns under the 128-byte swizzle (the layout a `wgmma`
    /// descriptor reads, `lower_mma.rs`): per thread 16 packed pairs, rows `lane/4` and `lane/4 + 8`,
    /// 16-byte chunk `i` of the row at chunk `i ^ (row % 8)` (the C-slab store's addressing,
    /// `lower_tma.rs`). The tile must be private to the storing warpgroup (its rows within the
    /// warpgroup's 64): a warpgroup barrier first, so that no wave of it still reads the tile.
    /// A 16 × 32 fragment goes to columns 0 or 32 (chunk `c0 + i`, `c0` the first column / 8: the
    /// Hopper backward's 64-key blocks, where each warpgroup holds 32 queries of the scores); with
    /// consumers barriers in the program (`consumers_exchange`) the rows may be any warpgroup's, the
    /// schedule analysis having ordered the store after every reader.
    pub(super) fn store_shared_frag(
        &mut self,
        dst: &kittens_ir::SharedView,
        src: RegId,
        rounding: Rounding,
    ) -> Result<(), CudaLowerError> {
        let t = self.k.shared_decl(dst.buf).tile;
        let f = self.frag(src)?;
        let n = match f {
            Frag::Acc(n) | Frag::ABf16(n) => n,
            Frag::RowVec => return unsupported("a row vector stored to shared memory"),
        };
        let swizzled = t.swizzle == kittens_tile::Swizzle::NV_128B;
        if !swizzled
            || t.dtype != DType::Bf16
            || t.cols != 64
            || !matches!((dst.rows, dst.cols, n), (16, 64, 64) | (16, 32, 32))
            || rounding != Rounding::Rtne
        {
            return unsupported(format!(
                "store of {}x{} ({:?}) to shared `{}` ({}x{} {:?}): 16 x 64 (or 16 x 32) fragments \
                 into bf16 tiles of 64 columns under the 128-byte swizzle, RTNE",
                dst.rows,
                dst.cols,
                f,
                self.k.shared_decl(dst.buf).name,
                t.rows,
                t.cols,
                t.dtype
            ));
        }
        // Rows a multiple of 8 (the swizzle's phase is then lane/4) inside the warpgroup's 64 rows.
        for w in 4 * self.producers..self.k.waves {
            let band = i64::from(w / 4 - self.producers) * 64;
            let rows = if self.consumers_exchange {
                0..i64::from(t.rows)
            } else {
                band..band + 64
            };
            let ok = self
                .at_origin(&dst.row0, w)
                .is_some_and(|r| r % 8 == 0 && rows.contains(&r))
                && self
                    .at_origin(&dst.col0, w)
                    .is_some_and(|c| c >= 0 && c % 8 == 0 && c + i64::from(dst.cols) <= 64);
            if !ok {
                return unsupported(
                    "a shared store outside the storing warpgroup's 64 rows or not 8-row aligned",
                );
            }
        }
        let r = self.rname(src);
        let pair = |i: u32, h: u32| match f {
            Frag::ABf16(_) => format!("{r}[{}]", 2 * i + h),
            _ => format!(
                "kt::pack_bf16x2({r}[{0}], {r}[{1}])",
                4 * i + 2 * h,
                4 * i + 2 * h + 1
            ),
        };
        self.line(format!(
            "{{ // store {r} -> {} (128-byte swizzle)",
            self.k.shared_decl(dst.buf).name
        ));
        self.depth += 1;
        self.line(format!(
            "{} // the warpgroup's reads retired",
            super::emit::WG_BARRIER
        ));
        // The row's first chunk: 0 for a fragment at column 0, else the view's column / 8.
        let at_col0 = dst.col0 == Expr::c(0);
        let row_start = kittens_ir::SharedView {
            col0: Expr::c(0),
            ..dst.clone()
        };
        self.line(format!(
            "const u32 sw = kt_lane / 4u, base = {} + sw * 128u + (kt_lane % 4u) * 4u;",
            self.smem_addr(&row_start, "wave")
        ));
        if !at_col0 {
            let c0 = self.ex_with(&dst.col0, "wave");
            self.line(format!("const u32 c0 = (u32)({c0}) / 8u;"));
        }
        for i in 0..n / 8 {
            let chunk = if at_col0 {
                format!("{i}u")
            } else {
                format!("(c0 + {i}u)")
            };
            for h in 0..2 {
                self.line(format!(
                    "kt::st_shared_b32(base + {}u + (({chunk} ^ sw) << 4), {});",
                    h * 1024,
                    pair(i, h)
                ));
            }
        }
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// A store of an fp32 row vector (one value per row of the wave's 16) to an f32 tensor through a
    /// view of 16 rows × 1 column: the thread with `lane % 4 == 0` holds rows `lane/4` and `lane/4 + 8`
    /// (the four lanes of a row hold the same value after a row reduction) and writes them, each
    /// guarded by the tensor's bounds.
    pub(super) fn store_vec(&mut self, dst: &GlobalView, src: RegId) -> Result<(), CudaLowerError> {
        let g = self.k.global(dst.tensor);
        let rd = dst.row_dim as usize;
        if self.frag(src)? != Frag::RowVec
            || (dst.rows, dst.cols) != (16, 1)
            || g.dtype != DType::F32
        {
            return unsupported(format!(
                "store of {}x{} from `{}` to `{}` ({:?}; fp32 row vectors to 16 x 1 views of f32 tensors)",
                dst.rows,
                dst.cols,
                self.k.reg(src).name,
                g.name,
                g.dtype
            ));
        }
        let gname = format!("g_{}", crate::cexpr::ident(&g.name));
        let s = self.rname(src);
        self.line(format!("{{ // store {s} -> {}", g.name));
        self.depth += 1;
        let mut base = Vec::new();
        let mut inside = Vec::new();
        for (i, o) in dst.origin.iter().enumerate() {
            let (oe, se, de) = (self.ex(o), self.ex(&g.strides[i]), self.extent(g, i));
            if i != rd {
                base.push(format!("(long long)({oe}) * (long long)({se})"));
                inside.push(format!("({oe}) >= 0 && ({oe}) < ({de})"));
            }
        }
        self.line(format!(
            "const int r0 = {} + kt_lane / 4, rows = {};",
            self.ex(&dst.origin[rd]),
            self.extent(g, rd),
        ));
        self.line(format!(
            "const long long base = {}, rs = (long long)({});",
            base.join(" + "),
            self.ex(&g.strides[rd])
        ));
        self.line(format!(
            "if (kt_lane % 4 == 0 && {}) {{",
            inside.join(" && ")
        ));
        self.line("    #pragma unroll");
        self.line("    for (int h = 0; h < 2; ++h) {");
        self.line("        const int row = r0 + 8 * h;");
        self.line(format!(
            "        if (row >= 0 && row < rows) {gname}[base + (long long)row * rs] = {s}[h];"
        ));
        self.line("    }");
        self.line("}");
        self.depth -= 1;
        self.line("}");
        Ok(())
    }
}
