//! Lowering a tile-IR kernel with the producer/consumer schedule to CUDA C++ for sm_90a.
//!
//! The IR's execution model (kittens-ir `ir.rs`): every wave (here: warp) runs the body; register tiles
//! are per wave; an async load names the shared ring slot it writes, and a wave's `wait_async(n)` waits
//! until at most `n` of its loads are outstanding. The lowering keeps the structure (loops stay loops,
//! the role split stays one if/else on the warpgroup) and maps each op to prelude wrappers:
//!
//! | IR | CUDA |
//! |---|---|
//! | `load_async` (global → shared) | one TMA 2-D box per op, issued by the first thread of the op's scope, completing on an mbarrier per (ring, slot); every thread of the scope logs it in its `kt::AsyncQueue` |
//! | `wait_async(n)` | `AsyncQueue::wait_outstanding(n)`: waits on the oldest logged mbarrier phases |
//! | `barrier` (block / warpgroup / wave) | `__syncthreads` / named barrier / `__syncwarp` |
//! | `set_max_regs` | `setmaxnreg.dec` / `.inc` against the launch cap of `__launch_bounds__(threads, 1)` |
//! | `mma_abt` with both operands in shared memory | the warpgroup's `wgmma m64nNk16` chain: the four waves' 16-row A slices are one 64-row operand; fence, commit, wait 0 |
//! | `fill` / `store` of an fp32 accumulator | on the wgmma D fragment (rows 16w + l/4 and + 8, columns 8i + 2(l % 4) and + 1); stores predicated on the tensor's edges |
//!
//! Anything else is refused with [`CudaLowerError::Unsupported`] — this is the subset the Hopper GEMM
//! tile program (`kittens_kernels::gemm_bf16_ws`) uses, not a general CUDA backend yet.
//!
//! Kernel arguments: one `CUtensorMap` per entry of [`LoweredCuda::tma_maps`], then the global tensors
//! in declaration order (pointers), then the integer parameters. Launch: a 1-d grid of `∏ grid.extents`
//! blocks of [`LoweredCuda::threads`] threads with [`LoweredCuda::dynamic_shared_bytes`].

use std::collections::BTreeSet;

use kittens_hw::dtype::DType;
use kittens_ir::{
    BinOp, Cond, Env, Expr, GlobalView, GridRemap, Kernel, MmaForm, MmaOperand, Op, RegId,
    Rounding, Schedule, Scope, SharedView, Stmt, WaitCount, WaitQueue,
};
use kittens_tile::Swizzle;

use super::{prelude_with, WgmmaInput};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CudaLowerError {
    #[error("the sm_90a lowering does not support {0}")]
    Unsupported(String),
}

fn unsupported<T>(what: impl Into<String>) -> Result<T, CudaLowerError> {
    Err(CudaLowerError::Unsupported(what.into()))
}

/// A tensor map the host builds for one global tensor: boxes of `box_rows × box_cols` elements with
/// the given shared-memory swizzle (bytes: 128, 64, 32 or 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmaMap {
    pub global: u32,
    pub box_rows: u32,
    pub box_cols: u32,
    pub swizzle_bytes: u32,
}

/// The lowered kernel and what the host needs to launch it.
#[derive(Debug, Clone)]
pub struct LoweredCuda {
    pub name: String,
    pub source: String,
    pub threads: u32,
    pub dynamic_shared_bytes: u32,
    pub tma_maps: Vec<TmaMap>,
    /// The tile program it came from (for the launch geometry).
    pub ir: Kernel,
}

impl LoweredCuda {
    /// Blocks of a launch (`∏ grid.extents`) for parameter values given by name; `None` when one is
    /// missing or an extent cannot be evaluated.
    pub fn blocks(&self, params: &[(&str, i64)]) -> Option<u64> {
        let values: Option<Vec<i64>> = self
            .ir
            .params
            .iter()
            .map(|p| params.iter().find(|(n, _)| *n == p.name).map(|&(_, v)| v))
            .collect();
        self.ir.blocks(&values?)
    }
}

/// Hopper's registers per SM (CUDA Programming Guide, compute capability 9.0).
const REGISTERS_PER_SM: u32 = 65_536;
/// Depth of each thread's async-load log (`kt::AsyncQueue`).
const QUEUE: u32 = 16;

/// Lowers `k` (producer/consumer schedule) to CUDA for sm_90a.
pub fn lower(k: &Kernel) -> Result<LoweredCuda, CudaLowerError> {
    if !matches!(k.schedule, Schedule::ProducerConsumer { .. }) {
        return unsupported(format!(
            "the {} schedule (only producer/consumer targets Hopper)",
            k.schedule.name()
        ));
    }
    let threads = 32 * k.waves;
    // `__launch_bounds__(threads, 1)` caps registers at this many per thread (multiple of 8).
    let cap = (REGISTERS_PER_SM / threads) / 8 * 8;
    let (offsets, shared_total) = k.shared_offsets(1024);
    let mut e = Emit {
        k,
        out: String::new(),
        depth: 1,
        maps: Vec::new(),
        wgmma_n: BTreeSet::new(),
        cap,
        offsets,
    };
    let mut bar_first = Vec::new();
    let mut nbars = 0u32;
    for s in &k.shared {
        bar_first.push(nbars);
        nbars += s.count;
    }
    e.declare_accumulators()?;
    e.grid()?;
    e.stmts(&k.body, &bar_first)?;
    let body = std::mem::take(&mut e.out);

    let name = format!("{}_sm90_lowered", ident(&k.name));
    let mut args: Vec<String> = (0..e.maps.len())
        .map(|i| format!("const __grid_constant__ CUtensorMap tma{i}"))
        .collect();
    for g in &k.globals {
        if g.dtype != DType::Bf16 {
            return unsupported(format!("global `{}` of {:?} (bf16 only)", g.name, g.dtype));
        }
        args.push(format!("bf16_t* __restrict__ g_{}", ident(&g.name)));
    }
    args.extend(k.params.iter().map(|p| format!("int {}", ident(&p.name))));
    let shapes: Vec<(WgmmaInput, u32)> = e.wgmma_n.iter().map(|&n| (WgmmaInput::Bf16, n)).collect();
    let mut src = prelude_with(&shapes);
    src.push_str(&format!(
        "\n// Lowered from the tile program `{}` by kittens-codegen::cuda::lower.\n\
         extern \"C\" __global__ void __launch_bounds__({threads}, 1)\n{name}({}) {{\n\
         \x20   extern __shared__ __align__(1024) unsigned char kt_smem_raw[];\n\
         \x20   const u32 kt_smem = (kt::smem_u32(kt_smem_raw) + 1023u) & ~1023u;\n\
         \x20   const u32 kt_bars = kt_smem + {shared_total}u; // one mbarrier per shared ring slot\n\
         \x20   const int wave = threadIdx.x / 32, kt_lane = threadIdx.x % 32;\n\
         \x20   const int kt_wave0 = (threadIdx.x / 128) * 4; // first wave of this warpgroup\n\
         \x20   u32 kt_uses[{nb}] = {{}}; // phases armed so far, per mbarrier\n\
         \x20   kt::AsyncQueue<{QUEUE}> kt_q;\n\
         \x20   if (threadIdx.x == 0) {{\n\
         \x20       for (u32 i = 0; i < {nbars}u; ++i) kt::mbarrier_init(kt_bars + 8u * i, 1);\n\
         \x20       kt::fence_mbarrier_init();\n\
         \x20       kt::fence_proxy_async();\n\
         \x20   }}\n\
         \x20   __syncthreads();\n{body}\
         \x20   kt_q.wait_outstanding(0); // no TMA may still write into a finished block's shared memory\n}}\n",
        k.name,
        args.join(", "),
        nb = nbars.max(1),
    ));
    Ok(LoweredCuda {
        name,
        source: src,
        threads,
        dynamic_shared_bytes: shared_total + 8 * nbars + 1024,
        tma_maps: e.maps,
        ir: k.clone(),
    })
}

/// A C identifier from an IR name.
fn ident(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

struct Emit<'k> {
    k: &'k Kernel,
    out: String,
    depth: usize,
    maps: Vec<TmaMap>,
    wgmma_n: BTreeSet<u32>,
    cap: u32,
    offsets: Vec<u32>,
}

impl Emit<'_> {
    fn line(&mut self, s: impl AsRef<str>) {
        for _ in 0..self.depth {
            self.out.push_str("    ");
        }
        self.out.push_str(s.as_ref());
        self.out.push('\n');
    }

    /// `e` as a C `int` expression; `wave` names the wave index to use.
    fn ex_with(&self, e: &Expr, wave: &str) -> String {
        match e {
            Expr::Const(v) => v.to_string(),
            Expr::Param(p) => self
                .k
                .params
                .get(p.0 as usize)
                .map_or(format!("p{}", p.0), |d| ident(&d.name)),
            Expr::Var(v) => self.var(v.0),
            Expr::Block(i) => format!("blk{i}"),
            Expr::Wave => wave.to_string(),
            Expr::Bin(op, a, b) => {
                let (a, b) = (self.ex_with(a, wave), self.ex_with(b, wave));
                match op {
                    BinOp::Add => format!("({a} + {b})"),
                    BinOp::Sub => format!("({a} - {b})"),
                    BinOp::Mul => format!("({a} * {b})"),
                    BinOp::Div => format!("({a} / {b})"),
                    BinOp::Rem => format!("({a} % {b})"),
                    BinOp::CeilDiv => format!("(({a} + {b} - 1) / {b})"),
                    BinOp::Min => format!("min({a}, {b})"),
                    BinOp::Max => format!("max({a}, {b})"),
                }
            }
        }
    }
    fn ex(&self, e: &Expr) -> String {
        self.ex_with(e, "wave")
    }
    fn var(&self, v: u32) -> String {
        format!(
            "v{v}_{}",
            self.k
                .vars
                .get(v as usize)
                .map_or(String::new(), |d| ident(&d.name))
        )
    }
    fn cond(&self, c: &Cond) -> String {
        match c {
            Cond::Eq(a, b) => format!("({} == {})", self.ex(a), self.ex(b)),
            Cond::Ne(a, b) => format!("({} != {})", self.ex(a), self.ex(b)),
            Cond::Lt(a, b) => format!("({} < {})", self.ex(a), self.ex(b)),
            Cond::Le(a, b) => format!("({} <= {})", self.ex(a), self.ex(b)),
            Cond::And(a, b) => format!("({} && {})", self.cond(a), self.cond(b)),
            Cond::Or(a, b) => format!("({} || {})", self.cond(a), self.cond(b)),
            Cond::Not(a) => format!("(!{})", self.cond(a)),
        }
    }

    /// Every register tile must be an fp32 wgmma accumulator slice: 16 rows (one warp's share of m64)
    /// by N columns, N a wgmma N; it lives as the N/2 floats of the D fragment.
    fn declare_accumulators(&mut self) -> Result<(), CudaLowerError> {
        for r in &self.k.regs {
            let (rows, cols) = r.shape();
            let ok = r.tile().is_some()
                && r.dtype() == DType::F32
                && rows == 16
                && super::valid_wgmma_n(cols);
            if !ok {
                return unsupported(format!(
                    "register `{}` ({rows}x{cols} {:?}): only fp32 16xN wgmma accumulators",
                    r.name,
                    r.dtype()
                ));
            }
            self.line(format!("float r_{}[{}];", ident(&r.name), cols / 2));
        }
        Ok(())
    }

    /// This block's tile coordinates `blk0, blk1, …` from `blockIdx.x` and the grid remap.
    fn grid(&mut self) -> Result<(), CudaLowerError> {
        let ext: Vec<String> = self.k.grid.extents.iter().map(|x| self.ex(x)).collect();
        let n = ext.len();
        self.line(format!(
            "int {};",
            (0..n)
                .map(|i| format!("blk{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        let window = match self.k.grid.remap {
            GridRemap::RowMajor => None,
            // On a monolithic Hopper die only the group-M window of the chiplet remap matters (the XCD
            // chunking spreads work over AMD's dies).
            GridRemap::GroupM { window } | GridRemap::XcdSwizzle { window, .. } if n == 2 => {
                Some(window)
            }
            r => return unsupported(format!("grid remap {r:?} over {n} extents")),
        };
        match window {
            None => {
                self.line("{ u32 id = blockIdx.x;");
                for i in (0..n).rev() {
                    self.line(format!(
                        "  blk{i} = (int)(id % (u32)({0})); id /= (u32)({0});",
                        ext[i]
                    ));
                }
                self.line("}");
            }
            Some(w) => {
                // Groups of `w` tile-rows, column by column inside a group.
                self.line(format!(
                    "{{ const u32 id = blockIdx.x, e0 = (u32)({}), e1 = (u32)({}), per = {w}u * e1;",
                    ext[0], ext[1]
                ));
                self.line(format!("  const u32 first = id / per * {w}u, rows = min({w}u, e0 - first), r = id % per;"));
                self.line("  blk0 = (int)(first + r % rows); blk1 = (int)(r / rows); }");
            }
        }
        Ok(())
    }

    fn stmts(&mut self, body: &[Stmt], bars: &[u32]) -> Result<(), CudaLowerError> {
        for s in body {
            match s {
                Stmt::Op { op, .. } => self.op(op, bars)?,
                Stmt::For {
                    var,
                    start,
                    end,
                    body,
                } => {
                    let v = self.var(var.0);
                    self.line(format!(
                        "for (int {v} = {}; {v} < {}; ++{v}) {{",
                        self.ex(start),
                        self.ex(end)
                    ));
                    self.nested(body, bars)?;
                    self.line("}");
                }
                Stmt::If { cond, then, els } => {
                    self.line(format!("if {} {{", self.cond(cond)));
                    self.nested(then, bars)?;
                    if !els.is_empty() {
                        self.line("} else {");
                        self.nested(els, bars)?;
                    }
                    self.line("}");
                }
                Stmt::Cluster { label, body, .. } => {
                    self.line(format!("// cluster: {label}"));
                    self.stmts(body, bars)?;
                }
                Stmt::Staggered { body } => self.stmts(body, bars)?,
                Stmt::Roles { .. } => {
                    return unsupported("unexpanded roles (build the kernel with KernelBuilder)")
                }
            }
        }
        Ok(())
    }

    fn nested(&mut self, body: &[Stmt], bars: &[u32]) -> Result<(), CudaLowerError> {
        self.depth += 1;
        let r = self.stmts(body, bars);
        self.depth -= 1;
        r
    }

    fn op(&mut self, op: &Op, bars: &[u32]) -> Result<(), CudaLowerError> {
        match op {
            Op::LoadAsync { dst, src, scope } => self.load_async(dst, src, *scope, bars),
            Op::Wait {
                queue: WaitQueue::Async,
                count,
            } => {
                let n = match count {
                    WaitCount::Outstanding(n) => *n,
                    WaitCount::Auto => 0,
                };
                self.line(format!("kt_q.wait_outstanding({n}u);"));
                Ok(())
            }
            // ld.shared completes in order for the issuing thread: nothing to wait for.
            Op::Wait {
                queue: WaitQueue::Shared,
                ..
            }
            | Op::Priority(_)
            | Op::Hint(_) => Ok(()),
            Op::Barrier { scope } => {
                self.line(match scope {
                    Scope::Block => "__syncthreads();",
                    Scope::WarpGroup => "kt::named_barrier(1 + threadIdx.x / 128, 128);",
                    Scope::Wave => "__syncwarp();",
                });
                Ok(())
            }
            Op::SetMaxRegs { regs } => {
                if *regs < self.cap {
                    self.line(format!("kt::setmaxnreg_dec<{regs}>();"));
                } else if *regs > self.cap {
                    self.line(format!("kt::setmaxnreg_inc<{regs}>();"));
                }
                Ok(())
            }
            Op::Fill { dst, value } => {
                let (name, n) = self.acc(*dst);
                self.line("#pragma unroll");
                self.line(format!(
                    "for (int i = 0; i < {n}; ++i) {name}[i] = {value:?}f;"
                ));
                Ok(())
            }
            Op::Mma { form, d, a, b, c } => self.mma(*form, *d, a, b, c.as_ref()),
            Op::StoreGlobal { dst, src, rounding } => self.store(dst, *src, *rounding),
            other => unsupported(format!("op `{}`", other.name())),
        }
    }

    /// Name and float count of an accumulator register.
    fn acc(&self, r: RegId) -> (String, u32) {
        let d = self.k.reg(r);
        (format!("r_{}", ident(&d.name)), d.shape().1 / 2)
    }

    /// Shared address of a view (row pitch = the tile's row bytes).
    fn smem_addr(&self, v: &SharedView, wave: &str) -> String {
        let s = self.k.shared_decl(v.buf);
        let row_bytes = s.tile.cols * s.tile.dtype.bytes();
        format!(
            "(kt_smem + {}u + (u32)({}) * {}u + (u32)({}) * {row_bytes}u + (u32)({}) * {}u)",
            self.offsets[v.buf.0 as usize],
            self.ex_with(&v.index, wave),
            s.tile.bytes(),
            self.ex_with(&v.row0, wave),
            self.ex_with(&v.col0, wave),
            s.tile.dtype.bytes()
        )
    }

    fn load_async(
        &mut self,
        dst: &SharedView,
        src: &GlobalView,
        scope: Scope,
        bars: &[u32],
    ) -> Result<(), CudaLowerError> {
        let s = self.k.shared_decl(dst.buf);
        let g = self.k.global(src.tensor);
        if g.dims.len() != 2 || src.row_dim != 0 || src.col_dim != 1 || g.strides[1] != Expr::c(1) {
            return unsupported(format!("load of `{}`: only row-major 2-d tensors", g.name));
        }
        if (dst.rows, dst.cols) != (s.tile.rows, s.tile.cols)
            || (src.rows, src.cols) != (dst.rows, dst.cols)
        {
            return unsupported(format!(
                "load into part of `{}` (TMA fills whole ring slots)",
                s.name
            ));
        }
        let swizzle_bytes = swizzle_bytes(s.tile.swizzle, s.tile.cols * s.tile.dtype.bytes())?;
        let map = TmaMap {
            global: src.tensor.0,
            box_rows: src.rows,
            box_cols: src.cols,
            swizzle_bytes,
        };
        let mi = match self.maps.iter().position(|m| *m == map) {
            Some(i) => i,
            None => {
                self.maps.push(map);
                self.maps.len() - 1
            }
        };
        let elected = match scope {
            Scope::Block => "threadIdx.x == 0",
            Scope::WarpGroup => "threadIdx.x % 128 == 0",
            Scope::Wave => "kt_lane == 0",
        };
        let slot = format!(
            "({}u + (u32)({}))",
            bars[dst.buf.0 as usize],
            self.ex(&dst.index)
        );
        self.line(format!("{{ // load_async {} -> {}", g.name, s.name));
        self.depth += 1;
        self.line(format!(
            "const u32 slot = {slot}, bar = kt_bars + 8u * slot;"
        ));
        self.line(format!("if ({elected}) {{"));
        self.line(format!(
            "    kt::mbarrier_arrive_expect_tx(bar, {}u);",
            s.tile.bytes()
        ));
        self.line(format!(
            "    kt::tma_load_2d({}, &tma{mi}, bar, (int)({}), (int)({}));",
            self.smem_addr(dst, "wave"),
            self.ex(&src.origin[1]),
            self.ex(&src.origin[0])
        ));
        self.line("}");
        self.line("kt_q.push(bar, kt_uses[slot] & 1u);");
        self.line("kt_uses[slot] += 1;");
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// `d (+)= a·bᵀ` for one warpgroup from shared memory: each wave's 16-row slice of A must be the
    /// next 16 rows after the previous wave's, so the four slices form wgmma's 64-row A.
    fn mma(
        &mut self,
        form: MmaForm,
        d: RegId,
        a: &MmaOperand,
        b: &MmaOperand,
        c: Option<&RegId>,
    ) -> Result<(), CudaLowerError> {
        let (MmaOperand::Shared(av), MmaOperand::Shared(bv)) = (a, b) else {
            return unsupported("mma with a register operand (wgmma SS form only)");
        };
        if form != MmaForm::Abt {
            return unsupported(format!("{} (K-major A and B only)", form.name()));
        }
        let (acc, _) = self.acc(d);
        let n = self.k.reg(d).shape().1;
        let kk = av.cols;
        if av.rows != 16 || bv.rows != n || bv.cols != kk || kk % 16 != 0 {
            return unsupported(format!(
                "mma shapes A {}x{}, B {}x{}, D 16x{n}",
                av.rows, av.cols, bv.rows, bv.cols
            ));
        }
        self.check_slices(av, bv)?;
        let accumulate = match c {
            Some(r) if *r == d => true,
            None => false,
            Some(_) => return unsupported("mma whose C differs from D"),
        };
        let (sa, sb) = (self.k.shared_decl(av.buf), self.k.shared_decl(bv.buf));
        let desc = |t: &kittens_tile::SharedTile| -> Result<&'static str, CudaLowerError> {
            match swizzle_bytes(t.swizzle, t.cols * t.dtype.bytes())? {
                128 => Ok("kt::desc_kmajor_sw128"),
                64 => Ok("kt::desc_kmajor_sw64"),
                32 => Ok("kt::desc_kmajor_sw32"),
                _ => unsupported("wgmma operands without a swizzle"),
            }
        };
        let (da, db) = (desc(&sa.tile)?, desc(&sb.tile)?);
        self.wgmma_n.insert(n);
        let wrapper = WgmmaInput::Bf16.wrapper_name(n);
        self.line(format!("{{ // {} on the warpgroup's 64 rows", form.name()));
        self.depth += 1;
        self.line(format!(
            "const u32 a0 = {}, b0 = {};",
            self.smem_addr(av, "kt_wave0"),
            self.smem_addr(bv, "kt_wave0")
        ));
        self.line("kt::wgmma_fence();");
        for s in 0..kk / 16 {
            let flag = if accumulate || s > 0 { "1u" } else { "0u" };
            self.line(format!(
                "kt::{wrapper}({acc}, {da}(a0 + {o}u), {db}(b0 + {o}u), {flag});",
                o = s * 32
            ));
        }
        self.line("kt::wgmma_commit();");
        self.line("kt::wgmma_wait<0>();");
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// Checks, by evaluating the views for the waves of each warpgroup, that A's slices step by 16 rows
    /// per wave and B's view is the same for every wave.
    fn check_slices(&self, av: &SharedView, bv: &SharedView) -> Result<(), CudaLowerError> {
        let params = vec![0i64; self.k.params.len()];
        let vars = vec![0i64; self.k.vars.len()];
        let block = vec![0i64; self.k.grid.extents.len()];
        let at = |e: &Expr, wave: u32| {
            e.eval(&Env {
                params: &params,
                vars: &vars,
                block: &block,
                wave: wave as i64,
            })
        };
        for w0 in (0..self.k.waves).step_by(4) {
            for i in 0..4.min(self.k.waves - w0) {
                let w = w0 + i;
                let a_ok = at(&av.row0, w)
                    .zip(at(&av.row0, w0))
                    .is_some_and(|(r, r0)| r == r0 + 16 * i as i64)
                    && at(&av.col0, w) == Some(0)
                    && at(&av.index, w) == at(&av.index, w0);
                let b_ok = at(&bv.row0, w) == Some(0)
                    && at(&bv.col0, w) == Some(0)
                    && at(&bv.index, w) == at(&bv.index, w0);
                if !a_ok || !b_ok {
                    return unsupported(
                        "mma whose per-wave A slices are not consecutive 16-row blocks of one tile",
                    );
                }
            }
        }
        Ok(())
    }

    /// Stores a wave's 16×N accumulator slice to a bf16 tensor, dropping elements outside it.
    fn store(
        &mut self,
        dst: &GlobalView,
        src: RegId,
        rounding: Rounding,
    ) -> Result<(), CudaLowerError> {
        let g = self.k.global(dst.tensor);
        let (acc, _) = self.acc(src);
        let n = self.k.reg(src).shape().1;
        if rounding != Rounding::Rtne || (dst.rows, dst.cols) != (16, n) {
            return unsupported(format!(
                "store of {}x{} with {rounding:?}",
                dst.rows, dst.cols
            ));
        }
        let (rd, cd) = (dst.row_dim as usize, dst.col_dim as usize);
        let base: Vec<String> = dst
            .origin
            .iter()
            .zip(&g.strides)
            .map(|(o, s)| format!("(long long)({}) * ({})", self.ex(o), self.ex(s)))
            .collect();
        let gname = format!("g_{}", ident(&g.name));
        self.line(format!(
            "{{ // store {} -> {}",
            self.k.reg(src).name,
            g.name
        ));
        self.depth += 1;
        self.line(format!(
            "bf16_t* const p0 = {gname} + {};",
            base.join(" + ")
        ));
        self.line(format!(
            "const int r0 = {}, c0 = {};",
            self.ex(&dst.origin[rd]),
            self.ex(&dst.origin[cd])
        ));
        self.line(format!(
            "const int rows = {}, cols = {}, sr = {}, sc = {};",
            self.ex(&g.dims[rd]),
            self.ex(&g.dims[cd]),
            self.ex(&g.strides[rd]),
            self.ex(&g.strides[cd])
        ));
        self.line("#pragma unroll");
        self.line(format!("for (int i = 0; i < {}; ++i) {{", n / 8));
        self.line("#pragma unroll");
        self.line("    for (int h = 0; h < 2; ++h) {");
        self.line("        const int rr = kt_lane / 4 + 8 * h, cc = 8 * i + 2 * (kt_lane % 4);");
        self.line(format!("        const u32 v = kt::pack_bf16x2({acc}[4 * i + 2 * h], {acc}[4 * i + 2 * h + 1]);"));
        self.line("        bf16_t* p = p0 + (long long)rr * sr + (long long)cc * sc;");
        self.line("        if (r0 + rr >= rows) continue;");
        self.line("        if (c0 + cc + 1 < cols && sc == 1 && ((u64)p & 3u) == 0) { kt::st_global_b32(p, v); continue; }");
        self.line("        if (c0 + cc < cols) kt::st_global_b16(p, v & 0xffffu);");
        self.line("        if (c0 + cc + 1 < cols) kt::st_global_b16(p + sc, v >> 16);");
        self.line("    }");
        self.line("}");
        self.depth -= 1;
        self.line("}");
        Ok(())
    }
}

/// The TMA/wgmma swizzle of a shared tile whose rows are `row_bytes` long: the NVIDIA modes are an XOR
/// of 16-byte chunks by the row within an 8-row atom, and they require rows of exactly that width.
fn swizzle_bytes(sw: Swizzle, row_bytes: u32) -> Result<u32, CudaLowerError> {
    let bytes = if sw == Swizzle::NV_128B {
        128
    } else if sw == Swizzle::NV_64B {
        64
    } else if sw == Swizzle::NV_32B {
        32
    } else if sw == Swizzle::None {
        0
    } else {
        return unsupported(format!(
            "shared swizzle {sw:?} (TMA has the NVIDIA modes only)"
        ));
    };
    if bytes != 0 && bytes != row_bytes {
        return unsupported(format!("{bytes}-byte swizzle on {row_bytes}-byte rows"));
    }
    Ok(bytes)
}
