//! Running a kernel on the CPU interpreter on the caller's own inputs and returning its output — what the
//! Python package's CPU path calls (`crate::cpu` runs kernels on random inputs and checks them instead).
//!
//! Inputs are f32 values that are already bf16 (the interpreter rounds every input to its dtype anyway;
//! bf16 values pass unchanged), laid out as the kernel's globals declare them. The output is bf16-exact
//! f32. Sizes are checked here, with checked arithmetic, before anything is built or allocated.

use crate::attn_fwd::AttnConfig;
use crate::gemm_bf16::GemmConfig;
use crate::reference::AttnShape;
use crate::KernelError;
use kittens_ir::interp;

fn config(msg: String) -> KernelError {
    KernelError::Config(msg)
}

/// `a·b·…` with overflow reported as a configuration error naming `what`.
fn product(dims: &[usize], what: &str) -> Result<usize, KernelError> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| config(format!("{what}: {dims:?} overflows the address space")))
}

fn check_len(name: &str, got: usize, want: usize) -> Result<(), KernelError> {
    if got == want {
        Ok(())
    } else {
        Err(config(format!(
            "{name} holds {got} elements, the problem needs {want}"
        )))
    }
}

/// Kernel parameters are `i64`; a size that does not fit is refused.
fn param(x: usize, what: &str) -> Result<i64, KernelError> {
    i64::try_from(x)
        .map_err(|_| config(format!("{what} = {x} exceeds the kernel's i64 parameters")))
}

/// `C = A·Bᵀ` through `gemm_bf16` (HipKittens Appendix E.1 tiles, the ping-pong schedule): A is
/// `m × k`, B is `n × k`, both row-major; returns C, `m × n` row-major. `k = 0` gives zeros without
/// running the kernel (an empty sum); `m = 0` or `n = 0` an empty C.
pub fn gemm_abt(
    a: &[f32],
    b: &[f32],
    m: usize,
    n: usize,
    k: usize,
) -> Result<Vec<f32>, KernelError> {
    check_len("A", a.len(), product(&[m, k], "A")?)?;
    check_len("B", b.len(), product(&[n, k], "B")?)?;
    let c_len = product(&[m, n], "C")?;
    if c_len == 0 || k == 0 {
        return Ok(vec![0.0; c_len]);
    }
    let params = [param(m, "m")?, param(n, "n")?, param(k, "k")?];
    let kernel = crate::gemm_bf16::build(&GemmConfig::default())?;
    let mut t = vec![a.to_vec(), b.to_vec(), vec![0.0; c_len]];
    interp::run(&kernel, &params, &mut t)?;
    Ok(t.pop().unwrap_or_default())
}

/// Head dimensions `attention` accepts: `attn_fwd` tiles the head dimension in 32-column steps, and 256
/// bounds the register tiles (`q_rows × dim` f32 per wave) to what the kernel was sized for.
pub const ATTN_DIMS: std::ops::RangeInclusive<usize> = 32..=256;

/// `softmax(Q·Kᵀ/√d)·V` through `attn_fwd` (HipKittens Appendix E.3 tiles): Q and the returned O hold
/// `sh.heads` heads, K and V `sh.heads_kv`, all dense in `sh.layout`. The softmax scale is the
/// kernel's fixed `1/√d`.
pub fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    sh: &AttnShape,
    causal: bool,
) -> Result<Vec<f32>, KernelError> {
    if !ATTN_DIMS.contains(&sh.dim) || !sh.dim.is_multiple_of(32) {
        return Err(config(format!(
            "head dimension {} is not supported: attn_fwd takes multiples of 32 from {} to {}",
            sh.dim,
            ATTN_DIMS.start(),
            ATTN_DIMS.end()
        )));
    }
    if sh.heads_kv == 0 || !sh.heads.is_multiple_of(sh.heads_kv) {
        return Err(config(format!(
            "{} query heads cannot be grouped over {} key/value heads (GQA needs a divisor)",
            sh.heads, sh.heads_kv
        )));
    }
    let len = |h: usize, what: &str| product(&[sh.batch, h, sh.seq, sh.dim], what);
    check_len("Q", q.len(), len(sh.heads, "Q")?)?;
    check_len("K", k.len(), len(sh.heads_kv, "K")?)?;
    check_len("V", v.len(), len(sh.heads_kv, "V")?)?;
    let o_len = len(sh.heads, "O")?;
    if o_len == 0 {
        return Ok(Vec::new());
    }
    let cfg = AttnConfig {
        dim: sh.dim as u32,
        causal,
        layout: sh.layout,
        ..AttnConfig::default()
    };
    let kernel = crate::attn_fwd::build(&cfg)?;
    let params = [
        param(sh.batch, "batch")?,
        param(sh.heads, "heads")?,
        param(sh.heads_kv, "heads_kv")?,
        param(sh.seq, "seq")?,
    ];
    let mut t = vec![q.to_vec(), k.to_vec(), v.to_vec(), vec![0.0; o_len]];
    interp::run(&kernel, &params, &mut t)?;
    Ok(t.pop().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attn_fwd::AttnLayout;
    use crate::cpu::random;
    use crate::reference::{self, compare};
    use kittens_hw::dtype::DType;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn gemm_matches_f64_at_odd_sizes() {
        let mut rng = SmallRng::seed_from_u64(7);
        let (m, n, k) = (37, 70, 45);
        let a = random(&mut rng, m * k, DType::Bf16);
        let b = random(&mut rng, n * k, DType::Bf16);
        let c = gemm_abt(&a, &b, m, n, k).unwrap();
        let e = compare(&c, &reference::gemm_abt(&a, &b, m, n, k));
        assert!(e.rel_err < 1e-2, "{e:?}");
        // bf16 outputs: every value is representable in bf16.
        assert!(c.iter().all(|x| x.to_bits() & 0xffff == 0));
    }

    #[test]
    fn gemm_empty_sum_is_zero_and_lengths_are_checked() {
        assert_eq!(gemm_abt(&[], &[], 2, 3, 0).unwrap(), vec![0.0; 6]);
        assert!(gemm_abt(&[], &[], 0, 3, 4).unwrap_or_default().is_empty());
        let err = gemm_abt(&[1.0; 5], &[1.0; 6], 2, 3, 2).unwrap_err();
        assert!(err.to_string().contains("A holds 5"), "{err}");
        assert!(gemm_abt(&[], &[], usize::MAX, 3, 2).is_err());
    }

    #[test]
    fn attention_matches_f64_gqa_causal_both_layouts() {
        let mut rng = SmallRng::seed_from_u64(11);
        for (layout, causal) in [(AttnLayout::Bshd, true), (AttnLayout::Bhsd, false)] {
            let sh = AttnShape {
                batch: 2,
                heads: 4,
                heads_kv: 2,
                seq: 45,
                dim: 64,
                layout,
            };
            let q = random(&mut rng, sh.len(sh.heads), DType::Bf16);
            let k = random(&mut rng, sh.len(sh.heads_kv), DType::Bf16);
            let v = random(&mut rng, sh.len(sh.heads_kv), DType::Bf16);
            let o = attention(&q, &k, &v, &sh, causal).unwrap();
            let e = compare(&o, &reference::attention(&q, &k, &v, &sh, causal));
            assert!(e.rel_err < 1e-2, "{layout:?} causal={causal}: {e:?}");
        }
    }

    #[test]
    fn attention_refuses_unsupported_head_dims_and_groups() {
        let sh = AttnShape {
            batch: 1,
            heads: 3,
            heads_kv: 2,
            seq: 4,
            dim: 64,
            layout: AttnLayout::Bhsd,
        };
        let err = attention(&[], &[], &[], &sh, false).unwrap_err();
        assert!(err.to_string().contains("GQA"), "{err}");
        let sh = AttnShape { dim: 48, ..sh };
        let err = attention(&[], &[], &[], &sh, false).unwrap_err();
        assert!(err.to_string().contains("head dimension 48"), "{err}");
    }
}
