//! Hardware facts, as data plus small pure functions, each figure naming its source.
//!
//! - [`gpu`]: the GPU catalog (CUs, XCDs, caches, register files, peaks);
//! - [`target`]: compile targets (`gfx942`, `gfx950`, `sm_90a`, `cpu`), parsed once, and the GPU
//!   models and budgets each one serves;
//! - [`mma`]: matrix instructions with their exact lane/register ↔ element maps;
//! - [`lds`]: shared-memory instructions, their phases and banks, and the conflict function.

pub mod dtype;
pub mod gpu;
pub mod lds;
pub mod mma;
pub mod target;

pub use gpu::{gpu, Arch, Gpu, L2Scope};
pub use target::{Language, Target, UnknownTarget};
