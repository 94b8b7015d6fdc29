//! Lowering of tile programs to target source: HIP C++ for gfx942/gfx950 ([`hip`]) and CUDA C++ for
//! sm_90a ([`cuda`]), each with its device prelude shipped inside the crate.

pub mod cexpr;
pub mod cuda;
pub mod hip;
