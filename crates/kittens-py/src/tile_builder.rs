//! The state of `kittens.tile`'s [`Builder`] (its Python methods are in `tile.rs`, its argument
//! checks in `tile_args.rs`, its nested bodies in `tile_body.rs`): the Rust builder it wraps, the
//! number that ties ids to it, and whether it still takes ops.

use pyo3::prelude::*;

use kittens_ir::KernelBuilder;

/// The tile language's kernel builder (see the module documentation). After `finish()` it is spent.
#[pyclass(module = "kittens._kittens")]
pub struct Builder {
    pub(crate) k: Option<KernelBuilder>,
    pub(crate) owner: u64,
    /// Why it takes no more ops (empty while it does): finished, or a loop or conditional body
    /// raised.
    pub(crate) spent: String,
    /// How many loop or conditional bodies are open (`finish()` is refused inside one).
    pub(crate) depth: u32,
}
