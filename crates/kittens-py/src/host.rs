//! The CPU path: bf16 arrays in host memory, read into f32 (exact), run on the interpreter through
//! `kittens_kernels::exec`, and the bf16 result written into the output array.

use kittens_kernels::attn::{AttnShape, BwdShape, Causal};
use kittens_kernels::exec;

use crate::view::{ApiError, Attention, Matmul};

/// A kernel error as the Python exception it becomes: bad configurations, problems and sizes over
/// the CLI's budget (`kittens_kernels::budget`) are ValueErrors, a cancelled run an interrupt.
pub(crate) fn kernel_error(e: kittens_kernels::KernelError) -> ApiError {
    use kittens_kernels::KernelError as K;
    match e {
        K::Interp(kittens_ir::interp::InterpError::Cancelled) => ApiError::Interrupted,
        K::Config(m) => ApiError::Value(m),
        e @ (K::OverBudget { .. } | K::Problem(_)) => ApiError::Value(e.to_string()),
        other => ApiError::Runtime(other.to_string()),
    }
}

/// Reads `len` bf16 values at `ptr` as f32 (bf16 is the top half of an f32, so this is exact).
///
/// # Safety
/// `ptr` must address `len` readable, 2-byte aligned bf16 values that stay alive during the call.
unsafe fn read_bf16(ptr: u64, len: usize) -> Vec<f32> {
    if len == 0 {
        return Vec::new();
    }
    // SAFETY: guaranteed by the caller.
    let bits = unsafe { std::slice::from_raw_parts(ptr as *const u16, len) };
    bits.iter()
        .map(|&b| f32::from_bits(u32::from(b) << 16))
        .collect()
}

/// Writes `values` (bf16-exact f32, as the interpreter stores bf16 outputs) as bf16 at `ptr`.
///
/// # Safety
/// `ptr` must address `values.len()` writable, 2-byte aligned bf16 slots that no one else accesses.
unsafe fn write_bf16(ptr: u64, values: &[f32]) {
    if values.is_empty() {
        return;
    }
    // SAFETY: guaranteed by the caller.
    let out = unsafe { std::slice::from_raw_parts_mut(ptr as *mut u16, values.len()) };
    for (o, v) in out.iter_mut().zip(values) {
        *o = (v.to_bits() >> 16) as u16;
    }
}

fn aligned(ptrs: &[(&str, u64)]) -> Result<(), ApiError> {
    match ptrs.iter().find(|(_, p)| p % 2 != 0) {
        Some((name, p)) => Err(ApiError::Value(format!(
            "{name} at {p:#x} is not 2-byte aligned for bf16"
        ))),
        None => Ok(()),
    }
}

/// `out = a @ b` on the interpreter.
///
/// # Safety
/// The addresses in `p` must be live host arrays of the checked shapes (`crate::view::matmul`).
pub unsafe fn matmul(p: &Matmul) -> Result<(), ApiError> {
    aligned(&[("a", p.a), ("b", p.b), ("out", p.c)])?;
    // The budget before the arrays are read (copied to f32): a refused size allocates nothing.
    exec::gemm_budget(p.m, p.n, p.k, &p.ops).map_err(kernel_error)?;
    let [sa, sb] = exec::gemm_spans(p.m, p.n, p.k, &p.ops).map_err(kernel_error)?;
    // SAFETY: arrays spanning these elements from their first (checked by `view::matmul`: each
    // operand's strides are its layout and leading dimension); guaranteed live by the caller.
    let (a, b) = unsafe { (read_bf16(p.a, sa), read_bf16(p.b, sb)) };
    let c = exec::gemm_stored(&a, &b, (p.m, p.n, p.k), &p.ops).map_err(kernel_error)?;
    for (i, row) in c.chunks(p.n.max(1)).enumerate() {
        // SAFETY: as above; `out`'s rows are `ldc` elements apart (checked), disjoint from the inputs.
        unsafe { write_bf16(p.c + (i * p.ldc * 2) as u64, row) };
    }
    Ok(())
}

/// `out = softmax(q·kᵀ/√d)·v` on the interpreter, and the log-sum-exp into `p.lse` when given.
///
/// # Safety
/// The addresses in `p` must be live host arrays of the checked shapes (`crate::view::attention`).
pub unsafe fn attention(
    p: &Attention,
    causal: Causal,
    opts: &kittens_kernels::attn::score::AttnOptions,
) -> Result<(), ApiError> {
    aligned(&[("q", p.q), ("k", p.k), ("v", p.v), ("out", p.o)])?;
    if let Some(l) = p.lse {
        if l % 4 != 0 {
            return Err(ApiError::Value(format!(
                "lse at {l:#x} is not 4-byte aligned for float32"
            )));
        }
    }
    let sh = BwdShape {
        batch: p.batch,
        heads: p.heads,
        heads_kv: p.heads_kv,
        seq_q: p.seq,
        seq_kv: p.seq_kv,
        dim: p.dim,
        layout: p.layout,
    };
    if let Some(st) = &p.strides {
        // SAFETY: as this function's.
        return unsafe { attention_strided(p, &sh, st, causal, opts) };
    }
    exec::attention_budget(&sh, causal, p.lse.is_some()).map_err(kernel_error)?;
    // SAFETY: dense arrays of these sizes, checked by `view::attention`; live per the caller.
    let (q, k, v) = unsafe {
        (
            read_bf16(p.q, sh.q_len()),
            read_bf16(p.k, sh.kv_len()),
            read_bf16(p.v, sh.kv_len()),
        )
    };
    let (o, lse) = exec::attention_lse_with(&q, &k, &v, &sh, causal, p.lse.is_some(), opts)
        .map_err(kernel_error)?;
    // SAFETY: as above; `out` and `lse` are disjoint from the inputs and each other (checked).
    unsafe { write_bf16(p.o, &o) };
    if let (Some(ptr), Some(lse)) = (p.lse, lse) {
        if !lse.is_empty() {
            // SAFETY: a contiguous f32 (B, H, N) array (checked), 4-byte aligned (above).
            let dst = unsafe { std::slice::from_raw_parts_mut(ptr as *mut f32, lse.len()) };
            dst.copy_from_slice(&lse);
        }
    }
    Ok(())
}

/// [`attention`] of tensors each in its own strides: the strided program reads the spans of q, k, v
/// and only O's own elements are written back (whatever lies between them is the caller's).
///
/// # Safety
/// As [`attention`]'s; the spans were checked by `crate::view::attention`.
unsafe fn attention_strided(
    p: &Attention,
    sh: &BwdShape,
    st: &kittens_kernels::attn::strides::AttnStrides,
    causal: Causal,
    opts: &kittens_kernels::attn::score::AttnOptions,
) -> Result<(), ApiError> {
    use kittens_kernels::attn::strides::{offset, span};
    let q_shape = [sh.batch, sh.heads, sh.seq_q, sh.dim];
    let kv_shape = [sh.batch, sh.heads_kv, sh.seq_kv, sh.dim];
    let spans = [
        span(q_shape, st.q),
        span(kv_shape, st.k),
        span(kv_shape, st.v),
    ];
    let [sq, sk, sv] = spans.map(|s| s.map_err(kernel_error));
    // SAFETY: each span lies in its array (checked); live per the caller.
    let (q, k, v) = unsafe {
        (
            read_bf16(p.q, sq?),
            read_bf16(p.k, sk?),
            read_bf16(p.v, sv?),
        )
    };
    let (o, lse) = exec::attention_strided(&q, &k, &v, sh, st, causal, p.lse.is_some(), opts)
        .map_err(kernel_error)?;
    let [_, nh, ns, nd] = q_shape;
    for bi in 0..sh.batch {
        for hi in 0..nh {
            for si in 0..ns {
                let at = offset(st.o, [bi, hi, si, 0]);
                // SAFETY: one row of O's own elements (checked not to overlap each other or the
                // inputs), 2-byte aligned (above).
                unsafe { write_bf16(p.o + 2 * at as u64, &o[at..at + nd]) };
            }
        }
    }
    if let (Some(ptr), Some(lse)) = (p.lse, lse) {
        if !lse.is_empty() {
            // SAFETY: a contiguous f32 (B, H, N) array (checked), 4-byte aligned (checked above).
            let dst = unsafe { std::slice::from_raw_parts_mut(ptr as *mut f32, lse.len()) };
            dst.copy_from_slice(&lse);
        }
    }
    Ok(())
}

/// Dropout + residual + layernorm on the interpreter; both planes written into `out`.
///
/// # Safety
/// The addresses in `p` must be live host arrays of the checked shapes (`crate::view_mem::layernorm`).
pub unsafe fn layernorm(
    p: &crate::view_mem::LayerNorm,
    norm: &kittens_kernels::rows::NormShape,
    eps: f32,
) -> Result<(), ApiError> {
    aligned(&[
        ("x", p.x),
        ("residual", p.residual),
        ("weight", p.weight),
        ("bias", p.bias),
        ("out", p.out),
    ])?;
    let n = p
        .rows
        .checked_mul(p.dim)
        .ok_or_else(|| ApiError::Value("x is too large".into()))?;
    // SAFETY: dense arrays of these sizes, checked by `view_mem::layernorm`; live per the caller.
    let (x, r, w, b) = unsafe {
        (
            read_bf16(p.x, n),
            read_bf16(p.residual, n),
            read_bf16(p.weight, p.dim),
            read_bf16(p.bias, p.dim),
        )
    };
    let o = exec::layernorm(&x, &r, &w, &b, norm, eps).map_err(kernel_error)?;
    // SAFETY: as above; `out` is disjoint from the inputs (checked).
    unsafe { write_bf16(p.out, &o) };
    Ok(())
}

/// Rotary embedding on the interpreter (`out` may be `q`: the input is read whole first).
///
/// # Safety
/// The addresses in `p` must be live host arrays of the checked shapes (`crate::view_mem::rotary`).
pub unsafe fn rotary(p: &crate::view_mem::Rotary, interleaved: bool) -> Result<(), ApiError> {
    aligned(&[("q", p.q), ("cos", p.cos), ("sin", p.sin), ("out", p.out)])?;
    let sh = AttnShape {
        batch: p.batch,
        heads: p.heads,
        heads_kv: p.heads,
        seq: p.seq,
        dim: p.dim,
        layout: p.layout,
    };
    let half = p.seq * (p.dim / 2);
    // SAFETY: dense arrays of these sizes, checked by `view_mem::rotary`; live per the caller.
    let (q, c, s) = unsafe {
        (
            read_bf16(p.q, sh.len(sh.heads)),
            read_bf16(p.cos, half),
            read_bf16(p.sin, half),
        )
    };
    let o = exec::rotary(&q, &c, &s, &sh, interleaved).map_err(kernel_error)?;
    // SAFETY: as above; `out` is `q` or disjoint from every input (checked), and q was read whole.
    unsafe { write_bf16(p.out, &o) };
    Ok(())
}
