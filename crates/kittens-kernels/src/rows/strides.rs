//! Row strides of the row-wise kernels' `[rows, D]` tensors ([`RowStrides`]).

use crate::KernelError;
use kittens_hw::dtype::DType::Bf16;
use kittens_ir::{Access, Expr, GlobalId, KernelBuilder};

/// The most 2-D tensors of one row-wise kernel that take a row stride.
const MAX_STRIDED: usize = 4;

/// Row strides (elements between consecutive rows; the row itself contiguous) of a row-wise kernel's
/// `[rows, D]` tensors, by the name the kernel gives the tensor; a tensor not named is dense (stride
/// `D`). What a model hands over without a copy: `x[:, :768]` of a `(rows, 1024)` tensor has row
/// stride 1024. As the attention programs take per-tensor strides (`crate::attn::strides`) and GEMM
/// its leading dimensions, the kernel reads the rows in place; a stride is a multiple of 8 elements
/// (16 bytes of bf16, one vector load per lane).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct RowStrides([Option<(&'static str, u32)>; MAX_STRIDED]);

impl RowStrides {
    /// The strides `a` names: `{t}_row_stride` for each tensor `t` of `tensors` (at most 4).
    pub fn from_args(
        a: &crate::problem::NamedArgs,
        tensors: &[&'static str],
    ) -> Result<Self, KernelError> {
        let mut st = RowStrides::default();
        for &t in tensors.iter().take(MAX_STRIDED) {
            let n = format!("{t}_row_stride");
            if a.get(&n).is_some() {
                st = st.with(t, a.u32_or(&n, 0)?);
            }
        }
        Ok(st)
    }

    /// These strides with tensor `t`'s set to `stride`.
    pub fn with(mut self, t: &'static str, stride: u32) -> Self {
        let slot = self
            .0
            .iter()
            .position(|e| e.is_none_or(|(n, _)| n == t))
            .expect("at most 4 strided tensors");
        self.0[slot] = Some((t, stride));
        self
    }

    /// The widest row stride of these tensors for rows of `dim` (dense: `dim`).
    pub fn widest(&self, dim: usize) -> usize {
        self.0
            .iter()
            .flatten()
            .map(|&(_, s)| s as usize)
            .fold(dim, usize::max)
    }

    /// Tensor `t`'s row stride for rows of `dim` (dense: `dim`).
    pub fn of(&self, t: &str, dim: usize) -> usize {
        self.0
            .iter()
            .flatten()
            .find(|(n, _)| *n == t)
            .map_or(dim, |&(_, s)| s as usize)
    }

    /// Whether every tensor is dense at rows of `dim`.
    pub fn dense(&self, dim: usize) -> bool {
        self.0.iter().flatten().all(|&(_, s)| s as usize == dim)
    }

    /// Each stride at least the row (`dim`) and a multiple of 8 elements; the error names the kernel,
    /// the tensor, its stride and the rule.
    pub fn check(&self, kernel: &str, dim: u32) -> Result<(), KernelError> {
        self.check_rows_of(kernel, |_| dim)
    }

    /// [`Self::check`] with each tensor's own row length (`dim_of`: e.g. a packed `[rows, 2F]`).
    pub fn check_rows_of(
        &self,
        kernel: &str,
        dim_of: impl Fn(&str) -> u32,
    ) -> Result<(), KernelError> {
        for &(t, s) in self.0.iter().flatten() {
            let dim = dim_of(t);
            if s < dim || !s.is_multiple_of(8) {
                return Err(KernelError::Config(format!(
                    "{kernel}: {t}_row_stride = {s} must be a multiple of 8 elements and at least \
                     the row length D = {dim}"
                )));
            }
        }
        Ok(())
    }

    /// Declares the `[rows, dim]` bf16 tensor `t` in its row stride.
    pub(crate) fn global(
        &self,
        k: &mut KernelBuilder,
        t: &str,
        rows: &Expr,
        dim: u32,
        access: Access,
    ) -> GlobalId {
        let d = i64::from(dim);
        let s = self.of(t, dim as usize) as i64;
        k.global_strided(
            t,
            Bf16,
            &[("row", rows.clone()), ("col", Expr::c(d))],
            vec![Expr::c(s), Expr::c(1)],
            access,
        )
    }

    /// Elements of tensor `t`'s buffer at `rows` rows of `dim`: from its first element to its last.
    pub fn span(&self, t: &str, rows: usize, dim: usize) -> Result<usize, KernelError> {
        if rows == 0 {
            return Ok(0);
        }
        (rows - 1)
            .checked_mul(self.of(t, dim))
            .and_then(|n| n.checked_add(dim))
            .ok_or_else(|| KernelError::Problem(format!("{t}: {rows} rows overflow")))
    }

    /// Tensor `t` (`data`, in its row stride) gathered into dense `[rows, dim]`.
    pub fn gather(&self, t: &str, data: &[f32], rows: usize, dim: usize) -> Vec<f32> {
        let s = self.of(t, dim);
        (0..rows)
            .flat_map(|r| &data[r * s..r * s + dim])
            .copied()
            .collect()
    }
}
