//! Lowering of tile programs to target source: HIP C++ for gfx942/gfx950 ([`hip`]) and CUDA C++ for
//! sm_90a ([`cuda`]), each with its device prelude shipped inside the crate. Both return a
//! [`Lowered`] (source plus launch contract); [`lower`] picks the backend from the target.

mod backend;
pub mod cexpr;
pub mod cuda;
pub mod hip;
mod lowered;
pub mod strip;

pub use backend::{check_budgets, lower, LowerError};
pub use lowered::{GridRule, KernelArg, Lowered, SharedAlloc};
