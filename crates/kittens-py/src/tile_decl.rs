//! The handles `kittens.tile` hands out (tensors, tiles, shared rings, views: small objects tied to
//! the [`crate::tile_builder::Builder`] that made them) and the parsing of its string enums.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use kittens_hw::dtype::DType;
use kittens_ir::{Access, GlobalId, GlobalView, RegId, SharedId, SharedView};

use crate::tile_expr::ExprIn;

/// A global tensor declared by `Builder.global_`.
#[pyclass(frozen, module = "kittens._kittens")]
pub struct Global {
    pub(crate) id: GlobalId,
    pub(crate) owner: u64,
    #[pyo3(get)]
    pub(crate) name: String,
}

/// A register tile or vector declared by `Builder.tile`, `row_vec` or `col_vec`.
#[pyclass(frozen, module = "kittens._kittens")]
pub struct Tile {
    pub(crate) id: RegId,
    pub(crate) owner: u64,
    #[pyo3(get)]
    pub(crate) name: String,
}

/// A shared-memory ring declared by `Builder.shared`.
#[pyclass(frozen, module = "kittens._kittens")]
pub struct Shared {
    pub(crate) id: SharedId,
    pub(crate) owner: u64,
    #[pyo3(get)]
    pub(crate) name: String,
}

/// A window of a global tensor (`Builder.gview`).
#[pyclass(frozen, module = "kittens._kittens")]
pub struct GView {
    pub(crate) v: GlobalView,
    pub(crate) owner: u64,
}

/// A window of one slot of a shared ring (`Builder.smem`, then `.sub`).
#[pyclass(frozen, module = "kittens._kittens")]
pub struct SView {
    pub(crate) v: SharedView,
    pub(crate) owner: u64,
}

#[pymethods]
impl SView {
    /// The `(ti, tj)`-th `rows × cols` sub-tile of this view (`SharedView::sub`).
    fn sub(&self, rows: u32, cols: u32, ti: ExprIn, tj: ExprIn) -> SView {
        SView {
            v: self.v.sub(rows, cols, ti.expr(), tj.expr()),
            owner: self.owner,
        }
    }
}

/// A tile or a scalar operand of an elementwise op.
#[derive(FromPyObject)]
pub enum ArgIn<'py> {
    T(PyRef<'py, Tile>),
    S(f32),
}

pub(crate) fn parse<T>(what: &str, s: &str, table: &[(&str, T)]) -> PyResult<T>
where
    T: Copy,
{
    table
        .iter()
        .find(|(n, _)| *n == s)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            let names: Vec<&str> = table.iter().map(|(n, _)| *n).collect();
            PyValueError::new_err(format!("{what}: {s:?} is not one of {names:?}"))
        })
}

pub(crate) fn dtype(what: &str, s: &str) -> PyResult<DType> {
    s.parse::<DType>()
        .map_err(|e| PyValueError::new_err(format!("{what}: {e}")))
}

pub(crate) fn access(what: &str, s: &str) -> PyResult<Access> {
    use Access::*;
    parse(
        what,
        s,
        &[("read", Read), ("write", Write), ("read_write", ReadWrite)],
    )
}

/// `row_split(dim, per_lane=8, max_waves=16)`: `(waves_per_row, cols)`, a row of `dim` split over
/// waves as strips for every target's wave width at once (`kittens_ir::strips::RowSplit::any_width`),
/// so that a program configured by its row length alone lowers for NVIDIA and AMD.
#[pyfunction]
#[pyo3(signature = (dim, per_lane = 8, max_waves = 16))]
pub(crate) fn row_split(dim: u32, per_lane: u32, max_waves: u32) -> PyResult<(u32, u32)> {
    if dim == 0 || per_lane == 0 || max_waves == 0 {
        return Err(PyValueError::new_err(format!(
            "row_split: dim = {dim}, per_lane = {per_lane}, max_waves = {max_waves}: each must be at least 1"
        )));
    }
    let s = kittens_ir::strips::RowSplit::any_width(dim, per_lane, max_waves);
    Ok((s.waves_per_row, s.cols))
}
