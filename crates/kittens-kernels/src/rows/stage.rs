//! The next rows' inputs of a backward's row loop staged in shared memory ([`super::RowLoop::stage`]).
//!
//! Each wave copies its strips of the inputs of the rows `depth` steps ahead into its own ring slots
//! with `LoadAsync` (scope: the wave; `cp.async` on sm_90a, `crates/kittens-codegen/src/strip/copy.rs`),
//! so that bytes are in flight without holding registers: the register-held prefetch
//! (`RowLoop::prefetch`) keeps one row ahead and costs a raw word per element, which at D ≥ 4096
//! leaves one 512-thread block per SM with at most two rows in flight (docs/performance.md, "rmsnorm
//! and swiglu"). Step `s` waits for its own copies (the `depth - 1` later steps' copies may stay in
//! flight), reads its strips into registers (raw bf16, converted where used), and reuses the slots for step `s + depth`. Rows past
//! the tensor's end read zero, as the loop's own rows do. No barrier: a wave reads only what it
//! copied.

use kittens_hw::dtype::DType::Bf16;
use kittens_ir::{Expr, GlobalId, KernelBuilder, RegId, Scope, SharedId, SharedView};
use kittens_tile::{BaseShape, Layout, Swizzle};

use super::{Frame, RowLoop};

/// A wave's ring of `depth` slots per staged input.
pub(crate) struct Staged {
    /// (ring buffer, source tensor, raw bf16 strip it is read into) of each staged input.
    bufs: Vec<(SharedId, GlobalId, RegId)>,
    depth: u32,
    /// Columns of one read (a wave's whole strip, or one chunk of it).
    read_cols: u32,
}

impl Staged {
    /// Rings for the tensors `srcs` (bf16 `[rows, D]`), each slot a wave's strip of `cols` columns,
    /// `depth` slots per wave of a block of `waves` waves, read `read_cols` columns at a time.
    pub(crate) fn new(
        k: &mut KernelBuilder,
        srcs: &[(&str, GlobalId)],
        (cols, waves, read_cols): (u32, u32, u32),
        depth: u32,
    ) -> Self {
        let bufs = srcs
            .iter()
            .map(|&(n, g)| {
                let b = k.shared(
                    &format!("stage_{n}"),
                    Bf16,
                    1,
                    cols,
                    Swizzle::None,
                    waves * depth,
                );
                let raw = k.tile(
                    &format!("staged_{n}"),
                    Bf16,
                    1,
                    read_cols,
                    Layout::Row,
                    BaseShape::STRIP,
                );
                (b, g, raw)
            })
            .collect();
        Staged {
            bufs,
            depth,
            read_cols,
        }
    }

    /// Bytes of shared memory the rings of `inputs` inputs take for blocks of `waves` waves, strips of
    /// `cols` bf16 columns, `depth` slots.
    pub(crate) fn bytes(inputs: u32, (cols, waves): (u32, u32), depth: u32) -> u32 {
        inputs * cols * 2 * waves * depth
    }

    fn slot(&self, k: &KernelBuilder, buf: SharedId, s: &Expr) -> SharedView {
        k.smem(
            buf,
            k.wave() * i64::from(self.depth) + s.clone() % i64::from(self.depth),
        )
    }

    /// Copies of step `s`'s rows (this wave's `row`) into their slots, one `LoadAsync` per input.
    fn issue(&self, k: &mut KernelBuilder, f: &Frame, row: &Expr, s: &Expr) {
        for &(buf, g, _) in &self.bufs {
            let dst = self.slot(k, buf, s);
            let src = f.view(k, g, row);
            k.load_async_by(Scope::Wave, dst, src);
        }
    }

    /// Before the loop: the copies of steps `0..depth`.
    pub(crate) fn prologue(
        &self,
        k: &mut KernelBuilder,
        f: &Frame,
        lp: &RowLoop,
        (rows, rpb): (&Expr, u32),
    ) {
        for j in 0..self.depth {
            let s = Expr::c(i64::from(j));
            let row = lp.row(k, rows, rpb, &s, &f.local);
            self.issue(k, f, &row, &s);
        }
    }

    /// At the start of a step: its copies landed (the later steps' may stay in flight).
    pub(crate) fn wait(&self, k: &mut KernelBuilder) {
        k.wait_async((self.depth - 1) * self.bufs.len() as u32);
    }

    /// Input `i`'s read `c` (columns `c · read_cols …`) of step `s` into `dst` (bf16, `read_cols`
    /// columns; `None`: the input's own raw strip, returned). The caller waits on the shared queue
    /// before using it.
    pub(crate) fn read(
        &self,
        k: &mut KernelBuilder,
        (i, c): (usize, u32),
        s: &Expr,
        dst: Option<RegId>,
    ) -> RegId {
        let (buf, _, raw) = self.bufs[i];
        let mut v = self.slot(k, buf, s);
        v.col0 = Expr::c(i64::from(c * self.read_cols));
        v.cols = self.read_cols;
        let dst = dst.unwrap_or(raw);
        k.load(dst, v);
        dst
    }

    /// Once step `s` has read its slots: the copies of step `s + depth` into them.
    pub(crate) fn refill(
        &self,
        k: &mut KernelBuilder,
        f: &Frame,
        lp: &RowLoop,
        (rows, rpb): (&Expr, u32),
        s: &Expr,
    ) {
        let ahead = s.clone() + i64::from(self.depth);
        let row = lp.row(k, rows, rpb, &ahead, &f.local);
        self.issue(k, f, &row, &ahead);
    }

    /// At step `s`: waits for its copies, reads them into `dsts` (one register strip per staged
    /// input, in order, converted from the raw words), and issues step `s + depth`'s copies into the
    /// freed slots.
    pub(crate) fn take(
        &self,
        k: &mut KernelBuilder,
        f: &Frame,
        lp: &RowLoop,
        rows: (&Expr, u32),
        s: &Expr,
        dsts: &[RegId],
    ) {
        self.wait(k);
        let raws: Vec<RegId> = (0..self.bufs.len())
            .map(|i| self.read(k, (i, 0), s, None))
            .collect();
        k.wait_shared(0);
        for (&raw, &d) in raws.iter().zip(dsts) {
            k.copy(d, raw);
        }
        self.refill(k, f, lp, rows, s);
    }

    /// After the loop: no copy left in flight.
    pub(crate) fn drain(&self, k: &mut KernelBuilder) {
        k.wait_async(0);
    }
}
