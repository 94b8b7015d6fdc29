//! The builder kernels are written in (ThunderKittens/HipKittens style, PyTorch-like op names).
//!
//! Declarations return ids; ops append to the current body; closures open nested bodies (loops,
//! conditionals, clusters). Errors in declarations are kept and returned by [`KernelBuilder::finish`], so
//! kernel code reads like the algorithm without `?` on every line; `finish` then expands the schedule
//! (`crate::schedule`) and validates every op (`crate::validate`).

mod ops;

use crate::error::BuildError;
use crate::expr::{Cond, Expr, ParamId, VarId};
use crate::ir::*;
use kittens_hw::dtype::DType;
use kittens_tile::{BaseShape, Layout, RegTile, SharedTile, Swizzle, TileError};

pub struct KernelBuilder {
    k: Kernel,
    stack: Vec<Vec<Stmt>>,
    error: Option<BuildError>,
    /// Rounding used by maps and stores that do not name one (RTNE, the IEEE default).
    pub rounding: Rounding,
}

impl From<RegId> for Arg {
    fn from(r: RegId) -> Arg {
        Arg::Reg(r)
    }
}
impl From<f32> for Arg {
    fn from(v: f32) -> Arg {
        Arg::Scalar(v)
    }
}

impl SharedView {
    /// The `(ti, tj)`-th `rows × cols` sub-tile of this view (HipKittens `subtile_inplace`).
    pub fn sub(
        &self,
        rows: u32,
        cols: u32,
        ti: impl Into<Expr>,
        tj: impl Into<Expr>,
    ) -> SharedView {
        SharedView {
            buf: self.buf,
            index: self.index.clone(),
            row0: &self.row0 + ti.into() * rows as i64,
            col0: &self.col0 + tj.into() * cols as i64,
            rows,
            cols,
        }
    }
}

impl KernelBuilder {
    pub fn new(name: &str, schedule: Schedule) -> Self {
        let k = Kernel {
            name: name.into(),
            schedule,
            waves: schedule.waves(),
            params: vec![],
            globals: vec![],
            shared: vec![],
            regs: vec![],
            vars: vec![],
            grid: Grid {
                extents: vec![Expr::c(1)],
                remap: GridOrder::RowMajor,
                paired: false,
                cluster: 1,
                resident: 1,
                index32: false,
            },
            body: vec![],
        };
        KernelBuilder {
            k,
            stack: vec![vec![]],
            error: None,
            rounding: Rounding::Rtne,
        }
    }

    fn fail(&mut self, e: BuildError) {
        self.error.get_or_insert(e);
    }

    // ---- declarations -------------------------------------------------------------------------

    /// A run-time integer parameter (a problem size).
    pub fn param(&mut self, name: &str) -> Expr {
        self.k.params.push(ParamDecl {
            name: name.into(),
            word: false,
        });
        Expr::Param(ParamId(self.k.params.len() as u32 - 1))
    }

    /// A parameter that is a 32-bit data word (a seed or counter word, 0 allowed), not a size.
    pub fn param_word(&mut self, name: &str) -> Expr {
        self.k.params.push(ParamDecl {
            name: name.into(),
            word: true,
        });
        Expr::Param(ParamId(self.k.params.len() as u32 - 1))
    }

    /// A global tensor with explicit strides (elements) per logical dimension.
    pub fn global_strided(
        &mut self,
        name: &str,
        dtype: DType,
        dims: &[(&str, Expr)],
        strides: Vec<Expr>,
        access: Access,
    ) -> GlobalId {
        if strides.len() != dims.len() {
            self.fail(BuildError::Structure(format!(
                "`{name}`: {} dims but {} strides",
                dims.len(),
                strides.len()
            )));
        }
        self.k.globals.push(GlobalDecl {
            name: name.into(),
            dtype,
            dim_names: dims.iter().map(|d| d.0.to_string()).collect(),
            dims: dims.iter().map(|d| d.1.clone()).collect(),
            strides,
            access,
            slot_fill: SlotFill::Tma,
            clip: None,
        });
        GlobalId(self.k.globals.len() as u32 - 1)
    }

    /// How a target with a choice fills ring slots from global `g` ([`SlotFill`]; TMA by default).
    pub fn slot_fill(&mut self, g: GlobalId, fill: SlotFill) {
        self.k.globals[g.0 as usize].slot_fill = fill;
    }

    /// Global `g` ends at `end` along dimension `dim` for each block ([`crate::Clip`]): a packed
    /// batch's sequence end, so that rows of the next sequence are neither read nor written.
    pub fn clip(&mut self, g: GlobalId, dim: u8, end: Expr) {
        self.k.globals[g.0 as usize].clip = Some(crate::Clip { dim, end });
    }

    /// A densely packed row-major global tensor (last dimension contiguous).
    pub fn global(
        &mut self,
        name: &str,
        dtype: DType,
        dims: &[(&str, Expr)],
        access: Access,
    ) -> GlobalId {
        let mut strides = vec![Expr::c(1); dims.len()];
        for i in (0..dims.len().saturating_sub(1)).rev() {
            strides[i] = &strides[i + 1] * dims[i + 1].1.clone();
        }
        self.global_strided(name, dtype, dims, strides, access)
    }

    /// The launch grid: `∏ extents` blocks, coordinates from `remap`.
    pub fn grid(&mut self, extents: Vec<Expr>, remap: GridOrder) {
        let (resident, index32) = (self.k.grid.resident, self.k.grid.index32);
        self.k.grid = Grid {
            extents,
            remap,
            paired: false,
            cluster: 1,
            resident,
            index32,
        };
    }

    /// Declares that every global spans at most [`crate::INDEX32_MAX_SPAN`] elements at launch
    /// ([`crate::Grid::index32`]: 32-bit index arithmetic; the launcher checks it).
    pub fn index32(&mut self) {
        self.k.grid.index32 = true;
    }

    /// Asks for `n` blocks resident per SM at once ([`crate::Grid::resident`]; 1 to 32).
    pub fn resident_blocks(&mut self, n: u32) {
        if !(1..=32).contains(&n) {
            self.fail(BuildError::Structure(format!(
                "{n} resident blocks per SM (1 to 32)"
            )));
            return;
        }
        self.k.grid.resident = n;
    }

    /// Runs consecutive row tiles (grid extent 0) in thread-block clusters of `n` (1, 2 or 4): their
    /// shared loads are fetched once per cluster where the target has clusters ([`crate::Grid::cluster`]).
    pub fn cluster_rows(&mut self, n: u32) {
        if !matches!(n, 1 | 2 | 4) {
            self.fail(BuildError::Structure(format!(
                "clusters of {n} blocks (1, 2 or 4)"
            )));
            return;
        }
        self.k.grid.cluster = n;
    }

    /// Balance a persistent grid whose tiles cost in proportion to their rank `r = 0, 1, …, n − 1`
    /// along the grid's last coordinate `t` (longest first: a causal mask's query blocks, last
    /// block first). Returns the rank that position `t` computes: `0, n−1, 1, n−2, …` (even `t`:
    /// `t/2`, odd `t`: `n−1−⌊t/2⌋`), a bijection on `0..n`, and marks the grid paired, so that the
    /// persistent lowering gives positions `2u` and `2u + 1` to one block: each block's pairs then
    /// cost about `n + 1` blocks of work, where the plain round-robin (tile `blockIdx + r·gridDim`)
    /// hands some blocks mostly long tiles. Modelled for causal attention on 132 SMs: the busiest
    /// block runs 1.2 times the mean at B16 H16 N2048 and B2 H24 N16384 round-robin, at most 1.03
    /// times paired (`tests/grid_pairs.rs`). Where every tile has its own block (the interpreter, the AMD
    /// lowerings) only the order changes.
    pub fn pair_long_short(&mut self, t: &Expr, n: &Expr) -> Expr {
        self.k.grid.paired = true;
        let (odd, half) = (t % 2, t / 2);
        &half + odd * (n.clone() - 1 - &half * 2)
    }

    /// Coordinate `i` of this block's logical tile (after the grid remap).
    pub fn block(&self, i: u8) -> Expr {
        Expr::Block(i)
    }
    pub fn wave(&self) -> Expr {
        Expr::Wave
    }
    /// The persistent grid's round (`Expr::Round`): 0 for a block's first tile, 1 for its second, ….
    pub fn round(&self) -> Expr {
        Expr::Round
    }
    /// `(rows, cols)` of a declared register (a vector: its length and 1).
    pub fn reg_shape(&self, r: RegId) -> (u32, u32) {
        self.k.regs[r.0 as usize].shape()
    }
    /// The warpgroup (four consecutive waves; the ping-pong half).
    pub fn warpgroup(&self) -> Expr {
        Expr::Wave / 4
    }

    /// `count` shared tiles `rows × cols` with a swizzle.
    pub fn shared(
        &mut self,
        name: &str,
        dtype: DType,
        rows: u32,
        cols: u32,
        swizzle: Swizzle,
        count: u32,
    ) -> SharedId {
        let tile = SharedTile::with_swizzle(dtype, rows, cols, swizzle).unwrap_or_else(|source| {
            self.fail(BuildError::Decl {
                name: name.into(),
                error: source,
            });
            SharedTile {
                dtype,
                rows: rows.max(1),
                cols: cols.max(1),
                swizzle,
            }
        });
        self.k.shared.push(SharedDecl {
            name: name.into(),
            tile,
            count: count.max(1),
        });
        SharedId(self.k.shared.len() as u32 - 1)
    }

    /// `count` shared tiles of a tile-layer shape (e.g. `SharedTile::new`, which picks the shape's default
    /// swizzle, HipKittens D.1).
    pub fn shared_tile(
        &mut self,
        name: &str,
        tile: Result<SharedTile, TileError>,
        count: u32,
    ) -> SharedId {
        match tile {
            Ok(t) => self.shared(name, t.dtype, t.rows, t.cols, t.swizzle, count),
            Err(source) => {
                self.fail(BuildError::Decl {
                    name: name.into(),
                    error: source,
                });
                self.shared(name, DType::Bf16, 1, 1, Swizzle::None, count)
            }
        }
    }

    /// A register tile from the tile layer (use `RegTile::pinned` for explicit registers, HipKittens D.3).
    pub fn reg_tile(&mut self, name: &str, tile: Result<RegTile, TileError>) -> RegId {
        let t = tile.unwrap_or_else(|source| {
            self.fail(BuildError::Decl {
                name: name.into(),
                error: source,
            });
            RegTile {
                dtype: DType::F32,
                rows: 1,
                cols: 1,
                layout: Layout::Row,
                base: BaseShape::S16X16,
                pin: None,
            }
        });
        self.push_reg(name, RegKind::Tile(t))
    }

    /// A compiler-allocated register tile.
    pub fn tile(
        &mut self,
        name: &str,
        dtype: DType,
        rows: u32,
        cols: u32,
        layout: Layout,
        base: BaseShape,
    ) -> RegId {
        self.reg_tile(name, RegTile::new(dtype, rows, cols, layout, base))
    }

    fn push_reg(&mut self, name: &str, kind: RegKind) -> RegId {
        self.k.regs.push(RegDecl {
            name: name.into(),
            kind,
        });
        RegId(self.k.regs.len() as u32 - 1)
    }

    fn vec_of(&mut self, name: &str, of: RegId, dtype: DType, axis: Axis) -> RegId {
        let t = self
            .k
            .regs
            .get(of.0 as usize)
            .and_then(|r| r.tile().copied());
        let Some(t) = t else {
            self.fail(BuildError::Structure(format!(
                "vector `{name}`: register {} is not a tile",
                of.0
            )));
            return self.push_reg(
                name,
                RegKind::Vec(RegVec {
                    dtype,
                    len: 1,
                    axis,
                    layout: Layout::Row,
                    base: BaseShape::S16X16,
                }),
            );
        };
        let len = if axis == Axis::Rows { t.rows } else { t.cols };
        self.push_reg(
            name,
            RegKind::Vec(RegVec {
                dtype,
                len,
                axis,
                layout: t.layout,
                base: t.base,
            }),
        )
    }
    /// One value per row of tile `of` (what `row_max` produces).
    pub fn row_vec(&mut self, name: &str, of: RegId, dtype: DType) -> RegId {
        self.vec_of(name, of, dtype, Axis::Rows)
    }
    /// One value per column of tile `of`.
    pub fn col_vec(&mut self, name: &str, of: RegId, dtype: DType) -> RegId {
        self.vec_of(name, of, dtype, Axis::Cols)
    }

    // ---- views --------------------------------------------------------------------------------

    /// Buffer `index` of shared ring `buf`, whole.
    pub fn smem(&self, buf: SharedId, index: impl Into<Expr>) -> SharedView {
        let t = self.k.shared[buf.0 as usize].tile;
        SharedView {
            buf,
            index: index.into(),
            row0: Expr::c(0),
            col0: Expr::c(0),
            rows: t.rows,
            cols: t.cols,
        }
    }

    /// The `(ti, tj)`-th `rows × cols` tile of a 2-d global tensor.
    pub fn gtile(
        &self,
        g: GlobalId,
        rows: u32,
        cols: u32,
        ti: impl Into<Expr>,
        tj: impl Into<Expr>,
    ) -> GlobalView {
        let origin = vec![ti.into() * rows as i64, tj.into() * cols as i64];
        GlobalView {
            tensor: g,
            origin,
            row_dim: 0,
            col_dim: 1,
            rows,
            cols,
        }
    }

    /// A `rows × cols` window of an N-d tensor at element `origin`, rows along `row_dim`.
    pub fn gview(
        &self,
        g: GlobalId,
        origin: Vec<Expr>,
        row_dim: u8,
        col_dim: u8,
        rows: u32,
        cols: u32,
    ) -> GlobalView {
        GlobalView {
            tensor: g,
            origin,
            row_dim,
            col_dim,
            rows,
            cols,
        }
    }

    // ---- synchronisation and scheduling -------------------------------------------------------

    pub fn barrier(&mut self) {
        self.op(Op::Barrier {
            scope: Scope::Block,
        });
    }
    pub fn barrier_by(&mut self, scope: Scope) {
        self.op(Op::Barrier { scope });
    }
    /// Wait until at most `n` of this wave's async global→shared loads are in flight.
    pub fn wait_async(&mut self, n: u32) {
        self.op(Op::Wait {
            queue: WaitQueue::Async,
            count: WaitCount::Outstanding(n),
        });
    }
    /// A wait whose count the schedule analysis computes.
    pub fn wait_async_auto(&mut self) {
        self.op(Op::Wait {
            queue: WaitQueue::Async,
            count: WaitCount::Auto,
        });
    }
    pub fn wait_shared(&mut self, n: u32) {
        self.op(Op::Wait {
            queue: WaitQueue::Shared,
            count: WaitCount::Outstanding(n),
        });
    }
    pub fn prio(&mut self, p: u8) {
        self.op(Op::Priority(p));
    }
    pub fn fence(&mut self) {
        self.op(Op::Hint(SchedHint::Fence));
    }
    pub fn sched_pairs(&mut self, mma: u32, other: u32, groups: u32) {
        self.op(Op::Hint(SchedHint::Pairs { mma, other, groups }));
    }
    /// `groups` times: `mma` matrix ops, then `reads` shared→register reads (a compiler hint).
    pub fn sched_mma_reads(&mut self, mma: u32, reads: u32, groups: u32) {
        self.op(Op::Hint(SchedHint::MmaReads { mma, reads, groups }));
    }
    /// `groups` times: `mma` matrix ops, then `exp` exponentials (a compiler hint).
    pub fn sched_mma_exp(&mut self, mma: u32, exp: u32, groups: u32) {
        self.op(Op::Hint(SchedHint::MmaExp { mma, exp, groups }));
    }

    // ---- control ------------------------------------------------------------------------------

    fn nested(&mut self, f: impl FnOnce(&mut Self)) -> Vec<Stmt> {
        self.stack.push(vec![]);
        f(self);
        self.stack.pop().expect("pushed above")
    }
    fn push_stmt(&mut self, s: Stmt) {
        self.stack
            .last_mut()
            .expect("builder body stack is never empty")
            .push(s);
    }

    /// `for i in start..end { f(i) }`.
    pub fn for_range(
        &mut self,
        name: &str,
        start: impl Into<Expr>,
        end: impl Into<Expr>,
        f: impl FnOnce(&mut Self, Expr),
    ) {
        self.k.vars.push(VarDecl { name: name.into() });
        let var = VarId(self.k.vars.len() as u32 - 1);
        let body = self.nested(|b| f(b, Expr::Var(var)));
        self.push_stmt(Stmt::For {
            var,
            start: start.into(),
            end: end.into(),
            body,
        });
    }
    pub fn if_(&mut self, cond: Cond, f: impl FnOnce(&mut Self)) {
        let then = self.nested(f);
        self.push_stmt(Stmt::If {
            cond,
            then,
            els: vec![],
        });
    }
    pub fn if_else(&mut self, cond: Cond, f: impl FnOnce(&mut Self), g: impl FnOnce(&mut Self)) {
        let then = self.nested(f);
        let els = self.nested(g);
        self.push_stmt(Stmt::If { cond, then, els });
    }
    /// A compute cluster of the kernel's schedule.
    pub fn compute(&mut self, label: &str, f: impl FnOnce(&mut Self)) {
        let body = self.nested(f);
        self.push_stmt(Stmt::Cluster {
            kind: ClusterKind::Compute,
            label: label.into(),
            body,
        });
    }
    /// A memory cluster of the kernel's schedule.
    pub fn memory(&mut self, label: &str, f: impl FnOnce(&mut Self)) {
        let body = self.nested(f);
        self.push_stmt(Stmt::Cluster {
            kind: ClusterKind::Memory,
            label: label.into(),
            body,
        });
    }
    /// `f` run by the last of `arrivals` blocks whose waves of `scope` arrive on element `index` of the
    /// `i32` global `counter` ([`Stmt::LastArrival`]), after a barrier over `scope` (every wave's
    /// stores issued before the arrival).
    pub fn last_arrival(
        &mut self,
        counter: GlobalId,
        index: Expr,
        arrivals: Expr,
        scope: Scope,
        f: impl FnOnce(&mut Self),
    ) {
        self.barrier_by(scope);
        let body = self.nested(f);
        self.push_stmt(Stmt::LastArrival {
            counter,
            index,
            arrivals,
            scope,
            body,
        });
    }
    /// The region where ping-pong warpgroups run one cluster apart.
    pub fn staggered(&mut self, f: impl FnOnce(&mut Self)) {
        let body = self.nested(f);
        self.push_stmt(Stmt::Staggered { body });
    }
    /// Producer and consumer bodies of a warp-specialised schedule.
    pub fn roles(&mut self, producer: impl FnOnce(&mut Self), consumer: impl FnOnce(&mut Self)) {
        let producer = self.nested(producer);
        let consumer = self.nested(consumer);
        self.push_stmt(Stmt::Roles { producer, consumer });
    }

    /// Expands the schedule, validates every op and returns the kernel.
    pub fn finish(mut self) -> Result<Kernel, BuildError> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let body = self.stack.pop().unwrap_or_default();
        self.k.body = crate::schedule::expand(self.k.schedule, body)?;
        crate::validate::validate(&self.k)?;
        Ok(self.k)
    }
}
