//! Integer index expressions and conditions.
//!
//! Every coordinate, loop bound and buffer index in a kernel is an [`Expr`] over run-time parameters
//! (`M`, `N`, `K`, sequence lengths), loop variables, the block's grid coordinates (after the grid
//! remap) and the wave id. A lowering prints them as C++ integer expressions; the interpreter evaluates
//! them per wave. Division and remainder are floor operations on non-negative operands (all indices
//! are); `CeilDiv` is spelled out because tile counts need it everywhere.
//!
//! One expression reads memory: [`Expr::Elem`], an element of a declared `i32` global (a packed
//! batch's `cu_seqlens`, FlashAttention's varlen interface). The interpreter evaluates it from the
//! tensor ([`Expr::eval_in`]); host-side evaluators without the data ([`Expr::eval`]) see it as
//! unknown (`None`); the lowerings print it as a scalar load.

use serde::{Deserialize, Serialize};

/// A run-time integer parameter of the kernel (a problem size), by position in [`crate::Kernel::params`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ParamId(pub u32);

/// A loop variable, by position in [`crate::Kernel::vars`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct VarId(pub u32);

/// A global tensor, by position in [`crate::Kernel::globals`] (an [`Expr::Elem`] reads one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GlobalId(pub u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    /// Floor division (operands are non-negative indices).
    Div,
    Rem,
    CeilDiv,
    Min,
    Max,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expr {
    Const(i64),
    Param(ParamId),
    Var(VarId),
    /// Coordinate `i` of the logical tile this block computes, after the kernel's grid remap
    /// (for a GEMM `Block(0)` is the row tile, `Block(1)` the column tile).
    Block(u8),
    /// Wave (NVIDIA: warp) index inside the block, `0..waves`.
    Wave,
    /// How many tiles this block ran before the current one: a persistent grid's round (the Hopper
    /// lowering runs each block over tiles `blockIdx.x + r·gridDim.x`, `r = 0, 1, …`), 0 where every
    /// tile has a block of its own (the interpreter, the AMD lowerings, the analysis). It lets a ring
    /// filled once per tile alternate its slots from tile to tile, so that the next tile's fill
    /// overlaps this tile's work.
    Round,
    Bin(BinOp, Box<Expr>, Box<Expr>),
    /// Element `index` (along dimension 0) of the `i32` global tensor: a value the kernel reads
    /// from device memory (a sequence's start in a packed batch). Outside the tensor it reads 0, as
    /// every global read does. Data-dependent: host evaluation sees it as unknown; the schedule
    /// analysis reads element `i` as `i·E`, offsets of sequences of `E` rows, with `E` enumerated as
    /// a size (`crate::analysis`'s `elem_value`), so a loop bound or condition may read it (a
    /// packed sequence's key walk).
    Elem(GlobalId, Box<Expr>),
}

/// Reads element `i` of an `i32` global for [`Expr::Elem`]; `None` where the value is unknown.
pub type ReadElem<'a> = &'a dyn Fn(GlobalId, i64) -> Option<i64>;

/// The reader of evaluators that have no tensor data: every [`Expr::Elem`] is unknown.
pub fn no_memory(_: GlobalId, _: i64) -> Option<i64> {
    None
}

/// A boolean over expressions, for conditionals on the wave or warpgroup and on loop counters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cond {
    Eq(Expr, Expr),
    Ne(Expr, Expr),
    Lt(Expr, Expr),
    Le(Expr, Expr),
    And(Box<Cond>, Box<Cond>),
    Or(Box<Cond>, Box<Cond>),
    Not(Box<Cond>),
}

/// The values an expression may read; built by the interpreter (or any host-side evaluator).
pub struct Env<'a> {
    pub params: &'a [i64],
    pub vars: &'a [i64],
    pub block: &'a [i64],
    pub wave: i64,
}

impl Expr {
    pub fn c(v: i64) -> Expr {
        Expr::Const(v)
    }
    fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
        // Fold constants so printed index math stays readable.
        if let (Expr::Const(x), Expr::Const(y)) = (&a, &b) {
            if let Some(v) = eval_bin(op, *x, *y) {
                return Expr::Const(v);
            }
        }
        match (op, a.as_const(), b.as_const()) {
            (BinOp::Add, _, Some(0)) | (BinOp::Sub, _, Some(0)) => return a,
            (BinOp::Add, Some(0), _) => return b,
            (BinOp::Mul, _, Some(1)) | (BinOp::Div, _, Some(1)) => return a,
            (BinOp::Mul, Some(1), _) => return b,
            (BinOp::Mul, Some(0), _) | (BinOp::Mul, _, Some(0)) => return Expr::Const(0),
            _ => {}
        }
        Expr::Bin(op, Box::new(a), Box::new(b))
    }
    pub fn ceil_div(&self, b: impl Into<Expr>) -> Expr {
        Expr::bin(BinOp::CeilDiv, self.clone(), b.into())
    }
    pub fn min(&self, b: impl Into<Expr>) -> Expr {
        Expr::bin(BinOp::Min, self.clone(), b.into())
    }
    pub fn max(&self, b: impl Into<Expr>) -> Expr {
        Expr::bin(BinOp::Max, self.clone(), b.into())
    }
    pub fn eq(&self, b: impl Into<Expr>) -> Cond {
        Cond::Eq(self.clone(), b.into())
    }
    pub fn ne(&self, b: impl Into<Expr>) -> Cond {
        Cond::Ne(self.clone(), b.into())
    }
    pub fn lt(&self, b: impl Into<Expr>) -> Cond {
        Cond::Lt(self.clone(), b.into())
    }
    pub fn le(&self, b: impl Into<Expr>) -> Cond {
        Cond::Le(self.clone(), b.into())
    }

    /// The value under `env`; `None` on division by zero, an out-of-range id or a read of memory
    /// ([`Expr::Elem`], unknown here: see [`Expr::eval_in`]).
    pub fn eval(&self, env: &Env) -> Option<i64> {
        self.eval_in(env, &no_memory)
    }

    /// The value under `env`, reading [`Expr::Elem`]'s elements with `read`.
    pub fn eval_in(&self, env: &Env, read: ReadElem) -> Option<i64> {
        match self {
            Expr::Const(v) => Some(*v),
            Expr::Param(p) => env.params.get(p.0 as usize).copied(),
            Expr::Var(v) => env.vars.get(v.0 as usize).copied(),
            Expr::Block(i) => env.block.get(*i as usize).copied(),
            Expr::Wave => Some(env.wave),
            // Host-side evaluation runs one tile per block.
            Expr::Round => Some(0),
            Expr::Bin(op, a, b) => eval_bin(*op, a.eval_in(env, read)?, b.eval_in(env, read)?),
            Expr::Elem(g, i) => read(*g, i.eval_in(env, read)?),
        }
    }

    /// Whether the expression reads memory (contains an [`Expr::Elem`]).
    pub fn reads_memory(&self) -> bool {
        match self {
            Expr::Elem(..) => true,
            Expr::Bin(_, a, b) => a.reads_memory() || b.reads_memory(),
            _ => false,
        }
    }

    /// An element of the `i32` global `g` ([`Expr::Elem`]).
    pub fn elem(g: GlobalId, index: impl Into<Expr>) -> Expr {
        Expr::Elem(g, Box::new(index.into()))
    }

    /// Whether the expression reads grid coordinate `i` (`Expr::Block(i)`).
    pub fn reads_block(&self, i: u8) -> bool {
        match self {
            Expr::Block(j) => *j == i,
            Expr::Bin(_, a, b) => a.reads_block(i) || b.reads_block(i),
            Expr::Elem(_, x) => x.reads_block(i),
            _ => false,
        }
    }

    /// Whether the expression reads parameter `i` (`Expr::Param`).
    pub fn reads_param(&self, i: ParamId) -> bool {
        match self {
            Expr::Param(j) => *j == i,
            Expr::Bin(_, a, b) => a.reads_param(i) || b.reads_param(i),
            Expr::Elem(_, x) => x.reads_param(i),
            _ => false,
        }
    }

    /// The constant value, if the expression has no free variables.
    pub fn as_const(&self) -> Option<i64> {
        match self {
            Expr::Const(v) => Some(*v),
            _ => None,
        }
    }
}

fn eval_bin(op: BinOp, a: i64, b: i64) -> Option<i64> {
    Some(match op {
        BinOp::Add => a.checked_add(b)?,
        BinOp::Sub => a.checked_sub(b)?,
        BinOp::Mul => a.checked_mul(b)?,
        BinOp::Div => a.checked_div_euclid(b)?,
        BinOp::Rem => a.checked_rem_euclid(b)?,
        BinOp::CeilDiv => {
            if b == 0 {
                return None;
            }
            // Checked: `m = i64::MAX` or a kernel file's constants must not wrap.
            a.checked_add(b.checked_sub(1)?)?.checked_div_euclid(b)?
        }
        BinOp::Min => a.min(b),
        BinOp::Max => a.max(b),
    })
}

impl Cond {
    pub fn eval(&self, env: &Env) -> Option<bool> {
        self.eval_in(env, &no_memory)
    }
    /// The value under `env`, reading [`Expr::Elem`]'s elements with `read`.
    pub fn eval_in(&self, env: &Env, read: ReadElem) -> Option<bool> {
        let e = |x: &Expr| x.eval_in(env, read);
        Some(match self {
            Cond::Eq(a, b) => e(a)? == e(b)?,
            Cond::Ne(a, b) => e(a)? != e(b)?,
            Cond::Lt(a, b) => e(a)? < e(b)?,
            Cond::Le(a, b) => e(a)? <= e(b)?,
            Cond::And(a, b) => a.eval_in(env, read)? && b.eval_in(env, read)?,
            Cond::Or(a, b) => a.eval_in(env, read)? || b.eval_in(env, read)?,
            Cond::Not(a) => !a.eval_in(env, read)?,
        })
    }
    /// Whether the condition reads memory ([`Expr::Elem`]).
    pub fn reads_memory(&self) -> bool {
        match self {
            Cond::Eq(a, b) | Cond::Ne(a, b) | Cond::Lt(a, b) | Cond::Le(a, b) => {
                a.reads_memory() || b.reads_memory()
            }
            Cond::And(a, b) | Cond::Or(a, b) => a.reads_memory() || b.reads_memory(),
            Cond::Not(a) => a.reads_memory(),
        }
    }
    pub fn and(self, b: Cond) -> Cond {
        Cond::And(Box::new(self), Box::new(b))
    }
    pub fn or(self, b: Cond) -> Cond {
        Cond::Or(Box::new(self), Box::new(b))
    }
    /// True when the condition reads only the wave id and constants — a wave/warpgroup conditional,
    /// which a lowering may turn into a uniform branch on the wave index.
    pub fn is_wave_uniform(&self) -> bool {
        fn e(x: &Expr) -> bool {
            match x {
                Expr::Const(_) | Expr::Wave => true,
                Expr::Bin(_, a, b) => e(a) && e(b),
                _ => false,
            }
        }
        match self {
            Cond::Eq(a, b) | Cond::Ne(a, b) | Cond::Lt(a, b) | Cond::Le(a, b) => e(a) && e(b),
            Cond::And(a, b) | Cond::Or(a, b) => a.is_wave_uniform() && b.is_wave_uniform(),
            Cond::Not(a) => a.is_wave_uniform(),
        }
    }
}

impl std::ops::Not for Cond {
    type Output = Cond;
    fn not(self) -> Cond {
        Cond::Not(Box::new(self))
    }
}

impl From<i64> for Expr {
    fn from(v: i64) -> Expr {
        Expr::Const(v)
    }
}
impl From<u32> for Expr {
    fn from(v: u32) -> Expr {
        Expr::Const(v as i64)
    }
}
impl From<i32> for Expr {
    fn from(v: i32) -> Expr {
        Expr::Const(v as i64)
    }
}
impl From<&Expr> for Expr {
    fn from(v: &Expr) -> Expr {
        v.clone()
    }
}

macro_rules! arith {
    ($tr:ident, $f:ident, $op:expr) => {
        impl<T: Into<Expr>> std::ops::$tr<T> for Expr {
            type Output = Expr;
            fn $f(self, b: T) -> Expr {
                Expr::bin($op, self, b.into())
            }
        }
        impl<T: Into<Expr>> std::ops::$tr<T> for &Expr {
            type Output = Expr;
            fn $f(self, b: T) -> Expr {
                Expr::bin($op, self.clone(), b.into())
            }
        }
    };
}
arith!(Add, add, BinOp::Add);
arith!(Sub, sub, BinOp::Sub);
arith!(Mul, mul, BinOp::Mul);
arith!(Div, div, BinOp::Div);
arith!(Rem, rem, BinOp::Rem);

impl Expr {
    /// C-like text with parameter and loop-variable names (ids out of range print as `p{i}` / `v{i}`).
    pub fn show(&self, params: &[&str], vars: &[&str]) -> String {
        struct Named<'a>(&'a Expr, &'a [&'a str], &'a [&'a str]);
        impl std::fmt::Display for Named<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.write(f, self.1, self.2)
            }
        }
        Named(self, params, vars).to_string()
    }

    fn write(
        &self,
        f: &mut std::fmt::Formatter<'_>,
        params: &[&str],
        vars: &[&str],
    ) -> std::fmt::Result {
        let sub = |e: &Expr| e.show(params, vars);
        match self {
            Expr::Const(v) => write!(f, "{v}"),
            Expr::Param(p) => match params.get(p.0 as usize) {
                Some(n) => f.write_str(n),
                None => write!(f, "p{}", p.0),
            },
            Expr::Var(v) => match vars.get(v.0 as usize) {
                Some(n) => f.write_str(n),
                None => write!(f, "v{}", v.0),
            },
            Expr::Block(i) => write!(f, "block[{i}]"),
            Expr::Wave => write!(f, "wave"),
            Expr::Round => write!(f, "round"),
            Expr::Elem(g, i) => write!(f, "g{}[{}]", g.0, sub(i)),
            Expr::Bin(op, a, b) => {
                let (a, b) = (sub(a), sub(b));
                let s = match op {
                    BinOp::Add => "+",
                    BinOp::Sub => "-",
                    BinOp::Mul => "*",
                    BinOp::Div => "/",
                    BinOp::Rem => "%",
                    BinOp::CeilDiv => return write!(f, "ceil_div({a}, {b})"),
                    BinOp::Min => return write!(f, "min({a}, {b})"),
                    BinOp::Max => return write!(f, "max({a}, {b})"),
                };
                write!(f, "({a} {s} {b})")
            }
        }
    }
}

impl std::fmt::Display for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.write(f, &[], &[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evaluates_index_math() {
        let m = Expr::Param(ParamId(0));
        let tiles = m.clone().ceil_div(64) - 2;
        let env = Env {
            params: &[200],
            vars: &[],
            block: &[],
            wave: 5,
        };
        assert_eq!(tiles.eval(&env), Some(2));
        let grp = Expr::Wave / 4;
        assert_eq!(grp.eval(&env), Some(1));
        assert!(grp.eq(1).is_wave_uniform());
        assert!(!m.lt(3).is_wave_uniform());
        assert_eq!((Expr::c(3) * 4 + 1).as_const(), Some(13));
    }
}
