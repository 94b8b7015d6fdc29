//! `kittens.tile`: the tile language from Python. [`Builder`] wraps the Rust
//! [`kittens_ir::KernelBuilder`] op for op (the Rust names; `global_` for Python's keyword), so a
//! Python program builds exactly the IR the Rust one does and every build error is the Rust error,
//! raised as a `ValueError`. Enums are strings ("bf16", "read", "row", "strip", "row_major"); ids of
//! tensors, tiles and shared buffers are small opaque objects tied to the builder that made them.
//! `finish()` returns a [`crate::tile_program::Program`] (interpreter, race check, lowering, launch).

use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use kittens_ir::{Expr, GridOrder, KernelBuilder};
use kittens_tile::{BaseShape, Layout, Swizzle};

use crate::tile_body::{restore, run_body, take};
use crate::tile_builder::Builder;
use crate::tile_decl::{access, dtype, parse};
pub use crate::tile_decl::{ArgIn, GView, Global, SView, Shared, Tile};
use crate::tile_expr::{ex, ExprIn, PyCond, PyExpr};
use crate::tile_program::Program;

/// Builders are numbered so that an id made by one is refused by another (its index would name
/// some other tile there, or none).
static BUILDERS: AtomicU64 = AtomicU64::new(1);

#[pymethods]
impl Builder {
    /// `Builder(name, waves, schedule="plain", roles=None)`: a kernel of `waves` waves per block
    /// under `schedule` (see [`crate::tile_body::schedule`]: "plain", "ping_pong8", "interleave4",
    /// "producer_consumer" with `roles=(producers, consumers, producer_regs, consumer_regs)`).
    #[new]
    #[pyo3(signature = (name, waves, schedule = "plain", roles = None))]
    fn new(
        name: &str,
        waves: u32,
        schedule: &str,
        roles: Option<(u32, u32, u32, u32)>,
    ) -> PyResult<Self> {
        let schedule = crate::tile_body::schedule(waves, schedule, roles)?;
        Ok(Builder {
            k: Some(KernelBuilder::new(name, schedule)),
            owner: BUILDERS.fetch_add(1, Ordering::Relaxed),
            spent: String::new(),
            depth: 0,
        })
    }

    /// An integer problem-size parameter (at least 1), given at every run.
    fn param(&mut self, name: &str) -> PyResult<PyExpr> {
        Ok(ex(self.b()?.param(name)))
    }

    /// A dense row-major global tensor: `shape` is a list of `(dim_name, extent)`.
    fn global_(
        &mut self,
        name: &str,
        dtype: &str,
        shape: Vec<(String, ExprIn)>,
        access: &str,
    ) -> PyResult<Global> {
        let (dt, acc) = (
            self::dtype(&format!("tensor `{name}`"), dtype)?,
            self::access(&format!("tensor `{name}`"), access)?,
        );
        let shape: Vec<(String, Expr)> = shape.into_iter().map(|(n, e)| (n, e.expr())).collect();
        let refs: Vec<(&str, Expr)> = shape.iter().map(|(n, e)| (n.as_str(), e.clone())).collect();
        let id = self.b()?.global(name, dt, &refs, acc);
        Ok(Global {
            id,
            owner: self.owner,
            name: name.into(),
        })
    }

    /// A global tensor with explicit element strides (0 broadcasts a dimension).
    fn global_strided(
        &mut self,
        name: &str,
        dtype: &str,
        shape: Vec<(String, ExprIn)>,
        strides: Vec<ExprIn>,
        access: &str,
    ) -> PyResult<Global> {
        let (dt, acc) = (
            self::dtype(&format!("tensor `{name}`"), dtype)?,
            self::access(&format!("tensor `{name}`"), access)?,
        );
        let shape: Vec<(String, Expr)> = shape.into_iter().map(|(n, e)| (n, e.expr())).collect();
        let refs: Vec<(&str, Expr)> = shape.iter().map(|(n, e)| (n.as_str(), e.clone())).collect();
        let strides = strides.into_iter().map(ExprIn::expr).collect();
        let id = self.b()?.global_strided(name, dt, &refs, strides, acc);
        Ok(Global {
            id,
            owner: self.owner,
            name: name.into(),
        })
    }

    /// The grid: one block per point of `extents`, launched in `order` ("row_major").
    #[pyo3(signature = (extents, order = "row_major"))]
    fn grid(&mut self, extents: Vec<ExprIn>, order: &str) -> PyResult<()> {
        let order = parse("grid order", order, &[("row_major", GridOrder::RowMajor)])?;
        let extents = extents.into_iter().map(ExprIn::expr).collect();
        self.b()?.grid(extents, order);
        Ok(())
    }

    /// This block's coordinate `i` in the grid.
    fn block(&mut self, i: u8) -> PyResult<PyExpr> {
        Ok(ex(self.b()?.block(i)))
    }

    /// This wave's index in its block.
    fn wave(&mut self) -> PyResult<PyExpr> {
        Ok(ex(self.b()?.wave()))
    }

    /// The warpgroup of this wave (four consecutive waves: `wave // 4`).
    fn warpgroup(&mut self) -> PyResult<PyExpr> {
        Ok(ex(self.b()?.warpgroup()))
    }

    /// `for v in start..end: body(v)`: `body` is a Python function of the loop variable (an `Expr`)
    /// that adds the loop's ops to this builder; it runs once, at build time, and the loop runs on
    /// the device (the Rust `KernelBuilder::for_range`).
    fn for_range(
        slf: &Bound<'_, Self>,
        name: &str,
        start: ExprIn,
        end: ExprIn,
        body: Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let what = format!("for_range `{name}`");
        let mut k = take(slf)?;
        let mut r = Ok(());
        k.for_range(name, start.expr(), end.expr(), |inner, v| {
            r = run_body(slf, inner, &what, || body.call1((ex(v),)).map(drop));
        });
        restore(slf, k, r)
    }

    /// `if cond: then() else: else_()`, decided per wave when the kernel runs (`cond` compares
    /// expressions of the wave, warpgroup, block, parameters or loop variables); `then` and `else_`
    /// are Python functions of no argument that add the branch's ops (the Rust `if_`/`if_else`).
    #[pyo3(signature = (cond, then, else_ = None))]
    fn if_(
        slf: &Bound<'_, Self>,
        cond: PyRef<PyCond>,
        then: Bound<'_, PyAny>,
        else_: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let mut k = take(slf)?;
        let c = cond.c.clone();
        let (mut r, mut r2) = (Ok(()), Ok(()));
        let then_ =
            |inner: &mut KernelBuilder| run_body(slf, inner, "if_", || then.call0().map(drop));
        match else_ {
            None => k.if_(c, |inner| r = then_(inner)),
            // Both bodies are built; the else body of a failed then body adds to a spent builder
            // and raises at its first op, and the first error is the one reported.
            Some(g) => k.if_else(
                c,
                |inner| r = then_(inner),
                |inner| r2 = run_body(slf, inner, "if_ (else_)", || g.call0().map(drop)),
            ),
        }
        restore(slf, k, r.and(r2))
    }

    /// A compute cluster of the schedule: `body()` adds its ops; the schedule adds what it implies
    /// around them (ping-pong: priority, fences and the cluster-end barrier).
    fn compute(slf: &Bound<'_, Self>, label: &str, body: Bound<'_, PyAny>) -> PyResult<()> {
        let (mut k, mut r) = (take(slf)?, Ok(()));
        k.compute(label, |i| {
            r = run_body(slf, i, "compute", || body.call0().map(drop))
        });
        restore(slf, k, r)
    }

    /// A memory cluster of the schedule (ping-pong: fences and the cluster-end barrier around it).
    fn memory(slf: &Bound<'_, Self>, label: &str, body: Bound<'_, PyAny>) -> PyResult<()> {
        let (mut k, mut r) = (take(slf)?, Ok(()));
        k.memory(label, |i| {
            r = run_body(slf, i, "memory", || body.call0().map(drop))
        });
        restore(slf, k, r)
    }

    /// The region where ping-pong's two warpgroups run one cluster apart (the stagger barriers).
    fn staggered(slf: &Bound<'_, Self>, body: Bound<'_, PyAny>) -> PyResult<()> {
        let (mut k, mut r) = (take(slf)?, Ok(()));
        k.staggered(|i| r = run_body(slf, i, "staggered", || body.call0().map(drop)));
        restore(slf, k, r)
    }

    /// The producer and consumer bodies of a producer/consumer schedule (each warpgroup runs one,
    /// after setting its register budget).
    fn roles(
        slf: &Bound<'_, Self>,
        producer: Bound<'_, PyAny>,
        consumer: Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (mut k, mut r, mut r2) = (take(slf)?, Ok(()), Ok(()));
        k.roles(
            |i| r = run_body(slf, i, "roles (producer)", || producer.call0().map(drop)),
            |i| r2 = run_body(slf, i, "roles (consumer)", || consumer.call0().map(drop)),
        );
        restore(slf, k, r.and(r2))
    }

    /// A scheduling fence: the compiler keeps the ops on either side apart.
    fn fence(&mut self) -> PyResult<()> {
        self.b()?.fence();
        Ok(())
    }

    /// This wave's scheduling priority from here on (0 to 3).
    fn prio(&mut self, p: u8) -> PyResult<()> {
        self.b()?.prio(p);
        Ok(())
    }

    /// A `rows × cols` window of tensor `g` at element `origin`, rows along `row_dim`.
    fn gview(
        &mut self,
        g: PyRef<Global>,
        origin: Vec<ExprIn>,
        row_dim: u8,
        col_dim: u8,
        rows: u32,
        cols: u32,
    ) -> PyResult<GView> {
        self.mine("gview: tensor", &g.name, g.owner)?;
        let origin = origin.into_iter().map(ExprIn::expr).collect();
        let v = self.b()?.gview(g.id, origin, row_dim, col_dim, rows, cols);
        Ok(GView {
            v,
            owner: self.owner,
        })
    }

    /// A register tile: `layout` "row"/"col", `base` "strip" (no matrix instruction; a row dealt
    /// to the lanes in 16-byte chunks) or a matrix base shape "16x16", "16x32", "32x16", "32x8", "32x32".
    #[pyo3(signature = (name, dtype, rows, cols, layout = "row", base = "strip"))]
    fn tile(
        &mut self,
        name: &str,
        dtype: &str,
        rows: u32,
        cols: u32,
        layout: &str,
        base: &str,
    ) -> PyResult<Tile> {
        let what = format!("tile `{name}`");
        let dt = self::dtype(&what, dtype)?;
        let layout = parse(&what, layout, &[("row", Layout::Row), ("col", Layout::Col)])?;
        let base = parse(
            &what,
            base,
            &[
                ("strip", BaseShape::STRIP),
                ("16x16", BaseShape::S16X16),
                ("16x32", BaseShape::S16X32),
                ("32x16", BaseShape::S32X16),
                ("32x8", BaseShape::S32X8),
                ("32x32", BaseShape::S32X32),
            ],
        )?;
        let id = self.b()?.tile(name, dt, rows, cols, layout, base);
        Ok(self.tile_of(id, name))
    }

    /// One value per row of tile `of`.
    fn row_vec(&mut self, name: &str, of: PyRef<Tile>, dtype: &str) -> PyResult<Tile> {
        let (of, dt) = (
            self.reg("row_vec", &of)?,
            self::dtype(&format!("vector `{name}`"), dtype)?,
        );
        let id = self.b()?.row_vec(name, of, dt);
        Ok(self.tile_of(id, name))
    }

    /// One value per column of tile `of`.
    fn col_vec(&mut self, name: &str, of: PyRef<Tile>, dtype: &str) -> PyResult<Tile> {
        let (of, dt) = (
            self.reg("col_vec", &of)?,
            self::dtype(&format!("vector `{name}`"), dtype)?,
        );
        let id = self.b()?.col_vec(name, of, dt);
        Ok(self.tile_of(id, name))
    }

    /// `count` shared tiles `rows × cols`, unswizzled or with `swizzle=(bits, base, shift)`: the XOR
    /// swizzle of `kittens_tile::Swizzle::Xor` (NVIDIA's 128-byte mode is `(3, 4, 3)`); a swizzle the
    /// tile layer refuses is a build error naming the buffer.
    #[pyo3(signature = (name, dtype, rows, cols, count = 1, swizzle = None))]
    fn shared(
        &mut self,
        name: &str,
        dtype: &str,
        rows: u32,
        cols: u32,
        count: u32,
        swizzle: Option<(u32, u32, u32)>,
    ) -> PyResult<Shared> {
        let dt = self::dtype(&format!("shared `{name}`"), dtype)?;
        let sw = swizzle.map_or(Swizzle::None, |(bits, base, shift)| Swizzle::Xor {
            bits,
            base,
            shift,
        });
        let id = self.b()?.shared(name, dt, rows, cols, sw, count);
        Ok(Shared {
            id,
            owner: self.owner,
            name: name.into(),
        })
    }

    /// Slot `index` of shared ring `buf`, whole (narrow it with `.sub`).
    fn smem(&mut self, buf: PyRef<Shared>, index: ExprIn) -> PyResult<SView> {
        self.mine("smem: shared buffer", &buf.name, buf.owner)?;
        let v = self.b()?.smem(buf.id, index.expr());
        Ok(SView {
            v,
            owner: self.owner,
        })
    }

    /// Global → registers (converted to the tile's dtype).
    fn load_global(&mut self, dst: PyRef<Tile>, src: PyRef<GView>) -> PyResult<()> {
        let (d, s) = (
            self.reg("load_global", &dst)?,
            self.gv("load_global", &src)?,
        );
        self.b()?.load_global(d, s);
        Ok(())
    }

    /// Shared → registers.
    fn load(&mut self, dst: PyRef<Tile>, src: PyRef<SView>) -> PyResult<()> {
        let (d, s) = (self.reg("load", &dst)?, self.sv("load", &src)?);
        self.b()?.load(d, s);
        Ok(())
    }

    /// Registers → global (rounded to the tensor's dtype).
    fn store(&mut self, dst: PyRef<GView>, src: PyRef<Tile>) -> PyResult<()> {
        let (d, s) = (self.gv("store", &dst)?, self.reg("store", &src)?);
        self.b()?.store(d, s);
        Ok(())
    }

    /// Registers → shared.
    fn store_shared(&mut self, dst: PyRef<SView>, src: PyRef<Tile>) -> PyResult<()> {
        let (d, s) = (
            self.sv("store_shared", &dst)?,
            self.reg("store_shared", &src)?,
        );
        self.b()?.store_shared(d, s);
        Ok(())
    }

    /// Global → shared, asynchronously, by every wave of the block together (the Rust
    /// `load_async`); `wait_async(n)` then a `barrier()` make it visible.
    fn load_async(&mut self, dst: PyRef<SView>, src: PyRef<GView>) -> PyResult<()> {
        let (d, s) = (self.sv("load_async", &dst)?, self.gv("load_async", &src)?);
        self.b()?.load_async(d, s);
        Ok(())
    }

    /// Wait until at most `n` of this wave's async global → shared loads are in flight.
    fn wait_async(&mut self, n: u32) -> PyResult<()> {
        self.b()?.wait_async(n);
        Ok(())
    }

    /// Wait until at most `n` of this wave's shared-memory accesses are outstanding.
    fn wait_shared(&mut self, n: u32) -> PyResult<()> {
        self.b()?.wait_shared(n);
        Ok(())
    }

    /// A block-wide barrier.
    fn barrier(&mut self) -> PyResult<()> {
        self.b()?.barrier();
        Ok(())
    }

    /// `dst = 1 / sqrt(src)` (a tile or a scalar).
    fn rsqrt(&mut self, dst: PyRef<Tile>, src: ArgIn) -> PyResult<()> {
        let (d, s) = (self.reg("rsqrt", &dst)?, self.arg("rsqrt", src)?);
        self.b()?.rsqrt(d, s);
        Ok(())
    }

    /// Every element of `dst` set to `value`.
    fn fill(&mut self, dst: PyRef<Tile>, value: f32) -> PyResult<()> {
        let d = self.reg("fill", &dst)?;
        self.b()?.fill(d, value);
        Ok(())
    }

    /// Every element of `dst` set to 0.
    fn zero(&mut self, dst: PyRef<Tile>) -> PyResult<()> {
        let d = self.reg("zero", &dst)?;
        self.b()?.zero(d);
        Ok(())
    }

    /// `dst = a add b` (tiles or scalars).
    fn add(&mut self, dst: PyRef<Tile>, a: ArgIn, b: ArgIn) -> PyResult<()> {
        self.binary("add", &dst, a, b, |k, d, a, b| k.add(d, a, b))
    }

    /// `dst = a sub b` (tiles or scalars).
    fn sub(&mut self, dst: PyRef<Tile>, a: ArgIn, b: ArgIn) -> PyResult<()> {
        self.binary("sub", &dst, a, b, |k, d, a, b| k.sub(d, a, b))
    }

    /// `dst = a mul b` (tiles or scalars).
    fn mul(&mut self, dst: PyRef<Tile>, a: ArgIn, b: ArgIn) -> PyResult<()> {
        self.binary("mul", &dst, a, b, |k, d, a, b| k.mul(d, a, b))
    }

    /// `dst = a div b` (tiles or scalars).
    fn div(&mut self, dst: PyRef<Tile>, a: ArgIn, b: ArgIn) -> PyResult<()> {
        self.binary("div", &dst, a, b, |k, d, a, b| k.div(d, a, b))
    }

    /// `dst = a max b` (tiles or scalars).
    fn max(&mut self, dst: PyRef<Tile>, a: ArgIn, b: ArgIn) -> PyResult<()> {
        self.binary("max", &dst, a, b, |k, d, a, b| k.max(d, a, b))
    }

    /// `dst = a min b` (tiles or scalars).
    fn min(&mut self, dst: PyRef<Tile>, a: ArgIn, b: ArgIn) -> PyResult<()> {
        self.binary("min", &dst, a, b, |k, d, a, b| k.min(d, a, b))
    }

    /// `exp(dst, src)`: the Rust builder's op.
    fn exp(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>) -> PyResult<()> {
        self.unary("exp", &dst, &src, |k, d, s| k.exp(d, s))
    }

    /// `neg(dst, src)`: the Rust builder's op.
    fn neg(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>) -> PyResult<()> {
        self.unary("neg", &dst, &src, |k, d, s| k.neg(d, s))
    }

    /// `sigmoid(dst, src)`: the Rust builder's op.
    fn sigmoid(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>) -> PyResult<()> {
        self.unary("sigmoid", &dst, &src, |k, d, s| k.sigmoid(d, s))
    }

    /// `silu(dst, src)`: the Rust builder's op (`v · sigmoid(v)`).
    fn silu(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>) -> PyResult<()> {
        self.unary("silu", &dst, &src, |k, d, s| k.silu(d, s))
    }

    /// `exp2(dst, src)`: the Rust builder's op.
    fn exp2(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>) -> PyResult<()> {
        self.unary("exp2", &dst, &src, |k, d, s| k.exp2(d, s))
    }

    /// `log(dst, src)`: the Rust builder's op.
    fn log(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>) -> PyResult<()> {
        self.unary("log", &dst, &src, |k, d, s| k.log(d, s))
    }

    /// `copy(dst, src)`: the Rust builder's op.
    fn copy(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>) -> PyResult<()> {
        self.unary("copy", &dst, &src, |k, d, s| k.copy(d, s))
    }

    /// `row_sum(dst, src)`: the Rust builder's op.
    fn row_sum(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>) -> PyResult<()> {
        self.unary("row_sum", &dst, &src, |k, d, s| k.row_sum(d, s))
    }

    /// `row_max(dst, src)`: the Rust builder's op.
    fn row_max(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>) -> PyResult<()> {
        self.unary("row_max", &dst, &src, |k, d, s| k.row_max(d, s))
    }

    /// `col_sum(dst, src)`: the Rust builder's op.
    fn col_sum(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>) -> PyResult<()> {
        self.unary("col_sum", &dst, &src, |k, d, s| k.col_sum(d, s))
    }

    /// `col_max(dst, src)`: the Rust builder's op.
    fn col_max(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>) -> PyResult<()> {
        self.unary("col_max", &dst, &src, |k, d, s| k.col_max(d, s))
    }

    /// `row_sum_acc(dst, src, acc)`: `dst[i] = acc[i] + Σ_j src[i,j]` (a running sum across a loop).
    fn row_sum_acc(
        &mut self,
        dst: PyRef<Tile>,
        src: PyRef<Tile>,
        acc: PyRef<Tile>,
    ) -> PyResult<()> {
        self.with_vec("row_sum_acc", &dst, &src, &acc, KernelBuilder::row_sum_acc)
    }

    /// `row_max_acc(dst, src, acc)`: `dst[i] = max(acc[i], max_j src[i,j])`.
    fn row_max_acc(
        &mut self,
        dst: PyRef<Tile>,
        src: PyRef<Tile>,
        acc: PyRef<Tile>,
    ) -> PyResult<()> {
        self.with_vec("row_max_acc", &dst, &src, &acc, KernelBuilder::row_max_acc)
    }

    /// `col_sum_acc(dst, src, acc)`: `dst[j] = acc[j] + Σ_i src[i,j]`.
    fn col_sum_acc(
        &mut self,
        dst: PyRef<Tile>,
        src: PyRef<Tile>,
        acc: PyRef<Tile>,
    ) -> PyResult<()> {
        self.with_vec("col_sum_acc", &dst, &src, &acc, KernelBuilder::col_sum_acc)
    }

    /// `col_max_acc(dst, src, acc)`: `dst[j] = max(acc[j], max_i src[i,j])`.
    fn col_max_acc(
        &mut self,
        dst: PyRef<Tile>,
        src: PyRef<Tile>,
        acc: PyRef<Tile>,
    ) -> PyResult<()> {
        self.with_vec("col_max_acc", &dst, &src, &acc, KernelBuilder::col_max_acc)
    }

    /// `broadcast_row(dst, src)`: the Rust builder's op.
    fn broadcast_row(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>) -> PyResult<()> {
        self.unary("broadcast_row", &dst, &src, |k, d, s| k.broadcast_row(d, s))
    }

    /// `broadcast_col(dst, src)`: the Rust builder's op.
    fn broadcast_col(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>) -> PyResult<()> {
        self.unary("broadcast_col", &dst, &src, |k, d, s| k.broadcast_col(d, s))
    }

    /// `transpose(dst, src)`: the Rust builder's op.
    fn transpose(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>) -> PyResult<()> {
        self.unary("transpose", &dst, &src, |k, d, s| k.transpose(d, s))
    }

    /// `sub_row(dst, src, v)`: `src` with vector `v` applied along its rows or columns.
    fn sub_row(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>, v: PyRef<Tile>) -> PyResult<()> {
        self.with_vec("sub_row", &dst, &src, &v, |k, d, s, v| k.sub_row(d, s, v))
    }

    /// `mul_row(dst, src, v)`: `src` with vector `v` applied along its rows or columns.
    fn mul_row(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>, v: PyRef<Tile>) -> PyResult<()> {
        self.with_vec("mul_row", &dst, &src, &v, |k, d, s, v| k.mul_row(d, s, v))
    }

    /// `div_row(dst, src, v)`: `src` with vector `v` applied along its rows or columns.
    fn div_row(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>, v: PyRef<Tile>) -> PyResult<()> {
        self.with_vec("div_row", &dst, &src, &v, |k, d, s, v| k.div_row(d, s, v))
    }

    /// `sub_col(dst, src, v)`: `src` with vector `v` applied along its rows or columns.
    fn sub_col(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>, v: PyRef<Tile>) -> PyResult<()> {
        self.with_vec("sub_col", &dst, &src, &v, |k, d, s, v| k.sub_col(d, s, v))
    }

    /// `add_col(dst, src, v)`: `src` with vector `v` applied along its rows or columns.
    fn add_col(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>, v: PyRef<Tile>) -> PyResult<()> {
        self.with_vec("add_col", &dst, &src, &v, |k, d, s, v| k.add_col(d, s, v))
    }

    /// `mul_col(dst, src, v)`: `src` with vector `v` applied along its rows or columns.
    fn mul_col(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>, v: PyRef<Tile>) -> PyResult<()> {
        self.with_vec("mul_col", &dst, &src, &v, |k, d, s, v| k.mul_col(d, s, v))
    }

    /// `div_col(dst, src, v)`: `src` with vector `v` applied along its rows or columns.
    fn div_col(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>, v: PyRef<Tile>) -> PyResult<()> {
        self.with_vec("div_col", &dst, &src, &v, |k, d, s, v| k.div_col(d, s, v))
    }

    /// `mma_ab(d, a, b, c)`: the matrix multiply-accumulate `d = a·b + c` in this orientation.
    fn mma_ab(
        &mut self,
        d: PyRef<Tile>,
        a: PyRef<Tile>,
        b: PyRef<Tile>,
        c: PyRef<Tile>,
    ) -> PyResult<()> {
        self.mma("mma_ab", [&d, &a, &b, &c], KernelBuilder::mma_ab)
    }

    /// `mma_abt(d, a, b, c)`: the matrix multiply-accumulate `d = a·b + c` in this orientation.
    fn mma_abt(
        &mut self,
        d: PyRef<Tile>,
        a: PyRef<Tile>,
        b: PyRef<Tile>,
        c: PyRef<Tile>,
    ) -> PyResult<()> {
        self.mma("mma_abt", [&d, &a, &b, &c], KernelBuilder::mma_abt)
    }

    /// `mma_atb(d, a, b, c)`: the matrix multiply-accumulate `d = a·b + c` in this orientation.
    fn mma_atb(
        &mut self,
        d: PyRef<Tile>,
        a: PyRef<Tile>,
        b: PyRef<Tile>,
        c: PyRef<Tile>,
    ) -> PyResult<()> {
        self.mma("mma_atb", [&d, &a, &b, &c], KernelBuilder::mma_atb)
    }

    /// `mma_atbt(d, a, b, c)`: the matrix multiply-accumulate `d = a·b + c` in this orientation.
    fn mma_atbt(
        &mut self,
        d: PyRef<Tile>,
        a: PyRef<Tile>,
        b: PyRef<Tile>,
        c: PyRef<Tile>,
    ) -> PyResult<()> {
        self.mma("mma_atbt", [&d, &a, &b, &c], KernelBuilder::mma_atbt)
    }

    /// `mask(dst, rule, row0, col0, value, offset=0, limit=None)`: elements of `dst` (at tile
    /// coordinates `row0 + i`, `col0 + j`) outside the rule's region set to `value`. Rules: "causal"
    /// (keep `col <= row + offset`), "causal_t", "window_start" (keep `col >= row + offset`),
    /// "window_start_t", "cols_below" (keep `col < limit`), "rows_below" (keep `row < limit`).
    #[pyo3(signature = (dst, rule, row0, col0, value, offset = None, limit = None))]
    #[allow(clippy::too_many_arguments)]
    fn mask(
        &mut self,
        dst: PyRef<Tile>,
        rule: &str,
        row0: ExprIn,
        col0: ExprIn,
        value: f32,
        offset: Option<ExprIn>,
        limit: Option<ExprIn>,
    ) -> PyResult<()> {
        use kittens_ir::MaskRule as M;
        let d = self.reg("mask", &dst)?;
        let needs = |what: &str, v: Option<ExprIn>| {
            v.map(ExprIn::expr).ok_or_else(|| {
                PyValueError::new_err(format!("mask `{}`: rule {rule:?} needs `{what}`", dst.name))
            })
        };
        let off = offset.map_or(Expr::c(0), ExprIn::expr);
        let rule = match rule {
            "causal" => M::Causal { offset: off },
            "causal_t" => M::CausalT { offset: off },
            "window_start" => M::WindowStart { offset: off },
            "window_start_t" => M::WindowStartT { offset: off },
            "cols_below" => M::ColsBelow(needs("limit", limit)?),
            "rows_below" => M::RowsBelow(needs("limit", limit)?),
            other => {
                return Err(PyValueError::new_err(format!(
                    "mask `{}`: rule {other:?} is not one of [\"causal\", \"causal_t\", \"window_start\", \"window_start_t\", \"cols_below\", \"rows_below\"]",
                    dst.name
                )))
            }
        };
        self.b()?.mask(d, rule, row0.expr(), col0.expr(), value);
        Ok(())
    }

    /// `convert(dst, src, rounding="rtne")`: `src` copied into `dst`'s dtype, rounded as named
    /// ("rtne", "rtna", "rtz").
    #[pyo3(signature = (dst, src, rounding = "rtne"))]
    fn convert(&mut self, dst: PyRef<Tile>, src: PyRef<Tile>, rounding: &str) -> PyResult<()> {
        use kittens_ir::Rounding as R;
        let r = parse(
            &format!("convert `{}`: rounding", dst.name),
            rounding,
            &[("rtne", R::Rtne), ("rtna", R::Rtna), ("rtz", R::Rtz)],
        )?;
        let (d, s) = (self.reg("convert", &dst)?, self.reg("convert", &src)?);
        self.b()?.convert(d, s, r);
        Ok(())
    }

    /// `random(dst, seed, offset, index0, row_stride)`: uniforms in [0, 1) from the Philox stream keyed
    /// by `seed` and `offset` (each `(low, high)` 32-bit words), element `(i, j)` drawing stream index
    /// `index0 + i·row_stride + j` (the dropout mask's generator).
    fn random(
        &mut self,
        dst: PyRef<Tile>,
        seed: (ExprIn, ExprIn),
        offset: (ExprIn, ExprIn),
        index0: ExprIn,
        row_stride: ExprIn,
    ) -> PyResult<()> {
        let d = self.reg("random", &dst)?;
        self.b()?.random(
            d,
            [seed.0.expr(), seed.1.expr()],
            [offset.0.expr(), offset.1.expr()],
            index0.expr(),
            row_stride.expr(),
        );
        Ok(())
    }

    /// `atomic_add(dst, src)`: `dst += src` element by element into a writable f32 tensor, atomic
    /// per element (several blocks may add into one tensor).
    fn atomic_add(&mut self, dst: PyRef<GView>, src: PyRef<Tile>) -> PyResult<()> {
        let (d, s) = (self.gv("atomic_add", &dst)?, self.reg("atomic_add", &src)?);
        self.b()?.atomic_add(d, s);
        Ok(())
    }

    /// `sched(kind, mma, other, groups)`: a compiler scheduling hint ("pairs": `mma` matrix ops then
    /// `other` other ops; "mma_reads": then shared reads; "mma_exp": then exponentials), `groups`
    /// times; no semantics.
    fn sched(&mut self, kind: &str, mma: u32, other: u32, groups: u32) -> PyResult<()> {
        let k = self.b()?;
        match kind {
            "pairs" => k.sched_pairs(mma, other, groups),
            "mma_reads" => k.sched_mma_reads(mma, other, groups),
            "mma_exp" => k.sched_mma_exp(mma, other, groups),
            other => {
                return Err(PyValueError::new_err(format!(
                    "sched: kind {other:?} is not one of [\"pairs\", \"mma_reads\", \"mma_exp\"]"
                )))
            }
        }
        Ok(())
    }

    /// `cluster_rows(n)`: run `n` (1, 2 or 4) consecutive row tiles as one thread-block cluster on
    /// Hopper (their shared loads multicast); no effect on values.
    fn cluster_rows(&mut self, n: u32) -> PyResult<()> {
        self.b()?.cluster_rows(n);
        Ok(())
    }

    /// Expands the schedule, validates every op (the Rust `KernelBuilder::finish`) and returns the
    /// [`Program`]; a build error is a ValueError with the Rust message.
    fn finish(&mut self) -> PyResult<Program> {
        self.b()?;
        if self.depth > 0 {
            return Err(PyValueError::new_err(
                "finish() inside the body of a for_range or if_: finish the Builder after its \
                 loops and conditionals",
            ));
        }
        let Some(k) = self.k.take() else {
            return Err(PyValueError::new_err("this Builder takes no more ops"));
        };
        self.spent = "it is finished (finish() was called already)".into();
        k.finish()
            .map(Program::new)
            .map_err(|e| PyValueError::new_err(format!("kittens.tile: {e}")))
    }

    fn __repr__(&self) -> String {
        match &self.k {
            Some(_) => "Builder(open)".into(),
            None => "Builder(finished)".into(),
        }
    }
}

/// Registers the tile language's classes in the extension module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(crate::tile_decl::row_split, m)?)?;
    m.add_class::<PyExpr>()?;
    m.add_class::<PyCond>()?;
    m.add_class::<Builder>()?;
    m.add_class::<Global>()?;
    m.add_class::<Tile>()?;
    m.add_class::<Shared>()?;
    m.add_class::<GView>()?;
    m.add_class::<SView>()?;
    m.add_class::<Program>()?;
    Ok(())
}
