//! Variable-length attention on the CPU interpreter (`kittens_kernels::exec_varlen`), for
//! `kittens.flash_attn_varlen_func`'s CPU path: float32 byte buffers in, float32 byte buffers out.

use crate::view::ApiError;
use crate::{interruptible, say};
use kittens_kernels::attn::score::{Logits, Window};
use kittens_kernels::attn_varlen::VarlenConfig;
use kittens_kernels::exec_varlen::{self, Packed};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn bytes<'py>(py: Python<'py>, v: &[f32]) -> Bound<'py, PyBytes> {
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_ne_bytes()).collect();
    PyBytes::new(py, &b)
}

fn value(what: &'static str) -> impl Fn(kittens_kernels::KernelError) -> ApiError {
    move |e| match crate::host::kernel_error(e) {
        ApiError::Interrupted => ApiError::Interrupted,
        e => ApiError::Value(format!("kittens.{what}: {e}")),
    }
}

/// `(heads, heads_kv, dim, max_seqlen_q, max_seqlen_k)`.
type Sizes = (usize, usize, u32, usize, usize);

/// The forward's soft cap and sliding window `(left, right)`, `None` for none.
type Options = (Option<f64>, Option<(i64, i64)>);

fn setup(
    sizes: Sizes,
    cu: (Vec<i64>, Vec<i64>),
    causal: bool,
    scale: Option<f64>,
    used_k: Option<Vec<i64>>,
    alibi: Option<Vec<f32>>,
    (softcap, window): Options,
) -> (VarlenConfig, Packed) {
    let (heads, heads_kv, dim, max_q, max_k) = sizes;
    let cfg = VarlenConfig {
        dim,
        causal,
        logits: Logits {
            scale: scale.map(|s| s as f32),
            softcap: softcap.map(|c| c as f32),
        },
        // Checked by the build (`window` named in its error).
        window: window.map(|(left, right)| Window { left, right }),
        seqused_k: used_k.is_some(),
        alibi: alibi.is_some(),
    };
    let packed = Packed {
        heads,
        heads_kv,
        cu_q: cu.0,
        cu_k: cu.1,
        max_q,
        max_k,
        used_k,
        alibi,
    };
    (cfg, packed)
}

/// `(out, lse)` of packed `q, k, v` (float32 bytes of `[total, heads, dim]`); `seqused_k`: the keys
/// each sequence uses from its `cu_seqlens_k` start (FlashAttention's `seqused_k`, a KV cache's lengths);
/// `alibi`: ALiBi's slopes, `[batch, heads]` row-major; `softcap` and `window` (`(left, right)`, `-1`
/// unbounded, bottom-right per sequence) as FlashAttention's.
#[pyfunction]
#[pyo3(signature = (arrays, cu, sizes, causal, scale=None, seqused_k=None, alibi=None, softcap=None,
    window=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_varlen_cpu<'py>(
    py: Python<'py>,
    arrays: [Vec<u8>; 3],
    cu: (Vec<i64>, Vec<i64>),
    sizes: Sizes,
    causal: bool,
    scale: Option<f64>,
    seqused_k: Option<Vec<i64>>,
    alibi: Option<Vec<f32>>,
    softcap: Option<f64>,
    window: Option<(i64, i64)>,
) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
    let (cfg, packed) = setup(
        sizes,
        cu,
        causal,
        scale,
        seqused_k,
        alibi,
        (softcap, window),
    );
    let [q, k, v] = arrays.map(|a| floats(&a));
    let (o, lse) = interruptible(py, move || {
        let t = std::time::Instant::now();
        let r = exec_varlen::forward(&cfg, &q, &k, &v, &packed)
            .map_err(value("flash_attn_varlen_func"))?;
        say(&format!(
            "kittens: varlen attention on the CPU interpreter in {:.3} s",
            t.elapsed().as_secs_f64()
        ));
        Ok(r)
    })?;
    Ok((bytes(py, &o), bytes(py, &lse)))
}

/// `(dq, dk, dv)` from `q, k, v, out, grad_out, lse` (float32 bytes); `alibi`, `softcap` and
/// `window` as the forward's.
#[pyfunction]
#[pyo3(signature = (arrays, cu, sizes, causal, scale=None, alibi=None, softcap=None, window=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_varlen_backward_cpu<'py>(
    py: Python<'py>,
    arrays: [Vec<u8>; 6],
    cu: (Vec<i64>, Vec<i64>),
    sizes: Sizes,
    causal: bool,
    scale: Option<f64>,
    alibi: Option<Vec<f32>>,
    softcap: Option<f64>,
    window: Option<(i64, i64)>,
) -> PyResult<(
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
)> {
    let options = (softcap, window);
    let (cfg, packed) = setup(sizes, cu, causal, scale, None, alibi, options);
    let [q, k, v, o, d_o, lse] = arrays.map(|a| floats(&a));
    let [dq, dk, dv] = interruptible(py, move || {
        let t = kittens_kernels::exec::BwdTensors::new([&q, &k, &v, &o, &d_o, &lse]);
        exec_varlen::backward(&cfg, t, &packed).map_err(value("flash_attn_varlen_func backward"))
    })?;
    Ok((bytes(py, &dq), bytes(py, &dk), bytes(py, &dv)))
}
