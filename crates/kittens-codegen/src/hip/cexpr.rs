//! Printing IR index expressions and conditions as C++ `int` expressions.
//!
//! Names: parameters keep their IR names (sanitised), loop variables are `v<N>_<name>`, grid
//! coordinates `blk<N>`, the wave index `wave` (made wave-uniform with `readfirstlane`, so conditions on
//! it become scalar branches, as the ping-pong's stagger barrier needs).

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

/// `e` as a C expression (fully parenthesised where it matters).
pub fn expr(k: &Kernel, e: &Expr) -> String {
    match e {
        Expr::Const(v) => v.to_string(),
        Expr::Param(p) => param_name(k, p.0),
        Expr::Var(v) => var_name(k, v.0),
        Expr::Block(i) => format!("blk{i}"),
        Expr::Wave => "wave".to_string(),
        Expr::Bin(op, a, b) => {
            let (a, b) = (expr(k, a), expr(k, b));
            match op {
                BinOp::Add => format!("({a} + {b})"),
                BinOp::Sub => format!("({a} - {b})"),
                BinOp::Mul => format!("({a} * {b})"),
                BinOp::Div => format!("({a} / {b})"),
                BinOp::Rem => format!("({a} % {b})"),
                BinOp::CeilDiv => format!("(({a} + {b} - 1) / {b})"),
                BinOp::Min => format!("kittens::imin({a}, {b})"),
                BinOp::Max => format!("kittens::imax({a}, {b})"),
            }
        }
    }
}

pub fn cond(k: &Kernel, c: &Cond) -> String {
    match c {
        Cond::Eq(a, b) => format!("({} == {})", expr(k, a), expr(k, b)),
        Cond::Ne(a, b) => format!("({} != {})", expr(k, a), expr(k, b)),
        Cond::Lt(a, b) => format!("({} < {})", expr(k, a), expr(k, b)),
        Cond::Le(a, b) => format!("({} <= {})", expr(k, a), expr(k, b)),
        Cond::And(a, b) => format!("({} && {})", cond(k, a), cond(k, b)),
        Cond::Or(a, b) => format!("({} || {})", cond(k, a), cond(k, b)),
        Cond::Not(a) => format!("(!{})", cond(k, a)),
    }
}
