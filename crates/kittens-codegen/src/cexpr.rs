//! Printing IR index expressions and conditions as C++ `int` expressions, for both lowerings.
//!
//! Names: parameters keep their IR names (sanitised), loop variables are `v<N>_<name>`, grid
//! coordinates `blk<N>`. What differs per target is in [`CNames`]: the name of the wave index (HIP makes
//! it wave-uniform with `readfirstlane`, so conditions on it become scalar branches, as the ping-pong's
//! stagger barrier needs; CUDA names the warp within the role) and the integer min/max functions.

use kittens_ir::{BinOp, Cond, Expr, Kernel};

/// A C identifier from an IR name: alphanumerics and `_`, never starting with a digit.
pub fn ident(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

pub fn param_name(k: &Kernel, p: u32) -> String {
    k.params
        .get(p as usize)
        .map_or_else(|| format!("p{p}"), |d| ident(&d.name))
}

pub fn var_name(k: &Kernel, v: u32) -> String {
    format!(
        "v{v}_{}",
        k.vars
            .get(v as usize)
            .map_or_else(String::new, |d| ident(&d.name))
    )
}

/// How a target spells the names an expression needs.
#[derive(Clone, Copy, Debug)]
pub struct CNames<'a> {
    pub wave: &'a str,
    /// The persistent grid's round (`Expr::Round`): `0` where each tile has its own block.
    pub round: &'a str,
    pub min: &'a str,
    pub max: &'a str,
}

/// The HIP prelude's names.
pub const HIP: CNames<'static> = CNames {
    wave: "wave",
    round: "0",
    min: "kittens::imin",
    max: "kittens::imax",
};
/// CUDA's built-in integer `min` / `max`.
pub const CUDA: CNames<'static> = CNames {
    wave: "wave",
    round: "kt_round",
    min: "min",
    max: "max",
};

/// `e` as a C expression with HIP's names.
pub fn expr(k: &Kernel, e: &Expr) -> String {
    expr_in(k, e, &HIP)
}

/// `c` as a C condition with HIP's names.
pub fn cond(k: &Kernel, c: &Cond) -> String {
    cond_in(k, c, &HIP)
}

/// `e` as a C expression (fully parenthesised where it matters) spelled with `n`.
pub fn expr_in(k: &Kernel, e: &Expr, n: &CNames) -> String {
    match e {
        Expr::Const(v) => v.to_string(),
        Expr::Param(p) => param_name(k, p.0),
        Expr::Var(v) => var_name(k, v.0),
        Expr::Block(i) => format!("blk{i}"),
        Expr::Wave => n.wave.to_string(),
        Expr::Round => n.round.to_string(),
        // The global's pointer as both lowerings name their arguments (`g_<name>`, declared
        // `const int*` for i32 tensors): a uniform index makes it one scalar load on AMD.
        Expr::Elem(g, i) => format!(
            "((const int*)g_{})[{}]",
            k.globals
                .get(g.0 as usize)
                .map_or_else(|| format!("{}", g.0), |d| ident(&d.name)),
            expr_in(k, i, n)
        ),
        Expr::Bin(op, a, b) => {
            let (a, b) = (expr_in(k, a, n), expr_in(k, b, n));
            match op {
                BinOp::Add => format!("({a} + {b})"),
                BinOp::Sub => format!("({a} - {b})"),
                BinOp::Mul => format!("({a} * {b})"),
                BinOp::Div => format!("({a} / {b})"),
                BinOp::Rem => format!("({a} % {b})"),
                BinOp::CeilDiv => format!("(({a} + {b} - 1) / {b})"),
                BinOp::Min => format!("{}({a}, {b})", n.min),
                BinOp::Max => format!("{}({a}, {b})", n.max),
            }
        }
    }
}

/// `c` as a C condition spelled with `n`.
pub fn cond_in(k: &Kernel, c: &Cond, n: &CNames) -> String {
    let e = |x: &Expr| expr_in(k, x, n);
    let sub = |x: &Cond| cond_in(k, x, n);
    match c {
        Cond::Eq(a, b) => format!("({} == {})", e(a), e(b)),
        Cond::Ne(a, b) => format!("({} != {})", e(a), e(b)),
        Cond::Lt(a, b) => format!("({} < {})", e(a), e(b)),
        Cond::Le(a, b) => format!("({} <= {})", e(a), e(b)),
        Cond::And(a, b) => format!("({} && {})", sub(a), sub(b)),
        Cond::Or(a, b) => format!("({} || {})", sub(a), sub(b)),
        Cond::Not(a) => format!("(!{})", sub(a)),
    }
}
