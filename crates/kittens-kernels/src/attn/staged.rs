//! A register tile loaded from global memory through one shared-memory slot: an asynchronous
//! global→shared load, a wait, a shared→register load and its wait. The one-wave varlen and paged forwards load
//! V this way because their V tile is column-major (the `mma`'s B operand): the AMD lowerings read a
//! column-major tile from LDS only (HipKittens' `ds_read_b64_tr` / strided reads, docs/references.md
//! "HipKittens"), not with buffer loads straight into registers. The interpreter and the plain CUDA
//! lowering take the same three ops, so one program serves every target.

use kittens_hw::dtype::DType;
use kittens_ir::{GlobalView, KernelBuilder, RegId, SharedId};
use kittens_tile::SharedTile;

/// Register tile `reg` and the shared slot it is staged through.
pub(crate) struct Staged {
    reg: RegId,
    slot: SharedId,
}

impl Staged {
    /// A slot named `name` of `rows × cols` elements of `dtype` for `reg`.
    pub(crate) fn declare(
        k: &mut KernelBuilder,
        name: &str,
        reg: RegId,
        dtype: DType,
        (rows, cols): (u32, u32),
    ) -> Staged {
        let slot = k.shared_tile(name, SharedTile::new(dtype, rows, cols), 1);
        Staged { reg, slot }
    }

    /// `reg = src`, through the slot. Past the tensor's edge (or its clip) the slot reads 0.
    pub(crate) fn load(&self, k: &mut KernelBuilder, src: GlobalView) {
        k.load_async(k.smem(self.slot, 0), src);
        k.wait_async(0);
        k.load(self.reg, k.smem(self.slot, 0));
        k.wait_shared(0);
    }
}
