//! `kittens._kittens`, the extension module under the Python package `kittens` (python/kittens): the
//! kernels on the caller's own arrays. The Python side reads each array's address, shape, strides, dtype
//! and device (numpy, torch, DLPack) and allocates outputs; this module checks them ([`view`]), runs the
//! kernel on the CPU interpreter ([`host`]) or, for CUDA tensors, prepares and launches it on the caller's
//! stream ([`prepared`]), and
//! turns every failure — panics included — into a Python exception.
//!
//! No GPU library is linked: the CUDA driver and NVRTC are opened at run time by `kittens-runtime`.

mod host;
mod paged;
mod prepared;
mod tile;
mod tile_args;
mod tile_body;
mod tile_builder;
mod tile_decl;
mod tile_expr;
mod tile_program;
mod varlen;
mod view;
mod view_mem;

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::{PyKeyboardInterrupt, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use kittens_kernels::attn::Causal;
use view::{ApiError, Device, View, ViewArgs};

static VERBOSE: AtomicBool = AtomicBool::new(false);

/// The per-kernel entry points below run CPU arrays; CUDA tensors go through the one prepared-call
/// path ([`prepared`], `kittens._dispatch`), which the Python package takes for every CUDA call.
const CUDA_ELSEWHERE: &str =
    "kittens internal error: CUDA arrays go through kittens._dispatch (prepared calls), not this entry";

fn to_py(e: ApiError) -> PyErr {
    match e {
        ApiError::Type(m) => PyTypeError::new_err(m),
        ApiError::Value(m) => PyValueError::new_err(m),
        ApiError::Runtime(m) => PyRuntimeError::new_err(m),
        ApiError::Interrupted => {
            PyKeyboardInterrupt::new_err("kittens: the CPU run was interrupted")
        }
    }
}

/// A caught panic as the RuntimeError it becomes.
fn panic_error(p: Box<dyn std::any::Any + Send>) -> PyErr {
    let msg = p
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into());
    PyRuntimeError::new_err(format!(
        "kittens internal error (a Rust panic, caught): {msg}"
    ))
}

/// Runs `f` without the GIL and with panics caught: a bug becomes a RuntimeError, never an abort.
fn guarded<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T, ApiError> + Send) -> PyResult<T> {
    let r = py.detach(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    match r {
        Ok(v) => v.map_err(to_py),
        Err(p) => Err(panic_error(p)),
    }
}

/// Runs a CPU-interpreter call `f` on a worker thread, without the GIL, while this thread checks
/// Python's signals every 50 ms (`Python::check_signals`, which runs the handlers: Ctrl-C raises
/// KeyboardInterrupt). On an exception the interpreter's cancel flag (`kittens_ir::interp::with_cancel`)
/// is raised, the run stops before its next block, and the exception propagates: an interrupt costs at
/// most one block's time per host thread instead of the whole run.
fn interruptible<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> Result<T, ApiError> + Send,
) -> PyResult<T> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Condvar, Mutex, PoisonError};
    let cancel = Arc::new(AtomicBool::new(false));
    let done = (Mutex::new(false), Condvar::new());
    std::thread::scope(|s| {
        let flag = cancel.clone();
        let done = &done;
        let worker = s.spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                kittens_ir::interp::with_cancel(flag, f)
            }));
            *done.0.lock().unwrap_or_else(PoisonError::into_inner) = true;
            done.1.notify_all();
            r
        });
        loop {
            let finished = py.detach(|| {
                let g = done.0.lock().unwrap_or_else(PoisonError::into_inner);
                let tick = std::time::Duration::from_millis(50);
                let (g, _) = done
                    .1
                    .wait_timeout_while(g, tick, |d| !*d)
                    .unwrap_or_else(PoisonError::into_inner);
                *g
            });
            if finished {
                break;
            }
            if let Err(e) = py.check_signals() {
                cancel.store(true, Ordering::Relaxed);
                let _ = py.detach(|| worker.join());
                return Err(e);
            }
        }
        match py.detach(|| worker.join()) {
            Ok(Ok(v)) => v.map_err(to_py),
            Ok(Err(p)) | Err(p) => Err(panic_error(p)),
        }
    })
}

fn say(msg: &str) {
    if VERBOSE.load(Ordering::Relaxed) {
        eprintln!("{msg}");
    }
}

/// `out = a @ b` for bf16 `a` (M, K) row-major and `b` (K, N) = `w.T` of a row-major (N, K) `w`. CPU
/// arrays run on the interpreter (CUDA tensors go through [`prepared`]).
/// Without `out`, only the checks run (against the output the call would allocate): the Python side
/// calls so before allocating.
#[pyfunction]
fn matmul(py: Python<'_>, a: ViewArgs, b: ViewArgs, out: Option<ViewArgs>) -> PyResult<()> {
    let (a, b) = (
        view::view("a", a).map_err(to_py)?,
        view::view("b", b).map_err(to_py)?,
    );
    let Some(out) = out else {
        let (m, n) = (a.shape.first(), b.shape.get(1));
        let shape = vec![m.copied().unwrap_or(0), n.copied().unwrap_or(0)];
        let out = a.planned("out", shape.clone(), View::row_major(&shape));
        return view::matmul(&a, &b, &out).map(|_| ()).map_err(to_py);
    };
    let out = view::view("out", out).map_err(to_py)?;
    let p = view::matmul(&a, &b, &out).map_err(to_py)?;
    let run = move || match p.device {
        Device::Cpu => {
            let t = std::time::Instant::now();
            // SAFETY: the Python caller holds the arrays alive for the call; shapes checked above.
            unsafe { host::matmul(&p)? };
            say(&format!(
                "kittens: matmul {}x{}x{} on the CPU interpreter in {:.3} s",
                p.m,
                p.n,
                p.k,
                t.elapsed().as_secs_f64()
            ));
            Ok(())
        }
        Device::Cuda(_) => Err(ApiError::Runtime(CUDA_ELSEWHERE.into())),
    };
    match p.device {
        Device::Cpu => interruptible(py, run),
        Device::Cuda(_) => guarded(py, run),
    }
}

/// `out = softmax(q·kᵀ·scale)·v` for bf16 (B, H, N, D) `q`/`out` and (B, H_kv, N_kv, D) `k`/`v` (GQA
/// when H_kv < H), all in (B, H, N, D) or (B, N, H, D) memory order; `causal` masks keys after each
/// query, aligned top-left (`j ≤ i`) or with `bottom_right` (`j ≤ i + N_kv − N`); `lse`, when given,
/// receives the log-sum-exp of every row (f32 (B, H, N)). CPU arrays run on the interpreter; CUDA
/// arrays go through [`prepared`].
#[pyfunction]
#[pyo3(signature = (q, k, v, out, lse, causal, bottom_right, scale, *, softcap=None, window=None, alibi=None))]
#[allow(clippy::too_many_arguments)]
fn attention(
    py: Python<'_>,
    q: ViewArgs,
    k: ViewArgs,
    v: ViewArgs,
    out: Option<ViewArgs>,
    lse: Option<ViewArgs>,
    causal: bool,
    bottom_right: bool,
    scale: Option<f64>,
    softcap: Option<f64>,
    window: Option<(i64, i64)>,
    alibi: Option<Vec<f32>>,
) -> PyResult<()> {
    let opts = attn_options(scale, softcap, window, alibi)?;
    let views = [view::view("q", q), view::view("k", k), view::view("v", v)];
    let [q, k, v] = views.map(|r| r.map_err(to_py));
    let (q, k, v) = (q?, k?, v?);
    if bottom_right && !causal {
        return Err(PyValueError::new_err(
            "causal_align='bottom_right' aligns the causal mask; it needs causal=True",
        ));
    }
    let Some(out) = out else {
        // Only the checks, against an output of q's shape and memory order (what the caller allocates).
        let out = q.planned("out", q.shape.clone(), q.strides.clone());
        return view::attention(&q, &k, &v, &out, None, scale)
            .map(|_| ())
            .map_err(to_py);
    };
    let out = view::view("out", out).map_err(to_py)?;
    let lse = lse
        .map(|l| view::view_f32("lse", l))
        .transpose()
        .map_err(to_py)?;
    let p = view::attention(&q, &k, &v, &out, lse.as_ref(), scale).map_err(to_py)?;
    let causal = match (causal, bottom_right) {
        (false, _) => Causal::No,
        (true, false) => Causal::TopLeft,
        (true, true) => Causal::BottomRight,
    };
    let run = move || match p.device {
        Device::Cpu => {
            let t = std::time::Instant::now();
            // SAFETY: the Python caller holds the arrays alive for the call; shapes checked above.
            unsafe { host::attention(&p, causal, &opts)? };
            say(&format!(
                "kittens: attention B={} H={} H_kv={} N={} N_kv={} D={} causal={causal:?} lse={} on the \
                 CPU interpreter in {:.3} s",
                p.batch,
                p.heads,
                p.heads_kv,
                p.seq,
                p.seq_kv,
                p.dim,
                p.lse.is_some(),
                t.elapsed().as_secs_f64()
            ));
            Ok(())
        }
        Device::Cuda(_) => Err(ApiError::Runtime(CUDA_ELSEWHERE.into())),
    };
    match p.device {
        Device::Cpu => interruptible(py, run),
        Device::Cuda(_) => guarded(py, run),
    }
}

/// `out[0] = LayerNorm(residual + dropout(x))·weight + bias`, `out[1] = residual + dropout(x)` for
/// bf16 `x`, `residual` (…, D), `weight`, `bias` (D,), `out` (2, …, D); dropout with probability `p`
/// from the Philox stream keyed by `seed` and `offset`. CPU arrays run on the interpreter (CUDA tensors
/// go through [`prepared`]).
#[pyfunction]
#[pyo3(signature = (x, residual, weight, bias, out, p, seed, offset, eps))]
#[allow(clippy::too_many_arguments)]
fn layernorm(
    py: Python<'_>,
    x: ViewArgs,
    residual: ViewArgs,
    weight: ViewArgs,
    bias: ViewArgs,
    out: Option<ViewArgs>,
    p: f64,
    seed: u64,
    offset: u64,
    eps: f64,
) -> PyResult<()> {
    let views = [
        view::view("x", x),
        view::view("residual", residual),
        view::view("weight", weight),
        view::view("bias", bias),
    ];
    let [x, r, w, b] = views.map(|v| v.map_err(to_py));
    let (x, r, w, b) = (x?, r?, w?, b?);
    if !(0.0..1.0).contains(&p) {
        return Err(PyValueError::new_err(format!(
            "dropout p = {p} must be in [0, 1)"
        )));
    }
    if !(eps.is_finite() && eps > 0.0 && eps <= f64::from(f32::MAX)) {
        return Err(PyValueError::new_err(format!(
            "eps = {eps} must be a positive finite float32"
        )));
    }
    let (p, eps) = (p as f32, eps as f32);
    let o = match out {
        Some(o) => view::view("out", o).map_err(to_py)?,
        None => {
            let mut shape = vec![2];
            shape.extend_from_slice(&x.shape);
            let o = x.planned("out", shape.clone(), View::row_major(&shape));
            // Only the checks, before the caller allocates the output.
            return view_mem::layernorm(&x, &r, &w, &b, &o)
                .map(|_| ())
                .map_err(to_py);
        }
    };
    let call = view_mem::layernorm(&x, &r, &w, &b, &o).map_err(to_py)?;
    let norm = kittens_kernels::rows::NormShape {
        rows: call.rows,
        dim: call.dim,
        p,
        dropout_seed: seed,
        offset,
    };
    if call.rows == 0 {
        return Ok(());
    }
    let run = move || match call.device {
        Device::Cpu => {
            let t = std::time::Instant::now();
            // SAFETY: the Python caller holds the arrays alive for the call; shapes checked above.
            unsafe { host::layernorm(&call, &norm, eps)? };
            say(&format!(
                "kittens: layernorm rows={} D={} p={p} on the CPU interpreter in {:.3} s",
                call.rows,
                call.dim,
                t.elapsed().as_secs_f64()
            ));
            Ok(())
        }
        Device::Cuda(_) => Err(ApiError::Runtime(CUDA_ELSEWHERE.into())),
    };
    match call.device {
        Device::Cpu => interruptible(py, run),
        Device::Cuda(_) => guarded(py, run),
    }
}

/// Rotary embedding of bf16 `q` (B, H, N, D) (dense, or a transposed (B, N, H, D) buffer) with `cos`,
/// `sin` (N, D/2) into `out` (q's shape and order; `out` may be `q`): half rotation, or the interleaved
/// (GPT-J) pairs. CPU arrays run on the interpreter (CUDA tensors go through [`prepared`]).
#[pyfunction]
fn rotary(
    py: Python<'_>,
    q: ViewArgs,
    cos: Option<ViewArgs>,
    sin: Option<ViewArgs>,
    out: Option<ViewArgs>,
    interleaved: bool,
) -> PyResult<()> {
    let q = view::view("q", q).map_err(to_py)?;
    // Tables and output the caller has not made yet are checked as what it would make: (N, D/2)
    // contiguous tables, an output of q's shape and memory order.
    let table = |name: &'static str| {
        let shape = vec![
            q.shape.get(2).copied().unwrap_or(0),
            q.shape.get(3).copied().unwrap_or(0) / 2,
        ];
        q.planned(name, shape.clone(), View::row_major(&shape))
    };
    let given = |name: &'static str, v: Option<ViewArgs>| match v {
        Some(v) => view::view(name, v).map_err(to_py).map(Some),
        None => Ok(None),
    };
    let (c, s, o) = (given("cos", cos)?, given("sin", sin)?, given("out", out)?);
    let check_only = c.is_none() || s.is_none() || o.is_none();
    let c = c.unwrap_or_else(|| table("cos"));
    let s = s.unwrap_or_else(|| table("sin"));
    let o = o.unwrap_or_else(|| q.planned("out", q.shape.clone(), q.strides.clone()));
    let call = view_mem::rotary(&q, &c, &s, &o).map_err(to_py)?;
    if check_only {
        return Ok(());
    }
    if call.batch * call.heads * call.seq == 0 {
        return Ok(());
    }
    let run = move || match call.device {
        Device::Cpu => {
            // SAFETY: the Python caller holds the arrays alive for the call; shapes checked above.
            unsafe { host::rotary(&call, interleaved) }
        }
        Device::Cuda(_) => Err(ApiError::Runtime(CUDA_ELSEWHERE.into())),
    };
    match call.device {
        Device::Cpu => interruptible(py, run),
        Device::Cuda(_) => guarded(py, run),
    }
}

/// The attention's options from the Python arguments (`kittens_kernels::attn::score`), each checked
/// and refused naming it: `scale` and `softcap` finite and positive, `window` sides -1 or more,
/// ALiBi's slopes (`[batch, heads]` row-major) finite.
fn attn_options(
    scale: Option<f64>,
    softcap: Option<f64>,
    window: Option<(i64, i64)>,
    alibi: Option<Vec<f32>>,
) -> PyResult<kittens_kernels::attn::score::AttnOptions> {
    use kittens_kernels::attn::score::{AttnOptions, Logits, Window};
    let value = |e: kittens_kernels::KernelError| PyValueError::new_err(e.to_string());
    let logits = Logits {
        scale: scale.map(|s| s as f32),
        softcap: softcap.map(|c| c as f32),
    };
    logits.check().map_err(value)?;
    let window = window
        .map(|(l, r)| Window::new(l, r))
        .transpose()
        .map_err(value)?;
    let opts = AttnOptions {
        logits,
        window,
        alibi,
    };
    opts.check().map_err(value)?;
    Ok(opts)
}

/// The attention backward on the CPU interpreter: `arrays` are f32 q, k, v, o, do, lse in dense
/// (B, H, N, D) order (bytes); `dlse`, the log-sum-exp's gradient (f32 (B, H, N)), folded into the
/// one run's preprocessing when given.
#[pyfunction]
#[pyo3(signature = (arrays, shape, causal, bottom_right=false, scale=None, softcap=None, window=None, dlse=None, alibi=None))]
#[allow(clippy::too_many_arguments)]
fn attention_backward_cpu<'py>(
    py: Python<'py>,
    arrays: [Vec<u8>; 6],
    shape: (usize, usize, usize, usize, usize, usize),
    causal: bool,
    bottom_right: bool,
    scale: Option<f64>,
    softcap: Option<f64>,
    window: Option<(i64, i64)>,
    dlse: Option<Vec<u8>>,
    alibi: Option<Vec<f32>>,
) -> PyResult<(
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
)> {
    use kittens_kernels::attn::{AttnLayout, BwdShape, Causal};
    let (batch, heads, heads_kv, seq_q, seq_kv, dim) = shape;
    let sh = BwdShape {
        batch,
        heads,
        heads_kv,
        seq_q,
        seq_kv,
        dim,
        layout: AttnLayout::Bhsd,
    };
    let floats = |b: &[u8]| -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let [q, k, v, o, d_o, lse] = arrays.map(|a| floats(&a));
    let dlse = dlse.map(|a| floats(&a));
    let opts = attn_options(scale, softcap, window, alibi)?;
    let causal = match (causal, bottom_right) {
        (false, _) => Causal::No,
        (true, false) => Causal::TopLeft,
        (true, true) => Causal::BottomRight,
    };
    let grads = interruptible(py, move || {
        let t = std::time::Instant::now();
        let tensors = kittens_kernels::exec::BwdTensors::new([&q, &k, &v, &o, &d_o, &lse]);
        let g =
            kittens_kernels::exec::attention_bwd_dlse(tensors, dlse.as_deref(), &sh, causal, &opts)
                .map_err(|e| match host::kernel_error(e) {
                    ApiError::Interrupted => ApiError::Interrupted,
                    e => ApiError::Value(format!("kittens._attention_backward: {e}")),
                })?;
        say(&format!(
            "kittens: attention backward {sh:?} on the CPU interpreter in {:.3} s",
            t.elapsed().as_secs_f64()
        ));
        Ok(g)
    })?;
    let bytes = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_ne_bytes()).collect() };
    let [dq, dk, dv] = grads;
    Ok((
        PyBytes::new(py, &bytes(&dq)),
        PyBytes::new(py, &bytes(&dk)),
        PyBytes::new(py, &bytes(&dv)),
    ))
}

/// Turns the reports of compile times and CPU run times on stderr on or off.
#[pyfunction]
fn set_verbose(on: bool) {
    VERBOSE.store(on, Ordering::Relaxed);
}

#[pyfunction]
fn verbose() -> bool {
    VERBOSE.load(Ordering::Relaxed)
}

/// The training text shipped in the module: the repository's README, docs and Rust sources as they were
/// when the wheel was built.
#[pyfunction]
fn corpus(py: Python<'_>) -> Bound<'_, PyBytes> {
    PyBytes::new(
        py,
        include_str!(concat!(env!("OUT_DIR"), "/corpus.txt")).as_bytes(),
    )
}

/// The commit the extension was built from and whether the tree was dirty then (`None`: unknown), as
/// recorded at build time (kittens_runtime::build_info): benchmark records name the measured code.
#[pyfunction]
fn build_commit() -> (&'static str, Option<bool>) {
    let b = kittens_runtime::build_info::BUILD;
    (b.commit, b.dirty)
}

#[pymodule]
fn _kittens(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(prepared::prepare, m)?)?;
    m.add_function(wrap_pyfunction!(tile_program::registry_program, m)?)?;
    m.add_class::<prepared::Handle>()?;
    tile::register(m)?;
    m.add_function(wrap_pyfunction!(matmul, m)?)?;
    m.add_function(wrap_pyfunction!(attention, m)?)?;
    m.add_function(wrap_pyfunction!(attention_backward_cpu, m)?)?;
    m.add_function(wrap_pyfunction!(varlen::attention_varlen_cpu, m)?)?;
    m.add_function(wrap_pyfunction!(paged::attention_paged_cpu, m)?)?;
    m.add_function(wrap_pyfunction!(varlen::attention_varlen_backward_cpu, m)?)?;
    m.add_function(wrap_pyfunction!(layernorm, m)?)?;
    m.add_function(wrap_pyfunction!(rotary, m)?)?;
    m.add_function(wrap_pyfunction!(set_verbose, m)?)?;
    m.add_function(wrap_pyfunction!(verbose, m)?)?;
    m.add_function(wrap_pyfunction!(corpus, m)?)?;
    m.add_function(wrap_pyfunction!(build_commit, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
