//! The tile language: a builder in which kernels are written, the IR it produces, build-time validation,
//! the schedule analysis (waits, barriers, races) and the CPU interpreter.
//!
//! - [`expr`]: integer index expressions over parameters, loop variables, grid coordinates and the wave id;
//! - [`ir`]: the IR data types ([`Kernel`], [`Stmt`], [`Op`], views, scopes, schedules) — see `docs/ir.md`;
//! - [`walk`]: op indices and traversal;
//! - [`numerics`]: storage rounding (bf16, f16, fp8) in the RTNE/RTNA/RTZ modes;
//! - [`interp`]: the CPU interpreter, the `cpu` backend and the test oracle.

pub mod expr;
pub mod interp;
pub mod ir;
pub mod numerics;
pub mod walk;

pub use expr::{BinOp, Cond, Env, Expr, ParamId, VarId};
pub use ir::*;
