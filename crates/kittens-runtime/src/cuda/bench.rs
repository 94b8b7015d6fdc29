//! The GEMM benchmark behind `kittens bench gemm`: the Hopper `gemm_bf16` against cuBLAS in the same
//! run. Correctness: our C against cuBLAS's C over every element, and both against an f64 dot product at
//! a few hundred random entries, judged by the test rule relative to cuBLAS's own error
//! (`kittens_kernels::reference::check_rule` with its spot-check floor); the output is poisoned with NaN
//! first, so unwritten elements fail. Each shape is one row: a shape that fails (or cannot run: too
//! large for the memory there is, a shape the kernel refuses) is reported in its row and the run goes
//! on. Host and device memory are checked before anything is allocated.
//! Timing (bench/NOTES.md, "Method"): CUDA events around each launch, warm-up first, the median of many
//! runs, ours and cuBLAS interleaved launch by launch, rotating among enough input copies that their
//! total exceeds the L2 several times over, so the L2 cannot serve the inputs.

use std::rc::Rc;

use kittens_kernels::reference::{check_rule, SPOT_RULE_FLOOR};
use serde::Serialize;

use super::cublas::Cublas;
use super::driver::{Device, DeviceBuffer, Event, Stream, Swizzle, TensorMap};
use super::gemm_kernel::GemmKernel;
use super::limits::{
    check_memory, gemm_abt_dims, gemm_memory_need, host_mem_available, rotation_copies,
};
use super::{CudaCompileReport, CudaError};

/// What to measure.
#[derive(Clone, Debug)]
pub struct GemmBenchOptions {
    /// Square problem sizes M = N = K.
    pub sizes: Vec<usize>,
    pub warmup: usize,
    pub iters: usize,
    pub spot_checks: usize,
    pub seed: u64,
    /// Input copies are added until A and B together span at least this many L2s.
    pub l2_multiple: u64,
    /// Shapes (M, N, K) checked for correctness only, not timed: partial tiles at every edge.
    pub checks: Vec<(usize, usize, usize)>,
    pub timing: Timing,
}

/// How the two implementations' launches are ordered while timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Timing {
    /// Ours, cuBLAS, ours, cuBLAS, …: both see the same clocks and temperature, but each launch runs
    /// right after the other's, so the power one draws shapes the clock the other gets.
    Interleaved,
    /// All of ours (warm-up, then the timed launches), then all of cuBLAS: each in its own steady state.
    Blocked,
}

impl Default for GemmBenchOptions {
    fn default() -> Self {
        GemmBenchOptions {
            sizes: vec![2048, 4096, 8192],
            warmup: 10,
            iters: 100,
            spot_checks: 256,
            seed: 0x006b_6974_7465_6e73,
            l2_multiple: 4,
            checks: vec![(1000, 1032, 520), (128, 256, 64), (4160, 8184, 1032)],
            timing: Timing::Interleaved,
        }
    }
}

/// How one row ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RowStatus {
    /// Checked (and timed, for a timed row) and correct.
    Ok,
    /// Ran, but the output failed the correctness check.
    Failed,
    /// Did not run to the end: the error says why (the other figures are NaN, null in JSON).
    Error,
}

/// One problem size's results.
#[derive(Clone, Debug, Serialize)]
pub struct GemmBenchRow {
    pub status: RowStatus,
    /// Why the row could not run (status `error`).
    pub error: Option<String>,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub ours_ms: f64,
    pub cublas_ms: f64,
    pub ours_tflops: f64,
    pub cublas_tflops: f64,
    /// ours / cuBLAS throughput, measured in the same run.
    pub ratio: f64,
    /// ‖ours − cuBLAS‖_F / ‖cuBLAS‖_F over all of C.
    pub rel_err_vs_cublas: f64,
    /// max |ours − cuBLAS| / max |cuBLAS|.
    pub max_err_vs_cublas: f64,
    /// max |x − ref| / rms(ref) over the spot-checked entries, ref an f64 dot product.
    pub spot_err_ours: f64,
    pub spot_err_cublas: f64,
    /// Elements of our C still holding the NaN poison (never written) or otherwise not finite.
    pub non_finite: usize,
    pub input_copies: usize,
    pub passed: bool,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct GemmBenchReport {
    pub device: String,
    pub compute_capability: (i32, i32),
    pub multiprocessors: u32,
    pub l2_bytes: u64,
    pub driver_version: i32,
    pub cublas: String,
    pub kernel: String,
    pub config: String,
    /// Blocks (clusters, for a cluster kernel) of the persistent grid resident at once.
    pub resident: u32,
    pub compile: CudaCompileReport,
    pub warmup: usize,
    pub iters: usize,
    pub timing: Timing,
    pub rows: Vec<GemmBenchRow>,
    /// Correctness-only shapes (timings zero).
    pub checks: Vec<GemmBenchRow>,
}

/// Our C against cuBLAS's over all elements: two correct bf16 results differ by at most a rounding step
/// (2⁻⁸ relative) on some elements, far below this.
const TOLERANCE: f64 = 1e-2;

/// f32 → bf16 bits, round to nearest even (NaN stays NaN).
pub fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return 0x7fc0;
    }
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// Uniform bf16 values in [-1, 1) from a xorshift64* stream, filled on all cores.
pub fn random_bf16(len: usize, seed: u64) -> Vec<u16> {
    let mut out = vec![0u16; len];
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let chunk = len.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (i, part) in out.chunks_mut(chunk).enumerate() {
            s.spawn(move || {
                let mut x = seed ^ (0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1)) | 1;
                for v in part {
                    x ^= x >> 12;
                    x ^= x << 25;
                    x ^= x >> 27;
                    let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
                    let u = (r >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
                    *v = f32_to_bf16(2.0 * u - 1.0);
                }
            });
        }
    });
    out
}

pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// Compiles `kernel` (a lowered `gemm_bf16`) for the device, runs every size, returns the report.
pub fn run_gemm_bench(
    kernel: &kittens_codegen::Lowered,
    opts: &GemmBenchOptions,
) -> Result<GemmBenchReport, CudaError> {
    let dev = Device::open(0)?;
    if dev.compute_capability != (9, 0) {
        return Err(CudaError::Invalid(format!(
            "{} is compute capability {:?}; the Hopper kernel needs 9.0 (sm_90a)",
            dev.name, dev.compute_capability
        )));
    }
    let kernel = GemmKernel::prepare(&dev, kernel)?;
    eprintln!(
        "  {}: persistent grid of at most {} blocks or clusters",
        kernel.name, kernel.resident
    );
    let stream = Stream::new()?;
    let cublas = Cublas::new(&stream)?;
    let run = Runner {
        dev: &dev,
        kernel: &kernel,
        cublas: &cublas,
        stream: &stream,
        opts,
    };
    let squares = opts.sizes.iter().map(|&s| (s, s, s));
    let rows = collect_rows(squares, |i, shape| {
        run.attempt(shape, opts.seed.wrapping_add(i as u64), true)
    });
    for row in &rows {
        eprintln!(
            "  {:>6}: ours {:7.1} TFLOP/s, cuBLAS {:7.1} TFLOP/s, ratio {:.3}, err vs cuBLAS {:.2e}, {}",
            row.m,
            row.ours_tflops,
            row.cublas_tflops,
            row.ratio,
            row.rel_err_vs_cublas,
            row.verdict()
        );
    }
    let checks = collect_rows(opts.checks.iter().copied(), |i, shape| {
        run.attempt(shape, opts.seed ^ (i as u64 + 77), false)
    });
    for row in &checks {
        eprintln!(
            "  check {}x{}x{}: err vs cuBLAS {:.2e}, vs f64 {:.2e} (cuBLAS {:.2e}), {}",
            row.m,
            row.n,
            row.k,
            row.rel_err_vs_cublas,
            row.spot_err_ours,
            row.spot_err_cublas,
            row.verdict()
        );
    }
    Ok(GemmBenchReport {
        device: dev.name.clone(),
        compute_capability: dev.compute_capability,
        multiprocessors: dev.multiprocessors,
        l2_bytes: dev.l2_bytes,
        driver_version: dev.driver_version,
        cublas: cublas.library.clone(),
        kernel: kernel.name.clone(),
        config: kernel.config.clone(),
        resident: kernel.resident,
        compile: kernel.compile.clone(),
        warmup: opts.warmup,
        iters: opts.iters,
        timing: opts.timing,
        rows,
        checks,
    })
}

/// The devices and options every row of a run shares.
struct Runner<'a> {
    dev: &'a Rc<Device>,
    kernel: &'a GemmKernel,
    cublas: &'a Cublas,
    stream: &'a Stream,
    opts: &'a GemmBenchOptions,
}

/// Runs `one` on every shape in turn; a shape whose run fails becomes a row that says why (status
/// `error`), and the next shape runs.
pub fn collect_rows(
    shapes: impl IntoIterator<Item = (usize, usize, usize)>,
    mut one: impl FnMut(usize, (usize, usize, usize)) -> Result<GemmBenchRow, CudaError>,
) -> Vec<GemmBenchRow> {
    shapes
        .into_iter()
        .enumerate()
        .map(|(i, shape)| one(i, shape).unwrap_or_else(|e| GemmBenchRow::error(shape, &e)))
        .collect()
}

impl Runner<'_> {
    /// One row: the shape checked against the kernel and the memory there is, then run.
    fn attempt(
        &self,
        shape: (usize, usize, usize),
        seed: u64,
        timed: bool,
    ) -> Result<GemmBenchRow, CudaError> {
        let (m, n, k) = shape;
        self.kernel.check_shape(m, n, k)?;
        let copies = self.copies_that_fit(shape, timed)?;
        bench_shape(
            self.dev,
            self.kernel,
            self.cublas,
            self.stream,
            self.opts,
            shape,
            seed,
            copies,
        )
    }

    /// The input copies a row uses (several for a timed row, for the L2 rotation), after checking that
    /// the row's host and device memory are there.
    fn copies_that_fit(&self, shape: (usize, usize, usize), timed: bool) -> Result<u64, CudaError> {
        let copies = if timed {
            rotation_copies(shape, self.dev.l2_bytes, self.opts.l2_multiple)?
        } else {
            1
        };
        let need = gemm_memory_need(shape, copies)?;
        let host = host_mem_available().ok_or_else(|| {
            CudaError::Invalid("cannot read MemAvailable from /proc/meminfo".into())
        })?;
        let (free, _) = self.dev.mem_info()?;
        let (m, n, k) = shape;
        let what = format!("GEMM {m}x{n}x{k} with {copies} input copies");
        check_memory(&what, need, host, free)?;
        Ok(copies)
    }
}

/// Inputs for one size: `copies` identical sets of A and B (different addresses for the L2 rotation).
struct Inputs {
    a_host: Vec<u16>,
    b_host: Vec<u16>,
    a: Vec<DeviceBuffer>,
    b: Vec<DeviceBuffer>,
}

/// Tensor maps of A and B for each input copy; they borrow the buffers they point at.
fn input_maps<'a>(
    inp: &'a Inputs,
    kernel: &GemmKernel,
    (m, n, k): (usize, usize, usize),
) -> Result<Vec<(TensorMap<'a>, TensorMap<'a>)>, CudaError> {
    let ((ar, ac), (br, bc)) = (kernel.a_box, kernel.b_box);
    inp.a
        .iter()
        .zip(&inp.b)
        .map(|(da, db)| {
            Ok((
                TensorMap::bf16_2d(da, m as u64, k as u64, ar, ac, Swizzle::B128)?,
                TensorMap::bf16_2d(db, n as u64, k as u64, br, bc, Swizzle::B128)?,
            ))
        })
        .collect()
}

/// Random inputs on the host and `copies` copies on the device. The memory was checked by the caller
/// ([`Runner::copies_that_fit`]), so the sizes below do not overflow.
fn make_inputs(
    dev: &Rc<Device>,
    (m, n, k): (usize, usize, usize),
    seed: u64,
    copies: u64,
) -> Result<Inputs, CudaError> {
    let a_host = random_bf16(m * k, seed);
    let b_host = random_bf16(n * k, seed ^ 0xA5A5_A5A5);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..copies {
        let (mut da, mut db) = (dev.alloc(m * k * 2)?, dev.alloc(n * k * 2)?);
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

/// Checks one shape and, with more than one input copy (a timed row), measures it.
#[allow(clippy::too_many_arguments)]
fn bench_shape(
    dev: &Rc<Device>,
    kernel: &GemmKernel,
    cublas: &Cublas,
    stream: &Stream,
    opts: &GemmBenchOptions,
    (m, n, k): (usize, usize, usize),
    seed: u64,
    copies: u64,
) -> Result<GemmBenchRow, CudaError> {
    let timed = copies > 1;
    let inp = make_inputs(dev, (m, n, k), seed, copies)?;
    let maps = input_maps(&inp, kernel, (m, n, k))?;
    let (mut c_ours, mut c_ref) = (dev.alloc(m * n * 2)?, dev.alloc(m * n * 2)?);
    // The kernel's launcher takes the sizes as 32-bit integers: check them, and the buffers, first.
    gemm_abt_dims(
        (m, n, k),
        inp.a[0].bytes(),
        inp.b[0].bytes(),
        c_ours.bytes(),
    )?;

    // Correctness on copy 0, outputs poisoned with NaN first.
    c_ours.fill_u16(0x7fc0)?;
    c_ref.fill_u16(0x7fc0)?;
    dev.synchronize()?;
    // C's map writes 64-row × 64-column boxes (one consumer's rows, 128 swizzled bytes wide).
    let c_map = TensorMap::bf16_2d(&c_ours, m as u64, n as u64, 64, 64, Swizzle::B128)?;
    kernel.launch(
        stream,
        &maps[0],
        &inp.a[0],
        &inp.b[0],
        &(c_map, &c_ours),
        m,
        n,
        k,
    )?;
    cublas.gemm_bf16_abt(&inp.a[0], &inp.b[0], &mut c_ref, m, n, k)?;
    stream.synchronize()?;
    let (mut ours, mut reference) = (vec![0u16; m * n], vec![0u16; m * n]);
    c_ours.download(&mut ours)?;
    c_ref.download(&mut reference)?;
    let cmp = compare(&ours, &reference);
    if cmp.non_finite > 0 || cmp.rel_frobenius >= TOLERANCE {
        report_mismatches(&ours, &reference, n);
    }
    let (spot_err_ours, spot_err_cublas) =
        spot_check(&inp, &ours, &reference, (m, n, k), opts.spot_checks, seed);

    // Timing with events, rotating input copies.
    let copies = inp.a.len();
    let (ours_ms, cublas_ms) = if timed {
        let mut ours = |i: usize| {
            let s = i % copies;
            kernel.launch(
                stream,
                &maps[s],
                &inp.a[s],
                &inp.b[s],
                &(c_map, &c_ours),
                m,
                n,
                k,
            )
        };
        let mut theirs = |i: usize| {
            cublas.gemm_bf16_abt(&inp.a[i % copies], &inp.b[i % copies], &mut c_ref, m, n, k)
        };
        let [a, b] = time_launches(
            stream,
            opts.warmup,
            opts.iters,
            opts.timing,
            [&mut ours, &mut theirs],
        )?;
        (a, b)
    } else {
        (f64::NAN, f64::NAN)
    };
    let flop = 2.0 * m as f64 * n as f64 * k as f64;
    let (ours_tflops, cublas_tflops) = (flop / ours_ms * 1e-9, flop / cublas_ms * 1e-9);
    let passed = cmp.non_finite == 0
        && cmp.rel_frobenius < TOLERANCE
        && check_rule(spot_err_ours, spot_err_cublas, SPOT_RULE_FLOOR).passed;
    Ok(GemmBenchRow {
        status: if passed {
            RowStatus::Ok
        } else {
            RowStatus::Failed
        },
        error: None,
        m,
        n,
        k,
        ours_ms,
        cublas_ms,
        ours_tflops,
        cublas_tflops,
        ratio: ours_tflops / cublas_tflops,
        rel_err_vs_cublas: cmp.rel_frobenius,
        max_err_vs_cublas: cmp.max_rel,
        spot_err_ours,
        spot_err_cublas,
        non_finite: cmp.non_finite,
        input_copies: copies,
        passed,
    })
}

impl GemmBenchRow {
    /// A row that could not run: `error` says why; every figure is NaN.
    pub fn error((m, n, k): (usize, usize, usize), error: &CudaError) -> GemmBenchRow {
        GemmBenchRow {
            status: RowStatus::Error,
            error: Some(error.to_string()),
            m,
            n,
            k,
            ours_ms: f64::NAN,
            cublas_ms: f64::NAN,
            ours_tflops: f64::NAN,
            cublas_tflops: f64::NAN,
            ratio: f64::NAN,
            rel_err_vs_cublas: f64::NAN,
            max_err_vs_cublas: f64::NAN,
            spot_err_ours: f64::NAN,
            spot_err_cublas: f64::NAN,
            non_finite: 0,
            input_copies: 0,
            passed: false,
        }
    }

    /// "ok", "FAILED", or "ERROR: why".
    pub fn verdict(&self) -> String {
        match (self.status, &self.error) {
            (RowStatus::Ok, _) => "ok".into(),
            (RowStatus::Failed, _) => "FAILED".into(),
            (RowStatus::Error, e) => format!("ERROR: {}", e.as_deref().unwrap_or("unknown")),
        }
    }
}

/// One launch of an implementation on input copy `i % copies`.
pub(crate) type Launch<'a> = &'a mut dyn FnMut(usize) -> Result<(), CudaError>;

/// Median milliseconds per launch of each implementation, from events recorded around every launch.
pub(crate) fn time_launches<const N: usize>(
    stream: &Stream,
    warmup: usize,
    iters: usize,
    timing: Timing,
    mut fs: [Launch<'_>; N],
) -> Result<[f64; N], CudaError> {
    let events: Vec<[Event; 2]> = (0..N * iters)
        .map(|_| Ok([Event::new()?, Event::new()?]))
        .collect::<Result<_, CudaError>>()?;
    // Launch `i` of implementation `w`, timed once past the warm-up.
    let one = |fs: &mut [Launch<'_>; N], w: usize, i: usize| -> Result<(), CudaError> {
        let ev = i.checked_sub(warmup).map(|j| &events[w * iters + j]);
        if let Some(e) = ev {
            e[0].record(stream)?;
        }
        fs[w](i)?;
        if let Some(e) = ev {
            e[1].record(stream)?;
        }
        Ok(())
    };
    match timing {
        Timing::Interleaved => {
            for i in 0..warmup + iters {
                for w in 0..N {
                    one(&mut fs, w, i)?;
                }
            }
        }
        Timing::Blocked => {
            for w in 0..N {
                for i in 0..warmup + iters {
                    one(&mut fs, w, i)?;
                }
            }
        }
    }
    stream.synchronize()?;
    let mut out = [0f64; N];
    for (w, o) in out.iter_mut().enumerate() {
        let mut t = events[w * iters..(w + 1) * iters]
            .iter()
            .map(|e| e[0].elapsed_ms(&e[1]).map(f64::from))
            .collect::<Result<Vec<_>, _>>()?;
        *o = median(&mut t);
    }
    Ok(out)
}

/// Elementwise comparison of two bf16 matrices.
pub struct Comparison {
    pub rel_frobenius: f64,
    pub max_rel: f64,
    pub non_finite: usize,
}

pub fn compare(ours: &[u16], reference: &[u16]) -> Comparison {
    let (mut diff2, mut ref2, mut max_diff, mut max_ref, mut non_finite) =
        (0f64, 0f64, 0f64, 0f64, 0usize);
    for (&o, &r) in ours.iter().zip(reference) {
        let (o, r) = (bf16_to_f32(o) as f64, bf16_to_f32(r) as f64);
        if !o.is_finite() {
            non_finite += 1;
            continue;
        }
        let d = (o - r).abs();
        diff2 += d * d;
        ref2 += r * r;
        max_diff = max_diff.max(d);
        max_ref = max_ref.max(r.abs());
    }
    let rel = if ref2 > 0.0 {
        (diff2 / ref2).sqrt()
    } else {
        f64::INFINITY
    };
    let max_rel = if max_ref > 0.0 {
        max_diff / max_ref
    } else {
        f64::INFINITY
    };
    Comparison {
        rel_frobenius: if non_finite > 0 { f64::NAN } else { rel },
        max_rel,
        non_finite,
    }
}

/// Prints the first few elements where ours and cuBLAS disagree, with their coordinates, for debugging.
fn report_mismatches(ours: &[u16], reference: &[u16], n: usize) {
    let bad = ours
        .iter()
        .zip(reference)
        .enumerate()
        .filter(|(_, (&o, &r))| {
            let (o, r) = (bf16_to_f32(o), bf16_to_f32(r));
            !o.is_finite() || (o - r).abs() > 0.05 * r.abs().max(1.0)
        });
    let total = bad.clone().count();
    eprintln!(
        "  {total} of {} elements disagree with cuBLAS; first ones (row, col): ours vs cuBLAS",
        ours.len()
    );
    for (i, (&o, &r)) in bad.take(12) {
        eprintln!(
            "    ({}, {}): {} vs {}",
            i / n,
            i % n,
            bf16_to_f32(o),
            bf16_to_f32(r)
        );
    }
}

/// f64 dot products at `count` random entries; returns (ours, cuBLAS) errors as max|x − ref| / rms(ref).
fn spot_check(
    inp: &Inputs,
    ours: &[u16],
    reference: &[u16],
    (m, n, k): (usize, usize, usize),
    count: usize,
    seed: u64,
) -> (f64, f64) {
    let mut x = seed | 1;
    let mut next = |bound: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % bound as u64) as usize
    };
    let (mut e_ours, mut e_ref, mut sum2) = (0f64, 0f64, 0f64);
    for _ in 0..count {
        let (i, j) = (next(m), next(n));
        let exact: f64 = (0..k)
            .map(|p| {
                bf16_to_f32(inp.a_host[i * k + p]) as f64
                    * bf16_to_f32(inp.b_host[j * k + p]) as f64
            })
            .sum();
        sum2 += exact * exact;
        let o = bf16_to_f32(ours[i * n + j]) as f64;
        let r = bf16_to_f32(reference[i * n + j]) as f64;
        e_ours = if o.is_finite() {
            e_ours.max((o - exact).abs())
        } else {
            f64::INFINITY
        };
        e_ref = e_ref.max((r - exact).abs());
    }
    let rms = (sum2 / count.max(1) as f64).sqrt().max(f64::MIN_POSITIVE);
    (e_ours / rms, e_ref / rms)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row that cannot run carries its error and fails; its figures are null in JSON.
    #[test]
    fn an_error_row_reports_why_and_fails() {
        let e = CudaError::Invalid("3000x1000x777: N and K must be positive multiples of 8".into());
        let row = GemmBenchRow::error((3000, 1000, 777), &e);
        assert!(!row.passed && row.status == RowStatus::Error);
        assert!(
            row.verdict().contains("multiples of 8"),
            "{}",
            row.verdict()
        );
        let json = serde_json::to_value(&row).unwrap();
        assert_eq!(json["status"], "error");
        assert!(json["error"].as_str().unwrap().contains("777"));
        assert!(json["ours_tflops"].is_null() && json["spot_err_ours"].is_null());
    }

    /// One shape that cannot run (3000x1000x777 once aborted the whole run) costs its own row only.
    #[test]
    fn a_bad_shape_does_not_stop_the_run() {
        let shapes = [(1000, 1032, 520), (3000, 1000, 777), (128, 256, 64)];
        let mut ran = Vec::new();
        let rows = collect_rows(shapes, |i, (m, n, k)| {
            ran.push(i);
            if k % 8 != 0 {
                return Err(CudaError::Invalid(format!(
                    "{m}x{n}x{k}: K must be a multiple of 8"
                )));
            }
            let mut row = GemmBenchRow::error((m, n, k), &CudaError::Invalid(String::new()));
            (row.status, row.error, row.passed) = (RowStatus::Ok, None, true);
            Ok(row)
        });
        assert_eq!(ran, [0, 1, 2], "every shape ran");
        let got: Vec<_> = rows.iter().map(|r| (r.m, r.n, r.k, r.status)).collect();
        assert_eq!(
            got,
            [
                (1000, 1032, 520, RowStatus::Ok),
                (3000, 1000, 777, RowStatus::Error),
                (128, 256, 64, RowStatus::Ok)
            ]
        );
        assert!(rows[1].verdict().contains("multiple of 8"));
    }

    #[test]
    fn bf16_round_trip_and_rounding() {
        for x in [0.0f32, 1.0, -2.5, 3.140625, 1e-3, -65504.0] {
            let back = bf16_to_f32(f32_to_bf16(x));
            assert!((back - x).abs() <= x.abs() * 2f32.powi(-8), "{x} -> {back}");
        }
        // 1 + 2^-8 is halfway between two bf16 values: ties go to the even one (1.0).
        assert_eq!(f32_to_bf16(1.0 + 2f32.powi(-8)), f32_to_bf16(1.0));
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
    }

    #[test]
    fn random_inputs_are_uniform_in_range() {
        let v = random_bf16(100_000, 7);
        let f: Vec<f64> = v.iter().map(|&h| bf16_to_f32(h) as f64).collect();
        assert!(f.iter().all(|x| (-1.0..=1.0).contains(x)));
        let mean = f.iter().sum::<f64>() / f.len() as f64;
        let var = f.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / f.len() as f64;
        assert!(
            mean.abs() < 0.01 && (var - 1.0 / 3.0).abs() < 0.01,
            "mean {mean} var {var}"
        );
    }

    #[test]
    fn compare_flags_poison_and_measures_error() {
        let a: Vec<u16> = [1.0f32, -2.0, 4.0]
            .iter()
            .map(|&x| f32_to_bf16(x))
            .collect();
        let mut b = a.clone();
        assert_eq!(compare(&b, &a).rel_frobenius, 0.0);
        b[1] = f32_to_bf16(-2.5);
        let c = compare(&b, &a);
        let expect = (0.25f64 / 21.0).sqrt();
        assert!((c.rel_frobenius - expect).abs() < 1e-12);
        b[2] = 0x7fc0;
        assert_eq!(compare(&b, &a).non_finite, 1);
    }
}
