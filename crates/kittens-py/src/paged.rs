//! Paged-KV-cache decode attention on the CPU interpreter (`kittens_kernels::attn_paged_problem`), for
//! `kittens.flash_attn_with_kvcache`'s CPU path with a `block_table`: float32 byte buffers in and out.

use crate::view::ApiError;
use crate::{interruptible, say};
use kittens_kernels::attn::score::{Logits, Window};
use kittens_kernels::attn::{AttnLayout, AttnShape};
use kittens_kernels::attn_paged_problem::{run_cpu, PagedProblem};
use kittens_kernels::problem::RunSettings;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// `(batch, seq_q, heads, heads_kv, dim, num_blocks, page_size, max_blocks)`.
type Sizes = (usize, usize, usize, usize, usize, usize, usize, usize);

/// `(out, lse)` (float32 bytes of `[batch, seq_q, heads, dim]` and `[batch, heads, seq_q]`) from
/// `q, k_cache, v_cache` (float32 bytes), the block table (row-major) and the lengths; with ALiBi
/// the slopes `[batch, heads]` (row-major; a non-finite one is refused naming `alibi_slopes`); a soft
/// cap and a window `(left, right)` aligned bottom-right (refused out of range, naming `softcap` or
/// `window`).
#[pyfunction]
#[pyo3(signature = (arrays, block_table, cache_seqlens, sizes, causal, scale=None, splits=1, alibi=None,
                    softcap=None, window=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_paged_cpu<'py>(
    py: Python<'py>,
    arrays: [Vec<u8>; 3],
    block_table: Vec<i64>,
    cache_seqlens: Vec<i64>,
    sizes: Sizes,
    causal: bool,
    scale: Option<f64>,
    splits: u32,
    alibi: Option<Vec<f32>>,
    softcap: Option<f64>,
    window: Option<(i64, i64)>,
) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
    let (batch, seq, heads, heads_kv, dim, num_blocks, page_size, max_blocks) = sizes;
    let window = window
        .map(|(l, r)| Window::new(l, r))
        .transpose()
        .map_err(|e| {
            pyo3::exceptions::PyValueError::new_err(format!("kittens.flash_attn_with_kvcache: {e}"))
        })?;
    let p = PagedProblem {
        attn: AttnShape {
            batch,
            heads,
            heads_kv,
            seq,
            dim,
            layout: AttnLayout::Bshd,
        },
        causal,
        alibi: alibi.is_some(),
        logits: Logits {
            scale: scale.map(|s| s as f32),
            softcap: softcap.map(|c| c as f32),
        },
        window,
        num_blocks,
        page_size,
        max_blocks,
        splits,
        run: RunSettings::default(),
    };
    let floats = |b: &[u8]| -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let ints = |v: &[i64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
    let [q, k, v] = arrays.map(|a| floats(&a));
    let mut inputs = vec![q, k, v, ints(&block_table), ints(&cache_seqlens)];
    inputs.extend(alibi);
    let (o, lse) = interruptible(py, move || {
        let t = std::time::Instant::now();
        let r = run_cpu(&p, inputs).map_err(|e| match crate::host::kernel_error(e) {
            ApiError::Interrupted => ApiError::Interrupted,
            e => ApiError::Value(format!("kittens.flash_attn_with_kvcache: {e}")),
        })?;
        say(&format!(
            "kittens: paged decode attention on the CPU interpreter in {:.3} s",
            t.elapsed().as_secs_f64()
        ));
        Ok(r)
    })?;
    let bytes = |v: &[f32]| {
        let b: Vec<u8> = v.iter().flat_map(|x| x.to_ne_bytes()).collect();
        PyBytes::new(py, &b)
    };
    Ok((bytes(&o), bytes(&lse)))
}
