//! The index expressions and conditions of `kittens.tile` ([`PyExpr`], [`PyCond`]): parameters, the
//! wave, warpgroup and block ids, loop variables, and the arithmetic and comparisons on them. A
//! comparison of expressions is a [`PyCond`] for `Builder.if_`, never a Python bool, so that
//! `if k < 3:` in a kernel body fails loudly instead of taking one branch at build time.

use pyo3::basic::CompareOp;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use kittens_ir::{Cond, Expr};

/// An integer index expression (`kittens_ir::Expr`): parameters, the wave and block ids, and the
/// arithmetic on them (`//` is the IR's floor division of non-negative values, `%` its remainder).
#[pyclass(name = "Expr", frozen, module = "kittens._kittens")]
#[derive(Clone)]
pub struct PyExpr {
    pub e: Expr,
}

/// An expression or a Python int, wherever the builder takes an index.
#[derive(FromPyObject)]
pub enum ExprIn<'py> {
    E(PyRef<'py, PyExpr>),
    I(i64),
}

impl ExprIn<'_> {
    pub fn expr(self) -> Expr {
        match self {
            ExprIn::E(e) => e.e.clone(),
            ExprIn::I(i) => Expr::c(i),
        }
    }
}

pub fn ex(e: Expr) -> PyExpr {
    PyExpr { e }
}

#[pymethods]
impl PyExpr {
    fn __add__(&self, o: ExprIn) -> PyExpr {
        ex(&self.e + o.expr())
    }
    fn __radd__(&self, o: ExprIn) -> PyExpr {
        ex(o.expr() + &self.e)
    }
    fn __sub__(&self, o: ExprIn) -> PyExpr {
        ex(&self.e - o.expr())
    }
    fn __rsub__(&self, o: ExprIn) -> PyExpr {
        ex(o.expr() - &self.e)
    }
    fn __mul__(&self, o: ExprIn) -> PyExpr {
        ex(&self.e * o.expr())
    }
    fn __rmul__(&self, o: ExprIn) -> PyExpr {
        ex(o.expr() * &self.e)
    }
    fn __floordiv__(&self, o: ExprIn) -> PyExpr {
        ex(&self.e / o.expr())
    }
    fn __rfloordiv__(&self, o: ExprIn) -> PyExpr {
        ex(o.expr() / &self.e)
    }
    fn __mod__(&self, o: ExprIn) -> PyExpr {
        ex(&self.e % o.expr())
    }
    fn __rmod__(&self, o: ExprIn) -> PyExpr {
        ex(o.expr() % &self.e)
    }
    fn ceil_div(&self, o: ExprIn) -> PyExpr {
        ex(self.e.ceil_div(o.expr()))
    }
    fn min(&self, o: ExprIn) -> PyExpr {
        ex(self.e.min(o.expr()))
    }
    fn max(&self, o: ExprIn) -> PyExpr {
        ex(self.e.max(o.expr()))
    }
    /// `a < b`, `a <= b`, `a == b`, `a != b`, `a > b`, `a >= b`: a [`PyCond`] (the IR's `Cond`).
    fn __richcmp__(&self, o: ExprIn, op: CompareOp) -> PyCond {
        let (a, b) = (&self.e, o.expr());
        let c = match op {
            CompareOp::Lt => a.lt(b),
            CompareOp::Le => a.le(b),
            CompareOp::Eq => a.eq(b),
            CompareOp::Ne => a.ne(b),
            CompareOp::Gt => b.lt(a.clone()),
            CompareOp::Ge => b.le(a.clone()),
        };
        PyCond { c }
    }
    fn __repr__(&self) -> String {
        format!("Expr({})", self.e)
    }
}

/// A condition over index expressions (`kittens_ir::Cond`), made by comparing [`PyExpr`]s and
/// combined with `&`, `|` and `~`; `Builder.if_` takes it.
#[pyclass(name = "Cond", frozen, module = "kittens._kittens")]
#[derive(Clone)]
pub struct PyCond {
    pub c: Cond,
}

#[pymethods]
impl PyCond {
    fn __and__(&self, o: PyRef<PyCond>) -> PyCond {
        PyCond {
            c: self.c.clone().and(o.c.clone()),
        }
    }
    fn __or__(&self, o: PyRef<PyCond>) -> PyCond {
        PyCond {
            c: self.c.clone().or(o.c.clone()),
        }
    }
    fn __invert__(&self) -> PyCond {
        PyCond {
            c: Cond::Not(Box::new(self.c.clone())),
        }
    }
    /// A condition is decided per wave when the kernel runs, not when Python builds it.
    fn __bool__(&self) -> PyResult<bool> {
        Err(PyTypeError::new_err(format!(
            "a kittens Cond ({:?}) has no Python truth value: it is decided when the kernel runs; \
             use Builder.if_(cond, then, else_) (and `&`, `|`, `~` instead of and/or/not)",
            self.c
        )))
    }
    fn __repr__(&self) -> String {
        format!("Cond({:?})", self.c)
    }
}
