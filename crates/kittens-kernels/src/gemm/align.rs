//! The padded copy of a GEMM operand as a strip program (`kittens_codegen::strip`): the `rows × cols`
//! bf16 matrix `src` (rows `src_pitch` elements apart) into `dst` (rows `dst_pitch` apart), so that
//! TMA can read it in place or from rows on 128-byte lines. Each wave copies `8 × lanes × VECTORS`
//! columns of one row in 16-byte vectors where both rows allow them. The driver's pitched copy
//! (`cuMemcpy2DAsync`) moved A and B of 3000³ in 51 µs on the H100 (about 1.4 TB/s of reads and
//! writes, docs/performance.md); a copy kernel streams at the DRAM's rate.

use crate::KernelError;
use kittens_hw::dtype::DType::Bf16;
use kittens_ir::{Access, Expr, GridOrder, Kernel, KernelBuilder, Schedule};
use kittens_tile::{BaseShape, Layout};

/// Rows per block (one per wave).
const WAVES: u32 = 4;
/// 16-byte vectors per lane: four loads in flight per thread, where one per thread left the copy of
/// 3000³'s B at 2.5 TB/s on the H200 (14.5 µs for 36 MB read and written, docs/performance.md) — short
/// blocks, 9000 of them, each thread one load.
const VECTORS: u32 = 4;

/// The copy on waves of `lanes` lanes: parameters `rows, cols, src_pitch, dst_pitch`; tensors `src`
/// (read) and `dst` (written), both `rows × cols` bf16 with those row pitches.
pub fn build_copy(lanes: u32) -> Result<Kernel, KernelError> {
    if !matches!(lanes, 32 | 64) {
        return Err(KernelError::Config(format!(
            "gemm operand copy: {lanes} lanes per wave (32 or 64)"
        )));
    }
    let cols_per = 8 * lanes * VECTORS;
    let mut k = KernelBuilder::new("gemm_operand_copy", Schedule::Plain { waves: WAVES });
    let (rows, cols) = (k.param("rows"), k.param("cols"));
    let (sp, dp) = (k.param("src_pitch"), k.param("dst_pitch"));
    let dims = [("r", rows.clone()), ("c", cols.clone())];
    let src = k.global_strided("src", Bf16, &dims, vec![sp, Expr::c(1)], Access::Read);
    let dst = k.global_strided("dst", Bf16, &dims, vec![dp, Expr::c(1)], Access::Write);
    k.grid(
        vec![
            rows.ceil_div(i64::from(WAVES)),
            cols.ceil_div(i64::from(cols_per)),
        ],
        GridOrder::RowMajor,
    );
    let row = k.block(0) * i64::from(WAVES) + k.wave();
    let col0 = k.block(1) * i64::from(cols_per);
    let t = k.tile("row", Bf16, 1, cols_per, Layout::Row, BaseShape::STRIP);
    k.load_global(
        t,
        k.gview(src, vec![row.clone(), col0.clone()], 0, 1, 1, cols_per),
    );
    k.store(k.gview(dst, vec![row, col0], 0, 1, 1, cols_per), t);
    Ok(k.finish()?)
}
