//! `LoadAsync` and the waits on it in a strip (plain-schedule) program.
//!
//! The IR's contract (`kittens_ir::Op::LoadAsync`): the copy is split among the waves of its scope,
//! each wave a contiguous band of rows (as the interpreter splits it), and lands for the issuing wave
//! at its covering `Wait` on the async queue (`Outstanding(n)`: at most `n` of this wave's copies
//! still in flight), for the other waves after a barrier. The interpreter and the happens-before
//! analysis check programs against exactly that, so a lowering may land the data any time between
//! issue and the covering wait.
//!
//! sm_90a: each lane of the issuing wave takes 16-byte chunks of its band round robin (chunk `x` to
//! lane `x % 32`, the strip registers' own deal, so a strip that a wave reads back after its wait
//! finds most chunks in the lane that copied them) and copies each with `cp.async.cg.shared.global`
//! (PTX ISA §9.7.9.25.3), reading only the chunk's bytes inside the tensor and zero-filling the rest
//! (`src-size`): the ragged last chunk of a row and rows past the tensor's end cost no reads. A
//! chunk whose global or shared address is not 16-byte aligned (a view at an odd column, a tensor at
//! an odd offset) is copied element by element by its lane at issue. Each `LoadAsync` is one
//! `cp.async.commit_group` of every lane, so the IR's count of outstanding copies is the count of
//! outstanding groups: `Wait(Async, Outstanding(n))` is `cp.async.wait_group n` (`Auto`: 0), then
//! `__syncwarp()` so that a lane reads what another lane of its warp copied; other warps see it after
//! the block barrier the IR asks for (`bar.sync` orders the completed copies' writes as any other).
//! The copy needs the same dtype on both sides, a column stride of 1 and rows of whole chunks in
//! shared memory; otherwise, and on AMD (which keeps the synchronous form), the copy is done at issue
//! element by element (converted through f32 where the dtypes differ, RTNE as the interpreter rounds),
//! which the contract allows too.

use kittens_hw::Target;
use kittens_ir::{GlobalView, Rounding, Scope, SharedView, WaitCount, WaitQueue};

use super::memory::{from_f32, to_f32};
use super::{Emit, StripError};

/// Bytes of one `cp.async` chunk.
const CHUNK: u32 = 16;

impl Emit<'_> {
    /// Whether this `LoadAsync` goes through `cp.async` (module documentation).
    fn cp_async_ok(&self, dst: &SharedView, src: &GlobalView) -> Result<bool, StripError> {
        if self.d.target != Target::Sm90a {
            return Ok(false);
        }
        let vc = self.view(src)?;
        let tile = self.k.shared_decl(dst.buf).tile;
        let row_bytes = |cols: u32| cols * tile.dtype.bytes();
        Ok(tile.dtype == vc.dtype
            && vc.cstride_const == Some(1)
            && row_bytes(dst.cols).is_multiple_of(CHUNK)
            && row_bytes(tile.cols).is_multiple_of(CHUNK))
    }

    /// A `LoadAsync` (module documentation).
    pub(super) fn load_async(
        &mut self,
        dst: &SharedView,
        src: &GlobalView,
        scope: Scope,
    ) -> Result<(), StripError> {
        if self.cp_async_ok(dst, src)? {
            self.load_async_cp(dst, src, scope)
        } else {
            self.load_async_sync(dst, src, scope)
        }
    }

    /// `Wait` on a queue: the async queue drains `cp.async` groups on sm_90a; both order the wave's
    /// lanes' shared accesses.
    pub(super) fn wait(&mut self, queue: WaitQueue, count: WaitCount) {
        if queue == WaitQueue::Async && self.d.target == Target::Sm90a {
            let n = match count {
                WaitCount::Outstanding(n) => n,
                WaitCount::Auto => 0,
            };
            self.line(format!("ks::cp_async_wait<{n}>();"));
        }
        self.line(self.d.wave_sync);
    }

    /// The opening lines of a copy: the wave's band `kt_lo..kt_hi` of the view's rows and the view's
    /// fixed coordinates.
    fn open_band(&mut self, what: &str, dst: &SharedView, src: &GlobalView, scope: Scope) {
        let n = scope.waves(self.k.waves);
        let rows = dst.rows;
        let band = rows.div_ceil(n);
        let name = &self.k.shared_decl(dst.buf).name;
        self.line(format!(
            "{{ // load_async into `{name}`, this wave's band of rows, {what}"
        ));
        self.depth += 1;
        let vc = self.view(src).expect("checked by the caller");
        self.line(format!(
            "const int kt_rank = (int)(wave % {n});\n\
             const int kt_lo = min(kt_rank * {band}, {rows}), kt_hi = min((kt_rank + 1) * {band}, {rows});\n\
             const bool kt_in = {};\n\
             const kt_idx kt_base = {};",
            vc.fixed_in, vc.base
        ));
    }

    fn load_async_cp(
        &mut self,
        dst: &SharedView,
        src: &GlobalView,
        scope: Scope,
    ) -> Result<(), StripError> {
        let vc = self.view(src)?;
        let dt = vc.dtype;
        let e = CHUNK / dt.bytes();
        let per_row = dst.cols / e;
        let ty = self.storage(dt)?;
        let name = self.shared_name(dst);
        let at = self.shared_at(dst, "kt_r", "kt_c");
        self.open_band("16-byte cp.async", dst, src, scope);
        self.line(format!(
            "for (int kt_x = kt_lo * {per_row} + kt_lane; kt_x < kt_hi * {per_row}; kt_x += {lanes}) {{\n    \
             const int kt_r = kt_x / {per_row}, kt_c = (kt_x % {per_row}) * {e};\n    \
             const kt_idx kt_gr = {row0} + kt_r, kt_gc = {col0} + kt_c;\n    \
             const bool kt_row_in = kt_in && kt_gr >= 0 && kt_gr < {grows};\n    \
             const kt_idx kt_off = kt_base + kt_gr * {rstride} + kt_gc;\n    \
             // Elements of the chunk inside the tensor (a chunk is never split at its start: a\n    \
             // column before the tensor takes the element path).\n    \
             const int kt_n = (kt_row_in && kt_gc >= 0) ? (int)min(max({gcols} - kt_gc, (kt_idx)0), (kt_idx){e}) : 0;\n    \
             const {ty}* const kt_p = kt_n > 0 ? {ptr} + kt_off : {ptr};\n    \
             {ty}* const kt_d = &{name}[{at}];\n    \
             const u32 kt_sa = ks::smem_u32(kt_d);\n    \
             if (!(kt_row_in && kt_gc < 0) && (((unsigned long long)kt_p | kt_sa) & 15) == 0) {{\n        \
             ks::cp_async_16(kt_sa, kt_p, (u32)kt_n * {bytes});\n    \
             }} else {{\n\
             #pragma unroll\n        \
             for (int kt_e = 0; kt_e < {e}; ++kt_e) kt_d[kt_e] = (kt_row_in && kt_gc + kt_e >= 0 && kt_gc + kt_e < {gcols}) ? {ptr}[kt_off + kt_e] : ({ty})0;\n    \
             }}\n\
             }}\n\
             ks::cp_async_commit();",
            lanes = self.d.lanes,
            row0 = vc.row0,
            col0 = vc.col0,
            grows = vc.rows,
            gcols = vc.cols,
            rstride = vc.rstride,
            ptr = vc.ptr,
            bytes = dt.bytes(),
        ));
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// The copy done at issue by the wave's lanes over its band, element by element with zeros
    /// outside the tensor.
    fn load_async_sync(
        &mut self,
        dst: &SharedView,
        src: &GlobalView,
        scope: Scope,
    ) -> Result<(), StripError> {
        let cols = dst.cols;
        let vc = self.view(src)?;
        let sdt = self.k.shared_decl(dst.buf).tile.dtype;
        let raw = format!("{}[kt_off]", vc.ptr);
        // The same dtype moves as bits; another converts through f32 (RTNE, as the interpreter rounds).
        let (zero, val) = if sdt == vc.dtype {
            ("0".to_string(), raw)
        } else {
            (
                from_f32(sdt, "0.0f", Rounding::Rtne),
                from_f32(sdt, &to_f32(vc.dtype, &raw), Rounding::Rtne),
            )
        };
        let name = self.shared_name(dst);
        let at = self.shared_at(dst, "kt_r", "kt_c");
        self.open_band("element by element at issue", dst, src, scope);
        self.line(format!(
            "for (int kt_x = kt_lo * {cols} + kt_lane; kt_x < kt_hi * {cols}; kt_x += {}) {{\n    \
             const int kt_r = kt_x / {cols}, kt_c = kt_x % {cols};\n    \
             const kt_idx kt_gr = {} + kt_r, kt_gc = {} + kt_c;\n    \
             const kt_idx kt_off = kt_base + kt_gr * {} + kt_gc * {};\n    \
             {name}[{at}] = (kt_in && kt_gr >= 0 && kt_gr < {} && kt_gc >= 0 && kt_gc < {}) ? {val} : {zero};\n\
             }}",
            self.d.lanes,
            vc.row0,
            vc.col0,
            vc.rstride,
            vc.cstride,
            vc.rows,
            vc.cols,
        ));
        self.depth -= 1;
        self.line("}");
        Ok(())
    }
}
