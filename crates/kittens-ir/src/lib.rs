//! The tile language: a builder in which kernels are written, the IR it produces, build-time validation,
//! the schedule analysis (waits, barriers, races) and the CPU interpreter.
//!
//! Module ownership while the crate is being written: `numerics` and `interp` belong to the interpreter
//! work; everything else to the IR work.

pub mod interp;
pub mod numerics;
