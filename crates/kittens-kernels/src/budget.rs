//! The size budget of a run on random inputs (`kittens_runtime::runner`): how much host memory it may
//! hold and, per backend, how much it may execute. Every amount is computed with overflow-checked arithmetic and checked before anything is
//! allocated or built, so a mistyped size is a clear error naming the limit — not an abort after a
//! 40 GB allocation, a wrapped size, or a run that never ends.

use crate::KernelError;

/// Bytes of host memory a CPU run may hold for its tensors: the inputs and their snapshot, the output,
/// the pending stores the interpreter collects for it, its f64 reference and the low-precision baseline.
/// A quarter of a 16 GiB workstation.
pub const HOST_BYTES: u64 = 4 << 30;

/// Multiply-adds the interpreter may execute, counted on the problem padded to whole tiles (what the
/// interpreter really computes). The interpreter does about 1.5·10⁸ per second on two cores, so this is
/// about two minutes; the f64 reference costs about as much again.
pub const WORK_MACS: u64 = 1 << 34;

/// How much one backend may execute in a run: multiply-adds on the problem padded to whole tiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkLimit {
    pub macs: u64,
    /// Who executes them, for the message (`interpreter`, `HIP emulation`).
    pub executor: &'static str,
}

/// The interpreter's limit, [`WORK_MACS`].
pub const INTERPRETER_WORK: WorkLimit = WorkLimit {
    macs: WORK_MACS,
    executor: "interpreter",
};

/// Bytes of interpreter state per block (every shared tile and every wave's register tiles, held as
/// f32); one block per host thread is live at a time.
pub const BLOCK_BYTES: u64 = 64 << 20;

/// Largest tile side, in elements, a kernel configuration may ask for. It keeps every tile's element
/// and byte counts inside the tile builder's `u32` arithmetic, and is far beyond what any GPU holds:
/// a 32 × 16384 bf16 tile is 1 MiB, over four times the largest shared memory per block in
/// `kittens_hw::gpu` (227 KiB).
pub const MAX_TILE_SIDE: u64 = 1 << 14;

/// Largest magnitude of `--input-scale`: inputs up to 2^16 keep an attention logit (at most
/// `dim · 2^32`) and a GEMM sum far inside f32's range.
pub const MAX_INPUT_SCALE: f32 = 65536.0;

/// `∏ xs`, `None` when it overflows `u64`.
pub fn product(xs: &[u64]) -> Option<u64> {
    xs.iter().try_fold(1u64, |acc, &x| acc.checked_mul(x))
}

/// `Σ xs`, `None` when a term is `None` or the sum overflows `u64`.
pub fn sum(xs: &[Option<u64>]) -> Option<u64> {
    xs.iter()
        .try_fold(0u64, |acc, &x| x.and_then(|x| acc.checked_add(x)))
}

fn bytes(n: Option<u64>) -> String {
    match n {
        None => "more than 2^64 bytes".into(),
        Some(b) if b >= 1 << 30 => format!("{b} bytes ({:.1} GiB)", b as f64 / (1u64 << 30) as f64),
        Some(b) => format!("{b} bytes ({:.1} MiB)", b as f64 / (1u64 << 20) as f64),
    }
}

fn count(n: Option<u64>) -> String {
    n.map_or_else(|| "more than 2^64".into(), |n| format!("{n} ({n:.2e})"))
}

fn over(what: String, need: String, limit: String) -> KernelError {
    KernelError::OverBudget { what, need, limit }
}

/// Refuses `need` bytes of host tensors (`None`: overflowed) over [`HOST_BYTES`].
pub fn check_host_bytes(what: &str, need: Option<u64>) -> Result<(), KernelError> {
    match need {
        Some(n) if n <= HOST_BYTES => Ok(()),
        _ => Err(over(
            format!("host tensors of {what}"),
            bytes(need),
            format!("{} of host tensors", bytes(Some(HOST_BYTES))),
        )),
    }
}

/// Refuses `need` multiply-adds (`None`: overflowed) over `limit`.
pub fn check_work(what: &str, need: Option<u64>, limit: WorkLimit) -> Result<(), KernelError> {
    match need {
        Some(n) if n <= limit.macs => Ok(()),
        _ => Err(over(
            format!(
                "{} work of {what} (multiply-adds, padded to whole tiles)",
                limit.executor
            ),
            count(need),
            format!(
                "{} multiply-adds (2^{:.1})",
                limit.macs,
                (limit.macs as f64).log2()
            ),
        )),
    }
}

/// Refuses a tile side of zero or over [`MAX_TILE_SIDE`]; `name` is the configuration field.
pub fn check_tile_side(kernel: &str, name: &str, side: u64) -> Result<(), KernelError> {
    if side == 0 {
        return Err(KernelError::Config(format!(
            "{kernel}: {name} must be positive"
        )));
    }
    if side <= MAX_TILE_SIDE {
        return Ok(());
    }
    Err(over(
        format!("{kernel}'s {name}"),
        format!("{side} elements"),
        format!("{MAX_TILE_SIDE} elements per tile side"),
    ))
}

/// Refuses a kernel whose per-block interpreter state is over [`BLOCK_BYTES`].
pub fn check_block_state(k: &kittens_ir::Kernel) -> Result<(), KernelError> {
    let need = block_state_bytes(k);
    match need {
        Some(n) if n <= BLOCK_BYTES => Ok(()),
        _ => Err(over(
            format!(
                "interpreter state of one `{}` block (shared tiles + {} waves' register tiles, as f32)",
                k.name, k.waves
            ),
            bytes(need),
            format!("{} per block", bytes(Some(BLOCK_BYTES))),
        )),
    }
}

/// Bytes the interpreter allocates for one block of `k`: each shared ring and each wave's register
/// tiles, one f32 per element.
pub fn block_state_bytes(k: &kittens_ir::Kernel) -> Option<u64> {
    let shared: Vec<Option<u64>> = k
        .shared
        .iter()
        .map(|s| product(&[s.tile.rows as u64, s.tile.cols as u64, s.count as u64]))
        .collect();
    let regs: Vec<Option<u64>> = k
        .regs
        .iter()
        .map(|r| {
            let (rows, cols) = r.shape();
            product(&[rows as u64, cols as u64])
        })
        .collect();
    let per_wave = sum(&regs)?;
    let elems = sum(&[sum(&shared), per_wave.checked_mul(k.waves as u64)])?;
    elems.checked_mul(4)
}

/// Refuses an input scale that is not finite or whose magnitude lies outside
/// `[1/MAX_INPUT_SCALE, MAX_INPUT_SCALE]` (below, bf16 inputs underflow toward zero).
pub fn check_input_scale(scale: f32) -> Result<(), KernelError> {
    let lo = 1.0 / MAX_INPUT_SCALE;
    if scale.is_finite() && (lo..=MAX_INPUT_SCALE).contains(&scale.abs()) {
        return Ok(());
    }
    Err(KernelError::Problem(format!(
        "input scale {scale} must be finite with magnitude in [2^-16, 2^16] ({lo:e} to {MAX_INPUT_SCALE})"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_amounts() {
        assert_eq!(product(&[3, 5, 7]), Some(105));
        assert_eq!(product(&[u64::MAX, 2]), None);
        assert_eq!(sum(&[Some(1), Some(2)]), Some(3));
        assert_eq!(sum(&[Some(u64::MAX), Some(1)]), None);
        assert_eq!(sum(&[Some(1), None]), None);
    }

    #[test]
    fn limits_are_named_in_the_errors() {
        let e = check_host_bytes("gemm_bf16", None).unwrap_err().to_string();
        assert!(
            e.contains("more than 2^64 bytes") && e.contains("4294967296 bytes"),
            "{e}"
        );
        let e = check_work("attn_fwd", Some(WORK_MACS + 1), INTERPRETER_WORK)
            .unwrap_err()
            .to_string();
        assert!(e.contains("17179869184 multiply-adds (2^34.0)"), "{e}");
        assert!(e.contains("interpreter work of attn_fwd"), "{e}");
        assert!(check_work("x", Some(WORK_MACS), INTERPRETER_WORK).is_ok());
        let e = check_tile_side("gemm_bf16", "k_step", 100000)
            .unwrap_err()
            .to_string();
        assert!(e.contains("k_step") && e.contains("16384 elements"), "{e}");
        assert!(check_input_scale(8.0).is_ok() && check_input_scale(-1.0).is_ok());
        for bad in [0.0, f32::NAN, f32::INFINITY, 1e6, 1e-9] {
            assert!(check_input_scale(bad).is_err(), "{bad}");
        }
    }
}
