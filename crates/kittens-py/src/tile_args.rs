//! How [`Builder`]'s methods read their Python arguments: ids checked against the builder that
//! made them (an id of another builder would name another tile there, or none), and the shapes of op
//! every wrapper shares (binary, unary, with a vector, a matrix multiply-accumulate).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use kittens_ir::{GlobalView, KernelBuilder, RegId, SharedView};

use crate::tile_builder::Builder;
use crate::tile_decl::{ArgIn, GView, SView, Tile};

impl Builder {
    pub(crate) fn b(&mut self) -> PyResult<&mut KernelBuilder> {
        if !self.spent.is_empty() {
            return Err(PyValueError::new_err(format!(
                "this Builder takes no more ops: {}",
                self.spent
            )));
        }
        self.k
            .as_mut()
            .ok_or_else(|| PyValueError::new_err("this Builder takes no more ops"))
    }
    pub(crate) fn mine(&self, what: &str, name: &str, owner: u64) -> PyResult<()> {
        if owner == self.owner {
            Ok(())
        } else {
            Err(PyValueError::new_err(format!(
                "{what} `{name}` belongs to another Builder"
            )))
        }
    }
    pub(crate) fn reg(&self, op: &str, t: &Tile) -> PyResult<RegId> {
        self.mine(&format!("{op}: tile"), &t.name, t.owner)?;
        Ok(t.id)
    }
    pub(crate) fn arg(&self, op: &str, a: ArgIn) -> PyResult<kittens_ir::Arg> {
        Ok(match a {
            ArgIn::T(t) => self.reg(op, &t)?.into(),
            ArgIn::S(v) => v.into(),
        })
    }
    pub(crate) fn gv(&self, op: &str, v: &GView) -> PyResult<GlobalView> {
        self.mine(&format!("{op}: global view"), "", v.owner)?;
        Ok(v.v.clone())
    }
    pub(crate) fn sv(&self, op: &str, v: &SView) -> PyResult<SharedView> {
        self.mine(&format!("{op}: shared view"), "", v.owner)?;
        Ok(v.v.clone())
    }
    pub(crate) fn tile_of(&self, id: RegId, name: &str) -> Tile {
        Tile {
            id,
            owner: self.owner,
            name: name.into(),
        }
    }
    pub(crate) fn binary(
        &mut self,
        op: &str,
        dst: &Tile,
        a: ArgIn,
        b: ArgIn,
        f: fn(&mut KernelBuilder, RegId, kittens_ir::Arg, kittens_ir::Arg),
    ) -> PyResult<()> {
        let (d, a, b) = (self.reg(op, dst)?, self.arg(op, a)?, self.arg(op, b)?);
        f(self.b()?, d, a, b);
        Ok(())
    }
    pub(crate) fn unary(
        &mut self,
        op: &str,
        dst: &Tile,
        src: &Tile,
        f: fn(&mut KernelBuilder, RegId, RegId),
    ) -> PyResult<()> {
        let (d, s) = (self.reg(op, dst)?, self.reg(op, src)?);
        f(self.b()?, d, s);
        Ok(())
    }
    pub(crate) fn with_vec(
        &mut self,
        op: &str,
        dst: &Tile,
        src: &Tile,
        v: &Tile,
        f: fn(&mut KernelBuilder, RegId, RegId, RegId),
    ) -> PyResult<()> {
        let (d, s, v) = (self.reg(op, dst)?, self.reg(op, src)?, self.reg(op, v)?);
        f(self.b()?, d, s, v);
        Ok(())
    }
    /// A matrix multiply-accumulate `d = a·b + c` in one orientation (`f`, the Rust builder's op).
    pub(crate) fn mma(
        &mut self,
        op: &str,
        [d, a, b, c]: [&Tile; 4],
        f: fn(&mut KernelBuilder, RegId, RegId, RegId, RegId),
    ) -> PyResult<()> {
        let r = |t: &Tile| self.reg(op, t);
        let (d, a, b, c) = (r(d)?, r(a)?, r(b)?, r(c)?);
        f(self.b()?, d, a, b, c);
        Ok(())
    }
}
