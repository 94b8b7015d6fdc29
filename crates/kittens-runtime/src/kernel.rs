//! The one function from a registry kernel, a target and a configuration to lowered source: the CLI
//! (`compile`, `demo`), the runner's code-object backends and the tests all lower through
//! [`lower_entry`], so a kernel is built for a target one way.

use kittens_codegen::{LowerError, Lowered};
use kittens_hw::Target;
use kittens_kernels::registry::KernelEntry;
use kittens_kernels::KernelError;

/// Why a registry kernel could not be lowered.
#[derive(Debug, thiserror::Error)]
pub enum LowerEntryError {
    #[error(transparent)]
    Kernel(#[from] KernelError),
    #[error("lowering `{kernel}` for {target}: {source}")]
    Lower {
        kernel: &'static str,
        target: Target,
        #[source]
        source: Box<LowerError>,
    },
}

/// `entry` built for `target` in its variant `variant` (`None`: the target's default configuration,
/// `KernelEntry::build_for`) and lowered (`kittens_codegen::lower`). A target the registry marks as
/// not yet, or an unknown variant, is a [`KernelError`] that says so.
pub fn lower_entry(
    entry: &KernelEntry,
    target: Target,
    variant: Option<&str>,
) -> Result<Lowered, LowerEntryError> {
    let k = entry.build_variant(target, variant)?;
    kittens_codegen::lower(&k, target).map_err(|source| LowerEntryError::Lower {
        kernel: entry.name,
        target,
        source: Box::new(source),
    })
}
