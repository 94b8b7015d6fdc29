//! The tile language: a builder in which kernels are written, the IR it produces, build-time validation,
//! the schedule analysis (waits, barriers, races) and the CPU interpreter.
//!
//! - [`expr`]: integer index expressions over parameters, loop variables, grid coordinates and the wave id;
//! - [`ir`]: the IR data types ([`Kernel`], [`Stmt`], [`Op`], views, scopes, schedules) — see `docs/ir.md`;
//! - [`walk`]: op indices and traversal;
//! - [`builder`]: [`KernelBuilder`], the API kernels are written in;
//! - [`schedule`]: expansion of a named schedule into barriers, priorities and fences;
//! - [`validate`]: build-time checks and per-target budgets;
//! - [`numerics`]: storage rounding (bf16, f16, fp8) in the RTNE/RTNA/RTZ modes;
//! - [`interp`]: the CPU interpreter, the `cpu` backend and the test oracle.

pub mod analysis;
pub mod builder;
pub mod error;
pub mod expr;
pub mod interp;
pub mod ir;
pub mod numerics;
pub mod print;
pub mod schedule;
pub mod validate;
pub mod walk;

pub use expr::{BinOp, Cond, Env, Expr, ParamId, VarId};
pub use builder::KernelBuilder;
pub use error::{BuildError, OpError};
pub use ir::*;
pub use validate::{check_target, validate, TargetReport};
