//! The tile language: a builder in which kernels are written, the IR it produces, build-time validation,
//! the schedule analysis (waits, barriers, races) and the CPU interpreter.
//!
//! - [`expr`]: integer index expressions over parameters, loop variables, grid coordinates and the wave id;
//! - [`ir`]: the IR data types ([`Kernel`], [`Stmt`], [`Op`], views, scopes, schedules) — see `docs/ir.md`;
//! - [`walk`]: op indices and traversal;
//! - [`builder`]: [`KernelBuilder`], the API kernels are written in;
//! - [`schedule`]: expansion of a named schedule into barriers, priorities and fences;
//! - [`validate`]: build-time checks and per-target budgets ([`regs`]: register liveness);
//! - [`analysis`]: the schedule analysis (hazards, wait counts);
//! - [`banks`]: the shared-memory swizzle of every buffer, chosen by the bank solver per AMD target;
//! - [`numerics`]: storage rounding (bf16, f16, fp8) in the RTNE/RTNA/RTZ modes;
//! - [`philox`]: Philox 4x32-10, the counter-based generator of the `random` op (dropout masks);
//! - [`interp`]: the CPU interpreter, the `cpu` backend and the test oracle;
//! - [`print`]: the kernel listing (`Display for Kernel`);
//! - [`serial`]: kernels as files (JSON), read back through the structure checks and [`validate`];
//! - [`strips`]: how a row is split over waves as strips, for one wave width or every target's.
//!
//! A kernel in brief (a one-wave `y = exp2(x)` over a 16×16 tile):
//!
//! ```
//! use kittens_ir::{Access, Expr, KernelBuilder, Schedule, interp};
//! use kittens_hw::dtype::DType::F32;
//! use kittens_tile::{BaseShape, Layout};
//!
//! let mut k = KernelBuilder::new("exp2", Schedule::Plain { waves: 1 });
//! let n = k.param("n");
//! let x = k.global("x", F32, &[("r", n.clone()), ("c", n.clone())], Access::Read);
//! let y = k.global("y", F32, &[("r", n.clone()), ("c", n)], Access::Write);
//! let t = k.tile("t", F32, 16, 16, Layout::Row, BaseShape::S16X16);
//! k.load_global(t, k.gtile(x, 16, 16, 0, 0));
//! k.exp2(t, t);
//! k.store(k.gtile(y, 16, 16, 0, 0), t);
//! let kernel = k.finish().unwrap();
//!
//! let mut tensors = vec![vec![1.0; 16 * 16], vec![0.0; 16 * 16]];
//! interp::run(&kernel, &[16], &mut tensors).unwrap();
//! assert!(tensors[1].iter().all(|&v| v == 2.0));
//! ```

pub mod analysis;
pub mod banks;
pub mod builder;
pub mod error;
pub mod expr;
pub mod interp;
pub mod ir;
pub mod numerics;
pub mod philox;
pub mod print;
pub mod regs;
pub mod schedule;
pub mod serial;
pub mod strips;
pub mod validate;
pub mod walk;

pub use builder::KernelBuilder;
pub use error::{BuildError, OpError};
pub use expr::{BinOp, Cond, Env, Expr, ParamId, VarId};
pub use ir::*;
pub use validate::{check_target, validate, TargetReport};
