//! What the two GEMM benches (`bench`: bf16, `bench_fp8`) share before a launch: how many copies of the
//! inputs a shape uses (several for a timed row, so that the L2 does not hold them between launches),
//! checked against the host's and the device's memory, and those copies, made once on the host and
//! copied on the device.

use std::rc::Rc;

use super::bench_shapes::Shape;
use super::driver::{Device, DeviceBuffer};
use super::limits::{check_memory, gemm_memory_need, host_mem_available, rotation_copies};
use super::CudaError;

/// The input copies a shape uses (one for a check-only row, `rotation_copies` at `l2_multiple` for a
/// timed one), after checking that its host and device memory, with `pad_bytes` of scratch, are
/// there. `what` names the bench in the refusal ("GEMM", "FP8 GEMM"). The need counts bf16 operands.
pub(super) fn copies_that_fit(
    dev: &Device,
    what: &str,
    shape: Shape,
    timed: bool,
    l2_multiple: u64,
    pad_bytes: u64,
) -> Result<u64, CudaError> {
    let copies = if timed {
        rotation_copies(shape, dev.l2_bytes, l2_multiple)?
    } else {
        1
    };
    let mut need = gemm_memory_need(shape, copies)?;
    need.device = need.device.saturating_add(pad_bytes);
    let host = host_mem_available()
        .ok_or_else(|| CudaError::Invalid("cannot read MemAvailable from /proc/meminfo".into()))?;
    let (free, _) = dev.mem_info()?;
    let (m, n, k) = shape;
    let what = format!("{what} {m}x{n}x{k} with {copies} input copies");
    check_memory(&what, need, host, free)?;
    Ok(copies)
}

/// Inputs for one size: `copies` identical sets of A and B (different addresses for the L2 rotation),
/// elements of type `T` (bf16 or fp8 bits).
pub(super) struct Inputs<T> {
    pub a_host: Vec<T>,
    pub b_host: Vec<T>,
    pub a: Vec<DeviceBuffer>,
    pub b: Vec<DeviceBuffer>,
}

/// Random inputs from `random(len, seed)` on the host and `copies` copies on the device. The memory was
/// checked by the caller ([`copies_that_fit`]), so the sizes below do not overflow.
pub(super) fn make_inputs<T: Copy>(
    dev: &Rc<Device>,
    (m, n, k): Shape,
    seed: u64,
    copies: u64,
    random: fn(usize, u64) -> Vec<T>,
) -> Result<Inputs<T>, CudaError> {
    let a_host = random(m * k, seed);
    let b_host = random(n * k, seed ^ 0xA5A5_A5A5);
    let elem = std::mem::size_of::<T>();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..copies {
        let (mut da, mut db) = (dev.alloc(m * k * elem)?, dev.alloc(n * k * elem)?);
        if i == 0 {
            da.upload(&a_host)?;
            db.upload(&b_host)?;
        } else {
            da.copy_from(&a[0])?;
            db.copy_from(&b[0])?;
        }
        a.push(da);
        b.push(db);
    }
    dev.synchronize()?;
    Ok(Inputs {
        a_host,
        b_host,
        a,
        b,
    })
}
