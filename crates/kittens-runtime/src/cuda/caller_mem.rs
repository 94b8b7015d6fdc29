//! The memory-bound kernels (`layernorm`, `rotary`: strip programs, `kittens_codegen::strip`) on
//! caller-owned memory: one compiled kernel per configuration (the caller's key), launched with one
//! block per tile of the tile program's grid on the caller's stream in the device's primary context,
//! through the machinery of [`super::caller`]. The strip programs take plain pointers (no tensor
//! maps), so a launch is the pointers by tensor name and the integer parameters by name.

use kittens_codegen::Lowered;

use super::args::PackedArgs;
use super::caller::{check_pointer, enqueue, in_context, kernel_on, KernelLoad};
use super::{invalid, CudaError};

/// One launch of a strip program on raw device memory.
#[derive(Debug, Clone)]
pub struct StripCall<'a> {
    /// What selects the compiled kernel (its configuration); the parameters are launch values.
    pub key: String,
    /// `(tensor name in the tile program, device address, bytes the kernel may touch)`.
    pub tensors: &'a [(&'a str, u64, u64)],
    /// The tile program's integer parameters by name (32-bit on the device).
    pub params: &'a [(&'a str, i64)],
}

impl StripCall<'_> {
    /// What can be checked without a driver: 16-byte aligned addresses (the lowering's vector
    /// accesses assume it of every tensor's base).
    pub fn check(&self) -> Result<(), CudaError> {
        for (name, ptr, _) in self.tensors {
            if !ptr.is_multiple_of(16) {
                return Err(invalid(format!(
                    "{name} at {ptr:#x} is not 16-byte aligned (the kernel reads rows in 16-byte vectors)"
                )));
            }
        }
        Ok(())
    }
}

/// Enqueues `call` on `stream` of device `ordinal`. Returns the kernel load when this call loaded the
/// configuration's kernel on the device, else `None`; a grid of no blocks enqueues nothing.
///
/// # Safety
/// The tensors' ranges must stay allocated until the launch has run on `stream`; outputs may alias
/// inputs only where the program reads each element before writing it in the same lane (rotary in
/// place); `stream` must be a live stream of that context (or 0).
pub unsafe fn launch_strip(
    ordinal: i32,
    stream: u64,
    call: &StripCall,
    lower: &dyn Fn() -> Result<Lowered, CudaError>,
) -> Result<Option<KernelLoad>, CudaError> {
    call.check()?;
    in_context(ordinal, || {
        for (name, ptr, bytes) in call.tensors {
            check_pointer(name, *ptr, *bytes, ordinal)?;
        }
        // SAFETY: forwarded from the caller, in the device's context.
        unsafe { enqueue_strip(ordinal, stream, call, lower) }
    })
}

/// [`launch_strip`] inside the device's context with the tensors already checked (the GEMM
/// launcher's padded copies, `super::caller`).
///
/// # Safety
/// As [`launch_strip`], and the device's primary context is current.
pub(crate) unsafe fn enqueue_strip(
    ordinal: i32,
    stream: u64,
    call: &StripCall,
    lower: &dyn Fn() -> Result<Lowered, CudaError>,
) -> Result<Option<KernelLoad>, CudaError> {
    let (kernel, fresh) = kernel_on(ordinal, &call.key, lower)?;
    let l = &kernel.lowered;
    let address = |name: &str| {
        call.tensors
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|(_, p, _)| *p)
            .ok_or_else(|| {
                invalid(format!(
                    "the lowered kernel takes an unknown tensor `{name}`"
                ))
            })
    };
    let mut args = PackedArgs::pack(
        l,
        call.params,
        |_| Err(invalid("a strip program takes no tensor maps")),
        address,
    )?;
    let mut pointers = args.pointers();
    let grid = l
        .blocks(call.params, kernel.resident)
        .ok_or_else(|| invalid("grid extents of the lowered kernel"))?;
    if grid > 0 {
        // SAFETY: one pointer per argument in the lowering's order and types (`PackedArgs`),
        // alive until the call returns; the caller keeps the memory and the stream alive.
        unsafe { enqueue(&kernel, grid, &mut pointers, stream)? };
    }
    Ok(fresh.then(|| kernel.load.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misaligned_addresses_are_refused_before_the_driver() {
        let tensors = [("x", 0x1000u64, 64u64), ("out", 0x2008, 64)];
        let call = StripCall {
            key: "k".into(),
            tensors: &tensors,
            params: &[],
        };
        let lower = || Err(invalid("not lowered in this test"));
        // SAFETY: refused before any address is used.
        let e = unsafe { launch_strip(0, 0, &call, &lower) }
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("out at 0x2008") && e.contains("16-byte aligned"),
            "{e}"
        );
    }

    /// Aligned host addresses get as far as the driver: an error on any machine, never a crash.
    #[test]
    fn host_pointers_are_an_error_not_a_crash() {
        let tensors = [("x", 0x1000u64, 64u64)];
        let call = StripCall {
            key: "k".into(),
            tensors: &tensors,
            params: &[],
        };
        let lower = || Err(invalid("not lowered in this test"));
        // SAFETY: the driver refuses host addresses before anything is launched.
        let e = unsafe { launch_strip(0, 0, &call, &lower) }.unwrap_err();
        assert!(
            matches!(
                e,
                CudaError::NoDriver(_) | CudaError::NoDevice(_) | CudaError::Invalid(_)
            ),
            "{e}"
        );
    }
}
